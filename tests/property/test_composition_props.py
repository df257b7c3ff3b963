"""Properties of the seed material that must hold for any parameters (hypothesis)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.core._losses import ApproxDP, PureDP, compose, parallel

fractions = st.fractions(min_value=0, max_value=10, max_denominator=1000)
deltas = st.fractions(min_value=0, max_value=Fraction(1, 100), max_denominator=10**6)


@given(st.lists(st.tuples(fractions, deltas), min_size=1, max_size=20))
def test_sequential_composition_adds_exactly(parts: list[tuple[Fraction, Fraction]]) -> None:
    total = compose(*(ApproxDP(e, d) for e, d in parts))
    assert total == ApproxDP(sum(e for e, _ in parts), sum(d for _, d in parts))


@given(st.lists(fractions, min_size=1, max_size=20))
def test_parallel_composition_is_the_maximum(epsilons: list[Fraction]) -> None:
    assert parallel(*(PureDP(e) for e in epsilons)) == PureDP(max(epsilons))


def _pure_epsilon(p: np.ndarray, q: np.ndarray) -> float:
    """max over outputs of |ln p - ln q| for two distributions on the same finite set."""
    return float(np.max(np.abs(np.log(p) - np.log(q))))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 6).flatmap(
        lambda k: st.tuples(
            st.lists(st.floats(0.05, 1), min_size=k, max_size=k),
            st.lists(st.floats(0.05, 1), min_size=k, max_size=k),
            st.lists(st.lists(st.floats(0.0, 1), min_size=3, max_size=3), min_size=k, max_size=k),
        )
    )
)
def test_post_processing_never_increases_loss(
    data: tuple[list[float], list[float], list[list[float]]],
) -> None:
    """For output distributions p, q of a mechanism on neighbours and ANY randomized map K
    (a row-stochastic matrix), the loss of (pK, qK) is at most that of (p, q)."""
    p = np.array(data[0]) / sum(data[0])
    q = np.array(data[1]) / sum(data[1])
    kernel = np.array(data[2]) + 1e-3
    kernel /= kernel.sum(axis=1, keepdims=True)
    assert _pure_epsilon(p @ kernel, q @ kernel) <= _pure_epsilon(p, q) + 1e-12
