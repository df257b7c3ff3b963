"""Declared booleans count as 0/1 in numeric aggregates (issue 9): `SUM(is_fraud, 0, 1)` over
"True"/"False" text released noise around 3 against about 50 true rows, because the text became
NULL. Declared bool, it sums its true rows; undeclared text is refused before anything is spent."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import dpkit as dp
from dpkit.analytics import Session, mean
from dpkit.analytics import sum as dp_sum


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_a_declared_bool_column_sums_as_0_and_1(engine: str) -> None:
    df = pd.DataFrame({"u": range(1000), "flag": ["True"] * 300 + ["False"] * 650 + [""] * 50})
    session = Session(df, "u", dp.PureDP(100), max_rows=1, engine=engine, schema={"flag": "bool"})
    release = session.evaluate(
        session.query().agg(dp_sum("flag", (0, 1)), mean("flag", (0, 1))), epsilon=50
    )
    row = release.table.iloc[0]
    assert abs(row["sum_flag"] - 300) < 2
    assert abs(row["mean_flag"] - 300 / 950) < 0.01  # NULL (the empty text) is skipped


def test_the_cli_sums_a_declared_bool_and_refuses_undeclared_text(tmp_path: Path) -> None:
    from dpkit.cli import app
    from dpkit.ledger import Ledger

    data = tmp_path / "tx.csv"
    pd.DataFrame({"user": range(400), "is_fraud": ["True"] * 50 + ["False"] * 350}).to_csv(
        data, index=False
    )
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger) as officer:
        officer.create_budget("tx", dp.PureDP(100), privacy_unit="user")
    common = [
        *("query", str(data), "SELECT SUM(is_fraud, 0, 1)"),
        *("--dataset", "tx", "--epsilon", "20", "--max-rows", "1"),
    ]
    env = {"DPKIT_LEDGER": str(ledger), "COLUMNS": "120", "NO_COLOR": "1"}
    refused = CliRunner().invoke(app, common, env=env)
    assert refused.exit_code != 0 and "is_fraud" in refused.output
    with Ledger.open(ledger) as officer:
        assert officer.spent("tx") == dp.PureDP(0)  # refused before anything was spent
    answered = CliRunner().invoke(app, [*common, "--schema", "is_fraud=bool"], env=env)
    assert answered.exit_code == 0, answered.output
    numbers = [
        float(w.replace(",", ""))
        for w in re.findall(r"\d[\d,]*(?:\.\d+)?", answered.output)
        if w.replace(",", "").replace(".", "").isdigit()
    ]
    assert any(abs(x - 50) < 3 for x in numbers), answered.output
