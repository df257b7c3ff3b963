"""Relations over several tables: the join plans every engine runs before contribution bounding.

A :data:`Relation` is a small tree the planner (:mod:`dpkit.analytics._joins`) builds from a
query's ``FROM`` part. Every node has a fixed list of output columns (distinct names, decided
by the planner), and every engine computes the same multiset of rows:

* :class:`Scan` — a table's columns (as its engine converts them to their declared kinds),
  renamed.
* :class:`Project` — the child's columns, selected, renamed or repeated (values and types
  unchanged, except those listed in ``doubles``: numeric units, as doubles).
* :class:`Steps` — derived columns, filters and selections over the child (the same
  :class:`~dpkit.analytics._engines._base.Step` semantics as a bounded plan's steps).
* :class:`Join` — an inner or left equi-join. A key that is NULL (or a float NaN) matches
  nothing, as in SQL; numeric keys compare as numbers (``1 = 1.0``, ``-0.0 = 0.0``). A left
  join keeps every left row, extended with NULLs when no right row matches.
* :class:`KeyUnit` — for each non-NULL key of the child, the smallest and largest unit its
  rows reach (``GROUP BY key`` with ``MIN(lo)``, ``MAX(hi)``; rows that reach no unit add
  nothing). A row belongs to a unit when its range is one unit; a key whose rows reach several
  units gives the rows that reach the unit through it none (see :mod:`dpkit.analytics._joins`
  for why this keeps each unit's rows its own).
* :class:`Truncate` — at most ``limit`` rows per value of the partition columns (compared as
  join keys compare them; rows with a NULL partition value are all kept), the first in a fixed
  order that depends on each row's own values only: the *scrambled* columns first (a number
  ``x`` as ``fmod(x * 0.6180339887498949, 1)``, text as its md5, so the rows kept are spread
  over the values rather than the smallest ones), then every column (NULL, and NaN, first).
  Rows equal in every column are interchangeable, so every engine keeps the same multiset.
* :class:`RowUnit` — the child with its ``unit`` column replaced by a number distinct for each
  row (after a truncated join, each row is its own contribution).
* :class:`PerUnit` — an exact aggregate per group of the child (``GROUP BY``), whose keys hold
  the unit: ``COUNT(*)``, ``COUNT(col)``, ``COUNT(DISTINCT col)``, ``SUM``, ``MIN``, ``MAX``,
  ``AVG``. ``SUM`` of an empty (or all-NULL) group is NULL, as in SQL. Sums and averages are
  computed in double precision (the engines may add in different orders: results can differ
  in the last bits between engines; counts, minima and maxima are exact everywhere).

Nothing here draws noise or reads a privacy budget: the privacy argument (each unit's rows of
the relation come from that unit's rows of the tables and the public tables only) is the
planner's, in :mod:`dpkit.analytics._joins`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
from sqlglot import exp

from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._sql import Dialect, _select, expr_compiler, step_levels
from dpkit.analytics._expr import ColumnKind, Lit, Structural, columns_of, infer_kind

__all__ = [
    "Join",
    "KeyUnit",
    "PerUnit",
    "Project",
    "Relation",
    "RowUnit",
    "Scan",
    "Steps",
    "Truncate",
    "clean_columns",
    "pandas_relation",
    "relation_kinds",
    "sql_relation",
    "sql_steps",
    "unitless",
]

AggFunction: TypeAlias = Literal[
    "count_star", "count", "count_distinct", "sum", "min", "max", "avg"
]


@dataclass(frozen=True, slots=True, eq=False)
class Scan(Structural):
    """Table ``table``'s columns ``(source name, output name)``."""

    table: str
    columns: tuple[tuple[str, str], ...]

    @property
    def output(self) -> tuple[str, ...]:
        return tuple(out for _, out in self.columns)


@dataclass(frozen=True, slots=True, eq=False)
class Project(Structural):
    """The child's columns ``(name, output name)``: a selection that may rename and repeat
    columns (their values and types unchanged).

    ``annotates``: set by the planner on the projection that gives private table ``annotates``'s
    rows their unit (its last column; the child keeps the rows that reach exactly one unit).
    Engines compute it like any projection; :func:`unitless` finds it by this name."""

    child: Relation
    columns: tuple[tuple[str, str], ...]
    doubles: tuple[str, ...] = ()
    annotates: str = ""

    @property
    def output(self) -> tuple[str, ...]:
        return tuple(out for _, out in self.columns)


