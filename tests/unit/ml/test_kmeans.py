"""dpkit.ml.KMeans: parameters are refused before data is read, edges always release, the
ledger is charged before reading, and the scikit-learn protocol works."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone

from dpkit.core._losses import ZCDP, PureDP
from dpkit.errors import BudgetExceededError, DPError, InvalidDataError, InvalidParameterError
from dpkit.ledger import Ledger
from dpkit.ml import KMeans
from dpkit.ml._kmeans import objective

pytestmark = pytest.mark.usefixtures("seeded")

METHODS = ["lsh", "lloyd", "grid_em"]


class Untouchable:
    """Data that fails the test if anything reads it (shape is public schema)."""

    shape = (10, 2)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise AssertionError("data was read")


def mixture(n: int = 3000, d: int = 2, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)  # test data only; dpkit draws its noise from dpkit.noise
    centres = rng.uniform(-0.7, 0.7, size=(k, d))
    labels = rng.integers(0, k, size=n)
    return centres[labels] + rng.normal(0, 0.05, size=(n, d)), centres


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"n_clusters": 0, "epsilon": 1, "bounds": (-1, 1)}, "n_clusters"),
        ({"n_clusters": 2.5, "epsilon": 1, "bounds": (-1, 1)}, "n_clusters"),
        ({"n_clusters": 2, "epsilon": 1}, "bounds"),
        ({"n_clusters": 2, "epsilon": 1, "bounds": (-1, np.nan)}, "bounds"),
        ({"n_clusters": 2, "epsilon": 1, "bounds": (1, -1)}, "bounds"),
        ({"n_clusters": 2, "bounds": (-1, 1)}, "epsilon"),
        ({"n_clusters": 2, "epsilon": 1, "rho": 1, "bounds": (-1, 1)}, "epsilon"),
        ({"n_clusters": 2, "epsilon": -1, "bounds": (-1, 1)}, "epsilon"),
        ({"n_clusters": 2, "epsilon": float("nan"), "bounds": (-1, 1)}, "epsilon"),
        ({"n_clusters": 2, "epsilon": 1, "bounds": (float("nan"), 1)}, "bounds"),
        ({"n_clusters": 2, "epsilon": 1, "bounds": (-1, 1), "method": "x"}, "method"),
        ({"n_clusters": 2, "epsilon": 1, "bounds": (-1, 1), "max_iter": -1}, "max_iter"),
        ({"n_clusters": 5000, "epsilon": 0.1, "bounds": (-1, 1)}, "n_clusters"),
        ({"n_clusters": 3, "epsilon": 1, "bounds": (-1, 1), "coreset_share": 0}, "coreset_share"),
        (
            {
                "n_clusters": 100,
                "epsilon": 1,
                "bounds": (-1, 1),
                "method": "grid_em",
                "n_candidates": 16,
            },
            "n_clusters",
        ),
    ],
)
def test_bad_parameters_are_refused_before_reading_data(
    kwargs: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        KMeans(**kwargs).fit(Untouchable())
    assert info.value.parameter == parameter


def test_grid_em_refuses_high_dimension_before_reading() -> None:
    class Wide(Untouchable):
        shape = (10, 20)

    with pytest.raises(InvalidParameterError, match="method='lsh'"):
        KMeans(2, epsilon=1, bounds=(-1, 1), method="grid_em").fit(Wide())


@pytest.mark.parametrize("bad", [np.zeros((4, 2)), np.zeros(4), Untouchable(), np.zeros((2, 2, 2))])
def test_wrong_schema_is_a_data_error(bad: Any) -> None:
    with pytest.raises(InvalidDataError):
        KMeans(2, epsilon=1, bounds=[(-1, 1)] * 3).fit(bad)


def test_text_in_a_list_is_a_missing_value_not_an_error() -> None:
    """A Python list declares no dtype: its values are read one by one, and text is NaN (the
    midpoint), so one person's value never makes a fit fail (it did, after the charge)."""
    model = KMeans(2, epsilon=1, bounds=[(-1, 1)] * 3).fit([["a", "b", "c"]])
    assert model.cluster_centers_.shape == (2, 3)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("budget", [{"epsilon": 1}, {"rho": 0.5}])
