"""`dpkit budget status|history` (the typer sub-app, driven through CliRunner)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from dpkit.cli.budget import budget_app
from dpkit.core._losses import ApproxDP, PureDP
from dpkit.ledger import BudgetMonitor, Ledger

runner = CliRunner()


def _ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.db"
    clock = iter(float(1_700_000_000 + 60 * i) for i in range(1000))
    with Ledger.open(path, monitor=BudgetMonitor(log=False), clock=lambda: next(clock)) as ledger:
        ledger.create_budget("visits", PureDP(1), privacy_unit="user_id")
        ledger.create_budget("visits", PureDP(0.5), analyst="ana")
        ledger.create_budget("sales", ApproxDP(2, 1e-6))
        for _ in range(3):
            ledger.commit(ledger.reserve("visits", PureDP(0.1), analyst="ana", query="count"))
        ledger.fail(ledger.reserve("sales", ApproxDP(0.5, 1e-7)), "timeout")
        ledger.reserve("visits", PureDP(0.2))
    return path


def test_status_table(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    result = runner.invoke(budget_app, ["status", "--ledger", str(path)])
    assert result.exit_code == 0, result.output
    assert "visits" in result.output and "ana" in result.output and "sales" in result.output
    assert "integrity: ok" in result.output
    assert "never committed" in result.output


def test_status_json_and_env(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    result = runner.invoke(
        budget_app, ["status", "--json", "--dataset", "visits"], env={"DPKIT_LEDGER": str(path)}
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    by_scope = {(b["dataset"], b["analyst"]): b for b in payload["budgets"]}
    assert by_scope[("visits", None)]["spent"] == {"epsilon": "1/2"}
    assert by_scope[("visits", "ana")]["used"] == 0.6
    assert payload["integrity"]["ok"] is True


def test_history_writes_png(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    png = tmp_path / "out" / "usage.png"
    result = runner.invoke(
        budget_app, ["history", "--ledger", f"sqlite:///{path}", "--plot", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert "reserve" in result.output and "commit" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    filtered = runner.invoke(
        budget_app, ["history", "-l", str(path), "-d", "visits", "-a", "ana", "--limit", "2"]
    )
    assert filtered.exit_code == 0
    assert "sales" not in filtered.output
    nobody = runner.invoke(budget_app, ["history", "-l", str(path), "-a", "bob"])
    assert nobody.exit_code == 2 and "analyst 'bob' has no budget" in nobody.output
    assert "Known analysts: ana" in nobody.output


def test_missing_and_corrupt_ledgers_give_clear_errors(tmp_path: Path) -> None:
    result = runner.invoke(budget_app, ["status", "--ledger", str(tmp_path / "nope.db")])
    assert result.exit_code == 2 and "no ledger" in result.output
    assert "dpkit budget create" in result.output
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 1000)
    result = runner.invoke(budget_app, ["status", "--ledger", str(bad)])
    assert result.exit_code == 2 and "not a dpkit ledger" in result.output
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    result = runner.invoke(budget_app, ["history", "--ledger", str(other)])
    assert result.exit_code == 2 and "not a dpkit ledger" in result.output


def test_create_uses_the_default_ledger(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg"), "DPKIT_LEDGER": ""}
    result = runner.invoke(
        budget_app,
        ["create", "visits", "--epsilon", "2", "--delta", "1e-7", "--unit", "user_id"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    default = tmp_path / "xdg" / "dpkit" / "ledger.sqlite"
    assert default.exists() and str(default) in result.output
    assert "ε=2, δ=1e-07 per user_id" in result.output
    status = runner.invoke(budget_app, ["status"], env=env)
    assert status.exit_code == 0 and "visits" in status.output and str(default) in status.output
    for args, message in [
        (["create", "x", "--epsilon", "1", "--rho", "1", "--unit", "u"], "not both"),
        (["create", "x", "--unit", "u"], "--epsilon"),
        (["create", "x", "--rho", "-2", "--unit", "u"], "--rho must be a positive number"),
        (["create", "x", "--epsilon", "1", "--delta", "0.5", "--unit", "u"], "--delta"),
    ]:
        refused = runner.invoke(budget_app, args, env=env)
        assert refused.exit_code == 2 and message in refused.output, refused.output


def test_history_fits_80_columns_without_cutting_dates(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    for width in (80, 120):
        result = runner.invoke(
            budget_app, ["history", "-l", str(path)], env={"COLUMNS": str(width)}
        )
        assert result.exit_code == 0, result.output
        # the ledger's path is printed whole (unwrapped, so it can be copied): its length is
        # the temporary directory's, not the table's
        lines = [line for line in result.output.splitlines() if str(path) not in line]
        assert max(len(line) for line in lines) <= width
        assert sum("2023-11-14 22:1" in line for line in lines) >= 3  # full dates and times
        assert re.search(r"\d\d:\d\d:\d\d", result.output)


def test_status_reports_failed_integrity(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE budgets SET spent_xi = '0' WHERE dataset = 'visits' AND analyst = ''")
    conn.commit()
    conn.close()
    result = runner.invoke(budget_app, ["status", "--ledger", str(path)])
    assert result.exit_code == 2
    assert "integrity: FAILED" in result.output