@dataclass(frozen=True, slots=True, eq=False)
class Steps(Structural):
    """Steps over ``child``; ``output`` is the columns after them (the planner's list)."""

    child: Relation
    steps: tuple[Step, ...]
    output: tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Join(Structural):
    """``left JOIN right ON left.a = right.b AND ...``; ``output`` is the left's columns then
    the right's (the planner makes all names distinct first)."""

    left: Relation
    right: Relation
    on: tuple[tuple[str, str], ...]
    how: Literal["inner", "left"]

    @property
    def output(self) -> tuple[str, ...]:
        return (*self.left.output, *self.right.output)


@dataclass(frozen=True, slots=True, eq=False)
class KeyUnit(Structural):
    """The range of units each key reaches: ``SELECT key AS key_out, MIN(lo) AS lo_out,
    MAX(hi) AS hi_out FROM child WHERE key IS NOT NULL GROUP BY key`` (a numeric key grouped
    as a double, as joins compare it; NaN is NULL)."""

    child: Relation
    key: str
    lo: str
    hi: str
    key_out: str
    lo_out: str
    hi_out: str

    @property
    def output(self) -> tuple[str, ...]:
        return (self.key_out, self.lo_out, self.hi_out)


@dataclass(frozen=True, slots=True, eq=False)
class PerUnit(Structural):
    """``SELECT keys, aggregates FROM child GROUP BY keys``; ``aggregates`` are
    ``(output name, function, column)`` (column ``""`` for ``count_star``)."""

    child: Relation
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, AggFunction, str], ...]

    @property
    def output(self) -> tuple[str, ...]:
        return (*self.keys, *(name for name, _, _ in self.aggregates))


@dataclass(frozen=True, slots=True, eq=False)
class Truncate(Structural):
    """At most ``limit`` rows of ``child`` per value of ``partition`` (a NULL value: no
    limit), the first in the order of ``scramble`` (each column scrambled) then of every
    column (see the module docstring)."""

    child: Relation
    partition: tuple[str, ...]
    limit: int
    scramble: tuple[str, ...]

    @property
    def output(self) -> tuple[str, ...]:
        return self.child.output


@dataclass(frozen=True, slots=True, eq=False)
class RowUnit(Structural):
    """``child`` with column ``unit`` holding a number distinct for each row."""

    child: Relation
    unit: str

    @property
    def output(self) -> tuple[str, ...]:
        return self.child.output


Relation: TypeAlias = Scan | Project | Steps | Join | KeyUnit | PerUnit | Truncate | RowUnit


def clean_columns(node: Relation, nan_free: Callable[[str], Collection[str]]) -> frozenset[str]:
    """The columns of relation ``node`` that hold no NaN wherever the tree defines them.

    ``nan_free(table)``: a table's columns that cannot hold NaN (stored as integers). A name is
    clean when every definition of it is: a scanned column of ``nan_free``; a projection of a
    clean column, or one converted as a key (NaN read as NULL); a key map's key; a count; a
    row number. A derived column, a sum or an average, and a key map's smallest or largest unit
    of a column that is not clean, are not. (Names may repeat across the tree: each
    definition must be clean, the largest set where that holds is the answer.)"""
    rules: dict[str, list[bool | str]] = {}

    def define(name: str, rule: bool | str) -> None:
        rules.setdefault(name, []).append(rule)

    for n in _nodes(node):
        if isinstance(n, Scan):
            free = set(nan_free(n.table))
            for src, dst in n.columns:
                define(dst, src in free)
        elif isinstance(n, Project):
            for src, dst in n.columns:
                define(dst, True if dst in n.doubles else src)
        elif isinstance(n, Steps):
            for step in n.steps:
                if step.kind == "derive":
                    define(step.name, False)
        elif isinstance(n, KeyUnit):
            define(n.key_out, True)
            define(n.lo_out, n.lo)
            define(n.hi_out, n.hi)
        elif isinstance(n, PerUnit):
            for name, function, _ in n.aggregates:
                define(name, function.startswith("count"))
        elif isinstance(n, RowUnit):
            define(n.unit, True)
    clean = set(rules)
    changed = True
    while changed:
        changed = False
        for name, found in rules.items():
            if name in clean and not all(
                r is True or (isinstance(r, str) and r in clean) for r in found
            ):
                clean.discard(name)
                changed = True
    return frozenset(clean)


