"""Planner entry points: public-only defaults and the explain text."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.sensitivity._planning import choose_quantile_method, make_quantile


def test_default_method_from_public_parameters() -> None:
    assert choose_quantile_method(n=None, lower=0, upper=1, epsilon=1)[0] == "exponential"
    method, reason = choose_quantile_method(n=1000, lower=0, upper=1, epsilon=1)
    assert method == "inverse" and "inverse" in reason


@pytest.mark.parametrize("method", ["inverse", "smooth", "ptr"])
def test_make_quantile_runs_and_explains(method: str) -> None:
    m = make_quantile(
        method,
        q=0.5,
        lower=0,
        upper=10,
        n=101,
        epsilon=1,
        delta=1e-6 if method == "ptr" else 0,
        bound=1,
    )
    m(np.linspace(4, 6, 101))
    assert isinstance(m.info.explain, str) and m.info.explain


def test_make_quantile_bad_method() -> None:
    with pytest.raises(InvalidParameterError):
        make_quantile("magic", q=0.5, lower=0, upper=1, n=5, epsilon=1)
    with pytest.raises(InvalidParameterError):
        make_quantile("ptr", q=0.5, lower=0, upper=1, n=5, epsilon=1, delta=1e-6)
