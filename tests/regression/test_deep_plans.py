"""Deep and long query plans are released or refused before the reservation, alike on every
engine (issue 21).

200 chained ``.filter()`` calls or 100 chained ``.with_column()`` calls passed planning on
DuckDB, were reserved, then overflowed sqlglot's SQL generator: InternalError, ε spent, while
pandas released the same queries. 1,000 chained or 2,000 independent derived columns were
refused as an "InternalError ... dpkit bug". Now adjacent filters are ANDed as a balanced tree,
and the planner counts the levels every engine builds (MAX_PLAN_LEVELS) and the steps
(MAX_PLAN_STEPS), refusing with a message that names the limit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Query, Session, col, count
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._planner._validate import MAX_PLAN_LEVELS, MAX_PLAN_STEPS
from dpkit.errors import DPError, UnsupportedQueryError

ENGINES = ("duckdb", "pandas")
_FRAME = pd.DataFrame({"u": range(40), "x": [float(i % 10) for i in range(40)]})


def _session(engine: str) -> Session:
    return Session(_FRAME, privacy_unit="u", budget=dp.PureDP(1e8), max_rows=1, engine=engine)


def _filters(query: Query, n: int) -> Query:
    for i in range(n):
        query = query.filter(col("x") > -i)
    return query


def _chain(query: Query, n: int) -> tuple[Query, str]:
    previous = "x"
    for i in range(n):
        query = query.with_column(f"c{i}", col(previous) + 1)
        previous = f"c{i}"
    return query, previous


def _wide(query: Query, n: int) -> tuple[Query, str]:
    for i in range(n):
        query = query.with_column(f"c{i}", col("x") * i)
    return query, f"c{n - 1}"


def _outcome(session: Session, run: Callable[[], Any]) -> str:
    """'released' (charged) or 'refused' (nothing charged); anything else fails the test."""
    before = session.spent
    try:
        run()
    except UnsupportedQueryError as error:
        assert session.spent == before, "a refusal was charged"
        assert "at most" in str(error) and "Nothing was charged" in str(error)
        return "refused"
    except DPError as error:  # pragma: no cover - the failure this test guards against
        raise AssertionError(f"neither released nor refused: {error!r}") from None
    assert session.spent != before
    return "released"


def _expected(levels: int, steps: int = 0) -> str:
    return "released" if levels <= MAX_PLAN_LEVELS and steps <= MAX_PLAN_STEPS else "refused"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("n", [1, 200, 3000])
def test_chained_filters_are_one_balanced_level(engine: str, n: int) -> None:
    session = _session(engine)
    query = _filters(session.query(), n).agg(count())
    assert _outcome(session, lambda: session.evaluate(query, epsilon=1e6)) == "released"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("n", [1, MAX_PLAN_LEVELS - 1, MAX_PLAN_LEVELS, 60, 100, 1000])
def test_chained_derived_columns(engine: str, n: int) -> None:
    session = _session(engine)
    query, last = _chain(session.query(), n)
    aggregated = query.agg(dp_sum(last, (0, 2000)))
    outcome = _outcome(session, lambda: session.evaluate(aggregated, epsilon=1e6))
    assert outcome == _expected(n)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("n", [2000, MAX_PLAN_STEPS + 1])
def test_independent_derived_columns_share_a_level(engine: str, n: int) -> None:
    session = _session(engine)
    query, last = _wide(session.query(), n)
    aggregated = query.agg(dp_sum(last, (0, 1e6)))
    outcome = _outcome(session, lambda: session.evaluate(aggregated, epsilon=1e6))
    assert outcome == _expected(2, n)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("shape", "n"), [("filters", 300), ("chain", 20), ("chain", 100)])
def test_estimate_bounds_and_sample_and_aggregate_bases(engine: str, shape: str, n: int) -> None:
    session = _session(engine)
    if shape == "filters":
        base, column, levels = _filters(session.query(), n), "x", 2
    else:
        base, column = _chain(session.query(), n)
        levels = n
    assert _outcome(
        session, lambda: session.estimate_bounds(column, epsilon=1, base=base)
    ) == _expected(levels)
    assert _outcome(
        session,
        lambda: session.sample_and_aggregate(
            lambda rows: rows[column].mean(),
            columns=[column],
            output_range=(0, 200),
            n_range=(20, 100),
            m=4,
            epsilon=1,
            base=base,
        ),
    ) == _expected(levels)


def _deepest_expression() -> Any:
    expr = col("x")
    for i in range(31):  # 63 levels: the most an expression may nest is 64
        expr = (expr * 1.0).fill_null(float(i))
    return expr


def _at_depth(frames: int, run: Callable[[], Any]) -> Any:
    if frames == 0:
        return run()
    return _at_depth(frames - 1, run)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_deepest_plan_allowed_runs_from_a_deep_caller(engine: str) -> None:
    """MAX_PLAN_LEVELS levels, each a derived column as deep as an expression may be, under
    a filter of the same depth, evaluated with most of the interpreter's recursion limit used
    by the caller: released (the SQL generator gets its own headroom)."""
    session = _session(engine)
    query = session.query()
    previous = "x"
    for i in range(MAX_PLAN_LEVELS - 2):
        query = query.with_column(f"d{i}", _deepest_expression() + col(previous))
        previous = f"d{i}"
    query = query.filter(_deepest_expression() > -1.0)
    aggregated = query.agg(dp_sum(previous, (0, 1e6), name="s"))
    depth = sys.getrecursionlimit() // 3  # the SQL alone needs more than the rest
    outcome = _at_depth(
        depth, lambda: _outcome(session, lambda: session.evaluate(aggregated, epsilon=1e6))
    )
    assert outcome == "released"
    assert np.isfinite(session.evaluate(aggregated, epsilon=1e6).table["s"][0])
