"""Releases calibrated to β-smooth sensitivity (Nissim, Raskhodnikova & Smith 2007).

``make_smooth_sensitivity(statistic, ...)`` releases f(x) + (S(x)/α)·Z on a grid, where S is a
β-smooth upper bound on the local sensitivity of the *grid-rounded* statistic and Z is
admissible noise:

* ``noise="cauchy"`` (default): P(Z = z) ∝ 1/(1 + |z/s|^γ), γ = 4 by default — **pure ε-DP**.
  Continuous argument (NRS07 Lemma 2.6 with Lemma 2.7's family): sliding the density by at most
  α in scale units costs at most γ·c_γ·α where c_γ = max_u u^{γ−1}/(1 + u^γ) (c_4 < 0.57,
  c_γ <= 1), and dilating the scale by e^{±β} costs at most max(1, γ − 1)·β, pointwise.
* ``noise="laplace"``: discrete Laplace — **(ε, δ)-DP**. Pointwise, the log-ratio of the two
  output densities is at most β + α·e^β + (e^β − 1)·|Z|, so it is at most ε except on
  {|Z| > T}, whose probability is e^{−T}(1 + 1/(2t)) <= δ with T = ln(2/δ).

**The lattice.** f(x) is rounded to the grid g = 2^k (k public, from the declared bounds) and Z is
sampled *exactly* on the integers with the lattice version of the density (``_noise.py`` for the
heavy-tailed family; :func:`dpkit.noise.discrete_laplace` for Laplace). Rounding moves the
statistic by less than one grid step, so S + 2g bounds the rounded (and float-computed) statistic's
local sensitivity and is still β-smooth. The lattice pmf at o is the continuous density times
N(s)/(s·I) where N(s) = Σ_z h(z/s) and I = ∫h: for a symmetric unimodal h with h(0) = 1,
|N(s) − sI| <= 1, so every pointwise ratio of the continuous proof gains at most the factor
(1 + η)/(1 − η) with η = 1/(s_min·I); dpkit forces s >= s_min = max(2^20, 2^12/ε) grid steps and
charges ln((1 + η)/(1 − η)) in ε. docs/sensitivity.md §3 has the proof.

Outputs are clamped to a public range around the statistic's range (post-processing).

**The variance** is released exactly on a grid (:mod:`dpkit.sensitivity._variance`): values are
clamped and rounded to 2^-grid_bits of the bounds' width (a per-value map inside the mechanism),
the variance of the rounded values is computed in integer arithmetic, and S is the β-smooth
sensitivity at the *rounded* data, i.e. of exactly the function released.

**zCDP families (Bun & Steinke 2019)**, ``noise=`` ``"laplace_log_normal"``,
``"uniform_log_normal"`` or ``"student_t"`` with ``rho=``: the release is the *exact grid
rounding* ⌊(f̃(x) + (S(x)/s)·Z)/g⌋·g of the ideal continuous mechanism, clamped to the public
range. Z is an explicit function of finitely many uniforms, evaluated lazily with certified
interval arithmetic on the same uniforms until the floor is decided (``_lazy.py``), so the output
is a deterministic function (post-processing) of the continuous mechanism's output and its
½ε²-zCDP guarantee (``bun_steinke.py``: ε = t/σ + L·s, L the Lipschitz constant of ln p) holds
unchanged: no lattice slack is needed. ``"arcsinh_normal"`` is calibrated by the Lipschitz
constant of its privacy loss as a function of the Gaussian (``bun_steinke``; docs §3d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, check_delta, check_epsilon, exp_upper, log_upper
from dpkit.core._framework import Measurement
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.core._spaces import AtomDomain, ChangeOneDistance, VectorDomain
from dpkit.errors import InvalidParameterError, UnsupportedQueryError
from dpkit.sensitivity._bun_steinke import ZCDPNoise, calibrate
from dpkit.sensitivity._data import Bounds, Statistic, check_n, make_statistic, prepare
from dpkit.sensitivity._info import SensitivityInfo
from dpkit.sensitivity._lazy import floor_scaled_noise
from dpkit.sensitivity._local import SMOOTH_SLACK, smooth_sensitivity_sorted
from dpkit.sensitivity._noise import cauchy_lattice, discrete_laplace_wide
from dpkit.sensitivity._variance import (
    DEFAULT_GRID_BITS,
    check_grid_bits,
    grid_values,
    variance_smooth_sensitivity,
    variance_value,
)

__all__ = ["SmoothPlan", "make_smooth_sensitivity", "statistic_range", "statistic_value"]

_BETA_SLACK = Fraction(1, 2**29)  # >= ln(1 + 2^-29): the float inflation of S
# lower bounds on ∫h for the lattice term: the Cauchy-type h = 1/(1 + |u|^γ) has
# ∫h = 2(π/γ)/sin(π/γ) > 2 (γ >= 2), the Laplace h = e^{-|u|} has ∫h = 2
_INTEGRAL_LOWER = {"cauchy": Fraction(1), "laplace": Fraction(2)}


def cauchy_slide_constant(gamma: int) -> Fraction:
    """c_γ >= max_{u>=0} u^{γ−1}/(1 + u^γ) (attained at u^γ = γ − 1, value (γ−1)^{(γ−1)/γ}/γ:
    0.5699 for γ = 4, below 1 for every γ >= 2); sliding h by α costs at most γ·c_γ·α."""
    return Fraction(57, 100) if gamma == 4 else Fraction(1)


def dilation_constant(gamma: int) -> int:
    """The pointwise cost per unit of log-scale of dilating h = 1/(1 + |u|^γ): the log-ratio
    b + ln((1 + e^{−γb}|u|^γ)/(1 + |u|^γ)) lies between −(γ − 1)|b| and |b|."""
    return max(1, gamma - 1)


_BZ_FAMILIES = ("student_t", "laplace_log_normal", "uniform_log_normal", "arcsinh_normal")


def statistic_range(stat: Statistic, bounds: Bounds, n: int) -> tuple[float, float]:
    """The public range [a, b] of the statistic's value."""
    if stat.name in ("count", "distinct"):
        return 0.0, float(n)
    if stat.name == "sum":
        return n * bounds.lower, n * bounds.upper
    if stat.name == "range":
        return 0.0, bounds.width
    if stat.name == "variance":
        return 0.0, bounds.width**2 / 4
    return bounds.lower, bounds.upper


