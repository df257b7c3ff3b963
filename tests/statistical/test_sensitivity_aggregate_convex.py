"""Audits: sample-and-aggregate on block-changing neighbours (and a broken aggregator), and the
convexity combinator (and a broken claim)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpkit as dp
from dpkit.sensitivity._convexity import make_convex_combination
from dpkit.sensitivity._noise import discrete_laplace_wide
from dpkit.sensitivity._sample_aggregate import make_sample_and_aggregate
from dpkit.testing import audit_samples

RELEASES = 1500
UNITS = np.arange(12)
A = np.zeros(12)
B = A.copy()
B[3] = 10.0  # one unit moves to the top of the range: its block's value jumps


def _runs(m: object, values: np.ndarray) -> np.ndarray:
    return np.array([float(m((UNITS, values))[0]) for _ in range(RELEASES)])  # type: ignore[operator]


@pytest.mark.parametrize("aggregator", ["winsorized_mean", "inverse_median", "smooth_median"])
def test_sample_and_aggregate_passes_audit(aggregator: str) -> None:
    m = make_sample_and_aggregate(
        np.mean,
        m=4,
        n_range=(12, 12),
        output_shape=1,
        output_range=(0, 10),
        epsilon=1,
        aggregator=aggregator,
    )
    a, b = _runs(m, A), _runs(m, B)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1).passed


def test_sample_and_aggregate_under_noised_is_flagged() -> None:
    """Broken aggregator: the mean of the block values with noise for sensitivity width/(10m)."""
    m = make_sample_and_aggregate(
        np.mean, m=4, n_range=(12, 12), output_shape=1, output_range=(0, 10), epsilon=1
    )
    blocks = m.info.block_values

    def broken(values: np.ndarray) -> float:
        mean = float(np.mean(blocks((UNITS, values))[:, 0]))
        noise = discrete_laplace_wide(Fraction(1, 4 * 10) * 1024, 1)[0]  # scale 0.25/ε·(1/10)
        return mean + noise / 1024

    a = np.array([broken(A) for _ in range(RELEASES)])
    b = np.array([broken(B) for _ in range(RELEASES)])
    assert not audit_samples(a, b, 1).passed


def _encode(release: tuple[int, int]) -> float:
    index, value = release
    return 1000.0 * index + value


def test_convexity_claim_is_the_maximum() -> None:
    parts = [dp.make_geometric(1, epsilon=3), dp.make_geometric(1, epsilon=Fraction(1, 4))]
    m = make_convex_combination(parts, [Fraction(9, 10), Fraction(1, 10)])
    assert m.loss == dp.PureDP(3)
    a = np.array([_encode(m(0)) for _ in range(8000)])
    b = np.array([_encode(m(1)) for _ in range(8000)])
    assert audit_samples(a, b, 3, events="discrete").passed
    # broken claim: the minimum of the parts' losses
    broken = audit_samples(a, b, Fraction(1, 4), events="discrete")
    assert not broken.passed
    assert math.isfinite(broken.epsilon_lower_bound)
