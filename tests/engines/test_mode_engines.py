"""The mode family counts a row at a candidate exactly when its value equals it (as a float64),
alike on every engine: values between candidates, the next float after a candidate, ±inf, NaN
and NULL count nowhere (planner/families/_mode.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.analytics._planner.families._mode import mode

NEXT = math.nextafter(3.0, math.inf)
VALUES = [2.5] * 5 + [3.0] * 2 + [NEXT] * 5 + [1.0] + [math.nan] * 5 + [None] * 5
VALUES += [-math.inf, math.inf]


@pytest.mark.parametrize("engine", ["duckdb", "pandas", "spark"])
def test_candidate_counts_agree_on_every_engine(
    engine: str, request: pytest.FixtureRequest
) -> None:
    if engine == "spark":
        request.getfixturevalue("spark")
    df = pd.DataFrame({"u": np.arange(len(VALUES)), "x": pd.array(VALUES, dtype="Float64")})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(10**9), engine=engine, max_rows=1)
    aggs = [
        mode("x", [1, 2, 3], "exact"),  # 3 (2 rows) over 1 (1 row); 2.5 and 3⁺ count nowhere
        mode("x", [1, 2, 2.5], "between"),  # 2.5 (5 rows)
        mode("x", [NEXT, 4], "next"),  # the next float after 3 is a value of its own
        mode("x", [-1, 0.5, 1], "one"),  # 1 (1 row) over none
    ]
    table = session.evaluate(session.query().agg(*aggs), epsilon=10**6).table
    assert table[["exact", "between", "next", "one"]].iloc[0].tolist() == [3.0, 2.5, NEXT, 1.0]
