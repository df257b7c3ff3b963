"""The family registry's specs: what each aggregate family declares once, for every front end.

A :class:`Family` is registered once, in its own module under
:mod:`dpkit.analytics._planner.families`, with
:func:`dpkit.analytics._planner._registry.register_family`. It says:

* the aggregation class it answers and its compiler (the planner reads it through
  :func:`dpkit.analytics._planner._registry.compiler_for`);
* its :class:`Form` s, the ways a user writes it: the builder function (``count``, ``median``),
  the builder's arguments in the order the SQL text gives them (:attr:`Form.params`), the SQL
  function names (``AVG``, ``MEAN``) and the service's JSON ``op``;
* its result columns in the main table (``name``, ``name_low``, ``name_high`` by default) or,
  with :attr:`Family.table`, that it is released as a table of its own (and that table's fixed
  columns, which may not be group_by columns);
* how it renders in the plan text (``explain()``, the ledger receipt, the CLI);
* the cells it asks the engine for per group (the service bounds a request's work with it).

The front ends read these specs: :class:`~dpkit.analytics._query.GroupedQuery` (known types, result
columns, table names, render), :mod:`dpkit.analytics._querytext` (the SQL functions and their
arguments), :mod:`dpkit.service` (the JSON ops and fields) and ``dpkit.analytics.<builder>``.
This module imports nothing of the analytics layer, so the user-facing query module can read it
without an import circle; the families fill it when :mod:`dpkit.analytics` is imported.

Parameters (:attr:`Form.params`), in SQL argument order:

* ``"column"``: the column (SQL: a column name; JSON: the ``column`` field);
* ``"lower"``, ``"upper"``: numbers passed together as ``bounds=(lower, upper)`` (JSON: the
  ``lower`` / ``upper`` fields, or the dataset's declared bounds of the column when both are
  absent);
* ``"*edges"`` (a leading ``*``): every remaining SQL argument, as the list ``edges=[...]`` (JSON:
  a list field of that name);
* any other name (``"q"``): one number passed as that keyword argument (JSON: that field);
* ``"*"`` and ``"distinct_unit"``: the forms ``COUNT(*)`` and ``COUNT(DISTINCT <unit>)``.

The output name is passed as ``name=`` only when the user gives one (``AS`` in SQL, ``name`` in
JSON): the builder's own default applies otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Family",
    "Form",
    "add_family",
    "default_columns",
    "families",
    "family_of",
    "forms",
    "released_columns",
]


@dataclass(frozen=True, slots=True)
class Form:
    """One way to write an aggregation: its builder and, optionally, its SQL and JSON syntax.

    Attributes:
        builder: the public builder function (``dpkit.analytics.<builder name>``).
        params: the builder's arguments in SQL order (see the module docstring).
        sql: the SQL function names, the first one canonical (``("AVG", "MEAN")``); empty when
            the form has no SQL syntax.
        op: the service's JSON ``op``, or None when the service does not offer it.
        signature: the SQL form for messages (default: built from ``params``).
    """

    builder: Callable[..., Any]
    params: tuple[str, ...] = ()
    sql: tuple[str, ...] = ()
    op: str | None = None
    signature: str = ""

    @property
    def name(self) -> str:
        """The builder's name (``count``, ``median``)."""
        return str(getattr(self.builder, "__name__", "?"))

    def sql_signature(self) -> str:
        """``SUM(col, lower, upper)``; ``HISTOGRAM(col, edges...)``."""
        if self.signature or not self.sql:
            return self.signature
        shown = []
        for p in self.params:
            if p == "column":
                shown.append("col")
            elif p.startswith("*"):
                shown.append(f"{p[1:]}...")
            else:
                shown.append(p)
        return f"{self.sql[0]}({', '.join(shown)})"

    def build(self, values: dict[str, Any], name: str | None) -> Any:
        """The aggregation from parsed parameter values (``lower``/``upper`` become ``bounds``)."""
        kwargs: dict[str, Any] = {}
        for p in self.params:
            if p in ("*", "distinct_unit", "lower", "upper"):
                continue
            key = p.lstrip("*")
            kwargs[key] = values.get(key)
        if "lower" in self.params:
            kwargs["bounds"] = (values.get("lower"), values.get("upper"))
        if name is not None:
            kwargs["name"] = name
        return self.builder(**kwargs)


