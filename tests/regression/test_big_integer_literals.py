"""Integer literals beyond ±2^53 are refused before the reservation (issue 21): expressions
compare in double precision, and col("n") == 2**53 + 1 silently counted 2^53 too."""

from __future__ import annotations

import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, col, count, lit
from dpkit.analytics.expr import MAX_EXACT_INTEGER
from dpkit.errors import InvalidParameterError

BIG = 2**53
_FRAME = pd.DataFrame({"u": range(4), "n": pd.array([BIG, BIG + 1, BIG + 2, 5], dtype="int64")})


@pytest.mark.parametrize(
    "build",
    [
        lambda: col("n") == BIG + 1,
        lambda: col("n") > -(BIG + 1),
        lambda: col("n").is_in([BIG + 1]),
        lambda: lit(10**400),
        lambda: col("n") + (BIG + 3),
    ],
)
def test_inexact_integer_literals_are_refused(build: object) -> None:
    with pytest.raises(InvalidParameterError, match="2\\^53"):
        build()  # type: ignore[operator]


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_exact_integer_literals_count_exactly(engine: str) -> None:
    session = Session(_FRAME, "u", dp.PureDP(1e7), max_rows=1, engine=engine)
    release = session.evaluate(
        session.query().filter(col("n") == MAX_EXACT_INTEGER).agg(count()), epsilon=1e6
    )
    # 2^53 and 2^53 + 1 are the same double: the column side rounds (documented)
    assert int(release.table["count"][0]) in (1, 2)
    small = session.evaluate(session.query().filter(col("n") == 5).agg(count()), epsilon=1e6)
    assert int(small.table["count"][0]) == 1
