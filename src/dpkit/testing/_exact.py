"""Exact and numerical privacy checks: does a mechanism's noise really give the claimed loss?

These checks recompute a privacy loss from the *distribution* a mechanism declares, independently
of the mechanism's own privacy map, and compare it with the claim:

* :func:`check_tiered_pure_dp` — pure ε-DP of integer noise with ``log pmf = const - rate·level``
  (discrete Laplace, staircase, ladder), computed **exactly** (integers and fractions) over every
  integer output and every shift up to ``max_shift``, using the declared periodic tail to reduce
  the infinite supremum to a finite window;
* :func:`check_lattice_approx_dp` — (ε, δ)-DP of any symmetric lattice noise from its privacy
  profile δ(ε) = Σ_k max(0, p(k) - e^ε·p(k+s)), summed in log space with a bounded remainder;
* :func:`check_lattice_zcdp` — ρ-zCDP from Rényi divergences D_α(P ‖ P shifted by s) on a grid
  of orders α;
* :func:`check_finite_pure_dp`, :func:`check_finite_approx_dp`, :func:`check_finite_zcdp` —
  the same notions for mechanisms with finitely many outputs, from exact output probabilities;
* :func:`check_measurement_exact` — reads a :class:`~dpkit.core._framework.Measurement`'s noise
  and claim and dispatches to the right check.

Every check returns a :class:`CheckResult`; ``result.raise_if_failed()`` raises
:class:`~dpkit.errors.PrivacyCheckError` with a readable message when the claim does not hold. A
distribution whose *declaration* is false (levels that do not match its pmf, a periodic tail that
is not periodic) also raises :class:`~dpkit.errors.PrivacyCheckError`: a check built on a false
premise proves nothing. See docs/verification.md for what each check proves and assumes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Literal, cast

import numpy as np
from scipy.ndimage import maximum_filter1d, minimum_filter1d
from scipy.special import logsumexp

from dpkit._exact import Number, fraction_of, sensitivity_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import ZCDP, ApproxDP, PureDP
from dpkit.core._spaces import AbsoluteDistance, L1Distance, L2Distance
from dpkit.errors import InvalidParameterError, PrivacyCheckError
from dpkit.noise._distributions import GridNoise, LatticeNoise, TieredLatticeNoise
from dpkit.noise._grid import grid_steps

__all__ = [
    "DEFAULT_ALPHAS",
    "CheckResult",
    "check_finite_approx_dp",
    "check_finite_pure_dp",
    "check_finite_zcdp",
    "check_lattice_approx_dp",
    "check_lattice_zcdp",
    "check_measurement_exact",
    "check_tiered_pure_dp",
]

Notion = Literal["pure", "approx", "zcdp"]

# fmt: off
DEFAULT_ALPHAS: tuple[float, ...] = (
    1.001, 1.01, 1.05, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0,
    16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 160.0, 200.0,
)
# fmt: on
"""Rényi orders α in (1, 200] examined by the zCDP checks."""

_RTOL = 1e-9  # relative tolerance of the floating-point checks (their own error is ~1e-12)
_EDGE_NATS = 60.0  # a Rényi summand this far below the total at a window edge is negligible


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one privacy check.

    Attributes:
        notion: ``"pure"`` (``realised``/``claimed`` are ε), ``"approx"`` (they are δ at the
            claimed ε) or ``"zcdp"`` (they are ρ, i.e. the largest D_α/α).
        realised: the loss the distribution really has (exact :class:`~fractions.Fraction` for
            the tiered pure-DP check, a float upper bound otherwise; ``inf`` if unbounded).
        claimed: the claimed loss in the same unit.
        passed: whether ``realised`` is within ``claimed`` (up to the stated tolerance).
        witness: where the realised loss is attained, described by ``detail``.
        detail: a sentence saying what was computed and over what.
    """

    notion: Notion
    realised: Fraction | float
    claimed: Fraction | float
    passed: bool
    witness: tuple[Any, ...]
    detail: str

    def raise_if_failed(self) -> CheckResult:
        """Raise :class:`PrivacyCheckError` if the claim does not hold; else return ``self``."""
        if not self.passed:
            unit = {"pure": "ε", "approx": "δ", "zcdp": "ρ"}[self.notion]
            raise PrivacyCheckError(
                f"the {self.notion} privacy claim does not hold: the realised {unit} is "
                f"{_show(self.realised)} but {unit}={_show(self.claimed)} was claimed "
                f"(witness {self.witness}; {self.detail}). The privacy map under-reports the "
                "loss: fix the calibration (more noise) or the map."
            )
        return self


def _show(x: Fraction | float) -> str:
    if isinstance(x, Fraction):
        return f"{x} (≈{float(x):.10g})" if x.denominator != 1 else str(x)
    return f"{x:.10g}"