def unitless(node: Relation) -> tuple[Relation, str] | None:
    """The relation computed without finding whose each row is, when that is only a label: the
    relation ``node`` with its one annotated private table (:attr:`Project.annotates`) read as
    it is stored, every row given the unit 0, and the unit's column name.

    None unless the unit is a label that nothing but the result reads: exactly one private
    table; the unit's column is carried up to the result unchanged and once (never renamed
    into another column, copied, compared, filtered on, or a join key); every join on the way
    has only public tables (no unit, no per-unit aggregate, no truncation) on its other side,
    and the private side is the left one of a left join. Then each private row gives rows that
    depend on that row alone, and the relation's rows are, apart from the unit, exactly this
    relation's rows that come from table rows that reach one unit: a sub-multiset of them.
    When every row of the table reaches one (equal counts: the engine counts the rows of both,
    see ``DuckDBEngine._labelled``), the two hold the same rows, and a plan that reads the unit
    only to drop rows that have none (no bound is reached, no distinct units are counted) gives
    the same result on either."""
    annotated = [n for n in _nodes(node) if isinstance(n, Project) and n.annotates]
    if len(annotated) != 1:
        return None
    target = annotated[0]
    if any(isinstance(n, _PRIVATE_NODES) for n in _nodes(node, target)):
        return None  # a unit, a per-unit aggregate or a truncation outside the table's own
    unit = target.columns[-1][1]

    def rebuilt(current: Relation, name: str) -> Relation | None:
        if current is target:
            table = Scan(target.annotates, tuple((s, s) for s, _ in target.columns[:-1]))
            label = Step("derive", Lit(0.0), name)
            return Steps(table, (label,), target.output)
        if isinstance(current, Project):
            sources = [s for s, d in current.columns if d == name]
            if len(sources) != 1 or name in current.doubles or current.annotates:
                return None
            if sum(s == sources[0] for s, _ in current.columns) != 1:
                return None  # the unit copied into another column
            child = rebuilt(current.child, sources[0])
            return None if child is None else replace(current, child=child)
        if isinstance(current, Steps):
            for step in current.steps:
                read = columns_of(step.expr) if step.expr is not None else frozenset()
                if name in read or (step.kind == "derive" and step.name == name):
                    return None
                if step.kind == "select" and name not in step.columns:
                    return None
            child = rebuilt(current.child, name)
            return None if child is None else replace(current, child=child)
        if isinstance(current, Join):
            if any(name in pair for pair in current.on):
                return None
            if name in current.left.output and all(n is not target for n in _nodes(current.right)):
                child = rebuilt(current.left, name)
                return None if child is None else replace(current, left=child)
            if current.how == "inner" and name in current.right.output:
                if any(n is target for n in _nodes(current.left)):
                    return None
                child = rebuilt(current.right, name)
                return None if child is None else replace(current, right=child)
        return None

    result = rebuilt(node, unit)
    return None if result is None or unit not in node.output else (result, unit)


_PRIVATE_NODES = (KeyUnit, PerUnit, Truncate, RowUnit)


def _nodes(node: Relation, stop: Relation | None = None) -> list[Relation]:
    """``node`` and every node under it (not under ``stop``)."""
    out: list[Relation] = [node]
    if node is stop:
        return out
    for name in ("child", "left", "right"):
        child = getattr(node, name, None)
        if child is not None:
            out += _nodes(child, stop)
    return out


def relation_kinds(
    node: Relation, tables: Callable[[str], Mapping[str, ColumnKind]]
) -> dict[str, ColumnKind]:
    """Each output column's kind, from the tables' kinds (no data is read)."""
    if isinstance(node, Scan):
        kinds = tables(node.table)
        return {dst: kinds[src] for src, dst in node.columns}
    if isinstance(node, Project):
        child_kinds = relation_kinds(node.child, tables)
        return {dst: child_kinds[src] for src, dst in node.columns}
    if isinstance(node, Steps):
        schema = relation_kinds(node.child, tables)
        for step in node.steps:
            if step.kind == "derive" and step.expr is not None:
                schema[step.name] = infer_kind(step.expr, schema) or "numeric"
        return {c: schema[c] for c in node.output}
    if isinstance(node, Join):
        return {**relation_kinds(node.left, tables), **relation_kinds(node.right, tables)}
    child = relation_kinds(node.child, tables)
    if isinstance(node, Truncate):
        return child
    if isinstance(node, RowUnit):
        return {**child, node.unit: "numeric"}
    if isinstance(node, KeyUnit):
        return {
            node.key_out: child[node.key],
            node.lo_out: child[node.lo],
            node.hi_out: child[node.hi],
        }
    out = {k: child[k] for k in node.keys}
    for name, function, column in node.aggregates:
        out[name] = child[column] if function in ("min", "max") else "numeric"
    return out


