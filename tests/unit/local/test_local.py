"""dpkit.local: numeric means, oracle choice, campaigns and the shuffle bound, PEM."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpkit import local
from dpkit.core._losses import ApproxDP
from dpkit.errors import DomainMismatchError, InvalidDataError, InvalidParameterError
from dpkit.local._numeric import _NumericMean
from dpkit.testing import check_finite_pure_dp

INPUTS = [-1.0, -0.5, 0.0, 0.25, 0.5, 1.0]


def numeric() -> list[_NumericMean]:
    return [
        local.DuchiMean(2, 0, 10),
        local.PiecewiseMean(2, 0, 10, cells=64),
        local.PiecewiseMean("1/2", 0, 10, cells=16),
        local.HybridMean(2, 0, 10, cells=64),
        local.HybridMean("1/2", 0, 10, cells=64),
    ]


@pytest.mark.parametrize("index", range(5))
def test_numeric_exact_privacy(index: int) -> None:
    mech = numeric()[index]
    pairs = [(a, b) for a in INPUTS for b in INPUTS if a != b]
    result = check_finite_pure_dp(mech.output_pmf, pairs, mech.epsilon).raise_if_failed()
    assert float(result.realised) == pytest.approx(float(mech.epsilon), rel=1e-9)


def test_numeric_wrong_epsilon_flagged() -> None:
    mech = local.PiecewiseMean(2, 0, 10, cells=64)
    pairs = [(-1.0, 1.0)]
    assert not check_finite_pure_dp(mech.output_pmf, pairs, 1).passed


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("index", range(5))
def test_numeric_sampler_matches_pmf(index: int) -> None:
    from scipy.stats import chisquare

    mech = numeric()[index]
    x = 7.5  # t = 0.5
    reports = mech.randomize(np.full(20_000, x))
    arrays = reports.arrays
    if "sign" in arrays:
        keys = (arrays["sign"] > 0).astype(np.int64)
    elif "cell" in arrays:
        keys = arrays["cell"].astype(np.int64)
    else:
        pm = arrays["piecewise"]
        keys = np.where(pm, 2 + arrays["value"], (arrays["value"] > 0).astype(np.int64))
    counts = np.bincount(keys, minlength=len(mech.outputs()))
    expected = mech.output_pmf(0.5) * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0
    assert chisquare(counts[keep], expected[keep]).pvalue > 1e-4


def test_numeric_clamps_and_maps_nan_without_raising() -> None:
    mech = local.DuchiMean(1, 0, 10)
    k = mech.unit([np.nan, -np.inf, np.inf, -3, 13, 5, 10])
    assert k.tolist() == [0, -(2**32), 2**32, -(2**32), 2**32, 0, 2**32]
    with pytest.raises(InvalidDataError):
        mech.unit(["a"])
    with pytest.raises(InvalidParameterError):
        local.DuchiMean(1, 5, 5)
    with pytest.raises(InvalidParameterError):
        local.PiecewiseMean(0, 0, 1)


def test_recommend_oracle_uses_public_parameters() -> None:
    small = local.recommend_oracle(1, 3, 1000)
    assert small.name == "grr"
    big = local.recommend_oracle(2, 4096, 10**6)
    assert big.name in ("olh", "oue", "ss")
    assert big.variance == min(v for v, _ in big.table.values()) or big.variance <= 1.02 * min(
        v for v, _ in big.table.values()
    )
    assert isinstance(big.oracle, local.FrequencyOracle)
    with pytest.raises(InvalidParameterError):
        local.recommend_oracle(0, 4, 10)
    with pytest.raises(InvalidParameterError):
        local.recommend_oracle(1, 1, 10)


def test_shuffle_bound_matches_the_formula() -> None:
    eps0, n, delta = 1.0, 10**6, 1e-6
    e = math.exp(eps0)
    expected = math.log(
        1 + (e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n)
    )
    bound = local.shuffle_amplification(eps0, n, delta)
    assert isinstance(bound, ApproxDP)
    assert float(bound.epsilon) == pytest.approx(expected, rel=1e-12)
    assert float(bound.epsilon) >= expected  # rounded up
    assert local.shuffle_amplification(8, 1000, 1e-6) is None  # condition fails


@pytest.mark.usefixtures("seeded")
def test_campaign_accounting() -> None:
    oracle = local.OptimizedLocalHashing(16, 1)
    campaign = local.Campaign(oracle, "emoji")
    campaign.add(oracle.randomize([1, 2, 3]), client_ids=[10, 11, 12])
    campaign.add(oracle.randomize([1]), client_ids=[10])
    assert campaign.client_loss(10).epsilon == 2
    assert campaign.client_loss(11).epsilon == 1
    assert campaign.local_loss().epsilon == 2
    assert campaign.n == 4 and campaign.reports().n == 4
    with pytest.raises(InvalidParameterError):
        campaign.shuffle_reading()
    with pytest.raises(DomainMismatchError):
        campaign.add(local.GeneralizedRR(16, 1).randomize([1]))
    rappor = local.Rappor(8)
    fresh_each_time = local.Campaign(rappor)  # randomize: a fresh permanent response per report
    for _ in range(10):
        fresh_each_time.add(rappor.randomize([3]), client_ids=[7])
    assert fresh_each_time.client_loss(7).epsilon == 10 * rappor.epsilon
    memoised = local.Campaign(rappor, memoised_permanent=True)
    permanent = rappor.permanent(rappor.bloom(np.array([3]), np.array([0])))  # kept on the device
    memoised.add(rappor.report(permanent, [0]), client_ids=[7])
    assert memoised.client_loss(7).epsilon == min(rappor.epsilon, rappor.epsilon_longitudinal)
    for _ in range(9):
        memoised.add(rappor.report(permanent, [0]), client_ids=[7])
    assert memoised.client_loss(7).epsilon == rappor.epsilon_longitudinal
    with pytest.raises(InvalidParameterError):
        local.Campaign(oracle, memoised_permanent=True)  # only RAPPOR has a permanent response
    with pytest.raises(InvalidDataError):
        rappor.report(permanent, [0, 1])
    fresh = local.Campaign(oracle)
    fresh.add(oracle.randomize(np.zeros(100_000, dtype=int)))
    assert fresh.summary()["shuffle_epsilon_delta"] is not None
    assert fresh.local_loss().epsilon == Fraction(1)


@pytest.mark.usefixtures("seeded")
def test_pem_finds_heavy_hitters_in_a_32_bit_domain() -> None:
    heavy = np.array([3_000_000_123, 17, 2**32 - 1, 123_456_789])
    n = 60_000
    rng = np.random.default_rng(5)  # test data only
    values = rng.integers(0, 2**32, n)
    values[: n // 2] = np.repeat(heavy, n // 8)
    pem = local.PrefixExtension(4, k=4, eta=4)
    found = pem.heavy_hitters(pem.randomize(values))
    assert set(found.values.tolist()) == set(heavy.tolist())
    assert np.all(np.abs(found.frequencies - 0.125) < 5 * found.standard_errors)
    with pytest.raises(InvalidDataError):
        pem.randomize([2**32])
    with pytest.raises(InvalidDataError):
        pem.randomize([-1])


def test_recommend_oracle_skips_sketches_that_cannot_estimate_the_whole_domain() -> None:
    from dpkit.local import CountMeanSketch

    d = 10**7  # no sketch table fits: CMS/HCMS answer candidate dictionaries only
    assert not CountMeanSketch(d, 2).table_fits
    rec = local.recommend_oracle(2, d, 10_000)
    assert "cms" not in rec.table and "hcms" not in rec.table
    small = local.recommend_oracle(2, 64, 10_000)
    assert "cms" in small.table and "hcms" in small.table
