"""Sample-and-aggregate and the centre of attention: the ε they really spend, read from the
mechanisms they call, against the ε they claim.

Both release two private quantiles (inverse sensitivity) and then a mean of values clipped to the
released interval with discrete Laplace noise on a grid. The audits in
test_sensitivity_aggregate_convex.py and test_sensitivity_centre.py sample a few thousand
releases; a share of ε/2 instead of ε/4 for a quantile (1.25ε in all) passes them. Here the
quantile mechanisms are replaced by stand-ins that record the ε they were built with and return
a chosen interval, and the noise is recorded (its scale t in grid steps) and set to zero, so the
released grid index c is read exactly. For neighbouring value vectors (one value moved between
the ends of the range, and between arbitrary values), the mean step's real ε is
max |c_x − c_y|/t, and

    Σ (the quantiles' ε) + the mean step's real ε  <=  the claimed ε   (per coordinate, × d).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.sensitivity._centre as centre_module
import dpkit.sensitivity._sample_aggregate as sa_module
from dpkit.sensitivity import SensitivityInfo
from dpkit.sensitivity._centre import make_centre_of_attention
from dpkit.sensitivity._sample_aggregate import make_sample_and_aggregate


class Spy:
    """Stand-ins for make_inverse_sensitivity (recording ε, releasing a chosen value) and for
    discrete_laplace_wide (recording the scale, returning zeros)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
        self.epsilons: list[Fraction] = []
        self.scales: list[Fraction] = []
        self.interval = (0.0, 1.0)
        monkeypatch.setattr(module, "make_inverse_sensitivity", self._inverse)
        monkeypatch.setattr(module, "discrete_laplace_wide", self._noise)

    def _inverse(self, statistic: str, **kw: Any) -> Any:
        self.epsilons.append(Fraction(kw["epsilon"]))
        which = 0 if len(self.epsilons) % 2 == 1 else 1  # lower quantile first, then upper
        spy = self

        class Stand:
            def __init__(self) -> None:
                self.info = SensitivityInfo(
                    release_many=lambda values, k: np.full(k, spy.interval[which])
                )

            def __call__(self, values: Any) -> float:
                return spy.interval[which] if statistic == "quantile" else float(values[0])

        return Stand()

    def _noise(self, scale: Any, k: int) -> list[int]:
        self.scales.append(Fraction(scale))
        return [0] * k


LO, HI = -3.0, 7.5
INTERVALS = [(-3.0, 7.5), (0.1, 2.35), (1.0, 1.0 + 1 / 3)]


def neighbour_pairs(m: int) -> list[tuple[np.ndarray, np.ndarray]]:
    base = [np.linspace(LO, HI, m), np.full(m, 0.7), np.linspace(0.2, 2.2, m) ** 2]
    pairs = []
    for x in base:
        for i, v in itertools.product(range(m), (LO, HI, 1.1, 2.0)):
            y = x.copy()
            y[i] = v
            pairs.append((x, y))
    return pairs


@pytest.mark.parametrize("epsilon", [Fraction(1), Fraction(1, 3)])
def test_centre_of_attention_spends_what_it_claims(
    monkeypatch: pytest.MonkeyPatch, epsilon: Fraction
) -> None:
    """Killed: a quantile at ε/2 (instead of ε/4), the mean at ε (instead of ε/2), its
    sensitivity width/(2m), no grid-rounding step."""
    spy = Spy(monkeypatch, centre_module)
    m = 7
    mech = make_centre_of_attention(m=m, lower=LO, upper=HI, epsilon=epsilon)
    release = mech.info.release_many
    g = Fraction(2) ** mech.info.grid_exponent
    assert len(spy.epsilons) == 2
    for d_in, units in ((2, 2), (Fraction(3, 2), 2)):  # group privacy: k values, kε
        assert mech.privacy_map(d_in).epsilon == units * epsilon
    for interval in INTERVALS:
        spy.interval = interval
        worst = Fraction(0)
        for x, y in neighbour_pairs(m):
            cx, cy = (Fraction(float(release(v, 1)[0])) / g for v in (x, y))
            worst = max(worst, abs(cx - cy) / spy.scales[-1])
        real = sum(spy.epsilons) + worst
        assert real <= mech.privacy_map(1).epsilon == epsilon, (interval, float(real))
        if interval == INTERVALS[0]:
            assert real >= epsilon * Fraction(99, 100)  # the whole range: the share is used


