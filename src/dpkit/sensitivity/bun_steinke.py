"""zCDP calibration of smooth-sensitivity noise (Bun & Steinke 2019, "Average-Case Averages", §3).

The release is M(x) = f(x) + (S(x)/s)·Z, S a t-smooth upper bound on the local sensitivity
(LS(x) <= S(x) <= e^t·S(x') for neighbours). Normalising by S(x)/s, M(x') is distributed as
s' + e^{t'}·Z (up to the same affine map) with |s'| <= s (|f(x) − f(x')| <= min(LS(x), LS(x')))
and |t'| <= t. The family is "(s, t)-admissible for ½ε²-zCDP" when
D_α(Z ‖ e^{t'}Z + s') <= ½ε²α and D_α(e^{t'}Z + s' ‖ Z) <= ½ε²α for all α > 1 and all such s', t'.

**The argument used here (the paper's, made explicit).** Pass through Q = Z + s'.

* *Shift.* If the log-density of Z is L-Lipschitz (|d/dz ln p| <= L), then the pointwise
  log-ratio of Z and Z + s' is at most L·s, i.e. a pure (L·s)-DP pair, hence
  D_α <= ½(L·s)²α (Bun & Steinke 2016, Prop. 3.3).
* *Dilation.* Z + s' against e^{t'}Z + s' is the post-processing of Z against e^{t'}Z.
  For Z = W·e^{σY} (Y standard normal, W independent) this is the post-processing of Y against
  Y + t'/σ: D_α <= α·t²/(2σ²), a ½(t/σ)²-zCDP pair.
* *Combination* along P → Q → R of a ½a²- and a ½b²-zCDP pair into ½(a + b)²: the step of
  Bun & Steinke's own LLN theorem (whose ε = t/σ + e^{3σ²/2}s has exactly this form). dpkit does
  not re-prove this step; the *combined* claim is checked numerically for every offered family
  (below), and for Student's t the argument is pointwise throughout and needs no such step.

So ε = t/σ + L·s. The Lipschitz constants:

* ``laplace_log_normal`` LLN(σ), Z = X·e^{σY}, X standard Laplace: p(z) = E[½e^{−σY}e^{−|z|e^{−σY}}]
  and |p'/p| = E[w·e^{−σY}]/E[w] with w = e^{−σY}e^{−|z|e^{−σY}}; at z = 0 it equals
  E[e^{−2σY}]/E[e^{−σY}] = e^{3σ²/2}, and it decreases in |z|. **L = e^{3σ²/2}**:
  ε = t/σ + e^{3σ²/2}·s — the paper's Table 1 (and Google's dp_multiq ``csmooth``).
* ``uniform_log_normal`` ULN(σ), Z = U·e^{σY}, U uniform on [−1, 1]: p(z) = ½e^{σ²/2}Φ̄(y₀ + σ)
  with y₀ = ln|z|/σ, and |p'/p| = e^{3σ²/2}·φ(u + σ)/(σΦ̄(u)) with u = y₀ + σ. For u <= 0,
  Φ̄(u) >= ½ and φ <= φ(0): the ratio is <= √(2/π)·e^{3σ²/2}/σ. For u > 0, the Birnbaum bound
  Φ̄(u) >= 2φ(u)/(u + √(u² + 4)) gives φ(u + σ)/Φ̄(u) <= e^{−σ²/2}·e^{−σu}(u + √(u² + 4))/2,
  and e^{−σu}(u + √(u² + 4))/2 <= 1 for σ >= 1/2 (its log has derivative −σ + 1/√(u² + 4) <= 0).
  **L = √(2/π)·e^{3σ²/2}/σ for σ >= 1/2** (dpkit requires σ >= 1/2).
* ``student_t`` with integer d >= 1: ln p(z) = c − (d+1)/2·ln(1 + z²/d), so
  |d/dz ln p| <= (d+1)/(2√d) (at z = √d), and the dilation's pointwise log-ratio
  t' + (d+1)/2·ln((1 + e^{−2t'}z²/d)/(1 + z²/d)) lies in [−d|t'|, |t'|]. Both are pointwise, so
  the pair is pure ε-DP with **ε = (d+1)/(2√d)·s + d·t**, hence ½ε²-zCDP. (This is a pure-DP
  bound, conservative for zCDP; no zCDP-specific bound is claimed.)
* ``arcsinh_normal``: its dilation is not a post-processed Gaussian shift and its log-ratio is
  not pointwise bounded; dpkit has no verified bound for it and **refuses** it.

Every calibration is also checked numerically (tests/statistical/test_bun_steinke_calibration.py:
Rényi divergences by quadrature over a grid of α ∈ (1, 100], shifts and dilations, both
directions; the same check fails for the calibration with ε halved).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dpkit._exact import exp_upper
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

__all__ = [
    "OFFERED",
    "ZCDP_FAMILIES",
    "ZCDPNoise",
    "calibrate",
    "epsilon_upper",
    "lipschitz_upper",
    "noise_sd",
    "smallest_sd",
]

ZCDP_FAMILIES = ("laplace_log_normal", "uniform_log_normal", "student_t", "arcsinh_normal")
OFFERED = ("laplace_log_normal", "uniform_log_normal", "student_t")
_SQRT_2_OVER_PI_UP = Fraction(7978846, 10**7)  # √(2/π) = 0.797884560802...
_ULN_MIN_SIGMA = Fraction(1, 2)


@dataclass(frozen=True, slots=True)
class ZCDPNoise:
    """A calibrated Bun–Steinke noise: family, σ (log-normal / arcsinh), d (Student's t), and the
    shift s and log-scale t it tolerates at ½ε²-zCDP."""

    family: str
    sigma: Fraction
    d: int
    s: Fraction
    t: Fraction
    epsilon: Fraction  # an exact upper bound of t/σ + L·s (resp. (d+1)s/(2√d) + d·t)

    @property
    def rho(self) -> Fraction:
        return self.epsilon**2 / 2


def _sqrt_lower(x: Fraction, digits: int = 12) -> Fraction:
    scale = 10**digits
    return Fraction(math.isqrt(math.floor(x * scale * scale)), scale)


def lipschitz_upper(family: str, sigma: Fraction, d: int) -> Fraction:
    """An exact upper bound on sup |d/dz ln p(z)| (module docstring)."""
    if family == "laplace_log_normal":
        return exp_upper(3 * sigma**2 / 2)
    if family == "uniform_log_normal":
        if sigma < _ULN_MIN_SIGMA:
            raise InvalidParameterError("sigma", sigma, ">= 1/2 for uniform_log_normal")
        return _SQRT_2_OVER_PI_UP * exp_upper(3 * sigma**2 / 2) / sigma
    if family == "student_t":
        return Fraction(d + 1, 2) / _sqrt_lower(Fraction(d))
    raise UnsupportedQueryError(f"noise={family!r}: no verified zCDP calibration")


def epsilon_upper(family: str, sigma: Fraction, d: int, s: Fraction, t: Fraction) -> Fraction:
    """An exact upper bound on the ε of the ½ε²-zCDP claim for shift s and log-scale t."""
    shift = lipschitz_upper(family, sigma, d) * s
    if family == "student_t":
        return shift + d * t
    return shift + t / sigma


def _dyadic(x: float) -> Fraction:
    """x rounded to 20 significant bits (exact in float64, cheap in Fractions)."""
    m, e = math.frexp(x)
    return Fraction(round(m * 2**20), 2**20) * Fraction(2) ** e


def calibrate(
    family: str, rho: Fraction, t: Fraction, sigma: Fraction | None = None, d: int = 3
) -> ZCDPNoise:
    """The largest shift s for the target ρ at log-scale t, with σ chosen to minimise the noise's
    standard deviation over s (or the given σ); the returned ε satisfies ε²/2 <= ρ exactly."""
    if family == "arcsinh_normal":
        raise UnsupportedQueryError(
            "noise='arcsinh_normal': dpkit has no verified zCDP calibration for the arcsinh-normal"
            " family (its dilation is not a post-processed Gaussian shift, and its log-ratio is"
            " unbounded); use 'laplace_log_normal', 'uniform_log_normal' or 'student_t'"
        )
    if family not in OFFERED:
        raise InvalidParameterError("noise", family, "one of " + ", ".join(ZCDP_FAMILIES))
    eps = _sqrt_lower(2 * rho)
    if family == "student_t":
        if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 64:
            raise InvalidParameterError("degrees_of_freedom", d, "an integer in [1, 64]")
        room = eps - d * t
        if room <= 0:
            raise InvalidParameterError("beta", t, f"below ε/d = {float(eps / d):.6g}")
        s = room / lipschitz_upper(family, Fraction(1), d)
        s = Fraction(math.floor(s * 2**40), 2**40)
        return ZCDPNoise(family, Fraction(1), d, s, t, epsilon_upper(family, Fraction(1), d, s, t))
    e, tf = float(eps), float(t)
    if sigma is None:
        if family == "laplace_log_normal":
            # minimise sd/s ∝ e^{5σ²/2}σ/(εσ − t): the real root of 5(ε/t)σ³ − 5σ² − 1 = 0
            lo, hi = tf / e, tf / e + 10.0
            for _ in range(200):
                mid = (lo + hi) / 2
                value = 5 * (e / tf) * mid**3 - 5 * mid**2 - 1
                lo, hi = (mid, hi) if value < 0 else (lo, mid)
            chosen = hi
        else:
            # minimise e^{5σ²/2}/(εσ − t): 5εσ² − 5tσ − ε = 0; σ >= 1/2 for the bound
            chosen = max((5 * tf + math.sqrt(25 * tf**2 + 20 * e**2)) / (10 * e), 0.5)
        sig = _dyadic(chosen)
        if family == "uniform_log_normal":
            sig = max(sig, _ULN_MIN_SIGMA)
    else:
        sig = sigma
    room = eps - t / sig
    if room <= 0:
        raise InvalidParameterError("beta", t, f"below ε·σ = {float(eps * sig):.6g} for this σ")
    s = room / lipschitz_upper(family, sig, d)
    s = Fraction(math.floor(s * 2**40), 2**40)
    claimed = epsilon_upper(family, sig, d, s, t)
    assert claimed <= eps
    return ZCDPNoise(family, sig, d if family == "student_t" else 0, s, t, claimed)


def noise_sd(noise: ZCDPNoise) -> float:
    """The standard deviation of Z/s, the noise in units of the smooth bound S (inf if none).

    Var Z: LLN 2·e^{2σ²} (Var X = 2, E e^{2σY} = e^{2σ²}); ULN e^{2σ²}/3; Student's t d/(d − 2)
    for d > 2 (infinite otherwise).
    """
    sigma = float(noise.sigma)
    if noise.family == "laplace_log_normal":
        sd = math.sqrt(2.0) * math.exp(sigma**2)
    elif noise.family == "uniform_log_normal":
        sd = math.exp(sigma**2) / math.sqrt(3.0)
    elif noise.d > 2:
        sd = math.sqrt(noise.d / (noise.d - 2))
    else:
        return math.inf
    return sd / float(noise.s)


def smallest_sd(rho: Fraction, t: Fraction, d: int = 3) -> ZCDPNoise:
    """The offered family whose calibrated noise Z/s has the smallest standard deviation at
    (ρ, t), each with its sd-minimising σ (Student's t with ``d`` degrees of freedom); families
    that cannot be calibrated at this t (t too large for them) are skipped. Public inputs only.
    """
    best: ZCDPNoise | None = None
    for family in OFFERED:
        try:
            candidate = calibrate(family, rho, t, d=d)
        except InvalidParameterError:
            continue
        if best is None or noise_sd(candidate) < noise_sd(best):
            best = candidate
    if best is None:
        raise InvalidParameterError("beta", t, "small enough for some zCDP family at this ρ")
    return best
