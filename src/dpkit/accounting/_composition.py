"""Composition rules, each exact or rounded up to a certified fraction.

* sequential: (ε₁, δ₁) then (ε₂, δ₂) is (ε₁+ε₂, δ₁+δ₂); ρ adds for zCDP
  (Dwork & Roth 2014, Thm. 3.16; Bun & Steinke 2016, Lemma 2.3).
* parallel: disjoint parts of the data cost the largest part (McSherry 2009, Thm. 4).
* post-processing: free (Dwork & Roth 2014, Prop. 2.1).
* advanced composition: k adaptive (ε, δ)-DP mechanisms are
  (sqrt(2k·ln(1/δ'))·ε + k·ε·(e^ε - 1), k·δ + δ')-DP (Dwork, Rothblum & Vadhan 2010, Thm. III.3);
  for different εᵢ: (sqrt(2·ln(1/δ')·Σεᵢ²) + Σεᵢ(e^εᵢ - 1), Σδᵢ + δ') (ibid.; Dwork & Roth 2014,
  Thm. 3.20 and the remark after it).
* optimal homogeneous composition (Kairouz, Oh & Viswanath 2015, Thm. 3.3; in the form of Murtagh
  & Vadhan 2016, Thm. 1.5): k adaptive (ε, δ)-DP mechanisms are (ε', δ_g)-DP exactly when
  δ_g >= 1 - (1-δ)^k·(1 - Σ_ℓ C(k,ℓ)·max(0, e^{(k-ℓ)ε} - e^{ε'+ℓε}) / (1+e^ε)^k), and no
  smaller ε' holds for every such mechanism. We solve for ε' in floating point, round up, and
  *verify* the candidate with interval arithmetic on integers (every transcendental value is
  bracketed by exact fractions), raising it until the verification passes.
* zCDP: ρ adds; ε-DP is ε²/2-zCDP; ρ-zCDP converts to (ε, δ) (Bun & Steinke 2016, Prop. 1.3;
  Canonne, Kamath & Steinke 2020, Cor. 13), see :meth:`dpkit.core._losses.ZCDP.to_approx`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from dpkit._exact import Number, check_delta, exp_upper, log_upper, sqrt_upper
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, compose, parallel
from dpkit.errors import InvalidParameterError

__all__ = [
    "CompositionBound",
    "advanced_composition",
    "basic_composition",
    "best_composition",
    "optimal_homogeneous_composition",
    "optimal_homogeneous_delta",
    "parallel_composition",
    "postprocess",
    "sequential_composition",
    "zcdp_composition",
]


def sequential_composition(*losses: PrivacyLoss) -> PrivacyLoss:
    """The loss of running every mechanism on the same data (ε and δ add; ρ adds)."""
    return compose(*losses)


def parallel_composition(*losses: PrivacyLoss) -> PrivacyLoss:
    """Mechanisms on disjoint parts of the data (one privacy unit in one part): the maximum."""
    return parallel(*losses)


def postprocess(loss: PrivacyLoss) -> PrivacyLoss:
    """Post-processing a release costs nothing more: the loss is unchanged."""
    return loss


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidParameterError("k", k, "a whole number of mechanisms >= 1")
    return k


def _as_approx(loss: PrivacyLoss, name: str = "loss") -> ApproxDP:
    if isinstance(loss, PureDP):
        return loss.to_approx()
    if isinstance(loss, ApproxDP):
        return loss
    raise InvalidParameterError(
        name, loss, "a PureDP or ApproxDP loss", "For zCDP losses use zcdp_composition."
    )


def basic_composition(loss: PrivacyLoss, k: int) -> PrivacyLoss:
    """k-fold sequential composition of one loss: (kε, kδ) or kρ, exactly."""
    _check_k(k)
    if isinstance(loss, PureDP):
        return PureDP(k * loss.epsilon)
    if isinstance(loss, ZCDP):
        return ZCDP(k * loss.rho)
    if k * loss.delta >= 1:
        raise InvalidParameterError("k", k, f"small enough that k·δ < 1 (δ = {loss.delta})")
    return ApproxDP(k * loss.epsilon, k * loss.delta)


def _exp_lower(x: Fraction) -> Fraction:
    return 1 / exp_upper(-x)


def advanced_composition(
    loss: PrivacyLoss | Sequence[PrivacyLoss], k: int | None = None, *, delta_prime: Number
) -> ApproxDP:
    """Advanced composition (Dwork, Rothblum & Vadhan 2010), rounded up.

    Args:
        loss: one (ε, δ) loss repeated ``k`` times, or a sequence of losses (εᵢ, δᵢ).
        k: the number of repetitions (only with a single loss).
        delta_prime: the extra δ' the bound spends.

    Returns:
        (sqrt(2·ln(1/δ')·Σεᵢ²) + Σεᵢ(e^εᵢ - 1), Σδᵢ + δ').
    """
    d_prime = check_delta(delta_prime, "delta_prime", allow_zero=False)
    if isinstance(loss, PureDP | ApproxDP | ZCDP):
        losses = [_as_approx(loss)] * _check_k(k if k is not None else 0)
    else:
        if k is not None:
            raise InvalidParameterError("k", k, "None when a sequence of losses is given")
        losses = [_as_approx(x, "losses") for x in loss]
        if not losses:
            raise InvalidParameterError("loss", loss, "at least one loss")
    log_term = log_upper(1 / d_prime)
    unique: dict[Fraction, int] = {}
    for x in losses:
        unique[x.epsilon] = unique.get(x.epsilon, 0) + 1
    sum_sq = sum((e * e * n for e, n in unique.items()), Fraction(0))
    drift = sum((n * e * (exp_upper(e) - 1) for e, n in unique.items() if e > 0), Fraction(0))
    epsilon = sqrt_upper(2 * log_term * sum_sq) + drift
    delta = sum((x.delta for x in losses), Fraction(0)) + d_prime
    if delta >= 1:
        raise InvalidParameterError("delta_prime", delta_prime, "small enough that Σδ + δ' < 1")
    return ApproxDP(epsilon, delta)


# --- Kairouz, Oh & Viswanath: the optimal bound for k identical (ε, δ) mechanisms -------------

_BITS = 256  # significant bits kept by the outward-rounded binary floats of the verification

_Dyadic = tuple[int, int]  # (mantissa, exponent): the value mantissa·2^exponent, mantissa >= 0


def _dyadic(x: Fraction, *, up: bool) -> _Dyadic:
    """x (>= 0) rounded up (or down) to a binary float with 256 significant bits."""
    if x == 0:
        return (0, 0)
    shift = _BITS - (x.numerator.bit_length() - x.denominator.bit_length())
    scaled = x * Fraction(2) ** shift
    mantissa = math.ceil(scaled) if up else math.floor(scaled)
    return (mantissa, -shift)


def _normalise(mantissa: int, exponent: int, *, up: bool) -> _Dyadic:
    excess = mantissa.bit_length() - _BITS
    if excess <= 0:
        return (mantissa, exponent)
    rounded = -((-mantissa) >> excess) if up else mantissa >> excess
    return (rounded, exponent + excess)


def _mul(a: _Dyadic, b: _Dyadic, *, up: bool) -> _Dyadic:
    return _normalise(a[0] * b[0], a[1] + b[1], up=up)


def _powers(base: _Dyadic, count: int, *, up: bool) -> list[_Dyadic]:
    """base^j for j = 0..count, rounded up (or down) at every step."""
    out: list[_Dyadic] = [(1, 0)]
    for _ in range(count):
        out.append(_mul(out[-1], base, up=up))
    return out


def _value(a: _Dyadic) -> Fraction:
    return Fraction(a[0]) * Fraction(2) ** a[1]


def optimal_homogeneous_delta(loss: PrivacyLoss, k: int, epsilon: Number) -> Fraction:
    """An upper bound, in exact arithmetic, on the smallest δ_g with k-fold (ε', δ_g)-DP.

    δ_g = 1 - (1-δ)^k·(1 - S), S = Σ_ℓ C(k,ℓ)·max(0, p^{k-ℓ}q^ℓ - e^{ε'}·p^ℓ q^{k-ℓ}) with
    p = e^ε/(1+e^ε), q = 1 - p (Kairouz, Oh & Viswanath 2015; Murtagh & Vadhan 2016, Thm. 1.5).
    Every factor is bracketed in 256-bit fixed point, rounded outward at each step, so the value
    returned is >= the true δ_g and exceeds it by at most ~k·C(k, k/2)·2^-250.
    """
    base = _as_approx(loss)
    _check_k(k)
    eps_prime = epsilon if isinstance(epsilon, Fraction) else Fraction(str(epsilon))
    if eps_prime < 0:
        raise InvalidParameterError("epsilon", epsilon, ">= 0")
    e = base.epsilon
    s_upper = Fraction(0)
    if e > 0:
        big_e_hi, big_e_lo = exp_upper(e), _exp_lower(e)
        p_hi = _dyadic(big_e_hi / (1 + big_e_hi), up=True)
        p_lo = _dyadic(big_e_lo / (1 + big_e_lo), up=False)
        q_hi = _dyadic(1 / (1 + big_e_lo), up=True)
        q_lo = _dyadic(1 / (1 + big_e_hi), up=False)
        x_lo = _dyadic(_exp_lower(eps_prime), up=False)
        # Terms can be positive only while (k - 2ℓ)·ε > ε' (up to rounding).
        last = min(k, max(0, int((k - eps_prime / e) / 2) + 1))
        ph = _powers(p_hi, k, up=True)
        qh = _powers(q_hi, k, up=True)
        pl = _powers(p_lo, k, up=False)
        ql = _powers(q_lo, k, up=False)
        binom = 1
        for ell in range(last + 1):
            if ell > 0:
                binom = binom * (k - ell + 1) // ell
            upper = _value(_mul(_mul(ph[k - ell], qh[ell], up=True), (binom, 0), up=True))
            lower = _value(
                _mul(
                    _mul(_mul(pl[ell], ql[k - ell], up=False), x_lo, up=False), (binom, 0), up=False
                )
            )
            if upper > lower:
                s_upper += upper - lower
        s_upper = min(s_upper, Fraction(1))
    return 1 - (1 - base.delta) ** k * (1 - s_upper)


def optimal_homogeneous_composition(loss: PrivacyLoss, k: int, *, delta: Number) -> ApproxDP:
    """The smallest ε' (rounded up, verified) with k-fold (ε', δ)-DP, by Kairouz et al. 2015.

    Args:
        loss: the (ε₀, δ₀) of each of the k mechanisms (a PureDP loss has δ₀ = 0).
        k: the number of adaptively composed mechanisms.
        delta: the total δ; must exceed 1 - (1-δ₀)^k.
    """
    base = _as_approx(loss)
    _check_k(k)
    target = check_delta(delta, allow_zero=False)
    floor = 1 - (1 - base.delta) ** k
    if target <= floor:
        raise InvalidParameterError(
            "delta", delta, f"> 1 - (1-δ₀)^k = {float(floor):.3g}", "No ε makes it smaller."
        )
    cap = k * base.epsilon
    if base.epsilon == 0 or optimal_homogeneous_delta(base, k, 0) <= target:
        return ApproxDP(0, target)
    candidate = _kov_candidate(base, k, target)
    if candidate is None or candidate >= cap:
        return ApproxDP(cap, target)
    for bump in (Fraction(1, 10**12), Fraction(1, 10**9), Fraction(1, 10**6), Fraction(1, 10**3)):
        trial = min(cap, candidate * (1 + bump) + bump * base.epsilon)
        if optimal_homogeneous_delta(base, k, trial) <= target:
            return ApproxDP(trial, target)
    return ApproxDP(cap, target)  # k·ε with δ_g >= k·δ... always valid as (kε, 1-(1-δ)^k)


def _kov_candidate(base: ApproxDP, k: int, target: Fraction) -> Fraction | None:
    """Solve δ_g(ε') = target in 60-digit decimal arithmetic (verified afterwards)."""
    with localcontext() as ctx:
        ctx.prec = 60
        eps = Decimal(base.epsilon.numerator) / Decimal(base.epsilon.denominator)
        d0 = Decimal(base.delta.numerator) / Decimal(base.delta.denominator)
        dt = Decimal(target.numerator) / Decimal(target.denominator)
        big_e = eps.exp()
        p = big_e / (1 + big_e)
        q = 1 / (1 + big_e)
        needed_s = 1 - (1 - dt) / (1 - d0) ** k  # S(ε') must be <= this
        if needed_s < 0:
            return None
        # A_m = Σ_{ℓ<m} C(k,ℓ) p^{k-ℓ} q^ℓ,  B_m = Σ_{ℓ<m} C(k,ℓ) p^ℓ q^{k-ℓ}
        a_terms = []
        b_terms = []
        binom = Decimal(1)
        for ell in range(k // 2 + 1):
            if ell > 0:
                binom = binom * (k - ell + 1) / ell
            a_terms.append(binom * p ** (k - ell) * q**ell)
            b_terms.append(binom * p**ell * q ** (k - ell))
        a_cum = Decimal(0)
        b_cum = Decimal(0)
        # On [(k-2m)ε, (k-2m+2)ε] the active terms are ℓ < m: S = A_m - e^{ε'}·B_m.
        for m in range(1, k // 2 + 2):
            if m - 1 < len(a_terms):
                a_cum += a_terms[m - 1]
                b_cum += b_terms[m - 1]
            low = (k - 2 * m) * eps
            high = (k - 2 * m + 2) * eps
            s_at_low = a_cum - (low.exp() if low > 0 else Decimal(1)) * b_cum
            if low <= 0 or s_at_low > needed_s:
                x = (a_cum - needed_s) / b_cum
                if x <= 1:
                    return Fraction(0)
                solution = x.ln()
                solution = max(solution, max(low, Decimal(0)))
                solution = min(solution, high)
                return Fraction(solution)
        return None


# --- zCDP ----------------------------------------------------------------------------------


def zcdp_composition(losses: Sequence[PrivacyLoss], *, delta: Number | None = None) -> PrivacyLoss:
    """Compose in zCDP (ε-DP counts as ε²/2-zCDP) and, if ``delta`` is given, convert."""
    if not losses:
        raise InvalidParameterError("losses", losses, "at least one loss")
    rho = Fraction(0)
    for x in losses:
        if isinstance(x, ZCDP):
            rho += x.rho
        elif isinstance(x, PureDP) or (isinstance(x, ApproxDP) and x.delta == 0):
            rho += x.epsilon**2 / 2
        else:
            raise InvalidParameterError(
                "losses", x, "PureDP or ZCDP losses", "(ε, δ) with δ > 0 has no zCDP bound."
            )
    total = ZCDP(rho)
    return total if delta is None else total.to_approx(delta)


# --- the tightest available bound ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompositionBound:
    """The tightest certified (ε, δ) found, which rule gave it, and every rule's ε."""

    loss: ApproxDP
    method: str
    candidates: dict[str, Fraction]

    def __str__(self) -> str:
        shown = ", ".join(f"{k}: ε={float(v):.6g}" for k, v in self.candidates.items())
        return f"{self.loss} by {self.method} ({shown})"


def best_composition(losses: Sequence[PrivacyLoss], *, delta: Number) -> CompositionBound:
    """Every applicable rule for composing ``losses`` at total δ; the smallest ε wins.

    Rules tried: basic (when Σδᵢ <= δ), advanced (δ' = δ - Σδᵢ), optimal homogeneous (identical
    (ε, δ) losses), zCDP (pure and zCDP losses).
    """
    if not losses:
        raise InvalidParameterError("losses", losses, "at least one loss")
    target = check_delta(delta, allow_zero=False)
    candidates: dict[str, Fraction] = {}
    has_zcdp = any(isinstance(x, ZCDP) for x in losses)
    approx = [] if has_zcdp else [_as_approx(x) for x in losses]
    if approx:
        sum_delta = sum((x.delta for x in approx), Fraction(0))
        if sum_delta <= target:
            candidates["basic"] = sum((x.epsilon for x in approx), Fraction(0))
        if sum_delta < target:
            candidates["advanced"] = advanced_composition(
                approx, delta_prime=target - sum_delta
            ).epsilon
        if all(x == approx[0] for x in approx):
            with contextlib.suppress(InvalidParameterError):
                candidates["optimal"] = optimal_homogeneous_composition(
                    approx[0], len(approx), delta=target
                ).epsilon
    if all(
        isinstance(x, PureDP | ZCDP) or (isinstance(x, ApproxDP) and x.delta == 0) for x in losses
    ):
        result = zcdp_composition(losses, delta=target)
        assert isinstance(result, ApproxDP)
        candidates["zcdp"] = result.epsilon
    if not candidates:
        raise InvalidParameterError(
            "delta", delta, "at least the sum of the losses' δ", "Allow a larger total δ."
        )
    method = min(candidates, key=lambda name: candidates[name])
    return CompositionBound(ApproxDP(candidates[method], target), method, candidates)
