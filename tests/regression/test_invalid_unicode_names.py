"""A name with invalid Unicode (a lone surrogate) is refused before anything is reserved, on
every path a name takes into a plan (issue 21): an aggregation output named '\\ud800' failed in
the dry run with an InternalError (UnicodeEncodeError building the table)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, col, count, histogram
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._query import Count, Sum
from dpkit.errors import InvalidParameterError

BAD = "\ud800"
_FRAME = pd.DataFrame({"u": range(20), "x": np.arange(20.0), "g": ["a", "b"] * 10})


def _cases(s: Session) -> dict[str, Callable[[], Any]]:
    q = s.query()
    return {
        "Count(name=) built directly": lambda: s.evaluate(q.agg(Count(name=BAD)), epsilon=1),
        "Sum(name=) built directly": lambda: s.evaluate(
            q.agg(Sum("x", (0, 1), name=BAD)), epsilon=1
        ),
        "count(name=)": lambda: s.evaluate(q.agg(count(name=BAD)), epsilon=1),
        "sum(name=)": lambda: s.evaluate(q.agg(dp_sum("x", (0, 1), name=BAD)), epsilon=1),
        "histogram(name=)": lambda: s.evaluate(
            q.agg(histogram("x", [0, 1, 2], name=BAD)), epsilon=1
        ),
        "with_column name": lambda: s.evaluate(
            q.with_column(BAD, col("x")).agg(count()), epsilon=1
        ),
        "col name": lambda: s.evaluate(q.filter(col(BAD) > 0).agg(count()), epsilon=1),
        "group_by column": lambda: s.evaluate(q.group_by(BAD, keys=["a"]).agg(count()), epsilon=1),
        "select column": lambda: s.evaluate(q.select(BAD).agg(count()), epsilon=1),
        "sample_and_aggregate names": lambda: s.sample_and_aggregate(
            lambda b: 1.0,
            columns=["x"],
            output_range=(0, 1),
            n_range=(10, 20),
            m=2,
            epsilon=1,
            names=[BAD],
        ),
        "sample_and_aggregate columns": lambda: s.sample_and_aggregate(
            lambda b: 1.0, columns=[BAD], output_range=(0, 1), n_range=(10, 20), m=2, epsilon=1
        ),
        "estimate_bounds column": lambda: s.estimate_bounds(BAD, epsilon=1),
    }


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
@pytest.mark.parametrize("case", list(_cases(Session(_FRAME, "u", dp.PureDP(1), max_rows=1))))
def test_invalid_unicode_names_are_refused_before_the_reservation(engine: str, case: str) -> None:
    session = Session(_FRAME, "u", dp.PureDP(100), max_rows=1, engine=engine)
    with pytest.raises(InvalidParameterError):
        _cases(session)[case]()
    assert session.spent == dp.PureDP(0)
