"""Transformations, measurements and combinators: privacy is computed from the parts."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._losses import PureDP
from dpkit.transformations import make_bounded_sum, make_clamp, make_count


def test_chain_composes_stability_and_privacy_maps() -> None:
    pipeline = make_clamp((0, 10)) >> make_bounded_sum((0, 10)) >> dp.make_laplace(10, 0.5)
    assert pipeline.map(1) == PureDP(0.5)
    assert pipeline.map(2) == PureDP(1)  # group privacy: two rows cost twice
    assert isinstance(pipeline(np.arange(5.0)), float)


def test_chain_refuses_mismatched_metrics() -> None:
    gauss = dp.make_gaussian(1, rho=0.5)  # reads L2 distances
    with pytest.raises(dp.DomainMismatchError, match="L2"):
        make_clamp((0, 1)) >> gauss


def test_postprocessing_keeps_the_map() -> None:
    m = dp.make_laplace(1, 0.5)
    post = m >> (lambda v: round(v) * 2)
    assert post.map(1) == m.map(1)
    assert post(3.0) % 2 == 0


def test_sequential_composition_adds_losses() -> None:
    count = make_count() >> dp.make_geometric(1, 0.3)
    total = make_clamp((0, 1)) >> make_bounded_sum((0, 1)) >> dp.make_laplace(1, 0.5)
    both = dp.make_sequential_composition([count, total])
    assert both.map(1) == PureDP(Fraction(8, 10))
    released = both(np.array([0.2, 0.4]))
    assert len(released) == 2


def test_parallel_composition_costs_the_maximum_for_one_row() -> None:
    parts = [make_count() >> dp.make_geometric(1, eps) for eps in (0.2, 0.7, 0.5)]

    def by_remainder(data: np.ndarray) -> list[np.ndarray]:
        return [data[data % 3 == r] for r in range(3)]

    m = dp.make_parallel_composition(by_remainder, parts)
    assert m.map(1) == PureDP(0.7)
    assert m.map(2) == PureDP(Fraction(14, 10)) + PureDP(Fraction(4, 10)) + PureDP(1)
    assert len(m(np.arange(9))) == 3


def test_measurements_are_frozen() -> None:
    m = dp.make_laplace(1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "other"  # type: ignore[misc]


def test_bounded_sum_is_exact_where_float_summation_is_not() -> None:
    values = np.array([1e6, 0.1, -1e6, 2.0**-20, 0.2] * 1000)
    exact = make_bounded_sum((-1e6, 1e6), grid_exponent=-24)(values)
    # every value here is a multiple of 2^-24 up to rounding of 0.1 and 0.2 to that grid
    rounded = sum(Fraction(round(Fraction(v) * 2**24), 2**24) for v in values)
    assert Fraction(exact) == rounded


def test_bounded_sum_clamps_values_outside_its_bounds() -> None:
    """Regression (edges review): refusing a value outside the bounds made one neighbour raise
    and the other release; the sum clamps instead (and drops NaN rows, as clamp does)."""
    assert make_bounded_sum((0, 1))([0.5, 2.0]) == 1.5
    assert make_bounded_sum((0, 1))([0.5, float("nan"), -float("inf")]) == 0.5


def test_bounds_must_be_ordered() -> None:
    with pytest.raises(dp.InvalidParameterError) as info:
        make_clamp((5, 1))
    assert info.value.parameter == "bounds"
