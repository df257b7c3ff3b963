"""Statistical privacy audits of dpkit.ml on hard neighbours: one far-away point.

Each estimator is fitted many times on a dataset and on the same dataset plus one point at the
far corner of the declared bounds (the point that pulls a centre, or a coefficient, the most).
The auditor (:mod:`dpkit.testing`) looks for an output event whose probabilities differ by
more than the claimed ε allows. The correct estimators pass; deliberately broken variants — noise
calibrated from the data's own largest norm (the seed's ``2·max||x||``), noise calibrated
without the declared bound, candidates drawn from the data — are refuted by the same audit.
Runs under the ``seeded`` fixture (deterministic, so reproducible).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.mechanisms._exponential import make_exponential
from dpkit.mechanisms._laplace import make_laplace
from dpkit.ml import KMeans, LinearRegression, _common, _kmeans, fit_kmeans
from dpkit.ml._common import Budget
from dpkit.testing import audit_samples, audit_samples_zcdp

pytestmark = pytest.mark.usefixtures("seeded")

N = 800  # releases per side: the broken variants are refuted by a wide margin at this size

CLOSE = np.zeros((20, 1))  # twenty rows at the centre of [-1, 1]
FAR = np.vstack([CLOSE, [[1.0]]])  # plus one row at the far end: a neighbour


def releases(fit: Callable[[Any], float], data: Any, n: int = N) -> np.ndarray:
    return np.array([fit(data) for _ in range(n)], dtype=np.float64)


def lloyd_centre(data: np.ndarray, **kwargs: Any) -> float:
    model = KMeans(1, bounds=(-1, 1), method="lloyd", max_iter=1, **kwargs).fit(data)
    return float(model.cluster_centers_[0, 0])


def lsh_centre(data: np.ndarray, **kwargs: Any) -> float:
    model = KMeans(1, bounds=(-1, 1), method="lsh", max_iter=0, grid_size=64, **kwargs).fit(data)
    return float(model.cluster_centers_[0, 0])


def em_centre(data: np.ndarray, **kwargs: Any) -> float:
    model = KMeans(1, bounds=(-1, 1), method="grid_em", n_candidates=8, **kwargs).fit(data)
    return float(model.cluster_centers_[0, 0])


def regression_slope(data: np.ndarray, **kwargs: Any) -> float:
    model = LinearRegression(bounds_X=(-1, 1), bounds_y=(-1, 1), **kwargs).fit(data, data[:, 0])
    return float(model.coef_[0])


# ----------------------------------------------------------------------------- correct: pass
@pytest.mark.parametrize(
    "fit", [lloyd_centre, lsh_centre, em_centre, regression_slope], ids=lambda f: f.__name__
)
def test_estimators_pass_the_far_point_audit(fit: Callable[..., float]) -> None:
    a = releases(lambda d: fit(d, epsilon=1), CLOSE)
    b = releases(lambda d: fit(d, epsilon=1), FAR)
    result = audit_samples(a, b, claimed_epsilon=1)
    assert result.passed, result


def test_zcdp_lloyd_passes_the_far_point_audit() -> None:
    a = releases(lambda d: lloyd_centre(d, rho=0.5), CLOSE)
    b = releases(lambda d: lloyd_centre(d, rho=0.5), FAR)
    assert audit_samples_zcdp(a, b, claimed_rho=0.5).passed


# ----------------------------------------------------------------------------- broken: refuted
def _broken_noisy_sums_from_data(data_max: Callable[[], float]) -> Callable[..., np.ndarray]:
    def noisy_sums(self: Budget, sums: np.ndarray, share: Fraction, d: int) -> np.ndarray:
        sensitivity = max(data_max(), 1e-3)  # BROKEN: the data's own largest norm
        m = make_laplace(sensitivity, epsilon=share, changed_coordinates=d)
        return np.asarray(m(np.asarray(sums, dtype=np.float64).reshape(-1))).reshape(sums.shape)

    return noisy_sums


def test_lloyd_with_noise_from_the_data_max_norm_is_refuted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    current: list[np.ndarray] = []
    original_map = _common.map_rows

    def spy(array: np.ndarray, box: Any, bits: int = 20) -> tuple[np.ndarray, np.ndarray]:
        out = original_map(array, box, bits)
        current[:] = [out[1]]
        return out

    monkeypatch.setattr(_kmeans, "map_rows", spy)
    monkeypatch.setattr(
        Budget,
        "noisy_sums",
        _broken_noisy_sums_from_data(lambda: float(np.max(np.abs(current[0]), initial=0.0))),
    )
    a = releases(lambda d: lloyd_centre(d, epsilon=1), CLOSE)
    b = releases(lambda d: lloyd_centre(d, epsilon=1), FAR)
    result = audit_samples(a, b, claimed_epsilon=1)
    assert not result.passed
    assert result.epsilon_lower_bound > 2


def test_lloyd_with_noise_ignoring_the_bound_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    def noisy_sums(self: Budget, sums: np.ndarray, share: Fraction, d: int) -> np.ndarray:
        # BROKEN: sensitivity 1 in original units, ignoring that the bounds are (-10, 10)
        m = make_laplace(Fraction(d, 10), epsilon=share, changed_coordinates=d)
        return np.asarray(m(np.asarray(sums, dtype=np.float64).reshape(-1))).reshape(sums.shape)

    monkeypatch.setattr(Budget, "noisy_sums", noisy_sums)

    def fit(data: np.ndarray) -> float:
        model = KMeans(1, epsilon=1, bounds=(-10, 10), method="lloyd", max_iter=1)
        return float(model.fit(data * 10).cluster_centers_[0, 0])

    result = audit_samples(releases(fit, CLOSE), releases(fit, FAR), claimed_epsilon=1)
    assert not result.passed


def seed_cluster_query(data: np.ndarray, epsilon: float) -> float:
    """The seed's sketch (k = 1): candidates drawn from the data, sensitivity 2·max||x||."""
    candidates = np.unique(data[:, 0])  # BROKEN: candidates come from the data
    sensitivity = max(2 * float(np.max(np.abs(data))), 1e-3)  # BROKEN: from the data
    utility = -np.abs(data[:, 0][:, None] - candidates[None, :]).mean(axis=0)
    return float(candidates[make_exponential(epsilon, sensitivity)(utility)])


