"""The immutable query builder and the frozen plan tree it produces.

A :class:`Query` wraps a plan node; every method returns a *new* query (like Polars'
``LazyFrame``), so a query can be reused and extended without surprises, and nothing touches the
data until :meth:`dpkit.analytics.Session.evaluate`::

    base = session.query().filter(col("year") == 2024)
    by_dept = base.group_by("dept", keys=["R&D", "Sales"]).agg(count(), mean("salary", (0, 2e5)))

Plan nodes (:class:`Source`, :class:`Filter`, :class:`WithColumn`, :class:`Select`,
:class:`Aggregate`) are frozen dataclasses. Aggregations are frozen values too; their ``name`` is
the output column, and their ``weight`` is their share of the query's budget (equal by default).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal, TypeAlias, cast, overload

import numpy as np

from dpkit._exact import Number, fraction_of, sensitivity_of
from dpkit.analytics._declared import MarginalCounts, RangeCounts, build_marginals, build_ranges
from dpkit.analytics._expr import Col, Expr, Structural, col, lit
from dpkit.analytics._families import family_of, forms, released_columns
from dpkit.analytics._keys import KeySet, check_name
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

__all__ = [
    "Aggregate",
    "Aggregation",
    "Bounding",
    "Count",
    "CountUnits",
    "Filter",
    "GroupedQuery",
    "Histogram",
    "KeySet",
    "LinearQueries",
    "MarginalCounts",
    "Mean",
    "PlanNode",
    "Quantile",
    "Query",
    "RangeCounts",
    "Select",
    "Source",
    "Sum",
    "Unbounded",
    "Variance",
    "WithColumn",
    "col",
    "count",
    "count_distinct_units",
    "histogram",
    "lit",
    "marginals",
    "mean",
    "median",
    "quantile",
    "quantile_name",
    "ranges",
    "std",
    "sum",
    "variance",
    "workload",
    "written_aggregations",
]


# ---------------------------------------------------------------------------------- bounds
def check_bounds(bounds: object, name: str = "bounds") -> tuple[Fraction, Fraction]:
    """Exact (lower, upper) with floats rounded outward; lower <= upper, both finite."""
    if not isinstance(bounds, tuple | list) or len(bounds) != 2:
        raise InvalidParameterError(name, bounds, "a pair (lower, upper) of numbers")
    low_raw, high_raw = bounds
    low = fraction_of(f"{name}[0]", low_raw)
    if isinstance(low_raw, float | np.floating):
        low = min(low, Fraction(float(low_raw)))
    high = sensitivity_of(f"{name}[1]", high_raw)
    if low > high:
        raise InvalidParameterError(
            name,
            bounds,
            "(lower, upper) with lower <= upper",
            "Swap the two numbers: the first is the smallest value a row may contribute.",
        )
    if max(abs(low), abs(high)) > Fraction(2) ** 900:
        raise InvalidParameterError(name, bounds, "bounds of magnitude below 2^900")
    tiny = Fraction(1, 2**900)
    if (
        (low != 0 and abs(low) < tiny)
        or (high != 0 and abs(high) < tiny)
        or (low != high and high - low < tiny)
    ):
        # grids and noise scales are powers of two derived from the bounds: subnormal bounds
        # would underflow them and fail after the reservation, on every table alike
        raise InvalidParameterError(
            name, bounds, "bounds that are 0 or of magnitude at least 2^-900, at least 2^-900 apart"
        )
    return low, high


def _check_weight(weight: object) -> Fraction:
    value = fraction_of("weight", weight)  # type: ignore[arg-type]
    if value <= 0:
        raise InvalidParameterError("weight", weight, "> 0 (a share of the query's budget)")
    if not Fraction(1, 2**20) <= value <= 2**20:
        # shares are relative: weights beyond 2^±20 only push the split into underflow or
        # overflow (which failed after the reservation), never to a useful allocation
        raise InvalidParameterError("weight", weight, "between 2^-20 and 2^20")
    return value


def _check_column(column: object) -> str:
    if isinstance(column, Col):
        return column.name
    return check_name(column, "column")


# ---------------------------------------------------------------------------------- aggregations
@dataclass(frozen=True, slots=True)
class Count:
    """The number of rows (after contribution bounding) in each group."""

    name: str = "count"
    weight: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class CountUnits:
    """The number of distinct privacy units in each group."""

    name: str = "units"
    weight: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class Sum:
    """The sum of ``column`` clamped to ``bounds`` (NULL and NaN values are skipped).

    With ``values`` (a union of closed intervals, sorted and disjoint), each value is moved to the
    nearest point of that union instead of clamped, and ``bounds`` is its hull; a pure-DP
    budget then picks the noise (geometric, staircase or ladder) with the least expected error.
    """

    column: str
    bounds: tuple[Fraction, Fraction]
    name: str
    weight: Fraction = Fraction(1)
    values: tuple[tuple[Fraction, Fraction], ...] | None = None


@dataclass(frozen=True, slots=True)
class Mean:
    """The mean of ``column`` clamped to ``bounds``, over its non-NULL values."""

    column: str
    bounds: tuple[Fraction, Fraction]
    name: str
    weight: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class Variance:
    """The (population) variance — or with ``std=True`` the standard deviation — of ``column``
    clamped to ``bounds``, over its non-NULL values."""

    column: str
    bounds: tuple[Fraction, Fraction]
    name: str
    std: bool = False
    weight: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class Quantile:
    """The ``q``-quantile of ``column`` clamped to ``bounds``.

    ``method``: ``"exponential"`` (the exponential mechanism over a grid of about
    ``candidates`` points of [lower, upper], or over the declared values when ``candidates`` is
    a tuple of them), ``"inverse"``, ``"smooth"`` or ``"ptr"`` (the
    data-dependent mechanisms of docs/sensitivity.md §10, on a fine grid), or ``"auto"`` (chosen
    from public parameters: see :func:`dpkit.analytics._planner` and docs/analytics.md).
    ``n_range``: a declared (public) range of the number of rows in each group, used only to
    choose the method. ``ptr_bound``: PTR's proposed sensitivity, in the column's units.
    ``noise``: the noise family of ``method="smooth"`` (``"auto"``: Cauchy-type under a pure
    share, the Bun–Steinke zCDP family with the smallest noise sd under a zCDP share).
    """

    column: str
    bounds: tuple[Fraction, Fraction]
    q: Fraction
    name: str
    candidates: int | tuple[Fraction, ...] = 1024
    weight: Fraction = Fraction(1)
    method: str = "auto"
    n_range: tuple[int, int] | None = None
    ptr_bound: Fraction | None = None
    noise: str = "auto"


@dataclass(frozen=True, slots=True)
class Histogram:
    """Counts of ``column`` in the declared bins ``[e0, e1), [e1, e2), ..., [e_{B-1}, e_B]``.

    Values outside ``[e0, e_B]``, NULL and NaN fall in no bin. Released as its own table."""

    column: str
    edges: tuple[float, ...]
    name: str
    weight: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class LinearQueries:
    """The :func:`workload` aggregation: linear queries ``W @ x`` over the vector ``x`` of
    per-group counts (or clamped sums of ``column``), one entry per public group key in key
    order. Released as its own table. (:class:`dpkit.workloads.Workload` is the matrix
    mechanism's implicit matrix W.)"""

    matrix: tuple[tuple[float, ...], ...]
    name: str
    column: str | None = None
    bounds: tuple[Fraction, Fraction] | None = None
    query_names: tuple[str, ...] | None = None
    weight: Fraction = Fraction(1)


Aggregation: TypeAlias = (
    Count
    | CountUnits
    | Sum
    | Mean
    | Variance
    | Quantile
    | Histogram
    | LinearQueries
    | MarginalCounts
    | RangeCounts
)


@dataclass(frozen=True, slots=True)
class Unbounded:
    """An aggregation written without clamping bounds (``mean("wage")``): the session clamps
    it to the public bounds registered for its column (``Session(..., bounds={"wage": (0,
    3000)})``, a metadata file, the service's registration) when it plans the query, before
    anything is reserved; with none registered the query is refused there, naming the column
    and how to register them (:func:`dpkit.analytics._metadata.registered_bounds`, the same
    resolution as SQL's ``AVG(wage)``)."""

    function: str
    """The builder: ``sum``, ``mean``, ``variance``, ``std``, ``quantile`` or ``median``."""
    column: str
    name: str
    weight: Fraction = Fraction(1)
    options: tuple[tuple[str, Any], ...] = ()
    """The builder's other arguments (``q``, ``candidates``, ``method``...)."""

    def call(self, bounds: str = "", *, quoted: bool = True) -> str:
        """The builder's call as written (``median('wage')``), or with ``bounds`` added;
        ``quoted=False``: as plan text (``median(wage, ...)``)."""
        q = dict(self.options).get("q")
        column = repr(self.column) if quoted else self.column
        args = [column] + ([] if q is None else [str(q)]) + ([bounds] if bounds else [])
        return f"{self.function}({', '.join(args)})"

    def bounded(self, bounds: tuple[Number, Number]) -> Aggregation:
        """The aggregation clamped to ``bounds`` (every argument checked again)."""
        builder: Any = _UNBOUNDED_BUILDERS[self.function]
        built: Aggregation = builder(
            self.column, bounds=bounds, name=self.name, weight=self.weight, **dict(self.options)
        )
        return built

    def probe(self) -> Aggregation:
        """The aggregation with placeholder bounds, to check its name and other arguments
        (those that depend on the bounds, the candidates and PTR's bound, are checked when
        the bounds are known)."""
        builder: Any = _UNBOUNDED_BUILDERS[self.function]
        options = {k: v for k, v in self.options if k not in ("candidates", "ptr_bound")}
        probe: Aggregation = builder(
            self.column, bounds=(0, 1), name=self.name, weight=self.weight, **options
        )
        return probe


def _unbounded(function: str, column: str, name: str, weight: Number, **options: Any) -> Unbounded:
    """An :class:`Unbounded` aggregation, its other arguments checked now."""
    if isinstance(options.get("candidates"), Sequence):
        options["candidates"] = tuple(options["candidates"])
    found = Unbounded(
        function, column, check_name(name), _check_weight(weight), tuple(options.items())
    )
    found.probe()
    return found


def count(name: str = "count", *, weight: Number = 1) -> Count:
    """The number of rows per group."""
    return Count(check_name(name), _check_weight(weight))


def count_distinct_units(name: str = "units", *, weight: Number = 1) -> CountUnits:
    """The number of distinct privacy units per group (e.g. people, not rows)."""
    return CountUnits(check_name(name), _check_weight(weight))


_MAX_VALUE_INTERVALS = 64


def check_values(values: object, name: str = "values") -> tuple[tuple[Fraction, Fraction], ...]:
    """A declared value set: closed intervals (lo, hi) (a number v means [v, v]), sorted, with
    overlapping or touching intervals merged; floats are rounded outward (never shrinking it).
    """
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InvalidParameterError(
            name, values, "a non-empty list of (lo, hi) intervals, e.g. [(0, 5000), (12000, 15000)]"
        )
    items = list(values)
    if not 1 <= len(items) <= _MAX_VALUE_INTERVALS:
        raise InvalidParameterError(
            name, values, f"between 1 and {_MAX_VALUE_INTERVALS} intervals (lo, hi)"
        )
    intervals: list[tuple[Fraction, Fraction]] = []
    for i, item in enumerate(items):
        if isinstance(item, Sequence | np.ndarray) and not isinstance(item, str | bytes):
            pair = tuple(item)
        else:
            pair = (item, item)
        intervals.append(check_bounds(pair, f"{name}[{i}]"))
    intervals.sort()
    merged = [intervals[0]]
    for lo, hi in intervals[1:]:
        if lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    if all(lo == hi == 0 for lo, hi in merged):
        raise InvalidParameterError(name, values, "a set with a non-zero value (the sum is 0)")
    return tuple(merged)


def _number(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.8g}"


def render_values(values: Sequence[tuple[Fraction, Fraction]]) -> str:
    """Readable text of a declared value set: ``[0, 5000] ∪ [12000, 15000]``."""
    return " ∪ ".join(
        f"[{_number(lo)}, {_number(hi)}]" if lo != hi else f"{{{_number(lo)}}}" for lo, hi in values
    )


@overload
def sum(
    column: str | Col,
    bounds: tuple[Number, Number],
    name: str | None = None,
    *,
    values: None = None,
    weight: Number = 1,
) -> Sum: ...
@overload
def sum(
    column: str | Col,
    bounds: None = None,
    name: str | None = None,
    *,
    values: Sequence[tuple[Number, Number] | Number],
    weight: Number = 1,
) -> Sum: ...
@overload
def sum(
    column: str | Col,
    bounds: None = None,
    name: str | None = None,
    *,
    values: None = None,
    weight: Number = 1,
) -> Unbounded: ...


def sum(
    column: str | Col,
    bounds: tuple[Number, Number] | None = None,
    name: str | None = None,
    *,
    values: Sequence[tuple[Number, Number] | Number] | None = None,
    weight: Number = 1,
) -> Sum | Unbounded:
    """The sum of ``column``, each value clamped into ``bounds`` first (without bounds nor
    ``values``: the bounds registered for the column with the session, see
    :class:`Unbounded`).

    Or, with ``values=[(lo, hi), ...]`` instead of ``bounds``: the per-row values are declared to
    lie in that union of intervals (a value outside it is moved to its nearest point, the
    analogue of clamping). With a pure-DP budget the planner then compares geometric, staircase
    and ladder noise (:func:`dpkit.mechanisms.make_ladder`) and adds the one with the smallest
    expected absolute error — the ladder wins when the set has wide gaps (a polarised pay scale)
    and ε is not small. ``CompiledQuery.explain()`` and the release's accuracy say which was chosen.

    Example:
        >>> sum("salary", values=[(0, 5000), (12000, 15000)]).bounds
        (Fraction(0, 1), Fraction(15000, 1))
    """
    column_name = _check_column(column)
    label = check_name(name or f"sum_{column_name}")
    if values is not None:
        if bounds is not None:
            raise InvalidParameterError(
                "bounds",
                bounds,
                "not given together with values= (the bounds are the values' hull)",
                "Pass either bounds=(lower, upper) or values=[(lo, hi), ...].",
            )
        declared = check_values(values)
        hull = (declared[0][0], declared[-1][1])
        return Sum(column_name, hull, label, _check_weight(weight), declared)
    if bounds is None:
        return _unbounded("sum", column_name, label, weight)
    return Sum(column_name, check_bounds(bounds), label, _check_weight(weight))


@overload
def mean(
    column: str | Col,
    bounds: tuple[Number, Number],
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Mean: ...
@overload
def mean(
    column: str | Col,
    bounds: None = None,
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Unbounded: ...


def mean(
    column: str | Col,
    bounds: tuple[Number, Number] | None = None,
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Mean | Unbounded:
    """The mean of ``column``, each value clamped into ``bounds`` first (without: the bounds
    registered for the column with the session, see :class:`Unbounded`)."""
    column_name = _check_column(column)
    if bounds is None:
        return _unbounded("mean", column_name, name or f"mean_{column_name}", weight)
    low, high = check_bounds(bounds)
    if low == high:
        raise InvalidParameterError("bounds", bounds, "(lower, upper) with lower < upper")
    return Mean(
        column_name, (low, high), check_name(name or f"mean_{column_name}"), _check_weight(weight)
    )


def _spread(
    column: str | Col,
    bounds: tuple[Number, Number] | None,
    name: str | None,
    prefix: str,
    std: bool,
    weight: Number,
) -> Variance | Unbounded:
    column_name = _check_column(column)
    if bounds is None:
        return _unbounded(
            "std" if std else "variance", column_name, name or f"{prefix}_{column_name}", weight
        )
    low, high = check_bounds(bounds)
    if low == high:
        raise InvalidParameterError("bounds", bounds, "(lower, upper) with lower < upper")
    return Variance(
        column_name,
        (low, high),
        check_name(name or f"{prefix}_{column_name}"),
        std,
        _check_weight(weight),
    )


@overload
def variance(
    column: str | Col,
    bounds: tuple[Number, Number],
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Variance: ...
@overload
def variance(
    column: str | Col,
    bounds: None = None,
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Unbounded: ...


def variance(
    column: str | Col,
    bounds: tuple[Number, Number] | None = None,
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Variance | Unbounded:
    """The population variance of ``column``, values clamped into ``bounds`` (without: the
    registered bounds, see :class:`Unbounded`)."""
    return _spread(column, bounds, name, "var", False, weight)


@overload
def std(
    column: str | Col,
    bounds: tuple[Number, Number],
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Variance: ...
@overload
def std(
    column: str | Col,
    bounds: None = None,
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Unbounded: ...


def std(
    column: str | Col,
    bounds: tuple[Number, Number] | None = None,
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Variance | Unbounded:
    """The population standard deviation of ``column``, values clamped into ``bounds``
    (without: the registered bounds, see :class:`Unbounded`)."""
    return _spread(column, bounds, name, "std", True, weight)


QUANTILE_METHODS = ("auto", "exponential", "inverse", "smooth", "ptr")
MAX_CANDIDATE_VALUES = 1024
"""The most declared candidate values of a quantile (``candidates=[...]``) in general: the
engines bin each row by a CASE over the candidates' midpoints (DuckDB: ~3 s at 1,024). Values
that are consecutive multiples of a power of two (``range(0, 91)``) use the grid instead, up to
2^16 of them."""


def dyadic_step(values: Sequence[Fraction]) -> int | None:
    """e when ``values`` are consecutive multiples k·2^e, (k+1)·2^e, ... of a power of two, with
    every |value|/2^e below 2^40 (exact grid indices); else None."""
    step = values[1] - values[0]
    num, den = step.numerator, step.denominator
    if step <= 0 or num & (num - 1) or den & (den - 1):
        return None
    exponent = num.bit_length() - 1 if den == 1 else 1 - den.bit_length()
    if (values[0] / step).denominator != 1 or max(abs(values[0]), abs(values[-1])) / step >= 2**40:
        return None
    if any(b - a != step for a, b in itertools.pairwise(values)):
        return None
    return exponent


def _check_candidates(
    candidates: object, bounds: tuple[Fraction, Fraction], method: str
) -> int | tuple[Fraction, ...]:
    """An integer grid size in [2, 65536], or a public set of candidate values: 2 to
    MAX_CANDIDATE_VALUES strictly increasing finite numbers inside ``bounds`` (whose float64
    midpoints lie strictly between them), with method 'auto' or 'exponential'."""
    if isinstance(candidates, int | np.integer) and not isinstance(candidates, bool):
        if not 2 <= candidates <= 2**16:
            raise InvalidParameterError(
                "candidates", candidates, "an integer in [2, 65536], or a list of values"
            )
        return int(candidates)
    allowed = (
        f"an integer in [2, 65536] (a grid of about that many points), or a list of 2 to "
        f"{MAX_CANDIDATE_VALUES:,} strictly increasing numbers inside the bounds (the public "
        "values a row may take), or up to 65,536 consecutive multiples of a power of two "
        "(e.g. range(0, 91) for ages)"
    )
    if isinstance(candidates, str | bytes | bool) or not isinstance(
        candidates, Sequence | np.ndarray
    ):
        raise InvalidParameterError("candidates", candidates, allowed)
    if not 2 <= len(candidates) <= 2**16:
        raise InvalidParameterError("candidates", f"{len(candidates)} values", allowed)
    values = tuple(fraction_of(f"candidates[{i}]", v) for i, v in enumerate(candidates))
    if len(values) > MAX_CANDIDATE_VALUES and dyadic_step(values) is None:
        raise InvalidParameterError("candidates", f"{len(values)} values", allowed)
    floats = [float(v) for v in values]
    for i, (a, b) in enumerate(itertools.pairwise(floats)):
        if not a < a / 2 + b / 2 < b:
            need = (
                f"a number above candidates[{i}] = {a!r} (strictly increasing values)"
                if b <= a
                else f"a number far enough above {a!r} for a float64 to lie between them"
            )
            raise InvalidParameterError(f"candidates[{i + 1}]", candidates[i + 1], need)
    low, high = bounds
    if values[0] < low or values[-1] > high:
        raise InvalidParameterError(
            "candidates",
            f"[{floats[0]:g} .. {floats[-1]:g}]",
            f"values inside the bounds [{float(low):g}, {float(high):g}]",
        )
    if method not in ("auto", "exponential"):
        raise InvalidParameterError(
            "candidates",
            f"{len(values)} values",
            f"an integer (the grid size) with method={method!r}",
            "A list of candidate values is used by the exponential mechanism only: pass "
            "method='exponential' or 'auto'.",
        )
    return values


SMOOTH_NOISES = (
    "auto",
    "cauchy",
    "laplace_log_normal",
    "uniform_log_normal",
    "student_t",
    "arcsinh_normal",
)


def _check_smooth_noise(noise: object, method: str) -> str:
    if noise not in SMOOTH_NOISES:
        raise InvalidParameterError("noise", noise, "one of " + ", ".join(SMOOTH_NOISES))
    if noise != "auto" and method != "smooth":
        raise InvalidParameterError(
            "noise", noise, "'auto' unless method='smooth' (only smooth sensitivity adds it)"
        )
    return str(noise)


def _check_quantile_method(
    method: object, n_range: object, ptr_bound: object
) -> tuple[str, tuple[int, int] | None, Fraction | None]:
    if method not in QUANTILE_METHODS:
        raise InvalidParameterError("method", method, "one of " + ", ".join(QUANTILE_METHODS))
    rows: tuple[int, int] | None = None
    if n_range is not None:
        ok = (
            isinstance(n_range, tuple | list)
            and len(n_range) == 2
            and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in n_range)
            and 0 <= n_range[0] <= n_range[1]
        )
        if not ok:
            raise InvalidParameterError(
                "n_range", n_range, "(n_min, n_max) integers with 0 <= n_min <= n_max"
            )
        rows = (int(n_range[0]), int(n_range[1]))  # type: ignore[index]
    bound: Fraction | None = None
    if ptr_bound is not None:
        bound = sensitivity_of("ptr_bound", ptr_bound)  # type: ignore[arg-type]
        if bound <= 0:
            raise InvalidParameterError("ptr_bound", ptr_bound, "> 0")
    if method == "ptr" and bound is None:
        raise InvalidParameterError(
            "ptr_bound",
            ptr_bound,
            "the proposed sensitivity for method='ptr' (in the column's units)",
            "PTR releases only if the data are far from any table whose median moves more.",
        )
    return str(method), rows, bound


@overload
def quantile(
    column: str | Col,
    q: Number,
    bounds: tuple[Number, Number],
    name: str | None = None,
    *,
    candidates: int | Sequence[Number] = 1024,
    weight: Number = 1,
    method: str = "auto",
    n_range: tuple[int, int] | None = None,
    ptr_bound: Number | None = None,
    noise: str = "auto",
) -> Quantile: ...
@overload
def quantile(
    column: str | Col,
    q: Number,
    bounds: None = None,
    name: str | None = None,
    *,
    candidates: int | Sequence[Number] = 1024,
    weight: Number = 1,
    method: str = "auto",
    n_range: tuple[int, int] | None = None,
    ptr_bound: Number | None = None,
    noise: str = "auto",
) -> Unbounded: ...


def quantile(
    column: str | Col,
    q: Number,
    bounds: tuple[Number, Number] | None = None,
    name: str | None = None,
    *,
    candidates: int | Sequence[Number] = 1024,
    weight: Number = 1,
    method: str = "auto",
    n_range: tuple[int, int] | None = None,
    ptr_bound: Number | None = None,
    noise: str = "auto",
) -> Quantile | Unbounded:
    """The ``q``-quantile of ``column``, values clamped into ``bounds`` (without: the bounds
    registered for the column with the session, see :class:`Unbounded`).

    ``candidates``: the size of the exponential mechanism's grid (about that many points of
    [lower, upper], a power-of-two step; each value is rounded to the nearest point), or the
    public values themselves (e.g. ``range(0, 91)`` for ages in years, or the codes of a
    categorical scale), inside the bounds: each row is then counted at its nearest candidate, so
    rows tied at a value are counted exactly, and ``"auto"`` uses the exponential mechanism.

    ``method``: ``"exponential"`` (exponential mechanism over the candidates), ``"inverse"``
    (inverse sensitivity, Asi & Duchi 2020), ``"smooth"`` (smooth sensitivity with Cauchy-type
    noise, pure ε), ``"ptr"`` (propose-test-release with the proposed sensitivity
    ``ptr_bound``; needs a δ; a refusal is released as NaN) or ``"auto"``: ``"exponential"``
    over declared candidate values; else ``"inverse"`` when a declared ``n_range`` (rows per
    group) makes its rank error small against the rows on the thin side of q, else
    ``"exponential"``. The data-dependent methods release the q-quantile of the values rounded
    to a fine public grid (2^-32 of the bounds' width); docs/sensitivity.md §10 has the proofs
    and ``explain()`` says which mechanism runs and why.

    ``noise`` (``method="smooth"`` only): ``"cauchy"`` (h ∝ 1/(1 + |z|⁴), pure ε),
    ``"laplace_log_normal"``, ``"uniform_log_normal"``, ``"student_t"`` or
    ``"arcsinh_normal"`` (Bun & Steinke 2019,
    zCDP: needs a ρ budget, or an (ε, δ) budget answered in zCDP), or ``"auto"``: Cauchy under a
    pure-ε share, and under a zCDP share the zCDP family whose noise has the smallest standard
    deviation for the group's (ρ, β) (docs/sensitivity.md §10)."""
    column_name = _check_column(column)
    q_f = fraction_of("q", q)
    if not 0 <= q_f <= 1:
        raise InvalidParameterError("q", q, "in [0, 1], e.g. 0.5 for the median")
    if bounds is None:
        return _unbounded(
            "quantile",
            column_name,
            name or quantile_name(q_f, column_name),
            weight,
            q=q,
            candidates=candidates,
            method=method,
            n_range=n_range,
            ptr_bound=ptr_bound,
            noise=noise,
        )
    low, high = check_bounds(bounds)
    if low == high:
        raise InvalidParameterError("bounds", bounds, "(lower, upper) with lower < upper")
    label = name or quantile_name(q_f, column_name)
    chosen, rows, bound = _check_quantile_method(method, n_range, ptr_bound)
    grid = _check_candidates(candidates, (low, high), chosen)
    family = _check_smooth_noise(noise, chosen)
    return Quantile(
        column_name,
        (low, high),
        q_f,
        check_name(label),
        grid,
        _check_weight(weight),
        chosen,
        rows,
        bound,
        family,
    )


def quantile_name(q: Number, column: str) -> str:
    """``q90_amount`` for q = 0.9, ``median_amount`` for 0.5, ``q99_9_amount`` for 0.999."""
    exact = fraction_of("q", q)
    if exact == Fraction(1, 2):
        return f"median_{column}"
    percent = f"{float(100 * exact):.10f}".rstrip("0").rstrip(".")
    return f"q{percent.replace('.', '_')}_{column}"


@overload
def median(
    column: str | Col,
    bounds: tuple[Number, Number],
    name: str | None = None,
    *,
    candidates: int | Sequence[Number] = 1024,
    weight: Number = 1,
    method: str = "auto",
    n_range: tuple[int, int] | None = None,
    ptr_bound: Number | None = None,
    noise: str = "auto",
) -> Quantile: ...
@overload
def median(
    column: str | Col,
    bounds: None = None,
    name: str | None = None,
    *,
    candidates: int | Sequence[Number] = 1024,
    weight: Number = 1,
    method: str = "auto",
    n_range: tuple[int, int] | None = None,
    ptr_bound: Number | None = None,
    noise: str = "auto",
) -> Unbounded: ...


def median(
    column: str | Col,
    bounds: tuple[Number, Number] | None = None,
    name: str | None = None,
    *,
    candidates: int | Sequence[Number] = 1024,
    weight: Number = 1,
    method: str = "auto",
    n_range: tuple[int, int] | None = None,
    ptr_bound: Number | None = None,
    noise: str = "auto",
) -> Quantile | Unbounded:
    """The median of ``column`` (the 0.5-quantile; ``method`` etc. as in :func:`quantile`)."""
    column_name = _check_column(column)
    if bounds is None:
        return _unbounded(
            "median",
            column_name,
            name or f"median_{column_name}",
            weight,
            candidates=candidates,
            method=method,
            n_range=n_range,
            ptr_bound=ptr_bound,
            noise=noise,
        )
    return quantile(
        column_name,
        Fraction(1, 2),
        bounds,
        name or f"median_{column_name}",
        candidates=candidates,
        weight=weight,
        method=method,
        n_range=n_range,
        ptr_bound=ptr_bound,
        noise=noise,
    )


_UNBOUNDED_BUILDERS: dict[str, Any] = {
    "sum": sum,
    "mean": mean,
    "variance": variance,
    "std": std,
    "quantile": quantile,
    "median": median,
}
"""The builders of :class:`Unbounded` aggregations."""

_FLOAT_MAX = Fraction(np.finfo(np.float64).max)


def histogram(
    column: str | Col, edges: Sequence[Number], name: str | None = None, *, weight: Number = 1
) -> Histogram:
    """Counts of ``column`` in declared bins (``edges`` increasing, at least two)."""
    column_name = _check_column(column)
    values = []
    for i, edge in enumerate(edges):
        exact = fraction_of(f"edges[{i}]", edge)
        if abs(exact) > _FLOAT_MAX:  # float() would overflow (10**400)
            raise InvalidParameterError(
                f"edges[{i}]", edge, "a number of magnitude at most about 1.8e308 (a float64)"
            )
        values.append(float(exact))
    if len(values) < 2 or any(b <= a for a, b in itertools.pairwise(values)):
        raise InvalidParameterError("edges", edges, "at least two strictly increasing numbers")
    return Histogram(
        column_name,
        tuple(values),
        check_name(name or f"hist_{column_name}"),
        _check_weight(weight),
    )


def workload(
    matrix: Sequence[Sequence[Number]] | np.ndarray,
    name: str = "workload",
    *,
    column: str | Col | None = None,
    bounds: tuple[Number, Number] | None = None,
    query_names: Sequence[str] | None = None,
    weight: Number = 1,
) -> LinearQueries:
    """A batch of linear queries ``matrix @ x`` over per-group counts (or sums of ``column``).

    ``matrix`` has one row per query and one column per public group key (in key order).
    """
    array = np.asarray(matrix, dtype=np.float64)
    if (
        array.ndim != 2
        or array.shape[0] < 1
        or array.shape[1] < 1
        or not np.all(np.isfinite(array))
    ):
        raise InvalidParameterError("matrix", matrix, "a non-empty 2-d array of finite numbers")
    if not np.any(array != 0):
        raise InvalidParameterError("matrix", matrix, "a matrix with a non-zero entry")
    column_name = None if column is None else _check_column(column)
    if (column_name is None) != (bounds is None):
        raise InvalidParameterError("bounds", bounds, "given exactly when column is given")
    names = None
    if query_names is not None:
        names = tuple(check_name(n, "query_names") for n in query_names)
        if len(names) != array.shape[0] or len(set(names)) != len(names):
            raise InvalidParameterError(
                "query_names", query_names, f"{array.shape[0]} distinct names, one per matrix row"
            )
    return LinearQueries(
        tuple(tuple(float(v) for v in row) for row in array),
        check_name(name),
        column_name,
        None if bounds is None else check_bounds(bounds),
        names,
        _check_weight(weight),
    )


def marginals(
    cliques: Sequence[Sequence[str]] | str,
    domains: Mapping[str, Sequence[Any]],
    name: str = "marginals",
    *,
    weight: Number = 1,
) -> MarginalCounts:
    """Counts of every cell of each marginal over declared categorical domains.

    ``cliques`` lists tuples of declared columns (e.g. ``[("age", "sex"), ("sex",)]``), or is
    ``"all_1way"``, ``"all_2way"``, ``"all_3way"`` (every set of that many declared columns).
    ``domains`` maps each column to its public values (at least two, distinct); rows with a
    value outside the domain, or NULL, count in no cell. Answered by the matrix mechanism
    (OPT_M / ResidualPlanner, :mod:`dpkit.workloads`); see docs/workloads.md "On tables".
    """
    return build_marginals(cliques, domains, check_name(name), _check_weight(weight))


def ranges(
    column: str | Col,
    domain: Sequence[Number] | tuple[int, int, int],
    name: str | None = None,
    *,
    kind: str = "prefix",
    width: int | None = None,
    weight: Number = 1,
) -> RangeCounts:
    """Range counts over an ordered numeric column with a declared domain.

    ``domain``: strictly increasing numbers (the ordered cells), or ``(lo, hi, step)`` integers
    for lo, lo + step, ..., up to hi inclusive. ``kind``: ``"prefix"`` (counts of values <= each
    cell), ``"all_range"`` (every interval of cells), ``"width"`` (every window of ``width``
    consecutive cells). Rows whose value is not a declared cell, or NULL, count nowhere.
    """
    column_name = _check_column(column)
    return build_ranges(
        column_name,
        domain,
        kind,
        width,
        check_name(name or f"ranges_{column_name}"),
        _check_weight(weight),
    )


# ---------------------------------------------------------------------------------- bounding
@dataclass(frozen=True, slots=True)
class Bounding:
    """Contribution bounds per privacy unit, declared (never read from the data).

    * ``max_rows`` (k): at most k rows per unit in total;
    * ``max_groups`` (m): at most m groups per unit;
    * ``max_rows_per_group`` (c): at most c rows per unit in each group.

    Rows beyond the bounds are dropped, chosen by a keyed pseudo-random order that depends only on
    the unit's own rows. At least ``max_rows`` or ``max_rows_per_group`` must be given.
    """

    max_rows: int | None = None
    max_groups: int | None = None
    max_rows_per_group: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_groups", "max_rows_per_group"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | np.integer)
                or not 1 <= value <= 2**31
            ):
                raise InvalidParameterError(name, value, "an integer in [1, 2^31] or None")

    def merged(self, other: Bounding) -> Bounding:
        """``other``'s values where given, else ours."""
        return Bounding(
            other.max_rows if other.max_rows is not None else self.max_rows,
            other.max_groups if other.max_groups is not None else self.max_groups,
            other.max_rows_per_group
            if other.max_rows_per_group is not None
            else self.max_rows_per_group,
        )

    def describe(self) -> str:
        parts = []
        if self.max_rows is not None:
            parts.append(f"max_rows={self.max_rows}")
        if self.max_groups is not None:
            parts.append(f"max_groups={self.max_groups}")
        if self.max_rows_per_group is not None:
            parts.append(f"max_rows_per_group={self.max_rows_per_group}")
        return ", ".join(parts) or "none"


# ---------------------------------------------------------------------------------- plan nodes
@dataclass(frozen=True, slots=True)
class Source:
    """A table of the session: its only table (``table`` None), or the one named."""

    table: str | None = None

    def render(self) -> str:
        return "source" if self.table is None else f"table({self.table!r})"


JoinHow: TypeAlias = Literal["inner", "left"]


@dataclass(frozen=True, slots=True, eq=False)
class Join(Structural):
    """``left JOIN right ON left.a = right.b AND ...`` (an equi-join, inner or left).

    ``using``: the keys were named once (``USING``): each pair's right column is dropped from
    the result (its left column holds the value). ``condition``: more of the ``ON`` condition
    than its equalities (an inner join applies it after the join; a left join to its right
    side's rows before the join, so it may read only the right side's columns)."""

    left: PlanNode
    right: PlanNode
    on: tuple[tuple[str, str], ...]
    how: JoinHow = "inner"
    using: bool = False
    condition: Expr | None = None
    max_per_key: tuple[int, int] | None = None

    def render(self) -> str:
        keys = ", ".join(a if self.using else f"{a} = {b}" for a, b in self.on)
        if self.condition is not None:
            keys += f" and {self.condition.render()}"
        word = "using" if self.using else "on"
        truncated = "" if self.max_per_key is None else f", max_per_key={self.max_per_key}"
        return (
            f"{self.left.render()}.join({self.right.render()}, {word} {keys}, {self.how}"
            f"{truncated})"
        )


@dataclass(frozen=True, slots=True, eq=False)
class Alias(Structural):
    """A name for a relation (a table or a subquery): a column both sides of a join have is
    then known as ``name.column``."""

    child: PlanNode
    name: str

    def render(self) -> str:
        return f"{self.child.render()}.alias({self.name!r})"


PerUnitFunction: TypeAlias = Literal[
    "count_star", "count", "count_distinct", "sum", "min", "max", "avg"
]


@dataclass(frozen=True, slots=True, eq=False)
class PerUnit(Structural):
    """An exact aggregate per group whose keys hold the privacy unit (a subquery such as
    ``SELECT c_custkey, COUNT(o_orderkey) AS n FROM ... GROUP BY c_custkey``): each output row
    comes from one unit's rows, so it is a row of that unit. ``aggregates`` are ``(name,
    function, column)``."""

    child: PlanNode
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, PerUnitFunction, str], ...]

    def render(self) -> str:
        aggs = ", ".join(f"{n}={f}({c})" for n, f, c in self.aggregates)
        keys = ", ".join(repr(k) for k in self.keys)
        return f"{self.child.render()}.per_unit({keys}; {aggs})"


@dataclass(frozen=True, slots=True, eq=False)
class Filter(Structural):
    """Keep the rows where ``predicate`` is TRUE."""

    child: PlanNode
    predicate: Expr

    def render(self) -> str:
        return render_plan(self)

    def own(self) -> str:
        return f"filter({self.predicate.render()})"


@dataclass(frozen=True, slots=True, eq=False)
class WithColumn(Structural):
    """Add (or replace) a derived column."""

    child: PlanNode
    name: str
    expr: Expr

    def render(self) -> str:
        return render_plan(self)

    def own(self) -> str:
        return f"with_column({self.name!r}, {self.expr.render()})"


@dataclass(frozen=True, slots=True, eq=False)
class Select(Structural):
    """Keep only these columns (the privacy unit column is always kept)."""

    child: PlanNode
    columns: tuple[str, ...]

    def render(self) -> str:
        return render_plan(self)

    def own(self) -> str:
        return f"select({', '.join(repr(c) for c in self.columns)})"


@dataclass(frozen=True, slots=True, eq=False)
class Aggregate(Structural):
    """Group by ``keys`` (public ``key_set`` or private keys) and compute ``aggregations``."""

    child: PlanNode
    keys: tuple[str, ...]
    key_set: KeySet | None
    aggregations: tuple[Aggregation, ...]
    bounding: Bounding = field(default_factory=Bounding)
    selection_share: Fraction = Fraction(1, 4)

    def render(self) -> str:
        head = self.child.render()
        if self.keys:
            kind = f"public {len(self.key_set)} keys" if self.key_set else "private keys"
            head += f".group_by({', '.join(repr(k) for k in self.keys)}; {kind})"
        aggs = ", ".join(_render_agg(a) for a in written_aggregations(self.aggregations))
        return f"{head}.bound({self.bounding.describe()}).agg({aggs})"


PlanNode: TypeAlias = Source | Filter | WithColumn | Select | Aggregate | Join | Alias | PerUnit


def written_aggregations(
    aggregations: tuple[Aggregation, ...],
) -> tuple[Aggregation | Unbounded, ...]:
    """An :class:`Aggregate`'s aggregations as written: some may wait for registered bounds
    (:class:`Unbounded`) until the session plans the query."""
    return cast("tuple[Aggregation | Unbounded, ...]", aggregations)


def render_plan(node: PlanNode) -> str:
    """``node``'s chain as text, without recursion (a query may chain thousands of steps)."""
    parts: list[str] = []
    current: PlanNode = node
    while isinstance(current, Filter | WithColumn | Select):
        parts.append(current.own())
        current = current.child
    parts.append(current.render())
    return ".".join(reversed(parts))


def _render_agg(agg: Aggregation | Unbounded) -> str:
    """``agg`` as plan text, as its family declares (:mod:`dpkit.analytics._families`)."""
    if isinstance(agg, Unbounded):
        return f"{agg.call('registered bounds', quoted=False)} as {agg.name}"
    family = family_of(agg)
    if family is None:
        return f"{type(agg).__name__.lower()}(...) as {agg.name}"
    return family.render(agg)


def render_bounded(kind: str, agg: Any, extra: str = "") -> str:
    """``kind(column, [lower, upper]extra) as name``: the plan text of a clamped aggregation."""
    low, high = agg.bounds
    return f"{kind}({agg.column}, [{low}, {high}]{extra}) as {agg.name}"


# ---------------------------------------------------------------------------------- builder
def _released_columns(agg: Aggregation) -> tuple[str, ...]:
    """The columns an aggregation adds to the main result table (its family's spec)."""
    return released_columns(agg)


def _unknown_aggregation(agg: object) -> InvalidParameterError:
    builders = ", ".join(f"{form.name}()" for form in forms())
    return InvalidParameterError(
        "aggregations",
        agg,
        f"aggregations built with one of the registered builders: {builders}",
    )


MAX_PER_KEY = 10**6
"""The largest per-key truncation bound of a truncated join."""


def check_max_per_key(value: object) -> tuple[int, int] | None:
    """``max_per_key`` as ``(left, right)``: whole numbers in [1, 10^6] (None: not given)."""
    if value is None:
        return None
    pair = value if isinstance(value, tuple) and len(value) == 2 else (value, value)
    allowed = f"a whole number in [1, {MAX_PER_KEY}] or a pair (left, right) of them"
    out: list[int] = []
    for item in pair:
        if isinstance(item, bool) or not isinstance(item, int | np.integer):
            raise InvalidParameterError("max_per_key", value, allowed)
        if not 1 <= int(item) <= MAX_PER_KEY:
            raise InvalidParameterError("max_per_key", value, allowed)
        out.append(int(item))
    return out[0], out[1]


def _join_keys(on: object) -> tuple[tuple[tuple[str, str], ...], bool]:
    """``on`` as (left, right) column pairs, and whether it named each key once (USING)."""
    items: list[object] = list(on) if isinstance(on, list) else [on]
    if not items:
        raise InvalidParameterError("on", on, "one or more keys")
    if all(isinstance(i, str) for i in items):
        names = tuple(check_name(i, "on") for i in items)
        return tuple((n, n) for n in names), True
    pairs = []
    for item in items:
        if not (
            isinstance(item, tuple)
            and len(item) == 2
            and all(isinstance(c, str) and c for c in item)
        ):
            raise InvalidParameterError(
                "on",
                on,
                "a column name, a list of them, a pair (left column, right column) or a list "
                "of pairs",
            )
        pairs.append((item[0], item[1]))
    return tuple(pairs), False


def _normalise_keys(columns: tuple[str, ...], keys: object) -> KeySet | None:
    if keys is None:
        return None
    if isinstance(keys, KeySet):
        if keys.columns != columns:
            raise InvalidParameterError(
                "keys", keys.columns, f"a KeySet over exactly the columns {columns}"
            )
        return keys
    if isinstance(keys, Mapping):
        key_set = KeySet.from_dict(keys)
        if key_set.columns != columns:
            raise InvalidParameterError("keys", list(keys), f"a mapping over {columns} in order")
        return key_set
    if isinstance(keys, str | bytes):
        raise InvalidParameterError("keys", keys, "a list of key values, not a single string")
    values = list(keys)  # type: ignore[call-overload]
    if len(columns) == 1:
        return KeySet.from_values(columns[0], values)
    return KeySet.from_tuples(columns, values)


@dataclass(frozen=True, slots=True, eq=False)
class Query(Structural):
    """An immutable query over the session's table; every method returns a new query."""

    plan: PlanNode = field(default_factory=Source)
    bounding: Bounding = field(default_factory=Bounding)

    def filter(self, predicate: Expr) -> Query:
        """Keep rows where ``predicate`` is TRUE (NULL counts as not TRUE)."""
        if not isinstance(predicate, Expr):
            raise InvalidParameterError(
                "predicate", predicate, "an expression such as col('age') >= 18"
            )
        return replace(self, plan=Filter(self._open(), predicate))

    def with_column(self, name: str, expr: Expr | Any) -> Query:
        """Add a derived column computed from other columns (see :mod:`.expr`)."""
        value = expr if isinstance(expr, Expr) else lit(expr)
        return replace(self, plan=WithColumn(self._open(), check_name(name), value))

    def select(self, *columns: str) -> Query:
        """Keep only these columns (the privacy unit is kept implicitly)."""
        names = tuple(check_name(c, "columns") for c in columns)
        if not names:
            raise InvalidParameterError("columns", columns, "at least one column name")
        return replace(self, plan=Select(self._open(), names))

    def bound(
        self,
        *,
        max_rows: int | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> Query:
        """Declare contribution bounds per privacy unit (see :class:`Bounding`)."""
        return replace(
            self, bounding=self.bounding.merged(Bounding(max_rows, max_groups, max_rows_per_group))
        )

    def join(
        self,
        other: Query | str,
        on: object,
        how: str = "inner",
        *,
        max_per_key: int | tuple[int, int] | None = None,
    ) -> Query:
        """Join another table of the session (by name) or query (an equi-join).

        Args:
            other: a table name (``"orders"``) or an unaggregated query
                (``session.query("orders").filter(...)``).
            on: the keys: a column both sides have (``"o_orderkey"``, like SQL's ``USING``),
                a list of such, a pair ``("l_orderkey", "o_orderkey")`` (left column, right
                column) or a list of pairs.
            how: ``"inner"`` or ``"left"`` (every left row, with NULLs when nothing matches).
            max_per_key: for a join of two private relations on keys that do not link them to
                the same person (a *truncated join*): keep at most this many rows per key value
                on each side (one number, or ``(left, right)``). Each side first keeps at most
                the query's ``max_rows`` rows per person. One person then changes at most
                ``2 * max_rows * (left + right)`` rows of the result, and the query is
                calibrated for that many (see docs/joins.md). Not used by other joins.

        Joins are planned by :mod:`dpkit.analytics._joins`: each row of the result belongs to
        one privacy unit, and contribution bounding (``max_rows``, ``max_groups``) applies
        after the joins, per unit. A column both sides have is then ``alias.column`` (the
        table's name, or the name given with :meth:`alias`).
        """
        right = Query(Source(other)) if isinstance(other, str) else other
        if not isinstance(right, Query) or isinstance(right.plan, Aggregate):
            raise InvalidParameterError(
                "other", other, "a table name or an unaggregated query of the session"
            )
        if how not in ("inner", "left"):
            raise InvalidParameterError(
                "how", how, "'inner' or 'left'", "Right, full and cross joins are not supported."
            )
        pairs, using = _join_keys(on)
        per_key = check_max_per_key(max_per_key)
        joined = Join(self._open(), right.plan, pairs, how, using, None, per_key)  # type: ignore[arg-type]
        return replace(self, plan=joined, bounding=self.bounding.merged(right.bounding))

    def alias(self, name: str) -> Query:
        """Name this relation: after a join, a column both sides have is ``name.column``."""
        return replace(self, plan=Alias(self._open(), check_name(name, "alias")))

    def per_unit(self, *keys: str, **aggregates: tuple[str, str] | str) -> Query:
        """An exact aggregate per group of ``keys``, which must hold the privacy unit (a
        column equal to it, such as the unit column or a link to it): one row per unit and
        group, a row of that unit. Each aggregate is ``name=(function, column)`` with function
        ``count``, ``count_distinct``, ``sum``, ``min``, ``max`` or ``avg``, or
        ``name="count"`` for ``COUNT(*)``. Use it as a table of per-person values, e.g. the
        number of orders of each customer, then aggregate that with differential privacy.
        """
        names = tuple(check_name(k, "keys") for k in keys)
        if not names:
            raise InvalidParameterError("keys", keys, "one or more columns, one holding the unit")
        specs: list[tuple[str, PerUnitFunction, str]] = []
        for name, spec in aggregates.items():
            if spec in ("count", "count_star", ("count_star", "")):
                specs.append((name, "count_star", ""))
                continue
            functions = ("count", "count_distinct", "sum", "min", "max", "avg")
            if (
                not isinstance(spec, tuple)
                or len(spec) != 2
                or spec[0] not in functions
                or not isinstance(spec[1], str)
            ):
                raise InvalidParameterError(
                    name,
                    spec,
                    "'count' or a pair (function, column) with function one of "
                    + ", ".join(functions),
                )
            specs.append((name, spec[0], check_name(spec[1], name)))  # type: ignore[arg-type]
        if not specs:
            raise InvalidParameterError("aggregates", aggregates, "at least one, e.g. n='count'")
        return replace(self, plan=PerUnit(self._open(), names, tuple(specs)))

    def group_by(
        self,
        *columns: str,
        keys: object = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        selection_share: Number = Fraction(1, 4),
    ) -> GroupedQuery:
        """Group by ``columns``.

        Args:
            keys: the public keys (a list of values for one column, a list of tuples, a mapping
                column -> values for their cartesian product, or a :class:`KeySet`). Without
                keys, the groups are chosen privately: a group is released only if its noisy
                count of distinct units clears a threshold, which costs ``selection_share`` of
                the query's ε and needs a δ (so an (ε, δ) query budget).
            max_groups, max_rows_per_group: contribution bounds (see :class:`Bounding`).
        """
        names = tuple(check_name(c, "columns") for c in columns)
        if not names or len(set(names)) != len(names):
            raise InvalidParameterError("columns", columns, "one or more distinct column names")
        share = fraction_of("selection_share", selection_share)
        if not 0 < share < 1:
            raise InvalidParameterError("selection_share", selection_share, "in (0, 1)")
        bounding = self.bounding.merged(Bounding(None, max_groups, max_rows_per_group))
        return GroupedQuery(self._open(), bounding, names, _normalise_keys(names, keys), share)

    def agg(self, *aggregations: Aggregation | Unbounded) -> Query:
        """Aggregate the whole table (one group)."""
        return GroupedQuery(self._open(), self.bounding, (), None, Fraction(1, 4)).agg(
            *aggregations
        )

    def _open(self) -> PlanNode:
        if isinstance(self.plan, Aggregate):
            raise UnsupportedQueryError(
                "this query is already aggregated; start a new one from session.query()"
            )
        return self.plan

    @property
    def is_aggregated(self) -> bool:
        return isinstance(self.plan, Aggregate)

    def render(self) -> str:
        """The plan as text (also stored in the ledger receipt)."""
        return self.plan.render()

    def __repr__(self) -> str:
        return f"Query({self.render()})"


@dataclass(frozen=True, slots=True, eq=False)
class GroupedQuery(Structural):
    """A query grouped by some columns, waiting for :meth:`agg`."""

    plan: PlanNode
    bounding: Bounding
    keys: tuple[str, ...]
    key_set: KeySet | None
    selection_share: Fraction

    def bound(
        self,
        *,
        max_rows: int | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
    ) -> GroupedQuery:
        """Declare contribution bounds per privacy unit (see :class:`Bounding`)."""
        return replace(
            self, bounding=self.bounding.merged(Bounding(max_rows, max_groups, max_rows_per_group))
        )

    def agg(self, *aggregations: Aggregation | Unbounded) -> Query:
        """The aggregations to release, each with its share (``weight``) of the budget."""
        if not aggregations:
            raise InvalidParameterError("aggregations", aggregations, "at least one aggregation")
        names: set[str] = set()
        columns = dict.fromkeys(self.keys, "a group_by column")
        for written in aggregations:
            # without bounds: checked as it will be once the session clamps it (Unbounded)
            agg = written.probe() if isinstance(written, Unbounded) else written
            family = family_of(agg)
            if family is None:
                raise _unknown_aggregation(agg)
            if agg.name in names or agg.name in self.keys:
                raise InvalidParameterError(
                    "name", agg.name, "distinct output names (pass name=... to tell them apart)"
                )
            names.add(agg.name)
            for column in _released_columns(agg):
                if column in columns:
                    raise InvalidParameterError(
                        "name",
                        agg.name,
                        f"a name whose result columns do not clash: {column!r} is already "
                        f"{columns[column]}",
                        "Pass name=... (or rename the group_by column with with_column).",
                    )
                columns[column] = f"a column of {agg.name!r}"
            if family.table and agg.name == "main":
                raise InvalidParameterError(
                    "name", agg.name, "a table name other than 'main' (the main result table)"
                )
            clash = set(self.keys) & set(family.table_columns)
            if clash:
                table_columns = ", ".join(map(repr, family.table_columns))
                raise InvalidParameterError(
                    "group_by",
                    sorted(clash)[0],
                    f"a column name other than {table_columns} "
                    f"(columns of a {family.name}'s table)",
                    "Rename it first, e.g. .with_column('new_name', col(...)).",
                )
        node = Aggregate(
            self.plan,
            self.keys,
            self.key_set,
            # Unbounded ones are resolved by the session before planning (Session.compile)
            cast("tuple[Aggregation, ...]", tuple(aggregations)),
            self.bounding,
            self.selection_share,
        )
        return Query(node, self.bounding)
