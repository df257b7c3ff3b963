"""TPC-H with differential privacy beside Tumult Analytics: dpkit and Tumult answer the same DP
TPC-H queries on the same Parquet files, at the same ε per query and the same per-person bound.

Tumult Analytics (tmlt.analytics) is the one maintained peer with private joins. It needs
pandas < 2, so it cannot share dpkit's environment: this file runs in dpkit's environment, and
runs itself again with ``--tumult-worker`` under the Python of a side environment that has
Tumult (``--tumult-python``, or ``$TUMULT_PYTHON``, default ``.tumult-venv/bin/python``), which
prints its releases as JSON. Without that environment it runs dpkit alone and says how to make
one. For each query it prints the median relative error over released group values against the
non-private DuckDB answer, how many 95 % intervals covered it (Tumult releases no intervals),
the warm time (median over ``--runs`` after a first run) and the first run's time including
the session's creation, and DuckDB's time without privacy. ``TUMULT`` says for each query what
had to change for Tumult.

    ../shared/tools/tpch.sh 0.1 /tmp/tpch-0.1
    python3.11 -m venv .tumult-venv && .tumult-venv/bin/pip install tmlt.analytics
    python benchmarks/tpch_tumult.py --dir /tmp/tpch-0.1 --runs 3
    python benchmarks/tpch_tumult.py --dir /tmp/tpch-0.1 --no-tumult   # dpkit only
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_TUMULT_PYTHON = HERE.parent / ".tumult-venv" / "bin" / "python"
SETUP = "python3.11 -m venv .tumult-venv && .tumult-venv/bin/pip install tmlt.analytics"


def _tpch() -> Any:
    """benchmarks/tpch.py (its QUERIES, keys and bounds); it imports only the standard library."""
    name = "dpkit_bench_tpch"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "tpch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# What each query needed in Tumult, beyond what benchmarks/tpch.py says changed from TPC-H.
# Common to all: Tumult's privacy unit is an ID column that every private table must hold
# (AddRowsWithID), so before the session, a non-private Spark join gives lineitem its order's
# customer key; every private table gets that key as a column named `custkey` (join_private on
# ID tables must join on the ID column, under one name), and lineitem's l_orderkey is renamed
# o_orderkey (joins match columns by name). Tumult has no arithmetic inside aggregates except
# a per-row Python function (map), so the derived columns (revenue, charge, ...) are computed
# in the same preparation. DECIMAL columns are cast to DOUBLE (Tumult supports no decimals).
# Tumult answers one aggregate per query, so a query with k aggregates is k queries at ε/k
# each. The per-person bound is MaxRowsPerID(max_rows), enforced after the joins, as dpkit's
# max_rows is.
TUMULT: dict[str, str] = {
    "Q1": "8 queries at ε/8 (4 sums, 3 averages, 1 count) over lineitem; the charge and "
    "discounted price precomputed",
    "Q3": "customer join_private orders on custkey, join_private lineitem on (custkey, "
    "o_orderkey); 2 queries at ε/2; revenue precomputed",
    "Q5": "as Q3, then join_public supplier on (s_suppkey, s_nationkey) (lineitem's l_suppkey and "
    "customer's c_nationkey renamed to match), nation and region (renamed keys); revenue "
    "precomputed",
    "Q6": "one sum over lineitem; l_extendedprice * l_discount precomputed",
    "Q10": "as Q3, then join_public nation (c_nationkey renamed n_nationkey); a sum and a "
    "count_distinct of custkey, 2 queries at ε/2; revenue precomputed",
}


# ---------------------------------------------------------------- Tumult (in its own venv) --


def _tumult_tables(spark: Any, directory: Path) -> dict[str, Any]:
    """The TPC-H tables as Tumult needs them: DOUBLE for DECIMAL, the customer key on every
    private table (lineitem's by a non-private join with orders), derived columns precomputed."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    def read(name: str) -> Any:
        frame = spark.read.parquet(str(directory / f"{name}.parquet"))
        for column in frame.schema:
            if isinstance(column.dataType, DecimalType):
                frame = frame.withColumn(column.name, F.col(column.name).cast("double"))
        return frame

    customer = read("customer").withColumn("custkey", F.col("c_custkey"))
    orders = read("orders").withColumn("custkey", F.col("o_custkey"))
    owner = orders.select(F.col("o_orderkey").alias("l_orderkey"), "custkey")
    revenue = F.col("l_extendedprice") * (1 - F.col("l_discount"))
    lineitem = (
        read("lineitem")
        .join(owner, "l_orderkey")
        .withColumnRenamed("l_orderkey", "o_orderkey")
        .withColumn("revenue", revenue)
        .withColumn("charge", revenue * (1 + F.col("l_tax")))
        .withColumn("disc_revenue", F.col("l_extendedprice") * F.col("l_discount"))
    )
    for frame in (customer, orders, lineitem):
        frame.cache().count()  # prepared once, as dpkit computes its key maps once a session
    return {
        "customer": customer,
        "orders": orders,
        "lineitem": lineitem,
        "nation": read("nation"),
        "region": read("region"),
        "supplier": read("supplier"),
    }


def _tumult_queries(name: str, keys: dict[str, list[Any]], max_rows: int) -> list[Any]:
    """Query ``name`` as Tumult queries: (output column, query) pairs, each at ε / their number."""
    from tmlt.analytics import KeySet, MaxRowsPerID, QueryBuilder

    def joined(segment: str | None = None) -> Any:
        left = QueryBuilder("customer")
        if segment is not None:
            left = left.filter(segment)
        return left.join_private("orders", join_columns=["custkey"])

    def grouped(builder: Any) -> Any:
        builder = builder.enforce(MaxRowsPerID(max_rows))
        return builder.groupby(KeySet.from_dict(keys)) if keys else builder

    if name == "Q1":

        def q1() -> Any:
            return grouped(QueryBuilder("lineitem").filter("l_shipdate <= DATE '1998-09-02'"))

        return [
            ("sum_qty", q1().sum("l_quantity", 0, 50, name="sum_qty")),
            ("sum_base_price", q1().sum("l_extendedprice", 0, 105000, name="sum_base_price")),
            ("sum_disc_price", q1().sum("revenue", 0, 105000, name="sum_disc_price")),
            ("sum_charge", q1().sum("charge", 0, 115000, name="sum_charge")),
            ("avg_qty", q1().average("l_quantity", 0, 50, name="avg_qty")),
            ("avg_price", q1().average("l_extendedprice", 0, 105000, name="avg_price")),
            ("avg_disc", q1().average("l_discount", 0, 0.1, name="avg_disc")),
            ("count_order", q1().count(name="count_order")),
        ]
    if name == "Q3":

        def q3() -> Any:
            return grouped(
                joined("c_mktsegment = 'BUILDING'")
                .filter("o_orderdate < DATE '1995-03-15'")
                .join_private(
                    QueryBuilder("lineitem").filter("l_shipdate > DATE '1995-03-15'"),
                    join_columns=["custkey", "o_orderkey"],
                )
            )

        return [
            ("revenue", q3().sum("revenue", 0, 105000, name="revenue")),
            ("lines", q3().count(name="lines")),
        ]
    if name == "Q5":
        builder = (
            joined()
            .filter("o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'")
            .join_private("lineitem", join_columns=["custkey", "o_orderkey"])
            .rename({"l_suppkey": "s_suppkey", "c_nationkey": "s_nationkey"})
            .join_public("supplier", join_columns=["s_suppkey", "s_nationkey"])
            .rename({"s_nationkey": "n_nationkey"})
            .join_public("nation", join_columns=["n_nationkey"])
            .rename({"n_regionkey": "r_regionkey"})
            .join_public("region", join_columns=["r_regionkey"])
            .filter("r_name = 'ASIA'")
        )
        return [("revenue", grouped(builder).sum("revenue", 0, 105000, name="revenue"))]
    if name == "Q6":
        builder = QueryBuilder("lineitem").filter(
            "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
            "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24"
        )
        return [("revenue", grouped(builder).sum("disc_revenue", 0, 10500, name="revenue"))]
    if name == "Q10":

        def q10() -> Any:
            return grouped(
                joined()
                .filter("o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01'")
                .join_private(
                    QueryBuilder("lineitem").filter("l_returnflag = 'R'"),
                    join_columns=["custkey", "o_orderkey"],
                )
                .rename({"c_nationkey": "n_nationkey"})
                .join_public("nation", join_columns=["n_nationkey"])
            )

        return [
            ("revenue", q10().sum("revenue", 0, 105000, name="revenue")),
            ("customers", q10().count_distinct(["custkey"], name="customers")),
        ]
    raise ValueError(f"no Tumult form for {name}")


def tumult_worker(directory: Path, names: list[str], runs: int, epsilon: float) -> None:
    """Run in Tumult's environment: answer each query ``runs + 1`` times, print JSON."""
    start = time.perf_counter()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers import tmlt too
    import shutil
    import tempfile

    from pyspark.sql import SparkSession

    warehouse = tempfile.mkdtemp(prefix="tpch-tumult-")  # Tumult's temporary tables
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.driver.memory", "6g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_start = time.perf_counter() - start
    from tmlt.analytics import AddRowsWithID, PureDPBudget, Session

    tpch = _tpch()
    start = time.perf_counter()
    tables = _tumult_tables(spark, directory)
    builder = (
        Session.Builder()
        .with_privacy_budget(PureDPBudget(10_000 * epsilon))
        .with_id_space("customer")
    )
    for table in ("customer", "orders", "lineitem"):
        change = AddRowsWithID("custkey", "customer")
        builder = builder.with_private_dataframe(table, tables[table], protected_change=change)
    for table in ("nation", "region", "supplier"):
        builder = builder.with_public_dataframe(table, tables[table])
    session = builder.build()
    session_time = time.perf_counter() - start
    out: dict[str, Any] = {"spark_start": spark_start, "session": session_time, "queries": {}}
    for name in names:
        query = tpch.QUERIES[name]
        results = []
        for _ in range(runs + 1):
            start = time.perf_counter()
            parts = _tumult_queries(name, query.keys, query.max_rows)
            rows: dict[tuple[Any, ...], dict[str, Any]] = {}
            for column, tumult_query in parts:
                answer = session.evaluate(tumult_query, PureDPBudget(epsilon / len(parts)))
                for row in answer.toPandas().to_dict("records"):
                    key = tuple(row[k] for k in query.keys)
                    merged = rows.setdefault(key, {k: row[k] for k in query.keys})
                    merged[column] = None if row[column] is None else float(row[column])
            elapsed = time.perf_counter() - start
            results.append({"time": elapsed, "rows": [_plain_json(r) for r in rows.values()]})
        out["queries"][name] = results
    spark.stop()
    shutil.rmtree(warehouse, ignore_errors=True)
    print(json.dumps(out))


def _plain_json(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}


# ------------------------------------------------------------------- dpkit (this venv) --


@dataclass
class Scores:
    errors: list[float] = field(default_factory=list)
    covered: int = 0
    intervals: int = 0
    warm: list[float] = field(default_factory=list)
    first: float = math.nan  # the first run, session creation included

    def error(self) -> float:
        return statistics.median(self.errors) if self.errors else math.nan

    def time(self) -> float:
        return statistics.median(self.warm) if self.warm else math.nan


def score(scores: Scores, rows: list[dict[str, Any]], keys: list[str], truth: Any) -> None:
    """Add the relative errors (and interval coverage, where given) of released ``rows``."""
    for row in rows:
        true = truth.get(tuple(row[k] for k in keys))
        if true is None:
            continue  # a public key with no rows: its value is noise around 0
        for column, value in true.items():
            if row.get(column) is None or not math.isfinite(value):
                continue
            if value != 0:
                scores.errors.append(abs(float(row[column]) - value) / abs(value))
            low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
            if low is not None and high is not None:
                scores.intervals += 1
                scores.covered += int(low <= value <= high)


def run_dpkit(
    directory: Path, names: list[str], runs: int, epsilon: float, truths: dict[str, Any]
) -> dict[str, Scores]:
    """Each query in a new session: its first run (creation included), then ``runs`` warm."""
    tpch = _tpch()
    out: dict[str, Scores] = {}
    for name in names:
        query, scores = tpch.QUERIES[name], Scores()
        start = time.perf_counter()
        session = tpch._session(directory, "duckdb", epsilon)
        for i in range(runs + 1):
            begin = time.perf_counter()
            release = session.evaluate_sql(
                query.dp, keys=query.keys or None, max_rows=query.max_rows, epsilon=epsilon
            )
            if i == 0:
                scores.first = time.perf_counter() - start
                continue
            scores.warm.append(time.perf_counter() - begin)
            score(scores, release.table.to_dict("records"), list(query.keys), truths[name])
        session.close()
        out[name] = scores
    return out


def run_tumult(
    python: Path, directory: Path, names: list[str], runs: int, epsilon: float, truths: Any
) -> tuple[float, dict[str, Scores]]:
    """The worker in Tumult's environment, its releases scored here."""
    tpch = _tpch()
    command = [str(python), __file__, "--tumult-worker", "--dir", str(directory)]
    command += ["--runs", str(runs), "--epsilon", str(epsilon), "--queries", *names]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the Tumult worker failed ({done.returncode})")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    out: dict[str, Scores] = {}
    for name in names:
        scores, results = Scores(), data["queries"][name]
        scores.first = data["session"] + results[0]["time"]
        for result in results[1:]:
            scores.warm.append(result["time"])
            score(scores, result["rows"], list(tpch.QUERIES[name].keys), truths[name])
        out[name] = scores
    return float(data["spark_start"]), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="TPC-H Parquet files")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--queries", nargs="*", default=list(TUMULT))
    parser.add_argument(
        "--tumult-python",
        type=Path,
        default=Path(os.environ.get("TUMULT_PYTHON", DEFAULT_TUMULT_PYTHON)),
        help="the Python of an environment with tmlt.analytics",
    )
    parser.add_argument("--no-tumult", action="store_true", help="run dpkit only")
    parser.add_argument("--tumult-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = [q for q in args.queries if q not in TUMULT]
    if unknown:
        parser.error(f"no Tumult form for {unknown}; choose from {list(TUMULT)}")
    if args.tumult_worker:
        tumult_worker(args.dir, args.queries, args.runs, args.epsilon)
        return
    tpch = _tpch()
    truths, plain_times = {}, {}
    for name in args.queries:
        query = tpch.QUERIES[name]
        frame, plain_times[name] = tpch._plain(args.dir, query.plain)
        truths[name] = tpch._by_key(frame, list(query.keys))
    dpkit = run_dpkit(args.dir, args.queries, args.runs, args.epsilon, truths)
    tumult: dict[str, Scores] = {}
    spark_start = math.nan
    if args.no_tumult:
        pass
    elif not args.tumult_python.exists():
        print(f"Tumult Analytics not found at {args.tumult_python}: running dpkit only.")
        print(f"To compare with it: {SETUP}")
        print("(or pass --tumult-python PATH, or set TUMULT_PYTHON)\n")
    else:
        spark_start, tumult = run_tumult(
            args.tumult_python, args.dir, args.queries, args.runs, args.epsilon, truths
        )
    print(
        f"TPC-H from {args.dir}, ε = {args.epsilon} per query, {args.runs} warm runs after a "
        "first; dpkit on DuckDB" + (", Tumult Analytics on Spark (local[2])" if tumult else "")
    )
    head = f"{'query':6} {'system':7} {'median rel. error':>18} {'covered':>10} "
    head += f"{'warm s':>8} {'1st s':>8} {'DuckDB s':>9}"
    print(head)
    print("-" * len(head))
    for name in args.queries:
        for system, scores in (("dpkit", dpkit.get(name)), ("Tumult", tumult.get(name))):
            if scores is None:
                continue
            covered = f"{scores.covered}/{scores.intervals}" if scores.intervals else "none"
            print(
                f"{name:6} {system:7} {scores.error():>17.2%} {covered:>10} "
                f"{scores.time():>8.3f} {scores.first:>8.3f} {plain_times[name]:>9.3f}"
            )
    if tumult:
        print(
            f"\nTumult releases no intervals. Spark's start ({spark_start:.1f} s) is not in "
            "Tumult's '1st s'; its session's creation (reading and preparing the tables) is."
        )
    print()
    for name in args.queries:
        print(f"{name}: {tpch.QUERIES[name].changed}")
        if tumult:
            print(f"  Tumult: {TUMULT[name]}")


if __name__ == "__main__":
    main()
