"""Dates and times in WHERE (issue 9): a temporal column compares with dates, datetimes and ISO
text (what `DATE '2024-03-01'` parses to); aware values compare in UTC; a text column compares as
text; a non-ISO string against a date column is refused before anything is spent."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, col, count


def days(aware: bool) -> pd.DataFrame:
    stamps = pd.to_datetime(["2024-01-01"] * 100 + ["2024-03-05"] * 300)
    if aware:
        stamps = stamps.tz_localize("Europe/Paris")
    return pd.DataFrame({"u": range(400), "d": stamps})


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
@pytest.mark.parametrize("aware", [False, True])
@pytest.mark.parametrize(
    "bound", ["2024-03-01", dt.date(2024, 3, 1), dt.datetime(2024, 3, 1, tzinfo=dt.UTC)]
)
def test_a_date_column_filters_by_date(engine: str, aware: bool, bound: Any) -> None:
    session = Session(days(aware), "u", dp.PureDP(100), max_rows=1, engine=engine)
    release = session.evaluate(session.query().filter(col("d") >= bound).agg(count()), epsilon=20)
    assert abs(release.table["count"][0] - 300) <= 3


def test_a_non_iso_string_against_a_date_column_is_refused_for_free() -> None:
    session = Session(days(False), "u", dp.PureDP(1), max_rows=1)
    with pytest.raises(dp.DPError, match="ISO 8601"):
        session.evaluate(session.query().filter(col("d") >= "March 1").agg(count()), epsilon=1)
    assert session.spent == dp.PureDP(0)
