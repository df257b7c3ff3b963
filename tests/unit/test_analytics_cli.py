"""`dpkit query` (mounted from dpkit.analytics.cli) and the payroll demo section."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from dpkit.analytics.cli import query_command
from dpkit.analytics.demo import payroll_demo, payroll_table
from dpkit.analytics.querytext import parse_query
from dpkit.errors import UnsupportedQueryError

app = typer.Typer()
app.command("query")(query_command)


@app.command()
def other() -> None:  # a second command keeps "query" a sub-command, as in the main app
    """Unused."""


@pytest.fixture(scope="module")
def payroll_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "payroll.csv"
    payroll_table(300).to_csv(path, index=False)
    return path


def run(*args: str) -> str:
    result = CliRunner().invoke(app, ["query", *args], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    return result.output


def test_query_prints_table_with_error_bars(payroll_csv: Path) -> None:
    out = run(
        str(payroll_csv),
        "SELECT department, COUNT(*), AVG(salary, 0, 25000) WHERE month >= 7 GROUP BY department",
        "--unit",
        "employee_id",
        "--epsilon",
        "1",
        "--max-rows",
        "6",
        "--keys",
        "department=Engineering,Sales,Legal",
    )
    for text in ("Engineering", "Sales", "Legal", "±", "budget left", "ε=0"):
        assert text in out


def test_query_with_ledger_refuses_over_budget(payroll_csv: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    common = ["--unit", "employee_id", "--ledger", str(ledger), "--budget", "1", "--max-rows", "12"]
    out = run(
        str(payroll_csv), "SELECT COUNT(*), MEDIAN(salary, 0, 25000)", "--epsilon", "0.75", *common
    )
    assert "ε=0.25" in out
    result = CliRunner().invoke(
        app, ["query", str(payroll_csv), "SELECT COUNT(*)", "--epsilon", "0.5", *common]
    )
    assert result.exit_code == 2
    assert "only ε=0.25 remains" in result.output


def test_query_errors_are_readable(payroll_csv: Path) -> None:
    for text, message in [
        ("SELECT SUM(salary)", "declare the clamping bounds"),
        ("SELECT COUNT(*) WHERE nope > 1", "nope"),
        ("SELECT COUNT(*); DROP TABLE t", "one SELECT"),
        ("SELECT COUNT(*) GROUP BY department", "δ"),
    ]:
        result = CliRunner().invoke(
            app,
            ["query", str(payroll_csv), text, "--unit", "employee_id", "--epsilon", "1"],
            env={"COLUMNS": "200"},
        )
        assert result.exit_code == 2, result.output
        assert message in result.output.replace("\n", " "), result.output


def test_parse_query_whitelist() -> None:
    parsed = parse_query(
        "SELECT d, COUNT(*) AS n, QUANTILE(x, 0.9, 0, 10) WHERE x IS NULL OR "
        "d IN ('a', 'b') GROUP BY d",
        "u",
    )
    assert parsed.group_by == ("d",)
    assert [a.name for a in parsed.aggregations] == ["n", "q9_x"]
    for bad in [
        "SELECT COUNT(*) FROM a JOIN b ON 1 = 1",
        "SELECT MAX(x)",
        "",
        "SELECT COUNT(*) WHERE x IN (SELECT 1)",
        "DELETE FROM t",
    ]:
        with pytest.raises(UnsupportedQueryError):
            parse_query(bad)


def test_payroll_demo_runs_end_to_end() -> None:
    console = Console(record=True, width=140)
    payroll_demo(console)
    text = console.export_text()
    for needle in (
        "Per department",
        "Engineering",
        "partition",
        "mechanism chosen for the pay bill: ladder",
        "commit",
        "budget left for 'payroll'",
    ):
        assert needle in text