# ----------------------------------------------------------------------- pure DP, tiered noise
def _int_levels(lattice: TieredLatticeNoise, k: np.ndarray) -> np.ndarray:
    raw = np.asarray(lattice.level(k))
    if raw.shape != k.shape:
        raise PrivacyCheckError(
            f"{lattice!r}.level returned shape {raw.shape} for input shape {k.shape}"
        )
    if raw.dtype.kind not in "iu":
        if raw.dtype.kind != "f" or not np.all(raw == np.round(raw)):
            raise PrivacyCheckError(
                f"{lattice!r} declares integer levels, but level() returned non-integers"
            )
        if raw.size and float(np.max(np.abs(raw))) >= 2.0**53:
            raise PrivacyCheckError(f"{lattice!r}.level returned values too large to be exact")
    return raw.astype(np.int64, copy=False)


def _largest_steps(levels: np.ndarray, width: int) -> tuple[int, int, int, int]:
    """The largest rise and fall from ``levels[i]`` to any of ``levels[i+1 : i+1+width]``.

    Returns (rise, i_rise, fall, i_fall): ``rise = max_i max(levels[i+1 : i+1+width]) -
    levels[i]`` attained at ``i_rise``, and likewise ``fall`` with the minimum. Windows are cut
    at the end of the array (padded with a value that cannot win). Sliding max/min filters make
    this O(len + width); arrays are int32 when the levels' range allows, to halve the memory.
    """
    n = levels.size
    low, high = int(levels.min()), int(levels.max())
    small = np.int32 if low > -(2**30) and high < 2**30 else np.int64
    values = levels.astype(small)
    start = width // 2  # scipy centres the window: output[i + w//2] = max(input[i : i+w])
    out = []
    for pad, extreme, sign in ((low, maximum_filter1d, 1), (high, minimum_filter1d, -1)):
        ahead = np.concatenate([values[1:], np.full(width, pad, dtype=small)])
        window = extreme(ahead, width)[start : start + n]
        del ahead
        window -= values
        if sign < 0:
            np.negative(window, out=window)
        i = int(np.argmax(window))
        out += [int(window[i]), i]
        del window
    return out[0], out[1], out[2], out[3]


