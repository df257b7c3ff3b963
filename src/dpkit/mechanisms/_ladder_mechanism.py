"""The neighbour-set ("ladder") mechanism for linear queries (Wu, He & Xia 2017), on the grid.

For a linear query f(x) = Σ_records f(record), adding or removing one record moves f by an
element of ±V, where V = {f(y) : y a possible record} is the query's *neighbour set*.
Sensitivity-based mechanisms (Laplace, staircase) only use Δ = max V; the ladder mechanism uses
the whole shape of V, gaps included, and adds much less noise when V has large gaps (a polarised
pay scale V = [0, 1] ∪ [1000, 1001] is the paper's example).

Construction (ladder.md §2; the paper's Theorem 2 and Algorithm 1). With D0 = {0} ∪ V ∪ -V:
B_0 = [-δ, δ], B_t = B_{t-1} ⊕ D0, the levels R_0 = B_0, R_t = B_t \\ B_{t-1}, and the noise
density p(r) ∝ e^{-ε·t} on R_t. dpkit releases on a grid of spacing g = 2^k
(:mod:`dpkit.noise._grid`): V is widened outward to multiples of g (exact when its ends already
are), δ is a multiple of g, and the noise is the ladder on the integers (grid units),
P(Z = k) ∝ e^{-ε·L(k)} with L(k) the least t with k ∈ B_t.

Guarantee: ``make_ladder(V, ε)`` is ε-DP for query values whose neighbours differ by an element
of ±V (one record added or removed); k records cost k·ε.

Reason: if k ∈ B_t then k + s ∈ B_t ⊕ D0 = B_{t+1} for every s ∈ D0, so |L(k + s) - L(k)| <= 1
and p(k)/p(k + s) <= e^ε. Rounding to the grid maps a real shift in [a, b] ⊆ ±V to ⌊·⌋ or ⌈·⌉ of
it in grid units, which lie in the widened integer range (ladder.md, Theorem 1). The levels are
built exactly until a proven convergence certificate (Theorem 2) makes the rest a periodic
tail; if that takes too many levels the construction is *capped* (Theorem 3): still exactly
ε-DP, and within total variation 2^-80 of the uncapped ladder by default.
:func:`check_ladder_privacy` re-proves the claim from the distribution, exactly, for every shift
in ±V (not a sample of shifts).

Accuracy: E|noise|, variance, pmf, cdf and confidence intervals are exact sums over the level
sets (``measurement.noise``). δ is chosen to minimise E|noise| unless given. For V = [0, Δ]
the ladder at its optimal δ *is* the staircase mechanism (rate 1); for the paper's
V1 = [0, 1] ∪ [1000, 1001] its E|noise| is 0.91 of the staircase's at ε = 1 and 0.31 at ε = 4
(docs/ladder.md has the full table).

Sampling is exact (ladder.md §7): the level by inversion of a lazily extended uniform with a
certified float margin and an exact decimal fallback, the tail by an exact geometric, then a
uniform grid point of the level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit._exact import Number, check_epsilon, fraction_of, sensitivity_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import PrivacyLoss, PureDP
from dpkit.core._spaces import AtomDomain, SymmetricDistance, VectorDomain
from dpkit.errors import InternalError, InvalidDataError, InvalidParameterError
from dpkit.mechanisms._additive import integer_input
from dpkit.mechanisms._info import LadderInfo, LadderVectorInfo, SumInIntervalsInfo
from dpkit.mechanisms._ladder._levels import LevelSets, build_levels
from dpkit.mechanisms._ladder._noise import UNREACHABLE, LadderDensity, LadderLattice
from dpkit.mechanisms._ladder._profile import (
    Profile,
    build_profile,
    level_moments,
    moments_from_increments,
    search_radius,
)
from dpkit.mechanisms._ladder._sets import normalize
from dpkit.noise._distributions import GridNoise
from dpkit.noise._grid import (
    add_saturating,
    choose_exponent,
    exact_index_sum,
    grid_spacing,
    release_on_grid,
    to_grid,
)

__all__ = [
    "UNREACHABLE",
    "LadderDensity",
    "LadderLattice",
    "check_ladder_privacy",
    "ladder_density",
    "ladder_expected_abs",
    "ladder_optimal_delta",
    "make_discrete_ladder",
    "make_ladder",
    "make_ladder_vector",
    "make_sum_in_intervals",
    "normalize_neighbor_set",
]

Interval = tuple[Fraction, Fraction]
Mechanism = Literal["laplace", "staircase", "ladder"]

_MAX_EPSILON = Fraction(100)
_MAX_UNITS = 2**40  # Δ in grid units: levels·Δ must stay far below 2^52 (exact float outputs)
_TV_TARGET = 2.0**-80  # default cap: total variation to the uncapped ladder
_OBJECTIVE_TOLERANCE = 1e-15  # the δ search ignores levels whose weight is below this
_MAX_RANGES = 4_000_000  # memory guard for the stored level sets


# --------------------------------------------------------------------------- validation
def _endpoint(name: str, value: Any, *, upper: bool) -> Fraction:
    if isinstance(value, bool) or not isinstance(
        value, int | float | Fraction | Decimal | str | np.integer | np.floating
    ):
        raise InvalidParameterError(name, value, "a finite number >= 0")
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        raise InvalidParameterError(name, value, "a finite number >= 0")
    if upper:
        exact = sensitivity_of(name, value)  # floats: the larger of decimal and binary value
    else:
        exact = fraction_of(name, value)
        if isinstance(value, float | np.floating):
            exact = min(exact, Fraction(float(value)))  # the smaller one: widen outward
    if exact < 0:
        raise InvalidParameterError(
            name,
            value,
            "a finite number >= 0",
            "The neighbour set V lists the values one record can add to the query; the mechanism "
            "uses ±V, so pass magnitudes: [-3, -1] means the same as [1, 3].",
        )
    return exact


def normalize_neighbor_set(neighbor_set: Any, name: str = "neighbor_set") -> tuple[Interval, ...]:
    """Read a neighbour set: a non-empty sequence of closed intervals (lo, hi) in [0, ∞).

    Normalisation (documented behaviour, not an error): a bare number v means [v, v]; the
    intervals are sorted by their low end and intervals that overlap or touch are merged, so
    ``[(1000, 1001), (0, 1), (0.5, 0.75)]`` becomes ((0, 1), (1000, 1001)). Floats are read
    exactly and rounded *outward* (a low end down, a high end up, between the shortest decimal
    and the binary value), so the declared set is never shrunk.

    Raises:
        InvalidParameterError: an empty set, an item that is not a number or a pair, a
            negative or non-finite end, lo > hi, or V = {0} (the query cannot change).

    Example:
        >>> normalize_neighbor_set([(1000, 1001), (0, 1), 0.5])
        ((Fraction(0, 1), Fraction(1, 1)), (Fraction(1000, 1), Fraction(1001, 1)))
    """
    if isinstance(neighbor_set, str | bytes) or not isinstance(neighbor_set, Sequence | np.ndarray):
        raise InvalidParameterError(
            name,
            neighbor_set,
            "a non-empty sequence of (lo, hi) pairs, e.g. [(0, 1), (1000, 1001)]",
        )
    items = list(neighbor_set)
    if not items:
        raise InvalidParameterError(
            name,
            neighbor_set,
            "a non-empty sequence of (lo, hi) pairs",
            "The neighbour set cannot be empty: every record contributes some value.",
        )
    intervals: list[Interval] = []
    for i, item in enumerate(items):
        if isinstance(item, Sequence | np.ndarray) and not isinstance(item, str | bytes):
            pair = list(item)
            if len(pair) != 2:
                raise InvalidParameterError(
                    f"{name}[{i}]", item, "a pair (lo, hi) or a single number"
                )
            lo = _endpoint(f"{name}[{i}][0]", pair[0], upper=False)
            hi = _endpoint(f"{name}[{i}][1]", pair[1], upper=True)
        else:
            lo = _endpoint(f"{name}[{i}]", item, upper=False)
            hi = _endpoint(f"{name}[{i}]", item, upper=True)
        if lo > hi:
            raise InvalidParameterError(
                f"{name}[{i}]", item, "a pair (lo, hi) with lo <= hi", "Swap the two ends."
            )
        intervals.append((lo, hi))
    intervals.sort()
    merged: list[Interval] = [intervals[0]]
    for lo, hi in intervals[1:]:
        last_lo, last_hi = merged[-1]
        if lo <= last_hi:
            merged[-1] = (last_lo, max(last_hi, hi))
        else:
            merged.append((lo, hi))
    if merged[-1][1] == 0:
        raise InvalidParameterError(
            name,
            neighbor_set,
            "a set with a positive element",
            "V = {0}: the query never changes between neighbours, so it needs no noise.",
        )
    return tuple(merged)


def _check_epsilon(epsilon: Number) -> Fraction:
    eps = check_epsilon(epsilon)
    if eps > _MAX_EPSILON:
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            f"in (0, {_MAX_EPSILON}]",
            "Beyond ε = 100 every level but the first has probability below e^-100; the output is "
            "then uniform on [-δ, δ] around the true value.",
        )
    return eps


def _check_delta(delta: Any) -> Fraction | None:
    if delta is None:
        return None
    if isinstance(delta, float | np.floating) and not math.isfinite(float(delta)):
        raise InvalidParameterError("delta", delta, "a finite number >= 0, or None")
    value = fraction_of("delta", delta)
    if value < 0:
        raise InvalidParameterError(
            "delta",
            delta,
            "a finite number >= 0, or None",
            "δ is the half-width of the top level [-δ, δ]; leave it out to use the δ that "
            "minimises the expected absolute error.",
        )
    return value


def _check_max_levels(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidParameterError("max_levels", value, "an integer >= 1, or None")
    return int(value)


def _check_grid_exponent(value: Any) -> int | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not (-1000 <= value <= 1000)
    ):
        raise InvalidParameterError("grid_exponent", value, "an integer in [-1000, 1000] or None")
    return int(value)


# --------------------------------------------------------------------------- the grid
def _grid_units(
    intervals: Sequence[Interval], exponent: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """V widened outward to the grid: [⌊lo/g⌋, ⌈hi/g⌉] in grid units, merged as integer sets.

    Returns (lo, hi, exact) with ``exact`` true when no end moved.
    """
    g = grid_spacing(exponent)
    lo = [math.floor(a / g) for a, _ in intervals]
    hi = [math.ceil(b / g) for _, b in intervals]
    exact = all(a / g == x for (a, _), x in zip(intervals, lo, strict=True)) and all(
        b / g == y for (_, b), y in zip(intervals, hi, strict=True)
    )
    if hi[-1] >= _MAX_UNITS:
        raise InvalidParameterError(
            "grid_exponent",
            exponent,
            f"coarse enough that max V is below 2^40 grid steps (it is {hi[-1]})",
            "Pass a larger grid_exponent.",
        )
    if hi[-1] == 0:
        raise InvalidParameterError(
            "grid_exponent",
            exponent,
            "fine enough that max V is at least one grid step",
            "Pass a smaller grid_exponent (or leave it out).",
        )
    lo_arr, hi_arr = normalize(np.array(lo, np.int64), np.array(hi, np.int64), 1)
    return lo_arr, hi_arr, exact


def _gcd_scale(lo: np.ndarray, hi: np.ndarray) -> int:
    """G = gcd(V) when V is a set of isolated integers (then the ladder lives on G·Z), else 1."""
    if not np.array_equal(lo, hi):
        return 1
    return int(np.gcd.reduce(hi[hi > 0].astype(np.int64)))


# --------------------------------------------------------------------------- level counts
def _tail_level(epsilon: float, period: int, radius: int, tolerance: float, power: int) -> int:
    """The least T with Σ_{t > T} e^{-εt}·(2τ_t + 1)·((τ_t + Δ)/Δ)^power / (2m + 1) <= tolerance,
    τ_t = tΔ + m: a bound on the weight (power 0) or the first moment in units of Δ (power 1)
    of every level above T, relative to level 0's weight 2m + 1.

    The tail sum decreases in T and has a closed form (sums of t^k·ρ^t), so T is found by
    doubling and bisection.
    """
    rho = math.exp(-epsilon)
    one = -math.expm1(-epsilon)
    m, d = float(radius), float(period)
    if power == 0:
        coefficients = (2.0 * m + 1.0, 2.0 * d, 0.0)
    else:  # (2tΔ + 2m + 1)(t + 1 + m/Δ)
        coefficients = ((2.0 * m + 1.0) * (1.0 + m / d), 2.0 * d + 4.0 * m + 1.0, 2.0 * d)

    def log_tail(cap: int) -> float:
        s = cap + 1.0
        sums = (
            1.0 / one,
            (s * one + rho) / one**2,
            (s * s * one * one + 2.0 * s * rho * one + rho * (1.0 + rho)) / one**3,
        )
        poly = sum(c * v for c, v in zip(coefficients, sums, strict=True))
        return -epsilon * s + math.log(poly) - math.log(2.0 * m + 1.0)

    log_tol = math.log(tolerance)
    high = 1
    while log_tail(high) > log_tol:
        high *= 2
    low = -1  # log_tail(low) > tolerance or low = -1
    while high - low > 1:
        mid = (low + high) // 2
        if mid >= 0 and log_tail(mid) <= log_tol:
            high = mid
        else:
            low = mid
    return high


def _capped_tv_bound(epsilon: float, period: int, radius: int, cap: int) -> float:
    """A bound on the total variation between the ladder capped at T and the uncapped one:
    Σ_{t > T} e^{-εt}·(2(tΔ + m) + 1)/(2m + 1) (ladder.md, Theorem 3)."""
    rho = math.exp(-epsilon)
    one = -math.expm1(-epsilon)
    s = cap + 1
    bracket = 2.0 * period * (s / one + rho / one**2) + (2.0 * radius + 1.0) / one
    return math.exp(-epsilon * s + math.log(bracket) - math.log(2.0 * radius + 1.0))


def _objective(profile: Profile, radius: float, epsilon: float) -> float:
    mass, first, second = level_moments(profile, radius, second_moment=False)
    _, mean_abs, _ = moments_from_increments(
        mass, first, second, float(profile.period), np.array([epsilon])
    )
    return float(mean_abs[0])


def _optimal_radius(
    lo: np.ndarray, hi: np.ndarray, epsilon: float, scale: int
) -> tuple[int, float]:
    """The integer δ (grid units) minimising E|noise|, and that E|noise| (grid units).

    Searches the lattice objective of :mod:`._profile` truncated where the neglected weight is
    below 1e-15. For isolated points with gcd G > 1 it also considers δ = 0 on G·Z.
    """
    period = int(hi.max())
    levels = _tail_level(epsilon, period, 0, _OBJECTIVE_TOLERANCE, 1)
    profile = build_profile(lo, hi, 1, max_levels=max(levels, 1))
    radius, value = search_radius(
        lambda m: _objective(profile, m, epsilon), float(period // 2), integer=True
    )
    if scale > 1:
        reduced = build_profile(lo // scale, hi // scale, 1, max_levels=max(levels, 1))
        on_lattice = scale * _objective(reduced, 0.0, epsilon)
        if on_lattice <= value:
            return 0, on_lattice
    return int(radius), value


def _build_noise(
    lo: np.ndarray,
    hi: np.ndarray,
    epsilon: Fraction,
    radius: int | None,
    max_levels: int | None,
) -> tuple[LadderLattice, int, float]:
    """The ladder on the integers for V = (lo, hi) (grid units); returns (noise, δ, tv bound)."""
    eps = float(epsilon)
    scale = _gcd_scale(lo, hi)
    if radius is None:
        radius, _ = _optimal_radius(lo, hi, eps, scale)
    if scale > 1 and radius == 0:
        lo, hi = lo // scale, hi // scale
    else:
        scale = 1
    period = int(hi.max())
    cap = max_levels
    if cap is None:
        cap = max(_tail_level(eps, period, radius, _TV_TARGET, 0), 1)
    levels = build_levels(lo, hi, radius, max_levels=cap, max_ranges=_MAX_RANGES)
    tv = 0.0
    if levels.capped_at is not None:
        tv = _capped_tv_bound(eps, period, radius, levels.capped_at)
    return LadderLattice(levels, epsilon, scale), radius, tv


def _staircase_expected_abs(sensitivity: float, epsilon: float) -> float:
    """The staircase's least E|noise|: Δ·e^{ε/2}/(e^ε - 1) (Geng & Viswanath 2016, Thm. 4)."""
    return sensitivity * math.exp(epsilon / 2.0) / math.expm1(epsilon)


