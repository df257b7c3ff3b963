"""Several tables in one Session: the privacy unit across tables, and joins planned so that
every row of a joined relation belongs to one unit.

**The tables.** A session's tables are *private* or *public*. One private table holds the
privacy unit in a column (``privacy_unit="customer.c_custkey"``); every other private table is
*linked* to it by a declared foreign key, directly (``orders.o_custkey ->
customer.c_custkey``) or through other tables (``lineitem.l_orderkey -> orders.o_orderkey``).
Public tables (``nation``, ``region``) are public information: they need no link and are never
protected.

**The unit of a row.** A row of the unit table belongs to the unit in its unit column. A row of
a linked table belongs to the unit of the rows its foreign key reaches in the parent table:

* a link to the unit column itself: the unit is the key's value (``o_custkey``);
* a link to another column of a parent: the unit all parent rows with that key belong to, when
  they all belong to one unit. A row whose key reaches no parent row, only rows of no unit, or
  rows of several units (the parent's key is not unique across units), belongs to no unit.

Rows that belong to no unit (a NULL key included) are left out of every query.

**Neighbouring databases** differ by one unit *together with every row reachable from it*: its
row(s) of the unit table and every row of a linked table whose key reaches one of them (through
any number of links). Public tables are the same in both. Removing unit ``u`` therefore removes
exactly the rows that belong to ``u`` and the rows that reached ``u`` *and* another unit (those
belonged to no unit, and were left out before); no other row changes unit. So each unit's rows
of every private table are a function of that unit's own rows (and the public tables).

**Joins are unit-local.** The planner adds "same unit" to the condition of every join of two
private relations, and keeps the unit of the private side of a join with a public relation. Each
row of a joined relation therefore combines rows of one unit (and public rows), and a unit's
joined rows are a function of its own rows: the join is 1-stable from the unit distance on the
tables to the unit distance on the relation. Contribution bounding (``max_rows``,
``max_groups``) then applies to the joined rows, per unit, exactly as to a single table, and the
sensitivities follow from the bounds as for one table. A key's multiplicity in a public table
(how many rows one private row becomes) needs no accounting: it is bounded by ``max_rows``
after the join.

The "same unit" condition is implied when private relations are joined along a declared link
(``l_orderkey = o_orderkey``) or on columns that both equal the unit (``o_custkey =
c_custkey``); a join of private relations on other keys would pair rows of different units,
and it is refused (it would need a truncated join whose stability grows with its truncation
bounds). A subquery that aggregates per group (:class:`~dpkit.analytics._query.PerUnit`) must
group by a column equal to the unit, so each of its rows is one unit's.

Everything here reads the declared schemas only; no data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._columns import RELATION_UNIT, RESERVED_PREFIX
from dpkit.analytics._engines._relation import Join as RJoin
from dpkit.analytics._engines._relation import (
    KeyUnit,
    Project,
    Relation,
    RowUnit,
    Scan,
    Steps,
    Truncate,
)
from dpkit.analytics._engines._relation import PerUnit as RPerUnit
from dpkit.analytics._expr import (
    Col,
    ColumnKind,
    Expr,
    coerce_temporal_literals,
    col,
    columns_of,
    infer_kind,
)
from dpkit.analytics._query import (
    Aggregate,
    Alias,
    Filter,
    Join,
    PerUnit,
    PlanNode,
    Select,
    Source,
    WithColumn,
)
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

__all__ = [
    "UNIT",
    "Catalog",
    "Link",
    "Planned",
    "plan_relation",
    "qualify_chain",
    "relation_schema",
    "split_relation",
]

UNIT = RELATION_UNIT
"""The column of a planned relation that holds each row's privacy unit."""

_UNIT_RIGHT = f"{RESERVED_PREFIX}unit_r"
_KEY = f"{RESERVED_PREFIX}key"
_LO = f"{RESERVED_PREFIX}lo"
_HI = f"{RESERVED_PREFIX}hi"
MAX_TABLES = 64
"""At most this many tables in a session, and table references in a query."""


@dataclass(frozen=True, slots=True)
class Link:
    """``child.column`` holds keys of ``parent.parent_column`` (a declared foreign key)."""

    child: str
    column: str
    parent: str
    parent_column: str

    def render(self) -> str:
        return f"{self.child}.{self.column} -> {self.parent}.{self.parent_column}"


