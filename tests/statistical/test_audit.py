"""dpkit.testing audits: the statistical auditor refutes false claims and passes true ones.

Sampling tests run under the ``seeded`` fixture (deterministic, insecure randomness), so their
outcome is reproducible. CI sizes are ~100k releases per side; 2M-release versions are marked
``slow``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._framework import Measurement, make_postprocess
from dpkit.core._losses import ZCDP, PureDP
from dpkit.errors import InvalidParameterError, PrivacyCheckError
from dpkit.testing import AuditResult, audit_measurement, audit_samples, audit_samples_zcdp

pytestmark = pytest.mark.usefixtures("seeded")

CI_SAMPLES = 100_000
BROKEN_SAMPLES = 200_000
SLOW_SAMPLES = 2_000_000


def claiming(measurement: Measurement[Any], loss: Callable[[Fraction], Any]) -> Measurement[Any]:
    return dataclasses.replace(measurement, privacy_map=loss)


# ----------------------------------------------------------------------- false claims are refuted
def test_laplace_with_half_the_noise_is_refuted() -> None:
    broken = claiming(dp.make_laplace(1, 2), lambda d: PureDP(d))  # real ε = 2, claims 1
    result = audit_measurement(broken, 0.0, 1.0, BROKEN_SAMPLES)
    assert not result.passed
    assert result.epsilon_lower_bound > 1.5
    with pytest.raises(PrivacyCheckError, match="refutes the claim ε=1"):
        result.raise_if_failed()


def test_geometric_realising_twice_its_claim_is_refuted() -> None:
    broken = claiming(dp.make_geometric(1, 1), lambda d: PureDP(d / 2))
    result = audit_measurement(broken, 0, 1, BROKEN_SAMPLES)
    assert not result.passed
    assert result.epsilon_lower_bound > 0.75


def test_gaussian_zcdp_claim_of_half_rho_is_refuted() -> None:
    broken = claiming(dp.make_gaussian(1, rho=0.5), lambda d: ZCDP(d * d / 4))
    result = audit_measurement(broken, 0.0, 1.0, BROKEN_SAMPLES)
    assert not result.passed
    assert result.rho_lower_bound is not None and result.rho_lower_bound > 0.25


def test_gaussian_approx_claim_ignoring_delta_is_refuted() -> None:
    """A Gaussian calibrated for (1, 1e-6) claimed as pure 0.2-DP: its tails give it away."""
    broken = claiming(dp.make_gaussian(1, epsilon=1, delta=1e-6), lambda d: PureDP(d / 5))
    assert not audit_measurement(broken, 0.0, 1.0, BROKEN_SAMPLES).passed


# ----------------------------------------------------------------------- true claims pass
@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, 1), (1, 0.5), (3, 2), (0.25, 1)])
def test_laplace_passes(sensitivity: float, epsilon: float) -> None:
    m = dp.make_laplace(sensitivity, epsilon)
    result = audit_measurement(m, 0.0, float(sensitivity), CI_SAMPLES).raise_if_failed()
    assert result.epsilon_lower_bound > 0.7 * epsilon  # the audit is not vacuous


@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, 1), (2, 0.5), (1, 2)])
def test_geometric_passes(sensitivity: int, epsilon: float) -> None:
    m = dp.make_geometric(sensitivity, epsilon)
    result = audit_measurement(m, 0, sensitivity, CI_SAMPLES).raise_if_failed()
    assert result.epsilon_lower_bound > 0.7 * epsilon


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sensitivity": 1, "epsilon": 1, "delta": 1e-6},
        {"sensitivity": 2, "epsilon": 0.5, "delta": 1e-5, "calibration": "classic"},
        {"sensitivity": 1, "rho": 0.5},
        {"sensitivity": 0.5, "rho": 0.1},
    ],
)
def test_gaussian_passes(kwargs: dict[str, Any]) -> None:
    m = dp.make_gaussian(**kwargs)
    audit_measurement(m, 0.0, float(kwargs["sensitivity"]), CI_SAMPLES).raise_if_failed()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sensitivity": 1, "epsilon": 1, "delta": 1e-6},
        {"sensitivity": 1, "rho": Fraction(1, 8)},
        {"sensitivity": 3, "rho": 2},
    ],
)
def test_discrete_gaussian_passes(kwargs: dict[str, Any]) -> None:
    m = dp.make_discrete_gaussian(**kwargs)
    audit_measurement(m, 0, int(kwargs["sensitivity"]), CI_SAMPLES).raise_if_failed()


@pytest.mark.slow
@pytest.mark.parametrize(
    "make",
    [
        lambda: dp.make_laplace(1, 1),
        lambda: dp.make_geometric(1, 0.5),
        lambda: dp.make_gaussian(1, epsilon=1, delta=1e-6),
        lambda: dp.make_gaussian(1, rho=0.5),
        lambda: dp.make_discrete_gaussian(1, rho=0.5),
    ],
)
def test_mechanisms_pass_large_audits(make: Callable[[], Measurement[Any]]) -> None:
    m = make()
    integer = m.name in ("geometric", "discrete_gaussian")
    result = audit_measurement(m, 0 if integer else 0.0, 1 if integer else 1.0, SLOW_SAMPLES)
    result.raise_if_failed()


@pytest.mark.slow
def test_laplace_claiming_ninety_percent_is_refuted_at_scale() -> None:
    broken = claiming(dp.make_laplace(1, 1), lambda d: PureDP(d * Fraction(9, 10)))
    assert not audit_measurement(broken, 0.0, 1.0, SLOW_SAMPLES).passed


# ----------------------------------------------------------------------- audit_samples directly
def two_point(rng: np.random.Generator, p: float, n: int) -> np.ndarray:
    return (rng.random(n) < p).astype(np.int64)


def test_randomized_response_samples() -> None:
    rng = np.random.default_rng(1)
    keep = math.e / (1 + math.e)  # ε = 1
    a, b = two_point(rng, keep, 100_000), two_point(rng, 1 - keep, 100_000)
    assert audit_samples(a, b, 1).passed
    refuted = audit_samples(a, b, 0.8)
    assert not refuted.passed
    assert "discrete" in refuted.event


def test_delta_absorbs_a_rare_disclosing_output() -> None:
    """With probability 1% input a releases a value input b never does: (0, 0.01)-DP."""
    rng = np.random.default_rng(2)
    n = 100_000
    a = np.where(rng.random(n) < 0.01, 99.0, rng.laplace(size=n))
    b = rng.laplace(size=n)
    assert not audit_samples(a, b, 1).passed
    assert audit_samples(a, b, 0.05, claimed_delta=0.02).passed
    assert not audit_samples(a, b, 0.05, claimed_delta=0.002).passed


def test_zcdp_audit_of_gaussian_samples() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 100_000), rng.normal(1, 1, 100_000)  # ρ = 1/2
    result = audit_samples_zcdp(a, b, 0.5)
    assert result.passed and result.rho_lower_bound is not None
    assert result.rho_lower_bound > 0.2
    assert not audit_samples_zcdp(a, b, 0.1).passed


def test_identical_distributions_certify_nothing() -> None:
    rng = np.random.default_rng(4)
    result = audit_samples(rng.normal(size=50_000), rng.normal(size=50_000), 0.05)
    assert result.passed
    assert result.epsilon_lower_bound < 0.05


def test_the_bound_is_valid_at_its_confidence_when_the_claim_is_tight() -> None:
    """A correct, tight claim (Laplace at its exact ε) fails at most ~(1 - confidence) of audits,
    although every audit looks at ~1600 events: selection and testing use different halves."""
    rng = np.random.default_rng(5)
    confidence, runs, n = 0.8, 150, 4_000
    failures = 0
    for _ in range(runs):
        a, b = rng.laplace(0, 1, n), rng.laplace(1, 1, n)
        failures += not audit_samples(a, b, 1, confidence=confidence).passed
    bound = (1 - confidence) + 3 * math.sqrt(confidence * (1 - confidence) / runs)
    assert failures / runs <= bound


def test_audit_result_reports_its_event_and_counts() -> None:
    rng = np.random.default_rng(6)
    a, b = rng.laplace(0, 0.5, 20_000), rng.laplace(1, 0.5, 20_000)
    result = audit_samples(a, b, 1)
    assert isinstance(result, AuditResult)
    k_p, n_p, k_q, n_q = result.counts
    assert n_p == n_q == 10_000 and k_p > k_q
    assert "x" in result.event
    assert result.confidence == 0.999
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.passed = True  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"samples_a": np.zeros((10, 10))}, "samples_a"),
        ({"samples_b": np.zeros(5)}, "samples_b"),
        ({"samples_a": np.array([np.nan] * 100)}, "samples_a"),
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": 0.1}, "confidence"),
        ({"events": "intervals"}, "events"),
        ({"claimed_epsilon": -1}, "epsilon"),
    ],
)
def test_audit_samples_validates_arguments(kwargs: dict[str, Any], parameter: str) -> None:
    arguments: dict[str, Any] = {
        "samples_a": np.arange(100.0),
        "samples_b": np.arange(100.0),
        "claimed_epsilon": 1,
    }
    arguments.update(kwargs)
    with pytest.raises(InvalidParameterError) as info:
        audit_samples(**arguments)
    assert info.value.parameter == parameter


# ----------------------------------------------------------------------- audit_measurement paths
def test_non_vectorised_measurements_are_called_in_a_loop() -> None:
    post = make_postprocess(dp.make_laplace(1, 1), lambda v: 2 * v)  # noise=None: loop
    assert post.noise is None
    result = audit_measurement(post, 0.0, 1.0, 2_000)
    assert result.passed
    assert sum(result.counts[1::2]) == 2_000


def test_a_refused_tiled_call_falls_back_to_single_releases() -> None:
    m = dp.make_laplace(0.1, 1)  # 0.1 is off the grid: a vector of 0.1s is refused, a scalar not
    result = audit_measurement(m, 0.0, 0.1, 2_000)
    assert result.passed
    assert sum(result.counts[1::2]) == 2_000


def test_statistic_reduces_vector_releases() -> None:
    m = dp.make_geometric(1, 1)
    result = audit_measurement(
        m, np.array([0, 5]), np.array([1, 5]), 2_000, statistic=lambda v: float(v[0])
    )
    assert result.passed


def test_audit_measurement_validates_arguments() -> None:
    m = dp.make_laplace(1, 1)
    with pytest.raises(InvalidParameterError) as info:
        audit_measurement(m, 0.0, 1.0, 10)
    assert info.value.parameter == "n_samples"
    with pytest.raises(InvalidParameterError) as info:
        audit_measurement(m, np.array([0.0, 0.0]), np.array([1.0, 0.0]), 100, vectorised=True)
    assert info.value.parameter == "vectorised"
