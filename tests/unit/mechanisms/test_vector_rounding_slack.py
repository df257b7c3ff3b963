"""Rounding vectors to the grid costs up to one step per changed coordinate, and the maps pay it.

A grid mechanism rounds each coordinate to the nearest multiple of g before adding lattice noise.
Two inputs whose c changed coordinates differ by a_i each land |n_i - n'_i| <= ⌈a_i/g⌉ steps
apart, which can exceed ⌈Σa_i/g⌉ by c - 1 (L1) or ‖a‖/g by nearly √c (L2). The pairs below
realise that: coordinate i of x sits just below a half step ((1/2 - η/2)·g) and y_i = x_i +
(j_i + η)·g, so x_i rounds down while y_i rounds up to j_i + 1, a full extra step each (η =
1/(2c) for L1; for L2 the largest η with c·(j + η)² <= (Δ/g)², j = ⌊Δ/(g√c)⌋).

The realised loss is computed exactly from the lattice, from the rounded indices
(:func:`dpkit.noise._grid.to_grid`) and the declared noise:

* Laplace (discrete Laplace of scale t on the lattice, independent coordinates): the pure loss
  between the two output distributions is exactly Σ|n_i - n'_i|/t. It must be at most the
  claimed ε (the map at Δ), and the claim must be the ε asked for.
* Gaussian (discrete Gaussian of variance σ² in grid steps): the Rényi divergence of order α of
  the product with shift vector v is α·‖v‖²/(2σ²) at integer α (CKS 2020, Thm. 14), so the
  realised ρ is ‖v‖²/(2σ²); with ``rho=`` it must be at most the claimed ρ, and with ``epsilon,
  delta`` (whose map goes through zCDP) its conversion at the claimed δ must give at most ε.

Mutants killed: dropping the (c - 1) steps from ``lattice_l1_steps`` (the map understates ε) or
from ``make_laplace``'s calibration (the noise is too small for ε), and dropping the √c term
from ``lattice_l2_steps``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._framework import Measurement
from dpkit.noise._distributions import DiscreteGaussian, DiscreteLaplace
from dpkit.noise._grid import to_grid


def _pair(exponent: int, js: list[int], eta: Fraction) -> tuple[np.ndarray, np.ndarray]:
    """x_i = (1/2 - η/2 + 7i)·g rounds down, y_i = x_i + (j_i + η)·g rounds up to j_i + 1 steps
    from x_i's grid point (0 < η < 1)."""
    g = math.ldexp(1.0, exponent)
    x = np.array([(0.5 - float(eta) / 2 + 7 * i) * g for i in range(len(js))], dtype=np.float64)
    y = x + np.array([j + float(eta) for j in js], dtype=np.float64) * g
    return x, y


def _real_distances(x: np.ndarray, y: np.ndarray) -> tuple[Fraction, Fraction]:
    diffs = [abs(Fraction(float(b)) - Fraction(float(a))) for a, b in zip(x, y, strict=True)]
    return sum(diffs, Fraction(0)), sum((d * d for d in diffs), Fraction(0))