def _ladder_info(
    noise: LadderLattice,
    intervals: Sequence[Interval],
    lo: np.ndarray,
    hi: np.ndarray,
    exponent: int,
    radius: int,
    tv: float,
    exact: bool,
) -> LadderInfo:
    g = grid_spacing(exponent)
    eps = float(noise.epsilon)
    sensitivity = float(int(hi.max()) * g)
    expected = noise.expected_abs() * float(g)
    staircase = _staircase_expected_abs(sensitivity, eps)
    levels = noise.levels
    return LadderInfo(
        neighbor_set=tuple(intervals),
        neighbor_set_units=tuple(zip(lo.tolist(), hi.tolist(), strict=True)),
        grid_exponent=exponent,
        grid_exact=exact,
        delta=radius * g,
        delta_units=radius,
        scale=noise.scale,
        levels=levels.head,
        converged_at=levels.converged_at,
        capped_at=levels.capped_at,
        tv_to_uncapped=tv,
        expected_abs=expected,
        variance=noise.variance() * float(g) ** 2,
        laplace_expected_abs=sensitivity / eps,
        staircase_expected_abs=staircase,
        rate=expected / staircase,
        ladder_noise=noise,
    )


def _ladder_info_of(measurement: Measurement[Any]) -> LadderInfo:
    """The :class:`LadderInfo` of a measurement built by make_ladder (typed access)."""
    if not isinstance(measurement.info, LadderInfo):  # pragma: no cover - internal use only
        raise InternalError(f"{measurement.name} carries no LadderInfo", charged=False)
    return measurement.info


