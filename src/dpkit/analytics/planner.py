"""From a query to a :class:`CompiledQuery`: validation, rewrites, sensitivity, mechanisms.

1. **Validate** the plan against the table's schema (column names and kinds; the privacy unit
   column must exist and cannot be redefined).
2. **Rewrite** the relational steps with pure ``steps -> steps`` rules (:func:`merge_filters`,
   :func:`push_filters`, :func:`prune_columns`); each preserves the result (property-tested).
3. **Stability -> sensitivity**: the declared contribution bounds (:mod:`.bounding`) and the
   declared value bounds give each aggregate's L1 / L2 sensitivity, in integer grid units.
4. **Mechanism choice and calibration**: the query budget's kind decides — ``PureDP``: geometric
   (discrete Laplace) noise; ``ZCDP``: discrete Gaussian noise; ``ApproxDP``: whichever of the two
   has the smaller noise for the row counts (``mechanism=`` overrides), and partition selection
   by a noisy threshold for private keys. Quantiles use the exponential mechanism (:mod:`._em`).
   A sum whose values are declared to lie in a union of intervals (``sum(col, values=...)``)
   gets, from a pure share, whichever of geometric, staircase and ladder noise has the smallest
   expected absolute error for the neighbour set of one unit (:mod:`._valueset`).
   The budget is split across aggregations by their weights, explicitly; the split and every
   measurement's loss are computed by the measurements' privacy maps and their composition is
   checked against the query budget, exactly.

Noise is added in :meth:`CompiledQuery.release`, in Python, to the exact integer aggregates the
engine returned.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, TypeAlias

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env
from scipy.stats import norm

from dpkit._exact import log_upper, sqrt_upper
from dpkit.analytics._em import em_quantile_index, rank_error_bound
from dpkit.analytics._valueset import choose_noise, describe_choice, grid_ranges, merge_ranges
from dpkit.analytics.bounding import Contribution, contribution
from dpkit.analytics.engines._columns import RESERVED_PREFIX, canonical
from dpkit.analytics.engines.base import BinSpec, BoundedPlan, Output, Step, ValueSpec
from dpkit.analytics.engines.pandas_engine import grid_indices
from dpkit.analytics.expr import (
    Binary,
    Col,
    ColumnKind,
    Unary,
    coerce_temporal_literals,
    columns_of,
    infer_kind,
)
from dpkit.analytics.query import (
    Aggregate,
    Aggregation,
    Bounding,
    Count,
    CountUnits,
    Filter,
    Histogram,
    KeySet,
    Mean,
    PlanNode,
    Quantile,
    Query,
    Select,
    Source,
    Sum,
    Variance,
    WithColumn,
    Workload,
    render_values,
)
from dpkit.analytics.results import Accuracy
from dpkit.core.framework import Measurement
from dpkit.core.losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, compose
from dpkit.core.spaces import AtomDomain, L2Distance, VectorDomain
from dpkit.errors import InvalidParameterError, PrivacyCheckError, UnsupportedQueryError
from dpkit.mechanisms import make_geometric
from dpkit.noise import random_words
from dpkit.noise.distributions import DiscreteGaussian, DiscreteLaplace, GridNoise
from dpkit.noise.grid import choose_exponent

__all__ = [
    "CompiledQuery",
    "Mechanism",
    "compile_query",
    "linear_noise_halfwidth",
    "merge_filters",
    "normalise_key_set",
    "prune_columns",
    "push_filters",
    "rewrite",
    "validate",
]

Mechanism: TypeAlias = Literal["auto", "laplace", "gaussian"]
Family: TypeAlias = Literal["pure", "zcdp"]


# ------------------------------------------------------------------ validation
@dataclass(frozen=True, slots=True)
class Validated:
    steps: tuple[Step, ...]
    schema: dict[str, ColumnKind]
    aggregate: Aggregate
    key_set: KeySet | None = None


def _flatten(node: PlanNode) -> list[PlanNode]:
    chain: list[PlanNode] = []
    current: PlanNode = node
    while not isinstance(current, Source):
        chain.append(current)
        current = current.child
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
    _check_not_reserved(unit, "privacy_unit")
    current: dict[str, ColumnKind] = dict(schema)
    steps: list[Step] = []
    aggregate = query.plan
    for node in _flatten(aggregate)[:-1]:
        if isinstance(node, Filter | WithColumn):
            expr = node.predicate if isinstance(node, Filter) else node.expr
            for name in columns_of(expr):
                _check_not_reserved(name)
        if isinstance(node, WithColumn):
            _check_not_reserved(node.name)
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
    key_set = aggregate.key_set
    if key_set is not None:
        key_set = normalise_key_set(key_set, [current[k] for k in aggregate.keys])
    for agg in aggregate.aggregations:
        for name in _value_columns(agg):
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
    return Validated(tuple(steps), current, aggregate, key_set)


def _value_columns(agg: Aggregation) -> tuple[str, ...]:
    if isinstance(agg, Count | CountUnits):
        return ()
    if isinstance(agg, Workload):
        return (agg.column,) if agg.column else ()
    return (agg.column,)


# ------------------------------------------------------------------ rewrites
def merge_filters(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Adjacent filters become one conjunction."""
    out: list[Step] = []
    for step in steps:
        if step.kind == "filter" and out and out[-1].kind == "filter":
            previous = out.pop()
            assert previous.expr is not None and step.expr is not None
            out.append(Step("filter", expr=Binary("and", previous.expr, step.expr)))
        else:
            out.append(step)
    return tuple(out)


