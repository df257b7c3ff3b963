"""Quantiles over declared candidate values count every row at its nearest candidate alike on
every engine (issue 21): ±inf at the end candidates, a value half-way between two candidates at
the larger one, NaN and NULL skipped, rows tied at a candidate counted exactly."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, quantile

# nearest candidate: -inf -> 0, 0.5 -> 1, 1, 1, 2.4 -> 2, inf -> 3 (n = 6; NaN and NULL skipped)
VALUES = [-math.inf, 0.5, 1.0, 1.0, 2.4, math.inf, math.nan, None]
EXPECTED = {0.0: 0.0, 0.1: 0.0, 0.5: 1.0, 0.6: 1.0, 0.75: 2.0, 0.9: 3.0, 1.0: 3.0}


@pytest.mark.parametrize("engine", ["duckdb", "pandas", "spark"])
def test_candidate_counts_agree_on_every_engine(
    engine: str, request: pytest.FixtureRequest, seeded: None
) -> None:
    if engine == "spark":
        request.getfixturevalue("spark")
    df = pd.DataFrame({"u": np.arange(len(VALUES)), "x": pd.array(VALUES, dtype="Float64")})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(10**9), engine=engine, max_rows=1)
    # 0..3 are grid points (the engine rounds to the grid); 0, 1, 2, 3.5 are binned between
    # their midpoints by a CASE: the same rule, two code paths
    aggs = [
        quantile("x", q, (0, 4), name=f"{kind}{i}", candidates=[0, 1, 2, last])
        for i, q in enumerate(EXPECTED)
        for kind, last in (("grid", 3), ("mid", 3.5))
    ]
    table = session.evaluate(session.query().agg(*aggs), epsilon=10**6).table
    expected = list(EXPECTED.values())
    assert [table[f"grid{i}"][0] for i in range(len(EXPECTED))] == expected
    assert [table[f"mid{i}"][0] for i in range(len(EXPECTED))] == [
        3.5 if v == 3 else v for v in expected
    ]