# --------------------------------------------------------------------------- mechanisms
def _scalar_input(data: Any, integer: bool) -> tuple[np.ndarray, bool]:
    if np.size(data) != 1:
        raise InvalidDataError(
            "data",
            f"got {np.size(data)} values; the ladder mechanism releases one query value",
            "Build one mechanism per query (their losses add up), or use make_sum_in_intervals "
            "on the records.",
        )
    scalar = np.ndim(data) == 0
    if integer:
        return integer_input(np.reshape(data, (1,))), scalar
    return np.reshape(np.asarray(data, dtype=np.float64), (1,)), scalar


def _record_map(epsilon: Fraction) -> Any:
    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return PureDP(epsilon * math.ceil(d_in))

    return privacy_map


def make_ladder(
    neighbor_set: Any,
    epsilon: Number,
    delta: Number | None = None,
    *,
    grid_exponent: int | None = None,
    max_levels: int | None = None,
) -> Measurement[Any]:
    """The ladder mechanism on a grid: ε-DP when neighbours' query values differ by ±V.

    Guarantee: for a query value f(x), releases f(x) + noise with P[M(x) ∈ S] <= e^ε·P[M(x') ∈ S]
    whenever f(x') - f(x) ∈ ±V (one record added or removed); ``measurement.map(k)`` is k·ε for
    k records (their shifts are sums of k elements of ±V, so levels move by at most k).

    Reason: the level L changes by at most one under any shift in ±V, and rounding to the grid
    keeps shifts inside V widened to the grid (ladder.md, Theorem 1); the levels are exact up to
    a proven periodic tail or a capped continuation that is just as private (Theorems 2, 3).

    Accuracy: ``measurement.noise`` (a :class:`~dpkit.noise._distributions.GridNoise` over
    :class:`LadderLattice`) gives the exact pmf, cdf, E|noise|, variance and confidence
    intervals; ``info`` also reports the Laplace and staircase E|noise| for the same Δ and the
    paper's ``rate`` = E|noise|/staircase E|noise| (< 1: better than the staircase).

    Args:
        neighbor_set: V, a sequence of closed intervals (lo, hi) in [0, ∞) (numbers mean points);
            normalised by :func:`normalize_neighbor_set`.
        epsilon: ε in (0, 100].
        delta: δ >= 0, the half-width of the top level; rounded to the grid. Default: the δ
            minimising E|noise| (a scan and a golden-section search over [0, Δ/2]).
        grid_exponent: k in g = 2^k; default: Δ/g in [2^20, 2^21). V is widened outward to
            multiples of g (``info.grid_exact`` says whether it was already on the grid).
        max_levels: construct at most this many levels before capping (default: the level where
            the cap's total-variation distance to the uncapped ladder falls below 2^-80).

    Returns:
        A Measurement on a query value (a float; a length-1 array works too) with input metric
        :class:`~dpkit.core._spaces.SymmetricDistance` read as "records added or removed, each
        moving the value by an element of ±V", calibrated for d_in = 1.

    Raises:
        InvalidParameterError: a bad neighbour set, ε outside (0, 100], δ < 0 or non-finite,
            a bad grid exponent or level cap.

    Example:
        >>> m = make_ladder([(0, 1), (1000, 1001)], epsilon=4)
        >>> m.loss
        PureDP(epsilon=Fraction(4, 1))
        >>> round(m.info.rate, 2)  # E|noise| relative to the optimal staircase's
        0.31
        >>> m.info.grid_exponent, m.info.grid_exact
        (-11, True)
    """
    intervals = normalize_neighbor_set(neighbor_set)
    eps = _check_epsilon(epsilon)
    delta_exact = _check_delta(delta)
    cap = _check_max_levels(max_levels)
    exponent = _check_grid_exponent(grid_exponent)
    if exponent is None:
        exponent = choose_exponent(intervals[-1][1])
    lo, hi, exact = _grid_units(intervals, exponent)
    g = grid_spacing(exponent)
    radius = None if delta_exact is None else math.floor(delta_exact / g + Fraction(1, 2))
    if radius is not None and radius >= _MAX_UNITS:
        raise InvalidParameterError("delta", delta, f"below 2^40 grid steps of 2^{exponent}")
    noise, radius, tv = _build_noise(lo, hi, eps, radius, cap)
    info = _ladder_info(noise, intervals, lo, hi, exponent, radius, tv, exact)

    def function(data: Any) -> Any:
        values, scalar = _scalar_input(data, integer=False)
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        out = release_on_grid(flat, exponent, noise.sample(flat.size))  # exact at any magnitude
        return float(out[0]) if scalar else out.reshape(np.shape(data))

    return Measurement(
        input_domain=AtomDomain("float"),
        input_metric=SymmetricDistance(),
        output_measure="pure",
        function=function,
        privacy_map=_record_map(eps),
        name="ladder",
        noise=GridNoise(noise, exponent),
        d_in=Fraction(1),
        info=info,
    )


