"""Regression (review finding 8): sum intervals ignored the accumulated grid rounding.

Values were rounded to a grid of ~2^-20 of the noise scale, the rounding error of every row
added up (n·g/2 at worst, i.e. up to 0.5 noise scales per ~1M rows), and the "exact" interval
ignored it: at 10M rows the interval missed the true clamped sum deterministically. Fixed
(planner.SumGrid): the engines round each value to a fine grid (|value| up to 2^62 steps) and
sum exactly (HUGEINT / DECIMAL(38, 0) / Python int); the total is rounded once to the noise
grid, with the sensitivity of rounding each row to it; the interval adds the rounding bound
(half a noise step, plus half a fine step per row for up to 2^40 rows), which is negligible.
(~3 s, ~650 MB.)
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpkit as dp
from dpkit.analytics import Session, workload
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._planner import MAX_ROWS_FOR_INTERVALS, SumGrid, sum_grid
from dpkit.noise import insecure_deterministic_seed


def test_sum_interval_covers_the_accumulated_rounding() -> None:
    n = 10_000_000
    table = pa.table({"u": np.arange(n, dtype=np.int64) // 8, "v": np.full(n, 0.1)})
    session = Session(table, privacy_unit="u", budget=dp.PureDP(100), max_rows=8)
    query = session.query().agg(dp_sum("v", (0, 1)))
    compiled = session.compile(query, epsilon=8)
    plan = compiled.plans[0]
    exact = session.engine.run(plan).to_pydict()
    fine = plan.values[0].exponent
    assert f"exact sum on grid 2^{fine}, rounded to grid 2^-20" in compiled.explain()
    grid = sum_grid((Fraction(0), Fraction(1)), -20)
    assert grid.fine == fine
    total = int(exact[plan.output_columns[1]][0])
    noise_free_release = grid.to_coarse(total) * 2.0**-20  # what the noise is added to
    true_clamped_sum = math.fsum([0.1] * 1000) * (n // 1000)
    release = session.evaluate(query, epsilon=8)
    h = release.accuracy["sum_v"].halfwidth
    bias = abs(noise_free_release - true_clamped_sum)
    # released = noise-free release + noise, and the half-width is the noise's exact quantile
    # plus the rounding bound: so the interval covers the true sum whenever the noise is within
    # its quantile
    noise_quantile = h - grid.rounding_bound()
    assert noise_quantile >= release.accuracy["sum_v"].expected_abs
    assert bias <= grid.rounding_bound(n) <= grid.rounding_bound(), bias
    # the rounding bound is negligible next to the noise (scale L1·1/ε = 1 here)
    assert grid.rounding_bound() < 1e-6


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_half_step_values_do_not_drift(engine: str) -> None:
    """Every value exactly half a noise step above the grid: rounding each row to the noise
    grid would add n/2 steps; the fine grid does not."""
    session = Session(
        pd.DataFrame({"u": range(3), "v": 0.0}), "u", dp.PureDP(10), max_rows=1, engine="pandas"
    )
    compiled = session.compile(session.query().agg(dp_sum("v", (0, 4))), epsilon=1)
    coarse = int(compiled.explain().split("rounded to grid 2^")[1].split(";")[0])
    half = math.ldexp(1.5, coarse)
    n = 200_000
    df = pd.DataFrame({"u": np.arange(n), "v": np.full(n, half)})
    session = Session(df, "u", dp.PureDP(10), max_rows=1, engine=engine)
    compiled = session.compile(session.query().agg(dp_sum("v", (0, 4))), epsilon=1)
    plan = compiled.plans[0]
    grid = SumGrid(plan.values[0].exponent, coarse, 0)
    total = int(session.engine.run(plan).to_pydict()[plan.output_columns[1]][0])
    assert abs(grid.to_coarse(total) * math.ldexp(1.0, coarse) - n * half) <= math.ldexp(
        0.5, coarse
    )


def test_workload_of_sums_covers_the_rounding() -> None:
    n = 40_000
    df = pd.DataFrame({"u": np.arange(n), "k": np.where(np.arange(n) % 2 == 0, "a", "b"), "v": 0.3})
    session = Session(df, "u", dp.PureDP(10), max_rows=1, engine="duckdb")
    query = (
        session.query()
        .group_by("k", keys=["a", "b"])
        .agg(workload([[1, 1], [1, -1]], "w", column="v", bounds=(0, 1)))
    )
    # Seeded: a 95 % interval misses the truth 5 % of the time by design (one such miss failed
    # the clean-clone CI); the point here is that the rounding is inside the interval.
    with insecure_deterministic_seed(3):
        release = session.evaluate(query, epsilon=5)
    table = release["w"]
    assert table["low"][0] <= 0.3 * n <= table["high"][0]
    assert table["low"][1] <= 0.0 <= table["high"][1]


def test_rounding_bound_is_small() -> None:
    for magnitude in (Fraction(1), Fraction(17_500), Fraction(1, 3), Fraction(2) ** 800):
        grid = sum_grid((-magnitude, magnitude), -20 + int(math.log2(magnitude)))
        assert (
            grid.rounding_bound() - math.ldexp(0.5, grid.coarse)
            <= float(magnitude) * MAX_ROWS_FOR_INTERVALS * 2.0**-62
        )