# ---------------------------------------------------------------------------------------- SQL
def sql_steps(
    dialect: Dialect,
    float_columns: set[str] | None = None,
    clean: Collection[str] = frozenset(),
) -> Callable[
    [exp.Select, Sequence[Step], Sequence[str], Mapping[str, ColumnKind]],
    tuple[exp.Select, dict[str, ColumnKind]],
]:
    """Steps as SELECTs over a relation's (the engines' shared step compiler). The columns that
    may hold NaN are ``float_columns`` when the engine knows them, else every numeric column
    but those ``clean`` (:func:`clean_columns`: NaN-free wherever the relation defines them);
    always sound, as reading NaN as NULL leaves other numbers unchanged."""

    def build(
        select: exp.Select,
        steps: Sequence[Step],
        columns: Sequence[str],
        kinds: Mapping[str, ColumnKind],
    ) -> tuple[exp.Select, dict[str, ColumnKind]]:
        floats = (
            set(float_columns)
            if float_columns is not None
            else {c for c, k in kinds.items() if k == "numeric" and c not in clean}
        )
        compiler = expr_compiler(dict(kinds), floats, {}, dialect)
        current = select
        for expressions, where in step_levels(steps, compiler, columns):
            node = _select(*expressions).from_(current.subquery("__s", copy=False), copy=False)
            current = node if where is None else node.where(where, copy=False)
        return current, dict(compiler.schema)

    return build


