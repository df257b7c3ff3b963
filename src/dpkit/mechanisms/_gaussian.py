"""The Gaussian mechanism on a grid, and the discrete Gaussian mechanism for integers.

Both add discrete Gaussian noise (Canonne, Kamath & Steinke 2020, "CKS"), sampled exactly, in
grid units; continuous-valued inputs are rounded to the grid first (:mod:`dpkit.noise._grid`).

Guarantees, for inputs at L2 distance <= Δ, with s the distance in grid steps (⌈Δ/g⌉ for scalars):

* zCDP (``rho=`` given): ρ = s²/(2σ²) with σ in grid units (CKS Thm. 14: the Rényi divergence
  between N_Z(0, σ²) and N_Z(s, σ²) is at most α·s²/(2σ²) for every integer shift s).
* (ε, δ)-DP (``epsilon=``, ``delta=``): σ is first calibrated for the *continuous* Gaussian,
  either by the classic bound σ = Δ·sqrt(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm. A.1, which needs
  ε < 1) or by the analytic calibration of Balle & Wang 2018 (Thm. 8, exact for every ε). The
  privacy map then reports the δ of the *discrete* Gaussian actually used, computed from its
  privacy profile δ(ε) = Σ_k max(0, p(k) - e^ε p(k - s)) (CKS Thm. 7) by summation over ±40σ
  (the rest is below e^-800), rounded up; if that δ exceeded the target, σ is raised until it
  does not. For vectors (several changed coordinates) the map goes through zCDP instead.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit._exact import Number, check_delta, check_epsilon, check_rho
from dpkit.core._framework import Measurement
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms._additive import (
    check_changed_coordinates,
    lattice_l2_steps,
    make_grid_measurement,
)
from dpkit.mechanisms._info import AdditiveInfo
from dpkit.mechanisms._laplace import _check_grid_exponent, _sensitivity
from dpkit.noise._distributions import DiscreteGaussian
from dpkit.noise._grid import choose_exponent, grid_spacing

__all__ = [
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "discrete_gaussian_delta",
    "make_discrete_gaussian",
    "make_gaussian",
]

_RESOLUTION_BITS = 12  # σ spans 2^12..2^13 grid steps: fine, and the δ sum stays fast


def classic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """σ = Δ·sqrt(2·ln(1.25/δ))/ε (Dwork & Roth 2014, Thm. A.1; valid for ε < 1)."""
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def _continuous_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """δ(ε) of the continuous Gaussian (Balle & Wang 2018, Thm. 8), computed in log space."""
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    from scipy.special import log_ndtr  # imported when used: scipy takes ~0.4 s to load

    first = log_ndtr(a - b)
    second = epsilon + log_ndtr(-a - b)
    if second >= first:
        return 0.0
    return float(math.exp(first) * -math.expm1(second - first))


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The smallest σ with δ(ε) <= delta for the continuous Gaussian (Balle & Wang 2018)."""
    low, high = 1e-12 * sensitivity, sensitivity
    while _continuous_delta(high, sensitivity, epsilon) > delta:
        low, high = high, high * 2
    for _ in range(200):
        mid = (low + high) / 2
        if _continuous_delta(mid, sensitivity, epsilon) > delta:
            low = mid
        else:
            high = mid
        if high - low <= 1e-14 * high:
            break
    return high


def discrete_gaussian_delta(sigma2: Fraction, shift: int, epsilon: Fraction) -> Fraction:
    """δ(ε) of N_Z(0, σ²) against N_Z(shift, σ²), by summation, rounded up (CKS Thm. 7)."""
    sigma = math.sqrt(float(sigma2))
    # δ = Σ_k p(k)·max(0, 1 − e^ε q(k)/p(k)): every term is at most p(k), so |k| <= 40σ + 2
    # carries all but < 2^-60 of it, whatever the shift (summing out to the shift cost 3 s and
    # 16 M terms at ε = 10^6, and exhausted memory at ε = 10^10)
    radius = math.ceil(40 * sigma) + 2
    k = np.arange(-radius, radius + 1, dtype=np.float64)
    s2 = float(sigma2)
    log_p = -k * k / (2 * s2)
    log_q = -((k - shift) ** 2) / (2 * s2)
    log_norm = float(np.logaddexp.reduce(log_p))
    eps = float(epsilon)
    excess = -np.expm1(np.minimum(eps + log_q - log_p, 0.0))  # max(0, 1 - e^{ε} q/p)
    total = float(np.sum(np.exp(log_p - log_norm) * excess))
    # float summation error is far below 1e-9 relative; 2^-60 covers the truncated tails
    return Fraction(total) * (1 + Fraction(1, 10**9)) + Fraction(1, 2**60)


