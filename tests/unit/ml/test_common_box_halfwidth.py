"""Review: the public row map divides by the declared half-width (upper - lower)/2. Bounds one
subnormal apart, e.g. (0, 5e-324), passed check_box (finite, lower < upper) but their
half-width rounds to 0: every in-range row became 0/0 = NaN, which np.clip keeps and
``rint(NaN).astype(int64)`` turns into -2^63, so one row moved ZᵀZ / the cluster sums by ~2^63
instead of the declared <= 1 per coordinate (the sensitivity argument of every dpkit.ml
estimator assumes mapped rows in [-1, 1]). Such bounds are now refused from public information
before any data is read."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.ml import KMeans, LinearRegression
from dpkit.ml._common import check_box, map_rows


@pytest.mark.parametrize("bounds", [(0.0, 5e-324), (-5e-324, 0.0), (1e-320, 1e-320 + 5e-324)])
def test_the_row_map_never_leaves_the_unit_box(bounds: tuple[float, float]) -> None:
    try:
        box = check_box(bounds, d=1)
    except InvalidParameterError:
        return  # refused from the declared bounds alone: fine
    rows = np.array([[bounds[0]], [bounds[1]], [np.nan], [np.inf], [-np.inf], [1.0]])
    fixed, scaled = map_rows(rows, box, 12)
    assert np.all(np.abs(fixed) <= 2**12)
    assert np.all(np.abs(scaled) <= 1.0)


def test_estimators_refuse_a_zero_half_width_before_reading() -> None:
    class Unreadable:
        shape = (3, 1)

        def __array__(self, *args: object, **kwargs: object) -> np.ndarray:
            raise AssertionError("data read")

    with pytest.raises(InvalidParameterError):
        LinearRegression(rho=1, bounds_X=(0.0, 5e-324), bounds_y=(0, 1)).fit(
            Unreadable(), np.zeros(3)
        )
    with pytest.raises(InvalidParameterError):
        KMeans(2, rho=1, bounds=(0.0, 5e-324)).fit(Unreadable())
