"""The SQL of an expression is linear in the expression's size (issue 21).

A NaN test written as ``CASE WHEN isnan(v) THEN NULL ELSE v END`` repeats ``v``, as does a
division's zero test and DuckDB's NULLIF (a macro of that CASE); nested, the repeats multiplied:
``x / 1 / 1 ...`` was 2^D copies of ``x`` — 12 divisions took 29 s *after* the reservation and
40 would never finish, although the planner had accepted the expression (64 levels allowed).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Expr, Session, col
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._planner import compile_query

_FRAME = pd.DataFrame({"u": range(10), "x": [float(i) for i in range(10)]})

_SHAPES: dict[str, Callable[[Expr], Expr]] = {
    "divide": lambda e: e / 1.0,
    "divide by": lambda e: 1.0 / (e + 1.0),
    "fill_null of arithmetic": lambda e: (e * 1.0).fill_null(0.0),
    "comparison as number": lambda e: (e > 0.0).as_number() + 1.0,
    "abs of a difference": lambda e: (e - 1.0).abs(),
}


def _nested(shape: str, depth: int) -> Expr:
    expr: Expr = col("x")
    for _ in range(depth):
        expr = _SHAPES[shape](expr)
    return expr


def _sql_length(session: Session, expr: Expr) -> int:
    query = session.query().with_column("y", expr).agg(dp_sum("y", (0, 10)))
    compiled = compile_query(query, session.schema, "u", dp.PureDP(1), defaults=session.defaults)
    return len(session.engine.sql(compiled.plans[0]))  # type: ignore[attr-defined]


@pytest.mark.parametrize("shape", list(_SHAPES))
def test_sql_grows_linearly_with_nesting(shape: str) -> None:
    session = Session(_FRAME, privacy_unit="u", budget=dp.PureDP(1), max_rows=1)
    small, large = _sql_length(session, _nested(shape, 4)), _sql_length(session, _nested(shape, 12))
    # linear: 8 more levels add about 8 times a level's text (doubling: 2^8 times the text)
    per_level = (small - _sql_length(session, _nested(shape, 2))) / 2
    assert large - small <= 12 * max(per_level, 1) + 2000, (small, large)


@pytest.mark.parametrize("shape", list(_SHAPES))
def test_deeply_nested_arithmetic_runs_fast_and_agrees(shape: str) -> None:
    expr = _nested(shape, 20)
    answers = []
    for engine in ("duckdb", "pandas"):
        session = Session(
            _FRAME, privacy_unit="u", budget=dp.PureDP(1e7), max_rows=1, engine=engine
        )
        start = time.perf_counter()
        release = session.evaluate(
            session.query()
            .with_column("y", expr)
            .filter(col("y").is_not_null())
            .agg(dp_sum("y", (-1e3, 1e3), name="s")),
            epsilon=1e6,
        )
        assert time.perf_counter() - start < 10
        answers.append(float(release.table["s"][0]))
    assert answers[0] == pytest.approx(answers[1], abs=0.1)