def _q(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(this=_q(name), table=_q(table) if table else None)


def _key(value: exp.Expr, kind: ColumnKind | None, clean: bool = False) -> exp.Expr:
    """A join key as every engine compares it: a number as a double (an integer key and a
    float key compare alike everywhere), a NaN as NULL (it matches nothing). ``clean``: the
    value is never NaN (see :func:`clean_columns`), so the test is left out."""
    if kind != "numeric":
        return value
    double = exp.cast(value, "DOUBLE")
    if clean:
        return double
    return exp.If(this=_is_nan(double.copy()), true=exp.Null(), false=double)


def _is_nan(double: exp.Expr) -> exp.Expr:
    """``ISNAN(x)`` (DuckDB folded ``x = 'NaN'::DOUBLE`` over a Parquet column to false)."""
    return exp.Anonymous(this="ISNAN", expressions=[double])


def _nan_null(value: exp.Expr, kind: ColumnKind | None) -> exp.Expr:
    """A numeric value with NaN read as NULL (its type unchanged)."""
    if kind != "numeric":
        return value
    return exp.If(this=_is_nan(exp.cast(value.copy(), "DOUBLE")), true=exp.Null(), false=value)


def sql_relation(
    node: Relation,
    source: Callable[[str], tuple[exp.Select, Mapping[str, ColumnKind]]],
    steps: Callable[[exp.Select, Sequence[Step], Sequence[str], Mapping[str, ColumnKind]], Any],
    keys: Callable[[KeyUnit, exp.Select], exp.Select] | None = None,
    dialect: Dialect = "duckdb",
    clean: frozenset[str] = frozenset(),
) -> tuple[exp.Select, dict[str, ColumnKind]]:
    """The relation as one SELECT (and its columns' kinds).

    ``clean``: columns that hold no NaN wherever the relation defines them
    (:func:`clean_columns`): a join key among them is compared as a plain double, without the
    test for NaN, which also lets the engine's optimizer see the join (DuckDB then orders
    TPC-H Q5's joins as it does without privacy: a third less time).

    ``source(table)`` gives a table's typed SELECT and kinds; ``steps(select, steps, columns,
    kinds)`` the SELECT of steps over a relation (the engine's own step compiler); ``keys(node,
    select)``, when given, what to read for a :class:`KeyUnit` whose SELECT is ``select`` (an
    engine may compute it once and read the result); ``dialect``: the SQL engine (a
    :class:`RowUnit` numbers rows in the engine's own way)."""
    if isinstance(node, Truncate | RowUnit):
        return _sql_truncate(node, source, steps, keys, dialect, clean)
    if isinstance(node, Scan):
        select, kinds = source(node.table)
        inner = select.subquery("__t", copy=False)
        out = exp.select(
            *(exp.alias_(_col(src, "__t"), dst, quoted=True) for src, dst in node.columns)
        ).from_(inner)
        return out, {dst: kinds[src] for src, dst in node.columns}
    if isinstance(node, Project):
        child, kinds = sql_relation(node.child, source, steps, keys, dialect, clean)
        inner = child.subquery("__p", copy=False)
        out = exp.select(
            *(
                exp.alias_(
                    _key(_col(src, "__p"), kinds[src], src in clean)
                    if dst in node.doubles
                    else _col(src, "__p"),
                    dst,
                    quoted=True,
                )
                for src, dst in node.columns
            )
        ).from_(inner)
        return out, {dst: kinds[src] for src, dst in node.columns}
    if isinstance(node, Steps):
        child, kinds = sql_relation(node.child, source, steps, keys, dialect, clean)
        select, new_kinds = steps(child, node.steps, node.child.output, kinds)
        return select, {c: new_kinds[c] for c in node.output}
    if isinstance(node, Join):
        return _sql_join(node, source, steps, keys, dialect, clean)
    if isinstance(node, KeyUnit):
        select, kinds = _sql_key_unit(node, source, steps, keys, dialect, clean)
        return (select if keys is None else keys(node, select)), kinds
    return _sql_per_unit(node, source, steps, keys, dialect, clean)


_Source = Callable[[str], tuple[exp.Select, Mapping[str, ColumnKind]]]
_StepsSQL = Callable[[exp.Select, Sequence[Step], Sequence[str], Mapping[str, ColumnKind]], Any]
_Keys = Callable[[KeyUnit, exp.Select], exp.Select] | None


def _sql_join(
    node: Join,
    source: _Source,
    steps: _StepsSQL,
    keys: _Keys,
    dialect: Dialect,
    clean: frozenset[str],
) -> tuple[exp.Select, dict[str, ColumnKind]]:
    left, lk = sql_relation(node.left, source, steps, keys, dialect, clean)
    right, rk = sql_relation(node.right, source, steps, keys, dialect, clean)
    conditions = [
        exp.EQ(
            this=_key(_col(a, "__l"), lk[a], a in clean),
            expression=_key(_col(b, "__r"), rk[b], b in clean),
        )
        for a, b in node.on
    ]
    on: exp.Expr = conditions[0]
    for c in conditions[1:]:
        on = exp.And(this=on, expression=c)
    columns = [_col(c, "__l") for c in node.left.output]
    columns += [_col(c, "__r") for c in node.right.output]
    out = (
        exp.select(*columns)
        .from_(left.subquery("__l", copy=False))
        .join(
            right.subquery("__r", copy=False),
            on=on,
            join_type="left" if node.how == "left" else "inner",
        )
    )
    return out, {**lk, **rk}


def _sql_key_unit(
    node: KeyUnit,
    source: _Source,
    steps: _StepsSQL,
    keys: _Keys,
    dialect: Dialect,
    clean: frozenset[str],
) -> tuple[exp.Select, dict[str, ColumnKind]]:
    child, kinds = sql_relation(node.child, source, steps, keys, dialect, clean)
    key = _key(_col(node.key, "__c"), kinds[node.key], node.key in clean)
    lo, hi = _col(node.lo, "__c"), _col(node.hi, "__c")
    out = (
        exp.select(
            exp.alias_(key.copy(), node.key_out, quoted=True),
            exp.alias_(exp.Min(this=lo), node.lo_out, quoted=True),
            exp.alias_(exp.Max(this=hi), node.hi_out, quoted=True),
        )
        .from_(child.subquery("__c", copy=False))
        .where(exp.Not(this=exp.Is(this=key.copy(), expression=exp.Null())))
        .group_by(key.copy())
    )
    return out, {
        node.key_out: kinds[node.key],
        node.lo_out: kinds[node.lo],
        node.hi_out: kinds[node.hi],
    }


def _sql_per_unit(
    node: PerUnit,
    source: _Source,
    steps: _StepsSQL,
    keys: _Keys,
    dialect: Dialect,
    clean: frozenset[str],
) -> tuple[exp.Select, dict[str, ColumnKind]]:
    child, kinds = sql_relation(node.child, source, steps, keys, dialect, clean)
    items: list[exp.Expr] = [_col(k, "__c") for k in node.keys]
    out_kinds: dict[str, ColumnKind] = {k: kinds[k] for k in node.keys}
    for name, function, column in node.aggregates:
        value: exp.Expr
        # a NaN is NULL (skipped), as in the reference engine
        arg = _nan_null(_col(column, "__c"), kinds[column]) if column else exp.Star()
        if function == "count_star":
            value = exp.Count(this=exp.Star())
        elif function == "count":
            value = exp.Count(this=arg)
        elif function == "count_distinct":
            value = exp.Count(this=exp.Distinct(expressions=[arg]))
        elif function in ("sum", "avg"):
            cls = exp.Sum if function == "sum" else exp.Avg
            value = cls(this=exp.cast(arg, "DOUBLE"))
        else:
            value = (exp.Min if function == "min" else exp.Max)(this=arg)
        if function in ("count_star", "count", "count_distinct"):
            value = exp.cast(value, "BIGINT")
        items.append(exp.alias_(value, name, quoted=True))
        out_kinds[name] = kinds[column] if function in ("min", "max") else "numeric"
    grouped = exp.select(*items).from_(child.subquery("__c", copy=False))
    if node.keys:
        grouped = grouped.group_by(*(_col(k, "__c") for k in node.keys))
    return grouped, out_kinds


GOLDEN = 0.6180339887498949
"""A row's scrambled number ``x`` is ``fmod(x * GOLDEN, 1)`` (exact IEEE operations: every
engine computes the same double)."""


def _scrambled(value: exp.Expr, kind: ColumnKind | None) -> exp.Expr:
    """A column's value as a truncation orders rows first (see :class:`Truncate`)."""
    if kind == "numeric":
        double = _key(value, kind)
        product = exp.Mul(this=double, expression=exp.cast(exp.Literal.number(GOLDEN), "DOUBLE"))
        scrambled = exp.Mod(
            this=exp.Paren(this=product), expression=exp.cast(exp.Literal.number(1), "DOUBLE")
        )
        # ±inf scrambles to NaN: read it as NULL (first, as pandas orders it), since SQL
        # engines order NaN after every number whatever NULLS FIRST says
        return exp.If(this=_is_nan(scrambled.copy()), true=exp.Null(), false=scrambled)
    if kind == "string":
        return exp.MD5(this=value)
    return value


def _sql_truncate(
    node: Truncate | RowUnit,
    source: _Source,
    steps: _StepsSQL,
    keys: _Keys,
    dialect: Dialect,
    clean: frozenset[str],
) -> tuple[exp.Select, dict[str, ColumnKind]]:
    child, kinds = sql_relation(node.child, source, steps, keys, dialect, clean)
    inner = child.subquery("__c", copy=False)
    names = node.child.output
    if isinstance(node, RowUnit):
        number: exp.Expr = (
            exp.Anonymous(this="monotonically_increasing_id", expressions=[])
            if dialect == "spark"
            else exp.Window(this=exp.RowNumber())
        )
        items = [
            exp.alias_(number, c, quoted=True) if c == node.unit else _col(c, "__c") for c in names
        ]
        return exp.select(*items).from_(inner), {**kinds, node.unit: "numeric"}
    order = [_scrambled(_col(c, "__c"), kinds[c]) for c in node.scramble]
    order += [_nan_null(_col(c, "__c"), kinds[c]) for c in names]
    partition = [_key(_col(c, "__c"), kinds[c]) for c in node.partition]
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=partition,
        order=exp.Order(expressions=[exp.Ordered(this=o, nulls_first=True) for o in order]),
    )
    ranked = exp.select(
        *(_col(c, "__c") for c in names), exp.alias_(rank, "__rank", quoted=True)
    ).from_(inner)
    keep: exp.Expr = exp.LTE(this=_col("__rank", "__k"), expression=exp.Literal.number(node.limit))
    for c in node.partition:
        keep = exp.Or(
            this=keep,
            expression=exp.Is(this=_key(_col(c, "__k"), kinds[c]), expression=exp.Null()),
        )
    out = (
        exp.select(*(_col(c, "__k") for c in names))
        .from_(ranked.subquery("__k", copy=False))
        .where(keep)
    )
    return out, dict(kinds)


