"""Propose-test-release: its (ε, δ) computed exactly from what the mechanism really does.

The audits in test_sensitivity_ptr_inverse.py sample 20,000 releases; they cannot see δ (a
threshold one step too low releases an unstable value with probability e^{−ε_test}·δ-ish) nor a
release noise a little too small. Here the two noises are intercepted: the test noise is read
(its scale s) and replaced by a constant z, the release noise is read (its scale t in grid steps)
and replaced by 0. Then, over every dataset of n = 5 values from a small set and every
substitution neighbour:

* the distance to instability d the mechanism computes is 1-sensitive, and d(x) >= 1 implies
  LS(x) <= b (brute force: every substitution of every value by L or U);
* the *effective* threshold is found by behaviour: the least z with which an unstable dataset
  (d = 0) is released; δ_real = P(Z >= z) = r^z/(1 + r), r = e^{−1/s}, for the discrete
  Laplace test noise;
* ε_real = 1/s (d is 1-sensitive) + max |c_x − c_y|/t over neighbours one of which is stable
  (d >= 1), with c the released grid index at zero noise.

Then ε_real <= the claimed ε and δ_real <= the claimed δ, exactly (Fractions and mpmath).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import mpmath as mp
import numpy as np
import pytest

import dpkit.sensitivity._ptr as ptr_module
from dpkit.sensitivity._data import Bounds, make_statistic, prepare
from dpkit.sensitivity._ptr import distance_to_instability, make_propose_test_release
from dpkit.sensitivity._smooth import default_exponent, statistic_range

LOWER, UPPER, N = 0.0, 10.0, 5
VALUES = (0.0, 1.1, 2.1, 3.1, 3.3, 10.0)  # gaps of 1 (= b) and less; not on the output grid


def median(values: tuple[float, ...]) -> float:
    return sorted(values)[(len(values) + 1) // 2 - 1]


def local_sensitivity(values: tuple[float, ...]) -> float:
    base = median(values)
    return max(
        abs(median((*values[:i], v, *values[i + 1 :])) - base)
        for i in range(len(values))
        for v in (LOWER, UPPER)
    )


class Intercept:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.z = 0
        self.test_scale: Fraction | None = None
        self.release_scale: Fraction | None = None
        monkeypatch.setattr(ptr_module, "discrete_laplace", self._test)
        monkeypatch.setattr(ptr_module, "discrete_laplace_wide", self._release)

    def _test(self, scale: Any, k: int) -> np.ndarray:
        self.test_scale = Fraction(scale)
        return np.full(k, self.z, dtype=np.int64)

    def _release(self, scale: Any, k: int) -> list[int]:
        self.release_scale = Fraction(scale)
        return [0] * k


# b/g = 2^46 + 1 is odd (g = 2^-46 for the range [0, 10]), and the medians (2 + 2^-47)/g and
# (3 + 3·2^-47)/g are ties that round to even in opposite directions: |f(x) − f(y)| = b, but
# the rounded statistics are b/g + 1 steps apart (why the release noise is for ⌈(b + g)/g⌉)
TIES = (0.0, 1.5, 2 + 2**-47, 3 + 3 * 2**-47, 10.0)


@pytest.mark.parametrize(
    ("bound", "e_test", "e_rel", "delta", "values"),
    [
        (1, Fraction(1, 2), Fraction(1, 2), Fraction(1, 10**6), VALUES),
        (1, Fraction(1), Fraction(1, 4), Fraction(1, 1000), VALUES),
        (Fraction(1, 5), Fraction(3, 10), Fraction(2), Fraction(1, 10**9), VALUES),
        (1 + Fraction(1, 2**46), Fraction(1, 2), Fraction(1, 2), Fraction(1, 10**6), TIES),
    ],
)
def test_realised_loss_is_within_the_claim(
    monkeypatch: pytest.MonkeyPatch,
    bound: Any,
    e_test: Fraction,
    e_rel: Fraction,
    delta: Fraction,
    values: tuple[float, ...],
) -> None:
    """Killed: a threshold two below ⌈ln(1/δ)/ε_test⌉, test noise at 2ε_test, release noise for
    b/2 or at 2ε_release, no grid-rounding step (the TIES case), a distance to instability one
    too large, a loss without ε_test. (One step lower or '>=' for '>' still meets δ:
    P(Z >= T) = e^{−ε_test·T}/(1 + e^{−ε_test}) <= δ, so T is one step conservative.)"""
    m = make_propose_test_release(
        "median",
        lower=LOWER,
        upper=UPPER,
        n=N,
        bound=bound,
        epsilon_test=e_test,
        epsilon_release=e_rel,
        delta=delta,
    )
    claimed = m.privacy_map(1)
    spy = Intercept(monkeypatch)
    release = m.info.release_many
    stat, bounds = make_statistic("median"), Bounds.of(LOWER, UPPER)
    cap = N + 1  # as the mechanism caps it (n + 1 at most)
    g = Fraction(2) ** default_exponent(*statistic_range(stat, bounds, N))

    datasets = sorted(set(itertools.combinations_with_replacement(values, N)))
    d_of, centre_of = {}, {}
    spy.z = 10**9  # always passes: read the released grid index at zero noise
    for x in datasets:
        d_of[x] = distance_to_instability(prepare(np.array(x), bounds), stat, bounds, bound, cap)
        out = release(np.array(x), 1)[0]
        assert not out.refused
        centre_of[x] = Fraction(out.value) / g
        if d_of[x] >= 1:
            assert local_sensitivity(x) <= bound, (x, d_of[x])  # stable means LS <= b
    assert spy.test_scale is not None and spy.release_scale is not None

    worst_shift = Fraction(0)
    for x in datasets:
        for i, v in itertools.product(range(N), values):
            y = tuple(sorted((*x[:i], v, *x[i + 1 :])))
            assert abs(d_of[x] - min(d_of[y], cap)) <= 1  # d is 1-sensitive
            if max(d_of[x], d_of[y]) >= 1:
                worst_shift = max(worst_shift, abs(centre_of[x] - centre_of[y]))
    assert worst_shift > 0

    unstable = next(x for x in datasets if d_of[x] == 0)
    z = 0
    while True:  # the least test noise that releases an unstable dataset
        spy.z = z
        if not release(np.array(unstable), 1)[0].refused:
            break
        z += 1

    epsilon_real = 1 / spy.test_scale + worst_shift / spy.release_scale
    assert epsilon_real <= claimed.epsilon, (float(epsilon_real), float(claimed.epsilon))
    with mp.workdps(40):
        s = mp.mpf(spy.test_scale.numerator) / spy.test_scale.denominator
        r = mp.exp(-1 / s)
        delta_real = r**z / (1 + r)
        delta_claim = mp.mpf(claimed.delta.numerator) / claimed.delta.denominator
        assert delta_real <= delta_claim, (delta_real, delta_claim)
        assert delta_real >= delta_claim * r**2 / 2  # the threshold is not needlessly high
    assert math.isclose(float(epsilon_real), float(claimed.epsilon), rel_tol=1e-9)
