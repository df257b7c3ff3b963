"""Regression (edges review, issue 8 §1): an exception is an output.

Each test here failed before its fix: a release raised on one input and released on a
neighbour, which tells them apart with certainty whatever the noise. The check is
:func:`dpkit.testing.check_failure_behaviour` over neighbouring pairs at the edges.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.mechanisms._exponential import (
    make_exponential,
    make_permute_and_flip,
    make_report_noisy_max,
)
from dpkit.mechanisms._ladder_mechanism import (
    make_discrete_ladder,
    make_ladder,
    make_sum_in_intervals,
)
from dpkit.testing import EXTREME_FLOATS, check_failure_behaviour
from dpkit.transformations import make_bounded_sum, make_clamp


def scalar_pairs(distance: float) -> list[tuple[float, float]]:
    finite = [x for x in EXTREME_FLOATS if math.isfinite(x)]
    return [(x, x + s) for x in finite for s in (distance, -distance)]


def test_laplace_releases_on_both_sides_of_the_old_grid_limit() -> None:
    """make_laplace(1, 1) released 2^32 - 1 and raised on 2^32."""
    m = dp.make_laplace(1, 1)
    result = check_failure_behaviour(m, [(2.0**32 - 1, 2.0**32)])
    assert result.passed and result.released_pairs == 1


SCALAR_MECHANISMS: dict[str, Any] = {
    "laplace": lambda: dp.make_laplace(1, 1),
    "laplace-coarse": lambda: dp.make_laplace(1, 1, grid_exponent=10),
    "geometric": lambda: dp.make_geometric(1, 1),
    "gaussian": lambda: dp.make_gaussian(1, epsilon=1, delta=1e-6),
    "gaussian-zcdp": lambda: dp.make_gaussian(1, rho=0.5),
    "discrete-gaussian": lambda: dp.make_discrete_gaussian(1, rho=0.5),
    "staircase": lambda: dp.make_staircase(1, 1),
    "ladder": lambda: make_ladder([(0, 1), (1000, 1001)], 1),
    "discrete-ladder": lambda: make_discrete_ladder([0, (2, 3)], 1),
}


@pytest.mark.parametrize("name", sorted(SCALAR_MECHANISMS))
def test_every_scalar_mechanism_fails_alike_on_neighbours_at_the_edges(name: str) -> None:
    m = SCALAR_MECHANISMS[name]()
    result = check_failure_behaviour(m, scalar_pairs(1.0))
    result.raise_if_failed()
    assert result.released_pairs == result.pairs_checked  # every finite edge releases


def test_bounded_sum_pipeline_beyond_2_to_the_53_grid_steps() -> None:
    """The README's clamp → bounded_sum → Laplace pipeline raised once the sum passed 2^53 grid
    steps (5.4 M rows at the bound of 100 by default); a fine grid reaches it in two rows."""
    pipeline = (
        make_clamp((0, 2.0**40))
        >> make_bounded_sum((0, 2.0**40), grid_exponent=-14)
        >> dp.make_laplace(2.0**40, 1)
    )
    small = np.array([2.0**40] * 2)
    bigger = np.append(small, 2.0**40)
    result = check_failure_behaviour(pipeline, [(small, bigger)])
    assert result.passed and result.released_pairs == 1
    assert abs(pipeline(bigger) - 3 * 2.0**40) < 2.0**40 * 60  # and the answer is right


@pytest.mark.parametrize("extra", [math.nan, math.inf, -math.inf, 1e308, -5.0, 3.3])
def test_pipelines_with_one_more_extreme_row(extra: float) -> None:
    """Adding one row (any float) to a table never changes whether the pipeline releases."""
    pipeline = make_clamp((0, 100)) >> make_bounded_sum((0, 100)) >> dp.make_laplace(100, 1)
    base = np.array([12.0, 55.5, 99.0])
    check_failure_behaviour(pipeline, [(base, np.append(base, extra))]).raise_if_failed()
    summed = make_sum_in_intervals([(0, 1), (1000, 1001)], 1)
    check_failure_behaviour(summed, [(base, np.append(base, extra))]).raise_if_failed()


def test_off_grid_vectors_are_decided_by_shape_not_values() -> None:
    """make_laplace(1, 1) released [3.0, 5.0] and raised on [3.0, 5.3]."""
    m = dp.make_laplace(1, 1)
    result = check_failure_behaviour(m, [([3.0, 5.0], [3.0, 5.3])])
    assert result.passed and result.released_pairs == 0  # both refused, by shape
    with_c = dp.make_laplace(1, 1, changed_coordinates=2)
    result = check_failure_behaviour(with_c, [([3.0, 5.0], [3.0, 5.3])])
    assert result.passed and result.released_pairs == 1
    assert with_c.loss == dp.PureDP(1)  # calibrated with the c - 1 rounding steps charged


def test_vector_selection_mechanisms_fail_alike_on_extreme_utilities() -> None:
    finite = [x for x in EXTREME_FLOATS if math.isfinite(x) and abs(x) < 1e300]
    pairs = [(np.array([x, 0.0, 1.0]), np.array([x + 1, 0.0, 1.0])) for x in finite]
    for m in (
        make_exponential(1, 1),
        make_report_noisy_max(1, 1),
        make_permute_and_flip(1, 1),
    ):
        check_failure_behaviour(m, pairs).raise_if_failed()


def test_the_check_flags_a_mechanism_that_refuses_large_values() -> None:
    """The check can fail: the old behaviour, rebuilt, is flagged."""
    inner = dp.make_laplace(1, 1)

    def old_laplace(x: float) -> Any:
        if abs(x) * 2**20 >= 2**52:
            raise dp.InvalidDataError("data", "too large for the output grid")
        return inner(x)

    result = check_failure_behaviour(old_laplace, [(2.0**32 - 1, 2.0**32)])
    assert not result.passed
    with pytest.raises(dp.PrivacyCheckError, match="fail differently"):
        result.raise_if_failed()


def test_the_exact_checker_is_told_the_sensitivity_independently() -> None:
    """Mutant (issue 8 §3): a constructor that ignores Δ and declares a smaller d_in passed
    the exact check, which read Δ from the measurement it was checking."""
    import dataclasses

    from dpkit.testing import check_measurement_exact

    def ignores_sensitivity(sensitivity: float, epsilon: float) -> Any:
        return dp.make_laplace(1, epsilon)  # calibrated for Δ = 1 whatever was asked

    broken = ignores_sensitivity(5, 1)
    assert check_measurement_exact(broken).passed  # self-consistent: passes
    assert not check_measurement_exact(broken, sensitivity=5).passed
    assert check_measurement_exact(dp.make_laplace(5, 1), sensitivity=5).passed
    # the same for a map that understates: d_in honest, map halved
    halved = dataclasses.replace(dp.make_laplace(5, 1), privacy_map=lambda d: dp.PureDP(d / 10))
    assert not check_measurement_exact(halved, sensitivity=5).passed
