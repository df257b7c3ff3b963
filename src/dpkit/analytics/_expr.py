"""A small, safe expression language for filters and derived columns.

Expressions are frozen trees built with :func:`col` and :func:`lit` and Python operators::

    (col("age") >= 18) & col("dept").is_in(["R&D", "Sales"])
    (col("salary") * 12).alias("yearly")

Only this subset exists, so every engine can evaluate it identically:

* column references and literals (``None``, ``bool``, ``int``, ``float``, ``str``);
* arithmetic ``+ - * /`` and unary ``-``, always in double precision (``x / 0`` is NULL);
* comparisons ``< <= > >= == !=`` with SQL's three-valued logic (a comparison with NULL is NULL,
  and a filter keeps only rows where the predicate is TRUE);
* boolean ``&`` (and), ``|`` (or), ``~`` (not), with Kleene logic;
* ``is_null()``, ``is_not_null()``, ``is_in([...])``, ``between(a, b)``, ``fill_null(v)``,
  ``abs()``, ``floor()``, ``ceil()``, ``lower()``, ``upper()``;
* ``like(pattern)`` / ``ilike(pattern)`` on text: SQL ``LIKE``, ``%`` any run of characters
  and ``_`` exactly one, everything else (backslash included: there is no escape character)
  itself, matched against the whole text, case-sensitively (``ilike``: both sides lower-cased);
* ``year()``, ``month()``, ``day()`` of a date or timestamp (a number; NULL stays NULL);
* :func:`when` ``(condition, value).when(...).otherwise(default)``: SQL's searched ``CASE``
  (the first condition that is TRUE picks its value; none, or only NULL ones: the default, NULL
  when none is given).

NaN in a float column is read as NULL by every engine. Identifiers and literals are never pasted
into SQL text: the SQL engines turn these trees into sqlglot trees, which quote them.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import fractions
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np

from dpkit._format import number
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

__all__ = [
    "MAX_EXPRESSION_DEPTH",
    "MAX_EXPRESSION_SIZE",
    "BinaryOp",
    "Case",
    "Col",
    "ColumnKind",
    "Expr",
    "IsIn",
    "Lit",
    "Structural",
    "Unary",
    "UnaryOp",
    "check_expression",
    "check_unicode",
    "children",
    "col",
    "columns_of",
    "infer_kind",
    "lit",
    "numeric_columns",
    "reads_as_number",
    "structural_key",
    "text_number_orderings",
    "when",
]

ColumnKind: TypeAlias = Literal["numeric", "string", "bool", "temporal", "other"]
BinaryOp: TypeAlias = Literal[
    "+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!=", "and", "or", "coalesce", "like"
]
UnaryOp: TypeAlias = Literal[
    "not",
    "neg",
    "is_null",
    "is_not_null",
    "abs",
    "floor",
    "ceil",
    "lower",
    "upper",
    "as_number",
    "year",
    "month",
    "day",
]
_PARTS = frozenset({"year", "month", "day"})
"""The parts of a date or timestamp :meth:`Expr.year` / ``month`` / ``day`` extract."""
LiteralValue: TypeAlias = bool | int | float | str | _dt.datetime | None

_ARITHMETIC = frozenset({"+", "-", "*", "/"})
_COMPARISON = frozenset({"<", "<=", ">", ">=", "==", "!="})
_ORDERING = frozenset({"<", "<=", ">", ">="})
_FLOAT_MAX = int(sys.float_info.max)
_NUMBER_TEXT = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*")
"""A text literal that reads as a (finite, decimal) number: ``'1000'``, ``' -2.5e3 '``."""
_BOOLEAN = frozenset({"and", "or"})


class Expr:
    """Base of expression nodes. Operators build new nodes; nothing is evaluated here.

    ``==`` and ``!=`` build comparisons (as in pandas and Polars), so use :meth:`same_as` to
    compare two expression trees.
    """

    __slots__ = ()

    # -- arithmetic
    def __add__(self, other: object) -> Expr:
        return Binary("+", self, _wrap(other))

    def __radd__(self, other: object) -> Expr:
        return Binary("+", _wrap(other), self)

    def __sub__(self, other: object) -> Expr:
        return Binary("-", self, _wrap(other))

    def __rsub__(self, other: object) -> Expr:
        return Binary("-", _wrap(other), self)

    def __mul__(self, other: object) -> Expr:
        return Binary("*", self, _wrap(other))

    def __rmul__(self, other: object) -> Expr:
        return Binary("*", _wrap(other), self)

    def __truediv__(self, other: object) -> Expr:
        return Binary("/", self, _wrap(other))

    def __rtruediv__(self, other: object) -> Expr:
        return Binary("/", _wrap(other), self)

    def __neg__(self) -> Expr:
        return Unary("neg", self)

    # -- comparisons (== and != build expressions, like pandas / Polars)
    def __lt__(self, other: object) -> Expr:
        return Binary("<", self, _wrap(other))

    def __le__(self, other: object) -> Expr:
        return Binary("<=", self, _wrap(other))

    def __gt__(self, other: object) -> Expr:
        return Binary(">", self, _wrap(other))

    def __ge__(self, other: object) -> Expr:
        return Binary(">=", self, _wrap(other))

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]  # builds a predicate
        return Binary("==", self, _wrap(other))

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]  # builds a predicate
        return Binary("!=", self, _wrap(other))

    def __hash__(self) -> int:
        return hash(self.key())

    # -- boolean
    def __and__(self, other: object) -> Expr:
        return Binary("and", self, _wrap(other))

    def __rand__(self, other: object) -> Expr:
        return Binary("and", _wrap(other), self)

    def __or__(self, other: object) -> Expr:
        return Binary("or", self, _wrap(other))

    def __ror__(self, other: object) -> Expr:
        return Binary("or", _wrap(other), self)

    def __invert__(self) -> Expr:
        return Unary("not", self)

    def __bool__(self) -> bool:
        raise UnsupportedQueryError(
            "an expression has no truth value: combine predicates with & | ~ (not and/or/not), "
            "and wrap comparisons in parentheses, e.g. (col('a') > 1) & (col('b') < 2)"
        )

    # -- methods
    def is_null(self) -> Expr:
        return Unary("is_null", self)

    def is_not_null(self) -> Expr:
        return Unary("is_not_null", self)

    def is_in(self, values: Iterable[LiteralValue]) -> Expr:
        checked = tuple(_check_literal(v) for v in values)
        if not checked:
            raise InvalidParameterError("values", values, "a non-empty list of literals")
        return IsIn(self, checked)

    def between(self, lower: object, upper: object) -> Expr:
        return (self >= lower) & (self <= upper)

    def fill_null(self, value: object) -> Expr:
        return Binary("coalesce", self, _wrap(value))

    def abs(self) -> Expr:
        return Unary("abs", self)

    def floor(self) -> Expr:
        return Unary("floor", self)

    def ceil(self) -> Expr:
        return Unary("ceil", self)

    def as_number(self) -> Expr:
        """A boolean as a number: true is 1, false is 0, NULL stays NULL."""
        return Unary("as_number", self)

    def lower(self) -> Expr:
        return Unary("lower", self)

    def upper(self) -> Expr:
        return Unary("upper", self)

    def like(self, pattern: str) -> Expr:
        """SQL ``LIKE``: ``%`` matches any run of characters, ``_`` exactly one, every other
        character itself (no escape character); the whole text must match; NULL is NULL."""
        if not isinstance(pattern, str):
            raise InvalidParameterError("pattern", pattern, "a text pattern such as 'PROMO%'")
        return Binary("like", self, Lit(check_unicode("pattern", pattern)))

    def ilike(self, pattern: str) -> Expr:
        """``like`` ignoring case: both sides lower-cased (:meth:`lower`)."""
        if not isinstance(pattern, str):
            raise InvalidParameterError("pattern", pattern, "a text pattern such as 'promo%'")
        return Unary("lower", self).like(pattern.lower())

    def year(self) -> Expr:
        """The year of a date or timestamp, as a number."""
        return Unary("year", self)

    def month(self) -> Expr:
        """The month (1 to 12) of a date or timestamp."""
        return Unary("month", self)

    def day(self) -> Expr:
        """The day of the month (1 to 31) of a date or timestamp."""
        return Unary("day", self)

    def key(self) -> tuple[Any, ...]:
        """A structural key: two trees are the same exactly when their keys are equal.

        Keys are nested tuples of strings, ints and bools (literal values tagged with their
        type, floats by their exact hex form), so comparing two keys is an exact ``bool``:
        ``lit(1)``, ``lit(1.0)`` and ``lit(True)`` are different trees, and so are ``lit(0.0)``
        and ``lit(-0.0)``.
        """
        raise NotImplementedError

    def same_as(self, other: Expr) -> bool:
        """Structural equality (``==`` builds a predicate instead)."""
        return self.key() == other.key()

    def render(self) -> str:
        """A readable text form, for plans and receipts."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.render()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Col(Expr):
    """A reference to a column by name."""

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError("column", self.name, "a non-empty string")
        check_unicode("column", self.name)

    def key(self) -> tuple[Any, ...]:
        return ("col", self.name)

    def render(self) -> str:
        return f"col({self.name!r})"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Lit(Expr):
    """A literal value."""

    value: LiteralValue

    def __post_init__(self) -> None:
        _check_literal(self.value)

    def key(self) -> tuple[Any, ...]:
        return ("lit", *_literal_key(self.value))

    def render(self) -> str:
        value = self.value
        if isinstance(value, int) and not isinstance(value, bool) and len(str(abs(value))) > 20:
            return number(value)  # readable in plans and messages, never 300 digits
        return repr(value)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Binary(Expr):
    """``left op right``."""

    op: BinaryOp
    left: Expr
    right: Expr

    def key(self) -> tuple[Any, ...]:
        return ("bin", self.op, self.left.key(), self.right.key())

    def render(self) -> str:
        if self.op == "coalesce":
            return f"{self.left.render()}.fill_null({self.right.render()})"
        if self.op == "like":
            return f"{self.left.render()}.like({self.right.render()})"
        symbol = {"and": "&", "or": "|"}.get(self.op, self.op)
        return f"({self.left.render()} {symbol} {self.right.render()})"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Unary(Expr):
    """``op(operand)``."""

    op: UnaryOp
    operand: Expr

    def key(self) -> tuple[Any, ...]:
        return ("un", self.op, self.operand.key())

    def render(self) -> str:
        if self.op == "not":
            return f"~{self.operand.render()}"
        if self.op == "neg":
            return f"-{self.operand.render()}"
        return f"{self.operand.render()}.{self.op}()"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IsIn(Expr):
    """``operand IN (values)`` (NULL operand: NULL)."""

    operand: Expr
    values: tuple[LiteralValue, ...]

    def key(self) -> tuple[Any, ...]:
        return ("in", self.operand.key(), tuple(_literal_key(v) for v in self.values))

    def render(self) -> str:
        values = ", ".join(Lit(v).render() for v in self.values)
        return f"{self.operand.render()}.is_in([{values}])"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Case(Expr):
    """``CASE WHEN condition THEN then ELSE default END``: ``then`` where ``condition`` is
    TRUE, else (FALSE or NULL) ``default``. Several WHENs nest in ``default``, which keeps
    SQL's first-TRUE-wins order. Build it with :func:`when`."""

    condition: Expr
    then: Expr
    default: Expr

    def key(self) -> tuple[Any, ...]:
        return ("case", self.condition.key(), self.then.key(), self.default.key())

    def when(self, condition: object, value: object) -> Case:
        """Another branch, tried when the earlier ones are not TRUE."""
        if isinstance(self.default, Lit) and self.default.value is None:
            return Case(self.condition, self.then, when(condition, value))
        if isinstance(self.default, Case):
            return Case(self.condition, self.then, self.default.when(condition, value))
        raise UnsupportedQueryError("add .when(...) branches before .otherwise(...)")

    def otherwise(self, value: object) -> Case:
        """The value when no condition is TRUE (NULL if never given)."""
        if isinstance(self.default, Lit) and self.default.value is None:
            return Case(self.condition, self.then, _wrap(value))
        if isinstance(self.default, Case):
            return Case(self.condition, self.then, self.default.otherwise(value))
        raise UnsupportedQueryError(".otherwise(...) is given once, last")

    def render(self) -> str:
        return (
            f"when({self.condition.render()}, {self.then.render()})"
            f".otherwise({self.default.render()})"
        )