def _dotted(text: object, what: str) -> tuple[str, str]:
    if not isinstance(text, str) or text.count(".") < 1:
        raise InvalidParameterError(what, text, "'table.column', e.g. 'customer.c_custkey'")
    table, _, column = text.partition(".")
    if not table or not column:
        raise InvalidParameterError(what, text, "'table.column', e.g. 'customer.c_custkey'")
    return table, column


def _comparable(a: ColumnKind | None, b: ColumnKind | None) -> bool:
    return a is None or b is None or a == b


@dataclass(frozen=True)
class Catalog:
    """The session's tables: each one's columns and kinds, which are public, the unit and the
    links. Built by :meth:`build`, which refuses a catalog that cannot be planned."""

    schemas: Mapping[str, Mapping[str, ColumnKind]]
    public: frozenset[str]
    unit_table: str
    unit_column: str
    links: Mapping[str, Link]

    @staticmethod
    def build(
        schemas: Mapping[str, Mapping[str, ColumnKind]],
        public: Iterable[str],
        privacy_unit: str,
        links: object = None,
    ) -> Catalog:
        """Check and build a catalog (every refusal names the parameter and the value)."""
        public = frozenset(public)
        if len(schemas) > MAX_TABLES:
            raise InvalidParameterError("tables", len(schemas), f"at most {MAX_TABLES} tables")
        for name in schemas:
            if not isinstance(name, str) or not name or "." in name:
                raise InvalidParameterError(
                    "tables", name, "table names: non-empty text without '.'"
                )
            for column in schemas[name]:
                if column.startswith(RESERVED_PREFIX):
                    raise InvalidParameterError(
                        "tables",
                        f"{name}.{column}",
                        f"column names that do not start with {RESERVED_PREFIX!r} (reserved "
                        "for dpkit's own columns, such as each row's person)",
                        "Rename the column in the source.",
                    )
        table, column = _dotted(privacy_unit, "privacy_unit")
        if table not in schemas or table in public:
            private = sorted(set(schemas) - public)
            raise InvalidParameterError(
                "privacy_unit",
                privacy_unit,
                f"'table.column' of a private table ({', '.join(private)})",
            )
        if column not in schemas[table]:
            raise InvalidParameterError(
                "privacy_unit",
                privacy_unit,
                f"a column of table {table!r} ({', '.join(map(repr, schemas[table]))})",
            )
        found: dict[str, Link] = {}
        for child_text, parent_text in _link_pairs(links):
            child, fk = _dotted(child_text, "links")
            parent, key = _dotted(parent_text, "links")
            for t, c, text in ((child, fk, child_text), (parent, key, parent_text)):
                if t not in schemas:
                    raise InvalidParameterError(
                        "links", text, f"'table.column' of a table ({', '.join(schemas)})"
                    )
                if t in public:
                    raise InvalidParameterError(
                        "links",
                        text,
                        "a private table",
                        f"{t!r} is public: it needs no link to the privacy unit; join it in "
                        "the query.",
                    )
                if c not in schemas[t]:
                    raise InvalidParameterError(
                        "links", text, f"a column of {t!r} ({', '.join(map(repr, schemas[t]))})"
                    )
            if child == table:
                raise InvalidParameterError(
                    "links",
                    child_text,
                    "a link from a table other than the unit's",
                    f"{table!r} holds the privacy unit itself.",
                )
            if child in found:
                raise InvalidParameterError(
                    "links",
                    child_text,
                    "one link per table",
                    f"{child!r} already links through {found[child].render()}: a row must "
                    "reach the privacy unit by one path.",
                )
            if not _comparable(schemas[child][fk], schemas[parent][key]):
                raise InvalidParameterError(
                    "links",
                    f"{child_text} -> {parent_text}",
                    "columns of the same kind",
                    f"{child_text} is {schemas[child][fk]}, {parent_text} is "
                    f"{schemas[parent][key]}.",
                )
            found[child] = Link(child, fk, parent, key)
        catalog = Catalog(dict(schemas), public, table, column, found)
        for name in schemas:
            if name not in public:
                catalog.path(name)  # refuses a table with no path, or a cycle
        return catalog

    def path(self, table: str) -> tuple[Link, ...]:
        """The links from ``table`` to the unit table (empty for the unit table)."""
        links: list[Link] = []
        seen = {table}
        current = table
        while current != self.unit_table:
            link = self.links.get(current)
            if link is None:
                raise InvalidParameterError(
                    "links",
                    current,
                    f"a link from private table {current!r} towards the privacy unit "
                    f"({self.unit_table}.{self.unit_column})",
                    "Declare its foreign key, e.g. links={'orders.o_custkey': "
                    "'customer.c_custkey'}, or declare the table public.",
                )
            links.append(link)
            if link.parent in seen:
                raise InvalidParameterError(
                    "links",
                    " -> ".join(x.render() for x in links),
                    "links that reach the privacy unit's table",
                    "These links form a cycle.",
                )
            seen.add(link.parent)
            current = link.parent
        return tuple(links)

    def unit_columns(self, table: str) -> frozenset[str]:
        """Columns of ``table`` whose value is the unit of the row: the unit column, or a
        foreign key to it."""
        if table == self.unit_table:
            return frozenset({self.unit_column})
        link = self.links.get(table)
        if link and link.parent == self.unit_table and link.parent_column == self.unit_column:
            return frozenset({link.column})
        return frozenset()

    @property
    def label(self) -> str:
        return f"{self.unit_table}.{self.unit_column}"

    def describe(self) -> str:
        """The catalog in one paragraph (for explanations)."""
        parts = [f"privacy unit {self.label}"]
        parts += [link.render() for link in self.links.values()]
        if self.public:
            parts.append("public: " + ", ".join(sorted(self.public)))
        return "; ".join(parts)


