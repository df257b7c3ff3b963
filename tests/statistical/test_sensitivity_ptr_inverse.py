"""Propose-test-release and the inverse sensitivity mechanism: audits on hard neighbours,
a broken variant of each flagged, and the exact level sampler."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

import dpkit.noise._exact as exact_module
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed
from dpkit.sensitivity._data import Bounds, make_statistic, prepare
from dpkit.sensitivity._inverse import make_inverse_sensitivity, sample_levels
from dpkit.sensitivity._ptr import distance_to_instability, make_propose_test_release
from dpkit.testing import audit_samples

SAMPLES = 20_000
REFUSED = -1000.0


def _ptr_pair() -> tuple[np.ndarray, np.ndarray]:
    """Neighbours whose distance to instability is 8 and 7 (the threshold at ε=1, δ=1e-3 is 7)."""
    x = np.array([0.0] * 12 + [50.0] * 17 + [100.0] * 12)
    y = x.copy()
    y[12] = 0.0
    stat, bounds = make_statistic("median"), Bounds.of(0, 100)
    assert distance_to_instability(prepare(x, bounds), stat, bounds, 1.0, 100) == 8
    assert distance_to_instability(prepare(y, bounds), stat, bounds, 1.0, 100) == 7
    return x, y


def _ptr(noisy: bool) -> object:
    return make_propose_test_release(
        "median",
        lower=0,
        upper=100,
        n=41,
        bound=1,
        epsilon_test=1,
        epsilon_release=1,
        delta=Fraction(1, 1000),
        noisy_test=noisy,
    )


def _ptr_samples(m: object, data: np.ndarray) -> np.ndarray:
    results = m.info.release_many(data, SAMPLES)  # type: ignore[attr-defined]
    return np.array([REFUSED if r.refused else r.value for r in results])


def test_ptr_passes_audit_and_refusal_is_a_value() -> None:
    x, y = _ptr_pair()
    m = _ptr(True)
    a, b = _ptr_samples(m, x), _ptr_samples(m, y)
    assert (a == REFUSED).any() and (a != REFUSED).any()
    loss = m.loss  # type: ignore[attr-defined]
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, loss.epsilon, loss.delta).passed


def test_ptr_without_noise_is_flagged() -> None:
    x, y = _ptr_pair()
    m = _ptr(False)
    loss = m.loss  # type: ignore[attr-defined]
    result = audit_samples(_ptr_samples(m, x), _ptr_samples(m, y), loss.epsilon, loss.delta)
    assert not result.passed


HARD = [
    (np.array([0.0, 0.0, 1.0, 1.0, 100.0]), np.array([0.0, 1.0, 1.0, 1.0, 100.0])),
    (np.array([5.0] * 5), np.array([5.0, 5.0, 5.0, 5.0, 100.0])),
    (np.array([0.0, 0.0, 0.0, 100.0, 100.0]), np.array([0.0, 0.0, 100.0, 100.0, 100.0])),
]


@pytest.mark.parametrize(("a", "b"), HARD)
def test_inverse_sensitivity_passes_audit(a: np.ndarray, b: np.ndarray) -> None:
    m = make_inverse_sensitivity("median", lower=0, upper=100, n=5, epsilon=1, grid_exponent=0)
    release = m.info.release_many
    for first, second in ((a, b), (b, a)):
        result = audit_samples(release(first, SAMPLES), release(second, SAMPLES), 1)
        assert result.passed, result


def test_inverse_sensitivity_broken_rate_is_flagged() -> None:
    """Broken variant: the claim ε = 1 for a mechanism run at rate ε instead of ε/2 and with
    ε scaled 4× (as if the path length had sensitivity 1/4)."""
    m = make_inverse_sensitivity("median", lower=0, upper=100, n=5, epsilon=8, grid_exponent=0)
    release = m.info.release_many
    a, b = HARD[2]
    result = audit_samples(release(a, SAMPLES), release(b, SAMPLES), 1)
    assert not result.passed


def test_level_sampler_exact_path_identical() -> None:
    counts = np.array([1, 5, 1000, 3, 2**40], dtype=np.int64)
    levels = np.array([0, 1, 2, 3, 30], dtype=np.int64)

    def draw() -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureRandomnessWarning)
            with insecure_deterministic_seed(9):
                return sample_levels(counts, levels, Fraction(1, 2), 50)

    fast = draw()
    exact_module._FORCE_EXACT = True
    try:
        slow = draw()
    finally:
        exact_module._FORCE_EXACT = False
    assert np.array_equal(fast, slow)