def push_filters(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Move each filter before derived columns it does not read (filter early)."""
    out = list(steps)
    changed = True
    while changed:
        changed = False
        for i in range(1, len(out)):
            before, step = out[i - 1], out[i]
            if (
                step.kind == "filter"
                and before.kind == "derive"
                and step.expr is not None
                and before.name not in columns_of(step.expr)
            ):
                out[i - 1], out[i] = step, before
                changed = True
    return tuple(out)


def prune_columns(steps: tuple[Step, ...], needed: frozenset[str]) -> tuple[Step, ...]:
    """Drop derived columns nothing reads, and selects (they only restrict names)."""
    out: list[Step] = []
    live = set(needed)
    for step in reversed(steps):
        if step.kind == "select":
            continue
        if step.kind == "derive":
            if step.name not in live:
                continue
            live.discard(step.name)
        assert step.expr is not None
        live |= columns_of(step.expr)
        out.append(step)
    return tuple(reversed(out))


def rewrite(steps: tuple[Step, ...], needed: frozenset[str]) -> tuple[Step, ...]:
    """All rewrite rules, in order."""
    return prune_columns(push_filters(merge_filters(steps)), needed)


# ------------------------------------------------------------------ helpers
def _ceil_log2(x: Fraction) -> int:
    """Smallest e with 2^e >= x (x > 0)."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e < x:
        e += 1
    while Fraction(2) ** (e - 1) >= x:
        e -= 1
    return e


def _floor_log2(x: Fraction) -> int:
    e = _ceil_log2(x)
    return e if Fraction(2) ** e == x else e - 1


def _grid_range(bounds: tuple[Fraction, Fraction], exponent: int) -> tuple[float, float, int, int]:
    low_f, high_f = float(bounds[0]), float(bounds[1])
    idx, _ = grid_indices(np.array([low_f, high_f]), low_f, high_f, exponent)
    return low_f, high_f, int(idx[0]), int(idx[1])


def _sqrt_down(x: Fraction) -> Fraction:
    """A fraction <= sqrt(x)."""
    guess = Fraction(math.sqrt(float(x))).limit_denominator(10**12)
    while guess * guess > x:
        guess *= Fraction(999_999_999_999, 10**12)
    return guess


def _rho_for(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest ρ (on a fine grid) whose zCDP conversion at δ gives at most ε."""
    low, high = 0.0, float(epsilon)
    for _ in range(50):
        mid = (low + high) / 2
        if mid > 0 and ZCDP(Fraction(mid)).to_approx(delta).epsilon <= epsilon:
            low = mid
        else:
            high = mid
    if low <= 0:
        raise UnsupportedQueryError("the (ε, δ) budget is too small for the Gaussian mechanism")
    return Fraction(low)


@dataclass(frozen=True, slots=True)
class Share:
    """A part of the query budget: ε (pure) or ρ (zCDP)."""

    family: Family
    amount: Fraction

    def scaled(self, factor: Fraction) -> Share:
        return Share(self.family, self.amount * factor)

    def loss(self) -> PrivacyLoss:
        return PureDP(self.amount) if self.family == "pure" else ZCDP(self.amount)

    def epsilon(self) -> Fraction:
        """For pure-DP mechanisms (the exponential mechanism) inside a zCDP query: ε²/2 <= ρ."""
        return self.amount if self.family == "pure" else _sqrt_down(2 * self.amount)


def integer_gaussian(l2_squared: int, rho: Fraction) -> Measurement[Any]:
    """Discrete Gaussian noise on integer vectors at L2 distance <= sqrt(l2_squared): ρ-zCDP.

    σ² = s²/(2ρ) for s >= sqrt(l2_squared) (exact when it is a perfect square), so the privacy
    map gives exactly ρ at d_in = s (Canonne, Kamath & Steinke 2020, Thm. 14, coordinate-wise).
    """
    root = math.isqrt(l2_squared)
    s = Fraction(root) if root * root == l2_squared else sqrt_upper(Fraction(l2_squared))
    sigma2 = s * s / (2 * rho)
    lattice = DiscreteGaussian(sigma2)

    def function(data: Any) -> Any:
        values = np.asarray(data, dtype=np.int64)
        return values + lattice.sample(values.size).reshape(values.shape)

    return Measurement(
        VectorDomain(AtomDomain("int")),
        L2Distance(),
        "zcdp",
        function,
        lambda d: ZCDP(d * d / (2 * sigma2)),
        name="discrete_gaussian",
        noise=GridNoise(lattice, 0),
        d_in=s,
        info={"sigma2": sigma2},
    )


def _integer_noise(share: Share, l1: int, l2_squared: int) -> Measurement[Any]:
    if share.family == "pure":
        return make_geometric(sensitivity=l1, epsilon=share.amount)
    return integer_gaussian(l2_squared, share.amount)


_WIDE = 50.0  # above this σ (in lattice steps) the discrete Gaussian's moments are σ's own


def _wide_gaussian(measurement: Measurement[Any]) -> float | None:
    """σ of a wide discrete Gaussian (whose stats would need a huge summation window), else None.

    For σ >= 50 the discrete Gaussian's pmf equals the continuous density at the integers up to
    a relative error below e^{-2π²σ²} (Poisson summation), so its variance, E|Z| and quantiles are
    the continuous ones to far better than float precision.
    """
    lattice = getattr(measurement.noise, "lattice", None)
    if isinstance(lattice, DiscreteGaussian) and lattice.sigma > _WIDE:
        return lattice.sigma
    return None


def noise_halfwidth(measurement: Measurement[Any], alpha: float) -> float:
    """The smallest h with P(|noise| > h) <= alpha, in the measurement's output units."""
    sigma = _wide_gaussian(measurement)
    if sigma is not None:
        return float(math.ceil(float(norm.ppf(1 - alpha / 2)) * sigma))
    return float(measurement.noise.interval_halfwidth(alpha))


def noise_variance(measurement: Measurement[Any]) -> float:
    sigma = _wide_gaussian(measurement)
    return sigma * sigma if sigma is not None else float(measurement.noise.variance())


def noise_expected_abs(measurement: Measurement[Any]) -> float:
    sigma = _wide_gaussian(measurement)
    if sigma is not None:
        return sigma * math.sqrt(2 / math.pi)
    return float(measurement.noise.expected_abs())


def linear_noise_halfwidth(
    measurement: Measurement[Any], weights: Sequence[float], alpha: float
) -> float:
    """An h with P(|Σ_j w_j Z_j| > h) <= alpha for independent copies Z_j of the measurement's
    lattice noise (discrete Laplace or discrete Gaussian), in lattice units.

    Never a normal approximation (it under-covers the heavier-tailed discrete Laplace):

    * one non-zero weight: the exact quantile, ``|w|·tail_bound(alpha)``;
    * several: the smaller of two valid bounds — the union bound ``‖w‖₁·tail_bound(alpha/k)``
      over the k non-zero terms, and a Chernoff bound ``min_s (K(s) + ln(2/alpha)) / s`` with
      K the cumulant generating function of the sum (discrete Laplace:
      Σ log[(1-p)² / ((1-p e^{s w_j})(1-p e^{-s w_j}))]; the discrete Gaussian is sub-Gaussian
      with parameter σ (Canonne, Kamath & Steinke 2020), so K(s) <= s²σ²‖w‖₂²/2).
    """
    w = np.array([abs(float(v)) for v in weights if v != 0], dtype=np.float64)
    if w.size == 0:
        return 0.0
    lattice = getattr(measurement.noise, "lattice", None)
    sigma = _wide_gaussian(measurement)

    def tail(a: float) -> float:
        if sigma is not None:
            return float(math.ceil(float(norm.ppf(1 - a / 2)) * sigma))
        assert lattice is not None
        return float(lattice.tail_bound(a))

    if w.size == 1:
        return float(w[0]) * tail(alpha)
    union = float(w.sum()) * tail(alpha / w.size)
    log_two_over_alpha = math.log(2 / alpha)
    if isinstance(lattice, DiscreteGaussian):
        chernoff = lattice.sigma * float(np.sqrt(np.sum(w * w))) * math.sqrt(2 * log_two_over_alpha)
    elif isinstance(lattice, DiscreteLaplace):
        p = math.exp(-1.0 / float(lattice.scale))
        s_max = -math.log(p) / float(w.max())  # the MGF is finite for |s·w_j| < ln(1/p)
        s = s_max * np.linspace(1e-4, 1 - 1e-4, 4000)
        sw = np.outer(s, w)
        with np.errstate(divide="ignore", invalid="ignore"):
            cumulant = np.sum(
                2 * math.log1p(-p) - np.log1p(-p * np.exp(sw)) - np.log1p(-p * np.exp(-sw)),
                axis=1,
            )
        bounds = (cumulant + log_two_over_alpha) / s
        chernoff = float(np.nanmin(bounds)) if np.isfinite(bounds).any() else math.inf
    else:
        chernoff = math.inf
    # a relative margin for the float arithmetic of the bound
    return min(union, chernoff * (1 + 1e-9))


# ------------------------------------------------------------------ compiled pieces
GroupKey: TypeAlias = tuple[Any, ...]


@dataclass
class _Registry:
    """Deduplicated value specs and outputs of one bounded plan."""

    values: list[ValueSpec] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)

    def value(self, spec: ValueSpec) -> int:
        if spec not in self.values:
            self.values.append(spec)
        return self.values.index(spec)

    def output(self, kind: Any, value: int = -1) -> int:
        out = Output(kind, value)
        if out not in self.outputs:
            self.outputs.append(out)
        return self.outputs.index(out)


@dataclass
class _Noisy:
    """One measurement on one integer output vector."""

    output: int
    measurement: Measurement[Any]
    _halfwidths: dict[float, float] = field(default_factory=dict, repr=False, compare=False)

    def apply(self, exact: np.ndarray) -> np.ndarray:
        if exact.size == 0:
            return exact.astype(np.int64)
        return np.asarray(self.measurement(exact.astype(np.int64)), dtype=np.int64)

    def halfwidth(self, alpha: float) -> float:
        """Cached per alpha: a compiled query may be released many times (audits)."""
        if alpha not in self._halfwidths:
            self._halfwidths[alpha] = noise_halfwidth(self.measurement, alpha)
        return self._halfwidths[alpha]

    def variance(self) -> float:
        return noise_variance(self.measurement)

    def expected_abs(self) -> float:
        return noise_expected_abs(self.measurement)

    @property
    def loss(self) -> PrivacyLoss:
        return self.measurement.loss


Finisher: TypeAlias = Callable[["_Context"], None]


@dataclass
class _Context:
    """What release() passes to each aggregation's finisher.

    ``groups`` are the groups' canonical identities (keys of ``extra``); ``labels`` the key
    values shown in the released tables, in the same order.
    """

    groups: list[GroupKey]
    main: dict[int, np.ndarray]  # output index -> exact values in group order
    extra: dict[int, dict[GroupKey, dict[int, list[int]]]]  # plan -> group -> bin -> outputs
    alpha: float
    columns: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    accuracy: dict[str, Accuracy] = field(default_factory=dict)
    key_names: tuple[str, ...] = ()
    labels: list[GroupKey] = field(default_factory=list)


@dataclass(frozen=True)
class CompiledQuery:
    """A query ready to run: the exact relational plans and the calibrated measurements.

    Attributes:
        plans: the bounded plans to run (plan 0 is the main one).
        loss: the total privacy loss of releasing this query (checked <= the query budget).
        split: the loss of each aggregation (and of partition selection).
        description: a readable account of bounds, sensitivities and mechanisms.
    """

    plans: tuple[BoundedPlan, ...]
    loss: PrivacyLoss
    split: Mapping[str, PrivacyLoss]
    description: str
    keys: tuple[str, ...]
    key_set: KeySet | None
    finishers: tuple[Finisher, ...]
    selection: _Noisy | None = None
    selection_threshold: int = 0
    mechanisms: tuple[str, ...] = ()

    def explain(self) -> str:
        """How the query will be answered, without touching data."""
        return self.description

    def release(
        self, results: Sequence[pa.Table], alpha: float = 0.05
    ) -> tuple[dict[str, pd.DataFrame], dict[str, Accuracy]]:
        """Add noise to the engine's exact results and build the released tables.

        Engine results are matched to groups by the key values' canonical identity
        (:func:`~dpkit.analytics.engines._columns.canonical`), read from the plans' reserved
        result columns.
        """
        main_rows, seen = _rows_by_group(results[0], self.plans[0])
        if self.key_set is not None:
            labels = list(self.key_set.rows)
            groups = [tuple(canonical(v) for v in row) for row in labels]
        elif not self.keys:
            labels = groups = [()]
        else:
            groups = sorted(main_rows, key=_sort_key)
            labels = [seen[g] for g in groups]
        n_out = len(self.plans[0].outputs)
        empty = {0: [0] * n_out}
        exact = {
            i: np.array([int(main_rows.get(g, empty)[0][i]) for g in groups], dtype=object)
            for i in range(n_out)
        }
        if self.selection is not None:
            units = exact[self.selection.output]
            noisy_units = self.selection.apply(np.array(units, dtype=np.int64))
            chosen = [i for i, v in enumerate(noisy_units) if v >= self.selection_threshold]
            groups = [groups[i] for i in chosen]
            labels = [labels[i] for i in chosen]
            exact = {i: values[chosen] for i, values in exact.items()}
        extra = {
            p: _rows_by_group(table, self.plans[p])[0] for p, table in enumerate(results) if p > 0
        }
        context = _Context(
            groups,
            {i: np.array(v, dtype=object) for i, v in exact.items()},
            extra,
            alpha,
            key_names=self.keys,
            labels=labels,
        )
        for finish in self.finishers:
            finish(context)
        main = pd.DataFrame({k: [g[i] for g in labels] for i, k in enumerate(self.keys)})
        for name, values in context.columns.items():
            main[name] = values
        return {"main": main, **context.tables}, context.accuracy


def _sort_key(group: GroupKey) -> tuple[Any, ...]:
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in group)


