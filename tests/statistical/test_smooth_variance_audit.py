"""Audits of the smooth-sensitivity variance release on adversarial neighbours.

x = (50, 50, 50, 50, 50) and y = (50, 50, 50, 50, 100) with bounds [0, 100]: one value moves to
the bound (an outlier at U), the variance jumps from 0 to 400 = LS(x). The release passes the
audit for the pure-ε (Cauchy) and a zCDP family, both directions; the broken variant whose
A^(k) keeps only the moves towards the mean (forgetting a value can move to the far bound)
gives S = 0 on x and is flagged.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.sensitivity import _variance as variance_module
from dpkit.sensitivity import make_smooth_sensitivity
from dpkit.testing import audit_samples, audit_samples_zcdp

X = np.array([50.0, 50, 50, 50, 50])
Y = np.array([50.0, 50, 50, 50, 100])
SAMPLES = 20_000


def _samples(m: object, data: np.ndarray) -> np.ndarray:
    return np.asarray(m.info.release_many(data, SAMPLES))  # type: ignore[attr-defined]


def test_pure_release_passes_audit(seeded: None) -> None:
    m = make_smooth_sensitivity("variance", lower=0, upper=100, n=5, epsilon=1)
    a, b = _samples(m, X), _samples(m, Y)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1).passed


def test_zcdp_release_passes_audit(seeded: None) -> None:
    m = make_smooth_sensitivity(
        "variance",
        lower=0,
        upper=100,
        n=5,
        rho=0.5,
        noise="uniform_log_normal",
        grid_exponent=-10,
    )
    rho = m.loss.rho  # type: ignore[attr-defined]
    a, b = _samples(m, X), _samples(m, Y)
    for first, second in ((a, b), (b, a)):
        assert audit_samples_zcdp(first, second, rho).passed


def test_wrong_ak_is_flagged(seeded: None, monkeypatch: pytest.MonkeyPatch) -> None:
    original = variance_module.variance_ak_scaled

    def shrink_only(j: np.ndarray, m_top: int, **_: object) -> np.ndarray:
        return original(j, m_top, broken_shrink_only=True)

    monkeypatch.setattr(variance_module, "variance_ak_scaled", shrink_only)
    m = make_smooth_sensitivity("variance", lower=0, upper=100, n=5, epsilon=1)
    a, b = _samples(m, X), _samples(m, Y)
    assert not (audit_samples(a, b, 1).passed and audit_samples(b, a, 1).passed)
