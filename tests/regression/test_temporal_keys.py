"""Regression (review finding 9, robustness): public keys of a temporal column given as ``date``
or ISO text (what ``dpkit query --keys day=2024-01-01`` passes) matched the rows in SQL but not in
the Python lookup of CompiledQuery.release, so every group was released as a noisy 0 — charged,
no error. Fixed: key values are normalised to their column's kind when the query compiles (ISO
text is parsed; dates and datetimes are kept), and engine results are matched to keys by one
canonical identity (a date is midnight of that day; aware timestamps are in UTC).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import typer
from typer.testing import CliRunner

import dpkit as dp
from dpkit.analytics import Session, count
from dpkit.cli.query import query_command
from dpkit.ledger import Ledger


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
@pytest.mark.parametrize(
    "keys", [["2024-01-01", "2024-01-02"], [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]]
)
def test_temporal_public_keys_are_not_silently_zero(engine: str, keys: list[object]) -> None:
    df = pd.DataFrame(
        {"u": range(200), "day": pd.to_datetime(["2024-01-01"] * 100 + ["2024-01-02"] * 100)}
    )
    session = Session(df, privacy_unit="u", budget=dp.PureDP(100), max_rows=1, engine=engine)
    release = session.evaluate(session.query().group_by("day", keys=keys).agg(count()), epsilon=20)
    counts = release.table["count"].tolist()
    assert all(abs(c - 100) <= 5 for c in counts), f"100 rows per day; released {counts}"


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_date_column_from_arrow_and_timestamp_keys(engine: str) -> None:
    table = pa.table(
        {
            "u": pa.array(range(200)),
            "day": pa.array([dt.date(2024, 1, 1)] * 100 + [dt.date(2024, 1, 2)] * 100),
        }
    )
    session = Session(table, privacy_unit="u", budget=dp.PureDP(100), max_rows=1, engine=engine)
    assert session.schema["day"] == "temporal"
    keys = [dt.datetime(2024, 1, 1), "2024-01-02", dt.date(2024, 1, 3)]
    release = session.evaluate(session.query().group_by("day", keys=keys).agg(count()), epsilon=20)
    counts = release.table["count"].tolist()
    assert abs(counts[0] - 100) <= 5 and abs(counts[1] - 100) <= 5 and abs(counts[2]) <= 5
    assert release.table["day"].tolist()[1] == dt.date(2024, 1, 2)


def test_equal_temporal_keys_are_refused() -> None:
    df = pd.DataFrame({"u": [1], "day": pd.to_datetime(["2024-01-01"])})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(1), max_rows=1)
    with pytest.raises(dp.DPError, match="distinct keys"):
        session.compile(
            session.query().group_by("day", keys=["2024-01-01", dt.date(2024, 1, 1)]).agg(count()),
            epsilon=1,
        )
    with pytest.raises(dp.DPError, match="date"):
        session.compile(
            session.query().group_by("day", keys=["January 1st"]).agg(count()), epsilon=1
        )


def test_cli_keys_of_a_parquet_date_column(tmp_path: Path) -> None:
    path = tmp_path / "days.parquet"
    pd.DataFrame(
        {"u": range(200), "day": pd.to_datetime(["2024-01-01"] * 100 + ["2024-01-02"] * 100)}
    ).to_parquet(path)
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger) as officer:
        officer.create_budget("days", dp.PureDP(100), privacy_unit="u")
    app = typer.Typer()
    app.command("query")(query_command)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(
        app,
        [
            "query",
            str(path),
            "SELECT day, COUNT(*) GROUP BY day",
            "--unit",
            "u",
            "--epsilon",
            "20",
            "--keys",
            "day=2024-01-01,2024-01-02",
            "--dataset",
            "days",
            "--max-rows",
            "1",
        ],
        env={"COLUMNS": "160", "DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code == 0, result.output
    counts = [
        int(line.split("│")[2].split("±")[0])
        for line in result.output.splitlines()
        if "2024-01-0" in line
    ]
    assert len(counts) == 2 and all(abs(c - 100) <= 5 for c in counts), result.output


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_timestamp_keys_as_text_and_aware_values(engine: str) -> None:
    """ISO text with a time, and aware datetimes, match an aware column (compared in UTC)."""
    stamps = pd.to_datetime(["2024-01-01 00:00"] * 30 + ["2024-01-01 23:30"] * 30)
    df = pd.DataFrame({"u": range(60), "t": stamps.tz_localize("Europe/Paris")})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(100), max_rows=1, engine=engine)
    keys = ["2023-12-31 23:00:00", dt.datetime(2024, 1, 1, 22, 30, tzinfo=dt.UTC)]
    release = session.evaluate(session.query().group_by("t", keys=keys).agg(count()), epsilon=20)
    assert all(abs(c - 30) <= 3 for c in release.table["count"]), release.table
