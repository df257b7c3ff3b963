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
  are clamped to: dpkit never reads them from the data. The functions and their arguments are
  those the aggregate families register (:mod:`dpkit.analytics._families`), so a new family
  brings its own syntax.
* ``WHERE``: comparisons, ``AND`` / ``OR`` / ``NOT``, ``IN (...)``, ``BETWEEN``, ``IS [NOT]
  NULL``, ``+ - * /``, column names and literals. Dates and times are written ``DATE
  '2024-03-01'`` or ``TIMESTAMP '2024-03-01 12:00:00'`` (ISO 8601; they compare as ISO text, so
  keep a CSV file's date column undeclared, as text).
* ``GROUP BY`` columns: public keys come from the command's ``--keys col=v1,v2`` option; without
  it the groups are chosen privately (which needs ``--delta``).

Only these nodes are accepted; anything else (joins, subqueries, functions, ``;``-separated
statements) is refused with an :class:`~dpkit.errors.UnsupportedQueryError` naming it. The text
is parsed into dpkit's own expression tree, never passed to a database.

Sizes are bounded before and while parsing, so that no text can exhaust the parser's recursion
or cost seconds of CPU (each refusal names the limit): at most :data:`MAX_QUERY_TEXT`
characters; parentheses nested at most :data:`MAX_NESTING` deep and at most
:data:`MAX_PREFIX_RUN` prefix operators (``NOT``, ``-``) in a row; a ``WHERE`` expression at most
:data:`MAX_EXPRESSION_DEPTH` deep (chains of ``AND`` and of ``OR`` are balanced first, so a
long chain is never deep) and of at most :data:`MAX_WHERE_NODES` nodes (about 150
conditions); at most :data:`MAX_LIST` values in an
``IN`` list or histogram edges; at most :data:`MAX_AGGREGATIONS` aggregates and
:data:`MAX_GROUP_BY` ``GROUP BY`` columns; numbers of at most :data:`MAX_NUMBER_LITERAL`
characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import ParseError, TokenError

from dpkit.analytics._expr import Binary, Expr, IsIn, Structural, Unary, col, lit
from dpkit.analytics._families import Form, forms
from dpkit.analytics._planner import families as _registered  # noqa: F401  (fills the registry)
from dpkit.analytics._query import Aggregation, quantile_name
from dpkit.errors import UnsupportedQueryError

__all__ = [
    "ALLOWED_ARGS",
    "MAX_AGGREGATIONS",
    "MAX_EXPRESSION_DEPTH",
    "MAX_GROUP_BY",
    "MAX_LIST",
    "MAX_NESTING",
    "MAX_NUMBER_LITERAL",
    "MAX_PREFIX_RUN",
    "MAX_QUERY_TEXT",
    "MAX_WHERE_NODES",
    "ParsedQuery",
    "check_nesting",
    "check_tree",
    "parse_error_text",
    "parse_query",
    "parse_where",
    "plain",
    "quantile_name",
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
MAX_AGGREGATIONS = 100
"""The most aggregates in one query."""
MAX_GROUP_BY = 16
"""The most ``GROUP BY`` columns."""
MAX_NUMBER_LITERAL = 100
"""The longest number literal (characters)."""

_CLI_HELP = "See `dpkit query --help` for the syntax."
_CLI_INPUT = "the input given on the command line"
_OPENING = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE})
_CLOSING = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE})
_PREFIX = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})


@dataclass(frozen=True, slots=True, eq=False)
class ParsedQuery(Structural):
    """A parsed query: aggregations, an optional filter and the group-by columns."""

    aggregations: tuple[Aggregation, ...]
    where: Expr | None
    group_by: tuple[str, ...]
    source: str | None = None


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
    exp.Select: frozenset({"expressions", "from", "from_", "where", "group"}),
    exp.From: frozenset({"this"}),
    exp.Table: frozenset({"this", "alias"}),
    exp.TableAlias: frozenset({"this"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Where: frozenset({"this"}),
    exp.Group: frozenset({"expressions"}),
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
) -> ParsedQuery:
    """Parse the query text (see the module docstring for the syntax and its size limits).

    Args:
        source: what ``FROM`` may name, for messages (the service says "the dataset").
        syntax_help: a sentence appended to every refusal, saying where the syntax is described.
    """
    try:
        return _parse_query(text, privacy_unit, source)
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


def _parse_query(text: str, privacy_unit: str | None, source_name: str) -> ParsedQuery:
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
    return _from_select(statements[0], privacy_unit, source_name)


def _from_select(select: exp.Select, privacy_unit: str | None, source_name: str) -> ParsedQuery:
    """The query of a parsed statement (everything in it checked against
    :data:`ALLOWED_ARGS` first)."""
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
    check_tree(select)
    group = select.args.get("group")
    keys: tuple[str, ...] = ()
    if group is not None:
        names = []
        if len(group.expressions) > MAX_GROUP_BY:
            raise UnsupportedQueryError(f"GROUP BY takes at most {MAX_GROUP_BY} columns")
        for node in group.expressions:
            if not isinstance(node, exp.Column):
                raise _refuse(node, "GROUP BY takes column names.")
            names.append(node.name)
        keys = tuple(names)
    aggregations: list[Aggregation] = []
    if len(select.expressions) > MAX_AGGREGATIONS + len(keys):
        raise UnsupportedQueryError(f"a query has at most {MAX_AGGREGATIONS} aggregates")
    for node in select.expressions:
        name = None
        if isinstance(node, exp.Alias):
            name = node.alias
            node = node.this
        if isinstance(node, exp.Column) and node.name in keys:
            continue  # group keys may be listed; they are always in the result
        aggregations.append(_aggregation(node, name, privacy_unit))
    if not aggregations:
        raise UnsupportedQueryError("the query has no aggregate; add e.g. COUNT(*)")
    where_node = select.args.get("where")
    where = _condition(where_node.this) if where_node is not None else None
    return ParsedQuery(tuple(aggregations), where, keys, table_name)


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
    return str(node.name)


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


def _aggregation(node: exp.Expr, name: str | None, unit: str | None) -> Aggregation:
    """The aggregation of one select-list call, by the SQL syntax its family declares
    (:class:`dpkit.analytics._families.Form`)."""
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
    column = _column_name(args[0])
    if len(args) > MAX_LIST + 1:
        raise UnsupportedQueryError(
            f"{func.upper()} takes at most {MAX_LIST:,} numbers (edges); it has {len(args) - 1:,}"
        )
    numbers = [_number(a) for a in args[1:]]
    params = form.params[1:]
    fixed = [p for p in params if not p.startswith("*")]
    rest = [p for p in params if p.startswith("*")]
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
    if isinstance(expr, Binary):
        return 1 + _size(expr.left) + _size(expr.right)
    if isinstance(expr, Unary):
        return 1 + _size(expr.operand)
    if isinstance(expr, IsIn):
        return 1 + _size(expr.operand) + len(expr.values)
    return 1


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
        raise _too_deep("levels in a WHERE expression", MAX_EXPRESSION_DEPTH)
    if isinstance(node, exp.Paren):
        return _expr(node.this, depth)
    if isinstance(node, exp.Column):
        if node.table:
            raise _refuse(node, "Name columns without a table prefix.")
        return col(node.name)
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
    raise _refuse(node)
