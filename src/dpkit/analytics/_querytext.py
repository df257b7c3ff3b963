"""The query syntax of ``dpkit query``: one small SELECT statement, parsed by sqlglot.

::

    SELECT dept, COUNT(*), AVG(salary, 0, 250000) AS avg_pay, MEDIAN(salary, 0, 250000)
    WHERE level >= 2 AND dept IN ('R&D', 'Sales')
    GROUP BY dept

* ``FROM`` is optional; when given it must name the input (the file given to the command, by
  its name or stem, or the dataset's name): ``FROM transactions``. Other tables, schemas and
  file functions (``read_csv(...)``) are refused.
* Aggregates: ``COUNT(*)``, ``COUNT(DISTINCT <privacy unit>)`` (distinct units),
  ``SUM(col, lower, upper)``, ``AVG(col, lower, upper)`` (or ``MEAN``),
  ``VARIANCE(col, lower, upper)`` (or ``VAR``), ``STDDEV(col, lower, upper)`` (or ``STD``),
  ``MEDIAN(col, lower, upper)``, ``QUANTILE(col, q, lower, upper)`` (named ``q90_col`` for
  q = 0.9, ``median_col`` for q = 0.5) and
  ``HISTOGRAM(col, e0, e1, ..., eB)``, ``MODE(col, v1, v2, ...)`` (the most frequent of declared
  values); each may be named with ``AS``. Every numeric aggregate declares the bounds its values
  are clamped to: dpkit never reads them from the data. They may be left out for a column
  whose public bounds are registered (``parse_query(..., bounds=)``: ``AVG(col)``,
  ``QUANTILE(col, q)``); bounds in the query win. The functions and their arguments are
  those the aggregate families register (:mod:`dpkit.analytics._families`), so a new family
  brings its own syntax.
* Expressions (in ``WHERE``, as aggregate arguments, as ``GROUP BY`` keys): comparisons, ``AND``
  / ``OR`` / ``NOT``, ``IN (...)``, ``BETWEEN``, ``IS [NOT] NULL``, ``+ - * /``, column names
  and literals; ``CASE WHEN c THEN a [WHEN ...] [ELSE b] END`` (the first TRUE condition wins;
  no ``ELSE``: NULL) and ``CASE x WHEN v THEN ...`` (read as ``x = v``); ``s [NOT] LIKE 'p'``
  and ``ILIKE`` (``%`` any run of characters, ``_`` one, every other character itself: no
  escape character, ``ESCAPE`` is refused); ``YEAR(d)``, ``MONTH(d)``, ``DAY(d)`` and
  ``EXTRACT(YEAR | MONTH | DAY FROM d)`` of a date or timestamp column. Dates and times are
  written ``DATE '2024-03-01'`` or ``TIMESTAMP '2024-03-01 12:00:00'`` (ISO 8601; they compare
  as dates with a date column, as ISO text with a text one).
* An aggregate of an expression, ``SUM(price * (1 - discount), 0, 1000)``, aggregates a derived
  column (:attr:`ParsedQuery.derived`, added by :meth:`ParsedQuery.rows`): the bounds clamp the
  expression's value. It is named by ``AS``, else ``<function>_<position>`` (``sum_2``).
* ``GROUP BY`` columns, expressions (``GROUP BY YEAR(d)``, named by their text) or aliases of
  select-list expressions (``SELECT YEAR(d) AS yr ... GROUP BY yr``), the last two grouped as
  derived columns: public keys come from the command's ``--keys col=v1,v2`` option; without it
  the groups are chosen privately (which needs ``--delta``).
* ``HAVING``, ``ORDER BY`` (``DESC``; NULLs last) and ``LIMIT n`` are **post-processing of the
  released table** (:func:`post_process`): applied to the noisy released values after the
  release, they read no data and change no charge. They name released columns (output names,
  group keys, or an aggregate call as written in the select list); an aggregate that is not in
  the select list is refused, since it would need a release (and budget) of its own.

Only these nodes are accepted; anything else (joins, subqueries, other functions,
``;``-separated statements) is refused with an :class:`~dpkit.errors.UnsupportedQueryError`
naming it. The text is parsed into dpkit's own expression tree, never passed to a database.

Sizes are bounded before and while parsing, so that no text can exhaust the parser's recursion
or cost seconds of CPU (each refusal names the limit): at most :data:`MAX_QUERY_TEXT`
characters; parentheses nested at most :data:`MAX_NESTING` deep and at most
:data:`MAX_PREFIX_RUN` prefix operators (``NOT``, ``-``) in a row; every expression at most
:data:`MAX_EXPRESSION_DEPTH` deep (chains of ``AND`` and of ``OR`` are balanced first, so a
long chain is never deep; each ``WHEN`` of a ``CASE`` is a level); a ``WHERE`` of at most
:data:`MAX_WHERE_NODES` nodes (about 150 conditions), and the aggregate and ``GROUP BY``
expressions of at most :data:`MAX_EXPRESSION_NODES` together; at most :data:`MAX_LIST` values in an
``IN`` list or histogram edges; at most :data:`MAX_AGGREGATIONS` aggregates and
:data:`MAX_GROUP_BY` ``GROUP BY`` columns; numbers of at most :data:`MAX_NUMBER_LITERAL`
characters.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import ParseError, TokenError

from dpkit.analytics._expr import (
    ColumnKind,
    Expr,
    IsIn,
    Structural,
    children,
    coerce_temporal_literals,
    col,
    columns_of,
    infer_kind,
    lit,
    when,
)
from dpkit.analytics._families import Form, forms, released_columns
from dpkit.analytics._metadata import registered_bounds
from dpkit.analytics._planner import families as _registered  # noqa: F401  (fills the registry)
from dpkit.analytics._query import Aggregation, PlanNode, Query, quantile_name
from dpkit.analytics._query import Alias as _AliasNode
from dpkit.analytics._query import Filter as _FilterNode
from dpkit.analytics._query import Join as _JoinNode
from dpkit.analytics._query import PerUnit as _PerUnitNode
from dpkit.analytics._query import Select as _SelectNode
from dpkit.analytics._query import Source as _SourceNode
from dpkit.analytics._query import WithColumn as _WithColumnNode
from dpkit.errors import UnsupportedQueryError

__all__ = [
    "ALLOWED_ARGS",
    "MAX_AGGREGATIONS",
    "MAX_EXPRESSION_DEPTH",
    "MAX_EXPRESSION_NODES",
    "MAX_GROUP_BY",
    "MAX_LIST",
    "MAX_NESTING",
    "MAX_NUMBER_LITERAL",
    "MAX_PREFIX_RUN",
    "MAX_QUERY_TEXT",
    "MAX_WHERE_NODES",
    "ParsedQuery",
    "check_nesting",
    "check_released",
    "check_tree",
    "parse_error_text",
    "parse_query",
    "parse_where",
    "plain",
    "post_process",
    "quantile_name",
    "query_schema",
]

MAX_QUERY_TEXT = 100_000
"""The longest query text (characters)."""
MAX_NESTING = 20
"""The deepest nesting of parentheses (sqlglot's parser recursed past Python's limit at 43)."""
MAX_PREFIX_RUN = 16
"""The most prefix operators (``NOT``, ``-``, ``+``, ``~``) in a row."""
MAX_EXPRESSION_DEPTH = 64
"""The deepest ``WHERE`` expression, after chains of ``AND`` / ``OR`` are balanced."""
MAX_LIST = 500
"""The most values in an ``IN`` list, and the most histogram edges."""
MAX_WHERE_NODES = 600
"""The most nodes of a ``WHERE`` expression (a comparison ``age > 3`` is 3: the operator, the
column and the literal; an ``AND`` 1; an ``IN`` list 2 plus its values): about 150
conditions. Building a plan's SQL costs milliseconds per node, so this bounds the CPU one query
takes before anything is charged."""
MAX_EXPRESSION_NODES = 2 * MAX_WHERE_NODES
"""The most nodes of all the expressions a query computes besides its ``WHERE``: aggregate
arguments (``SUM(a * (1 - b), 0, 100)``) and ``GROUP BY`` expressions, together."""
MAX_AGGREGATIONS = 100
"""The most aggregates in one query."""
MAX_GROUP_BY = 16
"""The most ``GROUP BY`` columns."""
MAX_NUMBER_LITERAL = 100
"""The longest number literal (characters)."""

_CLI_HELP = "See `dpkit query --help` for the syntax."
_CLI_INPUT = "the input given on the command line"
_CLI_BOUNDS_HELP = (
    "dpkit never reads them from the data: declare the clamping bounds in the query, or "
    "register them once in a metadata file: "
    "`dpkit query ... --metadata FILE` with [columns.{column}] bounds = [lower, upper]."
)
_REGISTERED: ContextVar[tuple[dict[str, tuple[Any, Any]], str]] = ContextVar(
    "_REGISTERED", default=({}, _CLI_BOUNDS_HELP)
)
"""The registered column bounds of the query being parsed, and how to register them (for the
refusal); set by :func:`parse_query`."""
_OPENING = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE})
_CLOSING = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE})
_PREFIX = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})


@dataclass(frozen=True, slots=True, eq=False)
class ParsedQuery(Structural):
    """A parsed query: aggregations, an optional filter and the group-by columns.

    ``derived`` are the columns computed for it, in order (an aggregate of an expression, ``SUM(a
    * (1 - b), 0, 100)``, aggregates a derived column; a ``GROUP BY`` expression groups on
    one); :meth:`rows` applies them with the filter. ``having``, ``order_by`` and ``limit``
    are post-processing of the released table (:func:`post_process`): they read released
    values only.
    """

    aggregations: tuple[Aggregation, ...]
    where: Expr | None
    group_by: tuple[str, ...]
    source: str | None = None
    derived: tuple[tuple[str, Expr], ...] = ()
    having: Expr | None = None
    order_by: tuple[tuple[str, bool], ...] = ()
    limit: int | None = None
    relation: PlanNode | None = None
    """The ``FROM`` part when it is more than one table (joins, subqueries, ``WITH``): plan
    nodes a Session over several tables plans (:mod:`dpkit.analytics._joins`)."""

    def _with_source(self, source: str) -> ParsedQuery:
        return dataclasses.replace(self, source=source)

    def rows(self, query: Query | None = None) -> Query:
        """``query`` (a new one by default) filtered by ``WHERE`` and with the derived columns
        added: what the aggregates and groups read."""
        built = Query() if query is None else query
        if self.where is not None:
            built = built.filter(self.where)
        for name, expr in self.derived:
            built = built.with_column(name, expr)
        return built

    @property
    def post_processed(self) -> bool:
        """Whether the released table is filtered, sorted or cut after the release."""
        return self.having is not None or bool(self.order_by) or self.limit is not None


_OWN_FUNCTIONS = tuple(
    dict.fromkeys(n.upper() for form in forms() for n in form.sql if n.upper() != "COUNT")
)
"""The SQL names of the registered aggregate families, parsed as plain calls (all but COUNT,
whose ``*`` and ``DISTINCT`` forms sqlglot parses)."""


class _QueryDialect(DuckDB):
    """DuckDB's grammar, with dpkit's aggregates parsed as plain calls (their arity is ours)."""

    class Parser(DuckDB.Parser):  # type: ignore[misc,valid-type]  # sqlglot builds it dynamically
        FUNCTIONS = {  # noqa: RUF012 - sqlglot's parser declares these as class-level dicts
            name: builder
            for name, builder in DuckDB.Parser.FUNCTIONS.items()
            if name not in _OWN_FUNCTIONS
        }
        FUNCTION_PARSERS = {  # noqa: RUF012 - as above
            name: parser
            for name, parser in DuckDB.Parser.FUNCTION_PARSERS.items()
            if name not in _OWN_FUNCTIONS
        }


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


def plain(text: str) -> str:
    """``text`` without terminal escape sequences (sqlglot underlines the offending token with
    ANSI codes) or other control characters: messages are read in JSON and in logs."""
    return _ANSI.sub("", text)


def parse_error_text(error: ParseError, limit: int = 300) -> str:
    """A sqlglot parse error as plain text: what, where (line and column) and the offending
    fragment quoted between ``>>>`` and ``<<<``, at most ``limit`` characters."""
    found = [e for e in getattr(error, "errors", None) or [] if isinstance(e, dict)]
    if not found:
        return plain(str(error))[:limit]
    first = found[0]
    before = plain(str(first.get("start_context") or ""))[-60:]
    token = plain(str(first.get("highlight") or ""))[:60]
    after = plain(str(first.get("end_context") or ""))[:60]
    where = f"line {first.get('line')}, column {first.get('col')}"
    said = plain(str(first.get("description") or "a syntax error"))
    return f"{said} at {where}: {before}>>>{token}<<<{after}"[:limit]


def _text(node: exp.Expr) -> str:
    try:
        return node.sql()[:80]
    except Exception:  # RecursionError, or a node sqlglot cannot write back
        return type(node).__name__


def _refuse(node: exp.Expr, hint: str = "") -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"unsupported in a dpkit query: {_text(node)!r} ({type(node).__name__}). {hint}".strip()
    )


def _too_deep(what: str, limit: int) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"the query is nested too deeply: at most {limit} {what}. Write it with fewer levels "
        "(conditions joined by one AND or one OR need no parentheses)."
    )


def check_nesting(text: str) -> None:
    """Refuse ``text`` before it is parsed if it nests parentheses deeper than
    :data:`MAX_NESTING` or chains more than :data:`MAX_PREFIX_RUN` prefix operators (the
    tokenizer does not recurse; the parser would)."""
    try:
        tokens = _QueryDialect().tokenize(text)
    except TokenError as error:
        raise UnsupportedQueryError(f"could not read the query: {plain(str(error))}") from None
    depth = run = 0
    for token in tokens:
        kind = token.token_type
        if kind in _OPENING:
            depth += 1
            if depth > MAX_NESTING:
                raise _too_deep("levels of parentheses", MAX_NESTING)
        elif kind in _CLOSING:
            depth -= 1
        run = run + 1 if kind in _PREFIX else 0
        if run > MAX_PREFIX_RUN:
            raise _too_deep("prefix operators (NOT, -) in a row", MAX_PREFIX_RUN)


_BINARY = frozenset({"this", "expression"})
ALLOWED_ARGS: dict[type[exp.Expr], frozenset[str]] = {
    # the statement: SELECT <expressions> [FROM <input>] [WHERE ...] [GROUP BY <columns>]
    exp.Select: frozenset(
        {"expressions", "from", "from_", "where", "group", "having", "order", "limit"}
    ),
    exp.From: frozenset({"this"}),
    exp.Table: frozenset({"this", "alias"}),
    exp.TableAlias: frozenset({"this"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Where: frozenset({"this"}),
    exp.Group: frozenset({"expressions"}),
    exp.Having: frozenset({"this"}),
    exp.Order: frozenset({"expressions"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Limit: frozenset({"expression"}),
    # the select list
    exp.Alias: frozenset({"this", "alias"}),
    exp.Count: frozenset({"this", "big_int"}),
    exp.Star: frozenset(),
    exp.Distinct: frozenset({"expressions"}),
    exp.Anonymous: frozenset({"this", "expressions"}),
    # expressions
    exp.Column: frozenset({"this", "table"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Null: frozenset(),
    exp.Boolean: frozenset({"this"}),
    exp.Paren: frozenset({"this"}),
    exp.Neg: frozenset({"this"}),
    exp.Not: frozenset({"this"}),
    exp.And: _BINARY,
    exp.Or: _BINARY,
    exp.EQ: _BINARY,
    exp.NEQ: _BINARY,
    exp.LT: _BINARY,
    exp.LTE: _BINARY,
    exp.GT: _BINARY,
    exp.GTE: _BINARY,
    exp.Add: _BINARY,
    exp.Sub: _BINARY,
    exp.Mul: _BINARY,
    exp.Div: _BINARY,
    exp.In: frozenset({"this", "expressions"}),
    exp.Between: frozenset({"this", "low", "high"}),
    exp.Is: _BINARY,
    exp.Cast: frozenset({"this", "to"}),
    exp.DataType: frozenset({"this"}),
    exp.Case: frozenset({"this", "ifs", "default"}),
    exp.If: frozenset({"this", "true"}),
    exp.Like: frozenset({"this", "expression", "negate"}),
    exp.ILike: frozenset({"this", "expression", "negate"}),
    exp.Extract: frozenset({"this", "expression"}),
    exp.Var: frozenset({"this"}),
    exp.Year: frozenset({"this"}),
    exp.Month: frozenset({"this"}),
    exp.Day: frozenset({"this"}),
}
"""The only node types a query's parse tree may hold, each with the only arguments (clauses,
operands, options) it may set: everything else sqlglot parses (``WITH``, ``TABLESAMPLE``,
windows, subqueries, ``GROUP BY ALL`` / ``ROLLUP``, ``IN UNNEST``, ``IS NOT DISTINCT FROM``, a
clause a newer sqlglot adds...) is refused by :func:`check_tree` before it could be ignored. An
allowlist, never a denylist: dpkit translates exactly these, and silently dropping a clause
would answer a different question than the one asked."""

_CLAUSES = {
    "with": "WITH (a common table expression)",
    "with_": "WITH (a common table expression)",
    "sample": "TABLESAMPLE / USING SAMPLE",
    "joins": "JOIN (or a second table after a comma)",
    "laterals": "LATERAL",
    "pivots": "PIVOT / UNPIVOT",
    "windows": "WINDOW",
    "distinct": "DISTINCT",
    "having": "HAVING",
    "qualify": "QUALIFY",
    "order": "ORDER BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY",
    "limit": "LIMIT / FETCH",
    "offset": "OFFSET",
    "into": "INTO",
    "all": "GROUP BY ALL",
    "rollup": "ROLLUP",
    "cube": "CUBE",
    "grouping_sets": "GROUPING SETS",
    "totals": "WITH TOTALS",
    "unnest": "IN UNNEST(...)",
    "query": "a subquery",
    "negate": "IS NOT DISTINCT FROM",
    "db": "a schema-qualified name",
    "catalog": "a catalog-qualified name",
    "columns": "column aliases of a table",
    "on": "DISTINCT ON",
    "except": "EXCLUDE / EXCEPT",
    "except_": "EXCLUDE / EXCEPT",
    "replace": "REPLACE",
    "rename": "RENAME",
}
_NODES: dict[type[exp.Expr], str] = {
    exp.With: "WITH (a common table expression)",
    exp.CTE: "WITH (a common table expression)",
    exp.TableSample: "TABLESAMPLE / USING SAMPLE",
    exp.Window: "a window function (OVER / WINDOW)",
    exp.WindowSpec: "a window function (OVER / WINDOW)",
    exp.Subquery: "a subquery",
    exp.Select: "a subquery",
    exp.SetOperation: "UNION / INTERSECT / EXCEPT",
    exp.Join: "JOIN",
    exp.Lateral: "LATERAL",
    exp.Pivot: "PIVOT / UNPIVOT",
    exp.Filter: "FILTER (WHERE ...) on an aggregate",
    exp.Unnest: "UNNEST",
    exp.Escape: "LIKE ... ESCAPE (dpkit's LIKE has no escape character)",
}


def _absent(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, list) and not value)


def check_tree(select: exp.Expr) -> None:
    """Refuse a parsed statement holding a node type or a node argument outside
    :data:`ALLOWED_ARGS` (the whole tree: the select list, FROM, WHERE, GROUP BY, and the
    arguments of every aggregate and operator), naming the clause."""
    for node in select.walk():
        kind = type(node)
        allowed = ALLOWED_ARGS.get(kind)
        if allowed is None or (kind is exp.Select and node is not select):
            for base, said in _NODES.items():
                if isinstance(node, base):
                    raise UnsupportedQueryError(f"{said} is not supported in a dpkit query")
            raise _refuse(node)
        for arg, value in node.args.items():
            if arg not in allowed and not _absent(value):
                said = _CLAUSES.get(arg) or f"{arg.rstrip('_').upper()} (in {_text(node)!r})"
                raise UnsupportedQueryError(f"{said} is not supported in a dpkit query")


def parse_query(
    text: str,
    privacy_unit: str | None = None,
    *,
    source: str = _CLI_INPUT,
    syntax_help: str = _CLI_HELP,
    relations: bool = False,
    bounds: Mapping[str, tuple[Any, Any]] | None = None,
    bounds_help: str = _CLI_BOUNDS_HELP,
) -> ParsedQuery:
    """Parse the query text (see the module docstring for the syntax and its size limits).

    Args:
        source: what ``FROM`` may name, for messages (the service says "the dataset").
        syntax_help: a sentence appended to every refusal, saying where the syntax is described.
        relations: accept joins, subqueries in ``FROM`` and ``WITH`` (the caller plans
            :attr:`ParsedQuery.relation` over several tables); refused otherwise, naming them.
        bounds: the public bounds registered for columns, ``{column: (lower, upper)}``: an
            aggregate of such a column written without bounds (``AVG(wage)``) clamps to them;
            bounds written in the query win. Metadata declared by a privacy officer, never
            read from the data.
        bounds_help: how to register a column's bounds (the hint of the refusal of an aggregate
            without bounds on a column that has none).
    """
    token = _REGISTERED.set((dict(bounds or {}), bounds_help))
    try:
        return _parse_query(text, privacy_unit, source, relations)
    except UnsupportedQueryError as error:
        message = str(error).rstrip()
        if not message.endswith((".", ")")):
            message += "."
        raise UnsupportedQueryError(f"{message} {syntax_help}".strip()) from None
    except RecursionError:
        # a safety net: the limits above keep sqlglot's parser and the translation below well
        # within Python's recursion limit
        raise UnsupportedQueryError(
            f"the query is nested too deeply to parse. {syntax_help}".strip()
        ) from None
    finally:
        _REGISTERED.reset(token)


def _parse_query(
    text: str, privacy_unit: str | None, source_name: str, relations: bool = False
) -> ParsedQuery:
    if not isinstance(text, str) or not text.strip():
        raise UnsupportedQueryError('the query is empty; e.g. "SELECT COUNT(*)"')
    if len(text) > MAX_QUERY_TEXT:
        raise UnsupportedQueryError(
            f"the query has {len(text):,} characters; at most {MAX_QUERY_TEXT:,} are allowed"
        )
    check_nesting(text)
    try:
        statements = sqlglot.parse(text, read=_QueryDialect)
    except ParseError as error:
        raise UnsupportedQueryError(
            f"could not parse the query: {parse_error_text(error)}"
        ) from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise UnsupportedQueryError("the query must be exactly one SELECT statement")
    return _from_select(statements[0], privacy_unit, source_name, relations)


def _from_select(
    select: exp.Select, privacy_unit: str | None, source_name: str, relations: bool = False
) -> ParsedQuery:
    """The query of a parsed statement (everything in it checked against
    :data:`ALLOWED_ARGS` first)."""
    if _is_relation(select):
        if not relations:
            raise UnsupportedQueryError(
                f"{_relation_construct(select)} is not supported here: FROM may only name "
                f"{source_name} (joins, subqueries in FROM and WITH need several tables)"
            )
        relation = parse_relation(select)
        token = _QUALIFIERS.set(None)
        try:
            parsed = _from_select(_without_from(select), privacy_unit, source_name)
        finally:
            _QUALIFIERS.reset(token)
        return dataclasses.replace(parsed, source=None, relation=relation)
    source = select.args.get("from") or select.args.get("from_")
    table_name: str | None = None
    if source is not None:
        table = source.this
        if (
            not isinstance(table, exp.Table)
            or not isinstance(table.this, exp.Identifier)
            or table.args.get("db")
            or table.args.get("catalog")
        ):
            raise UnsupportedQueryError(
                f"FROM {source.this.sql()[:60]}: FROM may only name {source_name} (or be left "
                f"out); dpkit reads only {source_name}, never another table or a file function"
            )
        table_name = str(table.this.this)
    if _QUALIFIERS.get() is not None and source is not None and table_name is not None:
        # check the clauses FROM takes here (an alias), then read the rest without FROM: a
        # column may repeat the table's name or alias as its prefix
        check_tree(exp.From(this=source.this.copy()))
        alias = source.this.alias
        token = _QUALIFIERS.set(frozenset({table_name, *([alias] if alias else [])}))
        try:
            parsed = _from_select(_without_from(select), privacy_unit, source_name)
        finally:
            _QUALIFIERS.reset(token)
        return parsed._with_source(table_name)
    check_tree(select)
    items: list[tuple[exp.Expr, str | None]] = []
    for node in select.expressions:
        if isinstance(node, exp.Alias):
            items.append((node.this, str(node.alias)))
        else:
            items.append((node, None))
    derived = _Derived()
    keys = _group_keys(select.args.get("group"), items, derived)
    aggregations: list[Aggregation] = []
    if len(select.expressions) > MAX_AGGREGATIONS + len(keys):
        raise UnsupportedQueryError(f"a query has at most {MAX_AGGREGATIONS} aggregates")
    selected: list[tuple[exp.Expr, str]] = []  # (the aggregate call, its output name)
    for position, (node, name) in enumerate(items, start=1):
        if _is_key(node, name, keys):
            continue  # group keys may be listed; they are always in the result
        if not _is_aggregate(node) and not isinstance(node, exp.Anonymous | exp.AggFunc):
            raise _refuse(
                node,
                "A select-list item is an aggregate or a GROUP BY key (an expression to group "
                "on goes in GROUP BY too).",
            )
        agg = _aggregation(node, name, privacy_unit, derived, position)
        aggregations.append(agg)
        selected.append((node, agg.name))
    if not aggregations:
        raise UnsupportedQueryError("the query has no aggregate; add e.g. COUNT(*)")
    where_node = select.args.get("where")
    where = _condition(where_node.this) if where_node is not None else None
    derived.check_names(where, aggregations, privacy_unit)
    released = [*keys, *(name for _, name in selected)]
    having_node = select.args.get("having")
    having = (
        _released_condition(having_node.this, selected, released)
        if having_node is not None
        else None
    )
    order = select.args.get("order")
    order_by = _order_by(order, selected, released) if order is not None else ()
    limit_node = select.args.get("limit")
    limit = _limit(limit_node) if limit_node is not None else None
    return ParsedQuery(
        tuple(aggregations),
        where,
        keys,
        table_name,
        tuple(derived.columns),
        having,
        order_by,
        limit,
    )


class _Derived:
    """The columns a query computes (aggregate arguments and GROUP BY expressions), with the
    count of their nodes (bounded by :data:`MAX_EXPRESSION_NODES`)."""

    def __init__(self) -> None:
        self.columns: list[tuple[str, Expr]] = []
        self.keys: set[str] = set()  # the derived columns that are group keys
        self.nodes = 0

    def add(self, node: exp.Expr, name: str, key: bool = False) -> Expr:
        expr = _expr(node, 1)
        self.nodes += _size(expr)
        if self.nodes > MAX_EXPRESSION_NODES:
            raise UnsupportedQueryError(
                f"the query's aggregate and GROUP BY expressions have {self.nodes:,} parts; at "
                f"most {MAX_EXPRESSION_NODES:,} are allowed"
            )
        if any(name == known for known, _ in self.columns):
            raise UnsupportedQueryError(f"the name {name!r} is given to two expressions")
        self.columns.append((name, expr))
        if key:
            self.keys.add(name)
        return expr

    def check_names(
        self, where: Expr | None, aggregations: list[Aggregation], unit: str | None = None
    ) -> None:
        """Refuse a GROUP BY expression named like a column the query reads (``YEAR(d) AS d``
        would hide the column ``d`` from the rest of the query); an aggregate's own derived
        column is renamed instead (its name is not shown)."""
        read: set[str] = set(columns_of(where)) if where is not None else set()
        if unit is not None:
            read.add(unit)  # the privacy unit is read by the bounding
        for _, expr in self.columns:
            read |= columns_of(expr)
        for agg in aggregations:
            column = getattr(agg, "column", None)
            if isinstance(column, str) and column not in {n for n, _ in self.columns}:
                read.add(column)
        for name in self.keys:
            if name in read:
                raise UnsupportedQueryError(
                    f"AS {name}: a GROUP BY expression may not take the name of a column the "
                    "query reads; choose another name"
                )
        renamed: dict[str, str] = {}
        for i, (name, expr) in enumerate(self.columns):
            if name in self.keys or name not in read:
                continue
            fresh = name
            while fresh in read or any(fresh == n for n, _ in self.columns):
                fresh += "_value"
            renamed[name] = fresh
            self.columns[i] = (fresh, expr)
        for i, agg in enumerate(aggregations):
            column = getattr(agg, "column", None)
            if column in renamed:
                aggregations[i] = _with_column(agg, renamed[column])


def _with_column(agg: Aggregation, column: str) -> Aggregation:
    import dataclasses

    # only aggregations with a column reach here
    changed: Aggregation = dataclasses.replace(agg, column=column)  # type: ignore[arg-type]
    return changed


def _is_aggregate(node: exp.Expr) -> bool:
    return isinstance(node, exp.Count) or (
        isinstance(node, exp.Anonymous) and str(node.name).lower() in _sql_forms()
    )


def _is_key(node: exp.Expr, name: str | None, keys: tuple[str, ...]) -> bool:
    if name is not None and name in keys and not _is_aggregate(node):
        return True
    if isinstance(node, exp.Column) and _column_ref(node) in keys:
        return True
    return not _is_aggregate(node) and _text(node) in keys


def _group_keys(
    group: exp.Group | None, items: list[tuple[exp.Expr, str | None]], derived: _Derived
) -> tuple[str, ...]:
    """The GROUP BY columns: a column, the alias of a select-list expression
    (``SELECT YEAR(d) AS yr ... GROUP BY yr``), or an expression (named by the select-list item
    equal to it, else by its text), the last two grouped as derived columns."""
    if group is None:
        return ()
    if len(group.expressions) > MAX_GROUP_BY:
        raise UnsupportedQueryError(f"GROUP BY takes at most {MAX_GROUP_BY} columns")
    aliases = {name: node for node, name in items if name is not None and not _is_aggregate(node)}
    names: list[str] = []
    for node in group.expressions:
        if isinstance(node, exp.Column) and not node.table and node.name in aliases:
            expression = aliases[node.name]
            if isinstance(expression, exp.Column) and expression.name == node.name:
                names.append(node.name)
            else:
                derived.add(expression, node.name, key=True)
                names.append(node.name)
        elif isinstance(node, exp.Column):
            names.append(_column_ref(node))
        elif isinstance(node, exp.Literal):
            raise _refuse(node, "GROUP BY takes columns or expressions, not positions.")
        else:
            name = next((n for item, n in items if n is not None and item == node), None) or _text(
                node
            )
            derived.add(node, name, key=True)
            names.append(name)
    if len(set(names)) != len(names):
        raise UnsupportedQueryError("GROUP BY names a column twice")
    return tuple(names)


def _released_column(
    node: exp.Expr, selected: list[tuple[exp.Expr, str]], released: list[str], clause: str
) -> str | None:
    """The released column ``node`` names (an output name, a group key, or an aggregate call
    of the select list), None if it is not one; an aggregate that is not in the select list is
    refused (it would need a release, and a budget, of its own)."""
    if _is_aggregate(node):
        for call, name in selected:
            if call == node:
                return name
        raise UnsupportedQueryError(
            f"{clause} {_text(node)}: an aggregate not in the SELECT list would need its own "
            f"release and budget; {clause} reads released values only. Add it to the SELECT "
            "list (with AS name) and refer to that"
        )
    if isinstance(node, exp.Column) and not node.table:
        if node.name not in released:
            raise UnsupportedQueryError(
                f"{clause} {node.name}: {clause} reads the released columns only "
                f"({', '.join(released)})."
            )
        return str(node.name)
    if isinstance(node, exp.Identifier | exp.Literal | exp.Null | exp.Boolean | exp.Var):
        return None
    text = _text(node)
    return text if text in released else None


def _released_condition(
    node: exp.Expr, selected: list[tuple[exp.Expr, str]], released: list[str]
) -> Expr:
    """A HAVING condition over the released table: aggregates and names become its columns."""
    replaced = node.copy().transform(
        lambda n: (
            exp.column(name, quoted=True)
            if (name := _released_column(n, selected, released, "HAVING")) is not None
            and not (isinstance(n, exp.Column) and n.name == name)
            else n
        )
    )
    return _condition(replaced)


def _order_by(
    order: exp.Order, selected: list[tuple[exp.Expr, str]], released: list[str]
) -> tuple[tuple[str, bool], ...]:
    keys: list[tuple[str, bool]] = []
    for ordered in order.expressions:
        name = _released_column(ordered.this, selected, released, "ORDER BY")
        if name is None:
            raise _refuse(ordered.this, "ORDER BY takes released columns (output names).")
        if ordered.args.get("nulls_first"):
            raise UnsupportedQueryError("ORDER BY ... NULLS FIRST: NULLs are always sorted last")
        keys.append((name, bool(ordered.args.get("desc"))))
    return tuple(keys)


def _limit(node: exp.Limit) -> int:
    value = node.expression
    if not isinstance(value, exp.Literal) or value.is_string or not value.this.isdigit():
        raise _refuse(node, "LIMIT takes a whole number.")
    if len(value.this) > MAX_NUMBER_LITERAL:
        raise _refuse(node, "LIMIT takes a whole number.")
    return int(value.this)


def query_schema(parsed: ParsedQuery, schema: Mapping[str, ColumnKind]) -> dict[str, ColumnKind]:
    """``schema`` (the table's column kinds) with the query's derived columns added, each with
    the kind its expression produces: an expression that does not type check is refused here,
    from public information, before anything is reserved."""
    kinds = dict(schema)
    for name, expr in parsed.derived:
        kind = infer_kind(coerce_temporal_literals(expr, kinds), kinds)
        kinds[name] = kind if kind is not None else "numeric"
    return kinds


def _released_kinds(parsed: ParsedQuery, schema: Mapping[str, ColumnKind]) -> dict[str, ColumnKind]:
    kinds = query_schema(parsed, schema)
    released: dict[str, ColumnKind] = {k: kinds.get(k, "other") for k in parsed.group_by}
    for agg in parsed.aggregations:
        for name in released_columns(agg):
            released.setdefault(name, "numeric")
    return released


def check_released(parsed: ParsedQuery, schema: Mapping[str, ColumnKind]) -> None:
    """Refuse a ``HAVING`` or ``ORDER BY`` that names a column the released main table does
    not have, or a ``HAVING`` that is not a condition on its kinds (before anything is
    reserved; ``schema``: the table's column kinds)."""
    if not parsed.post_processed:
        return
    kinds = _released_kinds(parsed, schema)
    named = set(columns_of(parsed.having)) if parsed.having is not None else set()
    named |= {name for name, _ in parsed.order_by}
    missing = sorted(named - set(kinds))
    if missing:
        raise UnsupportedQueryError(
            f"HAVING / ORDER BY name {', '.join(missing)}, which the released table does not "
            f"have (its columns: {', '.join(kinds)})"
        )
    if parsed.having is not None:
        kind = infer_kind(coerce_temporal_literals(parsed.having, kinds), kinds)
        if kind not in ("bool", None):
            raise UnsupportedQueryError(f"HAVING {parsed.having.render()} is not a condition")


def post_process(release: Any, parsed: ParsedQuery) -> Any:
    """The release with its main table filtered by ``HAVING``, sorted by ``ORDER BY`` (NULLs
    last) and cut to ``LIMIT`` rows: post-processing of released values, which reads no data
    and spends no budget (the charge is that of the release). Other tables (a histogram's)
    are left whole."""
    if not parsed.post_processed:
        return release
    from dpkit.analytics._engines._columns import kind_of_pandas
    from dpkit.analytics._engines._pandas import evaluate
    from dpkit.analytics._results import TableRelease

    frame = release.table
    if parsed.having is not None:
        kinds = {str(n): kind_of_pandas(t) for n, t in frame.dtypes.items()}
        having = coerce_temporal_literals(parsed.having, kinds)
        kept = evaluate(having, frame)
        frame = frame[kept.to_numpy(dtype=bool, na_value=False)]
    if parsed.order_by:
        frame = frame.sort_values(
            [name for name, _ in parsed.order_by],
            ascending=[not desc for _, desc in parsed.order_by],
            na_position="last",
            kind="stable",
        )
    if parsed.limit is not None:
        frame = frame.head(parsed.limit)
    tables = dict(release.tables)
    tables["main"] = frame.reset_index(drop=True)
    return TableRelease(
        tables,
        release.accuracy,
        release.loss,
        release.receipt,
        release.remaining,
        release.plan,
        release.split,
    )


def _condition(node: exp.Expr) -> Expr:
    """A WHERE condition, translated and bounded."""
    where = _expr(node, 1)
    nodes = _size(where)
    if nodes > MAX_WHERE_NODES:
        raise UnsupportedQueryError(
            f"the WHERE clause has {nodes:,} parts; at most {MAX_WHERE_NODES:,} are allowed "
            "(about 150 conditions): split the query, or use IN (...) for many values"
        )
    return where


def parse_where(text: str, *, syntax_help: str = _CLI_HELP) -> Expr:
    """Parse ``text`` as ONE boolean expression, the condition of a ``WHERE`` (the syntax and
    the limits of :func:`parse_query`), and nothing else: text after the expression (``GROUP
    BY``, ``LIMIT``, ``TABLESAMPLE``, ``;``...) or unbalanced parentheses are refused, never
    pasted into a statement where they could change or drop a clause."""
    try:
        if not isinstance(text, str) or not text.strip():
            raise UnsupportedQueryError('the WHERE condition is empty; e.g. "age >= 18"')
        if len(text) > MAX_QUERY_TEXT:
            raise UnsupportedQueryError(
                f"the WHERE condition has {len(text):,} characters; at most "
                f"{MAX_QUERY_TEXT:,} are allowed"
            )
        check_nesting(text)
        try:
            parsed = _QueryDialect().parse_into(exp.Condition, text)
        except ParseError:
            raise UnsupportedQueryError(
                "could not read the WHERE condition as one boolean expression: nothing may "
                "follow it (no GROUP BY, LIMIT, TABLESAMPLE or ';'), and its parentheses must "
                "balance"
            ) from None
        if len(parsed) != 1 or parsed[0] is None:
            raise UnsupportedQueryError("the WHERE condition must be one boolean expression")
        node = parsed[0]
        check_tree(node)
        return _condition(node)
    except UnsupportedQueryError as error:
        message = str(error).rstrip()
        if not message.endswith((".", ")")):
            message += "."
        raise UnsupportedQueryError(f"{message} {syntax_help}".strip()) from None
    except RecursionError:
        raise UnsupportedQueryError(
            f"the WHERE condition is nested too deeply to parse. {syntax_help}".strip()
        ) from None


def _number(node: exp.Expr) -> float | int:
    negative = False
    if isinstance(node, exp.Neg):
        negative, node = True, node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        raise _refuse(node, "Bounds and parameters must be numbers.")
    text = node.this
    if len(text) > MAX_NUMBER_LITERAL:
        raise UnsupportedQueryError(
            f"a number of {len(text):,} characters; at most {MAX_NUMBER_LITERAL} are allowed"
        )
    value: float | int = int(text) if text.lstrip("-").isdigit() else float(text)
    return -value if negative else value


def _column_name(node: exp.Expr) -> str:
    if not isinstance(node, exp.Column):
        raise _refuse(node, "The first argument of an aggregate is a column name.")
    return _column_ref(node)


_QUALIFIERS: ContextVar[frozenset[str] | None] = ContextVar("_QUALIFIERS", default=frozenset())
"""How a column's table prefix reads: ``None`` in a query over several tables (``o.x`` is
column ``x`` of the relation named ``o``: the Session resolves it); otherwise the names a prefix
may repeat (the one table's name or alias), which are dropped."""


def _column_ref(node: exp.Column) -> str:
    """A column reference as a name: ``x``, or ``o.x`` in a query over several tables."""
    table = node.table
    if not table:
        return str(node.name)
    qualifiers = _QUALIFIERS.get()
    if qualifiers is None:
        return f"{table}.{node.name}"
    if table in qualifiers:
        return str(node.name)
    raise _refuse(node, "Name columns without a table prefix.")


def _args(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    args = [node.this] if node.this is not None else []
    args += list(node.args.get("expressions") or [])
    for key in ("expression", "quantile"):
        extra = node.args.get(key)
        if extra is not None:
            args.append(extra)
    return args


def _sql_forms() -> dict[str, list[Form]]:
    """The registered SQL functions (lower-case name -> its forms)."""
    table: dict[str, list[Form]] = {}
    for form in forms():
        for sql_name in form.sql:
            table.setdefault(sql_name.lower(), []).append(form)
    return table


def _aggregates_text() -> str:
    """``Aggregates: COUNT(*), SUM(col, lower, upper), ...``: the registered SQL forms."""
    shown = dict.fromkeys(form.sql_signature() for form in forms() if form.sql)
    return "Aggregates: " + ", ".join(shown) + "."


def _aggregation(
    node: exp.Expr,
    name: str | None,
    unit: str | None,
    derived: _Derived | None = None,
    position: int = 1,
) -> Aggregation:
    """The aggregation of one select-list call, by the SQL syntax its family declares
    (:class:`dpkit.analytics._families.Form`). An expression in place of the column is a
    derived column of ``derived``, named as the output (``AS name``, else ``<function>_<its
    position in the select list>``)."""
    func = (node.name if isinstance(node, exp.Anonymous) else node.key).lower()
    by_name = _sql_forms()
    if isinstance(node, exp.Count):
        inner = node.this
        wanted = None
        if isinstance(inner, exp.Star):
            wanted = "*"
        elif isinstance(inner, exp.Distinct):
            cols = inner.expressions
            if (
                len(cols) == 1
                and isinstance(cols[0], exp.Column)
                and (unit is None or cols[0].name == unit)
            ):
                wanted = "distinct_unit"
        for form in by_name.get("count", []):
            if wanted is not None and form.params[:1] == (wanted,):
                result: Aggregation = form.build({}, name)
                return result
        raise _refuse(node, "Use COUNT(*) or COUNT(DISTINCT <privacy unit column>).")
    args = _args(node)
    candidates = [f for f in by_name.get(func, []) if f.params[:1] == ("column",)]
    if not candidates:
        raise _refuse(node, _aggregates_text())
    form = candidates[0]
    if not args:
        raise _refuse(node, "An aggregate needs a column.")
    if isinstance(args[0], exp.Column) or derived is None:
        column = _column_name(args[0])
    else:
        if isinstance(args[0], exp.Star | exp.Distinct):
            raise _refuse(node, "The first argument of an aggregate is a column or an expression.")
        name = name or f"{func}_{position}"
        derived.add(args[0], name)
        column = name
    if len(args) > MAX_LIST + 1:
        raise UnsupportedQueryError(
            f"{func.upper()} takes at most {MAX_LIST:,} numbers (edges); it has {len(args) - 1:,}"
        )
    numbers = [_number(a) for a in args[1:]]
    params = form.params[1:]
    fixed = [p for p in params if not p.startswith("*")]
    rest = [p for p in params if p.startswith("*")]
    if fixed[-2:] == ["lower", "upper"] and not rest and len(numbers) == len(fixed) - 2:
        numbers += _registered_bounds(node, func, column, isinstance(args[0], exp.Column))
    if len(numbers) < len(fixed) or (not rest and len(numbers) != len(fixed)):
        signature = func.upper() + form.sql_signature()[len(form.sql[0]) :]
        hint = ": declare the clamping bounds." if "lower" in params else "."
        raise _refuse(node, f"{signature}{hint}")
    values: dict[str, Any] = {"column": column}
    for i, param in enumerate(fixed):
        values[param] = numbers[i]
    if rest:
        values[rest[0].lstrip("*")] = numbers[len(fixed) :]
    built: Aggregation = form.build(values, name)
    return built


def _registered_bounds(node: exp.Expr, func: str, column: str, plain: bool) -> list[Any]:
    """The bounds registered for ``column`` (``plain``: the aggregate's argument is a column,
    not an expression), for an aggregate written without its own. Neither: refused, before
    anything is reserved, naming the column and how to register its bounds."""
    registered, help_text = _REGISTERED.get()
    if not plain:
        raise _refuse(
            node,
            f"{func.upper()} of an expression declares its clamping bounds: "
            f"{func.upper()}(expression, lower, upper).",
        )
    low, high = registered_bounds(
        registered,
        column,
        f"{func.upper()}({column})",
        f"written in the query, {func.upper()}({column}, lower, upper)",
        help_text,
    )
    return [low, high]


_COMPARE = {exp.EQ: "==", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}


def _literal(node: exp.Expr) -> Any:
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        return -_literal(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        return _number(node)
    raise _refuse(node, "IN lists hold literals.")


def _temporal_text(node: exp.Cast) -> str:
    """``DATE '2024-03-01'`` / ``TIMESTAMP '...'``: checked ISO 8601 text."""
    import datetime as _dt

    text = str(node.this.this)
    kind = node.to.this
    try:
        if kind == exp.DataType.Type.DATE:
            return _dt.date.fromisoformat(text).isoformat()
        if kind in (
            exp.DataType.Type.TIMESTAMP,
            exp.DataType.Type.TIMESTAMPNTZ,
            exp.DataType.Type.DATETIME,
        ):
            return _dt.datetime.fromisoformat(text).isoformat(sep=" ")
    except ValueError:
        raise _refuse(node, "Write dates as DATE 'YYYY-MM-DD' (ISO 8601).") from None
    raise _refuse(node, "Only DATE '...' and TIMESTAMP '...' literals are supported.")


def _size(expr: Expr) -> int:
    """The number of nodes of ``expr`` (an IN list counts its values)."""
    values = len(expr.values) if isinstance(expr, IsIn) else 0
    return 1 + values + sum(_size(child) for child in children(expr))


def _chain(node: exp.Expr, kind: type[exp.Expr]) -> list[exp.Expr]:
    """The operands of a chain of one connective (``a AND b AND c``, parentheses included), in
    order, found without recursion."""
    leaves: list[exp.Expr] = []
    stack = [node]
    while stack:
        current = stack.pop()
        while isinstance(current, exp.Paren):
            current = current.this
        if isinstance(current, kind):
            stack.append(current.expression)
            stack.append(current.this)
        else:
            leaves.append(current)
    return leaves


def _balanced(parts: list[Expr], op: str) -> Expr:
    """``parts`` joined by ``op`` (``and`` / ``or``, associative also in SQL's three-valued
    logic) as a balanced tree: depth log2(n), never n."""
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    left, right = _balanced(parts[:middle], op), _balanced(parts[middle:], op)
    return left & right if op == "and" else left | right


def _expr(node: exp.Expr, depth: int) -> Expr:
    if depth > MAX_EXPRESSION_DEPTH:
        raise _too_deep(
            "levels in an expression (WHERE, an aggregate argument, a CASE)", MAX_EXPRESSION_DEPTH
        )
    if isinstance(node, exp.Paren):
        return _expr(node.this, depth)
    if isinstance(node, exp.Column):
        return col(_column_ref(node))
    if isinstance(node, exp.Literal | exp.Null | exp.Boolean):
        return lit(_literal(node))
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal):
        return lit(_temporal_text(node))
    if isinstance(node, exp.Neg):
        return -_expr(node.this, depth + 1)
    if isinstance(node, exp.Not):
        return ~_expr(node.this, depth + 1)
    if isinstance(node, exp.And | exp.Or):
        connective: type[exp.Expr] = exp.And if isinstance(node, exp.And) else exp.Or
        leaves = _chain(node, connective)
        below = depth + max(1, (len(leaves) - 1).bit_length())  # the balanced tree's depth
        parts = [_expr(leaf, below) for leaf in leaves]
        return _balanced(parts, "and" if connective is exp.And else "or")
    for kind, op in _COMPARE.items():
        if isinstance(node, kind):
            left, right = _expr(node.this, depth + 1), _expr(node.expression, depth + 1)
            return {
                "==": left == right,
                "!=": left != right,
                "<": left < right,
                "<=": left <= right,
                ">": left > right,
                ">=": left >= right,
            }[op]
    for kind, op in _ARITH.items():
        if isinstance(node, kind):
            left, right = _expr(node.this, depth + 1), _expr(node.expression, depth + 1)
            return {"+": left + right, "-": left - right, "*": left * right, "/": left / right}[op]
    if isinstance(node, exp.In):
        if node.args.get("query") is not None:
            raise _refuse(node, "IN takes a list of literals, not a subquery.")
        if len(node.expressions) > MAX_LIST:
            raise UnsupportedQueryError(
                f"an IN list holds at most {MAX_LIST:,} values; it has {len(node.expressions):,}"
            )
        return _expr(node.this, depth + 1).is_in([_literal(v) for v in node.expressions])
    if isinstance(node, exp.Between):
        return _expr(node.this, depth + 1).between(
            _expr(node.args["low"], depth + 1), _expr(node.args["high"], depth + 1)
        )
    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise _refuse(node, "Only IS NULL / IS NOT NULL are supported.")
        return _expr(node.this, depth + 1).is_null()
    if isinstance(node, exp.Like | exp.ILike):
        pattern = node.expression
        if not isinstance(pattern, exp.Literal) or not pattern.is_string:
            raise _refuse(node, "The pattern of LIKE is a text literal, e.g. 'PROMO%'.")
        operand = _expr(node.this, depth + 1)
        text = str(pattern.this)
        matched = operand.like(text) if isinstance(node, exp.Like) else operand.ilike(text)
        return ~matched if node.args.get("negate") else matched
    if isinstance(node, exp.Year | exp.Month | exp.Day | exp.Extract):
        return _part(node, depth)
    if isinstance(node, exp.Case):
        return _case(node, depth)
    raise _refuse(node)


_PART_NAMES = frozenset({"YEAR", "MONTH", "DAY"})


def _part(node: exp.Expr, depth: int) -> Expr:
    """``YEAR(d)``, ``MONTH(d)``, ``DAY(d)`` and ``EXTRACT(YEAR | MONTH | DAY FROM d)``."""
    if isinstance(node, exp.Extract):
        unit = node.this
        part = str(unit.this).upper() if isinstance(unit, exp.Var) else ""
        if part not in _PART_NAMES:
            raise _refuse(node, "EXTRACT takes YEAR, MONTH or DAY.")
        operand = _expr(node.expression, depth + 1)
    else:
        part = type(node).__name__.upper()
        operand = _expr(node.this, depth + 1)
    return {"YEAR": operand.year, "MONTH": operand.month, "DAY": operand.day}[part]()


def _case(node: exp.Case, depth: int) -> Expr:
    """A searched ``CASE WHEN c THEN v ... [ELSE d] END`` (no ELSE: NULL), or a simple one,
    ``CASE x WHEN v THEN ...``, read as ``CASE WHEN x = v THEN ...``."""
    ifs = node.args.get("ifs") or []
    if len(ifs) > MAX_LIST:
        raise UnsupportedQueryError(f"a CASE has at most {MAX_LIST:,} WHEN branches")
    if depth + len(ifs) > MAX_EXPRESSION_DEPTH:
        raise _too_deep(
            "levels in an expression (each WHEN of a CASE is one)", MAX_EXPRESSION_DEPTH
        )
    subject = node.this
    operand = _expr(subject, depth + 1) if subject is not None else None
    below = depth + len(ifs)
    built = None
    for branch in ifs:
        condition = _expr(branch.this, below + 1)
        if operand is not None:
            condition = operand == condition
        value = _expr(branch.args["true"], below + 1)
        built = when(condition, value) if built is None else built.when(condition, value)
    if built is None:
        raise _refuse(node, "CASE needs a WHEN branch.")
    default = node.args.get("default")
    return built if default is None else built.otherwise(_expr(default, below + 1))


# ------------------------------------------------------------------ FROM: joins, subqueries, WITH
MAX_RELATION_NODES = 64
"""The most tables, joins and subqueries in a query's ``FROM`` part (``WITH`` included)."""

_PER_UNIT_FUNCTIONS = {
    "count": "count",
    "sum": "sum",
    "min": "min",
    "max": "max",
    "avg": "avg",
    "mean": "avg",
}
"""The aggregates a subquery may compute per person (exact: the outer query adds the noise)."""


def _is_relation(select: exp.Select) -> bool:
    """Does the statement's ``FROM`` part need the relation planner (a join, a subquery or
    ``WITH``)?"""
    source = select.args.get("from") or select.args.get("from_")
    return bool(
        select.args.get("joins")
        or select.args.get("with")
        or select.args.get("with_")
        or (source is not None and not isinstance(source.this, exp.Table))
    )


def _relation_construct(select: exp.Select) -> str:
    if select.args.get("with") or select.args.get("with_"):
        return _CLAUSES["with"]
    if select.args.get("joins"):
        return _CLAUSES["joins"]
    return "a subquery in FROM"


def _without_from(select: exp.Select) -> exp.Select:
    """The statement without its ``WITH``, ``FROM`` and joins (parsed separately)."""
    copy = select.copy()
    for arg in ("with", "with_", "from", "from_", "joins"):
        if arg in copy.args:
            copy.set(arg, None)
    return copy


def parse_relation(select: exp.Select) -> PlanNode:
    """The ``FROM`` part of a statement (its ``WITH``, tables, joins and subqueries) as plan
    nodes. Only these are accepted (everything else is refused, naming it): ``FROM t [AS a]``,
    ``[INNER | LEFT [OUTER]] JOIN t [AS a] ON a.x = b.y [AND ...]`` or ``USING (x, ...)``,
    ``(SELECT ...) AS s`` (columns, ``expr AS name``, ``WHERE``; or ``GROUP BY`` a column
    that holds the privacy unit with ``COUNT``, ``SUM``, ``MIN``, ``MAX``, ``AVG`` per
    person, and ``HAVING``), and ``WITH name AS (SELECT ...)``."""
    budget = [MAX_RELATION_NODES]
    token = _QUALIFIERS.set(None)
    try:
        ctes = _ctes(select, {}, budget)
        return _from_part(select, ctes, budget, 0)
    finally:
        _QUALIFIERS.reset(token)


def _spend(budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise UnsupportedQueryError(
            f"the FROM part has more than {MAX_RELATION_NODES} tables, joins and subqueries"
        )


def _ctes(select: exp.Select, outer: dict[str, PlanNode], budget: list[int]) -> dict[str, PlanNode]:
    ctes = dict(outer)
    with_ = select.args.get("with") or select.args.get("with_")
    if with_ is None:
        return ctes
    if with_.args.get("recursive"):
        raise UnsupportedQueryError("WITH RECURSIVE is not supported in a dpkit query")
    for cte in with_.expressions:
        if not isinstance(cte, exp.CTE) or not isinstance(cte.this, exp.Select):
            raise _refuse(cte, "WITH name AS (SELECT ...).")
        if cte.args.get("materialized") is not None:
            raise _refuse(cte, "WITH name AS (SELECT ...), without MATERIALIZED.")
        name = cte.alias
        if not name or (cte.args.get("alias") and cte.args["alias"].columns):
            raise _refuse(cte, "WITH name AS (SELECT ...), without column names.")
        ctes[name] = _AliasNode(_subquery(cte.this, ctes, budget, 1), name)
    return ctes


def _from_part(
    select: exp.Select, ctes: dict[str, PlanNode], budget: list[int], depth: int
) -> PlanNode:
    source = select.args.get("from") or select.args.get("from_")
    if source is None:
        raise UnsupportedQueryError("a query over several tables needs FROM")
    for arg, value in source.args.items():
        if arg != "this" and not _absent(value):
            raise _refuse(source)
    node = _table_ref(source.this, ctes, budget, depth)
    for join in select.args.get("joins") or []:
        node = _join(node, join, ctes, budget, depth)
    return node


def _table_ref(
    node: exp.Expr, ctes: dict[str, PlanNode], budget: list[int], depth: int
) -> PlanNode:
    _spend(budget)
    if isinstance(node, exp.Table):
        for arg, value in node.args.items():
            if arg not in ("this", "alias") and not _absent(value):
                said = _CLAUSES.get(arg) or arg.upper()
                raise UnsupportedQueryError(f"{said} is not supported in a dpkit query")
        if not isinstance(node.this, exp.Identifier):
            raise UnsupportedQueryError(
                f"FROM {_text(node)}: name a table of the session (a file function or "
                "expression is not one)"
            )
        alias = _table_alias(node)
        name = str(node.this.this)
        base = ctes.get(name, _SourceNode(name))
        return _AliasNode(base, alias) if alias else base
    if isinstance(node, exp.Subquery):
        for arg, value in node.args.items():
            if arg not in ("this", "alias") and not _absent(value):
                raise _refuse(node)
        if not isinstance(node.this, exp.Select):
            raise _refuse(node, "A subquery in FROM is one SELECT.")
        inner = _subquery(node.this, ctes, budget, depth + 1)
        alias = _table_alias(node)
        return _AliasNode(inner, alias) if alias else inner
    raise _refuse(node, "FROM takes tables, joins and subqueries.")


def _table_alias(node: exp.Expr) -> str | None:
    alias = node.args.get("alias")
    if alias is None:
        return None
    if alias.args.get("columns"):
        raise _refuse(node, "Column aliases of a table (AS t(a, b)) are not supported.")
    return str(alias.name) or None


def _join(
    left: PlanNode, join: exp.Join, ctes: dict[str, PlanNode], budget: list[int], depth: int
) -> PlanNode:
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        said = " ".join(x for x in (side, kind) if x)
        raise UnsupportedQueryError(
            f"{said} JOIN is not supported in a dpkit query: use JOIN (inner) or LEFT JOIN"
        )
    if kind == "OUTER" and side != "LEFT":
        raise UnsupportedQueryError("FULL OUTER JOIN is not supported: use JOIN or LEFT JOIN")
    for arg, value in join.args.items():
        if arg not in ("this", "on", "using", "side", "kind") and not _absent(value):
            said = _CLAUSES.get(arg) or arg.upper()
            raise UnsupportedQueryError(f"{said} in a JOIN is not supported in a dpkit query")
    right = _table_ref(join.this, ctes, budget, depth)
    how = "left" if side == "LEFT" else "inner"
    using = join.args.get("using")
    on = join.args.get("on")
    if using:
        names = []
        for item in using:
            if not isinstance(item, exp.Identifier | exp.Column):
                raise _refuse(item, "USING takes column names.")
            names.append(str(item.name))
        return _JoinNode(left, right, tuple((n, n) for n in names), how, True)  # type: ignore[arg-type]
    if on is None:
        raise UnsupportedQueryError(
            f"JOIN {_text(join.this)} needs ON or USING: a cross join is not supported"
        )
    pairs, rest = _join_condition(on)
    return _JoinNode(left, right, pairs, how, False, rest)  # type: ignore[arg-type]


def _join_condition(on: exp.Expr) -> tuple[tuple[tuple[str, str], ...], Expr | None]:
    """An ``ON`` condition: its equalities of two columns (the join keys), and the rest."""
    check_tree(on)
    pairs: list[tuple[str, str]] = []
    rest: list[Expr] = []
    for part in _chain(on, exp.And):
        while isinstance(part, exp.Paren):
            part = part.this
        if (
            isinstance(part, exp.EQ)
            and isinstance(part.this, exp.Column)
            and isinstance(part.expression, exp.Column)
        ):
            pairs.append((_column_ref(part.this), _column_ref(part.expression)))
        else:
            rest.append(_condition(part))
    if not pairs:
        raise UnsupportedQueryError(
            f"ON {_text(on)}: a join needs at least one equality of two columns (a non-equi "
            "join is not supported)"
        )
    condition = None
    for item in rest:
        condition = item if condition is None else condition & item
    return tuple(pairs), condition


def _subquery(
    select: exp.Select, outer: dict[str, PlanNode], budget: list[int], depth: int
) -> PlanNode:
    """A ``SELECT`` in ``FROM`` or ``WITH``: columns and a filter, or a per-person aggregate."""
    if depth > 8:
        raise _too_deep("levels of subqueries", 8)
    allowed = {"expressions", "from", "from_", "where", "group", "joins", "with", "with_", "having"}
    for arg, value in select.args.items():
        if arg not in allowed and not _absent(value):
            said = _CLAUSES.get(arg) or arg.upper()
            raise UnsupportedQueryError(f"{said} in a subquery is not supported in a dpkit query")
    ctes = _ctes(select, outer, budget)
    token = _QUALIFIERS.set(None)
    try:
        node = _from_part(select, ctes, budget, depth)
        where = select.args.get("where")
        if where is not None:
            check_tree(where.this)
            node = _FilterNode(node, _condition(where.this))
        group = select.args.get("group")
        items = list(select.expressions)
        if group is not None or any(_is_aggregate_call(_unaliased(i)) for i in items):
            return _per_person(node, select, group, items)
        if select.args.get("having") is not None:
            raise UnsupportedQueryError("HAVING in a subquery needs GROUP BY")
        return _columns(node, items)
    finally:
        _QUALIFIERS.reset(token)


def _unaliased(node: exp.Expr) -> exp.Expr:
    return node.this if isinstance(node, exp.Alias) else node


def _is_aggregate_call(node: exp.Expr) -> bool:
    if isinstance(node, exp.Count | exp.Min | exp.Max | exp.Sum | exp.Avg):
        return True
    return isinstance(node, exp.Anonymous) and str(node.name).lower() in _PER_UNIT_FUNCTIONS


def _columns(node: PlanNode, items: list[exp.Expr]) -> PlanNode:
    """A subquery's select list without aggregates: ``*``, columns, ``expr AS name``."""
    if len(items) == 1 and isinstance(items[0], exp.Star):
        return node
    names: list[str] = []
    for item in items:
        if isinstance(item, exp.Star):
            raise _refuse(item, "Write * alone, or list the columns.")
        if isinstance(item, exp.Alias):
            check_tree(item.this)
            name = str(item.alias)
            node = _WithColumnNode(node, name, _expr(item.this, 1))
            names.append(name)
        elif isinstance(item, exp.Column):
            names.append(_column_ref(item))
        else:
            raise _refuse(item, "Name a computed column: expression AS name.")
    if len(set(names)) != len(names):
        raise UnsupportedQueryError("a subquery names two columns alike")
    return _SelectNode(node, tuple(names))


def _per_person(
    node: PlanNode, select: exp.Select, group: exp.Expr | None, items: list[exp.Expr]
) -> PlanNode:
    """``SELECT keys, aggregates ... GROUP BY keys [HAVING ...]``: exact per-person values."""
    if group is None:
        raise UnsupportedQueryError(
            "a subquery that aggregates must GROUP BY the privacy unit (a per-person table)"
        )
    keys: list[str] = []
    for key in group.expressions:
        if not isinstance(key, exp.Column):
            raise _refuse(key, "GROUP BY takes column names.")
        keys.append(_column_ref(key))
    aggregates: list[tuple[str, str, str]] = []
    texts: dict[str, str] = {}
    derived = 0

    def aggregate(call: exp.Expr, name: str | None) -> str:
        nonlocal node, derived
        text = call.sql()
        if text in texts and name is None:
            return texts[text]
        function, column = _per_person_call(call)
        if column is not None and not isinstance(column, str):
            derived += 1
            value_name = f"__dpkit_value{derived}"
            node = _WithColumnNode(node, value_name, column)
            column = value_name
        out = name or f"{function}_{column or 'rows'}".replace(".", "_")
        aggregates.append((out, function, column or ""))
        texts[text] = out
        return out

    names: list[str] = []
    for item in items:
        name = str(item.alias) if isinstance(item, exp.Alias) else None
        inner = _unaliased(item)
        if isinstance(inner, exp.Column) and _column_ref(inner) in keys and name is None:
            names.append(_column_ref(inner))
            continue
        if not _is_aggregate_call(inner):
            raise _refuse(
                item,
                "A subquery with GROUP BY selects its GROUP BY columns and aggregates "
                "(COUNT, SUM, MIN, MAX, AVG).",
            )
        names.append(aggregate(inner, name))
    having = select.args.get("having")
    condition: Expr | None = None
    if having is not None:
        condition = _having(having.this, aggregate)
    per_person: PlanNode = _PerUnitNode(node, tuple(keys), tuple(aggregates))  # type: ignore[arg-type]
    if condition is not None:
        per_person = _FilterNode(per_person, condition)
    return _SelectNode(per_person, tuple(dict.fromkeys(names)))


def _per_person_call(call: exp.Expr) -> tuple[str, str | Expr | None]:
    """(function, column, a derived value, or None for COUNT(*)) of a per-person aggregate."""
    if isinstance(call, exp.Count):
        inner = call.this
        if isinstance(inner, exp.Star):
            return "count_star", None
        if isinstance(inner, exp.Distinct):
            if len(inner.expressions) != 1 or not isinstance(inner.expressions[0], exp.Column):
                raise _refuse(call, "COUNT(DISTINCT column).")
            return "count_distinct", _column_ref(inner.expressions[0])
        if isinstance(inner, exp.Column):
            return "count", _column_ref(inner)
        raise _refuse(call, "COUNT(*), COUNT(column) or COUNT(DISTINCT column).")
    if isinstance(call, exp.Min | exp.Max | exp.Sum | exp.Avg):
        function = type(call).__name__.lower()
        args = [call.this]
    else:
        function = _PER_UNIT_FUNCTIONS[str(call.name).lower()]
        args = list(call.expressions)
    if function == "count":
        raise _refuse(call, "COUNT(*), COUNT(column) or COUNT(DISTINCT column).")
    if len(args) != 1:
        raise _refuse(
            call,
            "Inside a per-person subquery, aggregates are exact and take one argument, "
            "e.g. SUM(l_quantity): the outer query's aggregate declares the bounds.",
        )
    arg = args[0]
    if isinstance(arg, exp.Column):
        return function, _column_ref(arg)
    check_tree(arg)
    return function, _expr(arg, 1)


def _having(node: exp.Expr, aggregate: Any) -> Expr:
    """A subquery's HAVING condition, each aggregate in it read as its per-person column."""
    replaced = node.copy()
    for call in list(
        replaced.find_all(exp.Count, exp.Min, exp.Max, exp.Sum, exp.Avg, exp.Anonymous)
    ):
        if _is_aggregate_call(call):
            call.replace(exp.column(aggregate(call, None)))
    check_tree(replaced)
    return _condition(replaced)
