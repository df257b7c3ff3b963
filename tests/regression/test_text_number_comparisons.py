"""Regression (issue 21): ``WHERE wage > '1000'`` on an undeclared (text) CSV column compared
text — '9' > '1000' — and answered 1,991 where the numeric truth was 264, with exit 0. The
unquoted form was refused with a hint to declare the column, so quoting looked like the fix.

Decision: an *ordering* comparison (< <= > >=, and so BETWEEN) of a text value with a text
literal that reads as a number is refused before anything is reserved, by the builder and the
SQL text alike, with the hint to declare the column numeric. Equality (= != IN) stays allowed:
it is exact on text and is how codes are compared ('02139', '007').
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import dpkit as dp
from dpkit.analytics import Session, col, count
from dpkit.analytics._querytext import parse_query


@pytest.fixture(scope="module")
def wages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(3)
    wage = rng.integers(0, 1200, 2000)
    wage[:200] = rng.integers(1000, 99_999, 200)  # 4- and 5-digit wages: text order differs
    path = tmp_path_factory.mktemp("wages") / "wages.csv"
    pd.DataFrame({"person": np.arange(2000), "wage": wage, "zip": "02139"}).to_csv(
        path, index=False
    )
    return path


REFUSED = [
    col("wage") > "1000",
    col("wage") >= " 1000 ",
    col("wage") < "-2.5e3",
    col("wage").__ge__("1000"),  # '1000' <= wage, as Python reflects it
    col("wage").between("10", "20"),
    col("wage").lower() > "1000",
    (col("zip") == "02139") & (col("wage") > ".5"),
]
ALLOWED = [
    col("wage") == "1000",
    col("wage") != "1000",
    col("wage").is_in(["1000", "007"]),
    col("zip") >= "abc",
    col("zip") > col("wage"),
]


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_ordering_text_against_a_number_is_refused_before_the_reservation(
    wages: Path, engine: str
) -> None:
    session = Session(str(wages), "person", dp.PureDP(10), engine=engine, max_rows=1)
    for where in REFUSED:
        with pytest.raises(dp.UnsupportedQueryError, match="declare it") as info:
            session.evaluate(session.query().filter(where).agg(count()), epsilon=1)
        assert "'numeric'" in str(info.value) or "column=float" in str(info.value)
    assert session.spent == dp.PureDP(0)
    for where in ALLOWED:
        session.evaluate(session.query().filter(where).agg(count()), epsilon=1)
    assert session.spent == dp.PureDP(len(ALLOWED))


def test_the_sql_text_is_refused_alike_and_the_declared_column_answers_the_truth(
    wages: Path,
) -> None:
    session = Session(str(wages), "person", dp.PureDP(10), max_rows=1)
    parsed = parse_query("SELECT COUNT(*) WHERE wage > '1000'")
    assert parsed.where is not None
    with pytest.raises(dp.UnsupportedQueryError):
        session.evaluate(session.query().filter(parsed.where).agg(count()), epsilon=1)
    assert session.spent == dp.PureDP(0)
    truth = int((pd.read_csv(wages)["wage"] > 1000).sum())
    declared = Session(str(wages), "person", dp.PureDP(10), max_rows=1, schema={"wage": "numeric"})
    number = parse_query("SELECT COUNT(*) WHERE wage > 1000").where
    assert number is not None
    release = declared.evaluate(declared.query().filter(number).agg(count()), epsilon=5)
    assert abs(int(release.table["count"].iloc[0]) - truth) <= 10


def test_dpkit_query_refuses_it_with_the_schema_to_declare(wages: Path, tmp_path: Path) -> None:
    from dpkit.cli.query import query_command
    from dpkit.ledger import BudgetMonitor, Ledger

    app = typer.Typer()
    app.command("query")(query_command)
    app.command("other")(lambda: None)
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        opened.create_budget("wages", dp.PureDP(10), privacy_unit="person")
    args = ["query", str(wages), "SELECT COUNT(*) WHERE wage > '1000'", "-d", "wages"]
    result = CliRunner().invoke(
        app,
        [*args, "--epsilon", "1", "--max-rows", "1"],
        env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code == 2, result.output
    assert "--schema wage=float" in result.output and "'9' > '1000'" in result.output
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        assert opened.spent("wages") == dp.PureDP(0)
