"""dpkit.ml reads declared bounds one way only: per-feature pairs [(lo, hi), ...] (as
dpkit.analytics writes bounds), one pair (lo, hi) for every feature, or an explicit
{"lower": ..., "upper": ...}. A pair of vectors (lower, upper) used to be read as lower/upper
vectors, so at d = 2 per-feature pairs were silently transposed (issue 21)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.ledger import Ledger
from dpkit.ml import KMeans, LinearRegression, fit_kmeans, fit_linear_regression
from dpkit.ml._common import BOUNDS_FORMS, check_box

pytestmark = pytest.mark.usefixtures("seeded")


class Untouchable:
    """Data that fails the test if anything reads it (its shape is public schema)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise AssertionError("data was read")


@pytest.mark.parametrize(
    ("bounds", "lower", "upper"),
    [
        ([(0, 10), (20, 65)], [0, 20], [10, 65]),  # the case: per feature, not lower/upper
        ([(0, 18), (-5, 65)], [0, -5], [18, 65]),  # how dpkit.analytics writes bounds
        (((0, 18), (-5, 65)), [0, -5], [18, 65]),
        (np.array([[0, 18], [-5, 65]]), [0, -5], [18, 65]),  # an array of shape (d, 2)
        ((-1, 1), [-1, -1], [1, 1]),  # one pair for every feature
        (np.array([-1, 1]), [-1, -1], [1, 1]),
        ({"lower": [0, -5], "upper": [18, 65]}, [0, -5], [18, 65]),  # explicit vectors
        ({"lower": 0, "upper": [18, 65]}, [0, 0], [18, 65]),
        ({"lower": -1, "upper": 1}, [-1, -1], [1, 1]),
        ([(Fraction(1, 2), Decimal("2.5")), (np.int64(3), np.float32(4))], [0.5, 3], [2.5, 4]),
    ],
)
def test_accepted_forms(bounds: Any, lower: list[float], upper: list[float]) -> None:
    box = check_box(bounds, "bounds", d=2)
    assert box.lower.tolist() == lower and box.upper.tolist() == upper


@pytest.mark.parametrize(
    "bounds",
    [
        ([-1, -1, -1], [1, 1, 1]),  # the old (lower, upper) vectors at d = 3: refused, not read
        (np.zeros(3), np.ones(3)),
        np.array([[-1, -1, -1], [1, 1, 1]]),  # shape (2, d)
        5,
        "0,1",
        ("0", "1"),  # strings are not numbers here
        (True, False),
        (0, 1, 2),
        [(0, 1), (2,)],
        [(0, 1), (2, 3, 4)],
        [],
        {"lo": 0, "hi": 1},
        {"lower": [0, 1], "upper": [1, 2, 3]},
        {"lower": "a", "upper": 1},
        (0j, 1j),
    ],
)
def test_other_forms_are_refused_with_the_accepted_ones(bounds: Any) -> None:
    with pytest.raises(InvalidParameterError) as info:
        check_box(bounds, "bounds", d=3)
    assert info.value.parameter == "bounds"
    assert "(lo, hi)" in str(info.value)


def test_vector_pair_refusal_says_how_to_write_it() -> None:
    with pytest.raises(InvalidParameterError, match=r"list\(zip\(lower, upper\)\)"):
        check_box(([-1, -1, -1], [1, 1, 1]), "bounds", d=3)
    assert "{'lower'" in BOUNDS_FORMS


