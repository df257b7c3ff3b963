"""Regression (issue 21): every Session entry point has three outcomes — refused before the
reservation (nothing charged), released and charged, or failed after the reservation (charged)
as one of two documented kinds: UnreadableDataError (the data could not be read) or
InternalError (a dpkit bug, "please report"). Before the fix, every error after the
reservation that was not dpkit's own was reported as "the query failed while reading the data",
including dpkit's own bugs (a ZeroDivisionError in an interval), and failures that depended
only on public inputs (the interval of a count at a large ε) happened after the charge.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import dpkit as dp
from dpkit.analytics import Session, col, count, mean
from dpkit.analytics._planner import _compiled as compiled_module

FRAME = pd.DataFrame({"u": np.arange(200), "x": np.linspace(0, 10, 200)})
SECRET = "SECRET-31337"


def _session(**options: Any) -> Session:
    return Session(FRAME, "u", dp.PureDP(100), max_rows=1, **options)


def _failed(session: Session) -> list[Any]:
    return [e for e in session.ledger.history() if e.kind == "fail"]


def test_a_bug_in_the_release_is_an_internal_error_charged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A post-processing bug that shows only on the data (not on the empty table of the dry
    run): charged, reported as dpkit's bug, its message (which could quote data) withheld."""
    apply = compiled_module.Noisy.apply

    def buggy(self: Any, exact: Any) -> Any:
        if np.asarray(exact, dtype=object).sum() > 0:
            raise ZeroDivisionError(SECRET)
        return apply(self, exact)

    monkeypatch.setattr(compiled_module.Noisy, "apply", buggy)
    session = _session()
    with pytest.raises(dp.InternalError) as info:
        session.evaluate(session.query().agg(count()), epsilon=1)
    error = info.value
    assert error.charged and session.spent == dp.PureDP(1) and len(_failed(session)) == 1
    assert "dpkit bug" in str(error) and "ZeroDivisionError" in str(error)
    assert "read" not in str(error).split("(")[0]  # not "failed while reading the data"
    assert SECRET not in str(error) and error.__cause__ is None
    assert any("compiled.py" in frame or "count.py" in frame for frame in error.trace)
    assert not any(SECRET in frame for frame in error.trace)


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (OSError(5, SECRET), dp.UnreadableDataError),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, SECRET), dp.UnreadableDataError),
        (MemoryError(SECRET), dp.UnreadableDataError),
        (dp.InvalidDataError("source", "no file at 'gone.csv'"), dp.UnreadableDataError),
        (KeyError(SECRET), dp.InternalError),
        (ZeroDivisionError(SECRET), dp.InternalError),
        (dp.PrivacyCheckError("internal check failed"), dp.InternalError),
    ],
)
def test_an_engine_failure_is_unreadable_data_or_a_bug(
    monkeypatch: pytest.MonkeyPatch, raised: BaseException, kind: type
) -> None:
    session = _session()

    def run(plan: Any) -> Any:
        raise raised

    monkeypatch.setattr(session.engine, "run", run)
    with pytest.raises(kind) as info:
        session.evaluate(session.query().agg(count()), epsilon=1)
    assert info.value.charged and session.spent == dp.PureDP(1)  # type: ignore[attr-defined]
    assert SECRET not in str(info.value) and info.value.__cause__ is None
    assert type(raised).__name__ in _failed(session)[0].detail


