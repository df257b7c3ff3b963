"""dpkit.local numeric means: over 6000 simulated campaigns of a fixed population (with NaN and
out-of-range values, clamped/mapped as documented), the empirical variance of the mean estimate is
within 5 % of the exact analytic variance and the mean is within 3 standard errors of the truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit import local
from dpkit.local._numeric import _NumericMean


def numeric() -> list[_NumericMean]:
    return [
        local.DuchiMean(2, 0, 10),
        local.PiecewiseMean(2, 0, 10, cells=64),
        local.PiecewiseMean("1/2", 0, 10, cells=16),
        local.HybridMean(2, 0, 10, cells=64),
        local.HybridMean("1/2", 0, 10, cells=64),
    ]


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("index", range(5))
def test_numeric_variance_and_bias(index: int) -> None:
    """6000 campaigns of 40 clients: empirical variance within 5 % of the exact one, unbiased."""
    mech = numeric()[index]
    values = np.concatenate([np.full(20, 1.0), np.full(15, 9.0), [np.nan, 100, -5, 2.5, 7.5]])
    campaigns = 6000
    reports = mech.randomize(np.tile(values, campaigns))
    t_hat = mech._t_hat(reports).reshape(campaigns, values.size).mean(axis=1)
    estimates = 5 + 5 * t_hat
    truth = float(np.mean(np.clip(np.nan_to_num(values, nan=5.0), 0, 10)))
    variance = mech.variance(values)
    assert estimates.var(ddof=1) == pytest.approx(variance, rel=0.05)
    assert abs(estimates.mean() - truth) <= 3 * math.sqrt(variance / campaigns)
    single = mech.estimate_mean(reports)
    assert single.n == values.size * campaigns and single.variance > 0
