"""Smooth, PTR and inverse-sensitivity releases: parameters refused before data is read, and
neighbouring inputs with extreme values never differ in whether (or which) error is raised."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from dpkit.errors import DPError, InvalidParameterError, UnsupportedQueryError
from dpkit.sensitivity import (
    PTRResult,
    make_inverse_sensitivity,
    make_propose_test_release,
    make_smooth_sensitivity,
)

BASE = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
EXTREMES = [np.nan, np.inf, -np.inf, 1e308, -1e308, 0.0, 10.0, 5.0]


def _mechanisms() -> list[Any]:
    out: list[Any] = []
    for name in ("median", "mean", "trimmed_mean", "range", "count", "distinct", "max"):
        kw = {"trim": 0.2} if name == "trimmed_mean" else {}
        out.append(make_smooth_sensitivity(name, lower=0, upper=10, n=5, epsilon=1, **kw))
        out.append(
            make_smooth_sensitivity(
                name, lower=0, upper=10, n=5, epsilon=1, delta=1e-6, noise="laplace", **kw
            )
        )
    out.append(
        make_propose_test_release(
            "median",
            lower=0,
            upper=10,
            n=5,
            bound=1,
            epsilon_test=1,
            epsilon_release=1,
            delta=1e-6,
        )
    )
    out.append(make_inverse_sensitivity("median", lower=0, upper=10, n=5, epsilon=1))
    return out


@pytest.mark.parametrize("bad", EXTREMES)
def test_extreme_neighbours_never_raise(bad: float) -> None:
    data = BASE.copy()
    data[2] = bad
    for m in _mechanisms():
        out = m(data)
        value = float(out) if isinstance(out, PTRResult) else out
        assert isinstance(out, PTRResult) or math.isfinite(value)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": -1}, "epsilon"),
        ({"beta": 0}, "beta"),
        ({"beta": -0.1}, "beta"),
        ({"beta": 5}, "beta"),  # too large for ε = 1 and γ = 4
        ({"gamma": 1}, "gamma"),
        ({"n": 0}, "n"),
        ({"lower": 3, "upper": 2}, "upper"),
        ({"noise": "gauss"}, "noise"),
        ({"noise": "laplace"}, "delta"),  # (ε, δ) needs δ > 0
        ({"delta": 1e-6}, "delta"),  # Cauchy is pure
    ],
)
def test_smooth_bad_parameters(kwargs: dict[str, Any], parameter: str) -> None:
    args: dict[str, Any] = {"lower": 0, "upper": 10, "n": 5, "epsilon": 1}
    args.update(kwargs)
    with pytest.raises(InvalidParameterError) as info:
        make_smooth_sensitivity("median", **args)
    assert info.value.parameter == parameter


def test_refused_families_and_statistics() -> None:
    # the variance is released (exactly, on a grid: tests/unit/sensitivity/test_variance.py)
    assert make_smooth_sensitivity("variance", lower=0, upper=1, n=5, epsilon=1).loss is not None
    with pytest.raises(UnsupportedQueryError):
        make_inverse_sensitivity("mean", lower=0, upper=1, n=5, epsilon=1)
    with pytest.raises(UnsupportedQueryError):
        make_propose_test_release(
            "variance",
            lower=0,
            upper=1,
            n=5,
            bound=1,
            epsilon_test=1,
            epsilon_release=1,
            delta=1e-6,
        )


def test_ptr_and_inverse_bad_parameters() -> None:
    with pytest.raises(InvalidParameterError):
        make_propose_test_release(
            "median",
            lower=0,
            upper=1,
            n=5,
            bound=0,
            epsilon_test=1,
            epsilon_release=1,
            delta=1e-6,
        )
    with pytest.raises(InvalidParameterError):
        make_propose_test_release(
            "median", lower=0, upper=1, n=5, bound=1, epsilon_test=1, epsilon_release=1, delta=0
        )
    with pytest.raises(DPError):
        make_inverse_sensitivity("median", lower=0, upper=1, n=5, epsilon=1, grid_exponent=-60)


def test_wrong_length_is_a_schema_error_for_every_value() -> None:
    m = make_smooth_sensitivity("median", lower=0, upper=10, n=5, epsilon=1)
    for data in (np.ones(4), np.full(4, np.nan)):
        with pytest.raises(InvalidParameterError):
            m(data)