def when(condition: object, value: object) -> Case:
    """``CASE WHEN condition THEN value``; chain ``.when(c, v)`` and ``.otherwise(v)``:

    >>> when(col("p_type").like("PROMO%"), col("x")).otherwise(0)
    when(col('p_type').like('PROMO%'), col('x')).otherwise(0)
    """
    return Case(_wrap(condition), _wrap(value), Lit(None))


def children(node: Expr) -> tuple[Expr, ...]:
    """The operands of ``node`` (none for a column or a literal)."""
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Unary | IsIn):
        return (node.operand,)
    if isinstance(node, Case):
        return (node.condition, node.then, node.default)
    return ()


def _literal_key(value: LiteralValue) -> tuple[str, Any]:
    """A literal as an exact, typed, hashable pair (floats by their hex form)."""
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, _dt.datetime):
        return ("datetime", value.isoformat())
    return (type(value).__name__, value)


def structural_key(obj: object) -> Any:
    """A canonical, hashable value describing ``obj`` exactly, whose ``==`` is a real ``bool``.

    Expressions, plans, queries and the dataclasses that hold them compare with ``==`` the
    way their fields do, but an expression's ``==`` *builds* a predicate; so a dict, a set, an
    ``lru_cache`` or an ``in`` test keyed by an expression-bearing object would ask a predicate
    for its truth value. Use this key instead (or inherit :class:`Structural`).

    The key is a nested tuple of strings, ints and bools: every value tagged with its type
    (``1``, ``1.0`` and ``True`` differ; floats by their exact hex form, so ``0.0`` and ``-0.0``
    differ), dataclasses by their qualified class name and compared fields, mappings and sets
    order-independently. An object of any other type raises :class:`TypeError` (a caller that
    caches should then not cache).
    """
    if obj is None:
        return None
    if isinstance(obj, Expr):
        return ("expr", obj.key())
    if isinstance(obj, bool | np.bool_):
        return ("bool", bool(obj))
    if isinstance(obj, int | np.integer):
        return ("int", int(obj))
    if isinstance(obj, float | np.floating):
        return ("float", float(obj).hex())
    if isinstance(obj, str):
        return ("str", obj)
    if isinstance(obj, bytes):
        return ("bytes", obj)
    if isinstance(obj, fractions.Fraction):
        return ("fraction", obj.numerator, obj.denominator)
    if isinstance(obj, decimal.Decimal):
        return ("decimal", str(obj))
    if isinstance(obj, _dt.datetime | _dt.date | _dt.time | _dt.timedelta):
        return (type(obj).__name__, str(obj), repr(obj))
    if isinstance(obj, enum.Enum):
        return ("enum", type(obj).__qualname__, obj.name)
    if isinstance(obj, np.datetime64 | np.timedelta64):
        return (type(obj).__name__, str(obj.dtype), str(obj))
    if isinstance(obj, tuple | list):
        return (type(obj).__name__, *(structural_key(v) for v in obj))
    if isinstance(obj, frozenset | set):
        return ("set", frozenset(structural_key(v) for v in obj))
    if isinstance(obj, Mapping):
        return ("map", frozenset((structural_key(k), structural_key(v)) for k, v in obj.items()))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        return (
            f"{cls.__module__}.{cls.__qualname__}",
            *(
                (f.name, structural_key(getattr(obj, f.name)))
                for f in dataclasses.fields(obj)
                if f.compare
            ),
        )
    raise TypeError(f"no structural key for a {type(obj).__name__}")


