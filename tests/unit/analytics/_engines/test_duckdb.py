"""The DuckDB engine's relation rewrites: a filter ``a == b`` whose two columns are one
expression of the same source column becomes ``a IS NOT NULL`` (the same rows; DuckDB then
estimates it as unselective), and nothing else does."""

from __future__ import annotations

import duckdb
import pandas as pd
from sqlglot import parse_one

from dpkit.analytics import col
from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._duckdb import _origin, _same_value_filters

NESTED = (
    "SELECT CASE WHEN ISNAN(CAST(__p.lo AS DOUBLE)) THEN NULL ELSE CAST(__p.lo AS DOUBLE) END "
    "AS lo, CASE WHEN ISNAN(CAST(__p.hi AS DOUBLE)) THEN NULL ELSE CAST(__p.hi AS DOUBLE) END "
    "AS hi, __p.other AS other FROM (SELECT __t.u AS lo, __t.u AS hi, __t.v AS other "
    "FROM (SELECT u, v FROM t) AS __t) AS __p"
)


def _filters(sql: str, steps: list[Step]) -> list[str]:
    out = _same_value_filters(parse_one(sql, read="duckdb"), steps)  # type: ignore[arg-type]
    return [step.expr.render() for step in out if step.expr is not None]


def test_the_two_ends_of_one_column_become_a_not_null_test() -> None:
    assert _filters(NESTED, [Step("filter", col("lo") == col("hi"))]) == ["col('lo').is_not_null()"]


def test_different_columns_joins_and_derived_columns_are_left_alone() -> None:
    same = Step("filter", col("lo") == col("hi"))
    assert _filters(NESTED, [Step("filter", col("lo") == col("other"))]) == [
        "(col('lo') == col('other'))"
    ]
    # an earlier step replaces lo: the filter no longer reads the select's column
    derived = [Step("derive", col("other"), name="lo"), same]
    assert _filters(NESTED, derived)[-1] == "(col('lo') == col('hi'))"
    joined = (
        "SELECT __l.u AS lo, __r.u AS hi FROM (SELECT u FROM t) AS __l "
        "JOIN (SELECT u FROM t) AS __r ON __l.u = __r.u"
    )
    assert _filters(joined, [same]) == ["(col('lo') == col('hi'))"]
    grouped = "SELECT MIN(u) AS lo, MIN(u) AS hi FROM t"
    assert _origin(parse_one(grouped, read="duckdb"), "lo") is None


def test_the_rewrite_keeps_the_same_rows_with_null_and_nan() -> None:
    """``a == b`` and ``a IS NOT NULL`` keep the same rows when a and b are one value: NULL and
    NaN (read as NULL) are dropped both ways."""
    from dpkit.analytics._engines._relation import sql_steps

    con = duckdb.connect()
    con.register("t", pd.DataFrame({"u": [1.0, None, float("nan"), -0.0, 2.0], "v": range(5)}))
    select = parse_one(NESTED, read="duckdb")
    kinds = {"lo": "numeric", "hi": "numeric", "other": "numeric"}
    steps = [Step("filter", col("lo") == col("hi"))]
    build = sql_steps("duckdb")
    results = []
    for chosen in (steps, _same_value_filters(select, steps)):  # type: ignore[arg-type]
        query, _ = build(select.copy(), chosen, ["lo", "hi", "other"], kinds)  # type: ignore[arg-type]
        results.append(sorted(con.sql(query.sql("duckdb")).fetchall()))
    assert results[0] == results[1] == [(-0.0, -0.0, 3), (1.0, 1.0, 0), (2.0, 2.0, 4)]