def make_discrete_ladder(
    neighbor_set: Any,
    epsilon: Number,
    delta: int | None = None,
    *,
    max_levels: int | None = None,
) -> Measurement[Any]:
    """The ladder mechanism for integer-valued linear queries: integers in, integers out.

    V is a set of integers (ints, or integer ranges (lo, hi) meaning {lo, ..., hi}); the noise is
    the ladder on the integers with B_0 = {-δ, ..., δ}, sampled exactly. If V is a set of
    isolated integers with gcd G > 1 and δ = 0 the ladder lives on G·Z (the output differs
    from the input by a multiple of G, as every neighbour's value does).

    Guarantee, reason and accuracy as for :func:`make_ladder` with grid spacing 1 and no
    widening (ladder.md §3).

    Args:
        neighbor_set: V ⊂ {0, 1, 2, ...}, as integers and integer ranges.
        epsilon: ε in (0, 100].
        delta: an integer δ >= 0; default: the one minimising E|noise|.
        max_levels: as for :func:`make_ladder`.

    Example:
        >>> m = make_discrete_ladder([0, 5, 10], epsilon=1)
        >>> m.info.scale, m.info.delta_units
        (5, 0)
        >>> isinstance(m(42), int)
        True
    """
    intervals = normalize_neighbor_set(neighbor_set)
    for i, (a, b) in enumerate(intervals):
        if a.denominator != 1 or b.denominator != 1:
            raise InvalidParameterError(
                f"neighbor_set[{i}]",
                (a, b),
                "integers (the discrete ladder is for integer-valued queries)",
                "Use make_ladder for real-valued queries.",
            )
    eps = _check_epsilon(epsilon)
    cap = _check_max_levels(max_levels)
    radius: int | None = None
    if delta is not None:
        value = _check_delta(delta)
        if value is None or value.denominator != 1:
            raise InvalidParameterError("delta", delta, "an integer >= 0, or None")
        radius = int(value)
    lo, hi, exact = _grid_units(intervals, 0)
    noise, radius, tv = _build_noise(lo, hi, eps, radius, cap)
    info = _ladder_info(noise, intervals, lo, hi, 0, radius, tv, exact)

    def function(data: Any) -> Any:
        values, scalar = _scalar_input(data, integer=True)
        out = add_saturating(values, noise.sample(1))  # saturating: post-processing
        return int(out[0]) if scalar else out.reshape(np.shape(data))

    return Measurement(
        input_domain=AtomDomain("int"),
        input_metric=SymmetricDistance(),
        output_measure="pure",
        function=function,
        privacy_map=_record_map(eps),
        name="discrete_ladder",
        noise=GridNoise(noise, 0),
        d_in=Fraction(1),
        info=info,
    )


