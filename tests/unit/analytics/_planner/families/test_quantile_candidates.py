"""Quantiles over declared candidate values (``candidates=[...]``, issue 21).

Every row is counted at its nearest candidate (a value half-way goes up; NULL and NaN are
skipped; ±inf go to the end candidates), the same on every engine, and ``method="auto"`` uses
the exponential mechanism over the values because it counts tied rows exactly. A bad list is
refused when the aggregation is built, before any session or ledger is involved.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

import dpkit as dp
from dpkit.analytics import Session, median, quantile
from dpkit.analytics._planner.families._quantile import candidate_edges
from dpkit.analytics._query import dyadic_step
from dpkit.errors import InvalidParameterError

# nearest candidate of each row: -inf -> 0, 0.5 -> 1 (half-way goes up), 1, 1, 2.4 -> 2, inf -> 3
ROWS = [-math.inf, 0.5, 1.0, 1.0, 2.4, math.inf, math.nan, None]


def _session(engine: str) -> Session:
    df = pd.DataFrame({"u": np.arange(len(ROWS)), "x": pd.array(ROWS, dtype="Float64")})
    if engine == "duckdb":
        df["x"] = df["x"].astype("float64")  # NULL and NaN both reach DuckDB as NaN/NULL
    return Session(df, privacy_unit="u", budget=dp.PureDP(10**9), engine=engine, max_rows=1)


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
@pytest.mark.parametrize("last", [3, 3.5], ids=["grid", "midpoints"])
@pytest.mark.parametrize(
    ("q", "expected"),
    [(0.5, 1.0), (0.6, 1.0), (0.75, 2.0), (0.9, 3.0), (0.0, 0.0), (1.0, 3.0), (0.1, 0.0)],
)
def test_rows_are_counted_at_their_nearest_candidate(
    engine: str, last: float, q: float, expected: float, seeded: None
) -> None:
    """n = 6 rows at 0, 1, 1, 1, 2, 3 (or 3.5): at ε = 10^6 the released value is the one
    candidate whose rank interval [rows below, rows at or below] holds q·n. Candidates 0..3 are
    grid points (the engine rounds to the grid); 0, 1, 2, 3.5 are binned between midpoints."""
    session = _session(engine)
    agg = quantile("x", q, (0, 4), name="v", candidates=[0, 1, 2, last])
    text = session.explain(session.query().agg(agg), epsilon=1)
    assert ("consecutive grid points" in text) == (last == 3)
    release = session.evaluate(session.query().agg(agg), epsilon=10**6)
    assert release.table["v"][0] == (last if expected == 3 else expected)


@pytest.mark.parametrize(
    ("values", "exponent"),
    [
        (range(91), 0),
        ([0, 0.5, 1], -1),
        ([2, 4, 6], 1),
        ([1, 3, 5], None),  # step 2 but not multiples of 2
        ([0, 0.1, 0.2], None),
        ([0, 1, 3], None),
        ([0, 3, 6], None),
        ([2**41, 2**41 + 1], None),  # grid indices beyond 2^40
    ],
)
def test_dyadic_step(values: Any, exponent: int | None) -> None:
    assert dyadic_step(tuple(Fraction(v) for v in values)) == exponent


def test_edges_send_each_value_to_its_nearest_candidate() -> None:
    values = (Fraction(0), Fraction(1, 10), Fraction(5))
    assert candidate_edges(values) == (-math.inf, 0.05, 2.55, math.inf)


def test_auto_uses_the_exponential_mechanism_over_declared_values() -> None:
    """Where a declared n_range would pick the inverse mechanism, declared values win: they are
    public, and the exponential mechanism over them counts tied rows exactly."""
    session = _session("pandas")
    plain = session.query().agg(median("x", (0, 90), n_range=(10**6, 10**7)))
    declared = session.query().agg(
        median("x", (0, 90), n_range=(10**6, 10**7), candidates=range(91))
    )
    assert "inverse sensitivity mechanism" in session.explain(plain, epsilon=1)
    text = session.explain(declared, epsilon=1)
    assert "exponential mechanism over 91 declared candidate values" in text
    assert "auto: candidates= declares the public values" in text
    assert "91 candidates in [0, 90]" in text  # the plan's text names them too


@pytest.mark.parametrize(
    ("candidates", "kw", "named"),
    [
        ([0, 2, 1], {}, "candidates[2]"),
        ([0, 1, 1], {}, "candidates[2]"),
        ([0, 1.0, math.nextafter(1.0, 2.0)], {}, "candidates[2]"),
        ([-1, 5], {}, "candidates"),
        ([0, 11], {}, "candidates"),
        ([3], {}, "candidates"),
        (list(np.linspace(0, 5000, 1025)), {"bounds": (0, 5000)}, "candidates"),
        (range(70_000), {"bounds": (0, 70_000)}, "candidates"),
        ("0123", {}, "candidates"),
        ([0, math.nan], {}, "candidates[1]"),
        ([0, True], {}, "candidates[1]"),
        ([0, 1, 2], {"method": "inverse"}, "candidates"),
        ([0, 1, 2], {"method": "ptr", "ptr_bound": 1}, "candidates"),
        (1, {}, "candidates"),
        (True, {}, "candidates"),
    ],
)
def test_bad_candidates_are_refused_when_built(
    candidates: Any, kw: dict[str, Any], named: str
) -> None:
    bounds = kw.pop("bounds", (0, 10))
    with pytest.raises(InvalidParameterError) as info:
        quantile("x", 0.5, bounds, candidates=candidates, **kw)
    assert info.value.parameter == named, info.value


def test_long_ranges_of_grid_points_are_accepted() -> None:
    assert len(quantile("x", 0.5, (0, 65_535), candidates=range(65_536)).candidates) == 65_536


def test_integer_sizes_still_mean_a_grid() -> None:
    assert quantile("x", 0.5, (0, 10), candidates=64).candidates == 64
    assert quantile("x", 0.5, (0, 10), candidates=np.int64(64)).candidates == 64
    values = quantile("x", 0.5, (0, 10), candidates=np.array([0.0, 2.5, 10.0])).candidates
    assert values == (Fraction(0), Fraction(5, 2), Fraction(10))