def test_finds_separated_clusters(method: str, budget: dict[str, float]) -> None:
    x, centres = mixture()
    model = KMeans(3, bounds=(-1, 1), method=method, **budget).fit(x)
    assert model.cluster_centers_.shape == (3, 2)
    base = objective(x, centres)
    ratio = objective(x, model.cluster_centers_) / base
    assert ratio < (30 if method == "lloyd" else 2.0)  # DPLloyd from a blind start can stall
    assert model.predict(x).shape == (3000,)
    assert model.transform(x).shape == (3000, 3)
    assert np.all(np.abs(model.cluster_centers_) <= 1)


@pytest.mark.parametrize("method", METHODS)
def test_privacy_loss_reported(method: str) -> None:
    x, _ = mixture(300)
    assert KMeans(3, epsilon=0.5, bounds=(-1, 1), method=method).fit(x).privacy_loss_ == PureDP(
        Fraction(1, 2)
    )
    loss = KMeans(3, rho=0.5, bounds=(-1, 1), method=method).fit(x).privacy_loss_
    assert isinstance(loss, ZCDP) and loss.rho <= Fraction(1, 2)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "data",
    [
        np.zeros((0, 2)),
        np.zeros((1, 2)),
        np.full((500, 2), 0.3),
        np.array([[np.nan, 0.5], [np.inf, -np.inf], [1e300, -1e300], [0.2, 0.2]]),
    ],
    ids=["empty", "one", "identical", "nan-inf-huge"],
)
def test_edges_release(method: str, data: np.ndarray) -> None:
    model = KMeans(4, epsilon=1, bounds=(-1, 1), method=method).fit(data)
    assert np.all(np.isfinite(model.cluster_centers_))
    assert np.all(np.abs(model.cluster_centers_) <= 1)


def test_ledger_is_charged_before_reading() -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("pts", PureDP(1))
    x, _ = mixture(200)
    KMeans(3, epsilon=0.6, bounds=(-1, 1)).fit(x, ledger=ledger, dataset="pts")
    assert ledger.spent("pts") == PureDP(Fraction(3, 5))
    with pytest.raises(BudgetExceededError):
        KMeans(3, epsilon=0.6, bounds=[(-1, 1), (-1, 1)]).fit(
            Untouchable(), ledger=ledger, dataset="pts"
        )
    assert ledger.spent("pts") == PureDP(Fraction(3, 5))


def test_ledger_needs_dataset_and_an_existing_budget() -> None:
    ledger = Ledger.open(":memory:")
    with pytest.raises(InvalidParameterError):
        KMeans(2, epsilon=1, bounds=(-1, 1)).fit(np.zeros((3, 2)), ledger=ledger)
    with pytest.raises(DPError):
        KMeans(2, epsilon=1, bounds=(-1, 1)).fit(np.zeros((3, 2)), ledger=ledger, dataset="none")
    assert ledger.budgets() == []


def test_sklearn_protocol() -> None:
    model = KMeans(3, epsilon=1, bounds=(-1, 1))
    assert model.get_params()["n_clusters"] == 3
    model.set_params(n_clusters=2)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "cluster_centers_")
    x, _ = mixture(300)
    assert copy.fit_predict(x).shape == (300,)
    assert copy.score(x) <= 0


def test_per_feature_bounds_are_in_original_units() -> None:
    x, _ = mixture(2000)
    shifted = x * [10, 1] + [100, -5]
    model = KMeans(3, epsilon=2, bounds=[(90, 110), (-6, -4)]).fit(shifted)
    assert np.all(model.cluster_centers_[:, 0] >= 90) and np.all(
        model.cluster_centers_[:, 0] <= 110
    )