class Structural:
    """A mixin for (frozen, ``eq=False``) dataclasses that hold expressions: ``==`` and
    ``hash`` by :func:`structural_key`, so that they are real booleans and such objects work
    as dict keys, in sets and with ``in`` (a generated dataclass ``==`` would compare the
    expressions with ``==``, which builds a predicate that has no truth value)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return bool(structural_key(self) == structural_key(other))

    def __hash__(self) -> int:
        return hash(structural_key(self))


def col(name: str) -> Col:
    """A column of the table (or a derived column defined earlier)."""
    return Col(name)


def lit(value: LiteralValue) -> Lit:
    """A literal value."""
    return Lit(value)


def check_unicode(name: str, text: str) -> str:
    """Refuse a text that is not valid Unicode — a lone surrogate such as ``'\\ud800'``, which
    Python strings can hold but UTF-8 cannot — before anything is reserved: an engine (and the
    released table) would fail on it after the reservation (issue 21)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidParameterError(
            name,
            text,
            "valid Unicode text (no lone surrogates such as \\ud800, which UTF-8 cannot hold)",
        ) from None
    return text


def _check_literal(value: object) -> LiteralValue:
    if isinstance(value, str):
        return check_unicode("literal", value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX:
        # compared in double precision: both engines failed on it after the reservation
        raise InvalidParameterError("literal", value, "a number within ±1.8e308 (a double)")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, _dt.datetime):  # compared in UTC, as temporal keys are
        if value.tzinfo is not None:
            return value.astimezone(_dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidParameterError("literal", value, "a finite number")
        return value
    raise InvalidParameterError(
        "literal",
        value,
        "None, a bool, an int, a float, a str, a date or a datetime",
    )


def _wrap(value: object) -> Expr:
    if isinstance(value, Expr):
        return value
    return Lit(_check_literal(value))


MAX_EXPRESSION_DEPTH = 64
"""The deepest expression a query may hold, counting a chain of ``&`` (or of ``|``) as the
balanced tree it is turned into (400 conditions ANDed together are 9 levels deep). Deeper
nesting is refused before anything is reserved: 400 nested levels overflowed the SQL
generator's recursion after the reservation (issue 21)."""

MAX_EXPRESSION_SIZE = 100_000
"""The most nodes (IN-list values included) an expression may hold."""


def _logical_children(node: Expr) -> list[Expr]:
    """A node's operands, a whole chain of the same ``and`` / ``or`` counting as one node."""
    if isinstance(node, Binary) and node.op in _BOOLEAN:
        chain, stack = [], [node.left, node.right]
        while stack:  # iterative: a chain may be thousands long
            item = stack.pop()
            if isinstance(item, Binary) and item.op == node.op:
                stack.extend((item.right, item.left))
            else:
                chain.append(item)
        return chain
    return list(children(node))


def _balanced(node: Expr) -> Expr:
    """``node`` with every ``and`` / ``or`` chain rebuilt as a balanced tree (the same value:
    Kleene AND and OR are associative); called once the depth is known to be small."""
    if isinstance(node, Binary) and node.op in _BOOLEAN:
        parts = [_balanced(child) for child in _logical_children(node)]
        while len(parts) > 1:
            paired = [Binary(node.op, parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
            parts = paired + (parts[-1:] if len(parts) % 2 else [])
        return parts[0]
    if isinstance(node, Binary):
        return Binary(node.op, _balanced(node.left), _balanced(node.right))
    if isinstance(node, Unary):
        return Unary(node.op, _balanced(node.operand))
    if isinstance(node, IsIn):
        return IsIn(_balanced(node.operand), node.values)
    if isinstance(node, Case):
        return Case(_balanced(node.condition), _balanced(node.then), _balanced(node.default))
    return node


def check_expression(expr: Expr, what: str = "expression") -> Expr:
    """``expr`` with its ``&`` / ``|`` chains balanced, or an :class:`UnsupportedQueryError`
    when it is nested deeper than :data:`MAX_EXPRESSION_DEPTH` or larger than
    :data:`MAX_EXPRESSION_SIZE` — measured without recursion, from the expression alone
    (public), before anything is reserved."""
    if not isinstance(expr, Expr):
        raise InvalidParameterError(what, expr, "an expression built with col() and lit()")
    depth: dict[int, int] = {}
    size: dict[int, int] = {}
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in depth:
            continue
        children = _logical_children(node)
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in depth)
            continue
        chain = isinstance(node, Binary) and node.op in _BOOLEAN
        levels = math.ceil(math.log2(len(children))) if chain else 1
        depth[id(node)] = levels + max((depth[id(c)] for c in children), default=0)
        own = (
            len(children) - 1 if chain else 1 + (len(node.values) if isinstance(node, IsIn) else 0)
        )
        size[id(node)] = own + sum(size[id(c)] for c in children)
        if depth[id(node)] > MAX_EXPRESSION_DEPTH or size[id(node)] > MAX_EXPRESSION_SIZE:
            raise UnsupportedQueryError(
                f"the {what} is nested {depth[id(node)]} levels deep (with {size[id(node)]:,} "
                f"parts so far); at most {MAX_EXPRESSION_DEPTH} levels and "
                f"{MAX_EXPRESSION_SIZE:,} parts are allowed (a long chain of & or | counts as "
                "the few levels of a balanced tree). Nothing was charged."
            )
    return _balanced(expr)


def columns_of(expr: Expr) -> frozenset[str]:
    """The column names an expression reads."""
    if isinstance(expr, Col):
        return frozenset({expr.name})
    if isinstance(expr, Lit):
        return frozenset()
    if isinstance(expr, Binary):
        return columns_of(expr.left) | columns_of(expr.right)
    if isinstance(expr, Unary | IsIn):
        return columns_of(expr.operand)
    if isinstance(expr, Case):
        return columns_of(expr.condition) | columns_of(expr.then) | columns_of(expr.default)
    raise UnsupportedQueryError(f"unknown expression node {type(expr).__name__}")


def _is_number(expr: Expr) -> bool:
    """Whether ``expr`` is a number by its form: a numeric literal or arithmetic."""
    if isinstance(expr, Lit):
        return isinstance(expr.value, int | float) and not isinstance(expr.value, bool)
    if isinstance(expr, Binary):
        return expr.op in _ARITHMETIC
    if isinstance(expr, Case):
        return _is_number(expr.then) or _is_number(expr.default)
    return isinstance(expr, Unary) and expr.op in ("neg", "abs", "floor", "ceil", *_PARTS)


def numeric_columns(expr: Expr) -> frozenset[str]:
    """The columns ``expr`` uses as numbers: operands of arithmetic, ``abs`` / ``floor`` /
    ``ceil`` / ``-``, and columns compared with (or ``is_in`` / ``fill_null`` of) numbers.

    Read from the expression's form alone (``dpkit query`` declares these columns numeric for
    a CSV file, whose columns are otherwise text).
    """
    found: set[str] = set()

    def visit(node: Expr) -> None:
        if isinstance(node, Binary):
            if node.op in _ARITHMETIC:
                found.update(n.name for n in (node.left, node.right) if isinstance(n, Col))
            elif node.op in _COMPARISON or node.op == "coalesce":
                for this, other in ((node.left, node.right), (node.right, node.left)):
                    if isinstance(this, Col) and _is_number(other):
                        found.add(this.name)
            visit(node.left)
            visit(node.right)
        elif isinstance(node, Unary):
            if node.op in ("neg", "abs", "floor", "ceil") and isinstance(node.operand, Col):
                found.add(node.operand.name)
            visit(node.operand)
        elif isinstance(node, IsIn):
            numbers = any(_is_number(Lit(v)) for v in node.values if v is not None)
            if numbers and isinstance(node.operand, Col):
                found.add(node.operand.name)
            visit(node.operand)
        elif isinstance(node, Case):
            for branch in (node.then, node.default):
                other = node.default if branch is node.then else node.then
                if isinstance(branch, Col) and _is_number(other):
                    found.add(branch.name)
                visit(branch)
            visit(node.condition)

    visit(expr)
    return frozenset(found)


def _literal_kind(value: LiteralValue) -> ColumnKind | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "numeric"
    if isinstance(value, _dt.datetime):
        return "temporal"
    return "string"


def coerce_temporal_literals(expr: Expr, schema: Mapping[str, ColumnKind]) -> Expr:
    """``expr`` with ISO text compared to a temporal column read as a datetime.

    ``col("day") >= "2024-03-01"`` (what ``DATE '2024-03-01'`` parses to) compares dates when
    ``day`` holds dates, and text when it holds text. Decided from the schema only.
    """
    if isinstance(expr, Binary):
        left = coerce_temporal_literals(expr.left, schema)
        right = coerce_temporal_literals(expr.right, schema)
        if expr.op in _COMPARISON:
            left, right = _temporal_side(left, right, schema), _temporal_side(right, left, schema)
        return Binary(expr.op, left, right)
    if isinstance(expr, Unary):
        return Unary(expr.op, coerce_temporal_literals(expr.operand, schema))
    if isinstance(expr, Case):
        then = coerce_temporal_literals(expr.then, schema)
        otherwise = coerce_temporal_literals(expr.default, schema)
        then, otherwise = (
            _temporal_side(then, otherwise, schema),
            _temporal_side(otherwise, then, schema),
        )
        return Case(coerce_temporal_literals(expr.condition, schema), then, otherwise)
    return expr


def _temporal_side(side: Expr, other: Expr, schema: Mapping[str, ColumnKind]) -> Expr:
    if not (isinstance(side, Lit) and isinstance(side.value, str)):
        return side
    if not (isinstance(other, Col) and schema.get(other.name) == "temporal"):
        return side
    try:
        parsed = _dt.datetime.fromisoformat(side.value.strip())
    except ValueError:
        raise UnsupportedQueryError(
            f"{side.value!r} is compared with the date/time column {other.name!r} but is not an "
            "ISO 8601 date or timestamp (e.g. '2024-03-01' or '2024-03-01 12:00:00')"
        ) from None
    return Lit(_check_literal(parsed))


def infer_kind(expr: Expr, schema: Mapping[str, ColumnKind]) -> ColumnKind | None:
    """The kind of value ``expr`` produces (None: only NULL), or a clear error.

    Raises:
        InvalidParameterError: a column is not in ``schema``.
        UnsupportedQueryError: an operation does not apply to its operands' kinds.
    """
    if isinstance(expr, Col):
        if expr.name not in schema:
            known = ", ".join(repr(c) for c in schema)
            raise InvalidParameterError(
                "column",
                expr.name,
                f"one of the table's columns ({known})",
                "Check the spelling, or define it first with .with_column(name, expression).",
            )
        return schema[expr.name]
    if isinstance(expr, Lit):
        return _literal_kind(expr.value)
    if isinstance(expr, IsIn):
        inner = infer_kind(expr.operand, schema)
        for value in expr.values:
            _require_comparable(inner, _literal_kind(value), expr)
        return "bool"
    if isinstance(expr, Unary):
        inner = infer_kind(expr.operand, schema)
        if expr.op in ("is_null", "is_not_null"):
            return "bool"
        if expr.op == "not":
            _require(inner, {"bool"}, expr)
            return "bool"
        if expr.op == "as_number":
            _require(inner, {"bool"}, expr)
            return "numeric"
        if expr.op in ("neg", "abs", "floor", "ceil"):
            _require(inner, {"numeric"}, expr)
            return "numeric"
        if expr.op in _PARTS:
            _require_temporal(inner, expr)
            return "numeric"
        _require(inner, {"string"}, expr)
        return "string"
    if isinstance(expr, Case):
        _require(infer_kind(expr.condition, schema), {"bool"}, expr)
        then = infer_kind(expr.then, schema)
        otherwise = infer_kind(expr.default, schema)
        _require_comparable(then, otherwise, expr)
        return then if then is not None else otherwise
    if isinstance(expr, Binary):
        left = infer_kind(expr.left, schema)
        right = infer_kind(expr.right, schema)
        if expr.op in _ARITHMETIC:
            _require(left, {"numeric"}, expr)
            _require(right, {"numeric"}, expr)
            return "numeric"
        if expr.op in _BOOLEAN:
            _require(left, {"bool"}, expr)
            _require(right, {"bool"}, expr)
            return "bool"
        if expr.op == "like":
            _require(left, {"string"}, expr)
            if not (isinstance(expr.right, Lit) and isinstance(expr.right.value, str)):
                raise UnsupportedQueryError(
                    f"{expr.render()}: the pattern of LIKE is a text literal"
                )
            return "bool"
        if expr.op in _COMPARISON:
            _require_comparable(left, right, expr)
            if expr.op in _ORDERING and left == right == "string":
                _refuse_text_as_number(expr)
            return "bool"
        # coalesce
        _require_comparable(left, right, expr)
        return left if left is not None else right
    raise UnsupportedQueryError(f"unknown expression node {type(expr).__name__}")


def reads_as_number(value: object) -> bool:
    """Whether ``value`` is a text that reads as a decimal number (``'1000'``, ``'-2.5e3'``)."""
    return isinstance(value, str) and _NUMBER_TEXT.fullmatch(value) is not None


def text_number_orderings(expr: Expr) -> list[tuple[Expr, str]]:
    """The (text side, literal) of every ordering comparison (``< <= > >=``, and so BETWEEN)
    in ``expr`` whose one side is a text literal that reads as a number, from its form alone
    (``dpkit query`` refuses them for a CSV file's undeclared, text columns)."""
    found: list[tuple[Expr, str]] = []

    def visit(node: Expr) -> None:
        if isinstance(node, Binary):
            if node.op in _ORDERING:
                for this, other in ((node.left, node.right), (node.right, node.left)):
                    if not isinstance(other, Lit) or not reads_as_number(other.value):
                        continue
                    if not (isinstance(this, Lit) and isinstance(this.value, str)):
                        found.append((this, str(other.value)))
            visit(node.left)
            visit(node.right)
        else:
            for child in children(node):
                visit(child)

    visit(expr)
    return found


def _refuse_text_as_number(expr: Binary) -> None:
    """Decision (issue 21): an ordering comparison of a text value with a text literal that
    reads as a number compares text, character by character — ``'9' > '1000'`` — and silently
    answered 1,991 where the numeric truth was 264 (``WHERE wage > '1000'`` on a CSV column).
    It is refused, before anything is charged. Equality (``==``, ``!=``, ``is_in``) stays
    allowed: it is exact on text, and how codes such as ZIP codes or IDs with leading zeros
    ('02139', '007') are meant to be compared."""
    for this, other in ((expr.left, expr.right), (expr.right, expr.left)):
        if isinstance(other, Lit) and reads_as_number(other.value):
            if isinstance(this, Lit):
                continue
            name = this.name if isinstance(this, Col) else None
            declare = (
                f"Session(..., schema={{{name!r}: 'numeric'}}) (on the command line: --schema "
                f"{name}=float)"
                if name
                else "schema={column: 'numeric'} (--schema column=float)"
            )
            raise UnsupportedQueryError(
                f"{expr.render()}: {this.render()} is text, and {other.value!r} reads as a "
                "number, but text compares character by character ('9' > '1000'), so this "
                f"would not compare numbers. If the column holds numbers, declare it: {declare} "
                "and compare with a number; a CSV file's columns are text until declared."
            )


def _require(kind: ColumnKind | None, allowed: set[str], expr: Expr) -> None:
    if kind is not None and kind not in allowed:
        raise UnsupportedQueryError(
            f"{expr.render()}: this operation needs {' or '.join(sorted(allowed))} values, but an "
            f"operand is {kind}. Use a column of the right type (numbers for arithmetic, "
            "predicates for & | ~)."
        )


def _require_temporal(kind: ColumnKind | None, expr: Expr) -> None:
    if kind is not None and kind != "temporal":
        shown = "text" if kind == "string" else kind
        raise UnsupportedQueryError(
            f"{expr.render()}: YEAR / MONTH / DAY need a date or timestamp, but the operand is "
            f"{shown}. A CSV file's columns are text until declared: declare the column a date "
            "(Session(..., schema={column: 'temporal'}); on the command line --schema "
            "column=date)."
        )


def _require_comparable(a: ColumnKind | None, b: ColumnKind | None, expr: Expr) -> None:
    if a is None or b is None:
        return
    if a != b or a == "other":
        raise UnsupportedQueryError(
            f"{expr.render()}: cannot compare {a} values with {b} values. Compare numbers with "
            "numbers, strings with strings, booleans with booleans and dates with dates (a date "
            "or ISO text such as '2024-03-01')."
        )
