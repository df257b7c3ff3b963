"""The planner's family registry: every aggregation type has exactly one compiler."""

from __future__ import annotations

import typing
from dataclasses import dataclass

import pytest

from dpkit.analytics import _query as query
from dpkit.analytics._planner import compiler_for, register
from dpkit.analytics._planner._registry import registered
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


def test_the_ledger_records_the_mechanisms_a_family_declares_not_its_prose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 22: the mechanisms written to the ledger come from each family's structured
    ``Use`` records. They used to be read back from the explanation by a regular expression, so
    a line that mentioned an alternative ("vs staircase noise") put it in the ledger."""
    import pandas as pd

    import dpkit as dp
    from dpkit.analytics import Session
    from dpkit.analytics._planner import _registry as registry_module

    original = registered()[query.Count]

    def chatty(agg: typing.Any, ctx: typing.Any) -> typing.Any:
        finish, uses, text = original(agg, ctx)
        return finish, uses, f"{text} (not the ladder noise, nor the exponential mechanism)"

    monkeypatch.setitem(registry_module._COMPILERS, query.Count, chatty)
    df = pd.DataFrame({"u": range(10), "x": range(10)})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(1), max_rows=1, engine="pandas")
    q = session.query().agg(query.count())
    compiled = session.compile(q, epsilon=0.5)
    assert "ladder noise" in compiled.explain()
    assert compiled.mechanisms == ("geometric",)
    session.evaluate(q, epsilon=0.5)
    entries = [e for e in session.ledger.history(session.dataset) if e.kind == "reserve"]
    assert [e.mechanism for e in entries] == ["geometric"]