def make_gaussian(
    sensitivity: Number,
    epsilon: Number | None = None,
    delta: Number | None = None,
    *,
    rho: Number | None = None,
    calibration: Literal["analytic", "classic"] = "analytic",
    grid_exponent: int | None = None,
    changed_coordinates: int | None = None,
) -> Measurement[Any]:
    """Gaussian noise on a grid: (ε, δ)-DP or ρ-zCDP for inputs within L2 distance Δ.

    Give either ``epsilon`` and ``delta`` (approximate DP; ``calibration`` picks the classic or
    the analytic Gaussian) or ``rho`` (zCDP).

    Example:
        >>> import dpkit as dp
        >>> m = dp.make_gaussian(sensitivity=1, epsilon=1, delta=1e-6)
        >>> m.loss.epsilon, m.loss.delta <= 1e-6
        (Fraction(1, 1), True)
        >>> dp.make_gaussian(sensitivity=1, rho=0.5).loss
        ZCDP(rho=Fraction(1, 2))
    """
    return _make(
        sensitivity,
        epsilon,
        delta,
        rho,
        calibration,
        grid_exponent,
        changed_coordinates,
        integer=False,
    )


def make_discrete_gaussian(
    sensitivity: Number,
    epsilon: Number | None = None,
    delta: Number | None = None,
    *,
    rho: Number | None = None,
    calibration: Literal["analytic", "classic"] = "analytic",
    changed_coordinates: int | None = None,
) -> Measurement[Any]:
    """Discrete Gaussian noise for integer data (CKS 2020): zCDP or (ε, δ)-DP; releases int64.

    Example:
        >>> import dpkit as dp
        >>> dp.make_discrete_gaussian(sensitivity=1, rho=Fraction(1, 8)).loss
        ZCDP(rho=Fraction(1, 8))
    """
    return _make(
        sensitivity, epsilon, delta, rho, calibration, None, changed_coordinates, integer=True
    )