def _link_pairs(links: object) -> list[tuple[object, object]]:
    if links is None:
        return []
    if isinstance(links, Mapping):
        return list(links.items())
    if isinstance(links, str):
        raise InvalidParameterError(
            "links", links, "a mapping {'child.column': 'parent.column'} or a list of pairs"
        )
    pairs: list[tuple[object, object]] = []
    for item in links if isinstance(links, Iterable) else [links]:
        if isinstance(item, str) and item.count("=") == 1:
            child, parent = item.split("=")
            pairs.append((child.strip(), parent.strip()))
        elif isinstance(item, tuple) and len(item) == 2:
            pairs.append((item[0], item[1]))
        else:
            raise InvalidParameterError(
                "links",
                item,
                "a pair ('child.column', 'parent.column') or 'child.column=parent.column'",
            )
    return pairs


# ------------------------------------------------------------------------------- planning
@dataclass
class Planned:
    """A planned relation: the node, its visible columns (name -> kind), each column's
    qualifier (the alias it is known by) and base name, the columns equal to the unit, the
    declared-key origin of unchanged table columns, and whether it holds private rows (then
    its column :data:`UNIT` holds each row's unit)."""

    node: Relation
    kinds: dict[str, ColumnKind]
    qualifier: dict[str, str]
    base: dict[str, str]
    unit_equal: set[str] = field(default_factory=set)
    origin: dict[str, tuple[str, str]] = field(default_factory=dict)
    private: bool = False
    stability: int = 1
    """After a truncated join: how many rows of the relation one unit changes at most (each
    row is then its own contribution); 1 for a unit-local relation."""

    @property
    def columns(self) -> tuple[str, ...]:
        hidden = (UNIT,) if self.private else ()
        return (*self.kinds, *hidden)

    def resolve(self, name: str, what: str) -> str:
        """A column reference (``name`` or ``alias.name``) as this relation's column name; a
        bare name more than one column has (after joins, ``a.x`` and ``b.x``) is ambiguous,
        as in SQL."""
        sharing = [v for v in self.kinds if self.base.get(v) == name]
        if name in self.kinds and len(sharing) <= 1:
            return name
        if "." in name and name not in self.kinds:
            qualifier, _, base = name.partition(".")
            for visible in self.kinds:
                if self.qualifier.get(visible) == qualifier and self.base.get(visible) == base:
                    return visible
        if len(sharing) == 1:
            return sharing[0]
        if len(sharing) > 1:
            options = ", ".join(f"{self.qualifier[m]}.{name}" for m in sharing)
            raise UnsupportedQueryError(f"column {name!r} is ambiguous: write {options}")
        if name in self.kinds:
            return name
        known = ", ".join(repr(c) for c in self.kinds)
        raise InvalidParameterError(what, name, f"a column of the relation ({known})")


