"""Privacy-loss values: ``PureDP(ε)``, ``ApproxDP(ε, δ)`` and ``ZCDP(ρ)``.

They are frozen values with exact (:class:`~fractions.Fraction`) fields. ``+`` is sequential
composition, :func:`parallel` is parallel composition, ``<=`` asks "is this loss within that
budget". Mixing kinds promotes to the weaker notion, always conservatively:

* ε-DP implies (ε, 0)-DP, and ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4);
* ρ-zCDP implies (ε, δ)-DP for every δ > 0 with ε = ρ + 2·sqrt(ρ·ln(1/δ)) (ibid., Prop. 1.3), and
  with the tighter ε of Canonne, Kamath & Steinke 2020 (Cor. 13) when that is smaller; every
  transcendental value is rounded *up* to a fraction (see :mod:`dpkit._exact`).

Sequential composition (Dwork & Roth 2014, Thm. 3.16): (ε₁, δ₁) then (ε₂, δ₂) is (ε₁+ε₂, δ₁+δ₂);
zCDP adds ρ (Bun & Steinke, Lemma 2.3). Parallel composition over disjoint parts of the data costs
the maximum of the parts (McSherry 2009, Thm. 4), because one person's row lies in one part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from typing import TypeAlias

from dpkit._exact import (
    Number,
    check_delta,
    check_positive,
    exp_upper,
    fraction_of,
    log_upper,
    sqrt_upper,
)
from dpkit._format import number
from dpkit.errors import InvalidParameterError

__all__ = [
    "ZCDP",
    "ApproxDP",
    "PrivacyLoss",
    "PureDP",
    "compose",
    "group_privacy",
    "group_share",
    "parallel",
]


@dataclass(frozen=True, slots=True, order=False)
class PureDP:
    """ε-differential privacy: for all neighbours x, x' and events S,
    P[M(x) ∈ S] <= e^ε · P[M(x') ∈ S]."""

    epsilon: Fraction

    def __init__(self, epsilon: Number) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", epsilon, allow_zero=True))

    def __add__(self, other: PrivacyLoss) -> PrivacyLoss:
        return compose(self, other)

    def __le__(self, other: PrivacyLoss) -> bool:
        return _within(self, other)

    def to_approx(self) -> ApproxDP:
        """(ε, 0)-DP."""
        return ApproxDP(self.epsilon, 0)

    def to_zcdp(self) -> ZCDP:
        """ε-DP implies ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        return ZCDP(self.epsilon**2 / 2)

    def __str__(self) -> str:
        return f"ε={_fmt(self.epsilon)}"


@dataclass(frozen=True, slots=True, order=False)
class ApproxDP:
    """(ε, δ)-differential privacy: P[M(x) ∈ S] <= e^ε · P[M(x') ∈ S] + δ."""

    epsilon: Fraction
    delta: Fraction

    def __init__(self, epsilon: Number, delta: Number) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", epsilon, allow_zero=True))
        object.__setattr__(self, "delta", check_delta(delta))

    def __add__(self, other: PrivacyLoss) -> PrivacyLoss:
        return compose(self, other)

    def __le__(self, other: PrivacyLoss) -> bool:
        return _within(self, other)

    def to_approx(self) -> ApproxDP:
        return self

    def __str__(self) -> str:
        return f"ε={_fmt(self.epsilon)}, δ={_fmt(self.delta)}"


@dataclass(frozen=True, slots=True, order=False)
class ZCDP:
    """ρ-zero-concentrated DP (Bun & Steinke 2016): D_α(M(x) ‖ M(x')) <= ρ·α for all α > 1."""

    rho: Fraction

    def __init__(self, rho: Number) -> None:
        object.__setattr__(self, "rho", check_positive("rho", rho, allow_zero=True))

    def __add__(self, other: PrivacyLoss) -> PrivacyLoss:
        return compose(self, other)

    def __le__(self, other: PrivacyLoss) -> bool:
        return _within(self, other)

    def to_zcdp(self) -> ZCDP:
        return self

    def to_approx(self, delta: Number) -> ApproxDP:
        """The smallest certified ε with (ε, δ)-DP, from two conversions, rounded up.

        Bun & Steinke 2016 (Prop. 1.3): ε = ρ + 2·sqrt(ρ·ln(1/δ)).
        Canonne, Kamath & Steinke 2020 (Cor. 13): δ = exp((α-1)(αρ-ε))/(α-1)·(1-1/α)^α for any
        α > 1, i.e. ε = αρ + (ln(1/δ) + (α-1)ln(1-1/α) - ln(α))/(α-1)... minimised over α on a
        grid; each candidate ε is computed and rounded up exactly, so any α gives a valid bound.
        """
        delta_f = check_delta(delta, allow_zero=False)
        if self.rho == 0:
            return ApproxDP(0, delta_f)
        log_inv_delta = log_upper(1 / delta_f)
        classic = self.rho + 2 * sqrt_upper(self.rho * log_inv_delta)
        best = classic
        for alpha in _cks_alphas(float(self.rho), float(log_inv_delta)):
            candidate = _cks_epsilon(self.rho, log_inv_delta, alpha)
            if candidate is not None and candidate < best:
                best = candidate
        return ApproxDP(best, delta_f)

    def __str__(self) -> str:
        return f"ρ={_fmt(self.rho)}"


PrivacyLoss: TypeAlias = PureDP | ApproxDP | ZCDP


def _cks_alphas(rho: float, log_inv_delta: float) -> list[Fraction]:
    """Candidate orders α > 1 around the analytic optimum ~ 1 + sqrt(ln(1/δ)/ρ)."""
    center = 1.0 + math.sqrt(log_inv_delta / max(rho, 1e-300))
    out = []
    for factor in (0.5, 0.7, 0.85, 1.0, 1.15, 1.3, 1.6, 2.0):
        a = 1.0 + (center - 1.0) * factor
        if 1.0 < a < 1e12:
            out.append(Fraction(a).limit_denominator(10**6))
    return [a for a in out if a > 1]


def _cks_epsilon(rho: Fraction, log_inv_delta: Fraction, alpha: Fraction) -> Fraction | None:
    """ε = αρ + (ln(1/δ) + α·ln(1-1/α) - ln α) / (α-1)... rounded up (CKS 2020, Cor. 13).

    From δ = exp((α-1)(αρ-ε)) / (α-1) · (1-1/α)^α: solving for ε gives
    ε = αρ + (ln(1/δ) - ln(α-1) + α·ln(1-1/α)) / (α-1).
    Every logarithm is bounded in the direction that makes ε larger.
    """
    if alpha <= 1:
        return None
    log_am1 = -log_upper(1 / (alpha - 1))  # lower bound on ln(α-1)
    log_one_minus = log_upper(1 - 1 / alpha)  # ln(1-1/α) < 0; upper bound makes ε larger
    eps = alpha * rho + (log_inv_delta - log_am1 + alpha * log_one_minus) / (alpha - 1)
    return eps if eps > 0 else None


def _within(loss: PrivacyLoss, budget: PrivacyLoss) -> bool:
    """``loss <= budget``: every guarantee of ``budget`` also holds for ``loss``'s mechanism."""
    if isinstance(budget, PureDP):
        return isinstance(loss, PureDP) and loss.epsilon <= budget.epsilon
    if isinstance(budget, ApproxDP):
        if isinstance(loss, PureDP):
            return loss.epsilon <= budget.epsilon
        if isinstance(loss, ApproxDP):
            return loss.epsilon <= budget.epsilon and loss.delta <= budget.delta
        if budget.delta == 0:
            return False
        return loss.to_approx(budget.delta).epsilon <= budget.epsilon
    if isinstance(loss, PureDP):
        return loss.to_zcdp().rho <= budget.rho
    if isinstance(loss, ZCDP):
        return loss.rho <= budget.rho
    return False  # (ε, δ) with δ > 0 does not imply any finite zCDP


def _promote(a: PrivacyLoss, b: PrivacyLoss) -> tuple[PrivacyLoss, PrivacyLoss]:
    if type(a) is type(b):
        return a, b
    if isinstance(a, PureDP | ApproxDP) and isinstance(b, PureDP | ApproxDP):
        return a.to_approx(), b.to_approx()
    if isinstance(a, PureDP | ZCDP) and isinstance(b, PureDP | ZCDP):
        return a.to_zcdp(), b.to_zcdp()
    raise InvalidParameterError(
        "losses",
        (a, b),
        "of kinds that compose directly",
        "ApproxDP and ZCDP do not compose without a δ: convert the ZCDP loss first, "
        "e.g. zcdp.to_approx(delta=1e-9), or use dpkit.accounting for tighter accounting.",
    )


def _compose2(a: PrivacyLoss, b: PrivacyLoss) -> PrivacyLoss:
    a, b = _promote(a, b)
    if isinstance(a, PureDP) and isinstance(b, PureDP):
        return PureDP(a.epsilon + b.epsilon)
    if isinstance(a, ApproxDP) and isinstance(b, ApproxDP):
        delta = a.delta + b.delta
        if delta >= 1:
            raise InvalidParameterError("delta", delta, "< 1 after composition")
        return ApproxDP(a.epsilon + b.epsilon, delta)
    assert isinstance(a, ZCDP) and isinstance(b, ZCDP)
    return ZCDP(a.rho + b.rho)


def compose(*losses: PrivacyLoss) -> PrivacyLoss:
    """Sequential composition: the loss of running every mechanism on the same data."""
    if not losses:
        raise InvalidParameterError("losses", losses, "at least one privacy loss")
    return reduce(_compose2, losses)


def parallel(*losses: PrivacyLoss) -> PrivacyLoss:
    """Parallel composition over disjoint parts of the data: the largest loss of any part.

    With mixed kinds the losses are first promoted to a common kind, conservatively.
    """
    if not losses:
        raise InvalidParameterError("losses", losses, "at least one privacy loss")
    first = losses[0]
    for other in losses[1:]:
        first, other = _promote(first, other)
        if isinstance(first, PureDP) and isinstance(other, PureDP):
            first = PureDP(max(first.epsilon, other.epsilon))
        elif isinstance(first, ApproxDP) and isinstance(other, ApproxDP):
            first = ApproxDP(max(first.epsilon, other.epsilon), max(first.delta, other.delta))
        elif isinstance(first, ZCDP) and isinstance(other, ZCDP):
            first = ZCDP(max(first.rho, other.rho))
    return first


_GROUP_EXACT_SUM = 64  # up to this many units δ's factor is the exact sum of e^{iε} bounds


def group_privacy(loss: PrivacyLoss, units: Number) -> PrivacyLoss:
    """The loss for inputs ``units`` privacy units apart, from ``loss``, the loss for one unit.

    * ε-DP: kε (Dwork & Roth 2014, Thm. 2.2; the triangle inequality over k hops);
    * ρ-zCDP: k²ρ (Bun & Steinke 2016, Prop. 27);
    * (ε, δ)-DP: (kε, δ·Σ_{i<k} e^{iε}): chain the k hops, each adding δ scaled by the e^{ε}
      factors of the hops after it (Vadhan 2017, Lemma 2.2). Up to 64 units the sum adds
      each e^{iε} rounded up; beyond, it is the closed form (e^{kε} - 1)/(e^ε - 1) with e^{kε}
      rounded up and e^ε - 1 bounded below by ε + ε²/2 + ε³/6 (its Taylor terms are positive).

    ``units`` is a whole number >= 0 (a privacy unit is in the data or not); 0 gives a zero
    loss. A group guarantee whose δ reaches 1 says nothing and is refused.
    """
    k_exact = fraction_of("d_in", units)
    if k_exact < 0 or k_exact.denominator != 1:
        raise InvalidParameterError("d_in", units, "a whole number of privacy units >= 0")
    k = int(k_exact)
    if isinstance(loss, PureDP):
        return PureDP(k * loss.epsilon)
    if isinstance(loss, ZCDP):
        return ZCDP(k * k * loss.rho)
    if k <= 1 or loss.delta == 0:
        return ApproxDP(k * loss.epsilon, k * loss.delta if k <= 1 else 0)
    epsilon, delta = loss.epsilon, loss.delta
    vacuous = InvalidParameterError(
        "d_in",
        units,
        f"a group whose δ·Σ_(i<k) e^(iε) stays below 1 (here ε = {_fmt(epsilon)}, δ = "
        f"{_fmt(delta)}: the group guarantee would say nothing)",
    )
    # cheap first, exactly: the sum is at least e^{(k-1)ε}, so (k-1)ε beyond ln(1/δ) makes
    # δ' >= 1 whatever the rounding (and keeps the exact exponential below small)
    if (k - 1) * epsilon > Fraction(log_upper(1 / delta)) + 1:
        raise vacuous
    if k <= _GROUP_EXACT_SUM:
        factor = sum((exp_upper(i * epsilon) for i in range(1, k)), Fraction(1))
    else:
        below = epsilon + epsilon**2 / 2 + epsilon**3 / 6  # <= e^ε - 1
        factor = (exp_upper(k * epsilon) - 1) / below if epsilon > 0 else Fraction(k)
    group_delta = delta * factor
    if group_delta >= 1:
        raise vacuous
    return ApproxDP(k * epsilon, group_delta)


def group_share(budget: PrivacyLoss, units: int, scale: Fraction = Fraction(1)) -> PrivacyLoss:
    """A loss per unit whose :func:`group_privacy` at ``units`` fits ``budget``: ε/k, ρ/k², or
    (ε/k, δ/(2k·e^ε)) (the group δ sums k terms of at most e^ε each). ``scale`` (in (0, 1])
    shrinks ε or ρ further (for callers that compose the per-unit loss again before the group
    step and must check the result against ``budget``)."""
    if units < 1:
        raise InvalidParameterError("units", units, "a whole number of privacy units >= 1")
    if isinstance(budget, PureDP):
        return PureDP(budget.epsilon * scale / units)
    if isinstance(budget, ZCDP):
        return ZCDP(budget.rho * scale / units**2)
    delta = budget.delta / (2 * units * exp_upper(budget.epsilon)) if units > 1 else budget.delta
    return ApproxDP(budget.epsilon * scale / units, delta)


def _fmt(x: Fraction) -> str:
    return number(x)  # never 309 digits for ε = 1e308 (dpkit._format)


def exp_epsilon_upper(loss: PureDP) -> Fraction:
    """An upper bound on e^ε (used by checks that compare probability ratios)."""
    return exp_upper(fraction_of("epsilon", loss.epsilon))
