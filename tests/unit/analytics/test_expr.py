"""The expression nodes of issue 23: ``when(...).otherwise(...)`` (SQL's CASE), ``like`` /
``ilike``, ``year`` / ``month`` / ``day``: their trees, kinds, columns, limits and refusals."""

from __future__ import annotations

import pytest

from dpkit.analytics import col, lit, when
from dpkit.analytics._expr import (
    MAX_EXPRESSION_DEPTH,
    Case,
    check_expression,
    children,
    columns_of,
    infer_kind,
    numeric_columns,
    text_number_orderings,
)
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

SCHEMA = {"x": "numeric", "s": "string", "d": "temporal", "b": "bool"}


def test_when_chains_nest_in_first_true_order_and_default_to_null() -> None:
    case = when(col("x") > 1, 1).when(col("x") > 0, 2).otherwise(3)
    assert isinstance(case, Case) and isinstance(case.default, Case)
    assert case.default.then.same_as(lit(2)) and case.default.default.same_as(lit(3))
    assert when(col("x") > 1, 1).default.same_as(lit(None))
    assert not case.same_as(when(col("x") > 1, 1).otherwise(3))
    assert children(case)[0].same_as(col("x") > 1)
    with pytest.raises(UnsupportedQueryError, match="before"):
        when(col("x") > 1, 1).otherwise(0).when(col("x") > 2, 2)
    with pytest.raises(UnsupportedQueryError, match="once"):
        when(col("x") > 1, 1).otherwise(0).otherwise(2)


def test_kinds_of_the_new_nodes() -> None:
    assert infer_kind(when(col("s").like("a%"), col("x")).otherwise(0), SCHEMA) == "numeric"
    assert infer_kind(when(col("b"), "yes"), SCHEMA) == "string"
    assert infer_kind(col("s").like("a%"), SCHEMA) == "bool"
    assert infer_kind(col("s").ilike("A%"), SCHEMA) == "bool"
    assert infer_kind(col("d").year() + col("d").month() + col("d").day(), SCHEMA) == "numeric"


@pytest.mark.parametrize(
    ("expr", "said"),
    [
        (when(col("x"), 1), "bool"),  # a number is no condition
        (when(col("b"), 1).otherwise("a"), "cannot compare"),
        (col("x").like("1%"), "string"),
        (col("s").year(), "declare the column a date"),
        (col("x").month(), "date or timestamp"),
    ],
)
def test_wrong_kinds_are_refused_with_a_reason(expr: object, said: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=said):
        infer_kind(expr, SCHEMA)  # type: ignore[arg-type]


def test_the_pattern_is_a_text() -> None:
    with pytest.raises(InvalidParameterError):
        col("s").like(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        col("s").like("\ud800")
    assert col("s").ilike("PrOmO%").same_as(col("s").lower().like("promo%"))


def test_columns_and_numeric_columns_see_inside_case() -> None:
    case = when(col("s").like("a%"), col("x")).otherwise(col("y") * 2)
    assert columns_of(case) == {"s", "x", "y"}
    assert numeric_columns(when(col("b"), col("x")).otherwise(0)) == {"x"}
    assert numeric_columns(case) == {"x", "y"}  # x is a number: the other branch is one
    assert text_number_orderings(when(col("s") > "10", 1)) != []


def test_case_counts_towards_the_depth_limit() -> None:
    deep = when(col("b"), 0)
    for i in range(MAX_EXPRESSION_DEPTH):
        deep = deep.when(col("x") > i, i)
    with pytest.raises(UnsupportedQueryError, match="nested"):
        check_expression(deep)
    assert check_expression(when(col("b"), 0).when(col("x") > 1, 1)).same_as(
        when(col("b"), 0).when(col("x") > 1, 1)
    )


def test_render_reads_as_the_builder() -> None:
    assert col("s").like("a%").render() == "col('s').like('a%')"
    assert col("d").year().render() == "col('d').year()"
    assert when(col("b"), 1).render() == "when(col('b'), 1).otherwise(None)"
