"""The query text is bounded before and while it is parsed (issue 21): about 45 nested
parentheses crashed sqlglot's parser with a RecursionError, 400 ANDed conditions built a
400-deep tree that failed in the engine after the reservation, and long IN lists, histograms
and number literals cost seconds of CPU. ``dpkit query``, Session SQL users and the service all
parse through :func:`dpkit.analytics._querytext.parse_query`."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpkit.analytics import Session
from dpkit.analytics._expr import Binary, Expr, Unary
from dpkit.analytics._query import Query
from dpkit.analytics._querytext import (
    MAX_AGGREGATIONS,
    MAX_EXPRESSION_DEPTH,
    MAX_GROUP_BY,
    MAX_LIST,
    MAX_NESTING,
    MAX_PREFIX_RUN,
    MAX_QUERY_TEXT,
    MAX_WHERE_NODES,
    parse_query,
)
from dpkit.core._losses import PureDP
from dpkit.errors import UnsupportedQueryError


def _depth(expr: Expr) -> int:
    if isinstance(expr, Binary):
        return 1 + max(_depth(expr.left), _depth(expr.right))
    if isinstance(expr, Unary):
        return 1 + _depth(expr.operand)
    return 1


def _where(text: str) -> str:
    return f"SELECT COUNT(*) WHERE {text}"


REFUSED = {
    "45 parentheses": _where("(" * 45 + "age > 1" + ")" * 45),
    "parentheses over the limit": _where("(" * (MAX_NESTING + 1) + "age > 1" + ")" * 21),
    "1,000 parentheses": _where("(" * 1000 + "age > 1" + ")" * 1000),
    "NOT chain": _where("NOT " * 200 + "age > 1"),
    "minus chain": _where("age > " + "- " * 200 + "1"),
    "bracket nesting": _where("age IN " + "[" * 100 + "1" + "]" * 100),
    "long sum": _where("age > " + " + ".join(["1"] * 200)),
    "long IN list": _where(f"age IN ({', '.join(map(str, range(MAX_LIST + 1)))})"),
    "long histogram": f"SELECT HISTOGRAM(age, {', '.join(map(str, range(MAX_LIST + 1)))})",
    "long number": _where("age > " + "9" * 5000),
    "many aggregates": "SELECT " + ", ".join(f"COUNT(*) AS c{i}" for i in range(101)),
    "many group keys": "SELECT COUNT(*) GROUP BY "
    + ", ".join(f"k{i}" for i in range(MAX_GROUP_BY + 1)),
    "too long": _where("age > 1" + " " * MAX_QUERY_TEXT),
    "unterminated string": _where("dept = 'abc"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_oversized_queries_are_refused_clearly_and_at_once(name: str) -> None:
    start = time.perf_counter()
    with pytest.raises(UnsupportedQueryError) as caught:
        parse_query(REFUSED[name], "person")
    assert time.perf_counter() - start < 2
    message = str(caught.value)
    assert len(message) < 600 and "Traceback" not in message
    assert message.endswith("See `dpkit query --help` for the syntax.")


def test_the_limits_are_generous_for_real_queries() -> None:
    for text in (
        _where("(" * MAX_NESTING + "age > 1" + ")" * MAX_NESTING),
        _where("NOT " * MAX_PREFIX_RUN + "age > 1"),
        _where(f"age IN ({', '.join(map(str, range(MAX_LIST)))})"),
        _where(" AND ".join(f"age > {i}" for i in range(150))),
        f"SELECT HISTOGRAM(age, {', '.join(map(str, range(MAX_LIST)))})",
        "SELECT " + ", ".join(f"COUNT(*) AS c{i}" for i in range(MAX_AGGREGATIONS)),
        "SELECT COUNT(*) GROUP BY " + ", ".join(f"k{i}" for i in range(MAX_GROUP_BY)),
        _where("age > " + " + ".join(["1"] * (MAX_EXPRESSION_DEPTH - 2))),
    ):
        parse_query(text, "person")


@pytest.mark.parametrize(("op", "count"), [("AND", 120), ("OR", 120), ("AND", 65)])
def test_long_chains_of_one_connective_are_balanced(op: str, count: int) -> None:
    """A chain of ANDs was a tree as deep as it was long (400 conditions failed in the engine
    after the reservation); now it is balanced."""
    parsed = parse_query(_where(f" {op} ".join(f"age > {i}" for i in range(count))))
    assert parsed.where is not None
    assert _depth(parsed.where) <= 2 + (count - 1).bit_length()
    mixed = parse_query(
        _where(" OR ".join(f"(age > {i} AND (dept = 'a' AND age < {i + 9}))" for i in range(40)))
    )
    assert mixed.where is not None and _depth(mixed.where) < 14


def test_a_where_is_at_most_max_where_nodes() -> None:
    chain = " AND ".join(f"age > {i}" for i in range(400))
    with pytest.raises(UnsupportedQueryError, match="at most 600"):
        parse_query(_where(chain))
    in_list = f"age IN ({', '.join(map(str, range(MAX_LIST)))})"
    parse_query(_where(in_list + " AND age > 1"))
    with pytest.raises(UnsupportedQueryError, match="at most 600"):
        parse_query(_where(in_list + " AND " + " AND ".join(f"age > {i}" for i in range(40))))
    assert MAX_WHERE_NODES == 600


def test_a_balanced_chain_gives_the_same_answer_as_the_chain(tmp_path: Path) -> None:
    """Re-associating AND / OR keeps SQL's three-valued logic (NULLs included)."""
    path = tmp_path / "t.csv"
    ids = np.arange(300)
    ages = np.where(ids % 7 == 0, np.nan, ids % 90)
    pd.DataFrame({"person": ids, "age": ages, "dept": np.where(ids % 3 == 0, "a", "b")}).to_csv(
        path, index=False
    )
    text = " AND ".join(f"(age > {i} OR dept = 'a')" for i in range(0, 40, 2))
    text = f"NOT ({text}) OR age IS NULL"
    parsed = parse_query(_where(text))
    assert parsed.where is not None
    frame = pd.read_csv(path)
    truth = (
        ~np.logical_and.reduce([(frame.age > i) | (frame.dept == "a") for i in range(0, 40, 2)])
        | frame.age.isna()
    )
    for engine in ("duckdb", "pandas"):
        session = Session(
            str(path), "person", PureDP(10**6), engine=engine, schema={"age": "numeric"}
        )
        release = session.evaluate(
            Query().filter(parsed.where).bound(max_rows=1).agg(*parsed.aggregations),
            epsilon=50,  # the noise is 0 with probability 1 - 2e-22
        )
        assert int(release.table["count"][0]) == int(truth.sum())


def test_refusals_name_the_caller_s_own_syntax_help() -> None:
    with pytest.raises(UnsupportedQueryError) as caught:
        parse_query(
            "SELECT COUNT(*) FROM (SELECT 1)",
            source="the dataset 'people'",
            syntax_help="See docs/service.md.",
        )
    message = str(caught.value)
    assert "command line" not in message and "dpkit query" not in message
    assert "the dataset 'people'" in message and message.endswith("See docs/service.md.")