# ------------------------------------------------------------------------------------- pandas
def _null_keys(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """Rows with a NULL (or NaN) key in any of ``columns``."""
    mask = np.zeros(len(frame), dtype=bool)
    for c in columns:
        mask |= frame[c].isna().to_numpy(dtype=bool)
    return mask


def _merge_key(series: pd.Series, other: pd.Series) -> pd.Series:
    """A key as the SQL engines compare it (:func:`_key`): a number as a double (``-0.0`` as
    ``0.0``), a time-zone-aware timestamp as naive UTC (the SQL engines run in UTC), text as
    Python strings."""
    del other
    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
        return _as_double(series)
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        return series.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[us]")
    if pd.api.types.is_datetime64_dtype(series.dtype):
        return series.astype("datetime64[us]")
    if isinstance(series.dtype, pd.StringDtype) or series.dtype == object:
        return series.astype(object)
    return series


def pandas_relation(
    node: Relation,
    source: Callable[[str], pd.DataFrame],
    steps: Callable[[pd.DataFrame, Sequence[Step]], pd.DataFrame],
) -> pd.DataFrame:
    """The relation as a frame (the reference semantics of :func:`sql_relation`)."""
    if isinstance(node, Scan):
        frame = source(node.table)
        out = pd.DataFrame({dst: frame[src].reset_index(drop=True) for src, dst in node.columns})
        return out
    if isinstance(node, Project):
        child = pandas_relation(node.child, source, steps)
        return pd.DataFrame(
            {
                dst: _as_double(child[src]) if dst in node.doubles else child[src]
                for src, dst in node.columns
            }
        )
    if isinstance(node, Steps):
        child = pandas_relation(node.child, source, steps)
        return steps(child, node.steps)[list(node.output)].reset_index(drop=True)
    if isinstance(node, Join):
        left = pandas_relation(node.left, source, steps)
        right = pandas_relation(node.right, source, steps)
        lcols, rcols = [a for a, _ in node.on], [b for _, b in node.on]
        lnull, rnull = _null_keys(left, lcols), _null_keys(right, rcols)
        lkeys = [f"__dpkit_jl{i}" for i in range(len(lcols))]
        rkeys = [f"__dpkit_jr{i}" for i in range(len(rcols))]
        lwork = left[~lnull].reset_index(drop=True)
        rwork = right[~rnull].reset_index(drop=True)
        lwork = lwork.assign(
            **{
                k: _merge_key(lwork[a], rwork[b])
                for k, a, b in zip(lkeys, lcols, rcols, strict=True)
            }
        )
        rwork = rwork.assign(
            **{
                k: _merge_key(rwork[b], lwork[a])
                for k, a, b in zip(rkeys, lcols, rcols, strict=True)
            }
        )
        rwork = _nullable(rwork)
        merged = lwork.merge(rwork, how=node.how, left_on=lkeys, right_on=rkeys, sort=False)
        merged = merged[list(node.output)]
        if node.how == "left" and lnull.any():
            unmatched = left[lnull].reset_index(drop=True)
            filler = rwork.iloc[:0][list(node.right.output)].reindex(range(len(unmatched)))
            merged = pd.concat(
                [merged, pd.concat([unmatched, filler], axis=1)[list(node.output)]],
                ignore_index=True,
            )
        return merged.reset_index(drop=True)
    if isinstance(node, KeyUnit):
        child = pandas_relation(node.child, source, steps)
        rows = child.loc[~_null_keys(child, [node.key])]
        key = _merge_key(rows[node.key], rows[node.key])
        frame = pd.DataFrame(
            {"k": key.to_numpy(), "lo": _units(rows[node.lo]), "hi": _units(rows[node.hi])}
        )
        grouped = frame.groupby("k", sort=False)
        return pd.DataFrame(
            {
                node.key_out: grouped["lo"].min().index.to_numpy(),
                node.lo_out: grouped["lo"].min().to_numpy(),
                node.hi_out: grouped["hi"].max().to_numpy(),
            }
        )
    child = pandas_relation(node.child, source, steps)
    if isinstance(node, RowUnit):
        return child.assign(**{node.unit: np.arange(len(child), dtype=np.int64)})
    if isinstance(node, Truncate):
        return _truncated(child, node)
    return _per_unit(child, node)


def _scramble_values(series: pd.Series) -> Any:
    """:func:`_scrambled` in numpy: a number as ``fmod(x * GOLDEN, 1)``, text as its md5."""
    series = _plain_text(series)
    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
        with np.errstate(invalid="ignore"):  # ±inf scrambles to NaN, ordered first as NULL
            return np.fmod(_as_double(series).to_numpy() * GOLDEN, 1.0)
    if isinstance(series.dtype, pd.StringDtype) or series.dtype == object:
        texts = series.astype(object)
        digests = {
            v: hashlib.md5(str(v).encode("utf-8"), usedforsecurity=False).hexdigest()
            for v in pd.unique(texts.dropna())
        }
        return texts.map(digests).to_numpy()
    return series.to_numpy()


def _truncated(child: pd.DataFrame, node: Truncate) -> pd.DataFrame:
    """:class:`Truncate` (the reference semantics of :func:`_sql_truncate`)."""
    child = child.reset_index(drop=True)
    order = pd.DataFrame(
        {f"__dpkit_s{i}": _scramble_values(child[c]) for i, c in enumerate(node.scramble)}
    )
    for i, c in enumerate(node.output):
        order[f"__dpkit_o{i}"] = _sortable(child[c]).to_numpy()
    ranked = order.sort_values(list(order.columns), na_position="first", kind="stable").index
    keys = pd.DataFrame(
        {f"__dpkit_p{i}": _merge_key(child[c], child[c]) for i, c in enumerate(node.partition)}
    )
    null = _null_keys(keys, list(keys.columns))
    position = keys.loc[ranked].groupby(list(keys.columns), dropna=True, sort=False).cumcount()
    rank = np.zeros(len(child), dtype=np.float64)
    rank[position.index.to_numpy()] = position.to_numpy(dtype=np.float64, na_value=0.0)
    keep = null | (rank < node.limit)
    return child[keep].reset_index(drop=True)


def _plain_text(series: pd.Series) -> pd.Series:
    """A categorical or Arrow text column as Python strings (what the SQL engines read: text,
    ordered and hashed by its values, not by category codes)."""
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype) or (
        pd.api.types.is_string_dtype(dtype) and dtype is not np.dtype(object)
    ):
        return series.astype(object).where(series.notna(), None)
    return series


