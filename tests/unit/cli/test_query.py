"""`dpkit query` in-process (dpkit.cli.query) and the payroll demo section.

The real entry point is exercised in subprocesses by tests/unit/cli/test_main.py."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

import dpkit as dp
from dpkit.analytics import Session, count_distinct_units
from dpkit.analytics._querytext import parse_query
from dpkit.cli.query import query_command
from dpkit.core._losses import PureDP
from dpkit.demos.analytics import payroll_demo, payroll_table
from dpkit.errors import UnsupportedQueryError

app = typer.Typer()
runner = CliRunner()
app.command("query")(query_command)


@app.command()
def other() -> None:  # a second command keeps "query" a sub-command, as in the main app
    """Unused."""


@pytest.fixture(scope="module")
def payroll_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "payroll.csv"
    payroll_table(300).to_csv(path, index=False)
    return path


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    from dpkit.core._losses import PureDP
    from dpkit.ledger import BudgetMonitor, Ledger

    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path, monitor=BudgetMonitor(log=False)) as opened:
        opened.create_budget("payroll", PureDP(1), privacy_unit="employee_id")
    return path


def run(ledger: Path, *args: str) -> str:
    result = CliRunner().invoke(
        app,
        ["query", *args, "--dataset", "payroll", "--schema", "salary=float,month=int"],
        env={"COLUMNS": "160", "DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_query_prints_table_with_error_bars(payroll_csv: Path, ledger: Path) -> None:
    out = run(
        ledger,
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
    for text in ("Engineering", "Sales", "Legal", "[", "budget left", "ε=0", "bound applied"):
        assert text in out


def test_query_with_ledger_refuses_over_budget(payroll_csv: Path, ledger: Path) -> None:
    common = ["--unit", "employee_id", "--ledger", str(ledger), "--max-rows", "12"]
    out = run(
        ledger,
        str(payroll_csv),
        "SELECT COUNT(*), MEDIAN(salary, 0, 25000)",
        "--epsilon",
        "0.75",
        *common,
    )
    assert "ε=0.25" in out
    result = CliRunner().invoke(
        app,
        [
            "query",
            str(payroll_csv),
            "SELECT COUNT(*)",
            "--epsilon",
            "0.5",
            "-d",
            "payroll",
            *common,
        ],
    )
    assert result.exit_code == 2
    assert "only ε=0.25 remains" in result.output


def test_query_errors_are_readable(payroll_csv: Path, ledger: Path) -> None:
    for text, message in [
        ("SELECT SUM(salary)", "declare the clamping bounds"),
        ("SELECT COUNT(*) WHERE nope > 1", "nope"),
        ("SELECT COUNT(*); DROP TABLE t", "one SELECT"),
        ("SELECT COUNT(*) GROUP BY department", "δ"),
    ]:
        result = CliRunner().invoke(
            app,
            ["query", str(payroll_csv), text, "--epsilon", "1", "--max-rows", "1", "-d", "payroll"],
            env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
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
    assert [a.name for a in parsed.aggregations] == ["n", "q90_x"]
    assert (
        parse_query("SELECT QUANTILE(x, 0.5, 0, 1), QUANTILE(x, 0.999, 0, 1)").aggregations[0].name
        == "median_x"
    )
    assert parse_query("SELECT QUANTILE(x, 0.999, 0, 1)").aggregations[0].name == "q99_9_x"
    assert parse_query("SELECT COUNT(*) FROM tx").source == "tx"
    dated = parse_query("SELECT COUNT(*) WHERE d >= DATE '2024-03-01'")
    assert dated.where is not None and "2024-03-01" in dated.where.render()
    for bad in [
        "SELECT COUNT(*) FROM a JOIN b ON 1 = 1",
        "SELECT MAX(x)",
        "",
        "SELECT COUNT(*) WHERE x IN (SELECT 1)",
        "DELETE FROM t",
        "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
        "SELECT COUNT(*) FROM other.schema_table",
        "SELECT COUNT(*) WHERE d >= DATE 'not a date'",
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


def test_payroll_demo_bounds_departments_and_explains_the_gap() -> None:
    """Issue 21: the per-department counts were calibrated for 12 groups per employee (±108
    bars; "Finance 0 [0, 101]" for 125 people) and the medians landed in the empty pay gap
    with no word of why. One department per employee (max_groups=1) and a note."""
    from dpkit.demos.analytics import GAP_NOTE

    console = Console(record=True, width=200)
    payroll_demo(console)
    text = console.export_text()
    assert "max_groups=1" in text and GAP_NOTE.split(":")[0] in text
    table = payroll_table()
    session = Session(table, "employee_id", PureDP(1), max_rows=12)
    query = (
        session.query()
        .group_by("department", keys=["Engineering", "Finance"])
        .bound(max_groups=1)
        .agg(count_distinct_units("employees"))
    )
    assert "sensitivity L1=1," in session.explain(query, epsilon=1)


def test_query_with_sql_expressions_having_order_by_and_limit(
    payroll_csv: Path, ledger: Path
) -> None:
    """Issue 23: CASE, LIKE and arithmetic inside aggregates, and HAVING / ORDER BY / LIMIT
    applied to the released table: the charge is the query's ε, nothing more."""
    from dpkit.ledger import BudgetMonitor, Ledger

    out = run(
        ledger,
        str(payroll_csv),
        "SELECT department AS dept, COUNT(*) AS n, "
        "SUM(CASE WHEN title LIKE 'Eng%' OR title NOT LIKE '%a%' THEN salary * (1 - 0.1) "
        "ELSE 0 END, 0, 25000) AS pay FROM payroll WHERE month BETWEEN 1 AND 12 "
        "GROUP BY department HAVING n > 0 ORDER BY pay DESC LIMIT 2",
        "--epsilon",
        "0.5",
        "--max-rows",
        "12",
        "--keys",
        "department=Engineering,Sales,Legal",
    )
    assert "post-processing" in out and "pay" in out
    shown = [d for d in ("Engineering", "Sales", "Legal") if d in out]
    assert len(shown) == 2, out
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as books:
        assert books.budget("payroll").spent == PureDP(0.5)


