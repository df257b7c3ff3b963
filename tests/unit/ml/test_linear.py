"""dpkit.ml.LinearRegression: accuracy, parameters refused before reading, edges release,
ledger, approximate confidence intervals."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone

from dpkit.core._losses import ZCDP, PureDP
from dpkit.errors import BudgetExceededError, InvalidDataError, InvalidParameterError
from dpkit.ledger import Ledger
from dpkit.ml import LinearRegression

pytestmark = pytest.mark.usefixtures("seeded")


class Untouchable:
    shape = (10, 3)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise AssertionError("data was read")


def regression(n: int, d: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)  # test data only
    x = rng.uniform(-1, 1, size=(n, d))
    w = np.linspace(-0.5, 0.5, d)
    return x, x @ w + 0.2 + rng.normal(0, 0.1, n), w


@pytest.mark.parametrize("method", ["adassp", "sufficient_statistics"])
@pytest.mark.parametrize("budget", [{"epsilon": 1}, {"rho": 0.5}])
def test_recovers_coefficients(method: str, budget: dict[str, float]) -> None:
    x, y, w = regression(50_000)
    model = LinearRegression(bounds_X=(-1, 1), bounds_y=(-2, 2), method=method, **budget).fit(x, y)
    assert np.allclose(model.coef_, w, atol=0.03)
    assert abs(model.intercept_ - 0.2) < 0.03
    assert model.predict(x).shape == (50_000,)
    loss = model.privacy_loss_
    assert loss == (PureDP(1) if "epsilon" in budget else ZCDP(Fraction(1, 2)))


def test_confidence_intervals_cover_at_large_n() -> None:
    x, y, w = regression(100_000)
    model = LinearRegression(rho=1, bounds_X=(-1, 1), bounds_y=(-2, 2)).fit(x, y)
    assert model.coef_ci_ is not None
    assert np.all(model.coef_ci_[:, 0] <= w) and np.all(w <= model.coef_ci_[:, 1])
    assert np.all(model.coef_ci_[:, 1] - model.coef_ci_[:, 0] < 0.05)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"epsilon": 1, "bounds_y": (0, 1)}, "bounds_X"),
        ({"epsilon": 1, "bounds_X": (0, 1)}, "bounds_y"),
        ({"bounds_X": (0, 1), "bounds_y": (0, 1)}, "epsilon"),
        ({"epsilon": 1, "bounds_X": (0, 1), "bounds_y": (0, 1), "method": "ols"}, "method"),
        ({"epsilon": 1, "bounds_X": (0, np.inf), "bounds_y": (0, 1)}, "bounds_X"),
        ({"epsilon": 1, "bounds_X": (0, 1), "bounds_y": (0, 1), "confidence": 1}, "confidence"),
    ],
)
def test_bad_parameters_are_refused_before_reading(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        LinearRegression(**kwargs).fit(Untouchable(), Untouchable())
    assert info.value.parameter == parameter


def test_wrong_number_of_columns() -> None:
    with pytest.raises(InvalidDataError):
        LinearRegression(epsilon=1, bounds_X=[(0, 1), (0, 1)], bounds_y=(0, 1)).fit(
            Untouchable(), np.zeros(10)
        )


@pytest.mark.parametrize("method", ["adassp", "sufficient_statistics"])
@pytest.mark.parametrize(
    ("x", "y"),
    [
        (np.zeros((0, 3)), np.zeros(0)),
        (np.ones((200, 3)), np.ones(200)),  # singular XᵀX
        (np.array([[np.nan, 1, 2], [np.inf, 0, 0], [1e300, 0, 0]]), np.array([np.nan, 1e9, 0])),
    ],
    ids=["empty", "singular", "nan-inf"],
)
def test_edges_release(method: str, x: np.ndarray, y: np.ndarray) -> None:
    model = LinearRegression(epsilon=1, bounds_X=(-1, 1), bounds_y=(-1, 1), method=method).fit(x, y)
    assert np.all(np.isfinite(model.coef_)) and np.isfinite(model.intercept_)


def test_ledger_is_charged_before_reading() -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("reg", PureDP(1))
    x, y, _ = regression(500)
    LinearRegression(epsilon=0.7, bounds_X=(-1, 1), bounds_y=(-2, 2)).fit(
        x, y, ledger=ledger, dataset="reg"
    )
    with pytest.raises(BudgetExceededError):
        LinearRegression(epsilon=0.7, bounds_X=(-1, 1), bounds_y=(-2, 2)).fit(
            Untouchable(), np.zeros(10), ledger=ledger, dataset="reg"
        )
    assert ledger.spent("reg") == PureDP(Fraction(7, 10))


def test_no_intercept_and_sklearn_protocol() -> None:
    x, y, w = regression(50_000)
    model = LinearRegression(rho=1, bounds_X=(-1, 1), bounds_y=(-2, 2), fit_intercept=False)
    fitted = clone(model).fit(x, y - 0.2)
    assert fitted.intercept_ == 0.0 and fitted.coef_ci_ is None
    assert np.allclose(fitted.coef_, w, atol=0.03)
    assert fitted.score(x, y - 0.2) > 0.9
