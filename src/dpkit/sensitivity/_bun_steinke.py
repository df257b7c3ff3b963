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
  with y₀ = ln|z|/σ, and |p'/p| = e^{3σ²/2}·g(u)/σ with u = y₀ + σ and g(u) = φ(u + σ)/Φ̄(u).
  **L = e^{3σ²/2}/σ · max(√(2/π), G⁺(σ))**, G⁺(σ) a certified upper bound on G(σ) = sup_u g(u)
  (:func:`uln_score_sup_upper`). The certificate: ℓ = ln g has ℓ'(u) = λ(u) − u − σ with
  λ = φ/Φ̄ the inverse Mills ratio, and ℓ''(u) = λ'(u) − 1 = λ(λ − u) − 1 = −Var(N | N > u) < 0
  (N standard normal), so ℓ is strictly concave. Take u₁ < u₂ around the float root of
  λ(u) − u = σ. The tangent at u₁ bounds ℓ everywhere, so ℓ(u) <= ℓ(u₁) + max(ℓ'(u₁), 0)(u₂ − u₁)
  for u <= u₂; if ℓ'(u₂) <= 0, ℓ decreases beyond u₂ and the same bound holds there. Both facts
  are checked with rational bounds of φ (``exp_upper`` and a rational enclosure of √(2π)) and
  of Φ̄ (its Taylor series Φ(x) = ½ + φ(x)·Σ x^{2k+1}/(2k+1)!! in fixed point with directed
  rounding and a geometric tail bound; Φ̄(u) >= 1 − φ(|u|)/|u| for u <= −8), so G(σ) <=
  g⁺(u₁)·e^{d⁺(u₂ − u₁)} =: G⁺(σ), tight to ~1e-12 relative.
  *An earlier version claimed G(σ) <= √(2/π) for σ >= 1/2.* That holds for u <= 0 (φ <= φ(0),
  Φ̄ >= ½), and for u > 0 Birnbaum's Φ̄(u) >= 2φ(u)/(u + √(u² + 4)) gives g(u) <= e^{−σ²/2}; but
  e^{−σ²/2} <= √(2/π) only for σ >= 0.6717, and the true G(σ) exceeds √(2/π) for σ below
  0.51533 (G(0.51406) = 0.79948 > 0.79788): the default σ = 0.51406 was under-charged by about
  0.3 % of its ρ. The max with √(2/π) keeps every calibration that was right unchanged (G(σ) <=
  √(2/π) for σ >= 0.51533; G⁺ alone would be up to 2× smaller at large σ, not used so that
  calibrations that were correct do not move). dpkit still requires σ >= 1/2.
* ``student_t`` with integer d >= 1: ln p(z) = c − (d+1)/2·ln(1 + z²/d), so
  |d/dz ln p| <= (d+1)/(2√d) (at z = √d), and the dilation's pointwise log-ratio
  t' + (d+1)/2·ln((1 + e^{−2t'}z²/d)/(1 + z²/d)) lies in [−d|t'|, |t'|]. Both are pointwise, so
  the pair is pure ε-DP with **ε = (d+1)/(2√d)·s + d·t**, hence ½ε²-zCDP. (This is a pure-DP
  bound, conservative for zCDP; no zCDP-specific bound is claimed.)
