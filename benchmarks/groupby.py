"""DP count and DP sum per group: dpkit on DuckDB and Spark against non-private DuckDB.

Generates (seeded) N rows: user_id with about N/5 distinct users having 1-9 rows each, a public
group key with 100 values and a value uniform on [0, 100]. Task: DP count and DP sum per group,
at most 10 rows per user, values clamped to [0, 100], ε = 1. Prints one table from one run,
with wall time and peak resident memory (RSS high-water mark of this process and its children).

    python benchmarks/groupby.py --rows 10000000            # DuckDB, non-private DuckDB
    python benchmarks/groupby.py --rows 1000000 --spark     # + Spark (local)
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa


def generate(rows: int, seed: int = 20240601) -> pa.Table:
    """user ids with 1-9 rows each (mean 5), 100 group keys, values uniform on [0, 100]."""
    rng = np.random.default_rng(seed)
    per_user = rng.integers(1, 10, size=rows // 4 + 10)
    user_id = np.repeat(np.arange(per_user.size, dtype=np.int64), per_user)[:rows]
    perm = rng.permutation(rows)
    return pa.table(
        {
            "user_id": user_id[perm],
            "group_key": rng.integers(0, 100, size=rows, dtype=np.int64),
            "value": rng.uniform(0.0, 100.0, size=rows),
        }
    )


def peak_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return own / 1024.0


def timed(
    label: str, fn: Callable[[], Any], results: list[tuple[str, float, float, str]], note: str = ""
) -> Any:
    gc.collect()
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    results.append((label, elapsed, peak_mb(), note))
    return out


def _opendp(data: pa.Table) -> tuple[str, float, float, str]:
    """OpenDP's Polars API on the same task, when the bench extra is installed and works."""
    label = "OpenDP Polars (ε = 1)"
    try:
        import opendp.prelude as odp
        import polars as pl
    except ImportError:
        return (label, float("nan"), float("nan"), "not installed: pip install 'dpkit[bench]'")
    try:
        odp.enable_features("contrib")
        start = time.perf_counter()
        context = odp.Context.compositor(
            data=pl.from_arrow(data).lazy(),
            privacy_unit=odp.unit_of(contributions=10, identifier=pl.col("user_id")),
            privacy_loss=odp.loss_of(epsilon=1.0),
            split_evenly_over=1,
            margins=[odp.polars.Margin(by=["group_key"], invariant="keys")],
        )
        query = (
            context.query()
            .group_by("group_key")
            .agg(pl.len().dp.noise(), pl.col("value").fill_null(0).dp.sum((0, 100)))
        )
        query.release().collect()
        return (label, time.perf_counter() - start, peak_mb(), "")
    except Exception as error:
        return (label, float("nan"), float("nan"), f"failed: {str(error).strip()[:70]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--spark", action="store_true", help="also run dpkit on Spark (local)")
    parser.add_argument("--no-dpkit", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import duckdb

    import dpkit as dp
    from dpkit.analytics import Session, count
    from dpkit.analytics import sum as dp_sum

    t0 = time.perf_counter()
    data = generate(args.rows)
    gen_s = time.perf_counter() - t0
    print(
        f"generated {args.rows:,} rows, {len(np.unique(data['user_id'].to_numpy())):,} users "
        f"in {gen_s:.1f}s (peak RSS so far {peak_mb():.0f} MB)"
    )
    results: list[tuple[str, float, float, str]] = []
    keys = list(range(100))

    con = duckdb.connect()
    con.register("t", data)
    timed(
        "non-private DuckDB (floor)",
        lambda: con.sql(
            "SELECT group_key, count(*), sum(least(greatest(value, 0), 100)) FROM t "
            "GROUP BY group_key"
        ).fetchall(),
        results,
    )

    if not args.no_dpkit:
        session = Session(data, "user_id", dp.PureDP(1000), engine="duckdb")
        query = (
            session.query()
            .group_by("group_key", keys=keys)
            .bound(max_rows=10)
            .agg(count(), dp_sum("value", (0, 100)))
        )
        release = timed(
            "dpkit on DuckDB (ε = 1)",
            lambda: session.evaluate(query, epsilon=1),
            results,
            "plan + ledger + engine + noise",
        )
        assert len(release.table) == 100
        session.close()

    results.append(_opendp(data))

    if args.spark:
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.driver.memory", "6g")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        frame = spark.createDataFrame(data.to_pandas()).cache()
        frame.count()
        session = Session(frame, "user_id", dp.PureDP(1000), engine="spark", spark=spark)
        query = (
            session.query()
            .group_by("group_key", keys=keys)
            .bound(max_rows=10)
            .agg(count(), dp_sum("value", (0, 100)))
        )
        timed(
            "dpkit on Spark local[2] (ε = 1)",
            lambda: session.evaluate(query, epsilon=1),
            results,
            "cached DataFrame; JVM memory not in RSS",
        )
        spark.stop()

    print(f"\n{'system':<34} {'seconds':>9} {'peak RSS MB':>12}  note")
    for label, seconds, mb, note in results:
        print(f"{label:<34} {seconds:>9.3f} {mb:>12.0f}  {note}")


if __name__ == "__main__":
    main()
