"""`dpkit query ... --metadata FILE` (issue 25): the table's public metadata, registered once
in a TOML file (column kinds, bounds and key sets; the unit's max_rows / max_groups), read by
the command instead of being retyped in every query."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dpkit.cli.query import query_command
from dpkit.core._losses import PureDP
from dpkit.demos.analytics import payroll_table
from dpkit.ledger import BudgetMonitor, Ledger

app = typer.Typer()
app.command("query")(query_command)


@app.command()
def other() -> None:  # a second command keeps "query" a sub-command, as in the main app
    """Unused."""


META = """
max_rows = 12

[columns.salary]
kind = "float"
bounds = [0, 25000]

[columns.month]
kind = "int"

[columns.department]
kind = "text"
keys = ["Engineering", "Sales", "Legal"]
"""


@pytest.fixture(scope="module")
def payroll_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "payroll.csv"
    payroll_table(300).to_csv(path, index=False)
    return path


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path, monitor=BudgetMonitor(log=False)) as opened:
        opened.create_budget("payroll", PureDP(1), privacy_unit="employee_id")
    return path


def _meta(tmp_path: Path, text: str = META) -> Path:
    path = tmp_path / "payroll.toml"
    path.write_text(text)
    return path


def run(ledger: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["query", *args, "--dataset", "payroll"],
        env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
    )
    return result.exit_code, " ".join(result.output.split())


def _spent(ledger: Path) -> object:
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        return opened.spent("payroll")


def test_registered_bounds_keys_and_max_rows(
    payroll_csv: Path, ledger: Path, tmp_path: Path
) -> None:
    meta = _meta(tmp_path)
    # no --max-rows, no --keys (pure ε: the registered key set is public), no bounds in SQL
    code, out = run(
        ledger,
        str(payroll_csv),
        "SELECT department, COUNT(*), AVG(salary) GROUP BY department",
        "--metadata",
        str(meta),
        "--epsilon",
        "0.5",
        "--explain",
    )
    assert code == 0, out
    for text in ("Engineering", "Sales", "Legal", "mean_salary", "max_rows=12", "[0, 25000]"):
        assert text in out, text
    assert "found privately" not in out
    assert "at most 12 row(s) per person (max_rows in --metadata)" in out


def test_query_and_flags_win(payroll_csv: Path, ledger: Path, tmp_path: Path) -> None:
    code, out = run(
        ledger,
        str(payroll_csv),
        "SELECT AVG(salary, 0, 9000)",
        "--metadata",
        str(_meta(tmp_path)),
        "--max-rows",
        "3",
        "--epsilon",
        "0.1",
        "--explain",
    )
    assert code == 0, out
    assert "[0, 9000]" in out and "max_rows=3" in out and "[0, 25000]" not in out
    assert "(--max-rows)" in out


def test_no_bounds_anywhere_is_refused_before_the_ledger(
    payroll_csv: Path, ledger: Path, tmp_path: Path
) -> None:
    meta = _meta(tmp_path, "max_rows = 12\n[columns.salary]\nkind = 'float'\n")
    code, out = run(
        ledger, str(payroll_csv), "SELECT SUM(salary)", "--metadata", str(meta), "--epsilon", "1"
    )
    assert code == 2, out
    assert "'salary'" in out and "--metadata FILE" in out and "[columns.salary]" in out, out
    assert _spent(ledger) == PureDP(0)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("max_rows = -1\n", "max_rows"),
        ("[columns.salary]\nbounds = [1, 0]\n", "salary"),
        ("[columns.salary\n", "TOML"),
    ],
)
def test_bad_metadata_file(
    payroll_csv: Path, ledger: Path, tmp_path: Path, text: str, named: str
) -> None:
    code, out = run(
        ledger,
        str(payroll_csv),
        "SELECT COUNT(*)",
        "--metadata",
        str(_meta(tmp_path, text)),
        "--epsilon",
        "1",
    )
    assert code == 2 and "--metadata" in out and named in out, out
    assert _spent(ledger) == PureDP(0)


def test_metadata_naming_a_missing_column(payroll_csv: Path, ledger: Path, tmp_path: Path) -> None:
    meta = _meta(tmp_path, "max_rows = 2\n[columns.salry]\nbounds = [0, 1]\n")
    code, out = run(
        ledger, str(payroll_csv), "SELECT COUNT(*)", "--metadata", str(meta), "--epsilon", "1"
    )
    assert code == 2 and "salry" in out, out
    assert _spent(ledger) == PureDP(0)


def test_metadata_is_the_servers_with_server(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "query",
            "people",
            "SELECT COUNT(*)",
            "--metadata",
            str(_meta(tmp_path)),
            "--epsilon",
            "1",
            "--server",
            "http://127.0.0.1:9",
            "--token",
            "t",
        ],
    )
    assert result.exit_code == 2 and "--metadata" in result.output, result.output