def test_seed_sketch_with_candidates_from_the_data_is_refuted() -> None:
    a = releases(lambda d: seed_cluster_query(d, 1), CLOSE)
    b = releases(lambda d: seed_cluster_query(d, 1), FAR)
    result = audit_samples(a, b, claimed_epsilon=1)
    assert not result.passed


def test_broken_regression_sensitivity_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Budget.noisy_vector

    def noisy_vector(
        self: Budget, values: np.ndarray, share: Fraction, l1: Fraction, l2: Fraction, c: int
    ) -> np.ndarray:
        # BROKEN: a hundredth of the sensitivity the declared bounds give
        return original(self, values, share, l1 / 100, l2 / 100, c)

    monkeypatch.setattr(Budget, "noisy_vector", noisy_vector)
    a = releases(lambda d: regression_slope(d, epsilon=1), CLOSE)
    b = releases(lambda d: regression_slope(d, epsilon=1), FAR)
    assert not audit_samples(a, b, claimed_epsilon=1).passed


# ----------------------------------------------------------------------------- Session path
# The same far-point audit for k-means fitted on a Session's columns (pandas engine, one unit =
# one person). The neighbour adds one person with ten rows at the far corner; the Session's
# contribution bound (max_rows=1) keeps one. The broken variant runs the engine without that
# bound while the noise stays calibrated for it: noise calibrated without the bound.
SESSION_N = 200
CLOSE_TABLE = pd.DataFrame({"u": np.arange(20), "x": np.zeros(20)})
FAR_TABLE = pd.concat(
    [CLOSE_TABLE, pd.DataFrame({"u": [99] * 10, "x": [1.0] * 10})], ignore_index=True
)


def session_centre(frame: pd.DataFrame, method: str, broken: bool = False) -> float:
    session = Session(frame, "u", dp.PureDP(1), engine="pandas", max_rows=1)
    if broken:
        run = session.engine.run
        session.engine.run = lambda plan: run(replace(plan, max_rows=None))  # type: ignore[method-assign]
    options: dict[str, Any] = {
        "lloyd": {"max_iter": 1},
        "lsh": {"max_iter": 0, "grid_size": 64},
        "grid_em": {"n_candidates": 8},
    }[method]
    model = fit_kmeans(session, ["x"], 1, bounds=(-1, 1), epsilon=1, method=method, **options)
    return float(model.cluster_centers_[0, 0])


@pytest.mark.slow  # ~400 Session fits
@pytest.mark.parametrize("method", ["lloyd", "grid_em"])
def test_session_kmeans_passes_the_far_point_audit(method: str) -> None:
    a = releases(lambda f: session_centre(f, method), CLOSE_TABLE, SESSION_N)
    b = releases(lambda f: session_centre(f, method), FAR_TABLE, SESSION_N)
    result = audit_samples(a, b, claimed_epsilon=1)
    assert result.passed, result


@pytest.mark.slow  # ~400 Session fits
@pytest.mark.parametrize("method", ["lloyd"])
def test_session_kmeans_without_the_contribution_bound_is_refuted(method: str) -> None:
    """(grid_em's truncated utility hides a ten-row unit at this size: its broken variants are
    the in-memory seed sketch above.)"""
    a = releases(lambda f: session_centre(f, method, broken=True), CLOSE_TABLE, SESSION_N)
    b = releases(lambda f: session_centre(f, method, broken=True), FAR_TABLE, SESSION_N)
    result = audit_samples(a, b, claimed_epsilon=1)
    assert not result.passed, result