def _sortable(series: pd.Series) -> pd.Series:
    """A column as the SQL engines order it in a truncation: NaN as NULL, text by code point,
    time-zone-aware timestamps as naive UTC."""
    series = _plain_text(series)
    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
        if pd.api.types.is_float_dtype(series.dtype):
            return _as_double(series)
        return series
    return _merge_key(series, series)


def _units(series: pd.Series) -> Any:
    """Unit values to take the minimum and maximum of: numbers as float64 (NaN: none), text as
    Python strings (None: none; compared by code point, as the SQL engines' binary collation)."""
    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
        return series.to_numpy(dtype="float64", na_value=np.nan)
    return series.astype(object).where(series.notna(), None).to_numpy()


def _as_double(series: pd.Series) -> pd.Series:
    """A numeric column as float64 (NaN for NULL and NaN, ``-0.0`` as ``0.0``), as the SQL
    engines' ``CAST(x AS DOUBLE)`` with NaN read as NULL."""
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        return series
    return pd.Series(series.to_numpy(dtype="float64", na_value=np.nan) + 0.0, index=series.index)


def _nullable(frame: pd.DataFrame) -> pd.DataFrame:
    """Integer and boolean columns as pandas' nullable dtypes (a left join's NULLs keep them
    exact: int64 values above 2^53 would lose digits as floats)."""
    changes = {}
    for name, dtype in frame.dtypes.items():
        if pd.api.types.is_bool_dtype(dtype) and not isinstance(dtype, pd.BooleanDtype):
            changes[name] = "boolean"
        elif pd.api.types.is_integer_dtype(dtype) and not isinstance(
            dtype, pd.core.dtypes.dtypes.BaseMaskedDtype
        ):
            changes[name] = "UInt64" if pd.api.types.is_unsigned_integer_dtype(dtype) else "Int64"
    return frame.astype(changes) if changes else frame