def _project(units: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The nearest point of the integer set ∪[lo_i, hi_i] to each value (ties go down)."""
    i = np.searchsorted(lo, units, side="right") - 1
    below = i < 0
    j = np.clip(i, 0, None)
    inside = ~below & (units <= hi[j])
    nxt = np.clip(i + 1, 0, lo.size - 1)
    down = hi[j]
    up = lo[nxt]
    has_up = i + 1 < lo.size
    pick_up = has_up & ((up - units) < (units - down))
    out = np.where(inside, units, np.where(pick_up, up, down))
    return np.where(below, lo[0], out)


def make_sum_in_intervals(
    value_set: Any,
    epsilon: Number,
    *,
    mechanism: Mechanism | None = None,
    grid_exponent: int | None = None,
    max_levels: int | None = None,
) -> Measurement[Any]:
    """A private sum of records whose values are declared to lie in a union of intervals.

    Each record's value is moved to the nearest point of V (values already in V stay), rounded
    to the grid 2^k and summed exactly as integers; adding or removing a record moves the sum by
    an element of ±V (widened to the grid). Noise comes from whichever of Laplace
    (:func:`~dpkit.mechanisms._laplace.make_laplace`), staircase
    (:func:`~dpkit.mechanisms._staircase.make_staircase`) and ladder (:func:`make_ladder`) has
    the smallest expected absolute error for this V and ε — unless ``mechanism`` forces one.

    Guarantee: ε-DP for records added or removed (``map(k)`` = k·ε). Reason: each record's
    contribution lies in V after projection (a per-record map, so neighbours stay neighbours),
    the exact integer sum moves by one contribution, and each candidate is ε-DP for such a
    shift: Laplace and staircase for |shift| <= Δ = max V, the ladder for shifts in ±V.

    Accuracy: ``info.expected_abs`` has the three candidates' E|noise| (exact, for the noise
    each would add) and ``info.chosen`` the winner (also in the name,
    ``"sum_in_intervals[ladder]"``); ``measurement.noise`` is the winner's noise.

    Args:
        value_set: V, as for :func:`make_ladder` (e.g. a polarised pay scale
            [(20_000, 25_000), (200_000, 210_000)]).
        epsilon: ε in (0, 100].
        mechanism: ``"laplace"``, ``"staircase"`` or ``"ladder"`` to force a choice.
        grid_exponent: k for the exact sum (and the ladder); default Δ/g in [2^20, 2^21).
        max_levels: passed to the ladder.

    Example:
        >>> m = make_sum_in_intervals([(0, 1), (1000, 1001)], epsilon=1)
        >>> m.info.chosen, m.name
        ('ladder', 'sum_in_intervals[ladder]')
        >>> sorted(m.info.expected_abs)
        ['ladder', 'laplace', 'staircase']
    """
    from dpkit.mechanisms._laplace import make_laplace
    from dpkit.mechanisms._staircase import make_staircase

    intervals = normalize_neighbor_set(value_set, "value_set")
    eps = _check_epsilon(epsilon)
    if mechanism is not None and mechanism not in ("laplace", "staircase", "ladder"):
        raise InvalidParameterError(
            "mechanism", mechanism, "'laplace', 'staircase', 'ladder' or None (choose the best)"
        )
    exponent = _check_grid_exponent(grid_exponent)
    if exponent is None:
        exponent = choose_exponent(intervals[-1][1])
    ladder = make_ladder(intervals, eps, grid_exponent=exponent, max_levels=max_levels)
    ladder_info = _ladder_info_of(ladder)
    units_v = ladder_info.neighbor_set_units or ()
    lo = np.array([a for a, _ in units_v], dtype=np.int64)
    hi = np.array([b for _, b in units_v], dtype=np.int64)
    g = grid_spacing(exponent)
    sensitivity = int(hi.max()) * g
    candidates: dict[str, Measurement[Any]] = {
        "laplace": make_laplace(sensitivity, eps),
        "staircase": make_staircase(sensitivity, eps),
        "ladder": ladder,
    }
    expected = {name: float(m.noise.expected_abs()) for name, m in candidates.items()}
    chosen: str = mechanism if mechanism is not None else min(expected, key=lambda k: expected[k])
    inner = candidates[chosen]
    noise = ladder_info.ladder_noise
    if noise is None:  # pragma: no cover - make_ladder always states its noise
        raise InternalError("make_ladder returned no ladder noise", charged=False)

    def exact_sum(data: Any) -> int:
        array = np.asarray(data, dtype=np.float64)
        if array.ndim != 1:
            raise InvalidDataError("data", f"expected a 1-d array of values, got {array.shape}")
        units = _project(to_grid(array[~np.isnan(array)], exponent), lo, hi)
        # exact for any number of rows (a Python int): no refusal or saturation can depend on
        # how many rows there are
        return exact_index_sum(units)

    def function(data: Any) -> float:
        total = exact_sum(data)
        if chosen == "ladder":
            return float(release_on_grid(Fraction(total) * g, exponent, noise.sample(1))[0])
        return float(inner(Fraction(total) * g))

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        records = math.ceil(d_in)
        if chosen == "ladder":
            return PureDP(eps * records)
        return inner.map(records * sensitivity)

    info = SumInIntervalsInfo(
        chosen=chosen,
        expected_abs=expected,
        value_set=intervals,
        grid_exponent=exponent,
        sensitivity=sensitivity,
        ladder=ladder_info,
    )
    return Measurement(
        input_domain=VectorDomain(AtomDomain("float")),
        input_metric=SymmetricDistance(),
        output_measure="pure",
        function=function,
        privacy_map=privacy_map,
        name=f"sum_in_intervals[{chosen}]",
        noise=inner.noise,
        d_in=Fraction(1),
        info=info,
    )


def make_ladder_vector(
    neighbor_sets: Sequence[Any],
    epsilon: Number,
    *,
    split: Sequence[Number] | None = None,
    max_levels: int | None = None,
) -> Measurement[Any]:
    """A batch of k linear queries: one 1-D ladder per coordinate, ε split between them.

    The exact k-dimensional ladder (levels of ±V ⊂ R^k under the L1 ball) is well defined and
    private, but impractical to build, verify and sample exactly (ladder.md §10). Instead,
    coordinate i gets a ladder for V_i = {|v_i| : v ∈ V} (what one record can add to query i)
    with budget ε_i, Σ ε_i = ε.

    Guarantee: ε-DP for records added or removed (k·ε for k records). Reason: a record moves
    coordinate i by an element of ±V_i, so release i is ε_i-DP, and sequential composition adds
    the ε_i (Dwork & Roth 2014, Thm. 3.16). Accuracy: the expected L1 error is
    Σ_i E|noise_i| (``info.expected_l1``); the per-coordinate ladders are in ``info.parts``.

    Args:
        neighbor_sets: k neighbour sets V_1, ..., V_k (each as for :func:`make_ladder`).
        epsilon: the total ε in (0, 100].
        split: weights w_i > 0 with Σ w_i = 1 (ε_i = w_i·ε); default: for k = 2 the split
            among (j/10, 1 - j/10), j = 1..9, with the least expected L1 error; else equal.
        max_levels: passed to each ladder.

    Example:
        >>> m = make_ladder_vector([[(0, 1), (1000, 1001)], [(0, 10)]], 2)
        >>> m.loss
        PureDP(epsilon=Fraction(2, 1))
        >>> len(m([5.0, 7.0]))
        2
    """
    if isinstance(neighbor_sets, str | bytes) or not isinstance(neighbor_sets, Sequence):
        raise InvalidParameterError(
            "neighbor_sets", neighbor_sets, "a sequence of neighbour sets, one per coordinate"
        )
    sets = [normalize_neighbor_set(v, f"neighbor_sets[{i}]") for i, v in enumerate(neighbor_sets)]
    if not 1 <= len(sets) <= 16:
        raise InvalidParameterError(
            "neighbor_sets", neighbor_sets, "between 1 and 16 neighbour sets (coordinates)"
        )
    eps = _check_epsilon(epsilon)
    k = len(sets)
    if split is not None:
        weights = [fraction_of(f"split[{i}]", w) for i, w in enumerate(split)]
        if len(weights) != k or min(weights) <= 0 or sum(weights) != 1:
            raise InvalidParameterError(
                "split", split, f"{k} positive weights adding up to exactly 1"
            )
        candidates = [weights]
    elif k == 2:
        candidates = [[Fraction(j, 10), Fraction(10 - j, 10)] for j in range(1, 10)]
    else:
        candidates = [[Fraction(1, k)] * k]
    options = []
    for weights in candidates:
        parts = [
            make_ladder(v, eps * w, max_levels=max_levels)
            for v, w in zip(sets, weights, strict=True)
        ]
        options.append((sum(_ladder_info_of(p).expected_abs or 0.0 for p in parts), parts, weights))
    best_cost, parts_final, chosen = min(options, key=lambda option: option[0])

    def function(data: Any) -> np.ndarray:
        values = np.asarray(data, dtype=np.float64)
        if values.shape != (k,):
            raise InvalidDataError("data", f"expected {k} query values, got shape {values.shape}")
        return np.array([float(p(float(x))) for p, x in zip(parts_final, values, strict=True)])

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float"), size=k),
        input_metric=SymmetricDistance(),
        output_measure="pure",
        function=function,
        privacy_map=_record_map(eps),
        name="ladder_vector",
        noise=None,
        d_in=Fraction(1),
        info=LadderVectorInfo(
            split=tuple(chosen),
            epsilons=tuple(eps * w for w in chosen),
            expected_l1=best_cost,
            parts=tuple(_ladder_info_of(p) for p in parts_final),
        ),
    )


# --------------------------------------------------------------------------- verification
def check_ladder_privacy(
    target: Measurement[Any] | LadderLattice,
    *,
    shifts: Any = None,
    claimed_epsilon: Number | None = None,
) -> Any:
    """Prove (or refute) the ladder's pure-DP claim exactly, for *every* shift in ±V.

    Computes J = sup over every integer k and every shift s in the neighbour set (an interval
    of shifts, not a sample) of L(k + s) - L(k), as the least j with R_t ⊕ D ⊆ B_{t+j} for all
    levels t (finitely many after the periodic-tail reduction, ladder.md §6), with exact integer
    range arithmetic; the realised ε is ε·J. It fails for a broken construction (a level dropped,
    ε understated).

    Args:
        target: a measurement from :func:`make_ladder`, :func:`make_discrete_ladder` or
            :func:`make_sum_in_intervals` (its own V and claim are used), or a
            :class:`LadderLattice` (then give ``shifts`` and ``claimed_epsilon``).
        shifts: the neighbour set in lattice units, integer ranges [(lo, hi), ...] (for a noise).
        claimed_epsilon: the ε claimed for one neighbour step (for a noise).

    Returns:
        A :class:`dpkit.testing.CheckResult` (``passed``, exact ``realised`` ε, witness level);
        ``.raise_if_failed()`` raises :class:`~dpkit.errors.PrivacyCheckError`.
    """
    from dpkit.mechanisms._ladder._verify import check_levels

    if isinstance(target, Measurement):
        chosen = target.info.chosen if isinstance(target.info, SumInIntervalsInfo) else None
        if chosen not in (None, "ladder"):
            raise InvalidParameterError(
                "target",
                target.name,
                "a measurement that adds ladder noise",
                f"This sum adds {chosen} noise; check it with "
                "dpkit.testing.check_measurement_exact on the inner mechanism.",
            )
        info = target.info.ladder if isinstance(target.info, SumInIntervalsInfo) else target.info
        noise = info.ladder_noise if isinstance(info, LadderInfo) else None
        if not isinstance(info, LadderInfo) or not isinstance(noise, LadderLattice):
            raise InvalidParameterError(
                "target",
                target.name,
                "a measurement built by make_ladder / make_discrete_ladder / make_sum_in_intervals",
            )
        units = info.neighbor_set_units or ()
        claim = target.loss
        if not isinstance(claim, PureDP):
            raise InvalidParameterError("target", target.name, "a pure-DP measurement")
        claimed = claim.epsilon
    else:
        noise = target
        if shifts is None or claimed_epsilon is None:
            raise InvalidParameterError(
                "shifts", shifts, "given (with claimed_epsilon) when checking a LadderLattice"
            )
        units = shifts
        claimed = fraction_of("claimed_epsilon", claimed_epsilon)
    lo = np.array([int(a) for a, _ in units], dtype=np.int64)
    hi = np.array([int(b) for _, b in units], dtype=np.int64)
    if noise.scale > 1:
        if np.any(lo % noise.scale) or np.any(hi % noise.scale) or not np.array_equal(lo, hi):
            from dpkit.testing._exact import CheckResult

            return CheckResult(
                notion="pure",
                realised=float("inf"),
                claimed=claimed,
                passed=False,
                witness=(),
                detail=f"a shift is not a multiple of the lattice scale {noise.scale}",
            )
        lo, hi = lo // noise.scale, hi // noise.scale
    return check_levels(noise.levels, noise.epsilon, (lo, hi), claimed, scale=noise.scale)


# --------------------------------------------------------------------------- continuous analysis
def _unit_of(intervals: Sequence[Interval], delta: Fraction | None) -> Fraction:
    denominators = [x.denominator for pair in intervals for x in pair]
    if delta is not None:
        denominators.append(delta.denominator)
    return Fraction(1, math.lcm(*denominators))


def _continuous_profile(intervals: Sequence[Interval], unit: Fraction, max_levels: int) -> Profile:
    lo = np.array([int(a / unit) for a, _ in intervals], dtype=np.int64)
    hi = np.array([int(b / unit) for _, b in intervals], dtype=np.int64)
    return build_profile(lo, hi, 0, max_levels=max_levels)


def ladder_expected_abs(
    neighbor_set: Any,
    epsilons: Any,
    deltas: Any,
    *,
    max_levels: int = 1_000_000,
) -> np.ndarray:
    """E|X| of the *continuous* ladder density for every (δ, ε) pair (a matrix δ × ε).

    One δ-free construction (the sets A_t until their certificate) and closed forms in δ
    (ladder.md §5): this is what the reproduction's heat maps use.

    Example:
        >>> e = ladder_expected_abs([(0, 1)], [1.0], [1 / (1 + math.exp(0.5))])
        >>> round(float(e[0, 0]), 9) == round(math.exp(0.5) / math.expm1(1.0), 9)
        True
    """
    intervals = normalize_neighbor_set(neighbor_set)
    unit = _unit_of(intervals, None)
    profile = _continuous_profile(intervals, unit, max_levels)
    return _continuous_expected_abs(profile, unit, epsilons, deltas)


def _continuous_expected_abs(
    profile: Profile, unit: Fraction, epsilons: Any, deltas: Any
) -> np.ndarray:
    eps = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    flat = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
    out = np.empty((flat.size, eps.size))
    for i, d in enumerate(flat):
        mass, first, second = level_moments(profile, float(d / unit), second_moment=False)
        _, mean_abs, _ = moments_from_increments(mass, first, second, profile.period, eps)
        out[i] = mean_abs * float(unit)
    return out


def ladder_optimal_delta(
    neighbor_set: Any, epsilon: Number, *, max_levels: int | None = None
) -> tuple[float, float]:
    """The δ minimising E|X| of the continuous ladder over [0, Δ/2], and that E|X|.

    (No δ > Δ/2 can do better: there the ladder is the staircase with γ = δ/Δ >= 1/2, and the
    staircase's E|X| grows with γ beyond γ* = 1/(1 + e^{ε/2}) < 1/2; ladder.md §5.) Levels
    whose weight is below 1e-15 are ignored unless ``max_levels`` says how many to build.

    Example:
        >>> delta, value = ladder_optimal_delta([(0, 1)], 1.0)  # the staircase's γ*·Δ
        >>> round(delta, 6) == round(1 / (1 + math.exp(0.5)), 6)
        True
    """
    intervals = normalize_neighbor_set(neighbor_set)
    eps = float(_check_epsilon(epsilon))
    unit = _unit_of(intervals, None)
    if max_levels is None:
        period = int(intervals[-1][1] / unit)
        max_levels = max(_tail_level(eps, period, 0, _OBJECTIVE_TOLERANCE, 1), 1)
    profile = _continuous_profile(intervals, unit, max_levels)
    radius, value = search_radius(
        lambda d: _objective(profile, d, eps), profile.period / 2.0, integer=False
    )
    return radius * float(unit), value * float(unit)


def ladder_density(
    neighbor_set: Any,
    epsilon: Number,
    delta: Number | None = None,
    *,
    resolution_bits: int = 20,
    max_levels: int = 1_000_000,
) -> LadderDensity:
    """The paper's continuous ladder density for V, ε and δ (default: the optimal δ).

    Computed exactly on the doubled lattice (ladder.md §4) of a unit that divides every end of V
    with Δ/unit >= 2^``resolution_bits``; δ is rounded to the nearest multiple of the unit
    (exact for the δ you pass if it is such a multiple, e.g. a dyadic δ with few bits).

    Example:
        >>> d = ladder_density([(0, 1)], 1.0)  # V = [0, Δ]: the optimal staircase
        >>> abs(d.expected_abs() - math.exp(0.5) / math.expm1(1.0)) < 1e-6
        True
    """
    intervals = normalize_neighbor_set(neighbor_set)
    eps = _check_epsilon(epsilon)
    delta_exact = _check_delta(delta)
    if delta_exact is None:
        delta_exact = Fraction(ladder_optimal_delta(intervals, eps, max_levels=max_levels)[0])
    unit = _unit_of(intervals, None)
    while intervals[-1][1] / unit < 2**resolution_bits:
        unit /= 2
    twice = 2 * math.floor(delta_exact / unit + Fraction(1, 2))
    lo = np.array([2 * int(a / unit) for a, _ in intervals], dtype=np.int64)
    hi = np.array([2 * int(b / unit) for _, b in intervals], dtype=np.int64)
    levels: LevelSets = build_levels(lo, hi, twice, max_levels=max_levels, max_ranges=_MAX_RANGES)
    return LadderDensity(levels, eps, unit)
