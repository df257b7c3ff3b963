"""Review of issue 10: the widened winsorized mean of sample-and-aggregate, checked piece by piece
through its own code (the quartile mechanisms replaced by stubs that record their ε, the discrete
Laplace sampler by a recorder): the quartiles get ε/4 each, and the noisy mean's scale covers the
change of the rounded, winsorized mean when one of the m block values moves anywhere in the
range (its loss is at most ε/2), so the total is ε per coordinate."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.sensitivity._sample_aggregate as sa


@pytest.mark.parametrize("m", [3, 4, 7])
@pytest.mark.parametrize(("lo", "hi"), [(0, 1), (-3.3, 1e3), (1e-9, 2e-9)])
def test_winsorized_mean_pieces_add_up_to_epsilon(
    m: int, lo: float, hi: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    epsilon, d = Fraction(3, 2), 2
    asked: list[Fraction] = []

    def stub(statistic: str, *, q: Any = None, epsilon: Any, **_: Any) -> Any:
        asked.append(Fraction(epsilon))
        value = lo if Fraction(q) < Fraction(1, 2) else hi  # the widest interval
        return lambda column: value

    scales: list[Fraction] = []

    def record(scale: Fraction, size: int) -> np.ndarray:
        scales.append(Fraction(scale))
        return np.zeros(size, dtype=np.int64)

    monkeypatch.setattr(sa, "make_inverse_sensitivity", stub)
    monkeypatch.setattr(sa, "discrete_laplace_wide", record)
    measurement = sa.make_sample_and_aggregate(
        np.mean, m=m, n_range=(m, m), output_shape=d, output_range=(lo, hi), epsilon=epsilon
    )
    per = epsilon / d
    assert asked == [per / 4, per / 4]
    aggregate = measurement.info.aggregate
    rng = np.random.default_rng(m)
    g = math.ldexp(1.0, math.frexp(max(abs(lo), abs(hi), hi - lo))[1] - 40)
    worst = Fraction(0)
    for _ in range(300):
        x = rng.choice([lo, hi, lo + g / 2, hi - g / 2, rng.uniform(lo, hi)], size=m)
        y = x.copy()
        y[rng.integers(m)] = rng.choice([lo, hi, rng.uniform(lo, hi)])
        fx, fy = aggregate(x), aggregate(y)
        scale = scales[-1]
        shift = abs(Fraction(fx) - Fraction(fy)) / Fraction(g)
        worst = max(worst, shift / scale)
    # discrete Laplace with scale b costs Δ/b: at most the mean's share ε/2
    assert worst <= per / 2, (float(worst), float(per / 2))
    # and the scale is not wasteful: a block moving across the whole range costs nearly ε/2
    x = np.full(m, lo)
    y = x.copy()
    y[0] = hi
    shift = abs(Fraction(aggregate(x)) - Fraction(aggregate(y))) / Fraction(g)
    assert shift / scales[-1] > per / 2 * Fraction(9, 10)
