"""Adversarial review (rev) of the arcsinh-normal zCDP family and the smooth variance release.

* Lemma 2 of docs/sensitivity.md §3d: sup_y |L'(y)| against the forward bound
  K(σ, |s'|, |t'|) (stricter than the code's K, which uses s·e^t), over σ from 0.01 to 16 and
  shifts / log-scales at and inside the corners; the bound holds (worst 0.99999, the Gaussian
  limit, where the lemma is tight).
* The variance's A^(k) (``variance_ak_scaled``) against brute force over every grid dataset
  (M <= 8, n <= 5): an upper bound of the released function's distance-k sensitivity, smooth
  across grid neighbours (A^(k)(x) <= A^(k+1)(y)) and equal to GS at k = n.
* FINDING (fixed): with fine public bounds and a fine user grid, the float factor
  h²/(n²(n − 1)) of ``variance_smooth_sensitivity`` underflowed to 0 (or was subnormal), so S = 2g
  while the variance moved by 128g: the release was not private. S* is now computed in log
  space with a 2^-1000 floor; this audit failed before the fix and passes after it.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpkit.core._losses import ZCDP
from dpkit.sensitivity import make_smooth_sensitivity
from dpkit.sensitivity._bun_steinke import asn_lipschitz_upper, calibrate
from dpkit.sensitivity._variance import variance_ak_scaled
from dpkit.testing import audit_samples_zcdp


# ------------------------------------------------------------------ arcsinh-normal Lemma 2
def _logcosh(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    return a + np.log1p(np.exp(-2 * a)) - math.log(2)


def _dloss(y: np.ndarray, sig: float, sp: float, tp: float) -> np.ndarray:
    """L'(y) for P = law of Z, Q = law of s' + e^{t'}Z, Z = sinh(σY)/σ (stable form:
    cosh(σy)ψ(z) = y + σ tanh(σy))."""
    w = sig * y
    u = (np.sinh(w) / sig - sp) * math.exp(-tp)
    wu = np.arcsinh(sig * u)
    ratio = np.exp(_logcosh(w) - _logcosh(wu))
    return math.exp(-tp) * ratio * (wu / sig + sig * np.tanh(wu)) - y - sig * np.tanh(w)


def _k_forward(sig: float, s: float, t: float) -> float:
    c2 = (1.2 + 0.77 * sig**2) / sig
    return (1 + sig * s) * math.exp(t) * (s * math.exp(2 * t) * (1 + sig**2) + t * math.exp(t) * c2)


def _sup(sig: float, sp: float, tp: float) -> float:
    ymax = min(max(80.0, 60.0 / sig), 700.0 / sig)
    y0 = math.asinh(sig * sp) / sig
    ys = np.concatenate(
        [
            np.linspace(-12, 12, 24001),
            np.linspace(y0 - 3, y0 + 3, 6001),
            np.geomspace(1e-6, ymax, 4000),
            -np.geomspace(1e-6, ymax, 4000),
        ]
    )
    values = np.abs(_dloss(ys, sig, sp, tp))
    assert np.isfinite(values).all()
    return float(values.max())


@pytest.mark.parametrize("sig", [0.01, 0.1, 0.43, 1.0, 4.0, 16.0])
def test_asn_lipschitz_lemma_holds_pointwise(sig: float) -> None:
    worst = 0.0
    for s, t in itertools.product([1e-3, 0.05, 0.5, 2.0], [0.0, 0.01, 0.125, 0.5]):
        for sp, tp in [(s, t), (s, -t), (-s, t), (-s, -t), (0.0, t), (s / 2, -t), (s, t / 3)]:
            if sp == 0 and tp == 0:
                continue
            ratio = _sup(sig, sp, tp) / _k_forward(sig, abs(sp), abs(tp))
            worst = max(worst, ratio)
    assert worst <= 1 + 1e-9


def test_asn_calibrations_satisfy_the_exact_bound() -> None:
    for rho in (Fraction(2), Fraction(1, 2), Fraction(1, 200), Fraction(1, 20000)):
        eps = math.sqrt(2 * rho)
        for t in (eps / 8, eps / 32):
            c = calibrate("arcsinh_normal", rho, Fraction(t))
            assert c.epsilon == asn_lipschitz_upper(c.sigma, c.s, c.t)
            assert c.epsilon**2 / 2 <= rho


# ------------------------------------------------------------------ variance A^(k), brute force
def _var(js: tuple[int, ...]) -> Fraction:
    n = len(js)
    return Fraction(n * sum(j * j for j in js) - sum(js) ** 2, n * n)


@pytest.mark.parametrize(("m", "n"), [(2, 5), (4, 5), (8, 4), (8, 5)])
def test_variance_ak_brute_force(m: int, n: int) -> None:
    sets = list(itertools.combinations_with_replacement(range(m + 1), n))
    index = {s: i for i, s in enumerate(sets)}
    values = [_var(s) for s in sets]
    neighbours = []
    for s in sets:
        around = {
            index[tuple(sorted((*s[:p], v, *s[p + 1 :])))]
            for p in range(n)
            for v in range(m + 1)
            if v != s[p]
        }
        neighbours.append(sorted(around))
    level = [max(abs(values[j] - values[i]) for j in nb) for i, nb in enumerate(neighbours)]
    brute = [level]
    for _ in range(n):
        brute.append(
            [max([brute[-1][i]] + [brute[-1][j] for j in nb]) for i, nb in enumerate(neighbours)]
        )
    code = [variance_ak_scaled(np.array(s, dtype=np.int64), m) / (n * n * (n - 1)) for s in sets]
    gs = (n - 1) * m * m / (n * n)
    for i in range(len(sets)):
        for k in range(n + 1):
            assert code[i][k] >= float(brute[k][i]) * (1 - 1e-12)
        assert code[i][n] == pytest.approx(gs, rel=1e-12)
        for j in neighbours[i]:
            assert np.all(code[i][:-1] <= code[j][1:] * (1 + 1e-12))


# ------------------------------------------------------------------ FINDING: factor underflow
def test_variance_smooth_bound_does_not_underflow(seeded: None) -> None:
    n = 2**19
    upper = math.ldexp(1.0, -487)
    x = np.zeros(n)
    y = np.zeros(n)
    y[0] = upper  # the variance moves by W²(n − 1)/n² ≈ 128 output steps of 2^-1000
    m = make_smooth_sensitivity(
        "variance",
        lower=0,
        upper=upper,
        n=n,
        grid_bits=24,
        grid_exponent=-1000,
        rho=0.5,
        noise="arcsinh_normal",
    )
    a = np.asarray(m.info.release_many(x, 1000))
    b = np.asarray(m.info.release_many(y, 1000))
    loss = m.loss
    assert isinstance(loss, ZCDP)
    assert audit_samples_zcdp(a, b, float(loss.rho)).passed
