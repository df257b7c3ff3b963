"""Validation of a query against the table's schema, and key normalisation."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics._declared import MarginalCounts, RangeCounts
from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._columns import RELATION_UNIT, RESERVED_PREFIX, canonical
from dpkit.analytics._expr import (
    Col,
    ColumnKind,
    Structural,
    Unary,
    check_expression,
    check_unicode,
    coerce_temporal_literals,
    columns_of,
    infer_kind,
)
from dpkit.analytics._families import family_of
from dpkit.analytics._keys import KeySet
from dpkit.analytics._planner._rewrite import merge_filters, push_filters
from dpkit.analytics._query import (
    Aggregate,
    Aggregation,
    Filter,
    PlanNode,
    Query,
    Select,
    Source,
    WithColumn,
)
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

# ------------------------------------------------------------------ plan shape
MAX_PLAN_STEPS = 10_000
"""The most steps (``filter``, ``with_column``, ``select``) a query may chain. Beyond it a
query is refused before anything is reserved: 2,000 derived columns overflowed the planner's
recursion (issue 21), and planning time grows with the steps."""

MAX_PLAN_LEVELS = 32
"""The most levels a query's steps may nest, counted as every engine builds them: one per run
of adjacent filters, one per ``select``, and one per run of derived columns that do not read
one another (a derived column that reads the one just before it starts a new level). A SQL
engine nests one subquery per level, and 100 chained derived columns overflowed the SQL
generator's recursion *after* the reservation (issue 21). Measured on the query alone, so
every engine allows the same queries."""


def _too_large(what: str, value: int, limit: int, hint: str) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"the query has {value:,} {what}; at most {limit:,} are allowed. {hint} Nothing was "
        "charged."
    )


def plan_levels(steps: Sequence[Step]) -> int:
    """The levels :data:`MAX_PLAN_LEVELS` counts, for steps as the engines receive them
    (adjacent filters merged; see :mod:`.rewrite`)."""
    levels = 0
    level: set[str] = set()
    for step in steps:
        if step.kind == "derive":
            assert step.expr is not None
            if not level or step.name in level or columns_of(step.expr) & level:
                levels += 1
                level = set()
            level.add(step.name)
            continue
        level = set()
        levels += 1
    return levels


def check_plan_shape(steps: Sequence[Step]) -> None:
    """Refuse steps nested deeper than :data:`MAX_PLAN_LEVELS` (from public inputs, before
    anything is reserved)."""
    levels = plan_levels(push_filters(merge_filters(tuple(steps))))
    if levels > MAX_PLAN_LEVELS:
        raise _too_large(
            "levels of steps",
            levels,
            MAX_PLAN_LEVELS,
            "Each derived column that reads the derived column just before it, each select "
            "and each run of filters is a level. Compute independent derived columns next to "
            "one another (they share a level), combine conditions into one filter, or fold a "
            "chain of derived columns into one expression.",
        )


def check_names(obj: object, what: str) -> None:
    """Refuse any text in ``obj`` (a name, a tuple of names, an aggregation's fields) that is
    not valid Unicode (a lone surrogate such as '\\ud800'), before anything is reserved: an
    output named so failed in the dry run's table (UnicodeEncodeError) and an engine would fail
    on it after the charge (issue 21). One check in the planner covers every way a name can
    reach a plan (builders, dataclasses built directly, ``dpkit query``)."""
    if isinstance(obj, str):
        check_unicode(what, obj)
    elif isinstance(obj, tuple | list):
        for item in obj:
            check_names(item, what)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, str | tuple | list):
                check_names(value, f.name)


# ------------------------------------------------------------------ validation
@dataclass(frozen=True, slots=True, eq=False)
class Validated(Structural):
    steps: tuple[Step, ...]
    schema: dict[str, ColumnKind]
    aggregate: Aggregate
    key_set: KeySet | None = None


def _flatten(node: PlanNode) -> list[PlanNode]:
    chain: list[PlanNode] = []
    current: PlanNode = node
    while isinstance(current, Filter | WithColumn | Select | Aggregate):
        chain.append(current)
        current = current.child
    if not isinstance(current, Source):  # pragma: no cover - the Session plans joins first
        raise UnsupportedQueryError("a join reached the single-table validator")
    return list(reversed(chain))


def _unknown_column(
    name: str, schema: Mapping[str, ColumnKind], what: str = "column"
) -> InvalidParameterError:
    known = ", ".join(repr(c) for c in schema)
    return InvalidParameterError(
        what,
        name,
        f"one of the table's columns ({known})",
        "Check the spelling (names are case-sensitive).",
    )


def _check_not_reserved(name: str, what: str = "column") -> None:
    if name.startswith(RESERVED_PREFIX):
        raise InvalidParameterError(
            what,
            name,
            f"a name that does not start with {RESERVED_PREFIX!r} (reserved for dpkit's internal "
            "result columns)",
            "Rename the column, e.g. with .with_column('new_name', col(...)).",
        )


def _temporal_key(value: object) -> _dt.date | _dt.datetime | None:
    """A date or naive datetime (aware ones in UTC) from a key value, or None if it is none."""
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                return _dt.date.fromisoformat(text)
            value = _dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    if isinstance(value, pd.Timestamp | np.datetime64):
        value = canonical(value)
    if isinstance(value, _dt.datetime):
        return canonical(value)
    if isinstance(value, _dt.date):
        return value
    return None


def _key_value(column: str, kind: ColumnKind, value: Any) -> Any:
    """A public key value checked against its column's kind and normalised to it."""
    if isinstance(value, np.generic) and not isinstance(value, np.datetime64):
        value = value.item()
    wanted = {
        "numeric": "numbers",
        "string": "text values (str)",
        "bool": "True or False",
        "temporal": "dates or timestamps (datetime.date / datetime.datetime, or ISO text "
        "such as '2024-01-31' or '2024-01-31 08:00:00')",
    }.get(kind, "values of a supported type")
    out: Any = None
    if kind == "numeric":
        if isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool):
            out = canonical(value)
    elif kind == "string":
        out = value if isinstance(value, str) else None
    elif kind == "bool":
        out = value if isinstance(value, bool) else None
    elif kind == "temporal":
        out = _temporal_key(value)
    if out is None:
        shown = _public_kind(kind)
        raise InvalidParameterError(
            "keys",
            value,
            f"{wanted}: {column!r} is a {shown} column",
            "Give keys of the column's type; the schema (Session.schema) says which it is. A "
            "text column can be declared numeric, bool or temporal with Session(..., "
            "schema={...}).",
        )
    return out