FLAGS = ["--max-rows", "12", "--schema", "salary=float,month=int"]


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("SELECT SUM(YEAR(title), 0, 1)", "declare"),
        ("SELECT SUM(title * 2, 0, 1)", "uses it as a number"),
        ("SELECT COUNT(*) AS n HAVING nope > 1", "released columns only"),
        ("SELECT COUNT(*) HAVING SUM(salary, 0, 1) > 1", "its own release and budget"),
    ],
)
def test_query_refuses_wrong_expressions_before_any_charge(
    payroll_csv: Path, ledger: Path, query: str, said: str
) -> None:
    from dpkit.ledger import BudgetMonitor, Ledger

    result = CliRunner().invoke(
        app,
        ["query", str(payroll_csv), query, "--dataset", "payroll", "--epsilon", "0.5", *FLAGS],
        env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code != 0 and said in " ".join(result.output.split()), result.output
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as books:
        assert books.budget("payroll").charges == 0


def test_query_process_loads_only_what_a_query_uses(payroll_csv: Path, ledger: Path) -> None:
    """A whole ``dpkit query`` process (stderr not a terminal) never loads scipy (the noise of a
    count and a mean does not need it), urllib (only a budget-alert webhook does) nor
    rich.progress (the spinner shows nothing off a terminal): issue 26's start-up budget."""
    import os
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[3] / "src")
    argv = ["dpkit", "query", str(payroll_csv), "SELECT department, COUNT(*) AS n, "]
    argv[-1] += "AVG(salary, 0, 25000) AS s GROUP BY department"
    argv += ["--dataset", "payroll", "--ledger", str(ledger), "--epsilon", "0.5", *FLAGS]
    argv += ["--unit", "employee_id", "--keys", "department=Engineering,Sales,Legal"]
    probe = (
        f"import sys\nsys.argv = {argv!r}\nfrom dpkit.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "unused = {'scipy', 'urllib.request', 'http.client', 'rich.progress'}\n"
        "print('loaded:', sorted(unused & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": src},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "Engineering" in done.stdout
    assert done.stdout.splitlines()[-1] == "loaded: []"


