"""Private tuning (Session.tune) against non-private tuning and the best fixed cap in hindsight.

For DP count, sum and mean over tables with many rows per person, at a total budget ε:

* **private**: ``Session.tune`` with a share of ε (``--share``, counted in the budget) chooses
  ``max_rows``; the tuned query is released with the rest. Its RMSE is *realised* over ``--reps``
  runs of tune + release, against the true (unbounded, unclamped) answers.
* **non-private** (PipelineDP's ``analysis/`` approach, reproduced): the cap is chosen from the
  *exact* histogram of rows per person with the same error objective, and released with all of
  ε. RMSE = sqrt(bias² + σ²): the bias of the exact bounded answer (a release at ε = 10^4) and
  the calibrated noise σ at that cap.
* **best fixed in hindsight**: the cap of the same grid with the smallest such RMSE, per
  aggregate.

Clamping bounds are declared and the same for all three (PipelineDP tunes contribution bounds
only). Also checked: the report's honesty, the realised RMS error of the private releases over
the RMSE the report forecast (target: within 20 %).

Run: ``PYTHONPATH=src python benchmarks/tuning.py [--reps 20] [--epsilon 1] [--share 0.1]``.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.analytics import Session, count, mean
from dpkit.analytics import _tuning as tuning
from dpkit.analytics import sum as dp_sum

AGGS = ("count", "sum", "mean")


def zipf_table(persons: int = 20_000, a: float = 2.0, cap: int = 2_000, seed: int = 1) -> Any:
    rng = np.random.default_rng(seed)
    rows = np.minimum(rng.zipf(a, persons), cap)
    ids = np.repeat(np.arange(persons), rows)
    return pd.DataFrame({"pid": ids, "x": rng.uniform(0, 100, ids.size)}), (0, 100)


def lineitem_table(path: str = "/work/tpch/sf01") -> Any:
    import duckdb

    frame = duckdb.sql(
        f"SELECT o_custkey AS pid, l_extendedprice AS x FROM '{path}/lineitem.parquet' "
        f"JOIN '{path}/orders.parquet' ON l_orderkey = o_orderkey"
    ).df()
    return frame, (0, 2**17)


def query(session: Session, bounds: tuple[float, float], cap: int | None = None) -> Any:
    q = session.query()
    if cap is not None:
        q = q.bound(max_rows=cap)
    return q.agg(count(), dp_sum("x", bounds), mean("x", bounds))


def names(bounds: tuple[float, float]) -> dict[str, str]:
    return {"count": "count", "sum": "sum_x", "mean": "mean_x"}


def analytic_rmse(session: Session, bounds: Any, cap: int, epsilon: float, truth: Any) -> dict:
    """sqrt(bias² + σ²) at ``cap``: bias from the exact bounded answer, σ from calibration."""
    exact = session.evaluate(query(session, bounds, cap), epsilon=10**4).table.iloc[0]
    release = session.evaluate(query(session, bounds, cap), epsilon=epsilon)
    out = {}
    z = 1.959963984540054
    for agg, column in names(bounds).items():
        accuracy = release.accuracy[column]
        if accuracy.expected_abs is not None:
            sigma = accuracy.expected_abs * math.sqrt(2)
        else:
            sigma = accuracy.halfwidth / z
        out[agg] = math.hypot(float(exact[column]) - truth[agg], sigma)
    return out


def run(label: str, frame: Any, bounds: Any, epsilon: float, share: float, reps: int) -> Any:
    truth = {"count": len(frame), "sum": float(frame.x.sum()), "mean": float(frame.x.mean())}
    session = Session(frame, privacy_unit="pid", budget=dp.PureDP(10**8))
    per_unit = frame.groupby("pid").size().to_numpy()
    candidates = [c for c in tuning.COUNT_EDGES if c <= per_unit.max() * 2]
    # best fixed in hindsight, and the non-private choice with the tuning objective
    hindsight = {c: analytic_rmse(session, bounds, c, epsilon, truth) for c in candidates}
    exact_hist = tuning._bins(per_unit, tuning.COUNT_EDGES).astype(np.float64)
    found = tuning._Found(max_rows=None, max_groups=None)
    calibrate = tuning._Calibrate(session, {"epsilon": epsilon}, "auto", 0.05)

    def tuned_query(_: Any, cap: int | None = None) -> Any:
        return query(session, bounds, cap)

    np_cap = tuning._best_cap(exact_hist, found, tuned_query, calibrate, 0.05)
    nonprivate = hindsight.get(np_cap) or analytic_rmse(session, bounds, np_cap, epsilon, truth)
    best = {agg: min(h[agg] for h in hindsight.values()) for agg in AGGS}
    best_cap = {agg: min(hindsight, key=lambda c, a=agg: hindsight[c][a]) for agg in AGGS}
    # private: tune with share·ε, release with the rest, realised over reps
    errors: dict[str, list[float]] = {agg: [] for agg in AGGS}
    reported: dict[str, list[float]] = {agg: [] for agg in AGGS}
    caps = []
    rest = dp.PureDP(epsilon * (1 - share))
    started = time.perf_counter()
    for _ in range(reps):
        tuned, report = session.tune(query(session, bounds), epsilon=epsilon * share, spend=rest)
        caps.append(report.max_rows)
        released = session.evaluate(tuned, epsilon=epsilon * (1 - share)).table.iloc[0]
        for agg, column in names(bounds).items():
            errors[agg].append(float(released[column]) - truth[agg])
            reported[agg].append(report.forecasts[column].rmse or math.nan)
    seconds = (time.perf_counter() - started) / reps
    rows = []
    for agg in AGGS:
        private = math.sqrt(np.mean(np.square(errors[agg])))
        forecast = math.sqrt(np.mean(np.square(reported[agg])))
        rows.append(
            {
                "table": label,
                "aggregate": agg,
                "private RMSE": private,
                "non-private RMSE": nonprivate[agg],
                "best fixed RMSE": best[agg],
                "private / non-private": private / nonprivate[agg],
                "private / best fixed": private / best[agg],
                "realised / reported": private / forecast,
                "caps (private median, non-private, best)": (
                    f"{int(np.median(caps))}, {np_cap}, {best_cap[agg]}"
                ),
            }
        )
    print(f"{label}: {reps} reps, {seconds:.2f} s per tune + release")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--share", type=float, default=0.1)
    parser.add_argument("--no-tpch", action="store_true")
    args = parser.parse_args()
    rows = []
    frame, bounds = zipf_table()
    rows += run("zipf(2.0), 20k persons", frame, bounds, args.epsilon, args.share, args.reps)
    if not args.no_tpch:
        frame, bounds = lineitem_table()
        rows += run(
            "TPC-H SF0.1 lineitem/customer", frame, bounds, args.epsilon, args.share, args.reps
        )
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
