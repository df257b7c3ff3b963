"""The Session's data-dependent features, measured in one run (run on demand, not a test).

    PYTHONPATH=src .venv/bin/python benchmarks/session_sensitivity.py [--rows 1000000]
        [--m 1000] [--reps 30] [--spark]

1. **Sample-and-aggregate speed**: ``Session.sample_and_aggregate`` over ``--rows`` rows
   (10 rows per unit) with ``--m`` blocks, the mean of a lognormal column per block, on DuckDB
   and pandas (and Spark with ``--spark``), beside the same per-block computation done without
   privacy by ``pandas.groupby(block).apply`` on a precomputed block column (the baseline).
2. **Session medians by method** (``exponential``, ``inverse``, ``smooth``, ``ptr``) on
   concentrated data (normal, σ = 1, around 100) with wide declared bounds [-1e6, 1e6], at
   ε = 1, one row per unit: the median absolute error over ``--reps`` releases, and the error of
   the non-private median of the grid-rounded data (the statistic the data-dependent methods
   release). ``smooth-zCDP`` is ``method="smooth"`` under a ρ = ε²/2 = 0.5 budget (what pure
   ε = 1 implies), where the Session uses the Bun–Steinke family with the smallest noise sd.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.analytics import Session, median


def _speed(rows: int, m: int, spark: bool) -> None:
    rng = np.random.default_rng(0)
    units = rows // 10
    df = pd.DataFrame({"user": np.repeat(np.arange(units), 10), "x": rng.lognormal(0, 1, rows)})
    print(f"sample-and-aggregate: {rows:,} rows, {units:,} units, m = {m:,} blocks")
    engines = ["duckdb", "pandas"] + (["spark"] if spark else [])
    for engine in engines:
        session = Session(df, privacy_unit="user", budget=dp.PureDP(100), engine=engine)
        start = time.perf_counter()
        release = session.sample_and_aggregate(
            lambda block: block["x"].mean(),
            columns=["x"],
            output_range=(0, 20),
            n_range=(units, units),
            m=m,
            epsilon=1,
        )
        seconds = time.perf_counter() - start
        value = float(release.table["value"][0])
        print(f"  dpkit Session ({engine:6}): {seconds:6.2f} s  (released mean {value:.4f})")
        session.close()
    start = time.perf_counter()
    blocks = pd.util.hash_pandas_object(df["user"], index=False).to_numpy() % np.uint64(m)
    baseline = df.assign(block=blocks).groupby("block")["x"].apply(lambda s: s.mean())
    seconds = time.perf_counter() - start
    print(
        f"  baseline (pandas groupby.apply, no privacy): {seconds:6.2f} s  "
        f"(mean of block means {float(baseline.mean()):.4f}; true mean {df['x'].mean():.4f})"
    )


def _medians(reps: int) -> None:
    print(f"\nSession medians, bounds [-1e6, 1e6], ε = 1, median |error| over {reps} releases")
    print(f"{'n':>8} {'method':>12} {'|error|':>12} {'refused':>8} {'s/release':>10}")
    rng = np.random.default_rng(1)
    for n in (1_000, 10_000, 100_000):
        x = rng.normal(100, 1, n)
        df = pd.DataFrame({"user": np.arange(n), "x": x})
        truth = float(np.sort(x)[max(1, math.ceil(n / 2)) - 1])
        for method, extra in (
            ("exponential", {}),
            ("inverse", {}),
            ("smooth", {}),
            ("smooth-zCDP", {}),
            ("ptr", {"ptr_bound": 0.1}),
        ):
            zcdp = method == "smooth-zCDP"
            budget = dp.ZCDP(10**6) if zcdp else dp.ApproxDP(10**6, 0.5)
            session = Session(df, privacy_unit="user", budget=budget, max_rows=1)
            query = session.query().agg(
                median(
                    "x",
                    (-1e6, 1e6),
                    method="smooth" if zcdp else method,  # type: ignore[arg-type]
                    **extra,
                )
            )
            options = {"rho": 0.5} if zcdp else {"epsilon": 1, "delta": 1e-6}
            errors, refused = [], 0
            start = time.perf_counter()
            for _ in range(reps):
                value = float(session.evaluate(query, **options).table["median_x"][0])
                if math.isnan(value):
                    refused += 1
                else:
                    errors.append(abs(value - truth))
            seconds = (time.perf_counter() - start) / reps
            error = float(np.median(errors)) if errors else math.nan
            print(f"{n:>8} {method:>12} {error:>12.4g} {refused:>8} {seconds:>10.3f}")
            session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--spark", action="store_true")
    parser.add_argument("--skip-medians", action="store_true")
    args = parser.parse_args()
    _speed(args.rows, args.m, args.spark)
    if not args.skip_medians:
        _medians(args.reps)


if __name__ == "__main__":
    main()
