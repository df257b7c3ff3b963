"""Exact grid rounding of continuous heavy-tailed noise (the Bun–Steinke zCDP families).

``floor_scaled_noise(family, ...)`` returns K = clamp(⌊c·Z⌋, lo, hi) for a rational scale c > 0
and Z one draw of a continuous distribution that is an explicit function of finitely many
independent uniforms U_1, ..., U_r on [0, 1):

* ``laplace_log_normal`` (LLN(σ)): Z = ±(−ln U_1)·e^{σN}, N = √(−2 ln U_2)·cos(2πU_3) (Box–Muller),
  the sign a separate fair bit;
* ``uniform_log_normal`` (ULN(σ)): Z = (2U_1 − 1)·e^{σN};
* ``student_t`` (d degrees of freedom, integer): Z = N_0/√(χ²_d/d) with
  χ²_d = 2·Σ_{i<⌊d/2⌋}(−ln V_i) (+ N_1² when d is odd) — the standard constructions of the
  Laplace, normal, χ² and t laws from uniforms;
* ``arcsinh_normal``: Z = sinh(σN)/σ (the expression evaluates sinh(σN) and the exact rational
  scale absorbs 1/σ, so both paths compute the same real number).

**Why this is exact.** Each uniform is an infinite string of fair bits of which only a prefix
is drawn. With the first 52 bits, U is known to lie in a cell of width 2^-52; the expression is
evaluated on those cells with *interval arithmetic* (each elementary operation is monotone or
Lipschitz on the cell, and every float64 result is widened by a relative 2^-40 plus an absolute
2^-1000, far above numpy's few-ulp error, the same certified margin as :mod:`dpkit.noise._exact`).
If the resulting interval of c·Z has a single value of clamp(⌊·⌋), that value is *the* value of
the ideal continuous expression for every completion of the bits, so it is the output. The rare
undecided draws (about 2^-30 relative of the interval of c·Z, plus the edges of the clamp) are
finished with :mod:`mpmath`'s rigorous interval arithmetic (``mpmath.iv``, outward rounding) on
the *same* uniforms, drawing 64 more bits of each at a time and raising the precision until the
floor is decided. So the output is a deterministic function of the infinite bit strings: exactly
the grid rounding of the ideal continuous sample. Any privacy guarantee of the continuous
mechanism carries over by post-processing, and no floating-point artefact of the sampler can leak
(there is no float noise to attack: no sample is ever rounded before the floor is certain).

All bits come from :func:`dpkit.noise.random_words`.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from mpmath import iv  # type: ignore[import-untyped]  # no stubs
from mpmath.libmp import finf, fnan, fninf, round_floor, to_int  # type: ignore[import-untyped]

from dpkit.noise import random_words

__all__ = ["FAMILIES", "floor_scaled_noise", "uniform_count"]

FAMILIES = ("laplace_log_normal", "uniform_log_normal", "student_t", "arcsinh_normal")

_REL = 2.0**-40
_ABS = 2.0**-1000
_CELL = 2.0**-52
_FORCE_EXACT = False  # tests set this to send every draw down the mpmath path


def uniform_count(family: str, d: int) -> int:
    """How many uniforms one draw of ``family`` uses (the sign bit is separate)."""
    if family == "laplace_log_normal":
        return 3
    if family in ("uniform_log_normal", "arcsinh_normal"):
        return 2 if family == "arcsinh_normal" else 3
    if family == "student_t":
        return 2 + d // 2 + (2 if d % 2 else 0)
    raise ValueError(family)


# ---------------------------------------------------------------------------------------------
# the expression, written once against an interval "backend"


class _Float:
    """Vectorised float64 intervals (lo, hi), widened after every operation."""

    @staticmethod
    def widen(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lo - np.abs(lo) * _REL - _ABS, hi + np.abs(hi) * _REL + _ABS

    def neglog(self, u: Any) -> Any:
        lo, hi = u
        with np.errstate(divide="ignore"):
            return self.widen(-np.log(hi), -np.log(lo))

    def sqrt_pos(self, x: Any) -> Any:
        lo, hi = x
        return self.widen(np.sqrt(np.maximum(lo, 0.0)), np.sqrt(np.maximum(hi, 0.0)))

    def cos2pi(self, u: Any) -> Any:
        lo, hi = u
        mid = np.cos((2 * np.pi) * ((lo + hi) / 2))
        half = np.pi * (hi - lo) + 2.0**-44  # cos is 1-Lipschitz in the angle
        return np.maximum(mid - half, -1.0), np.minimum(mid + half, 1.0)

    def exp(self, x: Any) -> Any:
        lo, hi = x
        with np.errstate(over="ignore"):
            return self.widen(np.exp(lo), np.exp(hi))

    def scale(self, x: Any, c: float) -> Any:  # c > 0 exact in float
        return self.widen(x[0] * c, x[1] * c)

    def affine_uniform(self, u: Any) -> Any:  # 2U − 1 (exact in float)
        return 2 * u[0] - 1, 2 * u[1] - 1

    def mul(self, x: Any, y: Any) -> Any:
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.stack([x[0] * y[0], x[0] * y[1], x[1] * y[0], x[1] * y[1]])
        return self.widen(np.min(p, axis=0), np.max(p, axis=0))

    def add(self, x: Any, y: Any) -> Any:
        return self.widen(x[0] + y[0], x[1] + y[1])

    def square(self, x: Any) -> Any:
        lo, hi = x
        a, b = lo * lo, hi * hi
        low = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(a, b))
        return self.widen(low, np.maximum(a, b))

    def reciprocal_pos(self, x: Any) -> Any:  # x >= 0
        lo, hi = x
        with np.errstate(divide="ignore"):
            return self.widen(1.0 / hi, 1.0 / np.maximum(lo, 0.0))

    def sinh(self, x: Any) -> Any:
        with np.errstate(over="ignore"):
            return self.widen(np.sinh(x[0]), np.sinh(x[1]))

    def negate_where(self, x: Any, negative: Any) -> Any:
        lo, hi = x
        return np.where(negative, -hi, lo), np.where(negative, -lo, hi)


class _Exact:
    """mpmath.iv intervals (rigorous outward rounding)."""

    def neglog(self, u: Any) -> Any:
        return -iv.log(u)

    def sqrt_pos(self, x: Any) -> Any:  # x >= 0 here: −ln U, χ², d/χ²
        return iv.sqrt(x)

    def cos2pi(self, u: Any) -> Any:
        return iv.cos(2 * iv.pi * u)

    def exp(self, x: Any) -> Any:
        return iv.exp(x)

    def scale(self, x: Any, c: float) -> Any:
        return x * iv.mpf(c)

    def affine_uniform(self, u: Any) -> Any:
        return 2 * u - 1

    def mul(self, x: Any, y: Any) -> Any:
        return x * y

    def add(self, x: Any, y: Any) -> Any:
        return x + y

    def square(self, x: Any) -> Any:
        return x**2

    def reciprocal_pos(self, x: Any) -> Any:
        return 1 / x

    def sinh(self, x: Any) -> Any:
        return (iv.exp(x) - iv.exp(-x)) / 2

    def negate_where(self, x: Any, negative: Any) -> Any:
        return -x if negative else x


def _normal(ops: Any, u1: Any, u2: Any) -> Any:
    return ops.mul(ops.sqrt_pos(ops.scale(ops.neglog(u1), 2.0)), ops.cos2pi(u2))


def _expression(family: str, sigma: float, d: int) -> Callable[[Any, list[Any], Any], Any]:
    def lln(ops: Any, u: list[Any], negative: Any) -> Any:
        mag = ops.mul(ops.neglog(u[0]), ops.exp(ops.scale(_normal(ops, u[1], u[2]), sigma)))
        return ops.negate_where(mag, negative)

    def uln(ops: Any, u: list[Any], negative: Any) -> Any:
        spread = ops.exp(ops.scale(_normal(ops, u[1], u[2]), sigma))
        return ops.mul(ops.affine_uniform(u[0]), spread)

    def asn(ops: Any, u: list[Any], negative: Any) -> Any:
        # sinh(σN); the caller divides the exact scale by σ (1/σ need not be a float)
        return ops.sinh(ops.scale(_normal(ops, u[0], u[1]), sigma))

    def student(ops: Any, u: list[Any], negative: Any) -> Any:
        top = _normal(ops, u[0], u[1])
        chi = None
        for i in range(d // 2):
            term = ops.scale(ops.neglog(u[2 + i]), 2.0)
            chi = term if chi is None else ops.add(chi, term)
        if d % 2:
            k = 2 + d // 2
            sq = ops.square(_normal(ops, u[k], u[k + 1]))
            chi = sq if chi is None else ops.add(chi, sq)
        ratio = ops.scale(ops.reciprocal_pos(chi), float(d))  # d/χ²
        return ops.mul(top, ops.sqrt_pos(ratio))

    table = {
        "laplace_log_normal": lln,
        "uniform_log_normal": uln,
        "arcsinh_normal": asn,
        "student_t": student,
    }
    return table[family]


# ---------------------------------------------------------------------------------------------


def _clamped_floor_float(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.clip(np.floor(x), float(lo), float(hi))


def _mpf_floor(value: Any, lo: int, hi: int) -> int | None:
    if value == fnan:
        return None
    if value == finf:
        return hi
    if value == fninf:
        return lo
    return min(max(int(to_int(value, round_floor)), lo), hi)


def floor_scaled_noise(
    family: str,
    sigma: Fraction,
    d: int,
    scale: Fraction,
    low: int,
    high: int,
    size: int,
) -> list[int]:
    """``size`` i.i.d. draws of clamp(⌊scale·Z⌋, low, high), exactly (module docstring).

    ``sigma`` must be exactly representable in float64 (the plans choose it so); ``d`` is the
    Student's t degrees of freedom (ignored otherwise); ``low <= 0 <= high`` are integers below
    2^53 in magnitude.
    """
    if float(sigma) != sigma or sigma <= 0 or scale <= 0 or not low <= high:
        raise ValueError("sigma must be a positive float64, scale > 0, low <= high")
    if max(abs(low), abs(high)) >= 2**53:
        raise ValueError("clamp bounds must be below 2^53 in magnitude")
    r = uniform_count(family, d)
    expr = _expression(family, float(sigma), d)
    if family == "arcsinh_normal":
        scale = scale / sigma  # Z = sinh(σN)/σ: exact in the rational scale
    words = [random_words(size) for _ in range(r)]
    negative = (random_words(size) >> np.uint64(63)).astype(bool)
    cells = [(w >> np.uint64(12)).astype(np.float64) * _CELL for w in words]
    ops = _Float()
    z_lo, z_hi = expr(ops, [(c, c + _CELL) for c in cells], negative)
    # c_float is within 2^-53 relative of scale: the widening (2^-40) covers it. A scale beyond
    # float range (only with extreme public grids) sends every draw to the exact path.
    huge = scale >= 2**900
    c_float = 1.0 if huge else float(scale)
    lo_v, hi_v = ops.scale((z_lo, z_hi), c_float)
    k_lo = _clamped_floor_float(lo_v, low, high)
    k_hi = _clamped_floor_float(hi_v, low, high)
    decided = (k_lo == k_hi) & ~np.isnan(k_lo) & ~np.isnan(k_hi)
    if _FORCE_EXACT or huge:
        decided[:] = False
    out = [int(v) for v in np.where(decided, k_lo, 0.0)]
    for i in np.flatnonzero(~decided):
        prefixes = [int(w[i] >> np.uint64(12)) for w in words]
        out[int(i)] = _exact_draw(expr, prefixes, bool(negative[i]), scale, low, high)
    return out


def _exact_draw(
    expr: Callable[[Any, list[Any], Any], Any],
    prefixes: list[int],
    negative: bool,
    scale: Fraction,
    low: int,
    high: int,
) -> int:
    """Finish one draw with mpmath.iv on the same uniforms, refining their bits as needed."""
    bits = 52
    ops = _Exact()
    saved = iv.prec
    try:
        while True:
            iv.prec = bits + 64
            uniforms = [iv.mpf([iv.ldexp(k, -bits), iv.ldexp(k + 1, -bits)]) for k in prefixes]
            z = expr(ops, uniforms, negative)
            value = z * iv.mpf(scale.numerator) / iv.mpf(scale.denominator)
            lo_raw, hi_raw = value._mpi_
            a = _mpf_floor(lo_raw, low, high)
            b = _mpf_floor(hi_raw, low, high)
            if a is not None and a == b:
                return a
            fresh = random_words(len(prefixes))
            prefixes = [(k << 64) | int(w) for k, w in zip(prefixes, fresh, strict=True)]
            bits += 64
    finally:
        iv.prec = saved
