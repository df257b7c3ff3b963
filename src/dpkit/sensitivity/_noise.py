"""Exact lattice samplers for the heavy-tailed noise of smooth-sensitivity releases.

``cauchy_lattice(s, γ, size)`` draws Z on the integers with P(Z = z) ∝ h(z/s),
h(u) = 1/(1 + |u|^γ), for a rational scale s > 0 and an integer γ >= 2, **exactly**: every step
is an exact draw (uniform integers, fair bits) or an exact comparison of a uniform U with a
rational threshold. There is no floating-point noise and no inverse CDF in floats.

Rejection from a dyadic-shell envelope (B = ⌈s⌉):

* shell 0 is |z| < B (2B − 1 points), envelope height 1 >= h;
* shell j >= 1 is B·2^{j−1} <= |z| < B·2^j (B·2^j points), envelope height 2^{−γ(j−1)} >= h there
  (h(z/s) <= (s/|z|)^γ <= 2^{−γ(j−1)});
* the envelope's mass is 2B − 1 for shell 0 and B·2^γ·2^{−(γ−1)j} for shell j, so shell 0 is
  chosen with the rational probability (2B − 1)/(2B − 1 + B·2^γ/(2^{γ−1} − 1)), and otherwise
  j − 1 = ⌊τ/(γ − 1)⌋ where τ is the number of trailing zero bits of a random bit string
  (P(τ >= a) = 2^{−a}, so P(j − 1 >= m) = 2^{−(γ−1)m}: the right geometric law);
* a uniform point of the chosen shell is accepted with the rational probability
  h(z/s)/height_j = s^γ/(s^γ + |z|^γ)·2^{γ(j−1)} <= 1.

An accepted z therefore has probability ∝ height_j · (h(z/s)/height_j) = h(z/s): the target.
Comparisons ``U < θ`` with rational θ are done on the 52-bit cell of U in float64 with a relative
margin of 2^-40 (the float θ is within a few ulps), and the rare undecided cells are finished
exactly with further bits of the same U (:func:`dpkit.noise._exact._exact_below`), as every dpkit
sampler does (docs/noise.md §2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

import dpkit.noise._exact as _exact_mod
from dpkit.noise import (
    bernoulli_exp_vector,
    discrete_laplace,
    geometric_exp,
    random_words,
    uniform_integers,
)
from dpkit.noise._exact import _CELL, _REL, _cell_floats, _cell_index, _exact_below

__all__ = ["below_rational", "cauchy_lattice", "discrete_laplace_wide"]


def below_rational(approx: np.ndarray, exact: Callable[[int], Fraction]) -> np.ndarray:
    """Independent Bernoulli(θ_i) for rational θ_i in [0, 1], exactly.

    ``approx[i]`` is a float64 within relative error 2^-44 of θ_i (or 0 when θ_i underflows);
    ``exact(i)`` returns θ_i as a Fraction and is called only for the rare undecided cells.
    """
    size = approx.size
    low_u = _cell_floats(random_words(size))
    high_u = low_u + _CELL
    result = high_u <= approx * (1 - _REL)
    undecided = ~result & (low_u <= approx * (1 + _REL))
    if _exact_mod._FORCE_EXACT:
        undecided[:] = True
    for i in np.flatnonzero(undecided):
        value = exact(int(i))

        def bounds(_digits: int, v: Fraction = value) -> tuple[Fraction, Fraction]:
            return v, v

        result[i] = _exact_below(_cell_index(float(low_u[i])), bounds)
    return result


def _trailing_zeros(size: int) -> np.ndarray:
    """τ >= 0 with P(τ >= a) = 2^{-a}: trailing zero bits of a uniform infinite bit string."""
    out = np.zeros(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        words = random_words(todo.size)
        zero = words == 0
        lowest = words & (~words + np.uint64(1))
        tz = np.zeros(todo.size, dtype=np.int64)
        nz = ~zero
        tz[nz] = np.round(np.log2(lowest[nz].astype(np.float64))).astype(np.int64)
        out[todo] += np.where(zero, 64, tz)
        todo = todo[zero]
    return out


def cauchy_lattice(scale: Fraction, gamma: int, size: int) -> list[int]:
    """``size`` i.i.d. draws of Z with P(Z = z) ∝ 1/(1 + |z/scale|^γ) on the integers (exact).

    Returns Python ints (the heavy tail can exceed int64).
    """
    if scale <= 0 or gamma < 2:
        raise ValueError("scale must be > 0 and gamma >= 2")
    b = math.ceil(scale)
    s_pow = scale**gamma
    shell0 = Fraction(2 * b - 1) / (2 * b - 1 + Fraction(b * 2**gamma, 2 ** (gamma - 1) - 1))
    out: list[int] = []
    while len(out) < size:
        need = size - len(out)
        draw = 2 * need + 8
        exact_shell0 = float(shell0)
        in_zero = below_rational(np.full(draw, exact_shell0), lambda _i: shell0)
        shells = np.zeros(draw, dtype=np.int64)
        rest = np.flatnonzero(~in_zero)
        if rest.size:
            shells[rest] = 1 + _trailing_zeros(rest.size) // (gamma - 1)
        proposals: list[int] = [0] * draw
        for j in np.unique(shells):
            idx = np.flatnonzero(shells == j)
            if j == 0:
                mags = uniform_integers(2 * b - 1, idx.size)
                values = [int(v) - (b - 1) for v in mags]
            else:
                width = b << (int(j) - 1)
                mags = uniform_integers(width, idx.size)
                signs = uniform_integers(2, idx.size)
                values = [
                    (width + int(m)) * (1 if int(sg) else -1)
                    for m, sg in zip(mags, signs, strict=True)
                ]
            for i, v in zip(idx, values, strict=True):
                proposals[int(i)] = v
        # θ = h(z/s)/height_j = 1/(2^{-γ(j-1)} + (|z|/(s·2^{j-1}))^γ) for j >= 1 (the ratio is
        # in [1, 4): no overflow), and 1/(1 + (|z|/s)^γ) for j = 0; float error < 2^-47 relative.
        mags_f = np.abs(np.array([float(v) for v in proposals]))
        shift = np.maximum(shells - 1, 0).astype(np.float64)
        ratio = mags_f / (float(scale) * np.exp2(shift))
        floor = np.where(shells >= 1, np.exp2(-float(gamma) * shift), 1.0)
        approx = 1.0 / (floor + ratio**gamma)

        def exact(
            i: int, shells: np.ndarray = shells, proposals: list[int] = proposals
        ) -> Fraction:
            j = int(shells[i])
            height = Fraction(2) ** (gamma * (j - 1)) if j >= 1 else Fraction(1)
            return s_pow / (s_pow + Fraction(abs(proposals[i])) ** gamma) * height

        accepted = below_rational(approx, exact)
        out.extend(v for v, ok in zip(proposals, accepted, strict=True) if ok)
    return out[:size]


_DIRECT_LAPLACE = Fraction(2**30)


def discrete_laplace_wide(t: Fraction, size: int) -> list[int]:
    """P(Z = z) ∝ e^{-|z|/t} on the integers, exactly, fast for any rational t > 0.

    For t <= 2^30 this is :func:`dpkit.noise.discrete_laplace`. Beyond, the float certification
    of ⌊-t·ln U⌋ fails almost always (its absolute error exceeds 1), so the magnitude is drawn in
    blocks of width B = ⌈t⌉: X = J·B + u with J geometric (P(J >= j) = e^{-jB/t}, scale t/B ∈
    [1/2, 1], exact), u uniform on [0, B) accepted with probability e^{-u/t} (exact Bernoulli),
    so P(X = x) ∝ e^{-x/t}; then Z = ±X with (−, 0) rejected, as in CKS 2020 Alg. 2.
    """
    if t <= _DIRECT_LAPLACE:
        return [int(v) for v in discrete_laplace(t, size)]
    b = math.ceil(t)
    out: list[int] = []
    while len(out) < size:
        draw = 2 * (size - len(out)) + 8
        offsets = uniform_integers(b, draw)
        gamma = np.array([float(u) for u in offsets]) / float(t)

        def exact_gamma(i: int, o: np.ndarray = offsets) -> Fraction:
            return Fraction(int(o[i])) / t

        keep = bernoulli_exp_vector(gamma, exact_gamma, gamma * 2.0**-48 + 2.0**-60)
        kept = [int(u) for u, ok in zip(offsets, keep, strict=True) if ok]
        if not kept:
            continue
        blocks = geometric_exp(t / b, len(kept))
        signs = uniform_integers(2, len(kept))
        for u, j, sg in zip(kept, blocks, signs, strict=True):
            x = int(j) * b + u
            if sg and x == 0:
                continue  # (−, 0) rejected
            out.append(-x if sg else x)
    return out[:size]
