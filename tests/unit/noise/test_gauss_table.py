"""The table sampler of the discrete Gaussian (src/dpkit/noise/_gauss_table.py, issue 26).

* the table, exactly: the alias table gives each outcome exactly its weight out of 2^32, every
  height bounds C·p from above and every squeeze bounds the acceptance from below (checked
  against interval bounds in exact rationals);
* the law: chi-square goodness of fit against the closed-form pmf, on the default envelopes and
  on narrow ones that send many proposals through the float exp, the tails and the exact path
  (each check fails for a sampler one step off: see ``test_a_mutated_table_is_caught``);
* the wiring: ``make_gaussian`` / ``DiscreteGaussian.sample`` use it where it applies.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from dpkit import noise
from dpkit.noise import _exact, _gauss_table
from dpkit.noise._distributions import DiscreteGaussian
from dpkit.noise._gauss_table import build_table, sample_table


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", noise.InsecureRandomnessWarning)
        yield


TABLES = [
    (Fraction(1), None, None),
    (Fraction(4), None, None),
    (Fraction(9, 4), None, None),
    (Fraction(400), None, None),
    (Fraction(52693081), None, None),
    (Fraction(10**12, 7), None, None),
    (Fraction(400), 3, 6),  # w = 8 ≈ 0.4σ, R = 48 = 2.4σ: exp path and tails often
    (Fraction(25, 2), 2, 1),  # one bucket of 4 per side: mostly tails
]


def _p_bounds(sigma2: Fraction, magnitude: int) -> tuple[Fraction, Fraction]:
    return _gauss_table._exp_bounds(Fraction(magnitude) ** 2 / (2 * sigma2), 60)


@pytest.mark.parametrize(("sigma2", "width_bits", "buckets"), TABLES)
def test_the_table_is_exact(sigma2: Fraction, width_bits: int | None, buckets: int | None) -> None:
    table = build_table(sigma2, width_bits, buckets)
    assert table is not None
    k, w, c = table.buckets, table.width, table.scale
    weights = table.weights
    assert len(weights) == 2 * k + 3 and sum(weights) == 2**32 and min(weights) >= 0
    # the alias table: outcome o gets exactly weights[o] of the 2^32 (column, coin) pairs
    unit = 2**_gauss_table._ALIAS_BITS
    columns = np.arange(2**_gauss_table._COLUMN_BITS, dtype=np.uint64)
    threshold = (table.key_threshold - (columns << np.uint64(22))).astype(np.int64)
    assert threshold.min() >= 0 and threshold.max() <= unit
    units = np.zeros(2**_gauss_table._COLUMN_BITS, dtype=np.int64)
    np.add.at(units, table.outcome2[0::2], threshold)
    np.add.at(units, table.outcome2[1::2], unit - threshold)
    assert units.tolist() == list(weights) + [0] * (units.size - len(weights))
    # heights bound C·p at the bucket's smallest |z|; squeezes bound C·p(largest |z|)/H below
    for o in range(2 * k):
        b, negative = o % k, o >= k
        first = -(b + 1) * w if negative else b * w
        assert table.base2[table.outcome2 == o].tolist() == [first] * int(
            np.sum(table.outcome2 == o)
        )
        smallest, largest = (b * w + 1, (b + 1) * w) if negative else (b * w, (b + 1) * w - 1)
        assert weights[o] >= c * _p_bounds(sigma2, smallest)[1]
        squeeze = table.squeeze2[table.outcome2 == o]
        assert squeeze.size == 0 or Fraction(int(squeeze.max()), 2**64) <= (
            c * _p_bounds(sigma2, largest)[0] / weights[o]
        )
        assert table.ratio[o] == float(Fraction(c, weights[o]))
    # the tails: H_T >= C·p(R)/(w(1 - e^{-R/σ²})); tails and reject never squeeze-accept
    r_high = _gauss_table._exp_bounds(Fraction(table.radius) / sigma2, 60)[1]
    tail_bound = c * _p_bounds(sigma2, table.radius)[1] / (w * (1 - r_high))
    assert weights[2 * k] == weights[2 * k + 1] >= tail_bound
    assert not table.squeeze2[table.outcome2 >= 2 * k].any()


def _chi_square_p(samples: np.ndarray, sigma2: Fraction) -> float:
    """p-value of Pearson's chi-square test of ``samples`` against the discrete Gaussian pmf;
    cells with expected count below 5 are pooled into the two tails."""
    n = samples.size
    radius = int(np.abs(samples).max()) + 50
    support = np.arange(-radius, radius + 1)
    log_p = -(support.astype(np.float64) ** 2) / (2 * float(sigma2))
    p = np.exp(log_p - np.logaddexp.reduce(log_p))
    expected = n * p
    keep = np.flatnonzero(expected >= 5)
    first, last = keep[0], keep[-1]
    lo, hi = int(support[first]), int(support[last])
    observed = np.bincount(np.clip(samples, lo - 1, hi + 1) - (lo - 1), minlength=hi - lo + 3)
    cells = np.concatenate(
        [[expected[:first].sum()], expected[first : last + 1], [expected[last + 1 :].sum()]]
    )
    mask = cells > 0
    stat = float((((observed - cells) ** 2)[mask] / cells[mask]).sum())
    return float(chi2.sf(stat, int(mask.sum()) - 1))


LAWS = [  # σ², width bits, buckets per side, draws, a variance off by this much is caught
    (Fraction(1), None, None, 1_000_000, Fraction(102, 100)),
    (Fraction(4), None, None, 1_000_000, Fraction(102, 100)),
    (Fraction(9, 4), None, None, 1_000_000, Fraction(102, 100)),
    (Fraction(400), None, None, 1_000_000, Fraction(103, 100)),
    (Fraction(400), 3, 6, 400_000, Fraction(105, 100)),
    (Fraction(25, 2), 2, 1, 60_000, Fraction(110, 100)),
]


@pytest.mark.parametrize(("sigma2", "width_bits", "buckets", "n", "off"), LAWS)
def test_the_table_sampler_has_the_closed_form_law(
    sigma2: Fraction, width_bits: int | None, buckets: int | None, n: int, off: Fraction
) -> None:
    table = build_table(sigma2, width_bits, buckets)
    assert table is not None
    with noise.insecure_deterministic_seed(404):
        samples = sample_table(table, n)
    assert samples.dtype == np.int64 and samples.size == n
    assert _chi_square_p(samples, sigma2) > 1e-4
    # the same check catches a variance a few per cent off
    assert _chi_square_p(samples, sigma2 * off) < 1e-6


def test_a_large_sigma_has_the_right_moments() -> None:
    sigma2 = Fraction(52693081)  # make_gaussian's σ² in benchmarks/noise.py
    table = build_table(sigma2)
    assert table is not None and table.width == 256
    with noise.insecure_deterministic_seed(5):
        samples = sample_table(table, 2_000_000)
    assert _chi_square_p(samples, sigma2) > 1e-4
    variance = float(np.mean(samples.astype(np.float64) ** 2))
    assert abs(variance / float(sigma2) - 1) < 5 * np.sqrt(2 / samples.size)


def test_the_forced_exact_path_has_the_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every proposal decided by interval arithmetic on the same U (no float shortcut)."""
    monkeypatch.setattr(_exact, "_FORCE_EXACT", True)
    sigma2 = Fraction(9, 4)
    table = build_table(sigma2, 0, 2)  # R = 2 = 1.33σ: a quarter of the draws are tails
    assert table is not None
    with noise.insecure_deterministic_seed(6):
        samples = sample_table(table, 40_000)
    assert _chi_square_p(samples, sigma2) > 1e-4
    assert _chi_square_p(samples, sigma2 * Fraction(106, 100)) < 1e-6


