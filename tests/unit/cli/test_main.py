"""The real ``dpkit`` entry point, run in subprocesses: stdout, stderr and exit codes.

Each subprocess costs a Python start-up, so the refusals run concurrently in one test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import dpkit

SRC = str(Path(dpkit.__file__).resolve().parents[1])
ANSI = re.compile(r"\x1b\[")


def dpkit_run(
    *args: str, cwd: Path, ledger: Path | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DPKIT_LEDGER", "NO_COLOR")}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "100"
    env["HOME"] = str(cwd)  # the default ledger lands in the test's directory
    env.pop("XDG_DATA_HOME", None)
    if ledger is not None:
        env["DPKIT_LEDGER"] = str(ledger)
    env.update(extra_env or {})
    result = subprocess.run(
        [sys.executable, "-m", "dpkit.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )
    # piped output never carries colour codes, and no command ever shows a traceback
    assert not ANSI.search(result.stdout + result.stderr), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _transactions(path: Path, users: int = 400, rows: int = 4000) -> None:
    """A deterministic transactions file (no randomness): about 10 rows per user."""
    lines = ["user_id,amount,category,is_fraud,day"]
    categories = ("food", "travel", "rent")
    for i in range(rows):
        user = (i * 7919) % users
        amount = 5 + (i * 37) % 200 + (i % 100) / 100
        day = f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}"
        lines.append(f"{user},{amount:.2f},{categories[i % 3]},{i % 50 == 0},{day}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    _transactions(root / "tx.csv")
    bad = (root / "tx.csv").read_text(encoding="utf-8").splitlines()
    bad.insert(50, '7,SECRETVALUE,"unterminated,food')
    (root / "broken.csv").write_text("\n".join(bad) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def ledger(workdir: Path) -> Path:
    path = workdir / "ledger.sqlite"
    for args in (
        ("tx", "--epsilon", "10", "--unit", "user_id"),
        ("txd", "--epsilon", "10", "--delta", "1e-3", "--unit", "user_id"),
        ("small", "--epsilon", "1", "--unit", "user_id"),
    ):
        created = dpkit_run("budget", "create", *args, cwd=workdir, ledger=path)
        assert created.returncode == 0, created.stderr
        assert f"created the budget of dataset {args[0]!r}" in created.stdout
        assert str(path) in created.stdout
    return path


def _spent(workdir: Path, ledger: Path, dataset: str) -> str:
    status = dpkit_run("budget", "status", "--json", cwd=workdir, ledger=ledger)
    assert status.returncode == 0, status.stderr
    payload = json.loads(status.stdout)
    return next(b["spent"]["epsilon"] for b in payload["budgets"] if b["dataset"] == dataset)


def test_help_teaches_and_version_is_light(workdir: Path) -> None:
    helped = dpkit_run("--help", cwd=workdir, extra_env={"COLUMNS": "200"})
    assert helped.returncode == 0
    assert "DPKIT_LEDGER" in helped.stdout and "ledger.sqlite" in helped.stdout
    query_help = dpkit_run("query", "--help", cwd=workdir, extra_env={"COLUMNS": "200"})
    for needle in ("Syntax", "Examples", "QUANTILE", "DATE '2024-03-01'", "--max-rows", "--keys"):
        assert needle in query_help.stdout, needle
    # --version loads none of the heavy layers (start-up stays fast)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nsys.argv = ['dpkit', '--version']\nfrom dpkit.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = {'pandas', 'duckdb', 'sqlglot', 'pyarrow', 'matplotlib', 'rich.table'}\n"
            "print(sorted(heavy & set(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        check=True,
    )
    assert probe.stdout.splitlines() == [dpkit.__version__, "[]"]


def test_query_prints_bound_postprocessed_values_and_receipt(workdir: Path, ledger: Path) -> None:
    before = _spent(workdir, ledger, "tx")
    result = dpkit_run(
        "query",
        "tx.csv",
        "SELECT COUNT(*), COUNT(DISTINCT user_id), SUM(amount, 0, 300), "
        "QUANTILE(amount, 0.9, 0, 300) FROM tx WHERE day >= DATE '2024-03-01'",
        "--dataset",
        "tx",
        "--epsilon",
        "0.5",
        "--max-rows",
        "10",
        "--schema",
        "amount=float",
        "--explain",
        cwd=workdir,
        ledger=ledger,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "at most 10 row(s) per person (--max-rows)" in out
    assert "Rows beyond the bound were dropped" in out
    assert "undercount" in out.split("query:")[0]  # --explain says so too
    assert "Post-processed for display" in out
    assert "q90_amount" in out and "q9_amount" not in out
    assert f"ledger: {ledger}" in out
    assert "receipt rcpt-" in out
    count_row = next(line for line in out.splitlines() if line.startswith("│ count "))
    numbers = re.findall(r"-?[\d,]+(?:\.\d+)?", count_row)
    assert numbers and all(not n.startswith("-") and "." not in n for n in numbers)
    assert "alert" not in out and "alert" not in result.stderr
    assert _spent(workdir, ledger, "tx") != before  # one ledger, tracked across runs


def test_alerts_one_line_per_crossing_on_stderr(workdir: Path, ledger: Path) -> None:
    result = dpkit_run(
        "query",
        "tx.csv",
        "SELECT COUNT(*)",
        "-d",
        "small",
        "--epsilon",
        "0.9",
        "--max-rows",
        "10",
        cwd=workdir,
        ledger=ledger,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("alert:")]
    assert lines == [
        "alert: dataset 'small' crossed 50% of its budget (90.0% used)",
        "alert: dataset 'small' crossed 80% of its budget (90.0% used)",
    ]
    assert "alert" not in result.stdout


def test_private_groups_footnote_and_delta_warning(workdir: Path, ledger: Path) -> None:
    result = dpkit_run(
        "query",
        "tx.csv",
        "SELECT category, COUNT(*) GROUP BY category",
        "-d",
        "txd",
        "--epsilon",
        "1",
        "--delta",
        "1e-4",
        "--max-rows",
        "5",
        "--max-groups",
        "1",
        cwd=workdir,
        ledger=ledger,
    )
    assert result.returncode == 0, result.stderr
    assert "groups with few people are suppressed" in result.stdout.replace("\n", " ")
    assert "warning: δ = 0.0001 is large" in result.stderr
    assert "1/n" in result.stderr


REFUSALS: list[tuple[Sequence[str], str, int]] = [
    (("query", "tx.csv", "SELECT COUNT(*)", "-d", "tx", "--epsilon", "1"), "per-person bound", 2),
    (
        ("query", "tx.csv", "SELECT COUNT(*)", "-d", "tx", "--epsilon", "1", "--rho", "0.1"),
        "--rho and --epsilon",
        2,
    ),
    (
        (
            "query",
            "tx.csv",
            "SELECT COUNT(*)",
            "-d",
            "tx",
            "--epsilon",
            "1e-300",
            "--max-rows",
            "1",
        ),
        "below dpkit's floor of 1e-06",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT COUNT(*)", "-d", "tx", "--epsilon", "1e308", "--max-rows", "1"),
        "1e+308",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT SUM(amout, 0, 5)", "-d", "tx", "--epsilon", "1"),
        "unknown column 'amout'",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT SUM(category, 0, 10)", "-d", "tx", "--epsilon", "1"),
        "--schema category=float",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT COUNT(*) FROM other", "-d", "tx", "--epsilon", "1"),
        "may only read the input 'tx.csv'",
        2,
    ),
    (
        (
            "query",
            "tx.csv",
            "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
            "-d",
            "tx",
            "--epsilon",
            "1",
        ),
        "FROM may only name the input",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT COUNT(*)", "-d", "txd", "--epsilon", "1", "--delta", "0.5"),
        "--allow-large-delta",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT COUNT(*)", "-d", "nope", "--epsilon", "1"),
        "dataset 'nope' does not exist",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT COUNT(*)", "-d", "tx", "--epsilon", "1", "--ledger", "tx.csv"),
        "is not a dpkit ledger",
        2,
    ),
    (
        (
            "query",
            "tx.csv",
            "SELECT category, COUNT(*) GROUP BY category",
            "-d",
            "tx",
            "--epsilon",
            "1",
        ),
        "--keys",
        2,
    ),
    (("query", "tx.csv", "SELECT COUNT(*)", "-d", "tx", "--budget", "1"), "--budget", 2),
    (("query", "tx.csv", "SELECT COUNT(*)", "--epsilon", "1"), "dpkit budget create", 2),
    (("budget", "create", "x", "--epsilon", "-1", "--unit", "u"), "--epsilon must be", 2),
    (("budget", "create", "tx", "--epsilon", "1", "--unit", "u"), "already has a budget", 2),
    (("budget", "history", "--dataset", "nope"), "dataset 'nope' does not exist", 2),
    (("budget", "history", "--plot", "tx.csv/usage.png"), "--plot", 2),
    (("budget", "status", "--ledger", "missing.sqlite"), "no ledger at", 2),
    (("ladder", "reproduce", "--out", "tx.csv", "--quick"), "existing file", 2),
    (("ladder", "reproduce", "--out", "tx.csv/figures", "--quick"), "cannot write to --out", 2),
    (
        ("query", "tx.csv", "SELECT COUNT(*) WHERE amout > 3", "-d", "tx", "--epsilon", "1"),
        "unknown column 'amout' in WHERE",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT COUNT(*) WHERE amount > 3", "-d", "tx", "--epsilon", "1"),
        "--schema amount=float",
        2,
    ),
    (
        ("query", "tx.csv", "SELECT COUNT(*)", "-d", "tx", "--max-groups", "2", "--epsilon", "1"),
        "--max-groups alone",
        2,
    ),
]
_BOUND = ("--max-rows", "10")


def _cases(selected: Sequence[int]) -> list[tuple[list[str], str, int]]:
    out = []
    for i in selected:
        args, message, code = REFUSALS[i]
        needs_bound = (
            args[0] == "query"
            and not {"--max-rows", "--max-groups"} & set(args)
            and "bound" not in message
        )
        out.append(([*args, *_BOUND] if needs_bound else list(args), message, code))
    return out


# these run as real subprocesses; the rest run in-process through the same app (start-up is
# the cost of a subprocess, and the code path is the same)
_IN_SUBPROCESS = (0, 2, 5, 8, 11, 16)


def test_refusals_through_the_real_entry_point(workdir: Path, ledger: Path) -> None:
    cases = _cases(_IN_SUBPROCESS)
    before = _spent(workdir, ledger, "tx")
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(
            pool.map(lambda case: dpkit_run(*case[0], cwd=workdir, ledger=ledger), cases)
        )
    _check_refusals(cases, [(r.returncode, r.stdout, r.stderr) for r in results])
    assert _spent(workdir, ledger, "tx") == before  # no refusal was charged


def test_every_other_refusal_in_process(
    workdir: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from dpkit.cli import app

    monkeypatch.chdir(workdir)
    cases = _cases([i for i in range(len(REFUSALS)) if i not in _IN_SUBPROCESS])
    runner = CliRunner()
    results = []
    for args, _, _ in cases:
        result = runner.invoke(
            app, args, env={"DPKIT_LEDGER": str(ledger), "COLUMNS": "100", "NO_COLOR": "1"}
        )
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.exception,
        )
        results.append((result.exit_code, result.stdout, result.stderr))
    _check_refusals(cases, results)


def _check_refusals(
    cases: list[tuple[list[str], str, int]], results: list[tuple[int, str, str]]
) -> None:
    for (args, message, code), (returncode, _stdout, stderr) in zip(cases, results, strict=True):
        result = subprocess.CompletedProcess(args, returncode, _stdout, stderr)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        assert message in result.stderr.replace("\n", " "), (args, result.stderr)
        if "No such option" not in result.stderr:
            assert result.stderr.startswith("error: "), (args, result.stderr)
            assert len(result.stderr.strip().splitlines()) <= 2, (args, result.stderr)
        assert "Fraction(" not in result.stderr and not re.search(r"\d{30}", result.stderr)
        assert "Traceback" not in result.stderr and not ANSI.search(result.stderr)


def test_a_malformed_csv_file_fails_whole_after_the_charge(workdir: Path, ledger: Path) -> None:
    """Issue 21: one unbalanced quote used to make the engines read part of the file (and answer
    with exit 0); a malformed line used to be skipped. The file now fails whole, after the
    reservation (the file is private), charged, reported as unreadable, quoting nothing."""
    before = _spent(workdir, ledger, "tx")
    result = dpkit_run(
        "query",
        "broken.csv",
        "SELECT COUNT(*), SUM(amount, 0, 300)",
        "-d",
        "tx",
        "--epsilon",
        "0.1",
        "--max-rows",
        "5",
        "--schema",
        "amount=float",
        cwd=workdir,
        ledger=ledger,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: broken.csv could not be read;"), result.stderr
    assert "budget stays spent" in result.stderr and "check_csv('broken.csv')" in result.stderr
    assert "SECRETVALUE" not in result.stdout + result.stderr
    assert "line 51" not in result.stderr  # which line is wrong is private too
    assert _spent(workdir, ledger, "tx") != before  # charged


def test_ladder_reproduce_refuses_to_overwrite(workdir: Path) -> None:
    out = workdir / "ladder"
    out.mkdir()
    (out / "ladder_table.csv").write_text("earlier run", encoding="utf-8")
    result = dpkit_run("ladder", "reproduce", "--out", str(out), "--quick", cwd=workdir)
    assert result.returncode == 2
    assert "already holds ladder_table.csv" in result.stderr
    assert "--force" in result.stderr