def statistic_value(xp: np.ndarray, stat: Statistic) -> float:
    """f(x) from padded sorted clamped data (sums by math.fsum: correctly rounded)."""
    n = xp.size - 2
    x = xp[1:-1]
    name = stat.name
    if name == "quantile":
        return float(x[stat.rank(n) - 1])
    if name == "count":
        return float(np.count_nonzero(x))
    if name == "distinct":
        return float(np.count_nonzero(np.diff(x)) + 1)
    if name == "range":
        return float(x[-1] - x[0])
    if name == "sum":
        return math.fsum(x)
    if name in ("mean", "trimmed_mean"):
        t = stat.trimmed(n)
        return math.fsum(x[t : n - t]) / (n - 2 * t)
    raise UnsupportedQueryError(f"{name}: no smooth-sensitivity release (use the analysis tools)")


def default_exponent(low: float, high: float) -> int:
    """k with 2^(k+50) >= max(|a|, |b|, b − a): outputs clamped to [a − w, b + w] stay < 2^52."""
    magnitude = max(abs(low), abs(high), high - low, 2.0**-900)
    return math.frexp(magnitude)[1] - 50


@dataclass(frozen=True, slots=True)
class SmoothPlan:
    """The public calibration of a smooth-sensitivity release (all exact)."""

    noise: str
    gamma: int
    alpha: Fraction
    beta: Fraction  # β used to compute S (β_eff = β + 2^-29 is what the proof uses)
    exponent: int
    min_scale: int  # s_min in grid steps
    loss: PrivacyLoss
    zcdp: ZCDPNoise | None = None  # the Bun–Steinke calibration (alpha = s, beta + slack = t)


def _lattice_slack(min_scale: int, integral_lower: Fraction) -> Fraction:
    eta = 1 / (min_scale * integral_lower)
    return log_upper((1 + eta) / (1 - eta))