def _public_kind(kind: ColumnKind | None) -> str:
    return "text" if kind == "string" else str(kind)


def normalise_key_set(key_set: KeySet, kinds: Sequence[ColumnKind]) -> KeySet:
    """``key_set`` with every value checked against its column's kind and normalised to it
    (numbers for numeric columns, ``str`` for text, ``bool``, and ``date`` / naive ``datetime``
    for temporal columns — ISO text is parsed). Keys that become equal are refused.

    Raises:
        InvalidParameterError: a value of the wrong type, or two keys that are the same.
    """
    rows = [
        tuple(
            _key_value(name, kind, value)
            for name, kind, value in zip(key_set.columns, kinds, row, strict=True)
        )
        for row in key_set.rows
    ]
    seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for given, row in zip(key_set.rows, rows, strict=True):
        identity = tuple(canonical(v) for v in row)
        if identity in seen:
            raise InvalidParameterError(
                "keys",
                given,
                f"distinct keys ({seen[identity]!r} and {given!r} are the same key)",
            )
        seen[identity] = given
    return KeySet(key_set.columns, tuple(rows))


def validate(query: Query, schema: Mapping[str, ColumnKind], unit: str) -> Validated:
    """Check the query against the schema; return its relational steps and final schema.

    Public keys are checked against their columns' kinds and normalised (see
    :func:`normalise_key_set`), so a key never has to be cast in the engine.
    """
    if not isinstance(query, Query) or not isinstance(query.plan, Aggregate):
        raise UnsupportedQueryError(
            "only aggregated queries can be released: finish the query with .agg(count(), ...) "
            "or .group_by(...).agg(...)"
        )
    if unit not in schema:
        raise InvalidParameterError(
            "privacy_unit",
            unit,
            f"a column of the table ({', '.join(map(repr, schema))})",
            "Name the column that identifies a person (or whatever one privacy unit is).",
        )
    if unit != RELATION_UNIT:  # a joined relation's unit column (dpkit.analytics._joins)
        _check_not_reserved(unit, "privacy_unit")
    check_names(unit, "privacy_unit")
    check_names(query.plan.keys, "group_by")
    for agg in query.plan.aggregations:
        check_names(agg, "aggregation")
    current: dict[str, ColumnKind] = dict(schema)
    steps: list[Step] = []
    aggregate = query.plan
    chain: PlanNode = Source()  # the plan rebuilt with its expressions checked and balanced
    nodes = _flatten(aggregate)[:-1]
    if len(nodes) > MAX_PLAN_STEPS:
        raise _too_large(
            "steps (filter, with_column and select calls)",
            len(nodes),
            MAX_PLAN_STEPS,
            "Combine conditions into one filter and compute what you need in fewer derived "
            "columns.",
        )
    for node in nodes:
        if isinstance(node, Filter | WithColumn):
            # depth and size first (without recursion), and & / | chains balanced
            expr = check_expression(
                node.predicate if isinstance(node, Filter) else node.expr,
                "filter" if isinstance(node, Filter) else "derived column",
            )
            node = (
                replace(node, child=chain, predicate=expr)
                if isinstance(node, Filter)
                else replace(node, child=chain, expr=expr)
            )
            for name in columns_of(expr):
                _check_not_reserved(name)
                check_names(name, "column")
        elif isinstance(node, Select):
            node = replace(node, child=chain)
        chain = node
        if isinstance(node, WithColumn):
            _check_not_reserved(node.name)
            check_names(node.name, "with_column")
        if isinstance(node, Select):
            check_names(node.columns, "select")
        if isinstance(node, Filter):
            predicate = coerce_temporal_literals(node.predicate, current)
            kind = infer_kind(predicate, current)
            if kind not in ("bool", None):
                raise UnsupportedQueryError(
                    f"filter {node.predicate.render()} is a {kind} value, not a predicate; "
                    "compare it, e.g. col('x') > 0"
                )
            steps.append(Step("filter", expr=predicate))
        elif isinstance(node, WithColumn):
            if node.name == unit:
                raise UnsupportedQueryError(
                    f"with_column({node.name!r}, ...) would redefine the privacy unit column; "
                    "derive a column with another name"
                )
            kind = infer_kind(node.expr, current)
            current[node.name] = kind if kind is not None else "numeric"
            steps.append(Step("derive", expr=node.expr, name=node.name))
        elif isinstance(node, Select):
            for name in node.columns:
                if name not in current:
                    raise _unknown_column(name, current)
            keep = tuple(dict.fromkeys((*node.columns, unit)))
            current = {c: current[c] for c in keep}
            steps.append(Step("select", columns=keep))
        else:  # pragma: no cover - the builder cannot nest aggregates
            raise UnsupportedQueryError("nested aggregations are not supported")
    for key in aggregate.keys:
        _check_not_reserved(key, "group_by")
        if key not in current:
            raise _unknown_column(key, current, "group_by")
        if current[key] == "other":
            raise UnsupportedQueryError(
                f"group_by column {key!r} has an unsupported type; use strings, numbers, "
                "booleans or dates as group keys"
            )
    aggregate = replace(aggregate, child=chain)  # renders without deep recursion
    key_set = aggregate.key_set
    if key_set is not None:
        key_set = normalise_key_set(key_set, [current[k] for k in aggregate.keys])
    if any(isinstance(a, MarginalCounts) for a in aggregate.aggregations):
        # marginals: declared domain values checked against (normalised to) the column kinds
        aggregate = replace(
            aggregate,
            aggregations=tuple(
                check_against_schema(a, current) if isinstance(a, MarginalCounts) else a
                for a in aggregate.aggregations
            ),
        )
    for agg in aggregate.aggregations:
        if isinstance(agg, MarginalCounts):
            for name in agg.columns:
                _check_not_reserved(name)
            continue
        for name in value_columns(agg):
            _check_not_reserved(name)
            if name not in current:
                raise _unknown_column(name, current)
            if current[name] == "bool" and name not in aggregate.keys:
                # a declared boolean counts as 0/1 (true is 1; NULL stays NULL and is skipped)
                steps.append(Step("derive", expr=Unary("as_number", Col(name)), name=name))
                current[name] = "numeric"
            if current[name] != "numeric":
                raise InvalidParameterError(
                    "column",
                    name,
                    f"a numeric column for {type(agg).__name__.lower()}(), "
                    f"but it holds {_public_kind(current[name])} values",
                    "Declare it numeric if it holds numbers as text (Session(..., "
                    f"schema={{{name!r}: 'numeric'}}); values that do not parse are NULL), "
                    "convert it when loading, or aggregate another column.",
                )
    check_plan_shape(steps)
    return Validated(tuple(steps), current, aggregate, key_set)


