"""An exception is an output: neighbouring datasets either both fit or both raise the same
error, for every estimator and method, on the edge cases (extreme values, NaN, all-identical
points, empty clusters, a singular XᵀX, the empty dataset)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dpkit.ml import KMeans, LinearRegression

pytestmark = pytest.mark.usefixtures("seeded")

BASE = np.array([[0.1, 0.2], [0.1, 0.2], [-0.5, 0.4]])
IDENTICAL = np.full((50, 2), 0.25)
EXTRA_ROWS = {
    "far": [1.0, 1.0],
    "huge": [1e308, -1e308],
    "inf": [np.inf, -np.inf],
    "nan": [np.nan, np.nan],
    "half-nan": [np.nan, 0.3],
    "same": [0.25, 0.25],
}
BASES = {"base": BASE, "identical": IDENTICAL, "empty": np.zeros((0, 2))}

PAIRS = [
    pytest.param(base, np.vstack([base, [row]]), id=f"{b}+{r}")
    for b, base in BASES.items()
    for r, row in EXTRA_ROWS.items()
]


def outcome(fit: Callable[[np.ndarray], Any], data: np.ndarray) -> tuple[str, str]:
    try:
        fit(data)
    except Exception as error:
        return type(error).__name__, str(error)
    return "released", ""


KMEANS = {
    "lsh": {"method": "lsh"},
    "lloyd": {"method": "lloyd"},
    "grid_em": {"method": "grid_em"},
    "lsh-zcdp": {"method": "lsh", "rho": 0.5, "epsilon": None},
    "many-clusters": {"method": "lsh", "n_clusters": 40},  # more clusters than points
    "bad-k": {"n_clusters": 0},  # invalid: both must raise the same error
}


@pytest.mark.parametrize("config", list(KMEANS), ids=list(KMEANS))
@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_kmeans_neighbours_share_the_outcome(config: str, a: np.ndarray, b: np.ndarray) -> None:
    kwargs: dict[str, Any] = {"n_clusters": 3, "epsilon": 1, "bounds": (-1, 1)}
    kwargs.update(KMEANS[config])

    def fit(data: np.ndarray) -> Any:
        return KMeans(**kwargs).fit(data)

    first, second = outcome(fit, a), outcome(fit, b)
    assert first == second
    if config != "bad-k":
        assert first == ("released", "")


@pytest.mark.parametrize("method", ["adassp", "sufficient_statistics"])
@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_regression_neighbours_share_the_outcome(method: str, a: np.ndarray, b: np.ndarray) -> None:
    def fit(data: np.ndarray) -> Any:
        return LinearRegression(epsilon=1, bounds_X=(-1, 1), bounds_y=(-1, 1), method=method).fit(
            data[:, :1], data[:, 1]
        )

    assert outcome(fit, a) == outcome(fit, b) == ("released", "")
