"""Audits of smooth-sensitivity releases on hard neighbours, and of their broken variants.

Hard neighbours for the median: x = (0, 0, 1, 1, 100) and y = (0, 1, 1, 1, 100) differ in one
unit; LS(x) = 1 but LS(y) = 0, so the local sensitivity jumps between them.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpkit.core._losses import ApproxDP, PureDP
from dpkit.sensitivity import local_sensitivity
from dpkit.sensitivity._data import Bounds, make_statistic
from dpkit.sensitivity._smooth import (
    SmoothPlan,
    build_smooth_measurement,
    make_smooth_sensitivity,
    plan_smooth,
)
from dpkit.sensitivity._teaching import make_local_laplace_unsafe
from dpkit.testing import audit_samples

X = np.array([0.0, 0.0, 1.0, 1.0, 100.0])
Y = np.array([0.0, 1.0, 1.0, 1.0, 100.0])
SAMPLES = 20_000


def _releases(m: object, data: np.ndarray) -> np.ndarray:
    return m.info.release_many(data, SAMPLES)  # type: ignore[attr-defined,no-any-return]


def _audit(m: object, a: np.ndarray, b: np.ndarray, events: str = "auto") -> object:
    loss = m.loss  # type: ignore[attr-defined]
    delta = loss.delta if isinstance(loss, ApproxDP) else 0
    return audit_samples(
        _releases(m, a),
        _releases(m, b),
        loss.epsilon,
        delta,
        events=events,  # type: ignore[arg-type]
    )


def test_local_sensitivity_laplace_is_flagged() -> None:
    assert local_sensitivity(X, "median", lower=0, upper=100) == 1.0
    assert local_sensitivity(Y, "median", lower=0, upper=100) == 0.0
    m = make_local_laplace_unsafe("median", lower=0, upper=100, n=5, epsilon=1)
    result = _audit(m, X, Y, events="discrete")
    assert not result.passed  # type: ignore[attr-defined]
    assert result.epsilon_lower_bound > 5  # type: ignore[attr-defined]


@pytest.mark.parametrize(("noise", "delta"), [("cauchy", 0), ("laplace", Fraction(1, 10**3))])
@pytest.mark.parametrize(
    ("a", "b"), [(X, Y), (Y, X), (np.array([0, 0, 0, 0, 0.0]), Y * 0 + [0, 0, 0, 0, 100])]
)
def test_smooth_release_passes_audit(
    noise: str, delta: Fraction, a: np.ndarray, b: np.ndarray
) -> None:
    m = make_smooth_sensitivity(
        "median", lower=0, upper=100, n=5, epsilon=1, delta=delta, noise=noise
    )
    result = _audit(m, a, b)
    assert result.passed, result  # type: ignore[attr-defined]


def _broken(noise: str, beta: Fraction) -> object:
    """β far too large for the noise (so S ≈ LS: noise calibrated to local sensitivity), while
    the claim stays ε = 1."""
    stat = make_statistic("median")
    bounds = Bounds.of(0, 100)
    good = plan_smooth(
        Fraction(1), Fraction(1, 1000) if noise == "laplace" else Fraction(0), noise, 4, -43
    )
    broken = SmoothPlan(noise, 4, good.alpha, beta, good.exponent, good.min_scale, good.loss)
    return build_smooth_measurement(stat, bounds, 5, broken)


@pytest.mark.parametrize("noise", ["cauchy", "laplace"])
def test_beta_too_large_is_flagged(noise: str) -> None:
    result = _audit(_broken(noise, Fraction(40)), X, Y)
    assert not result.passed  # type: ignore[attr-defined]


def test_arcsinh_normal_is_offered() -> None:
    """Calibrated since issue 10's follow-up (docs/sensitivity.md §3d)."""
    m = make_smooth_sensitivity("median", lower=0, upper=1, n=5, rho=1, noise="arcsinh_normal")
    assert m.info.zcdp_noise.family == "arcsinh_normal"


def test_claims() -> None:
    m = make_smooth_sensitivity("median", lower=0, upper=1, n=5, epsilon=0.5)
    assert m.loss <= PureDP(Fraction(1, 2))
    m2 = make_smooth_sensitivity(
        "trimmed_mean", trim=0.1, lower=0, upper=1, n=5, epsilon=0.5, delta=1e-6, noise="laplace"
    )
    assert m2.loss <= ApproxDP(Fraction(1, 2), Fraction(1, 10**6))


@pytest.mark.parametrize(
    ("statistic", "kw"), [("trimmed_mean", {"trim": 0.2}), ("range", {}), ("mean", {})]
)
def test_other_statistics_pass_audit(statistic: str, kw: dict[str, float]) -> None:
    m = make_smooth_sensitivity(statistic, lower=0, upper=100, n=5, epsilon=1, **kw)
    for a, b in ((X, Y), (Y, X)):
        assert _audit(m, a, b).passed  # type: ignore[attr-defined]