def _shift(m: Measurement[object], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    exponent = m.noise.exponent
    return np.abs(to_grid(y, exponent) - to_grid(x, exponent))


@pytest.mark.parametrize("changed", [2, 3, 5, 8])
@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, 1), (3, Fraction(1, 2)), (1, 4)])
def test_laplace_vector_rounding_is_charged(
    changed: int, sensitivity: int, epsilon: Fraction | int
) -> None:
    m = dp.make_laplace(sensitivity, epsilon, changed_coordinates=changed)
    lattice = m.noise.lattice
    assert isinstance(lattice, DiscreteLaplace)
    g = Fraction(2) ** m.noise.exponent
    d = Fraction(sensitivity) / g
    assert d.denominator == 1 and d > changed
    js = [int(d - 1) // changed] * changed
    js[0] += int(d - 1) - sum(js)  # Σ j_i = D - 1, so the real distance is (D - 1/2)·g
    x, y = _pair(m.noise.exponent, js, Fraction(1, 2 * changed))
    l1, _ = _real_distances(x, y)
    assert l1 <= sensitivity, "the pair must be neighbours at L1 distance <= Δ"
    steps = int(_shift(m, x, y).sum())
    # the pair uses the whole slack: c - 1 steps beyond ⌈distance/g⌉
    assert steps == math.ceil(l1 / g) + changed - 1
    realised = Fraction(steps) / lattice.scale  # exact pure loss of the product lattice
    claimed = m.loss
    assert isinstance(claimed, dp.PureDP)
    assert realised <= claimed.epsilon, (
        f"c={changed}: rounding moved the inputs {steps} steps apart, a loss of {realised} > "
        f"the claimed ε = {claimed.epsilon}"
    )
    assert claimed.epsilon <= Fraction(epsilon), f"asked for ε={epsilon}, got {claimed.epsilon}"


def _gaussian_pair(m: Measurement[object], changed: int, sensitivity: int) -> tuple[int, Fraction]:
    """(‖v‖² in grid steps², real L2² distance) for the worst pair at L2 distance <= Δ."""
    g = Fraction(2) ** m.noise.exponent
    d = Fraction(sensitivity) / g
    assert d.denominator == 1
    j = math.isqrt(int(d * d) // changed)  # ⌊D/√c⌋
    assert changed * j * j < d * d, "D/√c must not be a whole number (no room for an extra step)"
    # the largest η (halved until it fits) with c·(j + η)² <= D²: each coordinate then rounds
    # to j + 1 steps and ‖v‖ = √c·(j + 1) > D
    eta = Fraction(1, 2)
    while changed * (j + eta) ** 2 > d * d:
        eta /= 2
    x, y = _pair(m.noise.exponent, [j] * changed, eta)
    _, l2_squared = _real_distances(x, y)
    assert l2_squared <= sensitivity**2, "the pair must be neighbours at L2 distance <= Δ"
    v = _shift(m, x, y)
    assert np.all(v == j + 1), "each coordinate should round a full extra step"
    norm_squared = int(np.sum(v.astype(object) ** 2))
    assert norm_squared > d * d, "the pair must use the rounding slack"
    return norm_squared, l2_squared


@pytest.mark.parametrize("changed", [2, 3, 5, 8])
@pytest.mark.parametrize(("sensitivity", "rho"), [(1, Fraction(1, 2)), (3, Fraction(1, 50))])
def test_gaussian_zcdp_vector_rounding_is_charged(
    changed: int, sensitivity: int, rho: Fraction
) -> None:
    m = dp.make_gaussian(sensitivity, rho=rho, changed_coordinates=changed)
    lattice = m.noise.lattice
    assert isinstance(lattice, DiscreteGaussian)
    norm_squared, _ = _gaussian_pair(m, changed, sensitivity)
    realised = Fraction(norm_squared) / (2 * lattice.sigma2)
    claimed = m.loss
    assert isinstance(claimed, dp.ZCDP)
    assert realised <= claimed.rho, (
        f"c={changed}: a shift of ‖v‖² = {norm_squared} steps² gives ρ = {float(realised):.6g} "
        f"> the claimed ρ = {float(claimed.rho):.6g}"
    )
    assert claimed.rho <= rho


# Building an (ε, δ) Gaussian for vectors takes ~10 s (its σ search converts zCDP to (ε, δ) with
# exact Fractions dozens of times), so one case runs in CI and the others behind `slow`.
APPROX_CASES = [
    pytest.param(c, 1, 1, Fraction(1, 10**6), marks=() if c == 3 else pytest.mark.slow)
    for c in (2, 3, 5, 8)
] + [pytest.param(c, 3, 2, Fraction(1, 10**9), marks=pytest.mark.slow) for c in (2, 5)]


@pytest.mark.parametrize(("changed", "sensitivity", "epsilon", "delta"), APPROX_CASES)
def test_gaussian_approx_vector_rounding_is_charged(
    changed: int, sensitivity: int, epsilon: int, delta: Fraction
) -> None:
    m = dp.make_gaussian(sensitivity, epsilon, delta, changed_coordinates=changed)
    lattice = m.noise.lattice
    assert isinstance(lattice, DiscreteGaussian)
    norm_squared, _ = _gaussian_pair(m, changed, sensitivity)
    realised = dp.ZCDP(Fraction(norm_squared) / (2 * lattice.sigma2))
    claimed = m.loss
    assert isinstance(claimed, dp.ApproxDP)
    assert claimed.epsilon <= epsilon and claimed.delta <= delta
    implied = realised.to_approx(claimed.delta)
    within = implied.epsilon <= claimed.epsilon  # (huge exact Fractions: no introspection)
    assert within, (
        f"c={changed}: the realised ρ = {float(realised.rho):.6g} gives ε = "
        f"{float(implied.epsilon):.6g} at the claimed δ = {float(claimed.delta):.3g}, more than "
        f"the claimed ε = {claimed.epsilon}"
    )