def _make(
    sensitivity: Number,
    epsilon: Number | None,
    delta: Number | None,
    rho: Number | None,
    calibration: str,
    grid_exponent: int | None,
    changed_coordinates: int | None,
    *,
    integer: bool,
) -> Measurement[Any]:
    delta_f = _sensitivity(sensitivity)
    exponent_arg = _check_grid_exponent(grid_exponent)
    changed = check_changed_coordinates(changed_coordinates)
    if calibration not in ("analytic", "classic"):
        raise InvalidParameterError("calibration", calibration, "'analytic' or 'classic'")
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise InvalidParameterError("rho", rho, "given alone, without epsilon and delta")
        rho_f = check_rho(rho)
        sigma_real = float(delta_f) / math.sqrt(2 * float(rho_f))
        measure = "zcdp"
    else:
        if epsilon is None or delta is None:
            raise InvalidParameterError(
                "delta",
                delta,
                "given together with epsilon (or pass rho= for zCDP)",
                "The Gaussian mechanism cannot be pure DP: it needs delta > 0.",
            )
        eps = check_epsilon(epsilon)
        target = check_delta(delta, allow_zero=False)
        if calibration == "classic":
            if eps >= 1:
                raise InvalidParameterError(
                    "epsilon",
                    epsilon,
                    "< 1 for the classic Gaussian bound",
                    "Use calibration='analytic', which is valid (and tighter) for every epsilon.",
                )
            sigma_real = classic_gaussian_sigma(float(delta_f), float(eps), float(target))
        else:
            sigma_real = analytic_gaussian_sigma(float(delta_f), float(eps), float(target))
        measure = "approx"
    if integer:
        exponent = 0
    elif exponent_arg is not None:
        exponent = exponent_arg
    elif measure == "zcdp":
        # from σ² = Δ²/(2ρ) exactly: a float σ underflows to 0 at a huge ρ (ρ = 1e308 raised
        # "math domain error"); ⌊log2 σ⌋ = ⌊⌊log2 σ²⌋ / 2⌋
        exponent = choose_exponent(delta_f**2 / (2 * rho_f), 0) // 2 - _RESOLUTION_BITS
    else:
        exponent = math.floor(math.log2(sigma_real)) - _RESOLUTION_BITS
    g = grid_spacing(exponent)
    steps_calibrated = lattice_l2_steps(delta_f, exponent, changed)
    sigma_l = Fraction(sigma_real) / g
    if measure == "zcdp":
        # rounding can add up to one step: keep ρ exact by using the grid sensitivity
        sigma2 = steps_calibrated**2 / (2 * rho_f)
    else:
        # round σ² up to a multiple of 2^-20 grid steps²: short fractions, never less noise
        sigma2 = Fraction(math.ceil(sigma_l**2 * 2**20), 2**20)
        sigma2 = _raise_until_within(sigma2, steps_calibrated, eps, target, changed)
    lattice = DiscreteGaussian(sigma2)

    def loss_of_steps(steps: Fraction) -> PrivacyLoss:
        zcdp = ZCDP(steps**2 / (2 * sigma2))
        if measure == "zcdp":
            return zcdp
        if (changed or 1) == 1 and steps.denominator == 1:
            return ApproxDP(eps, discrete_gaussian_delta(sigma2, int(steps), eps))
        return ApproxDP(eps, _zcdp_delta(zcdp, eps))

    return make_grid_measurement(
        name="discrete_gaussian" if integer else "gaussian",
        lattice=lattice,
        exponent=exponent,
        measure=measure,  # type: ignore[arg-type]
        metric="l2",
        loss_of_steps=loss_of_steps,
        sensitivity=delta_f,
        changed_coordinates=changed,
        integer_output=integer,
        info=AdditiveInfo(
            sigma=math.sqrt(float(sigma2)) * float(g),
            grid_exponent=exponent,
            calibration=calibration if measure == "approx" else "zcdp",
        ),
    )


def _zcdp_delta(zcdp: ZCDP, epsilon: Fraction) -> Fraction:
    """The smallest δ (up to a factor 1.001) whose exact zCDP conversion gives ε or less;
    1 - tiny if none.

    A float estimate (the better of Bun & Steinke's closed form and Canonne, Kamath & Steinke's
    bound minimised over a fine grid of α) proposes δ; the exact conversion ``to_approx`` then
    certifies it, raising δ by 0.1 % until it does. Only the certified value is returned, so the
    estimate's rounding can cost tightness, never privacy (it replaced a 60-step bisection of
    exact conversions that took seconds).
    """
    top = Fraction(999999, 10**6)
    if zcdp.to_approx(top).epsilon > epsilon:
        return top
    rho, eps = float(zcdp.rho), float(epsilon)
    if rho <= 0:
        return Fraction(0)
    alphas = 1 + np.logspace(-6, 6, 20_001)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        log_cks = (
            (alphas - 1) * (alphas * rho - eps)
            - np.log(alphas - 1)
            + alphas * np.log1p(-1 / alphas)
        )
    log_delta = float(np.nanmin(log_cks))
    if eps > rho:
        log_delta = min(log_delta, -((eps - rho) ** 2) / (4 * rho))
    candidate = Fraction(math.exp(max(log_delta, -300.0)))
    for _ in range(400):
        if candidate >= top:
            return top
        if zcdp.to_approx(candidate).epsilon <= epsilon:
            return candidate
        candidate *= Fraction(1001, 1000)
    return top


def _raise_until_within(
    sigma2: Fraction, steps: Fraction, epsilon: Fraction, delta: Fraction, changed: int | None
) -> Fraction:
    def ok(s2: Fraction) -> bool:
        if (changed or 1) == 1 and steps.denominator == 1:
            return discrete_gaussian_delta(s2, int(steps), epsilon) <= delta
        return _zcdp_delta(ZCDP(steps**2 / (2 * s2)), epsilon) <= delta

    factor = Fraction(10001, 10000)
    while not ok(sigma2):
        sigma2 *= factor
        factor *= factor
    return sigma2