def _predicate(expr: Expr, kinds: Mapping[str, ColumnKind]) -> Expr:
    """A filter's condition, its date literals read as dates where they meet dates, checked
    to be a condition (before anything is read)."""
    expr = coerce_temporal_literals(expr, kinds)
    kind = infer_kind(expr, kinds)
    if kind not in ("bool", None):
        raise UnsupportedQueryError(f"{expr.render()} is a {kind} value, not a condition")
    return expr


def _orient(left: Planned, right: Planned, a: str, b: str) -> tuple[str, str]:
    """The pair ``a = b`` as (left column, right column): as written, or swapped when only
    that reads (SQL writes ``ON o_orderkey = l_orderkey`` either way round)."""
    try:
        return left.resolve(a, "on"), right.resolve(b, "on")
    except (InvalidParameterError, UnsupportedQueryError) as error:
        try:
            return left.resolve(b, "on"), right.resolve(a, "on")
        except (InvalidParameterError, UnsupportedQueryError):
            raise error from None


def split_relation(plan: PlanNode) -> tuple[list[PlanNode], PlanNode]:
    """The query's top chain (aggregate, filters, derived columns, selections; outermost
    first) and the relation under it (a table, a join, an aliased or per-unit subquery)."""
    chain: list[PlanNode] = []
    current = plan
    while isinstance(current, Aggregate | Filter | WithColumn | Select):
        chain.append(current)
        current = current.child
    return chain, current


def _steps(planned: Planned, steps: list[Step], kinds: dict[str, ColumnKind]) -> Planned:
    out = tuple(c for c in kinds) + ((UNIT,) if planned.private else ())
    return Planned(
        Steps(planned.node, tuple(steps), out),
        kinds,
        planned.qualifier,
        planned.base,
        planned.unit_equal & set(kinds),
        {k: v for k, v in planned.origin.items() if k in kinds},
        planned.private,
        planned.stability,
    )


def _rename(planned: Planned, mapping: Mapping[str, str]) -> Planned:
    """``planned`` with columns renamed (``old -> new``)."""
    if not mapping:
        return planned
    kinds = {mapping.get(c, c): k for c, k in planned.kinds.items()}
    out = Planned(
        Project(planned.node, tuple((c, mapping.get(c, c)) for c in planned.columns)),
        kinds,
        {mapping.get(c, c): q for c, q in planned.qualifier.items()},
        {mapping.get(c, c): b for c, b in planned.base.items()},
        {mapping.get(c, c) for c in planned.unit_equal},
        {mapping.get(c, c): o for c, o in planned.origin.items()},
        planned.private,
        planned.stability,
    )
    return out