def test_a_library_error_of_the_engine_is_unreadable_data(monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    session = _session()

    def run(plan: Any) -> Any:
        raise duckdb.ConversionException(f"Could not convert string '{SECRET}' to INT32")

    monkeypatch.setattr(session.engine, "run", run)
    with pytest.raises(dp.UnreadableDataError) as info:
        session.evaluate(session.query().agg(count()), epsilon=1)
    assert "ConversionException" in str(info.value) and SECRET not in str(info.value)


def test_a_public_failure_of_the_release_is_refused_before_the_reservation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Everything the release computes from public inputs runs before the reservation (a dry
    run on the empty table): a failure there charges nothing."""

    def broken(measurement: Any, alpha: float) -> float:
        raise ValueError("math domain error")

    monkeypatch.setattr(compiled_module, "noise_halfwidth", broken)
    session = _session()
    with pytest.raises(dp.InternalError) as info:
        session.evaluate(session.query().agg(count()), epsilon=1)
    assert not info.value.charged and "nothing was reserved or charged" in str(info.value)
    assert session.spent == dp.PureDP(0) and session.ledger.history(kinds=["reserve"]) == []


def test_a_planning_failure_is_a_refusal_not_a_raw_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dpkit.analytics import _session as session_module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("math range error")

    monkeypatch.setattr(session_module, "compile_query", broken)
    session = _session()
    with pytest.raises(dp.InternalError) as info:
        session.evaluate(session.query().agg(count()), epsilon=1)
    assert not info.value.charged and session.spent == dp.PureDP(0)


def test_estimate_bounds_has_the_same_three_outcomes(monkeypatch: pytest.MonkeyPatch) -> None:
    session = _session()
    estimate = session.estimate_bounds("x", epsilon=1)
    assert estimate.upper > estimate.lower and session.spent == dp.PureDP(1)
    with pytest.raises(dp.InvalidParameterError):
        session.estimate_bounds("x", epsilon=1, alpha=2)  # used to fail after the charge
    with pytest.raises(dp.InvalidParameterError):
        session.estimate_bounds("x", epsilon=1e-300)  # below the floor every query has
    assert session.spent == dp.PureDP(1)

    def run(plan: Any) -> Any:
        raise ZeroDivisionError(SECRET)

    monkeypatch.setattr(session.engine, "run", run)
    with pytest.raises(dp.InternalError) as info:
        session.estimate_bounds("x", epsilon=1)
    assert info.value.charged and session.spent == dp.PureDP(2)


def test_sample_and_aggregate_classifies_its_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    import dpkit.analytics._sample_aggregate as sa

    session = _session()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(5, SECRET)

    monkeypatch.setattr(sa, "engine_blocks", broken)
    with pytest.raises(dp.UnreadableDataError) as info:
        session.sample_and_aggregate(
            lambda rows: rows["x"].mean(),
            columns=["x"],
            output_range=(0, 10),
            n_range=(100, 1000),
            m=10,
            epsilon=1,
        )
    assert info.value.charged and session.spent == dp.PureDP(1)


# ------------------------------------------------------------------ the command line
def _cli(tmp_path: Path) -> tuple[typer.Typer, Path, Path]:
    from dpkit.cli.query import query_command
    from dpkit.ledger import BudgetMonitor, Ledger

    app = typer.Typer()
    app.command("query")(query_command)
    app.command("other")(lambda: None)
    data = tmp_path / "people.csv"
    FRAME.to_csv(data, index=False)
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        opened.create_budget("people", dp.PureDP(10), privacy_unit="u")
    return app, data, ledger


def _spent(ledger: Path) -> Any:
    from dpkit.ledger import BudgetMonitor, Ledger

    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        return opened.spent("people")


def test_the_cli_reports_a_dpkit_bug_as_one_charged_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, data, ledger = _cli(tmp_path)
    apply = compiled_module.Noisy.apply

    def buggy(self: Any, exact: Any) -> Any:
        if np.asarray(exact, dtype=object).sum() > 0:
            raise ZeroDivisionError(SECRET)
        return apply(self, exact)

    monkeypatch.setattr(compiled_module.Noisy, "apply", buggy)
    args = ["query", str(data), "SELECT COUNT(*)", "-d", "people", "--epsilon", "1"]
    result = CliRunner().invoke(
        app, [*args, "--max-rows", "1"], env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)}
    )
    assert result.exit_code == 1, result.output
    assert "internal error in dpkit" in result.output and "dpkit bug" in result.output
    assert "could not be read" not in result.output and SECRET not in result.output
    assert _spent(ledger) == dp.PureDP(1)


def test_messages_print_numbers_as_people_write_them() -> None:
    """A refusal printed a 309-digit integer (a budget of ε = 1e308)."""
    with pytest.raises(dp.InvalidParameterError) as budget:
        Session(FRAME, "u", dp.PureDP(1e308), max_rows=1)  # accepted without a word before
    assert "1e+308" in str(budget.value) and "1e+09" in str(budget.value)
    assert not re.search(r"\d{16}", str(budget.value)), str(budget.value)
    session = Session(FRAME, "u", dp.PureDP(10**9), max_rows=1)
    with pytest.raises(dp.InvalidParameterError) as info:
        session.evaluate(session.query().agg(count()), epsilon=1e308)
    assert "1e+06" in str(info.value) and not re.search(r"\d{16}", str(info.value))
    assert session.spent == dp.PureDP(0)
    with pytest.raises(dp.BudgetExceededError) as over:
        session.ledger.reserve(session.dataset, dp.PureDP(dp.Fraction(10**27 + 1, 10**18)))
    assert not re.search(r"\d{16}", str(over.value)), str(over.value)
    with pytest.raises(dp.InvalidParameterError) as refused:
        dp.make_geometric(1, epsilon=-dp.Fraction(10**400, 3))
    assert "Fraction(" not in str(refused.value) and not re.search(r"\d{16}", str(refused.value))
    assert str(dp.PureDP(10**308)) == "ε=1e+308"
    assert str(dp.ZCDP(dp.Fraction(10**200, 3))) == "ρ=3.33333e+199"
    zcdp = Session(FRAME, "u", dp.PureDP(1), max_rows=1)
    with pytest.raises(dp.InvalidParameterError) as mixed:
        zcdp.evaluate(zcdp.query().agg(mean("x", (0, 10))), rho=dp.Fraction(10**100, 7))
    assert not re.search(r"\d{16}", str(mixed.value)), str(mixed.value)


def test_private_keys_on_a_pure_budget_do_not_say_ask_for_less(tmp_path: Path) -> None:
    """Issue 21: a pure-ε dataset asked for private keys answered "ask for less ε", which cannot
    help. The refusal (before the reservation) says what needs δ and how to get it."""
    frame = FRAME.assign(k=np.arange(200) % 3)
    session = Session(frame, "u", dp.PureDP(10), max_rows=1)
    query = session.query().group_by("k").agg(count())
    with pytest.raises(dp.BudgetExceededError) as info:
        session.evaluate(query, epsilon=1, delta=1e-7)
    text = str(info.value)
    assert "Ask for less" not in text and "cannot help" in text
    assert "(ε, δ) or ρ budget" in text and "keys" in text
    assert session.spent == dp.PureDP(0)
    app, data, ledger = _cli(tmp_path)
    frame.to_csv(data, index=False)
    result = CliRunner().invoke(
        app,
        [
            "query",
            str(data),
            "SELECT k, COUNT(*) GROUP BY k",
            "-d",
            "people",
            "--epsilon",
            "1",
            "--delta",
            "1e-7",
            "--max-rows",
            "1",
        ],
        env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code == 2, result.output
    assert "cannot help" in result.output and "Ask for less" not in result.output
    assert _spent(ledger) == dp.PureDP(0)


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_lone_surrogates_are_refused_before_the_reservation(engine: str) -> None:
    """Found by the property test (and by the issue, on the service): a lone surrogate in a
    WHERE literal failed on DuckDB after the reservation, and in a public key failed building
    the released table. Both are refused up front, as invalid Unicode."""
    frame = FRAME.assign(k=np.where(np.arange(200) % 2, "a", "b"))
    session = Session(frame, "u", dp.PureDP(10), max_rows=1, engine=engine)
    for build in (
        lambda: session.query().filter(col("k") == "a\ud800").agg(count()),
        lambda: session.query().filter(col("k").is_in(["\ud800", "a"])).agg(count()),
        lambda: session.query().group_by("k", keys=["a", "\ud800"]).agg(count()),
    ):
        with pytest.raises(dp.InvalidParameterError, match="lone surrogates"):
            session.evaluate(build(), epsilon=1)
    assert session.spent == dp.PureDP(0)


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_integer_literals_beyond_a_double_are_refused_up_front(engine: str) -> None:
    """Found while writing the property test: WHERE x < 10^400 failed in both engines (a
    conversion to double) after the reservation. Literals compare in double precision, so one
    beyond ±1.8e308 is refused; a huge literal prints readably in messages."""
    session = Session(FRAME, "u", dp.PureDP(10), max_rows=1, engine=engine)
    with pytest.raises(dp.InvalidParameterError, match="1e\\+400"):
        session.evaluate(session.query().filter(col("x") < 10**400).agg(count()), epsilon=1)
    assert session.spent == dp.PureDP(0)
    with pytest.raises(dp.UnsupportedQueryError) as info:
        session.evaluate(session.query().filter(~(col("x") + 10**300)).agg(count()), epsilon=1)
    assert not re.search(r"\d{30}", str(info.value)), str(info.value)
    release = session.evaluate(session.query().filter(col("x") < 10**300).agg(count()), epsilon=1)
    assert abs(int(release.table["count"].iloc[0]) - 200) < 30


@pytest.mark.parametrize(
    ("engine", "width"),
    [
        ("duckdb", 2_000),
        ("pandas", 2_000),
        pytest.param("duckdb", 20_000, marks=pytest.mark.slow),  # about a minute of SQL
        pytest.param("pandas", 20_000, marks=pytest.mark.slow),
    ],
)
def test_deep_expressions_are_refused_and_long_chains_balanced(engine: str, width: int) -> None:
    """Found by the property test: a predicate nested 400 levels deep overflowed the SQL
    generator's recursion after the reservation (charged). The depth is measured first,
    without recursion, and refused beyond MAX_EXPRESSION_DEPTH; a long chain of & or | (the
    issue's "about 400 ANDed conditions") is balanced instead, and answers."""
    from dpkit.analytics._expr import MAX_EXPRESSION_DEPTH

    session = Session(
        FRAME.assign(level=np.arange(200) % 5), "u", dp.PureDP(100), max_rows=1, engine=engine
    )
    deep = col("x") > 0
    for i in range(400):
        deep = ~deep if i % 2 else deep & (col("level") >= 0)
    with pytest.raises(dp.UnsupportedQueryError, match=f"at most {MAX_EXPRESSION_DEPTH} levels"):
        session.evaluate(session.query().filter(deep).agg(count()), epsilon=1)
    assert session.spent == dp.PureDP(0)
    chain = col("x") >= 0
    for i in range(400):
        chain = chain & (col("level") != 10 + i)
    wide = col("x") < -1
    for i in range(width):  # unbalanced, 2,000 levels already overflow the recursion
        wide = wide | (col("level") == i)
    for predicate in (chain, wide):
        release = session.evaluate(session.query().filter(predicate).agg(count()), epsilon=5)
        assert abs(int(release.table["count"].iloc[0]) - 200) < 10


def test_the_cli_rehearses_printing_the_answer_before_the_charge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dpkit query prints the answer after the commit: a printing bug used to lose an answer
    that was charged. The printing is rehearsed on the empty table first, so a bug there is a
    refusal (exit 2, nothing charged)."""
    import dpkit.analytics._render as render_module

    app, data, ledger = _cli(tmp_path)

    def broken(values: Any, decimals: int) -> list[str]:
        raise ZeroDivisionError(SECRET)

    monkeypatch.setattr(render_module, "format_column", broken)
    args = ["query", str(data), "SELECT COUNT(*), AVG(x, 0, 10)", "-d", "people"]
    result = CliRunner().invoke(
        app,
        [*args, "--epsilon", "1", "--max-rows", "1", "--schema", "x=float"],
        env={"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code == 2, result.output
    assert "rehearsing how the answer is printed" in result.output and SECRET not in result.output
    assert _spent(ledger) == dp.PureDP(0)