def _per_unit(child: pd.DataFrame, node: PerUnit) -> pd.DataFrame:
    keys = list(node.keys)
    work = child[keys].copy()
    for k in keys:
        if pd.api.types.is_float_dtype(work[k].dtype):
            work[k] = work[k].astype("float64") + 0.0
    values: dict[str, pd.Series] = {}
    for i, (_, function, column) in enumerate(node.aggregates):
        if function == "count_star":
            continue
        series = child[column]
        if function in ("sum", "avg"):
            series = series.astype("float64")
        values[f"__dpkit_a{i}"] = series
    work = work.assign(**values)
    grouped = work.groupby(keys, dropna=False, sort=False)
    out = grouped.size().rename("__dpkit_n").reset_index()
    for i, (name, function, _) in enumerate(node.aggregates):
        column = f"__dpkit_a{i}"
        if function == "count_star":
            result = grouped.size()
        elif function == "count":
            result = grouped[column].count()
        elif function == "count_distinct":
            result = grouped[column].nunique(dropna=True)
        elif function == "sum":
            result = grouped[column].sum(min_count=1)
        elif function == "avg":
            result = grouped[column].mean()
        elif function == "min":
            result = grouped[column].min()
        else:
            result = grouped[column].max()
        out[name] = result.to_numpy()
        if function in ("count_star", "count", "count_distinct"):
            out[name] = out[name].astype("int64")
    return out[list(node.output)]
