"""`dpkit query` on a column declared ``--schema col=int`` (issue 21): its quantiles run the
exponential mechanism over the integers in their bounds (a public declaration, so the automatic
choice may use it), say so in a footnote, and print the mechanism's own statement of its rank
bound. A column declared ``float`` keeps the default grid; bounds spanning more than 2^16
integers fall back to it too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
import typer
from typer.testing import CliRunner

from dpkit.cli.query import query_command

app = typer.Typer()
app.command("query")(query_command)


@app.command()
def other() -> None:  # keeps "query" a sub-command, as in the main app
    """Unused."""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    from dpkit.core._losses import PureDP
    from dpkit.ledger import BudgetMonitor, Ledger

    rng = np.random.default_rng(0)
    values = rng.choice([8, 12, 12, 12, 16], 3000)  # 60% tied at 12
    data = tmp_path / "educ.csv"
    pd.DataFrame({"id": np.arange(3000), "educ": values}).to_csv(data, index=False)
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        opened.create_budget("educ", PureDP(100), privacy_unit="id")
    return data, ledger


def _run(setup: tuple[Path, Path], query: str, kind: str) -> str:
    data, ledger = setup
    args = [str(data), query, "--dataset", "educ", "--schema", f"educ={kind}"]
    args += ["--epsilon", "1", "--max-rows", "1", "--explain"]
    result = CliRunner().invoke(
        app, ["query", *args], env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)}
    )
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_int_columns_use_the_integers(setup: tuple[Path, Path]) -> None:
    out = _run(setup, "SELECT MEDIAN(educ, 0, 20)", "int")
    assert "exponential mechanism over 21 declared candidate values" in out
    assert "--schema educ=int, so the exponential mechanism runs over the integers 0 to 20" in out
    assert "at most q·n + " in out and "rows lie at or below it" in out
    assert "each value moved to its nearest candidate" in out
    assert "median_educ │ 12" in out
    assert "of the target rank" not in out


def test_float_columns_and_huge_integer_ranges_keep_the_grid(setup: tuple[Path, Path]) -> None:
    for kind, query in (("float", "MEDIAN(educ, 0, 20)"), ("int", "MEDIAN(educ, 0, 10000000)")):
        out = _run(setup, f"SELECT {query}", kind)
        assert "grid points of" in out
        assert "runs over the integers" not in out
        assert "rounded to the nearest point of the grid of step" in out