def default_columns(agg: Any) -> tuple[str, ...]:
    """A value with its interval: ``name``, ``name_low``, ``name_high``."""
    return (agg.name, f"{agg.name}_low", f"{agg.name}_high")


@dataclass(frozen=True, slots=True)
class Family:
    """An aggregate family's spec (see the module docstring).

    Attributes:
        kind: the aggregation class (a frozen dataclass with ``name`` and ``weight``).
        forms: how users write it (builder, SQL, JSON); the first is the canonical one.
        compiler: ``(agg, FamilyContext) -> Compiled`` (see :mod:`.planner.registry`).
        render: the aggregation as plan text (``count() as n``).
        columns: the columns it adds to the main result table (ignored with ``table``).
        table: released as a table of its own, named by the aggregation's ``name``.
        table_columns: that table's fixed columns (they may not be group_by columns).
        cells: the counts the engine computes per group (for work limits), or None.
        display: post-processing for display, free under DP (``Release.display``, the CLI):
            ``display(frame, agg)`` edits a copy of a released table in place (rounds counts,
            clips into the declared bounds); None leaves the values as released.
        counts: the columns holding counts (the CLI prints them as integers): of the main table,
            or with ``table``, of its own table.
        value_columns: the input columns it reads (checked numeric by the planner; default:
            the aggregation's ``column``).
        summary: one line for the docs and messages.
        gaussian: whether Gaussian noise (a zCDP share) can serve it. False for a family that
            only selects with a pure-ε mechanism (``mode``): under ``mechanism="auto"`` a query
            whose families all say False gets a pure share of an (ε, δ) budget, instead of a
            zCDP share it could only use as ε = √(2ρ).
    """

    kind: type
    forms: tuple[Form, ...]
    compiler: Callable[..., Any]
    render: Callable[[Any], str]
    columns: Callable[[Any], tuple[str, ...]] = default_columns
    table: bool = False
    table_columns: tuple[str, ...] = ()
    cells: Callable[[Any], int] | None = None
    display: Callable[[Any, Any], None] | None = None
    counts: Callable[[Any], tuple[str, ...]] | None = None
    value_columns: Callable[[Any], tuple[str, ...]] = lambda agg: (agg.column,)
    summary: str = ""
    gaussian: bool = True

    @property
    def name(self) -> str:
        """The family's name: its canonical builder's."""
        return self.forms[0].name


_FAMILIES: dict[type, Family] = {}


def add_family(family: Family) -> Family:
    """Record ``family`` (once per aggregation class); used by ``register_family``."""
    if family.kind in _FAMILIES:
        raise ValueError(f"a family for {family.kind.__name__} is already registered")
    if not family.forms:
        raise ValueError(f"the family of {family.kind.__name__} declares no form")
    seen_sql = {(n, f.params[:1]) for fam in _FAMILIES.values() for f in fam.forms for n in f.sql}
    seen_ops = {f.op for fam in _FAMILIES.values() for f in fam.forms if f.op}
    for form in family.forms:
        for sql_name in form.sql:
            if (sql_name, form.params[:1]) in seen_sql:
                raise ValueError(f"the SQL function {sql_name} is already registered")
        if form.op is not None and form.op in seen_ops:
            raise ValueError(f"the JSON op {form.op!r} is already registered")
    _FAMILIES[family.kind] = family
    return family


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order."""
    return tuple(_FAMILIES.values())


def forms() -> Iterator[Form]:
    """Every registered form, in registration order."""
    for family in _FAMILIES.values():
        yield from family.forms


def family_of(agg: object) -> Family | None:
    """The family of ``agg``'s type (or of its nearest registered base class), or None."""
    for kind in type(agg).__mro__:
        found = _FAMILIES.get(kind)
        if found is not None:
            return found
    return None


def released_columns(agg: object) -> tuple[str, ...]:
    """The columns ``agg`` adds to the main result table (none for a table of its own)."""
    family = family_of(agg)
    if family is None or family.table:
        return ()
    return family.columns(agg)
