"""Regression (review findings 1 and 6): engine errors carried raw records to the analyst, and
column kinds read from the data made refusals data-dependent.

1. Session.evaluate re-raised whatever the engine raised (and stored its text in the ledger's
   ``fail`` entry); DuckDB's conversion errors quote the offending *data value* verbatim, so a
   query charged a tiny ε disclosed one record exactly. Fixed at both ends: the session withholds
   any non-dpkit error text after the reservation (and ``dpkit query`` prints only the error's
   type), and the causes are gone — public keys are checked against their column's kind when
   the query compiles (a clear InvalidParameterError, nothing charged) and written as literals of
   that kind, so the engine never casts data to compare them; a CSV file is read with every
   column as text (DuckDB no longer sniffs types from a sample, Spark no longer uses
   inferSchema) and declared columns are converted so that a value that does not parse is NULL.
6. Column kinds came from the values (a pandas object column's contents, DuckDB's CSV sniffing,
   Spark's inferSchema), so one person's value decided between "released and charged" and
   "refused for free". Fixed: kinds come only from metadata (dtypes, Arrow / Parquet / Spark
   schemas; an object column and a CSV column are text) or from ``Session(schema=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import dpkit as dp
from dpkit.analytics import Session, col, count
from dpkit.analytics import sum as dp_sum
from dpkit.cli.query import query_command
from dpkit.errors import InvalidParameterError
from dpkit.ledger import Ledger

SECRET = "HIV-POSITIVE"


def _messages(ledger: Ledger) -> str:
    return "\n".join(e.detail for e in ledger.history())


def test_public_key_type_mismatch_extracts_one_persons_value() -> None:
    """filter to one unit + an integer public key on a string column: DuckDB's cast error
    prints that unit's string. One query at ε = 0.001 reveals the value exactly."""
    rng = np.random.default_rng(0)
    n = 5_000
    df = pd.DataFrame({"u": np.arange(n), "diagnosis": rng.choice(["flu", "cold", "asthma"], n)})
    df.loc[4242, "diagnosis"] = SECRET
    ledger = Ledger.open(":memory:")
    ledger.create_budget("table", dp.PureDP(1), privacy_unit="u")
    session = Session(df, privacy_unit="u", budget=dp.PureDP(1), max_rows=1, ledger=ledger)
    query = session.query().filter(col("u") == 4242).group_by("diagnosis", keys=[0]).agg(count())
    message = ""
    try:
        session.evaluate(query, epsilon=0.001)
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
    assert SECRET not in message, f"the error shown to the analyst discloses a record: {message}"
    assert SECRET not in _messages(ledger), "the ledger's fail entry stores the record"
    # the cause: the key's type is checked when compiling, before anything is charged or read
    with pytest.raises(InvalidParameterError, match="text"):
        session.evaluate(query, epsilon=0.001)
    assert session.spent == dp.PureDP(0)


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
@pytest.mark.parametrize(
    "keys,kind", [([0], "text"), (["0"], "numbers"), ([1.5], "True or False"), ([1], "date")]
)
def test_public_keys_of_the_wrong_kind_are_refused_for_free(
    engine: str, keys: list[Any], kind: str
) -> None:
    df = pd.DataFrame(
        {
            "u": range(4),
            "s": ["a", "b", "c", "d"],
            "n": [0, 1, 2, 3],
            "b": [True, False, True, False],
            "d": pd.to_datetime(["2024-01-01"] * 4),
        }
    )
    column = {"text": "s", "numbers": "n", "True or False": "b", "date": "d"}[kind]
    session = Session(df, privacy_unit="u", budget=dp.PureDP(1), max_rows=1, engine=engine)
    with pytest.raises(InvalidParameterError, match=kind):
        session.evaluate(session.query().group_by(column, keys=keys).agg(count()), epsilon=0.5)
    assert session.spent == dp.PureDP(0)