class _Planner:
    def __init__(self, catalog: Catalog, max_rows: int | None = None) -> None:
        self.catalog = catalog
        self.references = 0
        self.max_rows = max_rows

    # -- tables ---------------------------------------------------------------------------
    def reach(self, table: str, columns: tuple[str, ...]) -> Relation:
        """Every row of private table ``table``: ``columns``, and the smallest and largest
        unit it reaches through its links (``_LO``, ``_HI``; NULL: none). A numeric unit is a
        double, as joins compare it (ids above 2^53 that round alike are one unit)."""
        catalog = self.catalog
        link = catalog.links.get(table)
        if table == catalog.unit_table:
            unit: str | None = catalog.unit_column
        elif link.parent == catalog.unit_table and link.parent_column == catalog.unit_column:  # type: ignore[union-attr]
            unit = link.column  # type: ignore[union-attr]
        else:
            unit = None
        if unit is not None:
            numeric = catalog.schemas[catalog.unit_table][catalog.unit_column] == "numeric"
            scan = Scan(table, (*((c, c) for c in columns), (unit, _LO), (unit, _HI)))
            out = tuple((c, c) for c in (*columns, _LO, _HI))
            return Project(scan, out, (_LO, _HI) if numeric else ())
        assert link is not None  # Catalog.build checked every private table's path
        parent = self.reach(link.parent, (link.parent_column,))
        keys = KeyUnit(parent, link.parent_column, _LO, _HI, _KEY, _LO, _HI)
        scan = Scan(table, tuple((c, c) for c in dict.fromkeys((*columns, link.column))))
        joined = RJoin(scan, keys, ((link.column, _KEY),), "left")
        return Project(joined, tuple((c, c) for c in (*columns, _LO, _HI)))

    def annotated(self, table: str, columns: tuple[str, ...]) -> Relation:
        """Private table ``table``'s rows that belong to a unit (they reach exactly one):
        ``columns`` and :data:`UNIT`."""
        reached = self.reach(table, columns)
        one = Steps(reached, (Step("filter", col(_LO) == col(_HI)),), reached.output)
        return Project(one, (*((c, c) for c in columns), (_LO, UNIT)), annotates=table)

    def source(self, table: str | None) -> Planned:
        catalog = self.catalog
        self.references += 1
        if self.references > MAX_TABLES:
            raise UnsupportedQueryError(f"a query reads at most {MAX_TABLES} tables")
        if table is None:
            raise UnsupportedQueryError(
                "this session has several tables: name one, e.g. session.query('orders') or "
                "FROM orders"
            )
        if table not in catalog.schemas:
            raise InvalidParameterError(
                "table", table, f"a table of the session ({', '.join(catalog.schemas)})"
            )
        schema = dict(catalog.schemas[table])
        columns = tuple(schema)
        qualifier = dict.fromkeys(columns, table)
        base = {c: c for c in columns}
        origin = {c: (table, c) for c in columns}
        if table in catalog.public:
            return Planned(
                Scan(table, tuple((c, c) for c in columns)), schema, qualifier, base, origin=origin
            )
        return Planned(
            self.annotated(table, columns),
            schema,
            qualifier,
            base,
            set(catalog.unit_columns(table)),
            origin,
            True,
        )

    # -- the tree -------------------------------------------------------------------------
    def plan(self, node: PlanNode) -> Planned:
        if isinstance(node, Source):
            return self.source(node.table)
        if isinstance(node, Alias):
            inner = self.plan(node.child)
            inner.qualifier = dict.fromkeys(inner.kinds, node.name)
            return inner
        if isinstance(node, Join):
            return self.join(node)
        if isinstance(node, PerUnit):
            return self.per_unit(node)
        if isinstance(node, Aggregate):
            raise UnsupportedQueryError(
                "a subquery that aggregates must group by the privacy unit (a per-person "
                "table); its aggregates are then exact per person"
            )
        # filters, derived columns and selections inside a subquery
        chain: list[PlanNode] = []
        current: PlanNode = node
        while isinstance(current, Filter | WithColumn | Select):
            chain.append(current)
            current = current.child
        planned = self.plan(current)
        steps: list[Step] = []
        kinds = planned.kinds  # updated as the steps define and select columns
        for item in reversed(chain):
            if isinstance(item, Filter):
                expr = _predicate(self._resolved(item.predicate, planned), kinds)
                steps.append(Step("filter", expr))
            elif isinstance(item, WithColumn):
                expr = coerce_temporal_literals(self._resolved(item.expr, planned), kinds)
                kinds[item.name] = infer_kind(expr, kinds) or "numeric"
                planned.qualifier[item.name] = next(iter(planned.qualifier.values()), "")
                planned.base[item.name] = item.name
                planned.unit_equal.discard(item.name)
                planned.origin.pop(item.name, None)
                steps.append(Step("derive", expr, item.name))
            elif isinstance(item, Select):
                names = [planned.resolve(c, "columns") for c in item.columns]
                kinds = planned.kinds = {c: kinds[c] for c in names}
                keep = (*names, UNIT) if planned.private else tuple(names)
                steps.append(Step("select", columns=keep))
        return _steps(planned, steps, kinds)

    @staticmethod
    def _resolved(expr: Expr, planned: Planned) -> Expr:
        mapping = {c: planned.resolve(c, "column") for c in columns_of(expr)}
        if all(k == v for k, v in mapping.items()):
            return expr
        return _renamed(expr, mapping)

    def join(self, node: Join) -> Planned:
        left, right = self.plan(node.left), self.plan(node.right)
        pairs = [_orient(left, right, a, b) for a, b in node.on]
        if node.condition is not None and node.how == "left":
            right = self._filtered(right, node.condition, "the ON condition of a LEFT JOIN")
        for a, b in pairs:
            if not _comparable(left.kinds[a], right.kinds[b]):
                raise UnsupportedQueryError(
                    f"cannot join {a} ({left.kinds[a]}) with {b} ({right.kinds[b]}): the keys "
                    "of an equi-join must be of the same kind"
                )
        if left.stability > 1 or right.stability > 1:
            raise UnsupportedQueryError(
                "the result of a truncated join (a join of private tables with max_per_key) "
                "cannot be joined again: join public tables to its sides before it"
            )
        truncated = (
            left.private
            and right.private
            and not any(self._same_unit(left, a, right, b) for a, b in pairs)
        )
        if truncated and node.max_per_key is None:
            keys = " AND ".join(f"{a} = {b}" for a, b in node.on)
            raise UnsupportedQueryError(
                f"the join ON {keys} pairs rows of two private relations by keys that do not "
                "link them to the same person; join private tables along a declared link "
                f"({'; '.join(x.render() for x in self.catalog.links.values()) or 'none'}) "
                f"or on columns equal to the privacy unit ({self.catalog.label}), or give "
                "max_per_key (a truncated join: at most that many rows per key on each side)"
            )
        if truncated and self.max_rows is None:
            raise UnsupportedQueryError(
                "a truncated join (max_per_key) needs max_rows: the rows each person may bring "
                "to each side of the join"
            )
        if node.how == "left" and right.private and not left.private:
            raise UnsupportedQueryError(
                "a LEFT JOIN of a public table with a private one keeps the public rows no "
                "person matched, which belong to nobody and cannot be counted: use JOIN, or put "
                "the private table on the left"
            )
        # a base name both sides have is then known as alias.name on each side (USING keys are
        # kept once, from the left)
        dropped = {b for a, b in pairs if node.using}
        left_bases = {left.base[c] for c in left.kinds}
        right_bases = {right.base[c] for c in right.kinds if c not in dropped}
        shared = left_bases & right_bases
        renames_left = {
            c: f"{left.qualifier[c]}.{left.base[c]}"
            for c in left.kinds
            if left.base[c] in shared and c != f"{left.qualifier[c]}.{left.base[c]}"
        }
        renames_right = {
            c: f"{right.qualifier[c]}.{right.base[c]}"
            for c in right.kinds
            if c not in dropped
            and right.base[c] in shared
            and c != f"{right.qualifier[c]}.{right.base[c]}"
        }
        left_names = {renames_left.get(c, c) for c in left.kinds}
        for c in right.kinds:
            if c not in dropped and renames_right.get(c, c) in left_names:
                raise UnsupportedQueryError(
                    f"both sides of a join have column {right.base[c]!r} under the name "
                    f"{right.qualifier[c]!r}: give one side an alias (FROM t AS a JOIN t AS b)"
                )
        if node.using:
            renames_right.update(
                {b: f"{RESERVED_PREFIX}using{i}" for i, (_, b) in enumerate(pairs)}
            )
        if left.private and right.private:
            renames_right[UNIT] = _UNIT_RIGHT
        left = _rename(left, renames_left)
        right = _rename(right, renames_right)
        pairs = [(renames_left.get(a, a), renames_right.get(b, b)) for a, b in pairs]
        on = list(pairs)
        stability = 1
        left_node, right_node = left.node, right.node
        if truncated:
            assert node.max_per_key is not None and self.max_rows is not None
            per_left, per_right = node.max_per_key
            m = self.max_rows
            left_node = _truncated(left_node, [a for a, _ in pairs], m, per_left, UNIT)
            right_node = _truncated(right_node, [b for _, b in pairs], m, per_right, _UNIT_RIGHT)
            # one unit's removal changes each side by at most 2m rows (m of its own, and as
            # many let in past the per-key cut), each paired with at most the other side's
            # per-key bound: see docs/joins.md, "Truncated joins"
            stability = 2 * m * (per_left + per_right)
        elif left.private and right.private:
            on.append((UNIT, _UNIT_RIGHT))
        joined = RJoin(left_node, right_node, tuple(on), node.how)
        kinds = {**left.kinds, **right.kinds}
        qualifier = {**left.qualifier, **right.qualifier}
        base = {**left.base, **right.base}
        # after a LEFT JOIN the right side's unit columns may be NULL-extended: no longer the
        # row's unit; after a truncated join no column is
        unit_equal = left.unit_equal | (right.unit_equal if node.how == "inner" else set())
        if truncated:
            unit_equal = set()
        origin = {**left.origin, **right.origin}
        hidden = {b for _, b in pairs} if node.using else set()
        private = left.private or right.private
        visible = [c for c in kinds if c not in hidden]
        # the unit: the left's, or the right's when only the right is private (NULL for a
        # left row no private row matched: such rows take part in no query)
        out = (*visible, UNIT) if private else tuple(visible)
        if node.condition is not None and node.how == "inner":
            joined_planned = Planned(
                joined,
                kinds,
                qualifier,
                base,
                set(unit_equal),
                dict(origin),
                private,
                stability,
            )
            expr = _predicate(self._resolved(node.condition, joined_planned), kinds)
            filtered: Relation = Steps(joined, (Step("filter", expr),), joined.output)
        else:
            filtered = joined
        result = Planned(
            Project(filtered, tuple((c, c) for c in out)),
            {c: kinds[c] for c in visible},
            {c: qualifier[c] for c in visible},
            {c: base[c] for c in visible},
            unit_equal & set(visible),
            {c: o for c, o in origin.items() if c in visible},
            private,
            stability,
        )
        return result

    def _filtered(self, planned: Planned, condition: Expr, what: str) -> Planned:
        """``planned`` keeping the rows where ``condition`` (on its columns only) holds."""
        try:
            expr = _predicate(self._resolved(condition, planned), planned.kinds)
        except InvalidParameterError as error:
            raise UnsupportedQueryError(
                f"{what} may only test the right side's columns ({error.value!r} is not one); "
                "filter the left side in WHERE"
            ) from None
        return _steps(planned, [Step("filter", expr)], dict(planned.kinds))

    def _same_unit(self, left: Planned, a: str, right: Planned, b: str) -> bool:
        """Does ``left.a = right.b`` pair only rows of one unit (a declared link, or two
        columns equal to the unit)?"""
        if a in left.unit_equal and b in right.unit_equal:
            return True
        oa, ob = left.origin.get(a), right.origin.get(b)
        if oa is None or ob is None:
            return False
        for link in self.catalog.links.values():
            declared = ((link.child, link.column), (link.parent, link.parent_column))
            if (oa, ob) == declared or (ob, oa) == declared:
                return True
        return False

    def per_unit(self, node: PerUnit) -> Planned:
        child = self.plan(node.child)
        if not child.private:
            raise UnsupportedQueryError(
                "a per-person subquery must read a private table (one with the privacy unit)"
            )
        if child.stability > 1:
            raise UnsupportedQueryError(
                "a per-person subquery cannot read a truncated join (its rows are not one person's)"
            )
        keys = [child.resolve(k, "keys") for k in node.keys]
        if not set(keys) & child.unit_equal:
            raise UnsupportedQueryError(
                "a subquery that aggregates must GROUP BY the privacy unit (a column equal to "
                f"{self.catalog.label}, e.g. "
                f"{', '.join(sorted(child.unit_equal)) or self.catalog.unit_column}), so that "
                "each of its rows is one person's"
            )
        aggregates = []
        kinds = {k: child.kinds[k] for k in keys}
        for name, function, column in node.aggregates:
            if name in kinds:
                raise UnsupportedQueryError(f"the subquery names two columns {name!r}")
            source = "" if function == "count_star" else child.resolve(column, name)
            if function in ("sum", "avg") and child.kinds[source] != "numeric":
                raise UnsupportedQueryError(
                    f"{function.upper()}({column}) needs a numeric column; it is "
                    f"{child.kinds[source]}"
                )
            aggregates.append((name, function, source))
            kinds[name] = child.kinds[source] if function in ("min", "max") else "numeric"
        relation = RPerUnit(child.node, (*keys, UNIT), tuple(aggregates))
        qualifier = {c: child.qualifier.get(c, "") for c in kinds}
        return Planned(
            relation,
            kinds,
            qualifier,
            {c: child.base.get(c, c) for c in kinds},
            set(keys) & child.unit_equal,
            {},
            True,
        )


