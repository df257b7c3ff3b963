"""Compile a :class:`~dpkit.analytics._engines._base.BoundedPlan` to a sqlglot expression tree.

No SQL text is ever assembled from user input: column names become quoted sqlglot identifiers and
values become sqlglot literals, so the generator escapes them for each dialect. The same tree is
rendered for DuckDB and Spark.

The contribution bounding runs in one pass over the table for most rows (see the module
docstring of :mod:`dpkit.analytics._engines._base` for the semantics):

* ``heavy``: the units that exceed a bound, from one ``GROUP BY unit`` (a hash aggregate) over
  the rows of the *candidate* units when the engine found them more cheaply
  (:mod:`dpkit.analytics._engines._heavy`; with no candidate the heavy side is left out);
* ``total``: every row aggregated per group directly (a scan with a small hash aggregate);
* only the heavy units' rows are hashed and ranked with window functions; their aggregates are
  subtracted from the total (all of their rows) and added back (the rows kept);
* every aggregate is an exact integer sum, so the correction is exact (distinct-unit counts
  subtract too, because heavy and light units are disjoint sets).

This avoids a window over the whole table (a sort by unit), which is what makes bounding slow in
plain SQL plans; when no unit exceeds its bounds the heavy side is empty and costs nothing.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from sqlglot import exp

from dpkit.analytics._engines._base import (
    ESCAPE,
    SEPARATOR,
    BinSpec,
    BoundedPlan,
    Output,
    Step,
    ValueSpec,
    power_of_two_text,
)
from dpkit.analytics._engines._columns import (
    BOOL_FALSE,
    BOOL_TRUE,
    NUMBER_PATTERN,
    TEMPORAL_GROUPS,
    TEMPORAL_MAX_US,
    TEMPORAL_MIN_US,
    TEMPORAL_PATTERN,
    canonical,
)
from dpkit.analytics._expr import (
    Binary,
    Case,
    Col,
    ColumnKind,
    Expr,
    IsIn,
    Lit,
    Unary,
    children,
    columns_of,
    infer_kind,
)
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

__all__ = [
    "Dialect",
    "build_query",
    "converted",
    "expr_compiler",
    "key_literal",
    "literal",
    "source_select",
    "sql_text",
    "step_levels",
]

Dialect = Literal["duckdb", "spark"]


_SQL_FRAMES = 4000
"""Python frames the SQL generator may use beyond the caller's. The planner's limits
(:data:`~dpkit.analytics._expr.MAX_EXPRESSION_DEPTH`,
:data:`~dpkit.analytics._planner._validate.MAX_PLAN_LEVELS`) keep every accepted query's SQL
well within it (tests/regression/test_deep_plans.py builds the deepest ones)."""


def sql_text(tree: exp.Expr, dialect: Dialect) -> str:
    """``tree`` as SQL text (the tree is consumed). sqlglot's generator recurses once per
    nesting level; the recursion limit is raised for the call so that every query the planner
    accepts is written whatever the caller's own depth, and a RecursionError all the same is
    a refusal (:class:`UnsupportedQueryError`), never a crash: the sessions generate each
    plan's SQL before anything is reserved (``Engine.check``)."""
    limit = sys.getrecursionlimit()
    depth = 0
    frame = sys._getframe()
    while frame is not None and depth <= limit:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    try:
        sys.setrecursionlimit(max(limit, depth + _SQL_FRAMES))
        return tree.sql(dialect=dialect, copy=False)
    except RecursionError:
        raise UnsupportedQueryError(
            "the query is nested too deeply for the engine to write its SQL: use fewer levels "
            "of derived columns and filters and shallower expressions (see MAX_PLAN_LEVELS and "
            "MAX_EXPRESSION_DEPTH in docs/analytics.md). Nothing was charged."
        ) from None
    finally:
        sys.setrecursionlimit(limit)


def ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def column(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(this=ident(name), table=ident(table) if table else None)


def double(value: float) -> exp.Expr:
    """A double literal that parses to exactly ``value`` (shortest round-trip decimal)."""
    return exp.cast(exp.Literal.string(repr(float(value))), "DOUBLE")


def literal(value: Any) -> exp.Expr:
    """A sqlglot literal for a Python value (never pasted into text)."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool | np.bool_):
        return exp.Boolean(this=bool(value))
    if isinstance(value, int | np.integer):
        return exp.Literal.number(str(int(value)))
    if isinstance(value, float | np.floating):
        return double(float(value))
    if isinstance(value, decimal.Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, _dt.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), "TIMESTAMP")
    if isinstance(value, _dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    raise InvalidParameterError("key", value, "an int, float, str, bool, date or datetime")


def key_literal(value: Any, kind: ColumnKind | None) -> exp.Expr:
    """A public key value as a literal of its column's kind (the planner checked the kinds).

    The column is never cast: a text column is compared with text, a number with a number, a
    date or timestamp with a TIMESTAMP literal, so comparing can never fail on a data value.
    """
    value = canonical(value)
    if kind == "temporal" and isinstance(value, _dt.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), "TIMESTAMP")
    if kind == "string":
        return exp.cast(exp.Literal.string(str(value)), "VARCHAR")
    return literal(value)


def converted(name: str, kind: ColumnKind, dialect: Dialect) -> exp.Expr:
    """Column ``name`` (stored as text, or any type when ``kind`` is text) as a ``kind`` value.

    Never fails: a value that does not parse is NULL (the rules of
    :mod:`dpkit.analytics._engines._columns`, identical in every engine).
    """
    ref = column(name)
    if kind == "string":
        return exp.cast(ref, "VARCHAR")
    text = exp.cast(ref, "VARCHAR")
    if kind == "numeric":
        matches = exp.RegexpLike(this=text, expression=exp.Literal.string(NUMBER_PATTERN))
        return (
            exp.Case()
            .when(matches, exp.cast(text.copy(), "DOUBLE"), copy=False)
            .else_(exp.Null(), copy=False)
        )
    if kind == "bool":
        low = exp.Lower(this=text)
        return (
            exp.Case()
            .when(
                exp.In(this=low, expressions=[exp.Literal.string(v) for v in BOOL_TRUE]),
                exp.true(),
                copy=False,
            )
            .when(
                exp.In(this=low.copy(), expressions=[exp.Literal.string(v) for v in BOOL_FALSE]),
                exp.false(),
                copy=False,
            )
            .else_(exp.Null(), copy=False)
        )
    if kind == "temporal":
        return _timestamp_of_text(text, dialect)
    raise UnsupportedQueryError(f"cannot convert column {name!r} to {kind}")


def _bound(value: exp.Expr, name: str, body: Any, dialect: Dialect) -> exp.Expr:
    """``body(name)`` with ``name`` bound to ``value``, which is evaluated once per row:
    ``list_transform([value], lambda name: body)[1]`` (Spark: ``transform(array(...))[0]``)."""
    element = exp.to_identifier(name)
    function = exp.Lambda(this=body(element.copy()), expressions=[element])
    call = "transform" if dialect == "spark" else "list_transform"
    mapped = exp.Anonymous(this=call, expressions=[exp.Array(expressions=[value]), function])
    return exp.Bracket(this=mapped, expressions=[exp.Literal.number(0)])  # sqlglot: 0-based


def _timestamp_of_text(text: exp.Expr, dialect: Dialect) -> exp.Expr:
    """``text`` as a naive UTC timestamp by
    :data:`~dpkit.analytics._engines._columns.TEMPORAL_PATTERN` (NULL otherwise), as
    :func:`~dpkit.analytics._engines._columns.text_timestamps` does in Python: the pattern's
    groups (one match), the date checked against the calendar by the engine (the only step that
    is not integer arithmetic), then microseconds since 1970 with the offset subtracted, kept
    within years 1-9999. Nothing depends on the session's time zone."""
    pattern = exp.Literal.string(TEMPORAL_PATTERN)

    def call(name: str, *args: exp.Expr) -> exp.Expr:
        return exp.Anonymous(this=name, expressions=list(args))

    def lit(value: int) -> exp.Expr:
        return exp.Literal.number(value)

    if dialect == "spark":
        # one match: the groups joined by "," (the text is then only digits, signs and commas)
        joined = ",".join(f"${i}" for i in range(1, len(TEMPORAL_GROUPS) + 1))
        replaced = call("regexp_replace", text.copy(), pattern.copy(), exp.Literal.string(joined))
        parts = call("split", replaced, exp.Literal.string(","))
    else:
        names = exp.Array(expressions=[exp.Literal.string(n) for n in TEMPORAL_GROUPS])
        parts = call("regexp_extract", text.copy(), pattern.copy(), names)

    def timestamp(p: exp.Identifier) -> exp.Expr:
        def group(name: str) -> exp.Expr:
            if dialect == "spark":
                return call("element_at", p.copy(), lit(TEMPORAL_GROUPS.index(name) + 1))
            return call("struct_extract", p.copy(), exp.Literal.string(name))

        def number(name: str) -> exp.Expr:  # a group of digits, 0 when it did not take part
            return exp.cast(call("concat", exp.Literal.string("0"), group(name)), "BIGINT")

        def plus(a: exp.Expr, b: exp.Expr) -> exp.Expr:
            return exp.Paren(this=exp.Add(this=a, expression=b))

        def times(a: exp.Expr, b: int) -> exp.Expr:
            return exp.Paren(this=exp.Mul(this=a, expression=lit(b)))

        dash = exp.Literal.string("-")
        day_text = [group("y"), dash, group("mo"), dash.copy(), group("d")]
        if dialect == "spark":
            # an explicit +00:00 makes the instant independent of spark.sql.session.timeZone
            day_text.append(exp.Literal.string(" +00:00"))
            parsed = call(
                "try_to_timestamp", call("concat", *day_text), exp.Literal.string("yyyy-MM-dd XXX")
            )
            midnight = call("unix_micros", parsed)
        else:
            parsed = exp.TryCast(this=call("concat", *day_text), to=exp.DataType.build("TIMESTAMP"))
            midnight = call("epoch_us", parsed)
        seconds = plus(times(plus(times(number("h"), 60), number("mi")), 60), number("s"))
        offset = times(plus(times(number("oh"), 60), number("om")), 60)
        west = exp.EQ(this=group("sign"), expression=exp.Literal.string("-"))
        sign = exp.Case().when(west, lit(-1), copy=False).else_(lit(1), copy=False)
        # the local time minus its offset ("-02:00": two hours later in UTC)
        utc = exp.Paren(
            this=exp.Sub(this=seconds, expression=exp.Mul(this=sign, expression=offset))
        )
        fraction = exp.cast(call("rpad", group("f"), lit(6), exp.Literal.string("0")), "BIGINT")
        micros = plus(plus(midnight, times(utc, 1_000_000)), fraction)

        def checked(m: exp.Identifier) -> exp.Expr:
            stamp = call("timestamp_micros" if dialect == "spark" else "make_timestamp", m)
            in_range = exp.Between(
                this=m.copy(), low=lit(TEMPORAL_MIN_US), high=lit(TEMPORAL_MAX_US)
            )
            return exp.Case().when(in_range, stamp, copy=False).else_(exp.Null(), copy=False)

        return _bound(micros, "__m", checked, dialect)

    matches = exp.RegexpLike(this=text, expression=pattern)
    return (
        exp.Case()
        .when(matches, _bound(parts, "__p", timestamp, dialect), copy=False)
        .else_(exp.Null(), copy=False)
    )


def _nan_to_null(value: exp.Expr, dialect: Dialect = "duckdb", nested: bool = False) -> exp.Expr:
    """``value`` (a DOUBLE) with NaN as NULL.

    Spark: ``nanvl(value, NULL)`` (``value`` unless it is NaN), which reads ``value`` once.
    DuckDB: ``CASE WHEN isnan(value) THEN NULL ELSE value END``, which repeats ``value`` (as
    does DuckDB's NULLIF, a macro of that CASE). Nested, the repeats multiply: D tests one
    inside another were 2^D copies of the innermost value — ``x / 1 / 1 ...`` took 29 s at 12
    levels, after the reservation, and would never finish at 40 (issue 21). So a test whose
    operand holds another test (``nested``) reads it once, as ``list_filter([value], lambda e:
    NOT isnan(e))[1]`` (slower per row, linear in size); the others, the common case, stay a
    CASE (its operand then holds no test but a column's: twice a test-free tree). The SQL of
    an expression is then linear in the expression's size
    (tests/engines/test_sql_linear_size.py)."""
    if dialect == "spark":
        return exp.Anonymous(this="nanvl", expressions=[value, exp.cast(exp.Null(), "DOUBLE")])
    if nested:
        return _null_when(value, _is_nan, once=True)
    return exp.Case().when(exp.IsNan(this=value), exp.Null(), copy=False).else_(value, copy=False)


def _is_nan(value: exp.Expr) -> exp.Expr:
    return exp.IsNan(this=value)


def _is_zero(value: exp.Expr) -> exp.Expr:
    return exp.EQ(this=value, expression=double(0.0))


def _simple(value: exp.Expr) -> bool:
    """A column or a literal (maybe cast or parenthesised): cheap to repeat."""
    while isinstance(value, exp.Paren | exp.Cast):
        value = value.this
    return isinstance(value, exp.Column | exp.Literal | exp.Null)


def _null_when(value: exp.Expr, test: Any, once: bool = False) -> exp.Expr:
    """DuckDB: ``value``, NULL where ``test(value)``. A CASE repeats ``value``: fine for a
    column or literal; anything else (or ``once``) is read once, as ``list_filter([value],
    lambda e: NOT test(e))[1]`` (NULL stays NULL)."""
    if not once and _simple(value):
        return exp.Case().when(test(value.copy()), exp.Null(), copy=False).else_(value, copy=False)
    element = exp.to_identifier("__e")
    keep = exp.Lambda(this=exp.Not(this=test(element)), expressions=[element.copy()])
    kept = exp.Anonymous(this="list_filter", expressions=[exp.Array(expressions=[value]), keep])
    return exp.Bracket(this=kept, expressions=[exp.Literal.number(0)])  # sqlglot: 0-based


_DOUBLE = exp.DataType.build("DOUBLE")
_PARTS: dict[str, type[exp.Func]] = {"year": exp.Year, "month": exp.Month, "day": exp.Day}
_ARITHMETIC_OPS = ("+", "-", "*", "/")


def _as_double(value: exp.Expr) -> exp.Expr:
    # exp.cast(value, "DOUBLE") without its costs: it parses the type name and copies ``value``
    # on every call, which made compiling a chain of n operations O(n²) (most of the time to
    # compile an expression with thousands of terms); ``value`` is never shared by callers
    if isinstance(value, exp.Cast) and value.to.this == exp.DataType.Type.DOUBLE:
        return value
    return exp.Cast(this=value, to=_DOUBLE.copy())


class _ExprCompiler:
    """Expr -> sqlglot, tracking which columns are float columns of the source (NaN -> NULL)."""

    def __init__(
        self,
        schema: Mapping[str, ColumnKind],
        float_columns: set[str],
        dialect: Dialect = "duckdb",
    ) -> None:
        self.schema = dict(schema)
        self.float_columns = set(float_columns)
        self.dialect: Dialect = dialect

    def kind(self, expr: Expr) -> ColumnKind | None:
        return infer_kind(expr, self.schema)

    def compile(self, expr: Expr) -> exp.Expr:
        if isinstance(expr, Col):
            ref = column(expr.name)
            if expr.name in self.float_columns:
                return _nan_to_null(ref, self.dialect)
            return ref
        if isinstance(expr, Lit):
            return literal(expr.value)
        if isinstance(expr, IsIn):
            numeric = self.kind(expr.operand) == "numeric"
            operand = self.compile(expr.operand)
            values = [
                literal(float(v))
                if numeric and isinstance(v, int | float) and not isinstance(v, bool)
                else literal(v)
                for v in expr.values
            ]
            return exp.In(this=_as_double(operand) if numeric else operand, expressions=values)
        if isinstance(expr, Unary):
            operand = self.compile(expr.operand)
            if expr.op == "is_null":
                return exp.Is(this=operand, expression=exp.Null())
            if expr.op == "is_not_null":
                return exp.Not(this=exp.Is(this=operand, expression=exp.Null()))
            if expr.op == "not":
                return exp.Not(this=exp.Paren(this=operand))
            if expr.op == "as_number":
                return exp.Cast(this=operand, to=exp.DataType.build("DOUBLE"))
            if expr.op == "neg":
                return exp.Neg(this=exp.Paren(this=_as_double(operand)))
            if expr.op == "abs":
                return exp.Abs(this=_as_double(operand))
            if expr.op == "floor":
                return _as_double(exp.Floor(this=_as_double(operand)))
            if expr.op == "ceil":
                return _as_double(exp.Ceil(this=_as_double(operand)))
            if expr.op == "lower":
                return exp.Lower(this=operand)
            if expr.op in _PARTS:
                return _as_double(_PARTS[expr.op](this=operand))
            return exp.Upper(this=operand)
        if isinstance(expr, Binary):
            return self._binary(expr)
        if isinstance(expr, Case):
            return self._case(expr)
        raise UnsupportedQueryError(f"unknown expression node {type(expr).__name__}")

    def _arithmetic(self, expr: Binary) -> exp.Expr:
        """``a op b`` for + - * without the NaN -> NULL of the result, and likewise for the
        operands that are + - * themselves: the NaN test is made once, at the top of a chain.

        The same values as a test after every operation, because NULL and NaN both propagate
        through + - * (an operand that would have become NULL makes the chain NULL; one that
        is NaN makes it NaN, which the top test turns into NULL), and without it the
        expression stays linear in its size: the test repeats its operand, so one test per
        operation made a chain of depth D 2^D nodes."""

        def operand(side: Expr) -> exp.Expr:
            if isinstance(side, Binary) and side.op in _ARITHMETIC_OPS:
                return self._arithmetic(side)  # of DOUBLEs, hence a DOUBLE
            return _as_double(self.compile(side))

        a, b = exp.Paren(this=operand(expr.left)), exp.Paren(this=operand(expr.right))
        if expr.op == "/":
            # x / 0 is NULL (-0.0 too). Division propagates NaN and NULL as + - * do, so it
            # joins their chain (one NaN test at its top)
            if self.dialect == "spark":  # NULL for a zero divisor, reading it once
                return exp.Anonymous(this="try_divide", expressions=[a, b])
            return exp.Div(this=a, expression=_null_when(b, _is_zero))
        return {"+": exp.Add, "-": exp.Sub, "*": exp.Mul}[expr.op](this=a, expression=b)

    def _nested(self, top: Binary) -> bool:
        """Whether a leaf of the arithmetic chain ``top`` (an operand that is not + - * /)
        holds arithmetic, hence a NaN test of its own in the SQL."""
        leaves: list[Expr] = []
        stack: list[Expr] = [top]
        while stack:
            node = stack.pop()
            if isinstance(node, Binary) and node.op in _ARITHMETIC_OPS:
                stack.extend((node.left, node.right))
            else:
                leaves.append(node)
        while leaves:
            node = leaves.pop()
            if isinstance(node, Binary):
                if node.op in _ARITHMETIC_OPS:
                    return True
                leaves.extend((node.left, node.right))
            else:
                leaves.extend(children(node))
        return False

    def _case(self, expr: Case) -> exp.Expr:
        """``CASE WHEN c THEN a ELSE b END`` (numbers as DOUBLE on both branches, so that every
        engine returns the same type)."""
        numeric = self.kind(expr) == "numeric"
        then, default = self.compile(expr.then), self.compile(expr.default)
        if numeric:
            then, default = _as_double(then), _as_double(default)
        return exp.Case(
            ifs=[exp.If(this=exp.Paren(this=self.compile(expr.condition)), true=then)],
            default=default,
        )

    def _like(self, expr: Binary) -> exp.Expr:
        """``text LIKE pattern`` with dpkit's meaning: ``%`` and ``_`` are the only special
        characters. DuckDB has no escape character unless one is declared; Spark's is ``\\``,
        so there every backslash is doubled (an escaped backslash matches itself)."""
        if not (isinstance(expr.right, Lit) and isinstance(expr.right.value, str)):
            raise UnsupportedQueryError("the pattern of LIKE is a text literal")
        pattern = expr.right.value
        if self.dialect == "spark":
            pattern = pattern.replace("\\", "\\\\")
        return exp.Like(this=self.compile(expr.left), expression=literal(pattern))

    def _binary(self, expr: Binary) -> exp.Expr:
        if expr.op == "like":
            return self._like(expr)
        if expr.op in _ARITHMETIC_OPS:
            nested = self.dialect != "spark" and self._nested(expr)
            return _nan_to_null(self._arithmetic(expr), self.dialect, nested)
        left_kind, right_kind = self.kind(expr.left), self.kind(expr.right)
        left, right = self.compile(expr.left), self.compile(expr.right)
        numeric = "numeric" in (left_kind, right_kind)
        if expr.op == "and":
            return exp.And(this=exp.Paren(this=left), expression=exp.Paren(this=right))
        if expr.op == "or":
            return exp.Or(this=exp.Paren(this=left), expression=exp.Paren(this=right))
        if numeric:
            left, right = _as_double(left), _as_double(right)
        if expr.op == "coalesce":
            return exp.Coalesce(this=left, expressions=[right])
        node_type = {
            "<": exp.LT,
            "<=": exp.LTE,
            ">": exp.GT,
            ">=": exp.GTE,
            "==": exp.EQ,
            "!=": exp.NEQ,
        }[expr.op]
        return node_type(this=left, expression=right)


def _replace(value: exp.Expr, old: str, new: str) -> exp.Expr:
    return exp.Anonymous(
        this="REPLACE", expressions=[value, exp.Literal.string(old), exp.Literal.string(new)]
    )


def _text_part(value: exp.Expr) -> exp.Expr:
    """'v' || escaped CAST(value AS VARCHAR), or 'n' for NULL (see base.escape_part)."""
    escaped = _replace(
        _replace(exp.cast(value, "VARCHAR"), ESCAPE, ESCAPE + ESCAPE), SEPARATOR, ESCAPE + "u"
    )
    text = exp.DPipe(this=exp.Literal.string("v"), expression=escaped, safe=True)
    return exp.Coalesce(this=text, expressions=[exp.Literal.string("n")])


def _md5_of(parts: Sequence[exp.Expr]) -> exp.Expr:
    joined: exp.Expr = parts[0]
    for part in parts[1:]:
        joined = exp.DPipe(
            this=exp.DPipe(this=joined, expression=exp.Literal.string(SEPARATOR), safe=True),
            expression=part,
            safe=True,
        )
    return exp.MD5(this=joined)


def _row_number(kind: type[exp.Expr], partition: Sequence[exp.Expr], order: exp.Expr) -> exp.Expr:
    return exp.Window(
        this=kind(),
        partition_by=list(partition),
        order=exp.Order(expressions=[exp.Ordered(this=order)]),
    )


def _select(*expressions: exp.Expr | str) -> exp.Select:
    return exp.Select(
        expressions=[e if isinstance(e, exp.Expr) else exp.Star() for e in expressions]
    )


def _in_heavy(negate: bool) -> exp.Expr:
    sub = exp.select(column("__u")).from_(exp.to_table("__heavy"), copy=False).subquery()
    node = exp.In(this=column("__u"), query=sub)
    return exp.Not(this=node) if negate else node


def _aggregates(plan: BoundedPlan, dialect: Dialect) -> list[exp.Expr]:
    out: list[exp.Expr] = [exp.alias_(exp.Count(this=exp.Star()), "__n", quoted=True)]
    for i, spec in enumerate(plan.outputs):
        out.append(exp.alias_(_aggregate(spec, dialect), f"__o{i}", quoted=True))
    return out


def _wide(value: exp.Expr, dialect: Dialect) -> exp.Expr:
    """Exact integer sums: DuckDB widens SUM(BIGINT) to HUGEINT; Spark needs DECIMAL(38, 0)."""
    return exp.cast(value, "DECIMAL(38, 0)") if dialect == "spark" else value


_PART_BITS = 21


def _exact_sum(value: exp.Expr, dialect: Dialect) -> exp.Expr:
    """The exact sum of a BIGINT column. DuckDB sums BIGINT into HUGEINT natively. Spark would
    sum ``DECIMAL(38, 0)`` row by row (BigDecimal arithmetic: 5x the whole non-private query at
    10 M rows), so there the value is split into three 21-bit parts, ``v = hi·2^42 + mid·2^21 +
    lo`` (``hi`` an arithmetic shift, ``mid`` and ``lo`` in [0, 2^21)), each summed as BIGINT
    (exact below 2^42 rows per group: no overflow, hence no error) and recombined as
    ``DECIMAL(38, 0)`` once per group."""
    if dialect != "spark":
        return exp.Sum(this=value)
    mask = exp.Literal.number((1 << _PART_BITS) - 1)
    hi = exp.BitwiseRightShift(this=value.copy(), expression=exp.Literal.number(2 * _PART_BITS))
    mid = exp.BitwiseAnd(
        this=exp.Paren(
            this=exp.BitwiseRightShift(this=value.copy(), expression=exp.Literal.number(_PART_BITS))
        ),
        expression=mask.copy(),
    )
    lo = exp.BitwiseAnd(this=value.copy(), expression=mask)
    total: exp.Expr | None = None
    for part, shift in ((hi, 2 * _PART_BITS), (mid, _PART_BITS), (lo, 0)):
        term: exp.Expr = exp.cast(exp.Sum(this=part), "DECIMAL(38, 0)")
        if shift:
            term = exp.Mul(this=term, expression=exp.cast(literal(1 << shift), "DECIMAL(38, 0)"))
        total = term if total is None else exp.Add(this=total, expression=term)
    assert total is not None
    return total


def _aggregate(spec: Output, dialect: Dialect) -> exp.Expr:
    if spec.kind == "rows":
        return exp.Count(this=exp.Star())
    if spec.kind == "units":
        return exp.Count(this=exp.Distinct(expressions=[column("__u")]))
    value = column(f"__v{spec.value}")
    if spec.kind == "nonnull":
        return exp.Count(this=value)
    if spec.kind == "sum":
        return _exact_sum(value, dialect)
    return exp.Sum(this=_wide(exp.Mul(this=value, expression=value), dialect))


Cte = tuple[str, exp.Expr]
"""A named relation of the query: ``WITH name AS (tree)`` (or inlined, see :func:`_finish`)."""

Level = tuple[list[exp.Expr], exp.Expr | None]
"""One SELECT level of the steps: its select list over the previous level, and its WHERE."""


def expr_compiler(
    schema: Mapping[str, ColumnKind],
    float_columns: set[str],
    conversions: Mapping[str, ColumnKind],
    dialect: Dialect,
) -> _ExprCompiler:
    """The expression compiler for the rows of :func:`source_select`: a column converted to a
    number may hold NaN, so it is read as a float column (NaN is NULL); a column converted to
    another kind is not one, whatever it is stored as."""
    floats = set(float_columns) | {c for c, k in conversions.items() if k == "numeric"}
    floats -= {c for c, k in conversions.items() if k != "numeric"}
    return _ExprCompiler(schema, floats, dialect)


def source_select(
    source: exp.Expr,
    columns: Sequence[str],
    conversions: Mapping[str, ColumnKind],
    dialect: Dialect,
) -> exp.Select:
    """``SELECT`` every column of ``source``, each column of ``conversions`` converted to its
    declared kind (:func:`converted`: a value that does not parse is NULL, never an error, so
    no data value can make the query fail)."""
    first = [
        exp.alias_(converted(c, conversions[c], dialect), c, quoted=True)
        if c in conversions
        else column(c)
        for c in columns
    ]
    return _select(*first).from_(source, copy=False)


def step_levels(
    steps: Sequence[Step], compiler: _ExprCompiler, columns: Sequence[str]
) -> Iterator[Level]:
    """The SELECT levels that run ``steps`` (in order) over a relation of ``columns``, each as
    its select list over the previous level and its WHERE (None for none); ``compiler`` learns
    each derived column's kind as it is defined. Shared by :func:`build_query` (one CTE per
    level) and the sample-and-aggregate rows (:func:`~._blocks.rows_select`, one subquery per
    level).

    A filter is ``SELECT * WHERE predicate``, a select ``SELECT columns``. Consecutive derived
    columns that do not read one another share one level (a SELECT's expressions read the
    previous level only, so this is the same relation as one level per step): a plan with
    hundreds of derived columns (dpkit.ml's Lloyd queries) stays a few levels deep instead of
    hundreds, which took minutes to inline (the planner counts levels as shared).

    Privacy: every step reads one row at a time (a derived column its own row's values, a filter
    keeps or drops the row), so a unit's rows after the steps come from its own rows only."""
    names = list(columns)
    for group in _step_groups(steps):
        step = group[0]
        if step.kind == "filter":
            assert step.expr is not None
            yield [exp.Star()], compiler.compile(step.expr)
        elif step.kind == "select":
            names = list(step.columns)
            yield [column(c) for c in names], None
        else:
            level = {s.name: _derived(compiler, s) for s in group}
            kept = [c for c in names if c not in level]
            names = kept + list(level)
            derived = [exp.alias_(v, name, quoted=True, copy=False) for name, v in level.items()]
            yield [*(column(c) for c in kept), *derived], None


def _step_groups(steps: Sequence[Step]) -> list[list[Step]]:
    """``steps`` cut into levels: a run of derived columns none of which reads or redefines
    another of the run, or a single filter or select."""
    groups: list[list[Step]] = []
    names: set[str] = set()  # the columns the open run of derived columns defines
    for step in steps:
        if step.kind != "derive":
            groups.append([step])
            names = set()
            continue
        assert step.expr is not None
        if not names or step.name in names or columns_of(step.expr) & names:
            groups.append([])
            names = set()
        groups[-1].append(step)
        names.add(step.name)
    return groups


def _derived(compiler: _ExprCompiler, step: Step) -> exp.Expr:
    """Derived column ``step.name``'s value; the compiler then knows its kind (a number when
    that cannot be inferred) and that it is no float column of the source."""
    assert step.expr is not None
    value = compiler.compile(step.expr)
    kind = compiler.kind(step.expr)
    compiler.schema[step.name] = kind if kind is not None else "numeric"
    compiler.float_columns.discard(step.name)
    return value


def build_query(
    plan: BoundedPlan,
    source: exp.Expr,
    source_columns: Sequence[str],
    schema: Mapping[str, ColumnKind],
    float_columns: set[str],
    dialect: Dialect,
    conversions: Mapping[str, ColumnKind] | None = None,
    candidates: exp.Expr | None = None,
    integer_columns: set[str] | None = None,
) -> exp.Select:
    """The whole plan as one SELECT with CTEs over ``source`` (a table or subquery).

    ``schema`` holds every column's kind; ``conversions`` the columns whose stored values must
    first be converted to their (declared) kind. The result's columns are
    ``plan.result_columns``.

    ``candidates``, when given, is a predicate on the unit column ``"__u"`` that holds for every
    unit that exceeds a bound (a superset, e.g. from :mod:`dpkit.analytics._engines._heavy`):
    the exact per-unit check then reads only those units' rows, and ``FALSE`` (no candidate)
    leaves out the heavy side altogether. The result is the same as without it.

    ``integer_columns``: source columns stored as integers (no NaN, no ``-0.0``, no fraction),
    so a numeric key among them needs neither the ``-0.0`` nor the integrality test.

    The stages, one function each, in the order of the plan's semantics
    (:mod:`dpkit.analytics._engines._base`): ``__s0`` the source (:func:`source_select`),
    ``__s1``... the steps (:func:`step_levels`), ``__pre`` the clamped values
    (:func:`_pre_select`), ``__base`` the rows that take part as grid integers
    (:func:`_base_ctes`), ``__heavy`` the units over a bound (:func:`_heavy_units`), ``__total``
    every row per group, ``__h0``... the heavy units' rows hashed and cut to the bounds
    (:func:`_heavy_rows`, :func:`_bounding_cuts`), then the total corrected by the heavy
    units' rows (:func:`_corrected`) and summed per group (:func:`_finish`).
    """
    conversions = dict(conversions or {})
    compiler = expr_compiler(schema, float_columns, conversions, dialect)
    derived = {step.name for step in plan.steps if step.kind == "derive"}
    integers = set(integer_columns or ()) - set(conversions) - derived
    ctes: list[Cte] = [("__s0", source_select(source, source_columns, conversions, dialect))]
    for expressions, where in step_levels(plan.steps, compiler, source_columns):
        node = _select(*expressions).from_(exp.to_table(ctes[-1][0]), copy=False)
        ctes.append((f"__s{len(ctes)}", node if where is None else node.where(where, copy=False)))
    key_kinds = [compiler.schema.get(k) for k in plan.keys]
    rows = exp.to_table(ctes[-1][0])
    # stored as integers or decimals (never NaN) and read as stored: their clamps skip the test
    # (DuckDB, whose engine knows every source's float columns before building a query)
    nan_free = set(source_columns) - set(float_columns) - set(conversions) - derived
    if dialect != "duckdb":
        nan_free = set()
    ctes.append(("__pre", _pre_select(plan, compiler, key_kinds, integers, rows, nan_free)))
    light = isinstance(candidates, exp.Boolean) and not candidates.this
    ctes += _base_ctes(plan, key_kinds, integers, dialect, keys_by_row=not light)
    keys = [column(f"__k{i}") for i in range(len(plan.keys))]
    group = keys + ([column("__b")] if plan.bins is not None else [])
    heavy = _heavy_units(plan, keys, candidates)
    total = _per_group(plan, group, "__base", dialect)
    if light:
        # no unit can exceed a bound: every row is kept, the total is the result. Its groups
        # are independent, so the public key set is applied to the groups rather than to every
        # row: the same groups with the same sums, for one test per group instead of per row
        # (TPC-H Q1: the per-row test of two text keys was 12 % of its time)
        ctes += [*heavy[:-1], ("__total", _public_groups(plan, total, key_kinds, integers))]
        return _finish(plan, ctes, group, _select("*").from_(exp.to_table("__total"), copy=False))
    ctes += [*heavy, ("__total", total), ("__h0", _heavy_rows(plan, keys))]
    ctes += _bounding_cuts(plan, keys)
    ctes.append(("__heavy_kept", _per_group(plan, group, ctes[-1][0], dialect)))
    ctes.append(("__heavy_all", _per_group(plan, group, "__h0", dialect)))
    return _finish(plan, ctes, group, _corrected(plan, group))


def _pre_select(
    plan: BoundedPlan,
    compiler: _ExprCompiler,
    key_kinds: Sequence[ColumnKind | None],
    integers: set[str],
    rows: exp.Expr,
    nan_free: set[str] | None = None,
) -> exp.Select:
    """``__pre``, per row of ``rows`` (the steps' result): the unit ``__u``, the keys ``__k<i>``
    as engines group by them (:func:`_key_value`), each value clamped and scaled
    (:func:`_clamped_scaled`, ``__a<j>``) and the declared bin ``__b`` (:func:`_edge_bin`).

    Invariant: every ``__a<j>`` is NULL or lies in ``[lower, upper] · 2^-exponent`` of its
    value spec, whatever the row holds (NaN and NULL are NULL)."""
    pre: list[exp.Expr] = [exp.alias_(column(plan.unit), "__u", quoted=True)]
    pre += [
        exp.alias_(
            compiler.compile(Col(k)) if k in integers else _key_value(compiler, k, kind),
            f"__k{i}",
            quoted=True,
        )
        for i, (k, kind) in enumerate(zip(plan.keys, key_kinds, strict=True))
    ]
    for j, spec in enumerate(plan.values):
        clean = spec.column in (nan_free or ())
        pre.append(exp.alias_(_clamped_scaled(spec, clean), f"__a{j}", quoted=True))
    if plan.bins is not None and plan.bins.kind == "edges":
        pre.append(exp.alias_(_edge_bin(plan.bins), "__b", quoted=True))
    return _select(*pre).from_(rows, copy=False)


def _clamped_scaled(spec: ValueSpec, nan_free: bool = False) -> exp.Expr:
    """``clamp(v, lower, upper) · 2^-exponent`` of column ``spec.column`` as a DOUBLE (NaN and
    NULL give NULL); the power of two makes the scaling exact. ``nan_free``: the column is
    stored as integers or decimals and never NaN, so the test for NaN is left out (a quarter
    of TPC-H Q1's time, which clamps seven values per row)."""
    d = _as_double(column(spec.column))
    clamped = exp.Case()
    if not nan_free:
        clamped = clamped.when(exp.IsNan(this=d), exp.Null(), copy=False)
    clamped = (
        clamped.when(exp.LT(this=d, expression=double(spec.lower)), double(spec.lower), copy=False)
        .when(exp.GT(this=d, expression=double(spec.upper)), double(spec.upper), copy=False)
        .else_(d, copy=False)
    )
    return exp.Mul(
        this=exp.Paren(this=clamped),
        expression=exp.cast(exp.Literal.string(power_of_two_text(-spec.exponent)), "DOUBLE"),
    )


def _edge_bin(bins: BinSpec) -> exp.Expr:
    """The index ``b`` of the declared bin ``[edges[b], edges[b + 1])`` (the last one closed)
    that holds column ``bins.column``; NULL for NaN, NULL and values outside every bin."""
    d = _as_double(column(bins.column))
    edges = bins.edges
    case = (
        exp.Case()
        .when(exp.IsNan(this=d), exp.Null(), copy=False)
        .when(exp.LT(this=d, expression=double(edges[0])), exp.Null(), copy=False)
    )
    for b in range(1, len(edges) - 1):
        case = case.when(
            exp.LT(this=d, expression=double(edges[b])), exp.Literal.number(b - 1), copy=False
        )
    return case.when(
        exp.LTE(this=d, expression=double(edges[-1])),
        exp.Literal.number(len(edges) - 2),
        copy=False,
    ).else_(exp.Null(), copy=False)


def _base_ctes(
    plan: BoundedPlan,
    key_kinds: Sequence[ColumnKind | None],
    integers: set[str],
    dialect: Dialect = "duckdb",
    keys_by_row: bool = True,
) -> list[Cte]:
    """``__base0`` and ``__base``: the rows that take part, with their grid integers.

    ``__base0``: per row of ``__pre``, each scaled value rounded half up to its grid integer
    (:func:`_grid_integer`; ``__v<j>``, or ``__r<j>`` when it is moved into allowed ranges
    next) and the bin ``__b``; with a key set of several columns, joined with its rows.
    ``__base``: the rows whose unit is not NULL, whose keys are among the public key set (one
    column: a filter) and that fall in a bin; ``__v<j>`` is ``__r<j>`` moved to the nearest
    integer of the allowed ranges (:func:`_project`). Not ``keys_by_row``: the key set is left
    to the caller, who applies it to the groups (:func:`_public_groups`).

    Invariant: each row of ``__base`` has a unit, public keys (if declared) and a bin (if
    binned), and every ``__v<j>`` is NULL or an integer within the grid image of ``[lower,
    upper]`` (and of the allowed ranges): what a row adds to any output is bounded."""
    base_cols: list[exp.Expr] = [column("__u")]
    base_cols += [column(f"__k{i}") for i in range(len(plan.keys))]
    for j, spec in enumerate(plan.values):
        name = f"__r{j}" if spec.allowed else f"__v{j}"
        grid = _grid_integer(column(f"__a{j}"), dialect == "duckdb" and spec.lower >= 0)
        base_cols.append(exp.alias_(grid, name, quoted=True))
    if plan.bins is not None:
        edges = plan.bins.kind == "edges"
        binned = plan.values[plan.bins.value] if not edges else None
        value = (
            column("__b")
            if binned is None
            else _grid_integer(
                column(f"__a{plan.bins.value}"), dialect == "duckdb" and binned.lower >= 0
            )
        )
        base_cols.append(exp.alias_(value, "__b", quoted=True))
    conditions: list[exp.Expr] = [exp.Not(this=exp.Is(this=column("__u"), expression=exp.Null()))]
    base = _select(*base_cols).from_(exp.to_table("__pre"), copy=False)
    tests = _key_tests(plan, key_kinds, integers) if keys_by_row else None
    if tests is not None:
        conditions += tests
    elif keys_by_row and plan.key_set is not None:
        values, on = _key_set_join(plan.key_set.rows, key_kinds, "__pre")
        base = base.join(values, on=on, join_type="INNER", copy=False)
    if plan.bins is not None:
        conditions.append(exp.Not(this=exp.Is(this=column("__b"), expression=exp.Null())))
    projected = [
        exp.alias_(_project(column(f"__r{j}"), spec.allowed), f"__v{j}", quoted=True)
        for j, spec in enumerate(plan.values)
        if spec.allowed
    ]
    kept = _select("*", *projected).from_(exp.to_table("__base0"), copy=False)
    return [("__base0", base), ("__base", kept.where(_all_of(conditions), copy=False))]


def _key_tests(
    plan: BoundedPlan, key_kinds: Sequence[ColumnKind | None], integers: set[str]
) -> list[exp.Expr] | None:
    """The public key set as tests on the keys ``__k<i>`` (one per key), or None when there is
    no key set or it can only be joined (:func:`_key_set_join`): one key column, or every
    combination of several columns' values, where each key in its column's values keeps the
    same rows as the join, which costs a hash join per row (TPC-H Q1: 20 % of its time)."""
    if plan.key_set is None:
        return None
    if len(plan.keys) == 1:
        wanted = [r[0] for r in plan.key_set.rows]
        return [_key_filter(column("__k0"), wanted, key_kinds[0], plan.keys[0] in integers)]
    columns = _product_columns(plan.key_set.rows)
    if columns is None:
        return None
    return [
        _key_filter(column(f"__k{i}"), wanted, key_kinds[i], plan.keys[i] in integers)
        for i, wanted in enumerate(columns)
    ]


def _public_groups(
    plan: BoundedPlan,
    total: exp.Select,
    key_kinds: Sequence[ColumnKind | None],
    integers: set[str],
) -> exp.Select:
    """``total`` (per-group aggregates of rows not yet cut to the public key set) restricted to
    the groups whose keys are in the key set: the same tests as on rows, since a group's keys
    are its rows' keys. The tests are kept above the grouping: as a plain HAVING, DuckDB and
    Spark push tests on group keys back below it, onto every row, so each is joined by OR to
    ``COUNT(*) < 0``, false for every group but an aggregate, which no optimizer moves below
    the grouping."""
    if plan.key_set is None:
        return total
    tests = _key_tests(plan, key_kinds, integers)
    if tests is not None:
        never = exp.LT(this=exp.Count(this=exp.Star()), expression=literal(0))
        kept = exp.Or(this=exp.Paren(this=_all_of(tests)), expression=never)
        return total.having(kept, copy=False)
    values, on = _key_set_join(plan.key_set.rows, key_kinds, "__groups")
    groups = total.subquery("__groups", copy=False)
    return (
        _select(exp.Column(this=exp.Star(), table=ident("__groups")))
        .from_(groups)
        .join(values, on=on, join_type="INNER", copy=False)
    )


def _product_columns(rows: Sequence[Sequence[Any]]) -> list[list[Any]] | None:
    """Each column's distinct values, when ``rows`` are exactly every combination of them (a
    key set given per column); None otherwise. Values are told apart with their type (``1``,
    ``1.0`` and ``True`` are three values here), so a set that only looks like a product is
    never taken for one."""
    if not rows:
        return None
    width = len(rows[0])
    seen: list[dict[tuple[type, Any], Any]] = [{} for _ in range(width)]
    tuples = set()
    for row in rows:
        if len(row) != width:
            return None
        marked = tuple((type(v), v) for v in row)
        if any(v != v for v in row):  # NaN: not its own equal, no set holds it reliably
            return None
        tuples.add(marked)
        for i, item in enumerate(marked):
            seen[i].setdefault(item, row[i])
    size = 1
    for column in seen:
        size *= len(column)
    if size != len(tuples) or size != len(rows):
        return None
    return [list(column.values()) for column in seen]


def _key_set_join(
    rows: Sequence[Sequence[Any]], key_kinds: Sequence[ColumnKind | None], table: str
) -> tuple[exp.Values, exp.Expr]:
    """The public key set of several columns (its ``rows``) as ``VALUES (...) AS __keys(__x0,
    ...)`` and the join condition ``table.__k<i> = __keys.__x<i>`` for every key: an inner join
    keeps the rows whose keys are a declared tuple (a NULL key matches nothing)."""
    tuples = [
        exp.Tuple(expressions=[key_literal(v, k) for v, k in zip(row, key_kinds, strict=True)])
        for row in rows
    ]
    values = exp.Values(
        expressions=tuples,
        alias=exp.TableAlias(
            this=ident("__keys"), columns=[ident(f"__x{i}") for i in range(len(key_kinds))]
        ),
    )
    on = [
        exp.EQ(this=column(f"__k{i}", table), expression=column(f"__x{i}", "__keys"))
        for i in range(len(key_kinds))
    ]
    return values, _all_of(on)


def _all_of(conditions: Sequence[exp.Expr]) -> exp.Expr:
    """``c0 AND c1 AND ...`` (left-nested)."""
    out = conditions[0]
    for cond in conditions[1:]:
        out = exp.And(this=out, expression=cond)
    return out


def _any_of(conditions: Sequence[exp.Expr]) -> exp.Expr:
    """``c0 OR c1 OR ...`` (left-nested)."""
    out = conditions[0]
    for cond in conditions[1:]:
        out = exp.Or(this=out, expression=cond)
    return out


def _heavy_units(
    plan: BoundedPlan, keys: Sequence[exp.Expr], candidates: exp.Expr | None
) -> list[Cte]:
    """``__heavy``: the units of ``__base`` that exceed a bound — more than ``max_rows`` rows,
    rows in more than ``max_groups`` groups, or more than ``max_rows_per_group`` rows in one
    group (counted per unit and group in ``__ug`` when either of the last two is set). Only
    the rows of ``candidates`` units are read, when given (a superset of the heavy units).

    Invariant: a unit not in ``__heavy`` is within every bound, so all of its rows are kept
    as they are; only the heavy units' rows are cut (:func:`_bounding_cuts`)."""
    k, m, c = plan.max_rows, plan.max_groups, plan.max_rows_per_group
    checked: exp.Expr = exp.to_table("__base")
    if candidates is not None:
        checked = (
            _select("*")
            .from_(checked, copy=False)
            .where(candidates, copy=False)
            .subquery("__checked")
        )
    if m is None and c is None:
        heavy = (
            _select(column("__u"))
            .from_(checked, copy=False)
            .group_by(column("__u"), copy=False)
            .having(exp.GT(this=exp.Count(this=exp.Star()), expression=literal(k)), copy=False)
        )
        return [("__heavy", heavy)]
    ug = _select(column("__u"), *keys, exp.alias_(exp.Count(this=exp.Star()), "__n", quoted=True))
    ug = ug.from_(checked, copy=False).group_by(column("__u"), *keys, copy=False)
    tests: list[exp.Expr] = []
    if m is not None:
        tests.append(exp.GT(this=exp.Count(this=exp.Star()), expression=literal(m)))
    if c is not None:
        tests.append(exp.GT(this=exp.Max(this=column("__n")), expression=literal(c)))
    if k is not None:
        tests.append(exp.GT(this=exp.Sum(this=column("__n")), expression=literal(k)))
    heavy = (
        _select(column("__u"))
        .from_(exp.to_table("__ug"), copy=False)
        .group_by(column("__u"), copy=False)
        .having(_any_of(tests), copy=False)
    )
    return [("__ug", ug), ("__heavy", heavy)]


def _per_group(
    plan: BoundedPlan, group: Sequence[exp.Expr], table: str, dialect: Dialect
) -> exp.Select:
    """The exact per-group aggregates (:func:`_aggregates`: ``__n`` and ``__o<i>``) of the rows
    of ``table``; one row in all when there is no group."""
    node = _select(*group, *_aggregates(plan, dialect)).from_(exp.to_table(table), copy=False)
    return node.group_by(*group, copy=False) if group else node


def _heavy_rows(plan: BoundedPlan, keys: Sequence[exp.Expr]) -> exp.Select:
    """``__h0``: the rows of ``__base`` whose unit is in ``__heavy``, with ``__h``, the md5 of
    the salted row text (unit, keys, grid integers and bin), and with ``max_groups`` ``__gh``,
    the md5 of the salted group text (unit and keys): the orders of the bounding
    (:mod:`dpkit.analytics._engines._base`, step 3).

    Invariant: a row's hashes depend on the secret salt and that row's own values only, so
    which rows a unit keeps depends on its own rows alone; equal texts mean rows that
    contribute identically, so ties do not matter."""
    salt = exp.Literal.string(str(plan.salt))
    unit_part = _text_part(column("__u"))
    key_parts = [_text_part(key) for key in keys]
    value_parts = [_text_part(column(f"__v{j}")) for j in range(len(plan.values))]
    if plan.bins is not None:
        value_parts.append(_text_part(column("__b")))
    row_hash = _md5_of([salt, exp.Literal.string("r"), unit_part, *key_parts, *value_parts])
    hrows_cols: list[exp.Expr] = [exp.Star(), exp.alias_(row_hash, "__h", quoted=True)]
    if plan.max_groups is not None:
        group_hash = _md5_of([salt, exp.Literal.string("g"), unit_part, *key_parts])
        hrows_cols.append(exp.alias_(group_hash, "__gh", quoted=True))
    return (
        _select(*hrows_cols)
        .from_(exp.to_table("__base"), copy=False)
        .where(_in_heavy(negate=False), copy=False)
    )


def _bounding_cuts(plan: BoundedPlan, keys: Sequence[exp.Expr]) -> list[Cte]:
    """The heavy units' rows (``__h0``) cut to the bounds, each cut a ranked CTE and its filter
    (:func:`_cut`), in the order of the plan's semantics: ``__h1f`` keeps each unit's
    ``max_groups`` groups of smallest group hash, ``__h2f`` in each group its
    ``max_rows_per_group`` rows of smallest row hash, ``__h3f`` its ``max_rows`` rows of
    smallest row hash overall; a bound that is not set has no cut.

    Invariant: after the last cut, each unit has rows in at most ``max_groups`` groups, at most
    ``max_rows_per_group`` rows in each and at most ``max_rows`` rows in all."""
    k, m, c = plan.max_rows, plan.max_groups, plan.max_rows_per_group
    cuts: list[tuple[str, exp.Expr, str, int]] = []
    if m is not None:
        # ties of the group hash (an md5 collision) are broken by the key values: distinct
        # groups never share a rank, so a unit keeps at most max_groups groups
        rank: exp.Expr = exp.Window(
            this=exp.DenseRank(),
            partition_by=[column("__u")],
            order=exp.Order(
                expressions=[exp.Ordered(this=column("__gh"))]
                + [exp.Ordered(this=key.copy()) for key in keys]
            ),
        )
        cuts.append(("__h1", rank, "__gr", m))
    if c is not None:
        rank = _row_number(exp.RowNumber, [column("__u"), *keys], column("__h"))
        cuts.append(("__h2", rank, "__rc", c))
    if k is not None:
        rank = _row_number(exp.RowNumber, [column("__u")], column("__h"))
        cuts.append(("__h3", rank, "__rk", k))
    ctes: list[Cte] = []
    current = "__h0"
    for name, rank, alias, limit in cuts:
        ctes += _cut(current, name, rank, alias, limit)
        current = ctes[-1][0]
    return ctes


def _cut(source: str, name: str, rank: exp.Expr, alias: str, limit: int) -> list[Cte]:
    """``name``: the rows of ``source`` with their ``rank`` as ``alias``; ``name`` + ``f``: the
    rows whose rank is at most ``limit`` (so at most ``limit`` rows, or groups for a dense
    rank, per partition of the rank)."""
    ranked = _select("*", exp.alias_(rank, alias, quoted=True)).from_(
        exp.to_table(source), copy=False
    )
    kept = (
        _select("*")
        .from_(exp.to_table(name), copy=False)
        .where(exp.LTE(this=column(alias), expression=literal(limit)), copy=False)
    )
    return [(name, ranked), (name + "f", kept)]


def _corrected(plan: BoundedPlan, group: Sequence[exp.Expr]) -> exp.Union:
    """The parts whose per-group sums are the bounded result: ``__total`` (every row of
    ``__base``), minus ``__heavy_all`` (every row of the heavy units), plus ``__heavy_kept``
    (the heavy units' rows the cuts kept). Every aggregate is an exact integer sum and the
    heavy and light units are disjoint, so the correction is exact (distinct-unit counts
    included): the sums are those of the light units' rows and the kept rows."""
    inner_outputs = [f"__o{i}" for i in range(len(plan.outputs))]
    negated = _select(
        *group,
        *[
            exp.alias_(exp.Neg(this=column(name)), name, quoted=True)
            for name in ["__n", *inner_outputs]
        ],
    )
    negated = negated.from_(exp.to_table("__heavy_all"), copy=False)
    return exp.union(
        exp.union(_select("*").from_(exp.to_table("__total"), copy=False), negated, distinct=False),
        _select("*").from_(exp.to_table("__heavy_kept"), copy=False),
        distinct=False,
    )


def _finish(
    plan: BoundedPlan,
    ctes: list[tuple[str, exp.Expr]],
    group: Sequence[exp.Expr],
    parts: exp.Select | exp.Union,
) -> exp.Select:
    """The final SELECT: the per-group sums of ``parts`` (total, minus the heavy units' rows,
    plus those kept), with the shared relations inlined and the rest as CTEs."""
    inner_outputs = [f"__o{i}" for i in range(len(plan.outputs))]
    # reserved result names, never a user's column name (see BoundedPlan.group_columns)
    result_names = iter(plan.result_columns)
    final_cols: list[exp.Expr] = [
        exp.alias_(column(f"__k{i}"), next(result_names), quoted=True)
        for i in range(len(plan.keys))
    ]
    if plan.bins is not None:
        final_cols.append(exp.alias_(column("__b"), next(result_names), quoted=True))
    final_cols.extend(
        exp.alias_(exp.Sum(this=column(name)), next(result_names), quoted=True)
        for name in inner_outputs
    )
    final: exp.Select = _select(*final_cols).from_(parts.subquery("__parts"), copy=False)
    if group:
        # a group is present when it keeps at least one row (as in the reference engine)
        final = final.group_by(*group, copy=False).having(
            exp.GT(this=exp.Sum(this=column("__n")), expression=literal(0)), copy=False
        )
    # The relation every branch reads (steps, scaled values, the bounded rows) is inlined as a
    # subquery rather than a CTE: DuckDB materialises a CTE read by several branches (a full
    # copy of the table: +250 MB and +30% time at 10M rows); inlined, each branch re-scans the
    # source instead, which costs far less.
    shared = [name for name, _ in ctes[: [n for n, _ in ctes].index("__base") + 1]]
    # The inlining below edits the trees in place. The builders above share some nodes between
    # the later trees (the FROM of __total and __h0), so those are copied first; the shared
    # relations' own trees are built fresh (and hold most of the nodes: no copy).
    bodies = {name: tree if name in shared else tree.copy() for name, tree in ctes}
    final = final.copy()
    # each shared relation is inlined once its own references are (in order: a relation reads
    # earlier ones only), and copied only where it is read more than once, so the cost is
    # linear in the size of the result (inlining one name at a time into every tree was
    # quadratic in the number of levels)
    trees = [*bodies.values(), final]
    uses = Counter(node.name for tree in trees for node in tree.find_all(exp.Table) if _plain(node))
    resolved: dict[str, exp.Expr] = {}
    for name in shared:
        resolved[name] = _inline(bodies.pop(name), resolved, uses)
    bodies = {name: _inline(tree, resolved, uses) for name, tree in bodies.items()}
    final = _inline(final, resolved, uses)
    for name, cte in bodies.items():
        final = final.with_(ident(name), as_=cte, copy=False)
    return final


def _key_filter(
    key: exp.Expr, values: Sequence[Any], kind: ColumnKind | None, integral: bool = False
) -> exp.Expr:
    """``key IN (values)``, the values as literals of the key's kind (:func:`key_literal`); for a
    numeric column and a run of consecutive integers lo..hi, the same test as ``key BETWEEN lo
    AND hi AND key = FLOOR(key)``, which engines evaluate much faster than a long IN list
    (DuckDB plans that as a hash join per scan); for an ``integral`` (integer) column, just
    ``key BETWEEN lo AND hi`` (the FLOOR test, which casts every key to a double, was 40 % of
    the light query's time on DuckDB)."""
    whole = [int(v) for v in values if isinstance(v, int | np.integer) and not isinstance(v, bool)]
    numeric = kind == "numeric"
    if numeric and len(whole) == len(values) >= 2 and max(whole) - min(whole) + 1 == len(whole):
        between = exp.Between(this=key.copy(), low=literal(min(whole)), high=literal(max(whole)))
        if integral:
            return exp.Paren(this=between)
        whole_key = exp.EQ(this=key.copy(), expression=exp.Floor(this=key.copy()))
        return exp.Paren(this=exp.And(this=between, expression=whole_key))
    return exp.In(this=key, expressions=[key_literal(v, kind) for v in values])


def _key_value(compiler: _ExprCompiler, name: str, kind: ColumnKind | None) -> exp.Expr:
    """A group key as engines group by it: NaN is NULL, and -0.0 is 0.0 (one canonical group
    for values that compare equal, as in the reference engine)."""
    value = compiler.compile(Col(name))
    if kind != "numeric":
        return value
    is_zero = exp.EQ(this=value.copy(), expression=exp.Literal.number(0))
    return exp.Case().when(is_zero, exp.Literal.number(0), copy=False).else_(value, copy=False)


def _plain(node: exp.Expr) -> bool:
    """Whether ``node`` is a reference to a relation of this query by its bare name."""
    return (
        isinstance(node, exp.Table)
        and isinstance(node.this, exp.Identifier)
        and not node.args.get("db")
    )


def _inline(tree: exp.Expr, bodies: Mapping[str, exp.Expr], uses: Counter[str]) -> Any:
    """``tree`` (modified in place) with every reference to a table ``name`` of ``bodies``
    replaced by ``(body) AS name``; the body itself is used where ``name`` is read once, a
    copy where it is read several times."""

    def replace(node: exp.Expr) -> exp.Expr:
        if _plain(node) and node.name in bodies:
            body = bodies[node.name]
            return exp.Subquery(
                this=body.copy() if uses[node.name] > 1 else body,
                alias=exp.TableAlias(this=ident(node.name)),
            )
        return node

    return tree.transform(replace, copy=False)


def _project(value: exp.Expr, allowed: Sequence[tuple[int, int]]) -> exp.Expr:
    """The nearest integer of the union of ``allowed`` ranges to ``value`` (ties to the lower);
    NULL stays NULL. One CASE over the sorted ranges, integer arithmetic only."""

    def v() -> exp.Expr:
        return value.copy()

    first_lo = allowed[0][0]
    case = (
        exp.Case()
        .when(exp.Is(this=v(), expression=exp.Null()), exp.Null(), copy=False)
        .when(exp.LT(this=v(), expression=literal(first_lo)), literal(first_lo), copy=False)
    )
    for i, (_, hi) in enumerate(allowed):
        case = case.when(exp.LTE(this=v(), expression=literal(hi)), v(), copy=False)
        if i + 1 < len(allowed):
            nxt = allowed[i + 1][0]
            closer_down = exp.LTE(
                this=exp.Sub(this=v(), expression=literal(hi)),
                expression=exp.Sub(this=literal(nxt), expression=v()),
            )
            nearest = (
                exp.Case()
                .when(closer_down, literal(hi), copy=False)
                .else_(literal(nxt), copy=False)
            )
            case = case.when(exp.LT(this=v(), expression=literal(nxt)), nearest, copy=False)
    return case.else_(literal(allowed[-1][1]), copy=False)


def _grid_integer(scaled: exp.Expr, rounds: bool = False) -> exp.Expr:
    """``scaled`` (a clamped, scaled value) rounded half up to an integer, as a BIGINT: a value's
    grid integer ``__v``, and a grid bin (the same integer).

    ``rounds``: ``scaled`` is never negative (its clamp's lower bound is not), and the engine is
    DuckDB, whose ``ROUND(DOUBLE)`` is C's ``round``: exact, halves away from zero, which for a
    value that is not negative is half up. ``CAST(ROUND(x) AS BIGINT)`` then gives the same
    integer as ``FLOOR`` and the test of the fraction below, with a quarter less work per value
    (TPC-H Q1 sums seven values per row). A cast alone would not do: DuckDB casts a DOUBLE to
    an integer half to even (``CAST(2.5 AS BIGINT)`` is 2). The engines' agreement on halves
    is tested (tests/engines)."""
    if rounds:
        return exp.cast(exp.Round(this=scaled), "BIGINT")
    floor = exp.Floor(this=scaled)
    return exp.Add(
        this=exp.cast(floor, "BIGINT"),
        expression=exp.Case()
        .when(
            exp.GTE(this=exp.Sub(this=scaled, expression=floor), expression=double(0.5)),
            exp.Literal.number(1),
            copy=False,
        )
        .else_(exp.Literal.number(0), copy=False),
    )
