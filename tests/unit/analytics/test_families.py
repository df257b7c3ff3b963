"""The family registry's specs (dpkit.analytics._families): every aggregation type is declared
once, and the front ends (builder, SQL parser, service JSON parser, plan text) read it."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from fractions import Fraction

import pytest

from dpkit.analytics import _query as query
from dpkit.analytics._families import Family, Form, add_family, families, family_of, forms
from dpkit.analytics._planner._registry import register_family, registered
from dpkit.analytics._querytext import parse_query
from dpkit.errors import InvalidParameterError, UnsupportedQueryError


def test_every_aggregation_type_has_a_family_with_its_compiler() -> None:
    table = registered()
    for kind in typing.get_args(query.Aggregation):
        family = family_of(kind.__new__(kind))
        assert family is not None, kind.__name__
        assert table[family.kind] is family.compiler


def test_sql_names_and_json_ops_are_declared_once() -> None:
    ops = [form.op for form in forms() if form.op]
    assert len(ops) == len(set(ops))
    assert {"count", "count_units", "sum", "mean", "variance", "std", "median", "quantile"} <= set(
        ops
    )
    assert {"histogram", "mode"} <= set(ops)
    sql = [(n, form.params[:1]) for form in forms() for n in form.sql]
    assert len(sql) == len(set(sql))


def test_a_second_family_for_a_type_or_a_taken_name_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_family(Family(query.Count, (Form(query.count),), lambda a, c: None, render=str))

    @dataclass(frozen=True)
    class Other:
        name: str = "x"

    with pytest.raises(ValueError, match="SQL function SUM"):
        add_family(Family(Other, (Form(query.sum, ("column",), sql=("SUM",)),), print, render=str))
    with pytest.raises(ValueError, match="JSON op 'mean'"):
        add_family(Family(Other, (Form(query.mean, op="mean"),), print, render=str))
    assert family_of(Other()) is None


def test_the_plan_text_is_the_familys_render() -> None:
    text = (
        query.Query()
        .agg(
            query.count(),
            query.sum("x", (0, 10)),
            query.sum("y", values=[(0, 1), (5, 6)]),
            query.std("x", (0, 4)),
            query.quantile("x", 0.9, (0, 100), method="exponential"),
            query.histogram("x", [0, 1, 2]),
        )
        .render()
    )
    assert text == (
        "source.bound(none).agg(count() as count, sum(x, [0, 10]) as sum_x, "
        "sum(y, values [0, 1] ∪ [5, 6]) as sum_y, std(x, [0, 4]) as std_x, "
        "quantile(x, [0, 100], q=9/10, method=exponential) as q90_x, "
        "histogram(x, 2 bins) as hist_x)"
    )


def test_result_columns_and_tables_come_from_the_spec() -> None:
    mean = query.mean("x", (0, 1))
    hist = query.histogram("x", [0, 1])
    assert family_of(mean).columns(mean) == ("mean_x", "mean_x_low", "mean_x_high")  # type: ignore[union-attr]
    assert family_of(hist).table  # type: ignore[union-attr]
    with pytest.raises(InvalidParameterError, match="count_low"):
        query.Query().group_by("count_low", keys=[1]).agg(hist)


def test_unknown_aggregations_are_refused_listing_the_registered_ones() -> None:
    with pytest.raises(InvalidParameterError, match=r"mode\(\).*sum\(\)|sum\(\).*mode\(\)"):
        query.Query().agg(object())  # type: ignore[arg-type]
    with pytest.raises(UnsupportedQueryError, match=r"MODE\(col, values\.\.\.\)") as error:
        parse_query("SELECT FOO(x)")
    assert "SUM(col, lower, upper)" in str(error.value)
    assert "COUNT(*)" in str(error.value)


def test_a_form_builds_its_aggregation_from_named_parameters() -> None:
    form = next(f for f in forms() if f.op == "quantile")
    agg = form.build({"column": "x", "q": 0.25, "lower": 0, "upper": 8}, None)
    assert agg == query.quantile("x", 0.25, (0, 8))
    assert form.sql_signature() == "QUANTILE(col, q, lower, upper)"
    counted = next(f for f in forms() if f.op == "count").build({}, "n")
    assert counted == query.Count("n", Fraction(1))


def test_every_family_is_listed_once_in_registration_order() -> None:
    kinds = [f.kind for f in families()]
    assert len(kinds) == len(set(kinds))