def plan_relation(catalog: Catalog, node: PlanNode, max_rows: int | None = None) -> Planned:
    """Plan the relation under a query (see the module docstring); refuses, before anything
    is read, a relation with no private table, an unknown table or column, a join of
    private relations that would pair rows of different units without ``max_per_key``, keys
    of different kinds. ``max_rows``: the query's rows per unit, which each side of a truncated
    join keeps; after one, each row is its own unit (:class:`RowUnit`) and ``stability`` says
    how many rows one unit changes."""
    planned = _Planner(catalog, max_rows).plan(node)
    if not planned.private:
        raise UnsupportedQueryError(
            "the query reads public tables only: it needs no privacy budget (query them "
            "directly), and a private table must take part to protect anyone"
        )
    if planned.stability > 1:
        planned.node = RowUnit(planned.node, UNIT)
    return planned


def _truncated(node: Relation, keys: list[str], max_rows: int, per_key: int, unit: str) -> Relation:
    """One side of a truncated join: at most ``max_rows`` rows per unit (spread over the join
    keys), then at most ``per_key`` rows per join key (spread over the units). Both cuts keep
    rows by an order of each row's own values, so removing one unit's rows changes which rows
    of others are kept only by letting in one row per row removed."""
    # a row of no unit takes part in no query (a NULL partition is not cut)
    owned = Steps(node, (Step("filter", col(unit).is_not_null()),), node.output)
    per_unit = Truncate(owned, (unit,), max_rows, tuple(keys))
    return Truncate(per_unit, tuple(keys), per_key, (unit,))