def plan_smooth(
    epsilon: Fraction,
    delta: Fraction,
    noise: str,
    gamma: int,
    exponent: int,
    beta: Fraction | None = None,
) -> SmoothPlan:
    """Choose α and β for a target (ε, δ) and verify the claim with exact upper bounds."""
    min_scale = max(2**20, math.ceil(Fraction(2**12) / epsilon))
    if noise == "cauchy":
        if delta != 0:
            raise InvalidParameterError("delta", delta, "0 for noise='cauchy' (pure ε-DP)")
        c_gamma = cauchy_slide_constant(gamma)
        lattice = _lattice_slack(min_scale, _INTEGRAL_LOWER["cauchy"])
        main = epsilon - lattice
        dil = dilation_constant(gamma)
        if beta is None:
            beta = main / (2 * dil) - _BETA_SLACK
        alpha = (main - dil * (beta + _BETA_SLACK)) / (gamma * c_gamma)
        if beta <= 0 or alpha <= 0:
            raise InvalidParameterError(
                "beta", beta, f"in (0, {main / dil - _BETA_SLACK}) for this epsilon and gamma"
            )
        claimed = gamma * c_gamma * alpha + dil * (beta + _BETA_SLACK) + lattice
        loss: PrivacyLoss = PureDP(claimed)
        return SmoothPlan(noise, gamma, alpha, beta, exponent, min_scale, loss)
    if noise == "laplace":
        if delta == 0:
            raise InvalidParameterError("delta", delta, "> 0 for noise='laplace' ((ε, δ)-DP)")
        lattice = _lattice_slack(min_scale, _INTEGRAL_LOWER["laplace"])
        main = epsilon - lattice
        tail = log_upper(2 / delta)
        alpha = main / 2
        if beta is None:
            lo, hi = 0.0, float(main)
            for _ in range(60):  # float bisection; the exact check below decides
                mid = (lo + hi) / 2
                value = mid + float(alpha) * math.exp(mid) + math.expm1(mid) * float(tail)
                lo, hi = (mid, hi) if value <= float(main) else (lo, mid)
            beta = Fraction(lo * (1 - 1e-6)) - _BETA_SLACK
        b_eff = beta + _BETA_SLACK
        e_b = exp_upper(b_eff)
        claimed = b_eff + alpha * e_b + (e_b - 1) * tail + lattice
        if beta <= 0 or claimed > epsilon:
            raise InvalidParameterError("beta", beta, "small enough for the requested epsilon")
        # δ: P(|Z| > T·t) <= e^{-T}(1 + 1/(2 t)) with e^{-T} = δ/2
        delta_claim = delta / 2 * (1 + Fraction(1, 2 * min_scale))
        return SmoothPlan(
            noise, gamma, alpha, beta, exponent, min_scale, ApproxDP(epsilon, delta_claim)
        )
    if noise in _BZ_FAMILIES:
        raise InvalidParameterError(
            "noise", noise, "given with rho= (a zCDP budget) rather than epsilon/delta"
        )
    raise InvalidParameterError("noise", noise, "'cauchy', 'laplace' or a zCDP family")


def plan_zcdp(
    rho: Fraction,
    noise: str,
    exponent: int,
    beta: Fraction | None = None,
    sigma: Fraction | None = None,
    degrees_of_freedom: int = 3,
) -> SmoothPlan:
    """Calibrate a Bun–Steinke family for ρ-zCDP (``bun_steinke.calibrate``)."""
    if noise not in _BZ_FAMILIES:
        raise InvalidParameterError("noise", noise, "one of " + ", ".join(_BZ_FAMILIES))
    d = degrees_of_freedom
    if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 64:
        raise InvalidParameterError("degrees_of_freedom", d, "an integer in [1, 64]")
    eps = math.sqrt(2 * float(rho))
    if beta is None:
        share = eps / 8 if noise != "student_t" else eps / (4 * max(1, degrees_of_freedom))
        beta = Fraction(share * (1 - 1e-6)) - _BETA_SLACK
        if beta <= 0:
            raise InvalidParameterError("rho", rho, "large enough for a positive smoothness β")
    calibration = calibrate(noise, rho, beta + _BETA_SLACK, sigma, degrees_of_freedom)
    return SmoothPlan(
        noise,
        0,
        calibration.s,
        beta,
        exponent,
        1,
        ZCDP(calibration.rho),
        calibration,
    )


def _group_map(loss: PrivacyLoss, d_in: Fraction) -> PrivacyLoss:
    if d_in == 0:
        return PureDP(0)
    k = math.ceil(d_in)
    if isinstance(loss, ZCDP):
        return ZCDP(k * k * loss.rho)  # group privacy of zCDP (Bun & Steinke 2016, Prop. 1.9)
    if k == 1 or isinstance(loss, PureDP):
        return loss if k == 1 else PureDP(k * loss.epsilon)
    assert isinstance(loss, ApproxDP)
    delta = k * exp_upper((k - 1) * loss.epsilon) * loss.delta
    if delta >= 1:
        raise InvalidParameterError("d_in", d_in, "small enough that group privacy gives δ < 1")
    return ApproxDP(k * loss.epsilon, delta)


def release_smooth(
    xp: np.ndarray, stat: Statistic, bounds: Bounds, n: int, plan: SmoothPlan, size: int = 1
) -> np.ndarray:
    """``size`` independent releases for one (padded, sorted, clamped) dataset."""
    low, high = statistic_range(stat, bounds, n)
    value = Fraction(statistic_value(xp, stat))
    raw = smooth_sensitivity_sorted(xp, stat, float(plan.beta), bounds)
    return release_from(value, raw, low, high, plan, size)


