"""The registry of aggregate families: one compiler per aggregation type.

A compiler turns one aggregation of a query, with its share of the budget, into the outputs the
engine must compute, the measurements that will add noise to them (returned as :class:`Use`
records: the mechanism's name and its loss, from which the compiler composes the query's loss
and the ledger records the mechanisms), and a finisher that builds the released columns or
tables. Families live in :mod:`dpkit.analytics._planner.families`, one module
each, and register themselves with :func:`register`::

    @register(Count)
    def compile_count(agg: Count, ctx: FamilyContext) -> Compiled: ...

A family also declares, once, how users write it and how it is shown: a
:class:`~dpkit.analytics._families.Family` spec (its builder, SQL syntax, JSON form, result
columns, rendering and compiler) registered with :func:`register_family`; the builder, the SQL
parser, the service and the CLI read those specs (docs/design.md, "The family registry")::

    register_family(Family(Count, (Form(count, ("*",), sql=("COUNT",), op="count"),),
                           compile_count, render=lambda agg: f"count() as {agg.name}"))

A compiler reads only public information (the aggregation's parameters, the declared bounds and
the budget share); no data is read while compiling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeAlias, TypeVar

from dpkit.analytics._bounding import Contribution
from dpkit.analytics._engines._base import BinSpec, BoundedPlan
from dpkit.analytics._families import Family, Form, add_family, families, family_of
from dpkit.analytics._planner._compiled import Finisher, OutputRegistry
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner._types import Mechanism, Use
from dpkit.analytics._query import Aggregation
from dpkit.errors import UnsupportedQueryError

__all__ = [
    "Compiled",
    "Compiler",
    "Family",
    "FamilyContext",
    "Form",
    "Use",
    "compiler_for",
    "families",
    "family_of",
    "register",
    "register_family",
    "registered",
    "used",
]


def used(noisy: Any) -> Use:
    """The :class:`Use` of a :class:`~dpkit.analytics._planner._compiled.Noisy` output."""
    return Use(noisy.measurement.name, noisy.loss)


Compiled: TypeAlias = tuple[Finisher, list[Use], str]
"""(finisher, the mechanisms it runs with their losses, one line for ``explain()``)."""


@dataclass(frozen=True)
class FamilyContext:
    """What a family's compiler may use.

    Attributes:
        share: this aggregation's part of the query budget.
        contrib: what one privacy unit can contribute (rows, groups, rows per group).
        main: the main plan's value specs and outputs (shared by all aggregations; register the
            outputs you need and read them back in the finisher by index).
        extra_plans: further bounded plans (e.g. per-bin counts); append with :meth:`add_plan`.
        make_plan: builds a bounded plan from an :class:`OutputRegistry` and optional bins.
        n_keys: the number of public group keys, or None for private or no keys.
        private_keys: whether the group keys are private (partition selection runs).
        mechanism: the caller's mechanism choice ("auto", "laplace", "gaussian").
        delta: the part of the query's δ this aggregation may spend (its weight's share of δ
            when the budget is (ε, δ), answered with a pure share, with public or no keys;
            0 otherwise). Used by propose-test-release quantiles.
    """

    share: Share
    contrib: Contribution
    main: OutputRegistry
    extra_plans: list[BoundedPlan]
    make_plan: Callable[..., BoundedPlan]
    n_keys: int | None
    private_keys: bool
    mechanism: Mechanism = "auto"
    delta: Fraction = Fraction(0)

    def add_plan(self, registry: OutputRegistry, bins: BinSpec | None = None) -> int:
        """Append an extra plan; return its index in the engine's results (main plan is 0)."""
        self.extra_plans.append(self.make_plan(registry, bins))
        return len(self.extra_plans)


Compiler: TypeAlias = Callable[[Any, FamilyContext], Compiled]
_F = TypeVar("_F", bound=Callable[..., Compiled])
_COMPILERS: dict[type, Compiler] = {}


def register(*types: type) -> Callable[[_F], _F]:
    """Register the decorated function as the compiler of each aggregation type in ``types``."""

    def decorate(function: _F) -> _F:
        for kind in types:
            if kind in _COMPILERS:
                raise ValueError(f"a compiler for {kind.__name__} is already registered")
            _COMPILERS[kind] = function
        return function

    return decorate


def register_family(family: Family) -> Family:
    """Register ``family``'s spec (for the front ends) and its compiler (for the planner), once
    per aggregation class."""
    if family.kind in _COMPILERS:
        raise ValueError(f"a compiler for {family.kind.__name__} is already registered")
    add_family(family)
    _COMPILERS[family.kind] = family.compiler
    return family


def registered() -> dict[type, Compiler]:
    """A copy of the registry (aggregation type -> compiler)."""
    return dict(_COMPILERS)


def compiler_for(agg: Aggregation) -> Compiler:
    """The compiler of ``agg``'s type (or of its nearest registered base class)."""
    for kind in type(agg).__mro__:
        if kind in _COMPILERS:
            return _COMPILERS[kind]
    known = ", ".join(kind.__name__ for kind in _COMPILERS)
    raise UnsupportedQueryError(
        f"no planner family answers {type(agg).__name__} aggregations (registered: {known})"
    )
