"""A contribution bound of 10^6 rows answered with discrete Gaussian noise (an (ε, δ) budget)
ran out of memory while planning: the noise's variance summed over a window of 80σ integers
(σ grows with the bound). Found by tests/property/test_session_outcomes_props.py in CI; the
refusal was uncharged but reported as dpkit's own bug. The variance of a discrete Gaussian with
σ >= 100 is σ² to within one ulp (docs: DiscreteGaussian.variance)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.analytics import Session, ranges
from dpkit.noise._distributions import DiscreteGaussian


def test_a_huge_contribution_bound_is_answered() -> None:
    df = pd.DataFrame({"u": range(20), "level": np.arange(20) % 5})
    session = Session(df, privacy_unit="u", budget=dp.ApproxDP(10, 0.9), max_rows=1_000_000)
    query = session.query().agg(ranges("level", [0, 1, 2, 3, 4], kind="prefix", name="r"))
    release = session.evaluate(query, epsilon=2, delta=0.5)
    assert release.loss <= dp.ApproxDP(2, 0.5)  # the zCDP answer, converted to (ε, δ)
    assert len(release["r"]) == 5


def test_the_variance_shortcut_agrees_with_the_sum_where_both_run() -> None:
    z = DiscreteGaussian(Fraction(10_000))
    k = z._window().astype(np.float64)
    assert z.variance() == float(np.sum(k * k * np.exp(z.log_pmf(k))))
    assert DiscreteGaussian(Fraction(10**14)).variance() == 1e14