def release_from(
    value: Fraction, raw: float, low: float, high: float, plan: SmoothPlan, size: int = 1
) -> np.ndarray:
    """``size`` releases of ``value`` with noise scaled to the (not yet inflated) smooth bound
    ``raw``, on the plan's grid, clamped to [low − w, high + w] (w = high − low)."""
    g = Fraction(2) ** plan.exponent
    width = high - low
    lo_idx = math.floor(Fraction(low - width) / g)
    hi_idx = math.ceil(Fraction(high + width) / g)
    centre = round(value / g)  # nearest grid point (ties to even: any rule works)
    s_value = Fraction(raw * (1 + SMOOTH_SLACK)) + 2 * g
    if plan.zcdp is not None:
        z = plan.zcdp
        steps = floor_scaled_noise(
            z.family, z.sigma, z.d, s_value / (z.s * g), lo_idx - centre, hi_idx - centre, size
        )
        return np.ldexp(np.array([float(centre + k) for k in steps]), plan.exponent)
    scale = max(s_value / (plan.alpha * g), Fraction(plan.min_scale))
    if plan.noise == "cauchy":
        noise = cauchy_lattice(scale, plan.gamma, size)
    else:
        noise = discrete_laplace_wide(scale, size)
    out = np.array([min(max(centre + z, lo_idx), hi_idx) for z in noise], dtype=np.float64)
    return np.ldexp(out, plan.exponent)


def release_variance(
    j: np.ndarray, bounds: Bounds, grid_bits: int, plan: SmoothPlan, size: int = 1
) -> np.ndarray:
    """The variance of the rounded data (exact) with noise scaled to its S* at the rounded data
    (:mod:`dpkit.sensitivity._variance`)."""
    low, high = statistic_range(Statistic("variance"), bounds, j.size)
    value = variance_value(j, bounds, grid_bits)
    raw = variance_smooth_sensitivity(j, bounds, grid_bits, float(plan.beta))
    return release_from(value, raw, low, high, plan, size)