def test_csv_conversion_error_discloses_a_raw_row(tmp_path: Path) -> None:
    """A CSV whose column type was sniffed from the first 20,480 rows: a later row that does not
    parse makes DuckDB quote the whole original line in the error."""
    n = 30_000
    values = (np.arange(n) % 1000).astype(str).astype(object)
    values[n - 1] = SECRET
    path = tmp_path / "t.csv"
    pd.DataFrame({"user": np.arange(n), "salary": values}).to_csv(path, index=False)
    ledger = Ledger.open(":memory:")
    ledger.create_budget("t", dp.PureDP(1), privacy_unit="user")
    session = Session(
        str(path), privacy_unit="user", budget=dp.PureDP(1), max_rows=1, ledger=ledger
    )
    message = ""
    try:
        session.evaluate(session.query().agg(dp_sum("salary", (0, 1000))), epsilon=0.01)
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
    assert message, "a CSV column is text: summing it needs a declaration"
    assert "schema=" in message, message
    assert SECRET not in message, f"the error shown to the analyst discloses a row: {message[:300]}"
    assert SECRET not in _messages(ledger)
    assert session.spent == dp.PureDP(0)


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_csv_declared_numeric_reads_unparsable_values_as_null(engine: str, tmp_path: Path) -> None:
    n = 30_000
    values = (np.arange(n) % 1000).astype(str).astype(object)
    values[n - 1] = SECRET
    path = tmp_path / "t.csv"
    pd.DataFrame({"user": np.arange(n), "salary": values}).to_csv(path, index=False)
    session = Session(
        str(path),
        privacy_unit="user",
        budget=dp.PureDP(1),
        max_rows=1,
        engine=engine,
        schema={"salary": "numeric"},
    )
    assert session.schema == {"user": "string", "salary": "numeric"}
    query = session.query().agg(count(), dp_sum("salary", (0, 1000)))
    plan = session.compile(query, epsilon=0.5).plans[0]
    exact = session.engine.run(plan).to_pydict()
    rows, total = (int(exact[c][0]) for c in plan.output_columns)
    assert rows == n
    expected = sum(int(v) for v in values[:-1])  # the unparsable value is NULL
    assert total == expected * 2 ** -plan.values[0].exponent
    release = session.evaluate(query, epsilon=0.5)
    assert release.table["count"][0] > 0


def test_cli_never_prints_an_engines_message(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "t.csv"
    pd.DataFrame({"user": range(10), "x": range(10)}).to_csv(path, index=False)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"Could not convert string '{SECRET}' on line 7")

    monkeypatch.setattr(Session, "evaluate", fail)
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger) as officer:
        officer.create_budget("t", dp.PureDP(1), privacy_unit="user")
    app = typer.Typer()
    app.command("query")(query_command)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(
        app,
        [
            *("query", str(path), "SELECT COUNT(*)", "--unit", "user", "--epsilon", "1"),
            *("--dataset", "t", "--max-rows", "1"),
        ],
        env={"DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code != 0
    assert "RuntimeError" in result.output
    assert SECRET not in result.output


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_data_dependent_refusal_before_reservation(engine: str) -> None:
    """Neighbouring tables (one unit's value changed) must not be told apart for free.

    The column kind is inferred from the *values* of an object column, so the same query is
    either released (and charged) or refused before the reservation (charged nothing) depending
    on one person's value: a deterministic distinguisher at zero cost.
    """
    outcomes = []
    for target in (50_000, "n/a"):
        df = pd.DataFrame(
            {"u": [1, 2, 3], "salary": pd.Series([40_000, 52_000, target], dtype=object)}
        )
        session = Session(df, privacy_unit="u", budget=dp.PureDP(1), max_rows=1, engine=engine)
        try:
            session.evaluate(session.query().agg(dp_sum("salary", (0, 100_000))), epsilon=0.5)
            outcomes.append(("released", session.spent))
        except dp.DPError:
            outcomes.append(("refused", session.spent))
    assert outcomes[0][0] == outcomes[1][0], (
        f"one unit's value decides release vs. free refusal: {outcomes}"
    )
    assert outcomes[0] == ("refused", dp.PureDP(0)), "an object column is text until declared"


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_declared_object_column_is_released_on_both_neighbours(engine: str) -> None:
    released = []
    for target in (50_000, "n/a"):
        df = pd.DataFrame(
            {"u": [1, 2, 3], "salary": pd.Series([40_000, 52_000, target], dtype=object)}
        )
        session = Session(
            df,
            privacy_unit="u",
            budget=dp.PureDP(1),
            max_rows=1,
            engine=engine,
            schema={"salary": "numeric"},
        )
        assert session.schema["salary"] == "numeric"
        session.evaluate(session.query().agg(dp_sum("salary", (0, 100_000))), epsilon=0.5)
        released.append(session.spent)
    assert released == [dp.PureDP(0.5), dp.PureDP(0.5)]