# ------------------------------------------------------------------ --tune (issue 25)


def _tune_setup(tmp_path: Path) -> tuple[Path, Path]:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(800), rng.integers(1, 4, 800))
    data = tmp_path / "d.csv"
    pd.DataFrame({"user": ids, "x": rng.uniform(0, 100, ids.size)}).to_csv(data, index=False)
    ledger = tmp_path / "l.db"
    from dpkit.ledger import Ledger

    Ledger.open(str(ledger)).create_budget("d", dp.PureDP(3), privacy_unit="user")
    return data, ledger


def test_tune_spends_the_share_tuning_and_the_rest_answering(tmp_path: Path) -> None:
    data, ledger = _tune_setup(tmp_path)
    result = runner.invoke(
        app,
        [
            "query",
            str(data),
            "SELECT COUNT(*), AVG(x, 0, 100)",
            "--dataset",
            "d",
            "--epsilon",
            "1",
            "--tune",
            "0.25",
            "--schema",
            "x=float",
            "--ledger",
            str(ledger),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "tuning release charged ε=0.25" in result.output
    assert "expected error if released with ε=0.75" in result.output
    assert "chosen privately by --tune" in result.output
    assert "--tune spent ε=0.25 before this answer" in " ".join(result.output.split())
    from dpkit.ledger import Ledger

    opened = Ledger.open(str(ledger))
    charged = [e.loss for e in opened.history("d") if e.kind == "reserve"]
    assert charged == [dp.PureDP(Fraction(1, 4)), dp.PureDP(Fraction(3, 4))]


def test_tune_with_explain_spends_only_the_tuning_share(tmp_path: Path) -> None:
    data, ledger = _tune_setup(tmp_path)
    result = runner.invoke(
        app,
        [
            "query",
            str(data),
            "SELECT COUNT(*)",
            "--dataset",
            "d",
            "--epsilon",
            "1",
            "--tune",
            "0.2",
            "--explain",
            "--ledger",
            str(ledger),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "nothing was answered" in result.output and "plan:" in result.output
    from dpkit.ledger import Ledger

    opened = Ledger.open(str(ledger))
    assert opened.remaining("d") == dp.PureDP(Fraction(14, 5))


@pytest.mark.parametrize(("share", "extra"), [("0", []), ("1.5", []), ("0.2", ["--rho", "1"])])
def test_bad_tune_refused_before_anything_is_charged(
    tmp_path: Path, share: str, extra: list[str]
) -> None:
    data, ledger = _tune_setup(tmp_path)
    budget = extra or ["--epsilon", "1"]
    result = runner.invoke(
        app,
        [
            "query",
            str(data),
            "SELECT COUNT(*)",
            "--dataset",
            "d",
            *budget,
            "--tune",
            share,
            "--ledger",
            str(ledger),
        ],
    )
    assert result.exit_code != 0
    assert "--tune" in result.output
    from dpkit.ledger import Ledger

    assert Ledger.open(str(ledger)).remaining("d") == dp.PureDP(3)


def test_tune_over_budget_is_refused_before_the_tuning_is_charged(tmp_path: Path) -> None:
    """--epsilon 4 on a budget of 3: the tuning share (1) fits, the answer (3) then would not.
    Both are checked before anything is charged (the tuning used to be charged, then the
    answer refused)."""
    data, ledger = _tune_setup(tmp_path)
    result = runner.invoke(
        app,
        [
            "query",
            str(data),
            "SELECT COUNT(*)",
            "--dataset",
            "d",
            "--epsilon",
            "4",
            "--tune",
            "0.25",
            "--ledger",
            str(ledger),
        ],
    )
    assert result.exit_code != 0
    assert "nothing was charged" in result.output
    from dpkit.ledger import Ledger

    assert Ledger.open(str(ledger)).remaining("d") == dp.PureDP(3)