def value_columns(agg: Aggregation) -> tuple[str, ...]:
    """The input columns ``agg`` reads, as its family declares
    (:attr:`dpkit.analytics._families.Family.value_columns`)."""
    family = family_of(agg)
    return family.value_columns(agg) if family is not None else ()


def check_against_schema(
    agg: MarginalCounts | RangeCounts, schema: Mapping[str, ColumnKind]
) -> MarginalCounts | RangeCounts:
    """``agg`` with its domain values checked against (and normalised to) the columns' kinds.

    Called by :func:`validate`, before any data is read. Ranges need a numeric column
    (the planner's usual value-column check); marginal columns may be text, numbers, booleans or
    dates, and each declared value must be of its column's kind.
    """
    if isinstance(agg, RangeCounts):
        return agg
    domains = []
    for column, values in zip(agg.columns, agg.domains, strict=True):
        if column not in schema:
            raise _unknown_column(column, schema, "domains")
        kind = schema[column]
        if kind == "other":
            raise InvalidParameterError(
                "domains",
                column,
                "a column of text, numbers, booleans or dates (this one has an unsupported type)",
            )
        normal = []
        for v in values:
            try:
                normal.append(_key_value(column, kind, v))
            except InvalidParameterError:
                raise InvalidParameterError(
                    "domains",
                    v,
                    f"values of {column!r}'s kind ({_public_kind(kind)})",
                ) from None
        if len({canonical(v) for v in normal}) != len(normal):
            raise InvalidParameterError("domains", list(values), f"distinct values of {column!r}")
        domains.append(tuple(normal))
    return replace(agg, domains=tuple(domains))
