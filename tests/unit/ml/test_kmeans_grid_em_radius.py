"""Review: grid_em truncates each row's cost at the cap (em_radius · lattice diameter)² and
declares that cap as the exponential mechanism's sensitivity. ml/test_calibration.py checks the
selection only at radius 1, where the truncation is inert (no lattice distance exceeds the
cap), while KMeans uses em_radius = 0.1 by default. A mutant truncating at twice the declared
cap (``best = np.full(occupied.size, 2 * sensitivity, ...)`` in ``grid_em_select``: ε doubled at
the default radius) passed every ml unit test. Here the first selection's utility change on hard
neighbours (one row, or one unit's rows, added at the far corner) is checked at radii below 1."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.ml._kmeans as km


def _recording(make: Any, calls: list[tuple[Fraction, np.ndarray]]) -> Any:
    def build(epsilon: Any, sensitivity: Any, *a: Any, **kw: Any) -> Any:
        mechanism = make(epsilon, sensitivity, *a, **kw)

        def call(utility: Any) -> Any:
            calls.append((Fraction(sensitivity), np.array(utility, dtype=np.float64)))
            return mechanism(utility)

        return call

    return build


@pytest.mark.parametrize("radius", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("rows_per_unit", [1, 3])
def test_em_utility_change_is_within_the_declared_cap(
    monkeypatch: pytest.MonkeyPatch, radius: float, rows_per_unit: int
) -> None:
    d, g, k = 2, 6, 3
    h = np.zeros(g**d, dtype=np.int64)
    h[:4] = 50  # a cluster near the low corner
    far = h.copy()
    far[-1] += rows_per_unit
    make = km.make_exponential
    runs: list[list[tuple[Fraction, np.ndarray]]] = []
    for hist in (h, far):
        calls: list[tuple[Fraction, np.ndarray]] = []

        with monkeypatch.context() as patch:
            patch.setattr(km, "make_exponential", _recording(make, calls))
            km.grid_em_select(hist, k, d, g, Fraction(1, 3), radius, rows_per_unit)
        runs.append(calls[:1])  # the first selection: the same (empty) prefix on both sides
    (sens, u), (sens_b, v) = runs[0][0], runs[1][0]
    assert sens == sens_b == rows_per_unit * km._em_cap(d, g, radius)
    diff = v - u
    assert float(diff.max() - diff.min()) <= float(sens)
