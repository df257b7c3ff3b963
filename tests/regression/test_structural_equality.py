"""Objects that hold expressions (steps, plans, queries) compare and hash as real booleans.

An expression's ``==`` builds a predicate (``col("a") == 1``), so a generated dataclass ``==``
over expression fields asked a predicate for its truth value, and every dict lookup keyed by a
plan with a WHERE (the service's warm DuckDB engine) failed with "an expression has no truth
value" the second time a query shape was seen: after its ε was reserved (issue 21).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpkit.analytics import Session, col, count, lit, mean
from dpkit.analytics._engines._base import BoundedPlan, Step
from dpkit.analytics._expr import structural_key
from dpkit.analytics._planner._validate import validate
from dpkit.analytics._query import KeySet, Query
from dpkit.analytics._querytext import parse_query
from dpkit.core._losses import PureDP


def _plan(where: object, keys: KeySet | None = None, salt: int = 7) -> BoundedPlan:
    return BoundedPlan(
        steps=(Step("filter", expr=where),),  # type: ignore[arg-type]
        unit="person",
        keys=() if keys is None else keys.columns,
        key_set=keys,
        max_rows=1,
        max_groups=None,
        max_rows_per_group=None,
        salt=salt,
        values=(),
        outputs=(),
    )


def test_plans_with_equal_expressions_are_equal_dict_keys() -> None:
    a = _plan((col("age") > 10) & col("dept").is_in(["a", "b"]))
    b = _plan((col("age") > 10) & col("dept").is_in(["a", "b"]))
    assert a is not b
    assert (a == b) is True and (a != b) is False
    assert hash(a) == hash(b)
    cache = {a: "sql"}
    assert cache[b] == "sql" and b in cache and b in [a] and {a, b} == {a}
    other = _plan((col("age") > 11) & col("dept").is_in(["a", "b"]))
    assert (a == other) is False and other not in cache
    assert replace(a, salt=0) == replace(b, salt=0)


def test_steps_queries_and_parsed_queries_compare_as_booleans() -> None:
    assert (Step("filter", expr=col("x") > 1) == Step("filter", expr=col("x") > 1)) is True
    q1 = Query().filter(col("age") > 3).agg(count())
    q2 = Query().filter(col("age") > 3).agg(count())
    assert (q1 == q2) is True and len({q1, q2}) == 1
    assert (q1 == Query().filter(col("age") > 4).agg(count())) is False
    sql = "SELECT COUNT(*), AVG(age, 0, 100) WHERE age > 3 AND dept = 'a' GROUP BY dept"
    assert parse_query(sql) == parse_query(sql)
    grouped = Query().filter(col("age") > 3).group_by("dept")
    assert grouped == Query().filter(col("age") > 3).group_by("dept")
    schema = {"person": "numeric", "age": "numeric", "dept": "string"}
    checked = validate(q1.bound(max_rows=1), schema, "person")  # type: ignore[arg-type]
    assert checked == validate(q1.bound(max_rows=1), schema, "person")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (lit(1), lit(1.0)),
        (lit(1), lit(True)),
        (lit(0.0), lit(-0.0)),
        (lit("1"), lit(1)),
        (col("a") > 1, col("a") >= 1),
        (col("a").is_in([1]), col("a").is_in([1.0])),
    ],
)
def test_structural_keys_are_exact_and_typed(left: object, right: object) -> None:
    """A cache keyed by these would hand one plan the other's SQL text."""
    assert structural_key(left) != structural_key(right)
    assert _plan(left) != _plan(right)


def test_key_sets_are_keyed_by_type() -> None:
    ints = KeySet.from_values("k", [1, 2])
    floats = KeySet.from_values("k", [1.0, 2.0])
    assert ints == floats  # KeySet's own dataclass equality (plain values)
    assert _plan(col("k") > 0, ints) != _plan(col("k") > 0, floats)
    assert structural_key(_plan(col("k") > 0, ints)) == structural_key(_plan(col("k") > 0, ints))


def test_structural_key_refuses_unknown_types() -> None:
    with pytest.raises(TypeError):
        structural_key(object())
    assert structural_key(Fraction(1, 3)) != structural_key(1 / 3)
    assert structural_key(np.int64(3)) == structural_key(3)
    day = np.datetime64("2024-03-01")
    assert structural_key(day) == structural_key(np.datetime64("2024-03-01"))
    assert structural_key(day) != structural_key(np.datetime64("2024-03-01T00:00"))


def test_a_session_answers_the_same_where_query_many_times(tmp_path: Path) -> None:
    """Every engine (the warm DuckDB engine is tested through the service)."""
    path = tmp_path / "t.csv"
    ids = np.arange(40)
    pd.DataFrame({"person": ids, "age": ids % 30}).to_csv(path, index=False)
    for engine in ("duckdb", "pandas"):
        session = Session(
            str(path), "person", PureDP(10), engine=engine, schema={"age": "numeric"}, max_rows=1
        )
        query = session.query().filter(col("age") > 3).agg(count(), mean("age", (0, 30)))
        for _ in range(3):
            session.evaluate(query, epsilon="0.1")
        assert session.ledger.budget(session.dataset).charges == 3