@pytest.mark.parametrize("aggregator", ["winsorized_mean", "inverse_median"])
@pytest.mark.parametrize("d", [1, 2])
def test_sample_and_aggregate_spends_what_it_claims(
    monkeypatch: pytest.MonkeyPatch, aggregator: str, d: int
) -> None:
    """Killed: a quartile at ε/2 (instead of ε/4), the mean at ε (instead of ε/2), its
    sensitivity width/(2m), no grid-rounding step, every coordinate at the full ε."""
    spy = Spy(monkeypatch, sa_module)
    epsilon, m = Fraction(1), 7
    mech = make_sample_and_aggregate(
        lambda rows: np.zeros(d),
        m=m,
        n_range=(m, 100),
        output_shape=d,
        output_range=(LO, HI),
        epsilon=epsilon,
        aggregator=aggregator,
        widen=Fraction(1, 2),
    )
    aggregate = mech.info.aggregate
    for d_in, units in ((2, 2), (Fraction(3, 2), 2)):  # k units change at most k blocks
        assert mech.privacy_map(d_in).epsilon == units * epsilon
    per_coordinate = sum(spy.epsilons)  # one aggregator, shared by the d coordinates
    if aggregator == "inverse_median":
        assert d * per_coordinate <= mech.privacy_map(1).epsilon == epsilon
        return
    exponent = (max(abs(LO), abs(HI), HI - LO)).__float__()
    g = Fraction(2) ** (int(np.frexp(exponent)[1]) - 40)
    worst_total = Fraction(0)
    for interval in INTERVALS:
        spy.interval = interval
        worst = Fraction(0)
        for x, y in neighbour_pairs(m):
            cx, cy = (Fraction(aggregate(v)) / g for v in (x, y))
            worst = max(worst, abs(cx - cy) / spy.scales[-1])
        worst_total = max(worst_total, worst)
        assert d * (per_coordinate + worst) <= mech.privacy_map(1).epsilon == epsilon
    assert d * (per_coordinate + worst_total) >= epsilon * Fraction(99, 100)


def test_the_rounding_step_is_charged_at_a_tie(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two blocks, interval [0, W] with W/(2g) = B odd: the means g/2 and (B + 1/2)·g are ties
    that round to even in opposite directions, so a change of W/2 (the sensitivity) moves the
    released index by B + 1 steps. Killed: the mean's noise for ⌈W/(m·g)⌉ steps without the
    +g (centre of attention and sample-and-aggregate)."""
    g = Fraction(2) ** -36  # the grid of [-3, 7.5]: 2^(frexp(10.5) - 40)
    big = 2**30 + 1
    width = float(2 * big * g)
    x, y = np.array([0.0, float(g)]), np.array([width, float(g)])
    epsilon = Fraction(1)

    spy = Spy(monkeypatch, centre_module)
    mech = make_centre_of_attention(m=2, lower=LO, upper=HI, epsilon=epsilon)
    assert Fraction(2) ** mech.info.grid_exponent == g
    spy.interval = (0.0, width)
    release = mech.info.release_many
    cx, cy = (Fraction(float(release(v, 1)[0])) / g for v in (x, y))
    assert cy - cx == big + 1
    assert sum(spy.epsilons) + (cy - cx) / spy.scales[-1] <= epsilon

    spy = Spy(monkeypatch, sa_module)
    agg = make_sample_and_aggregate(
        lambda rows: np.zeros(1),
        m=2,
        n_range=(2, 100),
        output_shape=1,
        output_range=(LO, HI),
        epsilon=epsilon,
        widen=Fraction(1, 2),
    )
    spy.interval = (width / 4, 3 * width / 4)  # widened by half its length: [0, W]
    aggregate = agg.info.aggregate
    cx, cy = (Fraction(aggregate(v)) / g for v in (x, y))
    assert cy - cx == big + 1
    assert sum(spy.epsilons) + (cy - cx) / spy.scales[-1] <= epsilon