* ``arcsinh_normal`` ASN(σ), Z = sinh(σY)/σ: its dilation is *not* a post-processed Gaussian
  shift, and the log-ratio is unbounded, so neither step above applies. It is calibrated by a
  different argument instead (docs/sensitivity.md §3d has the full proof):

  - *Lipschitz privacy loss.* Write P for the law of Z and Q for that of s' + e^{t'}Z. As a
    function of the Gaussian Y, the privacy loss L(Y) = ln(p/q)(sinh(σY)/σ) has
    L'(y) = cosh(σy)·[e^{−t'}ψ((z − s')e^{−t'}) − ψ(z)], z = sinh(σy)/σ, ψ = −(ln p)'.
    If |L'| <= K everywhere, Gaussian concentration for K-Lipschitz functions
    (Tsirelson–Ibragimov–Sudakov; Boucheron, Lugosi & Massart 2013, Thm 5.5:
    ln E e^{λ(L − EL)} <= λ²K²/2 for every real λ) gives, with λ = −1 and E_P[e^{−L}] = 1,
    KL(P‖Q) = EL <= K²/2, and with λ = α − 1, D_α(P‖Q) <= KL + (α − 1)K²/2 <= αK²/2:
    **½K²-zCDP**. The same holds for Q‖P with the reversed pair, which is the forward pair with
    shift bound s·e^t.
  - *The Lipschitz constant.* Along the segment (a, τ) = λ(s', t'), the derivatives of
    e^{−τ}ψ((z − a)e^{−τ}) are −e^{−2τ}ψ'(u) and −e^{−τ}(uψ)'(u), u = (z − a)e^{−τ}, and
    √(1 + σ²z²) <= (1 + σ|a|)e^{|τ|}√(1 + σ²u²). With u = sinh(w)/σ,
    √(1 + σ²u²)ψ'(u) = (1 − σ² + 2σ²sech²w − w·tanh w)/cosh w, at most 1 + σ² in absolute value,
    and σ√(1 + σ²u²)(uψ)'(u) = w·sech²w + tanh w + 2σ²·tanh w·sech²w <= 6/5 + (77/100)σ²
    (w·sech²w + tanh w peaks at w* = 1/tanh w* < 6/5 with value w*; tanh·sech² <= 2/(3√3)).
    So, with s_e = s·e^t, **K = (1 + σs_e)·e^t·(s_e·e^{2t}(1 + σ²) + t·e^t(6/5 + 0.77σ²)/σ)**
    bounds both directions, and ε = K.
  - σ minimises the noise's sd √((e^{2σ²} − 1)/(2σ²))/s over a grid; s is the largest value
    with K <= ε, checked with exact rational upper bounds (``exp_upper``).

