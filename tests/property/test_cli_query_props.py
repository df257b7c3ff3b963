"""Property test of the three-outcome rule (issue 21) for ``dpkit query``, in-process through
its CLI runner, with hostile SQL and options, read off the ledger file before and after:

* exit 2: refused — the ledger is unchanged, and the output is one ``error:`` line (and a hint);
* exit 0: released — one more reservation and its commit, the spend grew by the commit's loss;
* exit 1: failed after the reservation — the reservation is recorded as failed and charged.
  Over a well-formed CSV file nothing can fail to be read, so exit 1 is itself a bug here; a
  malformed file must give it.

No output ever holds a traceback. SQL nesting stays shallow here: bounding the parser's depth
and size is the service branch's work (querytext.py); the Session's own expression limits are
tested through the builder (test_session_outcomes_props.py).
"""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import dpkit as dp
from dpkit.ledger import BudgetMonitor, Ledger

FAST = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

ODD = st.text(
    alphabet=st.sampled_from(["a", "é", "\u202e", "\U0001f600", "'", '"', ",", " ", "1", "%"]),
    max_size=10,
)
NUMBER_TEXT = st.sampled_from(
    ["0", "1", "-1", "0.5", "1e308", "1e-308", "1e400", "99999999999999999999", "-0", ".5", "7"]
)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@st.composite
def sql_predicates(draw: Any, depth: int = 0) -> str:
    if depth >= 4 or draw(st.integers(0, 2)) == 0:
        column = draw(st.sampled_from(["x", "k", "level", "t", "nope", '"é"']))
        kind = draw(st.integers(0, 6))
        value = draw(st.one_of(NUMBER_TEXT, ODD.map(_quote)))
        if kind == 0:
            return f"{column} {draw(st.sampled_from(['=', '!=', '<', '<=', '>', '>=']))} {value}"
        if kind == 1:
            values = draw(
                st.lists(st.one_of(NUMBER_TEXT, ODD.map(_quote)), min_size=1, max_size=60)
            )
            return f"{column} IN ({', '.join(values)})"
        if kind == 2:
            return f"{column} BETWEEN {draw(NUMBER_TEXT)} AND {draw(NUMBER_TEXT)}"
        if kind == 3:
            return f"{column} IS {'NOT ' if draw(st.booleans()) else ''}NULL"
        if kind == 4:
            return f"{column} >= DATE {_quote(draw(st.sampled_from(['2024-03-01', '2024-13-01'])))}"
        if kind == 5:
            return f"{column} * {draw(NUMBER_TEXT)} > {draw(NUMBER_TEXT)}"
        return f"NOT {column} = {value}"
    left, right = draw(sql_predicates(depth + 1)), draw(sql_predicates(depth + 1))
    op = draw(st.sampled_from(["AND", "OR"]))
    return f"({left} {op} {right})"


AGGREGATES = st.sampled_from(
    [
        "COUNT(*)",
        "COUNT(DISTINCT u)",
        "COUNT(DISTINCT x)",
        "SUM(x, 0, 10)",
        "SUM(x, -1e308, 1e308)",
        "AVG(x, 0, 1e-300)",
        "AVG(x, 10, 0)",
        "VARIANCE(x, 0, 10)",
        "STDDEV(x, 0, 10)",
        "MEDIAN(x, 0, 10)",
        "QUANTILE(x, 0.9, 0, 10)",
        "QUANTILE(x, 2, 0, 10)",
        "HISTOGRAM(x, 0, 5, 10)",
        "HISTOGRAM(x, " + ", ".join(str(i) for i in range(300)) + ")",
        "SUM(k, 0, 1)",
        "MAX(x)",
        "SUM(x)",
    ]
)


@st.composite
def invocations(draw: Any) -> list[str]:
    aggs = draw(st.lists(AGGREGATES, min_size=1, max_size=3, unique=True))
    grouped = draw(st.booleans())
    sql = "SELECT " + ("k, " if grouped else "") + ", ".join(aggs)
    if draw(st.booleans()):
        sql += " WHERE " + draw(sql_predicates())
    if grouped:
        sql += " GROUP BY k"
    args = [sql, "-d", "t", "--max-rows", draw(st.sampled_from(["1", "3", "0", "1000000"]))]
    loss = draw(
        st.sampled_from(
            [
                ["--epsilon", "1"],
                ["--epsilon", "0.5", "--delta", "1e-9"],
                ["--rho", "0.5"],
                ["--epsilon", "1e6"],
                ["--epsilon", "1e7"],
                ["--epsilon", "1e-300"],
                ["--epsilon", "nan"],
                ["--epsilon", "1", "--delta", "0.5"],
            ]
        )
    )
    args += loss
    if grouped and draw(st.booleans()):
        keys = draw(st.lists(ODD.filter(lambda s: "," not in s and s), min_size=1, max_size=50))
        args += ["--keys", "k=" + ",".join(keys)]
    schema = draw(st.sampled_from(["x=float,level=int", "x=float", "", "x=date", "k=float"]))
    if schema:
        args += ["--schema", schema]
    args += ["--engine", draw(st.sampled_from(["duckdb", "pandas"]))]
    return args


