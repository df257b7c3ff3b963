"""Every clause of a query is either translated or refused, never ignored (issue 21).

The query parser refused a denylist of sqlglot's ``Select`` arguments that named ``"with"``
while sqlglot calls it ``"with_"``: ``WITH people AS (SELECT * FROM people WHERE age >= 50)
SELECT COUNT(*) FROM people`` answered the count of every row (2,000 against a truth of 880),
with exit 0 in ``dpkit query`` and 200 in the service. ``TABLESAMPLE``, ``USING SAMPLE``,
``GROUP BY ALL`` (an ungrouped count) and ``IN UNNEST(...)`` (an empty IN list) were ignored in
the same way. Now every node of the parse tree, and every argument of every node, must be in
:data:`dpkit.analytics._querytext.ALLOWED_ARGS`; these tests iterate sqlglot's own lists of
arguments and node types, so that a clause a newer sqlglot adds cannot slip through either."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp
from typer.testing import CliRunner

from dpkit.analytics._querytext import (
    ALLOWED_ARGS,
    _from_select,
    _QueryDialect,
    parse_query,
    parse_where,
)
from dpkit.cli import app
from dpkit.errors import UnsupportedQueryError
from dpkit.ledger import BudgetMonitor, Ledger

IGNORED_BEFORE = {
    "WITH shadowing the input": (
        "WITH people AS (SELECT * FROM people WHERE age >= 50) SELECT COUNT(*) FROM people",
        "WITH",
    ),
    "WITH of another name": (
        "WITH old AS (SELECT * FROM people WHERE age >= 50) SELECT COUNT(*) FROM people",
        "WITH",
    ),
    "TABLESAMPLE": ("SELECT COUNT(*) FROM people TABLESAMPLE (10 PERCENT)", "TABLESAMPLE"),
    "USING SAMPLE": ("SELECT COUNT(*) FROM people USING SAMPLE 10", "SAMPLE"),
    "USING SAMPLE without FROM": ("SELECT COUNT(*) USING SAMPLE 10 PERCENT", "SAMPLE"),
    "WINDOW": ("SELECT COUNT(*) WHERE age >= 50 WINDOW w AS (PARTITION BY dept)", "WINDOW"),
    "FETCH FIRST": ("SELECT COUNT(*) WHERE age >= 50 FETCH FIRST 1 ROWS ONLY", "FETCH"),
    "GROUP BY ALL": ("SELECT COUNT(*) FROM people GROUP BY ALL", "GROUP BY ALL"),
    "GROUP BY ROLLUP": ("SELECT dept, COUNT(*) GROUP BY ROLLUP (dept)", "ROLLUP"),
    "GROUP BY CUBE": ("SELECT dept, COUNT(*) GROUP BY CUBE (dept)", "CUBE"),
    "GROUPING SETS": ("SELECT dept, COUNT(*) GROUP BY GROUPING SETS ((dept), ())", "GROUPING"),
    "IN UNNEST": ("SELECT COUNT(*) WHERE age IN UNNEST([50, 51])", "UNNEST"),
    "IS NOT DISTINCT FROM": ("SELECT COUNT(*) WHERE age IS NOT DISTINCT FROM 50", "DISTINCT"),
    "a subquery in FROM": ("SELECT COUNT(*) FROM (SELECT * FROM people WHERE age > 1)", "FROM"),
    "a subquery in IN": ("SELECT COUNT(*) WHERE age IN (SELECT 50)", "subquery"),
    "EXISTS": ("SELECT COUNT(*) WHERE EXISTS (SELECT 1)", "Exists"),
    "a comma join": ("SELECT COUNT(*) FROM people, people", "JOIN"),
    "LATERAL": ("SELECT COUNT(*) FROM people, LATERAL (SELECT 1)", "JOIN"),
    "PIVOT": ("SELECT COUNT(*) FROM people PIVOT (SUM(age) FOR dept IN ('a'))", "PIVOT"),
    "a window function": ("SELECT SUM(age, 0, 1) OVER () FROM people", "window"),
    "FILTER": ("SELECT COUNT(*) FILTER (WHERE age >= 50)", "FILTER"),
    "QUALIFY": ("SELECT COUNT(*) QUALIFY 1", "QUALIFY"),
    "DISTINCT ON": ("SELECT DISTINCT ON (age) COUNT(*)", "DISTINCT"),
    "ORDER BY a position": ("SELECT COUNT(*) ORDER BY 1", "ORDER BY"),
    "ORDER BY NULLS FIRST": ("SELECT COUNT(*) AS n ORDER BY n NULLS FIRST", "NULLS FIRST"),
    "LIMIT of a non-number": ("SELECT COUNT(*) LIMIT 'a'", "LIMIT"),
    "LIMIT of an expression": ("SELECT COUNT(*) LIMIT 1 + 1", "LIMIT"),
    "LIKE ... ESCAPE": ("SELECT COUNT(*) WHERE dept LIKE 'a!%' ESCAPE '!'", "ESCAPE"),
    "EXTRACT(HOUR ...)": ("SELECT COUNT(*) WHERE EXTRACT(HOUR FROM d) = 1", "EXTRACT"),
    "OFFSET": ("SELECT COUNT(*) OFFSET 1", "OFFSET"),
    "HAVING an aggregate not selected": (
        "SELECT dept, COUNT(*) GROUP BY dept HAVING SUM(age, 0, 1) > 1",
        "HAVING",
    ),
    "table column aliases": ("SELECT COUNT(*) FROM people AS p(age, x) WHERE age > 1", "alias"),
    "COUNT(* EXCLUDE ...)": ("SELECT COUNT(* EXCLUDE (age))", "EXCLUDE"),
    "TRY_CAST": ("SELECT COUNT(*) WHERE d >= TRY_CAST('2024-01-01' AS DATE)", "TryCast"),
}


@pytest.mark.parametrize("case", sorted(IGNORED_BEFORE))
def test_a_clause_dpkit_does_not_translate_is_refused_by_name(case: str) -> None:
    text, named = IGNORED_BEFORE[case]
    with pytest.raises(UnsupportedQueryError) as caught:
        parse_query(text, "person")
    assert named.lower() in str(caught.value).lower(), str(caught.value)


# a query holding every node type of ALLOWED_ARGS, each with its allowed arguments set
EVERYTHING = (
    "SELECT d, COUNT(*) AS n, COUNT(DISTINCT u), SUM(x, 0, 1), QUANTILE(x, 0.5, -1, 2.5) "
    "FROM tx AS t WHERE (x IS NULL OR NOT \"d\" IN ('a', 'b')) AND x BETWEEN -1 AND 2 "
    "AND d >= DATE '2024-03-01' AND x + 1 * 2 / 3 - 4 != 5 AND b = TRUE AND x < 1 "
    "AND x <= 1 AND x > 0 AND x = NULL AND s NOT LIKE 'a%' AND s ILIKE '_b' "
    "AND YEAR(e) + MONTH(e) + DAY(e) + EXTRACT(YEAR FROM e) > 1 "
    "AND CASE WHEN x > 1 THEN TRUE ELSE FALSE END GROUP BY d HAVING n > 1 ORDER BY n DESC LIMIT 5"
)


def _parsed(text: str = EVERYTHING) -> exp.Select:
    select = sqlglot.parse_one(text, read=_QueryDialect)
    assert isinstance(select, exp.Select)
    return select


def test_the_reference_query_holds_every_allowed_node_type_and_is_accepted() -> None:
    select = _parsed()
    assert {type(node) for node in select.walk()} == set(ALLOWED_ARGS)
    parsed = _from_select(select, "u", "tx")
    assert parsed.group_by == ("d",) and len(parsed.aggregations) == 4
    assert parsed.where is not None and parsed.source == "tx"


# the Select arguments dpkit translates, and how (a new allowed argument needs a line here)
HANDLED_SELECT_ARGS = {
    "expressions": "the aggregates (and the group columns)",
    "from": "FROM <the input> (older sqlglot)",
    "from_": "FROM <the input>",
    "where": "WHERE",
    "group": "GROUP BY <columns>",
    "having": "HAVING, on the released table",
    "order": "ORDER BY, on the released table",
    "limit": "LIMIT, on the released table",
}


def test_every_select_argument_is_either_translated_or_refused() -> None:
    assert set(ALLOWED_ARGS[exp.Select]) == set(HANDLED_SELECT_ARGS)
    refused = []
    for arg in exp.Select.arg_types:
        if arg in HANDLED_SELECT_ARGS:
            continue
        select = _parsed("SELECT COUNT(*) FROM tx")
        select.set(arg, exp.Var(this="x"))
        with pytest.raises(UnsupportedQueryError):
            _from_select(select, "u", "tx")
        refused.append(arg)
    assert "with_" in refused or "with" in refused
    assert "sample" in refused and "windows" in refused


def test_every_argument_of_every_allowed_node_is_either_allowed_or_refused() -> None:
    """For each node of the reference query and each argument sqlglot defines for its type but
    dpkit does not allow: set it, and the query is refused."""
    reference = _parsed()
    checked = 0
    for index, node in enumerate(reference.walk()):
        for arg in type(node).arg_types:
            if arg in ALLOWED_ARGS[type(node)]:
                continue
            select = copy.deepcopy(reference)
            target = list(select.walk())[index]
            assert type(target) is type(node)
            target.set(arg, exp.Var(this="x"))
            with pytest.raises(UnsupportedQueryError):
                _from_select(select, "u", "tx")
            checked += 1
    assert checked > 50


def _node_types() -> list[type[exp.Expr]]:
    found = set()
    for _, kind in inspect.getmembers(exp, inspect.isclass):
        if issubclass(kind, exp.Expr) and kind not in ALLOWED_ARGS:
            found.add(kind)
    return sorted(found, key=lambda k: k.__name__)


def test_every_other_node_type_is_refused_in_where_and_in_the_select_list() -> None:
    """Any sqlglot node type outside the allowlist, placed in WHERE (compared with a column) or
    as an aggregate, is refused: nothing of an unknown kind is ever dropped."""
    kinds = _node_types()
    assert len(kinds) > 500
    for kind in kinds:
        try:
            node = kind(this=exp.column("x"), expression=exp.Literal.number(1))
        except Exception:  # a type that cannot be built so; not reachable from a parse
            continue
        where = _parsed("SELECT COUNT(*) WHERE x = 1")
        where.find(exp.EQ).set("expression", node)  # type: ignore[union-attr]
        listed = _parsed("SELECT COUNT(*)")
        listed.set("expressions", [node.copy()])
        for select in (where, listed):
            with pytest.raises(UnsupportedQueryError):
                _from_select(select, "u", "tx")


@pytest.fixture
def people(tmp_path: Path) -> Path:
    ids = np.arange(2000)
    path = tmp_path / "people.csv"
    pd.DataFrame({"person": ids, "age": ids % 90}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "text",
    [
        "WITH people AS (SELECT * FROM people WHERE age >= 50) SELECT COUNT(*) FROM people",
        "SELECT COUNT(*) FROM people TABLESAMPLE (10 PERCENT)",
        "SELECT COUNT(*) FROM people USING SAMPLE 10",
    ],
)
def test_dpkit_query_refuses_them_before_anything_is_charged(
    text: str, people: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.sqlite"
    env = {"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)}
    runner = CliRunner()
    made = runner.invoke(
        app, ["budget", "create", "people", "--epsilon", "1000000", "--unit", "person"], env=env
    )
    assert made.exit_code == 0, made.output
    args = ["query", str(people), text, "--dataset", "people", "--epsilon", "1000"]
    result = runner.invoke(app, [*args, "--max-rows", "1", "--schema", "age=int"], env=env)
    assert result.exit_code == 2, result.output
    assert "not supported" in result.output and "count" not in result.output.lower().split()
    books = Ledger.open(str(ledger), monitor=BudgetMonitor(log=False))
    try:
        assert books.budget("people").charges == 0
        assert len(books.history("people")) == len(books.history("people", kinds=["create"]))
    finally:
        books.close()


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("SELECT COUNT(*)", ["age=1,2"]),
        ("SELECT COUNT(*)", ["age=" + ",".join(["1"] * 900)]),
        ("SELECT age, COUNT(*) GROUP BY age", ["age=1,2", "person=1"]),
    ],
)
def test_dpkit_query_refuses_keys_it_would_ignore(
    text: str, keys: list[str], people: Path, tmp_path: Path
) -> None:
    """``--keys`` of an ungrouped query (or of a column it does not group by) were ignored
    and the query charged as if they had not been given."""
    ledger = tmp_path / "ledger.sqlite"
    env = {"COLUMNS": "200", "DPKIT_LEDGER": str(ledger)}
    runner = CliRunner()
    made = runner.invoke(
        app, ["budget", "create", "people", "--epsilon", "1000000", "--unit", "person"], env=env
    )
    assert made.exit_code == 0, made.output
    args = ["query", str(people), text, "--dataset", "people", "--epsilon", "1000"]
    for spec in keys:
        args += ["--keys", spec]
    result = runner.invoke(app, [*args, "--max-rows", "1", "--schema", "age=int"], env=env)
    assert result.exit_code == 2, result.output
    assert "--keys" in result.output, result.output
    books = Ledger.open(str(ledger), monitor=BudgetMonitor(log=False))
    try:
        assert books.budget("people").charges == 0
    finally:
        books.close()


@pytest.mark.parametrize(
    "where",
    [
        "age >= 50 GROUP BY dept",
        "age >= 50 TABLESAMPLE (1 PERCENT)",
        "age >= 50 LIMIT 1",
        "age >= 50) OR (TRUE",
        "(age >= 50",
        "TRUE) SELECT COUNT(*) WHERE (age >= 50",
        "age >= 50; SELECT 1",
        "age >= 50 OR dept IN (SELECT 'a')",
        "age IN UNNEST([1])",
        "",
    ],
)
def test_a_where_condition_is_one_expression_and_nothing_else(where: str) -> None:
    """The service's JSON model pasted its ``where`` into ``SELECT COUNT(*) WHERE {where}``:
    ``age >= 50 GROUP BY dept`` added a clause the model does not have (and it was dropped)."""
    with pytest.raises(UnsupportedQueryError):
        parse_where(where)


def test_a_where_condition_is_read_as_in_a_query() -> None:
    text = "age >= 50 AND dept IN ('a', 'b') AND NOT age BETWEEN 60 AND 61 -- a comment"
    parsed = parse_query(f"SELECT COUNT(*) WHERE {text}")
    assert parsed.where is not None
    assert parse_where(text).render() == parsed.where.render()