def relation_schema(catalog: Catalog, planned: Planned) -> dict[str, ColumnKind]:
    """The relation's columns and kinds, the unit column included (what the compiler sees)."""
    return {**planned.kinds, UNIT: catalog.schemas[catalog.unit_table][catalog.unit_column]}


def _renamed(expr: Any, mapping: Mapping[str, str]) -> Any:
    """``expr`` with its column references renamed (any expression node: its fields that hold
    expressions, or tuples of them, are renamed in turn)."""
    if isinstance(expr, Col):
        return Col(mapping.get(expr.name, expr.name))
    if isinstance(expr, tuple):
        return tuple(_renamed(x, mapping) for x in expr)
    if not dataclasses.is_dataclass(expr) or isinstance(expr, type):
        return expr
    changes = {}
    for f in dataclasses.fields(expr):
        value = getattr(expr, f.name)
        if isinstance(value, Expr | tuple):
            new = _renamed(value, mapping)
            if new is not value:
                changes[f.name] = new
    return dataclasses.replace(expr, **changes) if changes else expr


def qualify_chain(chain: list[PlanNode], planned: Planned) -> list[PlanNode]:
    """The query's top chain (outermost first) with each column reference written as the
    relation names it (``o.o_orderdate`` -> ``o_orderdate`` when no other side has one),
    except the columns the chain derives itself."""
    derived = {node.name for node in chain if isinstance(node, WithColumn)}

    def name(column: str, what: str) -> str:
        if column in derived or column in planned.kinds or column == UNIT:
            return column
        return planned.resolve(column, what)

    def names(values: tuple[str, ...], what: str) -> tuple[str, ...]:
        return tuple(name(c, what) for c in values)

    out: list[PlanNode] = []
    for node in chain:
        if isinstance(node, Filter):
            mapping = {c: name(c, "column") for c in columns_of(node.predicate)}
            node = dataclasses.replace(node, predicate=_renamed(node.predicate, mapping))
        elif isinstance(node, WithColumn):
            mapping = {c: name(c, "column") for c in columns_of(node.expr)}
            node = dataclasses.replace(node, expr=_renamed(node.expr, mapping))
        elif isinstance(node, Select):
            node = dataclasses.replace(node, columns=names(node.columns, "columns"))
        elif isinstance(node, Aggregate):
            aggregations = []
            for agg in node.aggregations:
                changes: dict[str, Any] = {}
                column, columns = getattr(agg, "column", None), getattr(agg, "columns", None)
                if isinstance(column, str):
                    changes["column"] = name(column, "column")
                if isinstance(columns, tuple):
                    changes["columns"] = names(columns, "columns")
                aggregations.append(dataclasses.replace(agg, **changes) if changes else agg)
            key_set = node.key_set
            if key_set is not None:
                key_set = dataclasses.replace(key_set, columns=names(key_set.columns, "group_by"))
            node = dataclasses.replace(
                node,
                keys=names(node.keys, "group_by"),
                key_set=key_set,
                aggregations=tuple(aggregations),
            )
        out.append(node)
    return out
