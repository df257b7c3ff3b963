"""The planner's family registry: every aggregation type has exactly one compiler."""

from __future__ import annotations

import typing
from dataclasses import dataclass

import pytest

from dpkit.analytics import query
from dpkit.analytics.planner import compiler_for, register
from dpkit.analytics.planner.registry import registered
from dpkit.errors import UnsupportedQueryError


def test_every_aggregation_type_has_a_compiler() -> None:
    kinds = typing.get_args(query.Aggregation)
    assert kinds, "query.Aggregation should be a union of aggregation classes"
    table = registered()
    missing = [k.__name__ for k in kinds if not any(c in table for c in k.__mro__)]
    assert not missing


def test_registering_a_type_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(query.Count)(lambda agg, ctx: (None, [], ""))  # type: ignore[arg-type,return-value]


def test_an_unknown_aggregation_is_refused_clearly() -> None:
    @dataclass(frozen=True)
    class Unknown:
        name: str = "x"

    with pytest.raises(UnsupportedQueryError, match="Unknown"):
        compiler_for(Unknown())  # type: ignore[arg-type]
