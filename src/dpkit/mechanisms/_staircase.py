"""The staircase mechanism (Geng & Viswanath 2016) on the output grid, sampled exactly.

Guarantee: ``make_staircase(sensitivity=Δ, epsilon=ε)`` is ε-DP for scalar inputs at distance at
most Δ. For arrays, pass ``changed_coordinates=c`` (at most c coordinates of neighbouring inputs
differ, by at most Δ in total): each coordinate then gets independent noise at ε/c and the loss
at L1 distance Δ is ε.

The continuous staircase (Geng & Viswanath, "The optimal noise-adding mechanism in differential
privacy", IEEE Trans. Inf. Theory 62(2), 2016) has density ∝ e^{-ε·ℓ(|x|)} with the staircase
level ℓ(y) = ⌊y/Δ⌋ + [y mod Δ >= γΔ]: flat on [0, γΔ), one step e^{-ε} lower on [γΔ, Δ), and
then every level repeats one step lower per Δ. With γ = 1/(1 + e^{ε/2}) it minimises E|X| among
all ε-DP additive noise (Thm. 4 there): E|X| = Δ·e^{ε/2}/(e^ε - 1), which is Δ/ε (Laplace) for
small ε but Δ·e^{-ε/2} for large ε, exponentially better. :func:`staircase_optimal_gamma` also
gives the γ minimising the variance.

dpkit releases on a grid of spacing g = 2^k (:mod:`dpkit.noise._grid`) and adds the *lattice*
staircase :class:`DiscreteStaircase`: period D = ⌈Δ/g⌉ grid steps, first step m = round(γD),
P(Z = k) ∝ e^{-ε·level(k)} with level(k) = ⌊|k|/D⌋ + [|k| mod D >= m]. Reason for the guarantee:
level(|k|) is non-decreasing in |k| and level(j + D) = level(j) + 1, so two integers whose
magnitudes differ by at most s have levels at most ⌈s/D⌉ apart; inputs at distance <= Δ round to
lattice points at most D apart (:func:`dpkit.noise._grid.grid_steps`), so for every output the
pmf ratio is at most e^ε. For several coordinates each changed coordinate contributes its own
⌈s_i/D⌉, and Σ_i ⌈s_i/D⌉ <= ⌈Σ_i s_i/D⌉ + c - 1, hence the per-coordinate rate ε/c. The sampler
is exact (no floating-point approximation of the distribution): see
:meth:`DiscreteStaircase.sample`. docs/staircase.md has the construction and the proofs.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit._exact import Number, check_alpha, check_epsilon, check_positive
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._additive import check_changed_coordinates, make_grid_measurement
from dpkit.mechanisms._info import StaircaseInfo
from dpkit.mechanisms._laplace import _check_grid_exponent, _sensitivity
from dpkit.noise import bernoulli, bernoulli_logistic, geometric_exp, uniform_integers
from dpkit.noise._grid import choose_exponent, grid_steps

__all__ = [
    "DiscreteStaircase",
    "make_staircase",
    "staircase_expected_abs",
    "staircase_optimal_gamma",
    "staircase_variance",
]

Cost = Literal["l1", "l2"]

_MAX_PERIOD = 2**50  # finer grids make |noise| in grid steps overflow exact float64 outputs


# ----------------------------------------------------------------------------- validation
def _epsilon_float(epsilon: Number) -> float:
    return float(check_epsilon(epsilon))


def _check_gamma(gamma: Any) -> float:
    """γ, the relative length of the first step: a number in the open interval (0, 1)."""
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | Fraction | np.floating):
        raise InvalidParameterError("gamma", gamma, "a number in (0, 1)")
    value = float(gamma)
    if not (0.0 < value < 1.0):  # also refuses NaN
        raise InvalidParameterError(
            "gamma",
            gamma,
            "in the open interval (0, 1)",
            "γ is the length of the staircase's first step as a fraction of the sensitivity; "
            "leave it out to use the optimal one for `cost`.",
        )
    return value


def _check_cost(cost: Any) -> Cost:
    if cost == "l1" or cost == "l2":
        return "l1" if cost == "l1" else "l2"
    raise InvalidParameterError(
        "cost",
        cost,
        "'l1' or 'l2'",
        "'l1' minimises the expected absolute error, 'l2' the variance.",
    )


# ----------------------------------------------------------------- the continuous staircase
def staircase_optimal_gamma(epsilon: Number, cost: Cost = "l1") -> float:
    """The γ that minimises the staircase's expected cost (Geng & Viswanath 2016).

    * ``cost="l1"`` (E|X|, Thm. 4): γ* = 1/(1 + e^{ε/2}).
    * ``cost="l2"`` (E X², Thm. 5): with b = e^{-ε},
      γ* = -b/(1-b) + (b - 2b² + 2b⁴ - b⁵)^{1/3} / (2^{1/3}(1-b)²). Since
      b - 2b² + 2b⁴ - b⁵ = b(1-b)³(1+b), this is γ* = (c - b)/(1-b) with c = (b(1+b)/2)^{1/3},
      which we evaluate as γ* = b(1+2b) / (2(c² + cb + b²)) (from c³ - b³ = b(1-b)(1+2b)/2):
      no cancellation for small ε, no overflow for large ε. It agrees with a numeric
      minimisation of :func:`staircase_variance` (tests/unit/mechanisms/test_staircase.py).

    Both tend to 1/2 as ε → 0; for large ε, γ*_l1 ≈ e^{-ε/2} and γ*_l2 ≈ (e^{-ε}/2)^{1/3}.

    Args:
        epsilon: ε > 0.
        cost: ``"l1"`` or ``"l2"``.

    Returns:
        γ* in (0, 1/2) (at least the smallest normal float, where e^{-ε/2} underflows).

    Example:
        >>> round(staircase_optimal_gamma(1.0), 6)
        0.377541
        >>> round(staircase_optimal_gamma(1.0, cost="l2"), 6)
        0.416737
    """
    eps = _epsilon_float(epsilon)
    kind = _check_cost(cost)
    if kind == "l1":
        root_b = math.exp(-eps / 2)
        return max(root_b / (1.0 + root_b), sys.float_info.min)  # > 0 even when e^{-ε/2} = 0
    t = math.exp(-eps / 3)  # b^{1/3}
    b = t * t * t
    k = (2.0 / (1.0 + b)) ** (1.0 / 3.0)  # so that c = t·(1+b)^{1/3}/2^{1/3} = t/k
    # γ* = b(1+2b) / (2c²(1 + b/c + (b/c)²)) with b/c² = t·k² and b/c = t²·k
    gamma = t * k * k * (1.0 + 2.0 * b) / (2.0 * (1.0 + t * t * k + (t * t * k) ** 2))
    return max(gamma, sys.float_info.min)


def _continuous_parts(
    sensitivity: Number, epsilon: Number, gamma: Any
) -> tuple[float, float, float, float]:
    delta = float(check_positive("sensitivity", sensitivity))
    eps = _epsilon_float(epsilon)
    g = _check_gamma(gamma)
    return delta, eps, g, math.exp(-eps)


def staircase_expected_abs(sensitivity: Number, epsilon: Number, gamma: Any) -> float:
    """E|X| of the continuous staircase with sensitivity Δ, parameter ε and first step γΔ.

    With b = e^{-ε}, summing the geometric series over the steps:
    E|X| = Δ·(b/(1-b) + (γ²(1-b) + b) / (2(γ + (1-γ)b))). At γ = 1/(1+e^{ε/2}) this is
    Δ·e^{ε/2}/(e^ε - 1), the least E|X| of any ε-DP additive noise (Geng & Viswanath, Thm. 4).

    Example:
        >>> g = staircase_optimal_gamma(1.0)
        >>> round(staircase_expected_abs(1.0, 1.0, g), 6)
        0.959517
    """
    delta, eps, g, b = _continuous_parts(sensitivity, epsilon, gamma)
    one_minus_b = -math.expm1(-eps)
    return delta * (1.0 / math.expm1(eps) + (g * g * one_minus_b + b) / (2.0 * (g + (1.0 - g) * b)))


def staircase_variance(sensitivity: Number, epsilon: Number, gamma: Any) -> float:
    """Var X = E X² of the continuous staircase with sensitivity Δ, parameter ε and step γΔ.

    With b = e^{-ε} and d = γ + (1-γ)b (the density is (1-b)/(2Δd) on the first step):
    E X² = Δ²·(b(1+b)/(1-b)² + (γ² + b(1-γ²))·b/((1-b)d) + (γ³ + b(1-γ³))/(3d)), from
    Σ b^k = 1/(1-b), Σ k b^k = b/(1-b)², Σ k² b^k = b(1+b)/(1-b)³.

    Example:
        >>> g = staircase_optimal_gamma(1.0, cost="l2")
        >>> round(staircase_variance(1.0, 1.0, g), 6)
        1.918104
    """
    delta, eps, g, b = _continuous_parts(sensitivity, epsilon, gamma)
    one_minus_b = -math.expm1(-eps)
    ratio = 1.0 / math.expm1(eps)  # b/(1-b)
    d = g + (1.0 - g) * b
    value = (
        ratio * (1.0 + b) / one_minus_b
        + (g * g + b * (1.0 - g * g)) * ratio / d
        + (g**3 + b * (1.0 - g**3)) / (3.0 * d)
    )
    return delta * delta * value


# -------------------------------------------------------------------- the lattice staircase
@dataclass(frozen=True, slots=True)
class DiscreteStaircase:
    """The staircase on the integers: P(Z = k) ∝ e^{-ε·level(k)}, sampled exactly.

    ``level(k) = ⌊|k|/D⌋ + [|k| mod D >= m]`` with period D (the sensitivity in lattice steps)
    and first step m (1 <= m <= D): magnitudes 0..m-1 are at level 0, and level ℓ >= 1 holds the
    D magnitudes (ℓ-1)D + m .. ℓD + m - 1. It follows the
    :class:`~dpkit.noise._distributions.TieredLatticeNoise` protocol with rate ε, tail_start 0,
    period D and level_step 1, so :mod:`dpkit.testing` can check privacy claims exactly.

    Shifting by s <= D changes the level by at most 1, so ``k ↦ k + Z`` is ε-DP for inputs at
    most D apart (ε·⌈s/D⌉ for a shift s).

    Attributes:
        period: D >= 1.
        first_step: m, 1 <= m <= D.
        epsilon: ε > 0 (exact).

    Example:
        >>> z = DiscreteStaircase(period=4, first_step=1, epsilon=Fraction(1))
        >>> [int(v) for v in z.level(np.arange(-5, 6))]
        [2, 1, 1, 1, 1, 0, 1, 1, 1, 1, 2]
        >>> z.sample(3).shape
        (3,)
    """

    period: int
    first_step: int
    epsilon: Fraction

    tail_start = 0
    level_step = 1

    def __post_init__(self) -> None:
        period, first = self.period, self.first_step
        if (
            isinstance(period, bool)
            or not isinstance(period, int | np.integer)
            or not (1 <= period <= _MAX_PERIOD)
        ):
            raise InvalidParameterError("period", period, "an integer in [1, 2^50]")
        if (
            isinstance(first, bool)
            or not isinstance(first, int | np.integer)
            or not (1 <= first <= period)
        ):
            raise InvalidParameterError("first_step", first, f"an integer in [1, period={period}]")
        object.__setattr__(self, "period", int(period))
        object.__setattr__(self, "first_step", int(first))
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))

    # ---- declared structure
    @property
    def rate(self) -> Fraction:
        """The log-pmf drops by ``rate`` per level: ε."""
        return self.epsilon

    def level(self, k: np.ndarray) -> np.ndarray:
        """⌊|k|/D⌋ + [|k| mod D >= m], as int64."""
        magnitude = np.abs(np.asarray(k, dtype=np.int64))
        quotient, remainder = np.divmod(magnitude, self.period)
        return quotient + (remainder >= self.first_step)

    # ---- closed forms (floats)
    def _constants(self) -> tuple[float, float, float, float]:
        """(ε, b = e^{-ε}, 1 - b, C0 = m + (D-m)b) as floats."""
        eps = float(self.epsilon)
        b = math.exp(-eps)
        return eps, b, -math.expm1(-eps), self.first_step + (self.period - self.first_step) * b

    def _normaliser_over_geometric(self) -> float:
        """Σ_k e^{-ε·level(k)} · (1 - b) = 2·C0 - (1 - b)  (> 0 because m >= 1)."""
        _, _, one_minus_b, c0 = self._constants()
        return 2.0 * c0 - one_minus_b

    def _log_normaliser(self) -> float:
        _, _, one_minus_b, _ = self._constants()
        return math.log(self._normaliser_over_geometric()) - math.log(one_minus_b)

    def _block_sums(self) -> tuple[float, float]:
        """C1 = Σ_{r<D} r·c_r and C2 = Σ_{r<D} r²·c_r, with c_r = 1 (r < m), b (r >= m)."""
        d, m = self.period, self.first_step
        _, b, _, _ = self._constants()

        def s1(n: int) -> float:
            return n * (n - 1) / 2.0

        def s2(n: int) -> float:
            return (n - 1) * n * (2 * n - 1) / 6.0

        return s1(m) + b * (s1(d) - s1(m)), s2(m) + b * (s2(d) - s2(m))

    def log_pmf(self, k: np.ndarray) -> np.ndarray:
        """ln P(Z = k) = -ε·level(k) - ln Σ_j e^{-ε·level(j)}."""
        magnitude = np.abs(np.asarray(k, dtype=np.float64))
        quotient, remainder = np.divmod(magnitude, float(self.period))
        level = quotient + (remainder >= self.first_step)
        return -float(self.epsilon) * level - self._log_normaliser()

    def _log_tail(self, n: np.ndarray) -> np.ndarray:
        """ln P(Z >= n) for integers n >= 0 (floats), one-sided."""
        eps, b, one_minus_b, c0 = self._constants()
        d, m = float(self.period), float(self.first_step)
        quotient, remainder = np.divmod(n, d)
        # Σ_{j >= qD + r} w(j) = b^q·(max(m - r, 0) + b·(D - max(r, m)) + b·C0/(1-b))
        inside = np.maximum(m - remainder, 0.0) + b * (d - np.maximum(remainder, m))
        with np.errstate(divide="ignore"):
            log_rest = np.log(inside * one_minus_b + b * c0) - math.log(one_minus_b)
        return -eps * quotient + log_rest - self._log_normaliser()

    def cdf(self, k: np.ndarray) -> np.ndarray:
        """P(Z <= k), in closed form (geometric sums over whole periods)."""
        k = np.floor(np.asarray(k, dtype=np.float64))
        k = np.clip(k, -(2.0**62), 2.0**62)
        negative = k < 0
        n = np.where(negative, -k, k + 1)
        tail = np.exp(self._log_tail(n))  # P(Z >= n) = P(Z <= -n) by symmetry
        return np.where(negative, tail, 1.0 - tail)

    def expected_abs(self) -> float:
        """E|Z| = 2·(D·C0·b/(1-b) + C1) / (2·C0 - (1-b))."""
        _, b, one_minus_b, c0 = self._constants()
        c1, _ = self._block_sums()
        ratio = b / one_minus_b
        return 2.0 * (self.period * c0 * ratio + c1) / self._normaliser_over_geometric()

    def variance(self) -> float:
        """Var Z = E Z² = 2·(D²·C0·b(1+b)/(1-b)² + 2D·C1·b/(1-b) + C2) / (2·C0 - (1-b))."""
        _, b, one_minus_b, c0 = self._constants()
        c1, c2 = self._block_sums()
        ratio = b / one_minus_b
        d = float(self.period)
        total = d * d * c0 * ratio * (1.0 + b) / one_minus_b + 2.0 * d * c1 * ratio + c2
        return 2.0 * total / self._normaliser_over_geometric()

    def _log_two_sided_tail(self, h: int) -> float:
        """ln P(|Z| > h) for an integer h >= 0."""
        return math.log(2.0) + float(self._log_tail(np.array([float(h + 1)]))[0])

    def tail_bound(self, alpha: float) -> int:
        """The smallest h >= 0 with P(|Z| > h) <= alpha."""
        alpha = check_alpha(alpha)
        log_alpha = math.log(alpha)
        if self._log_two_sided_tail(0) <= log_alpha:
            return 0
        high = self.period
        while self._log_two_sided_tail(high) > log_alpha:
            high *= 2
        low = 0  # invariant: tail(low) > alpha >= tail(high)
        while high - low > 1:
            mid = (low + high) // 2
            if self._log_two_sided_tail(mid) > log_alpha:
                low = mid
            else:
                high = mid
        return high

    def support_radius(self, mass: float) -> int:
        """An h with P(|Z| > h) <= mass."""
        return self.tail_bound(mass)

    # ---- exact sampling
    def _offsets(self, size: int) -> np.ndarray:
        """J in [0, D) with P(J = r) ∝ 1 (r < m), e^{-ε} (r >= m), exactly.

        The low segment [0, m) has total weight m and the high segment [m, D) weight
        (D - m)·e^{-ε}: one exact logistic coin (:func:`dpkit.noise.bernoulli_logistic` with
        r = (D - m)/m, γ = ε) picks the segment, then J is uniform in it. Constant cost for every
        ε (a rejection sampler would need about 1 + e^{ε/2} proposals at the optimal γ).
        """
        d, m = self.period, self.first_step
        if m == d:
            return uniform_integers(d, size).astype(np.int64)
        low = bernoulli_logistic(Fraction(d - m, m), self.epsilon, size)
        out = np.empty(size, dtype=np.int64)
        n_low = int(np.count_nonzero(low))
        out[low] = uniform_integers(m, n_low)
        out[~low] = m + uniform_integers(d - m, size - n_low)
        return out

    def _magnitudes(self, size: int) -> np.ndarray:
        """|Z| before the sign: G·D + J with P(G >= g) = e^{-gε} and J from :meth:`_offsets`."""
        blocks = geometric_exp(1 / self.epsilon, size)
        if blocks.size and int(blocks.max()) > (2**62 - self.period) // self.period:
            raise OverflowError("staircase sample does not fit in int64; use a coarser grid")
        return blocks * self.period + self._offsets(size)

    def sample(self, size: int) -> np.ndarray:
        """``size`` independent draws of Z, exactly, as int64.

        Magnitude A = G·D + J: the period index G is geometric with P(G >= g) = e^{-gε}
        (:func:`dpkit.noise.geometric_exp` with t = 1/ε), and the offset J in [0, D) has
        P(J = r) ∝ e^{-ε·[r >= m]} (:meth:`_offsets`); then P(A = a) ∝ e^{-ε·level(a)}.
        A fair sign bit makes Z = ±A, and (-, 0) is rejected and redrawn, so 0 counts once, as in
        :func:`dpkit.noise.discrete_laplace`. Every step is exact, so Z has exactly the pmf.
        """
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
            raise InvalidParameterError("size", size, "an integer >= 0")
        out = np.empty(int(size), dtype=np.int64)
        todo = np.arange(int(size))
        while todo.size:
            magnitude = self._magnitudes(todo.size)
            negative = bernoulli(Fraction(1, 2), todo.size)
            out[todo] = np.where(negative, -magnitude, magnitude)
            todo = todo[negative & (magnitude == 0)]
        return out


# ---------------------------------------------------------------------------- the mechanism
def make_staircase(
    sensitivity: Number,
    epsilon: Number,
    *,
    gamma: Any = None,
    cost: Cost = "l1",
    grid_exponent: int | None = None,
    changed_coordinates: int | None = None,
) -> Measurement[Any]:
    """The staircase mechanism on a grid: ε-DP for inputs within distance ``sensitivity``.

    Releases ``round(x/g)·g + Z·g`` with g = 2^k and Z ~ :class:`DiscreteStaircase` with period
    D = ⌈Δ/g⌉ and first step m = round(γD) (at least 1), sampled exactly.

    Guarantee: for a scalar, ε-DP for inputs at most Δ apart; the privacy map gives
    ε·⌈d/(gD)⌉ for inputs d apart. For an array, pass ``changed_coordinates=c``: neighbouring
    inputs differ in at most c coordinates, by at most Δ in L1 distance in total. Each coordinate
    gets independent noise at rate ε/c, and the map is (ε/c)·(⌈d/(gD)⌉ + c - 1), which is ε at
    d = Δ. Arrays with more than one element are refused without ``changed_coordinates``: unlike
    Laplace noise, the staircase's loss is not a function of the L1 distance alone (D coordinates
    moved by one step each cost D·ε, one coordinate moved by D steps costs ε).

    Reason: rounding to the nearest multiple of g moves inputs d apart at most ⌈d/g⌉ steps apart
    (:mod:`dpkit.noise._grid`); the lattice staircase's level is non-decreasing in |k| with
    level(j + D) = level(j) + 1, so a shift by s steps changes it by at most ⌈s/D⌉, and
    ln p(k)/p(k') = ε·(level(k') - level(k)). Summing over changed coordinates,
    Σ_i ⌈s_i/D⌉ <= ⌈Σ_i s_i/D⌉ + c - 1. See docs/staircase.md.

    Accuracy: E|noise| → Δ·e^{ε/2}/(e^ε - 1) at the default γ and grid (Geng & Viswanath 2016,
    Thm. 4), against Δ/ε for Laplace: the ratio is 2·sinh(ε/2)/ε, about 1 for ε <= 1, 2.4 at
    ε = 5 and 15 at ε = 10. ``.noise`` (a :class:`~dpkit.noise._distributions.GridNoise`) gives
    the exact E|noise|, variance, cdf and confidence intervals of the lattice noise added.

    Args:
        sensitivity: Δ > 0, the largest distance between the query's values on neighbours.
        epsilon: ε > 0.
        gamma: γ in (0, 1), the first step's length as a fraction of Δ; default: the optimal
            γ for ``cost`` (:func:`staircase_optimal_gamma`), at rate ε/c.
        cost: ``"l1"`` (minimise E|noise|, the default) or ``"l2"`` (minimise the variance).
        grid_exponent: k in g = 2^k; default: Δ/g in [2^20, 2^21). At large ε the first step
            γΔ is only a few grid steps long (m = 1 if γD < 1/2): the mechanism stays ε-DP and
            ``.noise`` reports its exact accuracy, but pass a smaller k to follow the continuous
            staircase more closely.
        changed_coordinates: for array inputs, how many coordinates two neighbouring inputs can
            differ in.

    Returns:
        A Measurement releasing a float (for a scalar) or an array of floats of the input's
        shape, all multiples of g. ``info`` has ``gamma``, ``cost``, ``grid_exponent``,
        ``period`` (D), ``first_step`` (m), ``effective_gamma`` (m/D) and
        ``changed_coordinates``.

    Raises:
        InvalidParameterError: ε or Δ not a positive finite number, γ outside (0, 1), ``cost``
            not ``"l1"``/``"l2"``, a bad ``grid_exponent`` or ``changed_coordinates``, or a grid
            so fine that D > 2^50.

    Example:
        >>> m = make_staircase(sensitivity=1, epsilon=2)
        >>> m.loss
        PureDP(epsilon=Fraction(2, 1))
        >>> round(m.noise.expected_abs(), 5)  # Δ·e^{ε/2}/(e^ε - 1) = 0.42546
        0.42546
        >>> type(m(3.0)) is float
        True
    """
    delta_f = _sensitivity(sensitivity)
    eps = check_epsilon(epsilon)
    kind = _check_cost(cost)
    exponent_arg = _check_grid_exponent(grid_exponent)
    changed = check_changed_coordinates(changed_coordinates)
    coordinates = changed or 1
    rate = eps / coordinates
    gamma_value = staircase_optimal_gamma(rate, kind) if gamma is None else _check_gamma(gamma)
    exponent = exponent_arg if exponent_arg is not None else choose_exponent(delta_f)
    period = grid_steps(delta_f, exponent)
    if period > _MAX_PERIOD:
        raise InvalidParameterError(
            "grid_exponent",
            grid_exponent,
            f"at least {choose_exponent(delta_f, 49)} for sensitivity={sensitivity}",
            f"2^{exponent} makes the sensitivity {period} grid steps, more than 2^50.",
        )
    first_step = min(max(math.floor(gamma_value * period + 0.5), 1), period)
    lattice = DiscreteStaircase(period=period, first_step=first_step, epsilon=rate)

    def loss_of_steps(steps: Fraction) -> PureDP:
        # make_grid_measurement passes steps = ⌈d_in/g⌉ + (c - 1) (lattice_l1_steps); r below is
        # ⌈d_in/g⌉, and ⌈r/D⌉ = ⌈d_in/(gD)⌉ bounds the level change of one coordinate.
        r = math.ceil(steps) - (coordinates - 1)
        levels = math.ceil(Fraction(r, period)) + coordinates - 1 if r > 0 else 0
        return PureDP(rate * levels)

    inner = make_grid_measurement(
        name="staircase",
        lattice=lattice,
        exponent=exponent,
        measure="pure",
        metric="l1",
        loss_of_steps=loss_of_steps,
        sensitivity=delta_f,
        changed_coordinates=changed,
        info=StaircaseInfo(
            gamma=gamma_value,
            cost=kind,
            grid_exponent=exponent,
            period=period,
            first_step=first_step,
            effective_gamma=first_step / period,
        ),
    )
    release = inner.function

    def function(data: Any) -> Any:
        if changed is None and np.size(data) > 1:
            raise InvalidDataError(
                "data",
                f"an array of {np.size(data)} values, but the staircase's privacy loss "
                "for arrays depends on how many coordinates neighbouring inputs differ in",
                "Pass changed_coordinates=c to make_staircase (e.g. 1 if one person changes one "
                "coordinate, 2 for a histogram under change-one), or use make_laplace.",
            )
        return release(data)

    return dataclasses.replace(inner, function=function)