Every calibration is also checked numerically (tests/statistical/test_bun_steinke_calibration.py:
Rényi divergences by quadrature over a grid of α ∈ (1, 100], shifts and dilations, both
directions; the same check fails for the calibration with ε halved, ε/3 for Student's t and ε/4
for the arcsinh-normal, whose bounds are looser; the arcsinh-normal's Lipschitz bound is also
checked against the numerical sup of |L'| on a grid).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

from dpkit._exact import exp_upper
from dpkit.errors import InvalidParameterError, PrivacyCheckError, UnsupportedQueryError

__all__ = [
    "OFFERED",
    "ZCDP_FAMILIES",
    "ZCDPNoise",
    "calibrate",
    "epsilon_upper",
    "lipschitz_upper",
    "noise_sd",
    "smallest_sd",
    "uln_score_sup_upper",
]

ZCDP_FAMILIES = ("laplace_log_normal", "uniform_log_normal", "student_t", "arcsinh_normal")
OFFERED = ("laplace_log_normal", "uniform_log_normal", "student_t", "arcsinh_normal")
_ASN_C2 = (Fraction(6, 5), Fraction(77, 100))  # σ·c2 <= 6/5 + (77/100)σ² (module docstring)
_SQRT_2_OVER_PI_UP = Fraction(7978846, 10**7)  # √(2/π) = 0.797884560802...
_ULN_MIN_SIGMA = Fraction(1, 2)
# √(2π) = 2.50662827463100050241576528481104525300698..., enclosed by two rationals
_SQRT_2PI_LO = Fraction("2.506628274631000502415765284811045253006")
_SQRT_2PI_HI = Fraction("2.506628274631000502415765284811045253007")
_FIX = 256  # fixed-point bits of the Φ series


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


def _phi_bounds(x: Fraction) -> tuple[Fraction, Fraction]:
    """Rational bounds on the standard normal density φ(x) = e^{−x²/2}/√(2π)."""
    half_square = x * x / 2
    return 1 / (exp_upper(half_square) * _SQRT_2PI_HI), exp_upper(-half_square) / _SQRT_2PI_LO


def _phi_series_bounds(x: Fraction) -> tuple[Fraction, Fraction]:
    """Rational bounds on S(x) = Σ_{k>=0} x^{2k+1}/(2k+1)!! for x >= 0, where
    Φ(x) = ½ + φ(x)·S(x). Terms in fixed point (2^-256) with directed rounding; once the term
    ratio x²/(2k+3) is at most ½, the tail after a term is at most twice the next term."""
    one = 1 << _FIX
    square = x * x
    num, den = square.numerator, square.denominator
    t_lo, t_hi = math.floor(x * one), math.ceil(x * one)
    s_lo, s_hi = t_lo, t_hi
    k = 0
    while True:
        div = den * (2 * k + 3)
        t_lo, t_hi = (t_lo * num) // div, -((-t_hi * num) // div)  # t_{k+1}
        if 2 * square <= 2 * k + 5 and t_hi <= max(s_lo, one) >> 200:
            return Fraction(s_lo, one), Fraction(s_hi + 2 * t_hi, one)
        s_lo, s_hi = s_lo + t_lo, s_hi + t_hi
        k += 1


def _upper_tail_lower(u: Fraction) -> Fraction:
    """A rational lower bound on Φ̄(u) = P(N > u) (u <= 2.5 in use; positive or an error)."""
    x = abs(u)
    phi_lo, phi_hi = _phi_bounds(x)
    if u <= -8:  # Φ̄(u) = 1 − Φ̄(x) and the Mills bound Φ̄(x) <= φ(x)/x
        return 1 - phi_hi / x
    s_lo, s_hi = _phi_series_bounds(x)
    value = Fraction(1, 2) + phi_lo * s_lo if u <= 0 else Fraction(1, 2) - phi_hi * s_hi
    if value <= 0:  # pragma: no cover - u* <= 1.14 for σ >= 1/2
        raise ArithmeticError(f"no positive lower bound on the normal tail at u = {float(u)}")
    return value


def _score_slope_upper(u: Fraction, sigma: Fraction) -> Fraction:
    """An upper bound on ℓ'(u) = λ(u) − u − σ, λ = φ/Φ̄ (module docstring)."""
    return _phi_bounds(u)[1] / _upper_tail_lower(u) - u - sigma


def _mills_root(sigma: float) -> float:
    """The float root u* of λ(u) − u = σ (λ(u) − u decreases from +inf to 0)."""

    def excess(u: float) -> float:
        tail = 0.5 * math.erfc(u / math.sqrt(2.0))
        return math.exp(-u * u / 2) / math.sqrt(2 * math.pi) / tail - u - sigma

    lo, hi = -sigma - 10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


@functools.lru_cache(maxsize=256)
def uln_score_sup_upper(sigma: Fraction) -> Fraction:
    """A certified upper bound G⁺(σ) on G(σ) = sup_u φ(u + σ)/Φ̄(u), σ >= 1/2 (module
    docstring: ℓ = ln of the ratio is concave; the tangent at u₁ bounds it up to u₂, beyond
    which it decreases). Rounded up to a multiple of 2^-64."""
    if sigma < _ULN_MIN_SIGMA:
        raise InvalidParameterError("sigma", sigma, ">= 1/2 for uniform_log_normal")
    root = Fraction(_mills_root(float(sigma)))
    half_width = Fraction(1, 2**24)
    for _ in range(40):
        u1, u2 = root - half_width, root + half_width
        if _score_slope_upper(u2, sigma) <= 0:
            slope = max(_score_slope_upper(u1, sigma), Fraction(0))
            value = _phi_bounds(u1 + sigma)[1] / _upper_tail_lower(u1)
            bound = value * exp_upper(slope * (u2 - u1))
            return Fraction(math.ceil(bound * 2**64), 2**64)
        half_width *= 2
    raise ArithmeticError(f"no certificate for sigma = {sigma}")  # pragma: no cover


def lipschitz_upper(family: str, sigma: Fraction, d: int) -> Fraction:
    """An exact upper bound on sup |d/dz ln p(z)| (module docstring)."""
    if family == "laplace_log_normal":
        return exp_upper(3 * sigma**2 / 2)
    if family == "uniform_log_normal":
        if sigma < _ULN_MIN_SIGMA:
            raise InvalidParameterError("sigma", sigma, ">= 1/2 for uniform_log_normal")
        score = max(_SQRT_2_OVER_PI_UP, uln_score_sup_upper(sigma))
        return score * exp_upper(3 * sigma**2 / 2) / sigma
    if family == "student_t":
        return Fraction(d + 1, 2) / _sqrt_lower(Fraction(d))
    raise UnsupportedQueryError(
        f"noise={family!r}: no single Lipschitz constant (arcsinh_normal: asn_lipschitz_upper)"
    )


def asn_lipschitz_upper(sigma: Fraction, s: Fraction, t: Fraction) -> Fraction:
    """An exact upper bound on the Lipschitz constant K of the arcsinh-normal privacy loss (as
    a function of the Gaussian Y), both directions, for |s'| <= s and |t'| <= t:
    K = (1 + σs_e)e^t(s_e·e^{2t}(1 + σ²) + t·e^t(6/5 + (77/100)σ²)/σ), s_e = s·e^t."""
    e_t = exp_upper(t)
    s_e = s * e_t
    c1 = 1 + sigma**2
    c2 = (_ASN_C2[0] + _ASN_C2[1] * sigma**2) / sigma
    return (1 + sigma * s_e) * e_t * (s_e * e_t**2 * c1 + t * e_t * c2)


def _asn_k_float(sigma: float, s: float, t: float) -> float:
    e_t = math.exp(t)
    s_e = s * e_t
    c2 = (1.2 + 0.77 * sigma**2) / sigma
    return (1 + sigma * s_e) * e_t * (s_e * e_t**2 * (1 + sigma**2) + t * e_t * c2)


def _asn_sd(sigma: float) -> float:
    return math.sqrt(math.expm1(2 * sigma**2) / (2 * sigma**2))


def _asn_shift(sigma: float, t: float, eps: float) -> float:
    """The largest s with K(σ, s, t) <= ε (float bisection; 0 if none)."""
    if _asn_k_float(sigma, 0.0, t) >= eps:
        return 0.0
    lo, hi = 0.0, eps
    while _asn_k_float(sigma, hi, t) <= eps:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _asn_k_float(sigma, mid, t) <= eps else (lo, mid)
    return lo


def _calibrate_asn(eps: Fraction, t: Fraction, sigma: Fraction | None) -> ZCDPNoise:
    e, tf = float(eps), float(t)
    if sigma is None:
        best: tuple[float, float] | None = None
        for i in range(1, 400):
            candidate = i / 100
            shift = _asn_shift(candidate, tf, e)
            if shift > 0 and (best is None or _asn_sd(candidate) / shift < best[0]):
                best = (_asn_sd(candidate) / shift, candidate)
        if best is None:
            raise InvalidParameterError("beta", t, f"much below ε = {e:.6g} for arcsinh_normal")
        sig = _dyadic(best[1])
    else:
        sig = sigma
    shift = _asn_shift(float(sig), tf, e)
    if shift <= 0:
        raise InvalidParameterError("beta", t, f"smaller for σ = {float(sig):.6g} and ε = {e:.6g}")
    s = Fraction(math.floor(shift * 2**40), 2**40)
    claimed = asn_lipschitz_upper(sig, s, t)
    while claimed > eps and s > 0:  # float bisection vs the exact bound: shrink until it holds
        s = Fraction(math.floor(s * (1 - Fraction(1, 2**20)) * 2**40), 2**40)
        claimed = asn_lipschitz_upper(sig, s, t)
    if s <= 0:  # pragma: no cover - the float model is within 2^-40 of the exact bound
        raise InvalidParameterError("beta", t, "smaller for arcsinh_normal")
    return ZCDPNoise("arcsinh_normal", sig, 0, s, t, claimed)


def epsilon_upper(family: str, sigma: Fraction, d: int, s: Fraction, t: Fraction) -> Fraction:
    """An exact upper bound on the ε of the ½ε²-zCDP claim for shift s and log-scale t."""
    if family == "arcsinh_normal":
        return asn_lipschitz_upper(sigma, s, t)
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
        return _calibrate_asn(_sqrt_lower(2 * rho), t, sigma)
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
    if not claimed <= eps:  # a check, not an assert: it must survive python -O
        raise PrivacyCheckError(
            f"internal check failed: the calibrated {family} noise claims ε = {float(claimed):.6g}"
            f" > {float(eps):.6g}; nothing was released. Please report this."
        )
    return ZCDPNoise(family, sig, d if family == "student_t" else 0, s, t, claimed)


def noise_sd(noise: ZCDPNoise) -> float:
    """The standard deviation of Z/s, the noise in units of the smooth bound S (inf if none).

    Var Z: LLN 2·e^{2σ²} (Var X = 2, E e^{2σY} = e^{2σ²}); ULN e^{2σ²}/3; Student's t d/(d − 2)
    for d > 2 (infinite otherwise); ASN (e^{2σ²} − 1)/(2σ²) (E sinh²(σY) = (e^{2σ²} − 1)/2).
    """
    sigma = float(noise.sigma)
    if noise.family == "arcsinh_normal":
        sd = _asn_sd(sigma)
    elif noise.family == "laplace_log_normal":
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