@pytest.mark.parametrize(
    ("bounds", "allowed"),
    [
        ([(0, 1), (1, 1)], "feature 1: lo = 1.0, hi = 1.0"),  # lo == hi
        ([(0, 1), (2, 1)], "feature 1"),
        ([(0, float("nan")), (0, 1)], "finite"),
        ([(0, np.inf), (0, 1)], "finite"),
        ([(0, 1e200), (0, 1)], "1e150"),
        ([(0, 1)] * 3, "2 pairs for 2 features, not 3"),
        ([(0, 1)], "2 pairs for 2 features, not 1"),
        ([(Fraction(10**400), 1)] * 2, "finite"),
    ],
)
def test_bad_values_name_the_feature_and_rule(bounds: Any, allowed: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        check_box(bounds, "bounds_X", d=2)
    assert info.value.parameter == "bounds_X"
    assert allowed in str(info.value)


def test_transposed_pairs_are_clamped_per_feature() -> None:
    """All rows at (15, 30): feature 0 is declared in [0, 10], so the private centre is clamped
    to 10. Read as lower = (0, 10), upper = (20, 65) (the old reading) it was 15."""
    x = np.tile([15.0, 30.0], (2000, 1))
    model = KMeans(1, epsilon=1000, bounds=[(0, 10), (20, 65)], method="lloyd", max_iter=1)
    centre = model.fit(x).cluster_centers_[0]
    assert np.allclose(centre, [10, 30], atol=0.05)


def test_regression_reads_per_feature_pairs() -> None:
    rng = np.random.default_rng(3)  # test data only
    x = np.column_stack([rng.uniform(0, 18, 20_000), rng.uniform(-5, 65, 20_000)])
    y = 1 + 0.5 * x[:, 0] - 0.2 * x[:, 1] + rng.normal(0, 0.1, 20_000)
    model = LinearRegression(
        epsilon=1000,
        bounds_X=[(0, 18), (-5, 65)],
        bounds_y=(-20, 20),
        method="sufficient_statistics",
    ).fit(x, y)
    assert np.allclose(model.coef_, [0.5, -0.2], atol=0.01)


def _session(ledger: Ledger) -> Session:
    rng = np.random.default_rng(4)  # test data only
    df = pd.DataFrame({"u": np.arange(300), "a": rng.uniform(0, 18, 300)})
    df["b"] = rng.uniform(-5, 65, 300)
    df["y"] = df.a - df.b
    ledger.create_budget("t", dp.PureDP(10), privacy_unit="u")
    return Session(df, "u", dp.PureDP(10), ledger=ledger, dataset="t", engine="pandas", max_rows=1)


FITS: dict[str, Callable[[Any], Any]] = {
    "KMeans.bounds": lambda b: KMeans(2, epsilon=1, bounds=b).fit(np.zeros((5, 2))),
    "LinearRegression.bounds_X": lambda b: LinearRegression(
        epsilon=1, bounds_X=b, bounds_y=(-1, 1)
    ).fit(np.zeros((5, 2)), np.zeros(5)),
    "fit_kmeans.bounds": lambda b: fit_kmeans(
        _session(Ledger.open(":memory:")), ["a", "b"], 2, bounds=b, epsilon=1
    ),
    "fit_linear_regression.bounds_X": lambda b: fit_linear_regression(
        _session(Ledger.open(":memory:")),
        ["a", "b"],
        "y",
        bounds_X=b,
        bounds_y=(-70, 20),
        epsilon=1,
    ),
}


@pytest.mark.parametrize("fit", FITS)
def test_every_entry_point_accepts_per_feature_pairs(fit: str) -> None:
    assert FITS[fit]([(0, 18), (-5, 65)]) is not None
    assert FITS[fit]({"lower": [0, -5], "upper": [18, 65]}) is not None


@pytest.mark.parametrize("fit", FITS)
def test_every_entry_point_refuses_a_vector_pair_at_d_3_without_reading(fit: str) -> None:
    with pytest.raises(InvalidParameterError, match="list"):
        FITS[fit](([0, -5, 0], [18, 65, 1]))


@pytest.mark.parametrize("bounds_y", [(0, 1), [(0, 1)], {"lower": 0, "upper": 1}, np.array([0, 1])])
def test_target_bounds_forms(bounds_y: Any) -> None:
    model = LinearRegression(epsilon=1, bounds_X=(0, 1), bounds_y=bounds_y)
    model.fit(np.zeros((5, 1)), np.zeros(5))
    with pytest.raises(InvalidParameterError) as info:
        LinearRegression(epsilon=1, bounds_X=(0, 1), bounds_y=[(0, 1), (0, 1)]).fit(
            Untouchable((5, 1)), Untouchable((5,))
        )
    assert info.value.parameter == "bounds_y"


def test_pairs_against_the_columns_of_x_is_a_schema_error_before_reading() -> None:
    with pytest.raises(InvalidDataError, match="has 2 columns but bounds declares 3"):
        KMeans(2, epsilon=1, bounds=[(0, 1)] * 3).fit(Untouchable((10, 2)))
    with pytest.raises(InvalidDataError, match="has 3 columns but bounds_X declares 2"):
        LinearRegression(epsilon=1, bounds_X=[(0, 1)] * 2, bounds_y=(0, 1)).fit(
            Untouchable((10, 3)), Untouchable((10,))
        )
