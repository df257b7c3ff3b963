"""The centre-of-attention aggregator (dpkit.sensitivity._centre): audits on hard neighbours.

x = (0, 0, 100, 100) and y = (0, 0, 0, 100) differ in one block value; the 3/4 quantile jumps
from 100 to 0, so the clipped interval collapses on y. The broken variant clips to the
*non-private* empirical interquartile range; the auditor must flag it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit.core._losses import PureDP
from dpkit.errors import InvalidParameterError
from dpkit.sensitivity._centre import make_centre_of_attention
from dpkit.sensitivity._sample_aggregate import make_sample_and_aggregate
from dpkit.testing import audit_samples

SAMPLES = 10_000
X = np.array([0.0, 0.0, 100.0, 100.0])
Y = np.array([0.0, 0.0, 0.0, 100.0])
Z = np.array([40.0, 50.0, 50.0, 60.0])
W = np.array([40.0, 50.0, 100.0, 60.0])


def _audit(m: object, a: np.ndarray, b: np.ndarray) -> object:
    many = m.info.release_many  # type: ignore[attr-defined]
    eps = m.loss.epsilon  # type: ignore[attr-defined]
    return audit_samples(many(a, SAMPLES), many(b, SAMPLES), eps)


@pytest.mark.parametrize(("a", "b"), [(X, Y), (Y, X), (Z, W)])
def test_centre_passes_audit(a: np.ndarray, b: np.ndarray) -> None:
    m = make_centre_of_attention(m=4, lower=0, upper=100, epsilon=1)
    assert m.loss <= PureDP(1)
    assert _audit(m, a, b).passed  # type: ignore[attr-defined]


def _true_iqr(values: np.ndarray) -> tuple[float, float]:
    s = np.sort(values)
    return float(s[0]), float(s[math.ceil(0.75 * s.size) - 1])


def test_non_private_interval_is_flagged() -> None:
    m = make_centre_of_attention(m=4, lower=0, upper=100, epsilon=1, interval=_true_iqr)
    assert not _audit(m, X, Y).passed  # type: ignore[attr-defined]


def test_accuracy_and_robustness() -> None:
    values = np.concatenate([np.full(995, 3.0), np.full(5, 1e6)])  # five wild blocks
    m = make_centre_of_attention(m=1000, lower=-1e6, upper=1e6, epsilon=1)
    out = m.info.release_many(values, 50)
    assert np.median(np.abs(out - 3.0)) < 0.1


def test_parameter_errors_and_bad_values() -> None:
    with pytest.raises(InvalidParameterError):
        make_centre_of_attention(m=1, lower=0, upper=1, epsilon=1)
    with pytest.raises(InvalidParameterError):
        make_centre_of_attention(m=4, lower=0, upper=1, epsilon=1, coverage=0.5)
    m = make_centre_of_attention(m=4, lower=0, upper=1, epsilon=1)
    assert 0 <= m(np.array([np.nan, np.inf, -np.inf, 1e308])) <= 1


def test_in_sample_and_aggregate() -> None:
    n = 10_000  # m = 1000 blocks: enough for the ε/4 quartiles to find the bulk
    x = np.full(n, 5.0)
    m = make_sample_and_aggregate(
        np.mean,
        m=1000,
        n_range=(n, n),
        output_shape=1,
        output_range=(-1000, 1000),
        epsilon=1,
        aggregator="centre_of_attention",
    )
    out = m((np.arange(n), x))
    assert abs(float(out[0]) - 5.0) < 5