def _as_int(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return int(value)
    return int(value)


def _rows_by_group(
    table: pa.Table, plan: BoundedPlan
) -> tuple[dict[GroupKey, dict[int, list[int]]], dict[GroupKey, GroupKey]]:
    """The engine's exact outputs by canonical group identity -> bin (0 without bins), and the
    key values the engine returned for each identity (for display).

    Columns are read by their reserved names (:attr:`BoundedPlan.result_columns`), never by a
    user's column name.
    """
    expected = list(plan.result_columns)
    if list(table.column_names) != expected:
        raise PrivacyCheckError(
            "internal check failed: an engine returned columns "
            f"{list(table.column_names)}, not {expected}; nothing was released. Please report "
            "this."
        )
    data = table.to_pydict()
    n_keys = len(plan.keys)
    key_cols = [data[n] for n in plan.group_columns[:n_keys]]
    bins = data[plan.group_columns[n_keys]] if plan.bins is not None else None
    out_cols = [data[n] for n in plan.output_columns]
    result: dict[GroupKey, dict[int, list[int]]] = {}
    seen: dict[GroupKey, GroupKey] = {}
    for row in range(table.num_rows):
        shown = tuple(col[row] for col in key_cols)
        key = tuple(canonical(v) for v in shown)
        seen.setdefault(key, shown)
        b = int(bins[row]) if bins is not None else 0
        if b in result.get(key, {}):
            # one group, two rows: the engine bounded them as two groups (sensitivity broken)
            raise PrivacyCheckError(
                "internal check failed: an engine returned one group twice (keys that compare "
                "equal); nothing was released. Please report this."
            )
        result.setdefault(key, {})[b] = [_as_int(col[row]) for col in out_cols]
    return result, seen


# ------------------------------------------------------------------ compile
def _family_for(
    budget: PrivacyLoss,
    mechanism: Mechanism,
    contrib: Contribution,
    private_keys: bool,
    selection_share: Fraction,
) -> tuple[Share, Share | None, Fraction]:
    """(aggregation share, selection share, selection δ)."""
    if mechanism not in ("auto", "laplace", "gaussian"):
        raise InvalidParameterError("mechanism", mechanism, "'auto', 'laplace' or 'gaussian'")
    if isinstance(budget, PureDP):
        if private_keys:
            raise UnsupportedQueryError(
                "private group keys need a δ: the noisy threshold that picks which groups to "
                "release fails with a small probability δ. Pass an (ε, δ) budget (e.g. "
                "epsilon=1, delta=1e-6) or declare the keys: group_by(col, keys=[...])."
            )
        if mechanism == "gaussian":
            raise UnsupportedQueryError(
                "the Gaussian mechanism cannot be pure ε-DP: pass rho= (zCDP) or delta= too"
            )
        return Share("pure", budget.epsilon), None, Fraction(0)
    if isinstance(budget, ZCDP):
        if private_keys:
            raise UnsupportedQueryError(
                "private group keys need an (ε, δ) budget (partition selection is not zCDP); "
                "pass epsilon= and delta=, or declare the keys: group_by(col, keys=[...])."
            )
        if mechanism == "laplace":
            return Share("pure", _sqrt_down(2 * budget.rho)), None, Fraction(0)
        return Share("zcdp", budget.rho), None, Fraction(0)
    epsilon, delta = budget.epsilon, budget.delta
    if private_keys and delta == 0:
        raise UnsupportedQueryError(
            "private group keys need δ > 0 for partition selection; pass delta=1e-6 or so, or "
            "declare the keys."
        )
    selection: Share | None = None
    sel_delta = Fraction(0)
    agg_epsilon = epsilon
    if private_keys:
        selection = Share("pure", epsilon * selection_share)
        agg_epsilon = epsilon - selection.amount
    use_gauss = mechanism == "gaussian"
    agg_delta = delta / 2 if private_keys else delta
    if mechanism == "auto" and agg_delta > 0:
        rho = _rho_for(agg_epsilon, agg_delta)
        laplace_std = math.sqrt(2) * contrib.rows_l1 / float(agg_epsilon)
        gauss_std = math.sqrt(contrib.rows_l2_squared / (2 * float(rho)))
        use_gauss = gauss_std < laplace_std
    if use_gauss:
        if agg_delta == 0:
            raise UnsupportedQueryError("the Gaussian mechanism needs δ > 0")
        sel_delta = delta - agg_delta if private_keys else Fraction(0)
        return Share("zcdp", _rho_for(agg_epsilon, agg_delta)), selection, sel_delta
    return Share("pure", agg_epsilon), selection, delta if private_keys else Fraction(0)


def compile_query(
    query: Query,
    schema: Mapping[str, ColumnKind],
    unit: str,
    budget: PrivacyLoss,
    *,
    mechanism: Mechanism = "auto",
    defaults: Bounding | None = None,
    salt: int | None = None,
) -> CompiledQuery:
    """Validate, rewrite, bound and calibrate ``query`` for ``budget``; no data is read."""
    checked = validate(query, schema, unit)
    aggregate = checked.aggregate
    key_set = checked.key_set
    bounding = (defaults or Bounding()).merged(aggregate.bounding)
    grouped = bool(aggregate.keys)
    contrib = contribution(bounding, grouped)
    private_keys = grouped and key_set is None
    agg_share, selection_share, selection_delta = _family_for(
        budget, mechanism, contrib, private_keys, aggregate.selection_share
    )
    needed = frozenset(
        {unit, *aggregate.keys, *(c for a in aggregate.aggregations for c in _value_columns(a))}
    )
    steps = rewrite(checked.steps, needed)
    if salt is None:
        salt = int(random_words(1)[0] >> np.uint64(2))

    total_weight = sum((a.weight for a in aggregate.aggregations), Fraction(0))
    main = _Registry()
    main.output("rows")  # the main plan always lists the groups that keep rows
    extra_plans: list[BoundedPlan] = []
    finishers: list[Finisher] = []
    split: dict[str, PrivacyLoss] = {}
    mechanisms: set[str] = set()
    lines = [
        f"plan: {query.render()}",
        f"privacy unit: {unit!r}; bounds: {bounding.describe()} -> one unit adds at most "
        f"{contrib.rows_l1} rows, {contrib.rows_per_group} per group, in "
        f"{contrib.groups} group(s)",
    ]

    def make_plan(registry: _Registry, bins: BinSpec | None = None) -> BoundedPlan:
        return BoundedPlan(
            steps,
            unit,
            aggregate.keys,
            key_set,
            bounding.max_rows,
            bounding.max_groups,
            bounding.max_rows_per_group,
            salt,
            tuple(registry.values),
            tuple(registry.outputs),
            bins,
        )

    n_keys = len(key_set) if key_set is not None else None
    for agg in aggregate.aggregations:
        share = agg_share.scaled(agg.weight / total_weight)
        finisher, losses, text = _compile_aggregation(
            agg, share, contrib, main, extra_plans, make_plan, n_keys, private_keys, mechanism
        )
        finishers.append(finisher)
        mechanisms.update(_mechanism_names(text))
        split[agg.name] = compose(*losses)
        lines.append(f"{agg.name}: {text}; loss {split[agg.name]}")

    selection: _Noisy | None = None
    threshold = 0
    if selection_share is not None:
        units_out = main.output("units")
        m = contrib.groups
        measurement = make_geometric(sensitivity=m, epsilon=selection_share.amount)
        t = Fraction(m) / selection_share.amount
        h = math.ceil(t * log_upper(Fraction(m) / selection_delta))
        threshold = 1 + h
        selection = _Noisy(units_out, measurement)
        mechanisms.add("partition_selection")
        split["partition selection"] = ApproxDP(selection_share.amount, selection_delta)
        lines.append(
            f"partition selection: release a group when its distinct-unit count + discrete "
            f"Laplace(scale {float(t):.4g}) >= {threshold}; loss {split['partition selection']}"
            f" (δ = {m}·P[noise >= {h}] <= {float(selection_delta):.3g})"
        )

    plans = (make_plan(main), *extra_plans)
    total = _total_loss(split, agg_share, selection is not None)
    if not total <= budget:
        raise PrivacyCheckError(
            f"internal check failed: the calibrated loss {total} exceeds the query budget "
            f"{budget}; nothing was run. Please report this."
        )
    lines.append(f"total loss: {total} (query budget {budget})")
    return CompiledQuery(
        plans,
        total,
        split,
        "\n".join(lines),
        aggregate.keys,
        key_set,
        tuple(finishers),
        selection,
        threshold,
        tuple(sorted(mechanisms)),
    )


_MECHANISM_RE = re.compile(
    r"\b(geometric|discrete_gaussian|staircase|ladder) noise\b|\b(exponential) mechanism\b"
)


def _mechanism_names(text: str) -> set[str]:
    """The mechanisms an explanation line says it uses ('<name> noise', 'exponential mechanism');
    alternatives it only mentions (e.g. 'vs staircase 3,522') do not count."""
    return {a or b for a, b in _MECHANISM_RE.findall(text)}


def _total_loss(split: Mapping[str, PrivacyLoss], share: Share, selection: bool) -> PrivacyLoss:
    parts = [loss for name, loss in split.items() if name != "partition selection"]
    aggregated = compose(*parts)
    if selection:
        sel = split["partition selection"]
        if isinstance(aggregated, ZCDP):
            assert isinstance(sel, ApproxDP)
            aggregated = aggregated.to_approx(sel.delta)
        return compose(aggregated, sel)
    return aggregated


MAX_ROWS_FOR_INTERVALS = 2**40
"""Sum intervals include the rounding of up to this many rows (about 1.1 trillion)."""


@dataclass(frozen=True, slots=True)
class SumGrid:
    """The two grids of a noisy sum.

    The engine rounds each value to the *fine* grid 2^fine (as fine as a row's value allows in
    a BIGINT: |value| / 2^fine <= 2^62) and sums the integers exactly (HUGEINT in DuckDB,
    DECIMAL(38, 0) in Spark, Python int in the reference engine). The exact total is then
    rounded once to the *noise* grid 2^coarse, where the noise is added. One unit's ``c`` rows
    in a group move the fine total by at most ``c·M`` (M = the bound's magnitude in fine units)
    and so the rounded total by at most ``⌈c·M/r⌉ <= c·per_row`` noise steps (rounding to
    nearest is shift-consistent: ⌊a + ½⌋ - ⌊b + ½⌋ <= ⌈a - b⌉), with ``per_row = ⌈M/r⌉`` and
    ``r = 2^(coarse - fine)``: the sensitivity is that of rounding each row to the noise grid.

    The released total differs from the exact sum of the clamped values by the noise, plus at
    most ``2^coarse / 2`` (rounding the total) plus ``n · 2^fine / 2`` (rounding the n rows):
    :meth:`rounding_bound` adds the last for n up to :data:`MAX_ROWS_FOR_INTERVALS`, which is
    below 2^-22 of the bound's magnitude (and below 1e-6 of the noise scale when ε / L1 <= 4).
    """

    fine: int
    coarse: int
    fine_per_row: int

    @property
    def ratio(self) -> int:
        return 1 << (self.coarse - self.fine)

    @property
    def per_row(self) -> int:
        """A row's largest |value| in noise-grid steps (rounded up)."""
        return -(-self.fine_per_row // self.ratio)

    def to_coarse(self, total: int) -> int:
        """An exact fine-grid total rounded (half up) to the noise grid."""
        r = self.ratio
        return total if r == 1 else (total + r // 2) // r

    def rounding_bound(self, rows: int = MAX_ROWS_FOR_INTERVALS) -> float:
        """The most the rounding moves a total of up to ``rows`` rows, in value units."""
        total = 0.0 if self.ratio == 1 else math.ldexp(0.5, self.coarse)
        return total + rows * math.ldexp(0.5, self.fine)


def _fine_exponent(magnitude: Fraction, coarse: int, headroom: int = 62) -> int:
    """The finest grid on which |value| <= magnitude is at most 2^headroom steps (and 2^-e a
    finite double), never coarser than the noise grid."""
    top = _ceil_log2(max(magnitude, Fraction(1, 2**1000)))
    return max(min(coarse, top - headroom), -1000)


def sum_grid(bounds: tuple[Fraction, Fraction], coarse: int) -> SumGrid:
    """The :class:`SumGrid` of a sum clamped to ``bounds`` with noise on grid 2^coarse."""
    magnitude = max(abs(bounds[0]), abs(bounds[1]))
    fine = _fine_exponent(magnitude, coarse)
    _, _, lo, hi = _grid_range(bounds, fine)
    return SumGrid(fine, coarse, max(abs(lo), abs(hi)))


def _value_exponent_for_sum(
    share: Share, contrib: Contribution, magnitude: Fraction, per_row: Fraction
) -> int:
    """Grid exponent for a summed value: ~2^-20 of the noise scale, sums kept in int64."""
    if share.family == "pure":
        scale = contrib.rows_l1 * per_row / share.amount
    else:
        scale = (
            Fraction(math.sqrt(contrib.rows_l2_squared)) * per_row / _sqrt_down(2 * share.amount)
        )
    exponent = choose_exponent(scale) if scale > 0 else 0
    return max(exponent, _ceil_log2(max(magnitude, Fraction(1, 2**1000))) - 30)


def _compile_aggregation(
    agg: Aggregation,
    share: Share,
    contrib: Contribution,
    main: _Registry,
    extra_plans: list[BoundedPlan],
    make_plan: Callable[..., BoundedPlan],
    n_keys: int | None,
    private_keys: bool,
    mechanism: Mechanism = "auto",
) -> tuple[Finisher, list[PrivacyLoss], str]:
    l1, l2sq = contrib.rows_l1, contrib.rows_l2_squared
    if isinstance(agg, Sum) and agg.values is not None:
        return _compile_values_sum(agg, share, contrib, main, mechanism)
    if isinstance(agg, Count):
        noisy = _Noisy(main.output("rows"), _integer_noise(share, l1, l2sq))
        return (
            _count_finisher(agg.name, noisy),
            [noisy.loss],
            (f"{noisy.measurement.name} noise, sensitivity L1={l1}, L2²={l2sq}"),
        )
    if isinstance(agg, CountUnits):
        m = contrib.groups
        noisy = _Noisy(main.output("units"), _integer_noise(share, m, m))
        return (
            _count_finisher(agg.name, noisy),
            [noisy.loss],
            (f"{noisy.measurement.name} noise, sensitivity L1={m}, L2²={m}"),
        )
    if isinstance(agg, Sum):
        magnitude = max(abs(agg.bounds[0]), abs(agg.bounds[1]))
        if magnitude == 0:
            raise InvalidParameterError("bounds", agg.bounds, "not both zero (the sum is 0)")
        grid = sum_grid(agg.bounds, _value_exponent_for_sum(share, contrib, magnitude, magnitude))
        low_f, high_f, _, _ = _grid_range(agg.bounds, grid.fine)
        per_row = grid.per_row
        value = main.value(ValueSpec(agg.column, low_f, high_f, grid.fine))
        noisy = _Noisy(
            main.output("sum", value), _integer_noise(share, l1 * per_row, l2sq * per_row * per_row)
        )
        return (
            _sum_finisher(agg.name, noisy, grid),
            [noisy.loss],
            (
                f"clamp to [{low_f:g}, {high_f:g}]; exact sum on grid 2^{grid.fine}, rounded to "
                f"grid 2^{grid.coarse}; {noisy.measurement.name} noise, sensitivity "
                f"L1={l1}·{per_row} grid steps"
            ),
        )
    if isinstance(agg, Mean | Variance):
        return _compile_moments(agg, share, contrib, main)
    if isinstance(agg, Quantile):
        return _compile_quantile(agg, share, contrib, extra_plans, make_plan)
    if isinstance(agg, Histogram):
        registry = _Registry()
        out = registry.output("rows")
        plan_index = len(extra_plans) + 1
        extra_plans.append(
            make_plan(registry, BinSpec("edges", column=agg.column, edges=agg.edges))
        )
        noisy = _Noisy(out, _integer_noise(share, l1, l2sq))
        return (
            _histogram_finisher(agg, noisy, plan_index),
            [noisy.loss],
            (f"{len(agg.edges) - 1} bins; {noisy.measurement.name} noise, sensitivity L1={l1}"),
        )
    return _compile_workload(agg, share, contrib, main, n_keys, private_keys)


def _count_finisher(name: str, noisy: _Noisy) -> Finisher:
    def finish(ctx: _Context) -> None:
        released = noisy.apply(np.array(ctx.main[noisy.output], dtype=np.int64))
        h = noisy.halfwidth(ctx.alpha)
        ctx.columns[name] = released
        ctx.columns[f"{name}_low"] = released - h
        ctx.columns[f"{name}_high"] = released + h
        ctx.accuracy[name] = Accuracy(
            "exact", h, ctx.alpha, noisy.measurement.name, noisy.loss, noisy.expected_abs()
        )

    return finish


def _sum_finisher(name: str, noisy: _Noisy, grid: SumGrid, note: str = "") -> Finisher:
    """Noise on the exact fine-grid totals rounded to the noise grid (see :class:`SumGrid`); the
    interval adds the rounding bound to the noise's exact quantile."""
    g = math.ldexp(1.0, grid.coarse)

    def finish(ctx: _Context) -> None:
        totals = [grid.to_coarse(int(v)) for v in ctx.main[noisy.output]]
        released = noisy.apply(np.array(totals, dtype=np.int64))
        values = np.ldexp(released.astype(np.float64), grid.coarse)
        h = noisy.halfwidth(ctx.alpha) * g + grid.rounding_bound()
        ctx.columns[name] = values
        ctx.columns[f"{name}_low"] = values - h
        ctx.columns[f"{name}_high"] = values + h
        ctx.accuracy[name] = Accuracy(
            "exact",
            h,
            ctx.alpha,
            noisy.measurement.name,
            noisy.loss,
            noisy.expected_abs() * g,
            note,
        )

    return finish


def _compile_values_sum(
    agg: Sum, share: Share, contrib: Contribution, main: _Registry, mechanism: Mechanism
) -> tuple[Finisher, list[PrivacyLoss], str]:
    """A sum over a declared union of intervals (:mod:`._valueset`): values are moved to the
    nearest declared value on the grid; a pure share picks geometric, staircase or ladder noise.

    The noise grid is the sum's usual one, refined if needed so that max|V| spans at least 2^20
    grid steps (the ladder's resolution). The engine works on a fine grid (as for every sum,
    :class:`SumGrid`): the declared intervals are widened outward to it and each rounded value
    is moved to the nearest point of that widened set; the exact total is then rounded to the
    noise grid. One row then moves the rounded total by a value of the fine intervals divided by
    r = 2^(coarse - fine) and rounded down or up, so the neighbour set the noise is calibrated
    for is built from the intervals ``[⌊lo/r⌋, ⌈hi/r⌉]``: it contains every change the engine
    and the rounding can produce (for c rows, ⌊Σv/r⌋ >= Σ⌊v/r⌋ and ⌈Σv/r⌉ <= Σ⌈v/r⌉).
    """
    assert agg.values is not None
    low, high = agg.bounds
    magnitude = max(abs(low), abs(high))
    exponent = min(
        _value_exponent_for_sum(share, contrib, magnitude, magnitude), choose_exponent(magnitude)
    )
    # headroom 61: the projection's integer differences stay within a BIGINT
    fine = _fine_exponent(magnitude, exponent, headroom=61)
    fine_units = grid_ranges(agg.values, fine)
    grid = SumGrid(fine, exponent, max(max(abs(a), abs(b)) for a, b in fine_units))
    r = grid.ratio
    units = merge_ranges((a // r, -(-b // r)) for a, b in fine_units)
    per_row = max(max(abs(a), abs(b)) for a, b in units)
    value = main.value(ValueSpec(agg.column, float(low), float(high), fine, fine_units))
    output = main.output("sum", value)
    g = 2.0**exponent
    head = (
        f"values {render_values(agg.values)} on grid 2^{exponent} (each moved to the nearest "
        f"declared value; exact sum on grid 2^{fine}); "
    )
    if share.family == "zcdp":
        l2sq = contrib.rows_l2_squared * per_row * per_row
        noisy = _Noisy(output, integer_gaussian(l2sq, share.amount))
        text = (
            f"{head}{noisy.measurement.name} noise, sensitivity L2²={l2sq} grid steps² (the "
            "ladder and staircase need a pure-DP share)"
        )
        return _sum_finisher(agg.name, noisy, grid), [noisy.loss], text
    choice = choose_noise(
        units,
        share.amount,
        contrib.rows_l1,
        contrib.rows_per_group,
        contrib.groups,
        geometric_only=mechanism == "laplace",
    )
    noisy = _Noisy(output, choice.measurement)
    c, m = contrib.rows_per_group, contrib.groups
    target = "a group's sum" if m > 1 else "the sum"
    if choice.neighbor_ranges is None:
        reach = f"one unit moves {target} by <= {c}·{per_row} grid steps"
    elif c == 1:
        reach = f"one unit moves {target} by ± one declared value (or 0)"
    else:
        reach = (
            f"one unit moves {target} by ± a sum of <= {c} declared values "
            f"({choice.neighbor_ranges} intervals)"
        )
    groups = f", in <= {m} groups at ε/{m} each" if m > 1 and choice.chosen != "geometric" else ""
    described = describe_choice(choice, g)
    text = f"{head}{reach}{groups}; {described}"
    return _sum_finisher(agg.name, noisy, grid, described), [noisy.loss], text


def _compile_moments(
    agg: Mean | Variance, share: Share, contrib: Contribution, main: _Registry
) -> tuple[Finisher, list[PrivacyLoss], str]:
    l1, l2sq = contrib.rows_l1, contrib.rows_l2_squared
    parts = 2 if isinstance(agg, Mean) else 3
    part = share.scaled(Fraction(1, parts))
    low, high = agg.bounds
    magnitude = max(abs(low), abs(high))
    half = (high - low) / 2
    if isinstance(agg, Mean):
        exponent = _value_exponent_for_sum(part, contrib, magnitude, half)
    else:
        exponent = max(_ceil_log2(half) - 15, _ceil_log2(magnitude) - 31)
    low_f, high_f, lo, hi = _grid_range(agg.bounds, exponent)
    center = (lo + hi) // 2
    per_row = max(hi - center, center - lo, 1)
    value = main.value(ValueSpec(agg.column, low_f, high_f, exponent))
    count = _Noisy(main.output("nonnull", value), _integer_noise(part, l1, l2sq))
    total = _Noisy(main.output("sum", value), _integer_noise(part, l1 * per_row, l2sq * per_row**2))
    squares = None
    losses = [count.loss, total.loss]
    if isinstance(agg, Variance):
        squares = _Noisy(
            main.output("sumsq", value), _integer_noise(part, l1 * per_row**2, l2sq * per_row**4)
        )
        losses.append(squares.loss)
    g = 2.0**exponent

    def finish(ctx: _Context) -> None:
        n_exact = np.array(ctx.main[count.output], dtype=object)
        s_exact = np.array(ctx.main[total.output], dtype=object)
        centered = np.array(
            [int(s) - center * int(n) for s, n in zip(s_exact, n_exact, strict=True)],
            dtype=np.int64,
        )
        n_noisy = count.apply(np.array(n_exact, dtype=np.int64)).astype(np.float64)
        s_noisy = total.apply(centered).astype(np.float64)
        n_safe = np.maximum(n_noisy, 1.0)
        z = float(norm.ppf(1 - ctx.alpha / 2))
        var_n, var_s = count.variance(), total.variance()
        mean_c = s_noisy / n_safe  # centered mean, grid units
        if squares is None:
            values = np.clip((center + mean_c) * g, low_f, high_f)
            sd = np.sqrt(var_s / n_safe**2 + mean_c**2 * var_n / n_safe**2) * g
            ctx.columns[agg.name] = values
            ctx.columns[f"{agg.name}_low"] = np.clip(values - z * sd, low_f, high_f)
            ctx.columns[f"{agg.name}_high"] = np.clip(values + z * sd, low_f, high_f)
            ctx.accuracy[agg.name] = Accuracy(
                "approximate",
                float(z * sd[0]) if sd.size else math.nan,
                ctx.alpha,
                count.measurement.name,
                compose(*losses),
                None,
                "first-order interval for noisy sum / noisy count, per group in the table",
            )
            return
        q_exact = np.array(ctx.main[squares.output], dtype=object)
        q_centered = np.array(
            [
                int(q) - 2 * center * int(s) + center * center * int(n)
                for q, s, n in zip(q_exact, s_exact, n_exact, strict=True)
            ],
            dtype=np.int64,
        )
        q_noisy = squares.apply(q_centered).astype(np.float64)
        var_q = squares.variance()
        raw = q_noisy / n_safe - mean_c**2
        limit = float(per_row) ** 2
        variance_units = np.clip(raw, 0.0, limit)
        grad_q, grad_s = 1 / n_safe, -2 * s_noisy / n_safe**2
        grad_n = -q_noisy / n_safe**2 + 2 * s_noisy**2 / n_safe**3
        sd_var = np.sqrt(grad_q**2 * var_q + grad_s**2 * var_s + grad_n**2 * var_n)
        if isinstance(agg, Variance) and agg.std:
            values = np.sqrt(variance_units) * g
            with np.errstate(divide="ignore", invalid="ignore"):
                sd = (
                    np.where(
                        variance_units > 0, sd_var / (2 * np.sqrt(variance_units)), np.sqrt(sd_var)
                    )
                    * g
                )
            top = math.sqrt(limit) * g
        else:
            values = variance_units * g * g
            sd = sd_var * g * g
            top = limit * g * g
        ctx.columns[agg.name] = values
        ctx.columns[f"{agg.name}_low"] = np.clip(values - z * sd, 0.0, top)
        ctx.columns[f"{agg.name}_high"] = np.clip(values + z * sd, 0.0, top)
        ctx.accuracy[agg.name] = Accuracy(
            "approximate",
            float(z * sd[0]) if sd.size else math.nan,
            ctx.alpha,
            count.measurement.name,
            compose(*losses),
            None,
            "first-order interval from three noisy sums, per group in the table",
        )

    kind = "mean" if isinstance(agg, Mean) else ("std" if agg.std else "variance")
    return (
        finish,
        losses,
        (
            f"{kind} from {parts} noisy sums on grid 2^{exponent} centred at {center * g:g}; "
            f"{count.measurement.name} noise, {parts} equal parts"
        ),
    )


def _compile_quantile(
    agg: Quantile,
    share: Share,
    contrib: Contribution,
    extra_plans: list[BoundedPlan],
    make_plan: Callable[..., BoundedPlan],
) -> tuple[Finisher, list[PrivacyLoss], str]:
    low, high = agg.bounds
    magnitude = max(abs(low), abs(high))
    exponent = max(_floor_log2((high - low) / agg.candidates), _ceil_log2(magnitude) - 40)
    low_f, high_f, lo, hi = _grid_range(agg.bounds, exponent)
    registry = _Registry()
    value = registry.value(ValueSpec(agg.column, low_f, high_f, exponent))
    out = registry.output("rows")
    plan_index = len(extra_plans) + 1
    extra_plans.append(make_plan(registry, BinSpec("grid", value=value)))
    epsilon = share.epsilon()
    sensitivity = contrib.rows_l1
    candidates = hi - lo + 1
    loss = PureDP(epsilon)

    def finish(ctx: _Context) -> None:
        per_group = ctx.extra[plan_index]
        values = []
        for group in ctx.groups:
            bins = per_group.get(group, {})
            counts = np.zeros(candidates, dtype=np.int64)
            for b, outputs in bins.items():
                counts[b - lo] = outputs[out]
            below = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
            n = int(counts.sum())
            j = em_quantile_index([int(b) for b in below], n, agg.q, epsilon, sensitivity)
            values.append(math.ldexp(float(lo + j), exponent))
        ctx.columns[agg.name] = np.array(values, dtype=np.float64)
        bound = rank_error_bound(candidates, epsilon, sensitivity, ctx.alpha)
        ctx.accuracy[agg.name] = Accuracy(
            "rank",
            bound,
            ctx.alpha,
            "exponential",
            loss,
            None,
            f"the released value's rank is within ±{bound:.3g} rows of q·n with probability "
            f">= {1 - ctx.alpha:g}",
        )

    text = (
        f"exponential mechanism over {candidates} grid points of [{low_f:g}, {high_f:g}] "
        f"(step 2^{exponent}), ε={float(epsilon):.4g}, utility sensitivity {sensitivity}"
    )
    return finish, [loss], text


def _histogram_finisher(agg: Histogram, noisy: _Noisy, plan_index: int) -> Finisher:
    n_bins = len(agg.edges) - 1

    def finish(ctx: _Context) -> None:
        per_group = ctx.extra[plan_index]
        rows: list[GroupKey] = []
        exact: list[int] = []
        for group, label in zip(ctx.groups, ctx.labels, strict=True):
            bins = per_group.get(group, {})
            for b in range(n_bins):
                rows.append((*label, b))
                exact.append(bins.get(b, [0])[noisy.output])
        released = noisy.apply(np.array(exact, dtype=np.int64))
        h = noisy.halfwidth(ctx.alpha)
        table = pd.DataFrame({k: [r[i] for r in rows] for i, k in enumerate(ctx.key_names)})
        table["bin_low"] = [agg.edges[r[-1]] for r in rows]
        table["bin_high"] = [agg.edges[r[-1] + 1] for r in rows]
        table["count"] = released
        table["count_low"] = released - h
        table["count_high"] = released + h
        ctx.tables[agg.name] = table
        ctx.accuracy[agg.name] = Accuracy(
            "exact", h, ctx.alpha, noisy.measurement.name, noisy.loss, noisy.expected_abs()
        )

    return finish


def _compile_workload(
    agg: Workload,
    share: Share,
    contrib: Contribution,
    main: _Registry,
    n_keys: int | None,
    private_keys: bool,
) -> tuple[Finisher, list[PrivacyLoss], str]:
    if private_keys:
        raise UnsupportedQueryError(
            f"workload {agg.name!r} needs public group keys (its columns are the keys, in "
            "order): pass group_by(..., keys=[...])"
        )
    width = n_keys if n_keys is not None else 1
    matrix = [[Fraction(v) for v in row] for row in agg.matrix]
    if len(matrix[0]) != width:
        raise InvalidParameterError(
            "matrix",
            f"{len(matrix)}x{len(matrix[0])}",
            f"a matrix with {width} columns, one per public group key",
        )
    l1_rows = contrib.rows_l1
    grid: SumGrid | None = None
    if agg.column is not None:
        assert agg.bounds is not None
        magnitude = max(abs(agg.bounds[0]), abs(agg.bounds[1]))
        grid = sum_grid(agg.bounds, _value_exponent_for_sum(share, contrib, magnitude, magnitude))
        exponent = grid.coarse
        low_f, high_f, _, _ = _grid_range(agg.bounds, grid.fine)
        per_row = max(grid.per_row, 1)
        output = main.output("sum", main.value(ValueSpec(agg.column, low_f, high_f, grid.fine)))
    else:
        exponent, per_row = 0, 1
        output = main.output("rows")
    x_l1 = l1_rows * per_row  # ||Δx||_1 in grid units
    x_l2sq = contrib.rows_l2_squared * per_row * per_row
    n_queries = len(matrix)
    col_l1 = max(sum(abs(row[j]) for row in matrix) for j in range(width))
    col_l2sq = max(sum(row[j] ** 2 for row in matrix) for j in range(width))
    row_l2sq = [float(sum(v * v for v in row)) for row in matrix]
    # strategy "data": noise on x, then W @ noisy x (post-processing)
    data_noise = _integer_noise(share, x_l1, x_l2sq)
    data_var = noise_variance(data_noise) * sum(row_l2sq)
    # strategy "direct": noise on round(W x / g_w) with its own grid
    if share.family == "pure":
        scale = col_l1 * x_l1 / share.amount
    else:
        # ||W Δx||_2 <= max_j ||W_j||_2 · ||Δx||_1
        scale = sqrt_upper(Fraction(col_l2sq)) * x_l1 / _sqrt_down(2 * share.amount)
    w_exponent = choose_exponent(scale, 10)
    gw = Fraction(2) ** w_exponent
    if share.family == "pure":
        steps = math.ceil(col_l1 * x_l1 / gw) + n_queries
        direct_noise = make_geometric(sensitivity=steps, epsilon=share.amount)
    else:
        # rounding adds < 1 step per coordinate: ||Δ||_2 <= s/g + sqrt(n)
        bound = sqrt_upper(Fraction(col_l2sq)) * x_l1 / gw + sqrt_upper(Fraction(n_queries))
        steps_sq = math.ceil(bound) ** 2
        direct_noise = integer_gaussian(steps_sq, share.amount)
    direct_var = noise_variance(direct_noise) * float(gw) ** 2 * n_queries
    use_direct = direct_var < data_var
    names = agg.query_names or tuple(f"q{i}" for i in range(n_queries))
    g = 2.0**exponent

    def finish(ctx: _Context) -> None:
        x = [int(v) if grid is None else grid.to_coarse(int(v)) for v in ctx.main[output]]
        if use_direct:
            exact = [sum(row[j] * x[j] for j in range(width)) / gw for row in matrix]
            rounded = np.array([math.floor(v + Fraction(1, 2)) for v in exact], dtype=np.int64)
            noisy = np.asarray(direct_noise(rounded), dtype=np.float64) * float(gw) * g
            # the noise's exact quantile, plus the rounding of W·x to its grid (<= gw/2)
            h = (noise_halfwidth(direct_noise, ctx.alpha) + 0.5) * float(gw) * g
            halfwidths = np.full(n_queries, h)
        else:
            noisy_x = np.asarray(data_noise(np.array(x, dtype=np.int64)), dtype=np.float64)
            w = np.array([[float(v) for v in row] for row in matrix])
            noisy = (w @ noisy_x) * g
            halfwidths = np.array(
                [linear_noise_halfwidth(data_noise, row, ctx.alpha) * g for row in w.tolist()]
            )
        if grid is not None:
            # the sums' rounding (SumGrid): per group up to half a noise step, and over all
            # rows (at most MAX_ROWS_FOR_INTERVALS) half a fine step each
            steps = 0.0 if grid.ratio == 1 else math.ldexp(0.5, grid.coarse)
            rows = grid.rounding_bound() - steps
            halfwidths = halfwidths + np.array(
                [
                    steps * sum(abs(float(v)) for v in row) + rows * max(abs(float(v)) for v in row)
                    for row in matrix
                ]
            )
        ctx.tables[agg.name] = pd.DataFrame(
            {
                "query": list(names),
                "value": noisy,
                "low": noisy - halfwidths,
                "high": noisy + halfwidths,
            }
        )
        ctx.accuracy[agg.name] = Accuracy(
            "exact",
            float(halfwidths[0]),
            ctx.alpha,
            (direct_noise if use_direct else data_noise).name,
            share.loss(),
            None,
            "noise added to W·x directly (exact quantile, plus the rounding of W·x to its grid)"
            if use_direct
            else "noise added to x, then W·x: per query the exact quantile of a single noise "
            "term, else the smaller of a union and a Chernoff bound (never below 1 - α coverage)",
        )

    chosen = direct_noise if use_direct else data_noise
    return (
        finish,
        [chosen.loss],
        (
            f"{n_queries} linear queries over {width} groups, {chosen.name} noise; strategy "
            f"{'W·x + noise' if use_direct else 'W·(x + noise)'} (expected squared error "
            f"{min(direct_var, data_var) * g * g:.4g} vs {max(direct_var, data_var) * g * g:.4g})"
        ),
    )
