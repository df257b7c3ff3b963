"""Review: the grid mechanisms charge the rounding slack of every coordinate that can differ
between neighbours (``changed_coordinates``: + √c grid steps in L2, c - 1 in L1). The
calibration tests (tests/unit/ml/test_calibration.py) record the declared sensitivity and the
budget of each call but not ``changed_coordinates``, so a mutant
``make_gaussian(l2, rho=share, changed_coordinates=1)`` (or the same for ``make_laplace``) in
``Budget.noisy_vector`` passed them (and every ml test): the released ZᵀZ / cluster sums would be
under-charged by the rounding of the other coordinates. This test records the declared count and
checks it covers the coordinates that really change on hard neighbours."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.ml._common as common
import dpkit.ml._kmeans as km
from dpkit.ml import LinearRegression
from dpkit.ml._common import Box, check_budget, map_rows

Call = tuple[int, np.ndarray]


def _recording(patch: pytest.MonkeyPatch, calls: list[Call]) -> None:
    def wrap(make: Callable[..., Any]) -> Callable[..., Any]:
        def build(*args: Any, **kwargs: Any) -> Any:
            mechanism = make(*args, **kwargs)
            declared = kwargs.get("changed_coordinates") or 1

            class Logged:
                info = getattr(mechanism, "info", {})

                def __call__(self, value: Any) -> Any:
                    calls.append((declared, np.array(value, dtype=np.float64)))
                    return mechanism(value)

            return Logged()

        return build

    for name in ("make_laplace", "make_gaussian"):
        patch.setattr(common, name, wrap(getattr(common, name)))


def _check(a: list[Call], b: list[Call]) -> None:
    assert len(a) == len(b) and a
    for (declared, x), (declared_b, y) in zip(a, b, strict=True):
        assert declared == declared_b
        changed = int(np.count_nonzero(x.reshape(-1) != y.reshape(-1)))
        assert changed <= declared, (changed, declared)


@pytest.mark.parametrize("budget", [{"epsilon": 1}, {"rho": Fraction(1, 2)}])
@pytest.mark.parametrize("intercept", [True, False])
def test_regression_declares_every_changed_coordinate(
    monkeypatch: pytest.MonkeyPatch, budget: dict[str, Any], intercept: bool
) -> None:
    rng = np.random.default_rng(5)  # test data, not privacy noise
    d = 4
    x = rng.uniform(-0.2, 0.2, size=(50, d))
    y = rng.uniform(-0.2, 0.2, size=50)
    runs = []
    for data, target in ((x, y), (np.vstack([x, np.ones((1, d))]), np.append(y, 1.0))):
        calls: list[Call] = []
        with monkeypatch.context() as patch:
            _recording(patch, calls)
            LinearRegression(
                bounds_X=(-1, 1), bounds_y=(-1, 1), fit_intercept=intercept, **budget
            ).fit(data, target)
        runs.append(calls)
    _check(runs[0], runs[1])


@pytest.mark.parametrize("kind", ["pure", "zcdp"])
def test_lloyd_sums_declare_every_changed_coordinate(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    d = 3
    box = Box(-np.ones(d), np.ones(d))
    rng = np.random.default_rng(1)  # test data, not privacy noise
    x = np.clip(rng.normal(-0.5, 0.1, size=(100, d)), -1, 1)
    budget = check_budget(Fraction(1), None) if kind == "pure" else check_budget(None, Fraction(1))
    centres = km._public_spread(4, d)
    runs = []
    for data in (x, np.vstack([x, np.ones((1, d))])):
        calls: list[Call] = []
        fixed, scaled = map_rows(data, box)
        with monkeypatch.context() as patch:
            _recording(patch, calls)
            km._private_lloyd_step(fixed, scaled, centres, budget, Fraction(1, 3))
        runs.append(calls)
    _check(runs[0], runs[1])