def _mutated(table: _gauss_table.GaussianTable, outcome: int, factor: float) -> object:
    """The table with one bucket's float acceptance ratio scaled: an acceptance threshold
    off by a small factor in one place."""
    ratio = table.ratio.copy()
    ratio[outcome] *= factor
    return dataclasses.replace(table, ratio=ratio)


def test_a_mutated_table_is_caught() -> None:
    """The law checks above have the power to see a sampler one step off: lowering the
    acceptance of one bucket by 10 % in the exp path, or dropping the squeeze's margin for
    the largest |z| of each bucket (squeezing with p of the bucket's smallest |z|)."""
    sigma2 = Fraction(400)
    table = build_table(sigma2, 3, 6)
    assert table is not None
    mutated = _mutated(table, 1, 0.9)
    with noise.insecure_deterministic_seed(404):
        samples = sample_table(mutated, 400_000)  # type: ignore[arg-type]
    assert _chi_square_p(samples, sigma2) < 1e-6
    # squeeze with the smallest |z|'s p (an off-by-one-bucket threshold): too many accepted
    squeeze = table.squeeze2.copy()
    k, w = table.buckets, table.width
    for o in range(2 * k):
        smallest = (o % k) * w + (o >= k)
        theta = table.ratio[o] * np.exp(-(smallest**2) / (2 * float(sigma2))) * 0.999999
        squeeze[table.outcome2 == o] = np.array(int(2**52 * theta) << 12, np.uint64)
    loose = dataclasses.replace(table, squeeze2=squeeze)
    with noise.insecure_deterministic_seed(404):
        samples = sample_table(loose, 400_000)
    assert _chi_square_p(samples, sigma2) < 1e-6


def test_make_gaussian_samples_through_the_table() -> None:
    assert build_table(Fraction(1, 2)) is None  # σ < 1: CKS's sampler
    assert build_table(Fraction(2**72)) is None  # σ > 2^35: CKS's sampler
    with noise.insecure_deterministic_seed(7):
        ours = DiscreteGaussian(Fraction(400)).sample(1000)
    with noise.insecure_deterministic_seed(7):
        table = build_table(Fraction(400))
        assert table is not None
        theirs = sample_table(table, 1000)
    assert np.array_equal(ours, theirs)
    with noise.insecure_deterministic_seed(8):
        small = DiscreteGaussian(Fraction(1, 2)).sample(1000)
    with noise.insecure_deterministic_seed(8):
        assert np.array_equal(small, noise.discrete_gaussian(Fraction(1, 2), 1000))


def test_tail_values_beyond_the_envelope_are_reached() -> None:
    sigma2 = Fraction(25, 2)
    table = build_table(sigma2, 2, 1)  # R = 4 ≈ 1.1σ
    assert table is not None
    with noise.insecure_deterministic_seed(9):
        samples = sample_table(table, 20_000)
    assert samples.max() >= table.radius and samples.min() <= -table.radius - 1