def _sliding_extremes(levels: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the max and min of ``levels[i+1 : i+1+width]`` (windows cut at the end; the
    empty last window gives (min(levels), max(levels)), which cannot win). For tests."""
    n = levels.size
    low, high = int(levels.min()), int(levels.max())
    start = width // 2
    ahead_max = np.concatenate([levels[1:], np.full(width, low, dtype=levels.dtype)])
    ahead_min = np.concatenate([levels[1:], np.full(width, high, dtype=levels.dtype)])
    maxima = maximum_filter1d(ahead_max, width)[start : start + n]
    minima = minimum_filter1d(ahead_min, width)[start : start + n]
    return maxima, minima


def check_tiered_pure_dp(
    lattice: TieredLatticeNoise, max_shift: int, claimed_epsilon: Number
) -> CheckResult:
    """Check ε-DP of ``k ↦ k + Z`` for shifts of at most ``max_shift`` lattice steps, exactly.

    The realised loss is ``sup over integers k and 1 <= s <= max_shift of
    rate·|level(k+s) - level(k)|``, the largest log-ratio ``ln p(o - a)/p(o - b)`` over outputs o
    and inputs |a - b| <= max_shift. It is computed with integers and a :class:`Fraction` rate:
    no rounding at all.

    Why a finite window suffices. Let T = ``tail_start``, P = ``period``, m = ``max_shift`` and
    W = T + P + m. The declaration is level(k + P) = level(k) + step for k >= T and
    level(k - P) = level(k) + step for k <= -T. Take any pair (k, k + s), 1 <= s <= m.

    * If k >= T, both ends are in the right tail and
      level(k+s) - level(k) = level(k+s-P) - level(k-P) while k - P >= T; repeating, the same
      difference occurs for some k' in [T, T + P), whose partner k' + s < T + P + m = W.
    * If k + s <= -T, symmetrically (shifting by +P) the difference occurs with k' + s in
      (-T - P, -T], so k' > -T - P - m = -W.
    * Otherwise k < T and k + s > -T, so k > -T - m and k + s < T + m.

    In every case some pair with both ends in [-W, W] has the same difference, so the supremum
    over all integers equals the maximum over the window. The maximum over s is taken with
    sliding-window max/min filters (:func:`scipy.ndimage.maximum_filter1d`), in O(W) time.

    The declaration itself is verified on the window (periodicity in both tails, integer levels,
    and ``log_pmf(k) - log_pmf(0) == -rate·(level(k) - level(0))`` to 1e-9 relative); a false
    declaration raises :class:`PrivacyCheckError`. Beyond the window the declaration is trusted:
    it is a property of the distribution's code that the window check samples.

    Args:
        lattice: the noise, following the :class:`~dpkit.noise._distributions.TieredLatticeNoise`
            protocol.
        max_shift: the largest distance, in lattice steps, between the two inputs.
        claimed_epsilon: the ε the mechanism claims for that distance.

    Returns:
        A :class:`CheckResult` with the exact realised ε (a Fraction) and witness (k, s).
    """
    if isinstance(max_shift, bool) or not isinstance(max_shift, int | np.integer) or max_shift < 1:
        raise InvalidParameterError("max_shift", max_shift, "an integer >= 1")
    m = int(max_shift)
    claimed = fraction_of("claimed_epsilon", claimed_epsilon)
    rate = sensitivity_of("lattice.rate", lattice.rate)  # a float rate is read upwards
    tail_start, period, step = int(lattice.tail_start), int(lattice.period), lattice.level_step
    if tail_start < 0 or period < 1 or int(step) != step:
        raise PrivacyCheckError(
            f"{lattice!r} declares tail_start={tail_start}, period={period}, "
            f"level_step={step}: need tail_start >= 0, period >= 1 and an integer level_step"
        )
    step = int(step)
    half = tail_start + period + m
    k = np.arange(-half, half + 1, dtype=np.int64)
    levels = _int_levels(lattice, k)
    _verify_declaration(lattice, k, levels, rate, tail_start, period, step)

    best_up, i_up, best_down, i_down = _largest_steps(levels, m)
    i = i_up if best_up >= best_down else i_down
    best = max(best_up, best_down, 0)
    ahead = levels[i + 1 : i + 1 + m]
    target = levels[i] + (best if best_up >= best_down else -best)
    s = int(np.flatnonzero(ahead == target)[0]) + 1
    realised = rate * best
    return CheckResult(
        notion="pure",
        realised=realised,
        claimed=claimed,
        passed=realised <= claimed,
        witness=(int(k[i]), s),
        detail=(
            f"exact sup of rate·|level(k+s) - level(k)| over all integers k and 1 <= s <= {m}, "
            f"attained at (k, s); rate={rate}, |Δlevel|={best}"
        ),
    )


def _verify_declaration(
    lattice: TieredLatticeNoise,
    k: np.ndarray,
    levels: np.ndarray,
    rate: Fraction,
    tail_start: int,
    period: int,
    step: int,
) -> None:
    half = int(k[-1])
    zero = half  # index of k = 0
    right = levels[zero + tail_start :]
    left = levels[: zero - tail_start + 1][::-1]  # k = -T, -T-1, ..., -half
    for side, values in (("right (k >= tail_start)", right), ("left (k <= -tail_start)", left)):
        gaps = values[period:] - values[:-period]
        bad = np.flatnonzero(gaps != step)
        if bad.size:
            j = int(bad[0]) + tail_start
            where = j if side.startswith("right") else -j
            raise PrivacyCheckError(
                f"{lattice!r} declares a periodic {side} tail (period {period}, level step "
                f"{step}), but level changes by {int(gaps[bad[0]])} from k={where} over one "
                "period: the distribution's declaration is false, so no exact check is possible"
            )
    log_p0 = float(np.asarray(lattice.log_pmf(np.array([0], dtype=np.int64)))[0])
    chunk = 1 << 20
    for first in range(0, k.size, chunk):
        ks = k[first : first + chunk]
        log_p = np.asarray(lattice.log_pmf(ks), dtype=np.float64) - log_p0
        rel = (levels[first : first + chunk] - levels[zero]).astype(np.float64) * float(rate)
        error = np.abs(log_p + rel)
        bad = np.flatnonzero(~(error <= 1e-9 * (1.0 + np.abs(rel))))
        if bad.size:
            j = int(bad[0])
            raise PrivacyCheckError(
                f"{lattice!r} declares log pmf(k) = const - rate·level(k), but at "
                f"k={int(ks[j])} log pmf(k) - log pmf(0) = {log_p[j]!r} while "
                f"-rate·(level(k) - level(0)) = {-rel[j]!r}: the declaration is false"
            )


# ----------------------------------------------------------------------- lattice (ε, δ) and zCDP
def _check_shifts(shifts: Iterable[int]) -> list[int]:
    out = []
    for s in shifts:
        if isinstance(s, bool) or not isinstance(s, int | np.integer) or s == 0:
            raise InvalidParameterError("shifts", s, "non-zero integers (lattice steps)")
        out.append(abs(int(s)))
    if not out:
        raise InvalidParameterError("shifts", out, "at least one shift")
    return sorted(set(out))


def _verify_symmetric(lattice: LatticeNoise, radius: int) -> None:
    """The lattice checks use P(Z = k) = P(Z = -k): check it on [-radius, radius]."""
    k = np.arange(0, radius + 1, dtype=np.int64)
    a = np.asarray(lattice.log_pmf(k), dtype=np.float64)
    b = np.asarray(lattice.log_pmf(-k), dtype=np.float64)
    finite = np.isfinite(a) | np.isfinite(b)
    bad = np.flatnonzero(finite & ~(np.abs(a - b) <= 1e-12 * (1.0 + np.abs(a))))
    if bad.size:
        j = int(k[bad[0]])
        raise PrivacyCheckError(
            f"{lattice!r} is declared symmetric about 0, but log pmf({j}) = {a[bad[0]]!r} "
            f"differs from log pmf({-j}) = {b[bad[0]]!r}"
        )


def _tail_mass(lattice: LatticeNoise, radius: int) -> float:
    """P(|Z| > radius) = 2·P(Z <= -radius - 1) for symmetric noise (the lower-tail cdf is
    accurate, unlike 1 - cdf(radius))."""
    return 2.0 * float(np.asarray(lattice.cdf(np.array([-radius - 1], dtype=np.int64)))[0])


def _radius(lattice: LatticeNoise, mass: float) -> tuple[int, float]:
    """A radius R with P(|Z| > R) <= mass, and that remainder.

    Starts from ``lattice.support_radius(mass)`` and doubles R until the lower-tail cdf confirms
    the bound, so a loose (or wrong) ``support_radius`` cannot make a sum silently incomplete.
    """
    radius = max(int(lattice.support_radius(mass)), 1)
    tail = _tail_mass(lattice, radius)
    if tail > mass:  # jump ahead: the radius is at least a few standard deviations
        radius = max(radius, math.ceil(4 * math.sqrt(max(lattice.variance(), 1.0))))
        tail = _tail_mass(lattice, radius)
    for _ in range(64):
        if tail <= mass:
            return radius, tail
        radius *= 2
        tail = _tail_mass(lattice, radius)
    raise PrivacyCheckError(
        f"cannot find a radius R with P(|Z| > R) <= {mass:g} for {lattice!r} (at R={radius} the "
        f"cdf gives {tail:g}); the check is inconclusive"
    )


def _hockey_stick(lattice: LatticeNoise, shift: int, epsilon: float, radius: int) -> float:
    """Σ_{|k| <= radius + s} max(0, p(k) - e^ε·p(k + s)) for s > 0, in log space."""
    reach = radius + shift
    size = 2 * reach + 1
    log_all = np.asarray(
        lattice.log_pmf(np.arange(-reach, reach + shift + 1, dtype=np.int64)), dtype=np.float64
    )
    log_p, log_q = log_all[:size], log_all[shift : shift + size]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        x = epsilon + log_q - log_p
        keep = (x < 0) & np.isfinite(log_p)
        terms = log_p[keep] + np.log(-np.expm1(x[keep]))
    if terms.size == 0:
        return 0.0
    return float(np.exp(logsumexp(terms)))


def check_lattice_approx_dp(
    lattice: LatticeNoise,
    shifts: Iterable[int],
    claimed_epsilon: Number,
    claimed_delta: Number,
    *,
    rtol: float = _RTOL,
) -> CheckResult:
    """Check (ε, δ)-DP of ``k ↦ k + Z`` for the given integer shifts, numerically.

    For each shift s, δ_s(ε) = Σ_k max(0, p(k) - e^ε·p(k + s)) is the smallest δ with
    P[k + Z ∈ S] <= e^ε·P[k + s + Z ∈ S] + δ for every event S (the hockey-stick divergence; the
    maximising S is {k : p(k) > e^ε p(k+s)}). It is summed in log space over
    |k| <= R + |s|, where R starts at ``lattice.support_radius`` and doubles until the
    remainder P(|Z| > R) (from the lower-tail cdf, by symmetry) is below 1e-3·rtol·δ; the
    remainder is *added* to the sum, so ``realised`` is an upper bound up to float rounding
    (~1e-13 relative). By symmetry of Z (verified on the window) δ_{-s} = δ_s.

    The claim passes when max_s δ_s <= claimed_delta·(1 + rtol).
    """
    eps = fraction_of("claimed_epsilon", claimed_epsilon)
    claimed = fraction_of("claimed_delta", claimed_delta)
    steps = _check_shifts(shifts)
    radius, tail = _radius(lattice, max(1e-3 * rtol * float(claimed), 1e-300))
    _verify_symmetric(lattice, radius + steps[-1])
    deltas = [_hockey_stick(lattice, s, float(eps), radius) for s in steps]
    j = int(np.argmax(deltas))
    realised = deltas[j] + tail
    return CheckResult(
        notion="approx",
        realised=realised,
        claimed=claimed,
        passed=realised <= float(claimed) * (1 + rtol),
        witness=(steps[j],),
        detail=(
            f"δ(ε={eps}) = Σ_k max(0, p(k) - e^ε p(k+s)) at the worst of {len(steps)} shift(s) s "
            f"(witness: s), summed over |k| <= {radius}+|s| plus the remainder {tail:.3g}"
        ),
    )


def _renyi(lattice: LatticeNoise, shift: int, alphas: Sequence[float], radius: int) -> list[float]:
    """D_α(P ‖ P shifted by s) = ln(Σ_k p(k)^α p(k+s)^(1-α))/(α - 1) for s > 0 and each α.

    The summand's mass sits near k = (α-1)·s for Gaussian-like noise, so for each α the window
    runs from -(radius + s) to (α-1)·s + radius + s; it is widened until the summand at both
    edges is at least 60 nats below the total (else the check is inconclusive). The log pmf is
    evaluated once, on the widest window, and sliced.
    """
    out: dict[float, float] = {}
    todo = list(alphas)
    margin = radius + shift
    for _ in range(6):
        widest = math.ceil((max(todo) - 1.0) * shift) + 2 * margin + 1
        k = np.arange(-margin, -margin + widest + shift, dtype=np.int64)
        log_all = np.asarray(lattice.log_pmf(k), dtype=np.float64)
        log_p, log_q = log_all[:widest], log_all[shift : shift + widest]
        if np.any(np.isfinite(log_p) & ~np.isfinite(log_q)):
            return [math.inf] * len(alphas)  # p > 0 where q = 0: infinite divergence
        finite = np.isfinite(log_p)
        with np.errstate(invalid="ignore"):
            gap = np.where(finite, log_p - log_q, 0.0)
        failed = []
        for alpha in todo:
            size = math.ceil((alpha - 1.0) * shift) + 2 * margin + 1
            terms = np.where(finite[:size], log_p[:size] + (alpha - 1.0) * gap[:size], -np.inf)
            total = float(logsumexp(terms))
            if max(terms[0], terms[-1]) <= total - _EDGE_NATS:
                out[alpha] = total / (alpha - 1.0)
            else:
                failed.append(alpha)
        if not failed:
            return [out[a] for a in alphas]
        todo = failed
        margin *= 2
    raise PrivacyCheckError(
        f"cannot bound the Rényi divergence of {lattice!r} at α={todo[0]}, shift {shift}: the "
        "summand p(k)^α p(k+s)^(1-α) is not negligible at the edges of a window of "
        f"half-width {margin}; the check is inconclusive"
    )


def check_lattice_zcdp(
    lattice: LatticeNoise,
    shifts: Iterable[int],
    claimed_rho: Number,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    *,
    rtol: float = _RTOL,
) -> CheckResult:
    """Check ρ-zCDP of ``k ↦ k + Z`` for the given shifts: D_α <= α·ρ·(1 + rtol) for each α.

    D_α(P ‖ Q) = ln(Σ_k p(k)^α q(k)^(1-α))/(α - 1) is computed with ``logsumexp`` on a window
    that follows the summand's mass (see ``_renyi``); ``realised`` is max over α and s of
    D_α/α, the smallest ρ consistent with the examined orders. zCDP asks for *every* α > 1; a
    grid can refute a claim but only samples the guarantee (for the discrete Gaussian the
    divergence is α·s²/(2σ²) exactly at integer α, so integer orders are where it is tight).
    """
    rho = fraction_of("claimed_rho", claimed_rho)
    steps = _check_shifts(shifts)
    orders = [float(a) for a in alphas]
    if not orders or any(not (1.0 < a <= 1e4) for a in orders):
        raise InvalidParameterError("alphas", alphas, "a non-empty list of orders in (1, 1e4]")
    radius, _ = _radius(lattice, 1e-30)
    _verify_symmetric(lattice, radius + steps[-1])
    best, witness = -math.inf, (orders[0], steps[0])
    for s in steps:
        for a, divergence in zip(orders, _renyi(lattice, s, orders, radius), strict=True):
            if divergence / a > best:
                best, witness = divergence / a, (a, s)
    return CheckResult(
        notion="zcdp",
        realised=best,
        claimed=rho,
        passed=best <= float(rho) * (1 + rtol),
        witness=witness,
        detail=(
            f"max over {len(orders)} orders α in [{min(orders)}, {max(orders)}] and "
            f"{len(steps)} shift(s) s of D_α(P ‖ P+s)/α (witness: α, s)"
        ),
    )


# ----------------------------------------------------------------------- finite outputs
def _distribution(output_pmf: Callable[[Any], Any], x: Any) -> tuple[np.ndarray, bool]:
    """The output distribution of input x, as an object array of Fractions (exact) or floats."""
    raw = output_pmf(x)
    values = list(np.asarray(raw, dtype=object).reshape(-1))
    exact = all(isinstance(v, int | Fraction) and not isinstance(v, bool) for v in values)
    if exact:
        probs = np.array([Fraction(v) for v in values], dtype=object)
        total: Fraction | float = sum(probs, Fraction(0))
        ok = total == 1 and all(v >= 0 for v in probs)
    else:
        probs = np.asarray(raw, dtype=np.float64).reshape(-1)
        total = float(np.sum(probs))
        ok = bool(np.all(probs >= 0)) and abs(total - 1.0) <= 1e-9
    if not ok:
        raise PrivacyCheckError(
            f"output_pmf({x!r}) is not a probability vector (entries must be >= 0 and sum to 1; "
            f"the sum is {total})"
        )
    return probs, exact


def _pairs(
    output_pmf: Callable[[Any], Any], neighbour_pairs: Iterable[tuple[Any, Any]]
) -> list[tuple[Any, Any, np.ndarray, np.ndarray, bool]]:
    out = []
    for pair in neighbour_pairs:
        x, y = pair
        p, exact_p = _distribution(output_pmf, x)
        q, exact_q = _distribution(output_pmf, y)
        if p.shape != q.shape:
            raise PrivacyCheckError(
                f"output_pmf gives {p.size} outputs for {x!r} but {q.size} for {y!r}: the output "
                "set must not depend on the input"
            )
        exact = exact_p and exact_q
        if not exact:
            p, q = p.astype(np.float64), q.astype(np.float64)
        out.append((x, y, p, q, exact))
    if not out:
        raise InvalidParameterError("neighbour_pairs", out, "at least one pair of inputs")
    return out


def _ln(x: Fraction) -> Fraction:
    with localcontext() as ctx:
        ctx.prec = 50
        return Fraction((Decimal(x.numerator) / Decimal(x.denominator)).ln())


def check_finite_pure_dp(
    output_pmf: Callable[[Any], Any],
    neighbour_pairs: Iterable[tuple[Any, Any]],
    claimed_epsilon: Number,
    *,
    rtol: float = _RTOL,
) -> CheckResult:
    """Check ε-DP of a mechanism with finitely many outputs from its exact output probabilities.

    ``output_pmf(x)`` returns the probability of each output (a fixed, input-independent order)
    on input x. The realised ε is max over the pairs (both orders) and outputs o of
    |ln p_x(o) - ln p_y(o)|; an output possible on one input and impossible on the other is an
    infinite loss. With Fraction (or int) probabilities the largest ratio is found exactly and
    its logarithm is taken to 50 digits (passing when it is within 1e-30 of the claim); with
    floats the comparison is in log space with relative tolerance ``rtol``.
    """
    eps = fraction_of("claimed_epsilon", claimed_epsilon)
    best: Fraction | float = 0.0
    witness: tuple[Any, ...] = ()
    all_exact = True
    for x, y, p, q, exact in _pairs(output_pmf, neighbour_pairs):
        all_exact &= exact
        if exact:
            for o, (a, b) in enumerate(zip(p, q, strict=True)):
                if a == b:
                    continue
                if a == 0 or b == 0:
                    return _infinite(
                        "pure",
                        eps,
                        (x, y, o),
                        "an output possible on one input of the pair and impossible on the other",
                    )
                loss = _ln(max(a, b) / min(a, b))
                if loss > best:
                    best, witness = loss, (x, y, o)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                lp, lq = np.log(p), np.log(q)
                gap = np.abs(lp - lq)
            gap[(p == 0) & (q == 0)] = 0.0
            o = int(np.argmax(gap))
            if math.isinf(gap[o]):
                return _infinite(
                    "pure",
                    eps,
                    (x, y, o),
                    "an output possible on one input of the pair and impossible on the other",
                )
            if gap[o] > best:
                best, witness = float(gap[o]), (x, y, o)
    if all_exact:
        passed = Fraction(best) <= eps + Fraction(1, 10**30)
    else:
        passed = float(best) <= float(eps) * (1 + rtol) + 1e-15
    return CheckResult(
        notion="pure",
        realised=best,
        claimed=eps,
        passed=passed,
        witness=witness,
        detail="max over neighbour pairs (x, y) and outputs o of |ln p_x(o) - ln p_y(o)| "
        "(witness: x, y, o)",
    )


def _infinite(notion: Notion, claimed: Fraction, witness: tuple[Any, ...], why: str) -> CheckResult:
    return CheckResult(
        notion=notion,
        realised=math.inf,
        claimed=claimed,
        passed=False,
        witness=witness,
        detail=why + " (witness: x, y, o)",
    )


def check_finite_approx_dp(
    output_pmf: Callable[[Any], Any],
    neighbour_pairs: Iterable[tuple[Any, Any]],
    claimed_epsilon: Number,
    claimed_delta: Number,
    *,
    rtol: float = _RTOL,
) -> CheckResult:
    """Check (ε, δ)-DP of a finite-output mechanism: max over pairs (both orders) of
    Σ_o max(0, p_x(o) - e^ε·p_y(o)) <= claimed_delta·(1 + rtol)."""
    eps = fraction_of("claimed_epsilon", claimed_epsilon)
    claimed = fraction_of("claimed_delta", claimed_delta)
    best, witness = 0.0, cast(tuple[Any, ...], ())
    for x, y, p, q, _ in _pairs(output_pmf, neighbour_pairs):
        pf, qf = p.astype(np.float64), q.astype(np.float64)
        for (a, b), order in (((pf, qf), (x, y)), ((qf, pf), (y, x))):
            with np.errstate(over="ignore"):
                value = float(np.sum(np.maximum(0.0, a - math.exp(float(eps)) * b)))
            if value > best:
                best, witness = value, order
    return CheckResult(
        notion="approx",
        realised=best,
        claimed=claimed,
        passed=best <= float(claimed) * (1 + rtol) + 1e-15,
        witness=witness,
        detail=f"max over ordered neighbour pairs (x, y) of Σ_o max(0, p_x(o) - e^ε p_y(o)) at "
        f"ε={eps} (witness: x, y)",
    )


def check_finite_zcdp(
    output_pmf: Callable[[Any], Any],
    neighbour_pairs: Iterable[tuple[Any, Any]],
    claimed_rho: Number,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    *,
    rtol: float = _RTOL,
) -> CheckResult:
    """Check ρ-zCDP of a finite-output mechanism: max over pairs (both orders) and α of
    D_α(p_x ‖ p_y)/α <= claimed_rho·(1 + rtol)."""
    rho = fraction_of("claimed_rho", claimed_rho)
    best, witness = -math.inf, cast(tuple[Any, ...], ())
    for x, y, p, q, _ in _pairs(output_pmf, neighbour_pairs):
        pf, qf = p.astype(np.float64), q.astype(np.float64)
        for (a, b), order in (((pf, qf), (x, y)), ((qf, pf), (y, x))):
            if np.any((a > 0) & (b == 0)):
                return CheckResult(
                    notion="zcdp",
                    realised=math.inf,
                    claimed=rho,
                    passed=False,
                    witness=(*order, math.inf),
                    detail="an output possible on one input and impossible on the other "
                    "(witness: x, y, α)",
                )
            support = a > 0
            la, lb = np.log(a[support]), np.log(b[support])
            for alpha in alphas:
                value = float(logsumexp(alpha * la + (1 - alpha) * lb)) / (alpha - 1) / alpha
                if value > best:
                    best, witness = value, (*order, float(alpha))
    return CheckResult(
        notion="zcdp",
        realised=best,
        claimed=rho,
        passed=best <= float(rho) * (1 + rtol),
        witness=witness,
        detail="max over ordered neighbour pairs (x, y) and orders α of D_α(p_x ‖ p_y)/α "
        "(witness: x, y, α)",
    )


# ----------------------------------------------------------------------- measurements
def _sampled_shifts(max_shift: int, count: int | None) -> list[int]:
    """All shifts 1..max_shift, or ~count of them: small ones, max_shift, and a geometric grid."""
    if count is None or max_shift <= count:
        return list(range(1, max_shift + 1))
    grid = np.unique(np.round(np.geomspace(1, max_shift, num=count)).astype(np.int64))
    return sorted({1, 2, max_shift, *(int(s) for s in grid)})


def check_measurement_exact(
    measurement: Measurement[Any],
    d_in: Number | None = None,
    *,
    neighbour_pairs: Iterable[tuple[Any, Any]] | None = None,
    shift_samples: int | None = 16,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    sensitivity: Number | None = None,
) -> CheckResult:
    """Check a measurement's declared loss at ``d_in`` against its actual noise distribution.

    ``sensitivity``, when given, is the query's true sensitivity, told to the checker
    independently of the measurement: the claim ``measurement.map(d_in)`` (the loss the user is
    told for one unit) is then checked against the noise at *that* distance. A constructor that
    ignores its Δ and declares a smaller ``d_in`` passes the self-consistent check and fails
    this one.

    *Additive grid mechanisms* (``measurement.noise`` is a
    :class:`~dpkit.noise._distributions.GridNoise`: make_laplace, make_geometric, make_gaussian,
    make_discrete_gaussian): inputs ``d_in`` apart round to lattice points at most
    ``⌈d_in / 2^exponent⌉`` steps apart — the grid sensitivity the mechanisms' maps use — and the
    claim ``measurement.map(d_in)`` is checked for every shift up to that:

    * :class:`PureDP` with tiered noise: :func:`check_tiered_pure_dp` (exact, every shift);
    * :class:`ApproxDP`: :func:`check_lattice_approx_dp`;
    * :class:`ZCDP`: :func:`check_lattice_zcdp`.

    For the last two, ``shift_samples`` limits the shifts examined to about that many (1, 2, the
    largest, and a geometric grid); pass ``None`` to examine every shift. Sampling suffices for
    noise whose divergences grow with the shift (the discrete Gaussian: its Rényi divergence
    at integer α is α·s²/(2σ²)).

    This is the one-coordinate case: it refuses measurements calibrated with
    ``changed_coordinates`` > 1 (``info.changed_coordinates``), and measurements whose input
    metric is not an absolute/L1/L2 distance (e.g. a transformation chained in front: check the
    inner measurement at ``d_in = stability_map(d_in)`` instead), raising
    :class:`NotImplementedError`.

    *Finite-output mechanisms* (``measurement.info.output_pmf``, a callable giving the exact
    output probabilities for one input; ``info.exact_output_pmf``, giving Fractions, is
    preferred when present): pass ``neighbour_pairs``, pairs of inputs at distance <= ``d_in``;
    dispatches to :func:`check_finite_pure_dp` / ``_approx_dp`` / ``_zcdp``.

    Args:
        measurement: the measurement to check.
        d_in: the input distance; default ``measurement.d_in``.
        neighbour_pairs: for finite-output mechanisms only.
        shift_samples: see above.
        alphas: Rényi orders for zCDP claims.

    Raises:
        NotImplementedError: no exact check applies; use :func:`dpkit.testing.audit_measurement`.

    Example:
        >>> import dataclasses
        >>> import dpkit as dp
        >>> from dpkit.testing import check_measurement_exact
        >>> m = dp.make_geometric(sensitivity=1, epsilon=1)
        >>> check_measurement_exact(m).realised
        Fraction(1, 1)
        >>> broken = dataclasses.replace(m, privacy_map=lambda d: dp.PureDP(d / 2))
        >>> check_measurement_exact(broken).passed
        False
    """
    if d_in is None:
        if measurement.d_in is None:
            raise InvalidParameterError("d_in", d_in, "given: the measurement has no default")
        distance = measurement.d_in
    else:
        distance = fraction_of("d_in", d_in)
    claim = measurement.map(distance)
    if sensitivity is not None:
        distance = sensitivity_of("sensitivity", sensitivity)
    noise = measurement.noise
    output_pmf = measurement.info.exact_output_pmf or measurement.info.output_pmf
    if isinstance(noise, GridNoise):
        return _check_additive(measurement, noise, distance, claim, shift_samples, alphas)
    if output_pmf is not None:
        if neighbour_pairs is None:
            raise InvalidParameterError(
                "neighbour_pairs",
                None,
                "a list of (x, y) input pairs at distance <= d_in",
                f"{measurement.name} has finitely many outputs: the check needs the inputs to "
                "compare.",
            )
        pairs = list(neighbour_pairs)
        if isinstance(claim, PureDP):
            return check_finite_pure_dp(output_pmf, pairs, claim.epsilon)
        if isinstance(claim, ApproxDP):
            return check_finite_approx_dp(output_pmf, pairs, claim.epsilon, claim.delta)
        return check_finite_zcdp(output_pmf, pairs, claim.rho, alphas)
    raise NotImplementedError(
        f"no exact check for {measurement.name}: it declares neither additive grid noise "
        "(measurement.noise) nor exact output probabilities (info.output_pmf); audit it "
        "statistically with dpkit.testing.audit_measurement"
    )


def _notion(claim: PureDP | ApproxDP | ZCDP) -> Notion:
    return (
        "pure" if isinstance(claim, PureDP) else "approx" if isinstance(claim, ApproxDP) else "zcdp"
    )


def _check_additive(
    measurement: Measurement[Any],
    noise: GridNoise,
    distance: Fraction,
    claim: PureDP | ApproxDP | ZCDP,
    shift_samples: int | None,
    alphas: Sequence[float],
) -> CheckResult:
    changed = measurement.info.changed_coordinates
    if changed is not None and int(changed) > 1:
        raise NotImplementedError(
            f"{measurement.name} is calibrated for changed_coordinates={changed}: the exact "
            "check covers one changed coordinate only; audit vectors statistically"
        )
    if not isinstance(measurement.input_metric, AbsoluteDistance | L1Distance | L2Distance):
        raise NotImplementedError(
            f"{measurement.name} reads {measurement.input_metric}: the exact check needs the "
            "distance at the noise's input; check the inner measurement with "
            "d_in = transformation.map(d_in)"
        )
    max_shift = grid_steps(distance, noise.exponent)
    lattice = noise.lattice
    if max_shift == 0:
        zero: Fraction = Fraction(0)
        return CheckResult(
            notion=_notion(claim),
            realised=zero,
            claimed=zero,
            passed=True,
            witness=(),
            detail="inputs at distance 0 round to the same lattice point: no privacy loss",
        )
    if isinstance(claim, PureDP):
        if not isinstance(lattice, TieredLatticeNoise):
            raise NotImplementedError(
                f"{measurement.name} claims pure DP with {type(lattice).__name__} noise, which "
                "does not declare tiered levels; audit it statistically"
            )
        return check_tiered_pure_dp(lattice, max_shift, claim.epsilon)
    shifts = _sampled_shifts(max_shift, shift_samples)
    if isinstance(claim, ApproxDP):
        return check_lattice_approx_dp(lattice, shifts, claim.epsilon, claim.delta)
    return check_lattice_zcdp(lattice, shifts, claim.rho, alphas)