def make_smooth_sensitivity(
    statistic: str,
    *,
    lower: Number,
    upper: Number,
    n: int,
    epsilon: Number | None = None,
    delta: Number = 0,
    noise: str = "cauchy",
    gamma: int = 4,
    q: Number | None = None,
    trim: Number | None = None,
    beta: Number | None = None,
    grid_exponent: int | None = None,
    rho: Number | None = None,
    sigma: Number | None = None,
    degrees_of_freedom: int = 3,
    grid_bits: int | None = None,
) -> Measurement[float]:
    """Release a statistic with noise scaled to its β-smooth sensitivity (NRS 2007).

    Guarantee: ``noise="cauchy"``: ε-DP; ``noise="laplace"``: (ε, δ)-DP;
    ``noise="laplace_log_normal" | "uniform_log_normal" | "student_t"``: ρ-zCDP (Bun & Steinke
    2019, module ``bun_steinke``; released as the exact grid rounding of the continuous
    mechanism, module ``_lazy``); for datasets of the
    public size ``n`` differing in one unit's value (substitution), values clamped to
    [lower, upper] (NaN → lower). Proof sketch in the module docstring; full proof in
    docs/sensitivity.md §3. Every parameter is checked before any data is read.

    Args:
        statistic: ``median``, ``quantile`` (with ``q``), ``min``, ``max``, ``mean``, ``sum``,
            ``trimmed_mean`` (with ``trim``), ``range``, ``count`` (nonzero rows), ``distinct``,
            ``variance`` (population variance of the values rounded to a grid of 2^-grid_bits
            of the bounds' width, computed exactly: :mod:`dpkit.sensitivity._variance`).
        lower, upper: the declared bounds (public).
        n: the public number of units.
        epsilon, delta: the privacy target.
        noise: ``"cauchy"`` (h ∝ 1/(1 + |z|^γ)), ``"laplace"``, or a zCDP family
            (``"laplace_log_normal"``, ``"uniform_log_normal"``, ``"student_t"``; these take
            ``rho`` instead of ``epsilon``; ``"arcsinh_normal"`` too, docs §3d).
        gamma: γ for the Cauchy-type family, an integer in [2, 16].
        beta: the smoothness β (default: the largest the calibration allows).
        grid_exponent: the output grid 2^k (default from the statistic's range: 2^-50 of its
            magnitude, 2^-36 for the zCDP families).
        rho: the zCDP budget for the zCDP families.
        sigma: σ of the log-normal families (default: the σ minimising the noise's standard
            deviation for the budget; a float64-exact value is used as given).
        degrees_of_freedom: d of ``"student_t"``, an integer in [1, 64] (default 3).
        grid_bits: ``variance`` only: values are rounded to (upper − lower)·2^-grid_bits
            (default 20; an integer in [1, 24] with n·2^grid_bits <= 2^60).

    Example:
        >>> from dpkit.sensitivity import make_smooth_sensitivity
        >>> m = make_smooth_sensitivity("median", lower=0, upper=100, n=5, epsilon=1)
        >>> m.loss <= __import__("dpkit").PureDP(1)
        True
    """
    stat = make_statistic(statistic, q=q, trim=trim)
    bounds = Bounds.of(lower, upper)
    size = check_n(n)
    if stat.name == "variance":
        bits = check_grid_bits(DEFAULT_GRID_BITS if grid_bits is None else grid_bits, size)
    elif grid_bits is not None:
        raise InvalidParameterError("grid_bits", grid_bits, "None unless statistic='variance'")
    else:
        bits = 0
    zcdp_family = noise in _BZ_FAMILIES
    if zcdp_family:
        if rho is None or epsilon is not None or delta != 0:
            raise InvalidParameterError(
                "rho", rho, f"given (and epsilon/delta not) for the zCDP family {noise!r}"
            )
        eps = check_epsilon(rho, "rho")
        dlt = Fraction(0)
    else:
        if epsilon is None or rho is not None:
            raise InvalidParameterError(
                "epsilon", epsilon, f"given (and rho not) for noise={noise!r}"
            )
        eps = check_epsilon(epsilon)
        dlt = check_delta(delta)
    if isinstance(gamma, bool) or not isinstance(gamma, int) or not 2 <= gamma <= 16:
        raise InvalidParameterError("gamma", gamma, "an integer in [2, 16]")
    low, high = statistic_range(stat, bounds, size)
    if grid_exponent is not None:
        exponent = grid_exponent
    else:
        # zCDP families: grid 2^-36 of the range's magnitude, so that noise up to about half of
        # it is decided by the float path of _lazy (beyond, mpmath finishes the draw)
        exponent = default_exponent(low, high) + (14 if noise in _BZ_FAMILIES else 0)
    if isinstance(exponent, bool) or not isinstance(exponent, int) or exponent < -1000:
        raise InvalidParameterError("grid_exponent", grid_exponent, "an integer >= -1000")
    if max(abs(low), abs(high), high - low) * 3 >= math.ldexp(1.0, exponent + 52):
        raise InvalidParameterError(
            "grid_exponent", grid_exponent, "large enough that outputs fit the float grid"
        )
    beta_arg = None if beta is None else check_epsilon(beta, "beta")
    if zcdp_family:
        sigma_arg = None
        if sigma is not None:
            sigma_arg = check_epsilon(sigma, "sigma")
            if Fraction(float(sigma_arg)) != sigma_arg or sigma_arg > 16:
                raise InvalidParameterError("sigma", sigma, "a float64 value in (0, 16]")
        plan = plan_zcdp(eps, noise, exponent, beta_arg, sigma_arg, degrees_of_freedom)
    else:
        plan = plan_smooth(eps, dlt, noise, gamma, exponent, beta_arg)
    return build_smooth_measurement(stat, bounds, size, plan, bits)


def build_smooth_measurement(
    stat: Statistic, bounds: Bounds, n: int, plan: SmoothPlan, grid_bits: int = 0
) -> Measurement[float]:
    """The Measurement for a checked plan (tests build broken plans through this)."""

    def release(data: Any, size: int) -> np.ndarray:
        if stat.name == "variance":
            return release_variance(
                grid_values(data, bounds, n, grid_bits), bounds, grid_bits, plan, size
            )
        return release_smooth(prepare(data, bounds, n), stat, bounds, n, plan, size)

    def function(data: Any) -> float:
        return float(release(data, 1)[0])

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float"), size=n),
        input_metric=ChangeOneDistance(),
        output_measure=(
            "pure"
            if isinstance(plan.loss, PureDP)
            else "zcdp"
            if isinstance(plan.loss, ZCDP)
            else "approx"
        ),
        function=function,
        privacy_map=lambda d_in: _group_map(plan.loss, d_in),
        name=f"smooth_sensitivity({stat.name}, {plan.noise})",
        d_in=Fraction(1),
        info=SensitivityInfo(
            alpha=plan.alpha,
            beta=plan.beta,
            gamma=plan.gamma,
            grid_exponent=plan.exponent,
            zcdp_noise=plan.zcdp,  # family, σ, d, s, t and ε of a zCDP release (else None)
            grid_bits=grid_bits if stat.name == "variance" else None,
            release_many=release,
        ),
    )
