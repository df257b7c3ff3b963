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
import functools
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


# ------------------------------------------------------- the kernel against an exact reference
@functools.cache
def _alias(table: _gauss_table.GaussianTable) -> tuple[list[int], list[int], list[int]]:
    return _gauss_table._alias_table(list(table.weights))


def _decode(table: _gauss_table.GaussianTable, word: int) -> tuple[int, int]:
    """The outcome and z a first word proposes, in plain integers (tails: z = 0)."""
    primary, alias, threshold = _alias(table)
    key = word >> 32
    column, coin = key >> 22, key & (2**22 - 1)
    outcome = primary[column] if coin < threshold[column] else alias[column]
    k, w = table.buckets, table.width
    if outcome >= 2 * k:
        return outcome, 0
    b = outcome % k
    base = b * w if outcome < k else -(b + 1) * w
    return outcome, base + (word & (w - 1))


def _alpha(table: _gauss_table.GaussianTable, outcome: int, z: int) -> tuple[Fraction, Fraction]:
    """Bounds, 60 digits tight, on the acceptance probability C·p(z)/H of a bucket proposal."""
    lo, hi = _p_bounds(table.sigma2, abs(z))
    factor = Fraction(table.scale, table.weights[outcome])
    return factor * lo, factor * hi


def _crafted_words(
    table: _gauss_table.GaussianTable, n: int, seed: int, force_exact: bool
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``n`` proposals (no tails) whose alias coins sit at random or at a column's threshold,
    and whose U sits at random, a few cells either side of the acceptance threshold or either
    side of the squeeze: the first words, the further words of U that the kernel reads (for the
    proposals the squeeze does not accept, or all with ``force_exact``, in order), and the
    exactly accepted z's."""
    rng = np.random.default_rng(seed)
    j = table.width_bits
    b = 32 - j  # U's bits in the first word
    first, further, accepted = [], [], []
    while len(first) < n:
        word = int(rng.integers(0, 2**64, dtype=np.uint64))
        if rng.integers(0, 4) == 0:  # an alias coin at its column's threshold, or just below
            column = word >> 54
            coin = _alias(table)[2][column] - int(rng.integers(0, 2))
            if 0 <= coin < 2**22:
                word = (column << 54) | (coin << 32) | (word & (2**32 - 1))
        outcome, z = _decode(table, word)
        if outcome in (2 * table.buckets, 2 * table.buckets + 1):
            continue  # tails draw more words: covered by the law tests
        rows = np.flatnonzero(table.outcome2 == outcome)
        squeeze = int(table.squeeze2[rows[0]]) >> j  # in U's first b bits
        kind = int(rng.integers(0, 3))
        if kind == 0 or outcome == 2 * table.buckets + 2:
            cell = (
                int(rng.integers(0, 2 ** (b + 52), dtype=np.uint64))
                if b <= 12
                else ((int(rng.integers(0, 2**b)) << 52) | int(rng.integers(0, 2**52)))
            )
        elif kind == 1:  # U's first b + 52 bits a few cells from α
            lo, _ = _alpha(table, outcome, z)
            cell = int(lo * 2 ** (b + 52)) + int(rng.choice([-40, -3, -2, 1, 2, 3, 40]))
        else:  # U's first b bits at the squeeze
            cell = ((squeeze + int(rng.integers(-2, 2))) << 52) | int(rng.integers(0, 2**52))
        cell = min(max(cell, 0), 2 ** (b + 52) - 1)
        prefix, rest = cell >> 52, cell & (2**52 - 1)
        word = (word & ~(2**32 - 1)) | (prefix << j) | (word & (2**j - 1))
        if outcome < 2 * table.buckets:
            lo, hi = _alpha(table, outcome, z)
            if (
                prefix < squeeze and not force_exact
            ):  # accepted on U's first b bits: they must lie below α
                assert Fraction(prefix + 1, 2**b) <= lo
                accepted.append(z)
            elif Fraction(cell + 1, 2 ** (b + 52)) <= lo:
                accepted.append(z)
                further.append(rest << 12 | int(rng.integers(0, 2**12)))
            elif Fraction(cell, 2 ** (b + 52)) >= hi:
                further.append(rest << 12 | int(rng.integers(0, 2**12)))
            else:
                continue  # the cell straddles α: would draw more words
        first.append(word)
    return np.array(first, np.uint64), np.array(further, np.uint64), accepted


@pytest.mark.parametrize(
    ("sigma2", "width_bits", "buckets"),
    [(Fraction(400), None, None), (Fraction(400), 3, 6), (Fraction(52693081), None, None)],
)
@pytest.mark.parametrize("force_exact", [False, True])
def test_the_kernel_decides_every_proposal_exactly(
    monkeypatch: pytest.MonkeyPatch,
    sigma2: Fraction,
    width_bits: int | None,
    buckets: int | None,
    force_exact: bool,
) -> None:
    """Draw for draw: the vectorised kernel accepts exactly the proposals whose U lies below
    C·p(z)/H, including U one cell either side of that threshold and of the squeeze."""
    table = build_table(sigma2, width_bits, buckets)
    assert table is not None
    n = 3000
    first, further, expected = _crafted_words(table, n, n + table.width, force_exact)
    words = iter([first, further])
    monkeypatch.setattr(_gauss_table, "random_words", lambda size: next(words))
    monkeypatch.setattr(_exact, "_FORCE_EXACT", force_exact)
    z, accept = _gauss_table._accept_block(table, n, _gauss_table._Buffers(n))
    assert z[accept].tolist() == expected