def _app() -> typer.Typer:
    from dpkit.cli.query import query_command

    app = typer.Typer()
    app.command("query")(query_command)
    app.command("other")(lambda: None)
    return app


def _state(ledger: Path) -> tuple[list[Any], Any]:
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        return opened.history(), opened.spent("t")


def _parts(loss: Any) -> tuple[Fraction, ...]:
    if isinstance(loss, dp.ZCDP):
        return (loss.rho,)
    return (loss.epsilon, getattr(loss, "delta", Fraction(0)))


def _check(result: Any, ledger: Path, before: tuple[list[Any], Any], csv_ok: bool) -> str:
    output = result.output
    assert "Traceback" not in output, output
    entries, spent = _state(ledger)
    new = [e for e in entries[len(before[0]) :] if e.kind in ("reserve", "commit", "fail")]
    kinds = [e.kind for e in new]
    if result.exit_code == 0:
        assert kinds == ["reserve", "commit"], (kinds, output)
        moved = tuple(a - b for a, b in zip(_parts(spent), _parts(before[1]), strict=True))
        assert moved == _parts(new[1].loss), (moved, new[1].loss)
        return "released"
    if result.exit_code == 2:
        assert kinds == [] and spent == before[1], (kinds, output)
        assert output.startswith("error: ") or "Usage:" in output, output
        assert "internal error" not in output, output  # a dpkit bug caught before the charge
        return "refused"
    assert result.exit_code == 1, (result.exit_code, output)
    assert kinds == ["reserve", "fail"], (kinds, output)  # never a raw failure before the charge
    assert csv_ok, f"failed after the reservation: {output}"
    return "failed"


@pytest.fixture(scope="module")
def workspace() -> Any:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        rng = np.random.default_rng(5)
        n = 300
        pd.DataFrame(
            {
                "u": np.arange(n),
                "x": np.round(rng.uniform(-2, 12, n), 2),
                "k": rng.choice(["a", "b", "é\u202e"], n),
                "level": rng.integers(0, 5, n),
                "t": rng.choice(["10", "9", "x"], n),
            }
        ).to_csv(root / "t.csv", index=False)
        ledger = root / "ledger.sqlite"
        with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
            opened.create_budget("t", dp.ApproxDP(10**9, Fraction(1, 2)), privacy_unit="u")
        yield root, ledger


def _run(workspace: Any, args: list[str]) -> None:
    root, ledger = workspace
    app = _app()
    for _ in range(2):  # every invocation twice
        before = _state(ledger)
        result = CliRunner().invoke(
            app,
            ["query", str(root / "t.csv"), *args],
            env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
        )
        _check(result, ledger, before, csv_ok=False)


@FAST
@given(args=invocations())
def test_dpkit_query_has_three_outcomes(workspace: Any, args: list[str]) -> None:
    _run(workspace, args)


@pytest.mark.slow
@SLOW
@given(args=invocations())
def test_dpkit_query_has_three_outcomes_many(workspace: Any, args: list[str]) -> None:
    _run(workspace, args)


def test_a_malformed_file_exits_1_charged(workspace: Any) -> None:
    root, ledger = workspace
    broken = root / "broken.csv"
    text = (root / "t.csv").read_text(encoding="utf-8").splitlines()
    text.insert(100, '999,"5,a,1,x')
    broken.write_text("\n".join(text) + "\n", encoding="utf-8")
    before = _state(ledger)
    result = CliRunner().invoke(
        _app(),
        ["query", str(broken), "SELECT COUNT(*)", "-d", "t", "--max-rows", "1", "--epsilon", "1"],
        env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
    )
    assert _check(result, ledger, before, csv_ok=True) == "failed"
    assert "could not be read" in result.output
