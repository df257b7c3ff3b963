"""dpkit.mechanisms._exponential: exact selection samplers and their privacy claims."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.core._spaces import AbsoluteDistance
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms import _exponential as ex
from dpkit.mechanisms._exponential import (
    exponential_utility_bound,
    make_exponential,
    make_permute_and_flip,
    make_report_noisy_max,
)
from dpkit.noise import _exact

P_VALUE_FLOOR = 1e-6
TOLERANCE = 1e-9

Maker = Callable[..., Measurement[Any]]


def _rnm_gumbel(epsilon: Any, sensitivity: Any, **kw: Any) -> Measurement[Any]:
    return make_report_noisy_max(epsilon, sensitivity, noise="gumbel", **kw)


def _rnm_exponential(epsilon: Any, sensitivity: Any, **kw: Any) -> Measurement[Any]:
    return make_report_noisy_max(epsilon, sensitivity, noise="exponential", **kw)


MAKERS: list[Maker] = [make_exponential, make_permute_and_flip, _rnm_gumbel, _rnm_exponential]
IDS = ["exponential", "permute_and_flip", "rnm_gumbel", "rnm_exponential"]


@pytest.fixture
def force_exact() -> Iterator[None]:
    _exact._FORCE_EXACT = True
    try:
        yield
    finally:
        _exact._FORCE_EXACT = False


def _chi_square_p(samples: np.ndarray, pmf: np.ndarray) -> float:
    counts = np.bincount(samples, minlength=pmf.size).astype(np.float64)
    assert counts.size == pmf.size, "a sample outside the candidates"
    expected = pmf * samples.size
    assert np.all(expected >= 5), "test too small for a chi-square test"
    return float(stats.chisquare(counts, expected).pvalue)


def _vertices(k: int, monotone_only: bool) -> Iterator[np.ndarray]:
    for signs in itertools.product((-1, 0, 1), repeat=k):
        s = np.array(signs, dtype=np.float64)
        if monotone_only and not (np.all(s >= 0) or np.all(s <= 0)):
            continue
        yield s


def _worst_loss(m: Measurement[Any], *, monotone_only: bool, seed: int = 0) -> float:
    """max over random u and every vertex u' = u + Δ·s of max_r |ln P_u(r) - ln P_u'(r)|."""
    rng = np.random.default_rng(seed)  # test inputs only; the mechanisms draw from dpkit.noise
    sensitivity = float(m.info.sensitivity)
    pmf = m.info.output_pmf
    worst = 0.0
    for k in (2, 3, 4):
        for _ in range(6):
            u = rng.uniform(-3, 3, size=k) * sensitivity
            u[rng.integers(k)] = u.max()  # include ties
            base = np.log(pmf(u))
            for s in _vertices(k, monotone_only):
                other = np.log(pmf(u + sensitivity * s))
                worst = max(worst, float(np.max(np.abs(base - other))))
    return worst


# ---------------------------------------------------------------------------- claims
@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
@pytest.mark.parametrize(("epsilon", "sensitivity"), [(1, 1), ("1/2", 3), (2, 0.25)])
def test_claim_holds_on_every_vertex_neighbour(
    maker: Maker, epsilon: Any, sensitivity: Any
) -> None:
    m = maker(epsilon, sensitivity)
    assert m.loss == PureDP(Fraction(epsilon))
    worst = _worst_loss(m, monotone_only=False)
    assert worst <= float(m.loss.epsilon) + TOLERANCE
    assert worst >= 0.8 * float(m.loss.epsilon)  # the check has power: the claim is near tight


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
def test_monotonic_claim_holds_for_monotone_neighbours(maker: Maker) -> None:
    m = maker(1, 1, monotonic=True)
    assert m.info.coefficient == 1
    assert _worst_loss(m, monotone_only=True) <= 1 + TOLERANCE


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
def test_exact_check_detects_monotonic_misuse(maker: Maker) -> None:
    """monotonic=True on a utility that is not monotone: the loss approaches 2ε > ε."""
    m = maker(1, 1, monotonic=True)
    worst = _worst_loss(m, monotone_only=False)
    assert worst > float(m.loss.epsilon) + TOLERANCE
    assert worst > 1.5


def test_privacy_map_is_linear_in_the_coordinate_bound() -> None:
    m = make_exponential(epsilon="1/2", sensitivity=2)
    assert m.d_in == 2
    assert m.input_metric == AbsoluteDistance()
    assert m.map(2) == PureDP(Fraction(1, 2))
    assert m.map(4) == PureDP(1)
    assert m.map(1) == PureDP(Fraction(1, 4))


def test_sensitivity_float_is_rounded_up() -> None:
    m = make_exponential(1, 0.1)
    assert m.info.sensitivity >= Fraction(0.1)
    assert m.info.sensitivity >= Fraction(1, 10)


# ---------------------------------------------------------------------------- pmfs
def _brute_force_permute_and_flip(u: np.ndarray, c: float) -> np.ndarray:
    p = np.exp(c * (u - u.max()))
    out = np.zeros(u.size)
    for order in itertools.permutations(range(u.size)):
        survive = 1.0
        for r in order:
            out[r] += survive * p[r]
            survive *= 1 - p[r]
    return out / math.factorial(u.size)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6])
def test_permute_and_flip_pmf_matches_enumeration(k: int) -> None:
    rng = np.random.default_rng(k)
    u = rng.normal(size=k) * 2
    m = make_permute_and_flip(1, 1)
    expected = _brute_force_permute_and_flip(u, 0.5)
    assert np.allclose(m.info.output_pmf(u), expected, rtol=1e-12, atol=0)


def test_report_noisy_max_pmfs_are_the_named_mechanisms() -> None:
    u = np.array([0.0, 1.5, -2.0, 3.0, 3.0])
    assert np.allclose(
        _rnm_gumbel(1, 1).info.output_pmf(u),
        make_exponential(1, 1).info.output_pmf(u),
        rtol=1e-14,
    )
    assert np.allclose(
        _rnm_exponential(1, 1).info.output_pmf(u),
        make_permute_and_flip(1, 1).info.output_pmf(u),
        rtol=1e-14,
    )
    assert _rnm_exponential(1, 1).info.noise_scale == 2
    assert _rnm_gumbel(1, 1, monotonic=True).info.noise_scale == 1


def test_exponential_pmf_formula() -> None:
    pmf = make_exponential(2, 1).info.output_pmf([0.0, 1.0, 2.0])
    weights = np.exp([0.0, 1.0, 2.0])
    assert np.allclose(pmf, weights / weights.sum(), rtol=1e-14)


def test_permute_and_flip_is_never_worse_in_expected_utility() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        u = rng.normal(size=rng.integers(2, 30)) * 3
        em = make_exponential(1, 1).info.output_pmf(u) @ u
        pf = make_permute_and_flip(1, 1).info.output_pmf(u) @ u
        assert pf >= em - 1e-12


def test_large_permute_and_flip_pmf_sums_to_one() -> None:
    u = np.random.default_rng(5).normal(size=400)
    pmf = make_permute_and_flip(1, 0.5).info.output_pmf(u)
    assert pmf.shape == (400,)
    assert np.all(pmf > 0)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-10)


# ---------------------------------------------------------------------------- samplers
UTILITIES = np.array([0.0, 0.5, 1.7, 3.0, -1.0])


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
@pytest.mark.parametrize("monotonic", [False, True])
def test_sampler_matches_its_pmf(maker: Maker, monotonic: bool) -> None:
    m = maker(1, 1, monotonic=monotonic)
    samples = m(np.tile(UTILITIES, (100_000, 1)))
    assert samples.shape == (100_000,) and samples.dtype == np.int64
    assert _chi_square_p(samples, m.info.output_pmf(UTILITIES)) > P_VALUE_FLOOR


@pytest.mark.parametrize("maker", [make_exponential, make_permute_and_flip], ids=IDS[:2])
def test_sampler_with_many_candidates(maker: Maker) -> None:
    u = np.linspace(0, 10, 40)
    m = maker(2, 1)
    samples = m(np.tile(u, (20_000, 1)))
    pmf = m.info.output_pmf(u)
    keep = pmf * samples.size >= 5  # pool the unlikely candidates into one cell
    counts = np.bincount(samples, minlength=u.size).astype(np.float64)
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(pmf[keep], pmf[~keep].sum()) * samples.size
    if expected[-1] < 5:
        observed, expected = observed[:-1], expected[:-1]
        expected *= observed.sum() / expected.sum()
    assert stats.chisquare(observed, expected).pvalue > P_VALUE_FLOOR


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
def test_single_vector_calls_return_ints(maker: Maker) -> None:
    m = maker(1, 1)
    draws = [m(UTILITIES) for _ in range(200)]
    assert all(isinstance(d, int) and 0 <= d < UTILITIES.size for d in draws)
    assert maker(1, 1)([5.0]) == 0
    assert maker(1, 1)([1, 2, 3]) in (0, 1, 2)  # integer scores are accepted


@pytest.mark.parametrize("maker", [make_exponential, make_permute_and_flip], ids=IDS[:2])
def test_exact_path(maker: Maker, force_exact: None) -> None:
    u = np.array([0.0, 0.7, 1.3])
    m = maker(1, 1)
    samples = m(np.tile(u, (3000, 1)))
    assert _chi_square_p(samples, m.info.output_pmf(u)) > P_VALUE_FLOOR


@pytest.mark.parametrize("maker", [make_exponential, make_permute_and_flip], ids=IDS[:2])
def test_split_path_for_large_gaps_is_exact(maker: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gaps above the direct limit are drawn as e^{-split}·e^{-(γ-split)}: forced here."""
    monkeypatch.setattr(ex, "_DIRECT_LIMIT", 0.5)
    monkeypatch.setattr(ex, "_SPLIT", Fraction(1, 4))
    u = np.array([0.0, 1.0, 2.5, 4.0])
    m = maker(1, 1)
    samples = m(np.tile(u, (50_000, 1)))
    assert _chi_square_p(samples, m.info.output_pmf(u)) > P_VALUE_FLOOR


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
def test_huge_gaps(maker: Maker) -> None:
    m = maker(1, 1)
    assert m([0.0, 1e6]) == 1
    assert m([1e308, -1e308]) == 0  # the float gap overflows; the exact gap is still used
    assert np.array_equal(m(np.tile([-1e308, 1e308, 0.0], (50, 1))), np.ones(50))


# ---------------------------------------------------------------------------- accuracy
def test_utility_bound_formula() -> None:
    bound = exponential_utility_bound(10, 1, 1, 0.05)
    assert bound == pytest.approx(2 * (math.log(10) + math.log(20)))
    assert exponential_utility_bound(10, 1, 1, 0.05, monotonic=True) == pytest.approx(bound / 2)
    m = make_exponential(1, 1)
    assert m.info.utility_bound(10, 0.05) == pytest.approx(bound)
    with pytest.raises(InvalidParameterError):
        exponential_utility_bound(0, 1, 1)
    with pytest.raises(InvalidParameterError):
        exponential_utility_bound(3, 1, 1, alpha=0)


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
def test_utility_bound_holds_for_the_exact_distribution(maker: Maker) -> None:
    rng = np.random.default_rng(11)
    m = maker(1, 1)
    for _ in range(10):
        u = rng.normal(size=50) * 10
        for alpha in (0.5, 0.05, 0.001):
            gap = m.info.utility_bound(50, alpha)
            pmf = m.info.output_pmf(u)
            assert pmf[u <= u.max() - gap].sum() <= alpha


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
@pytest.mark.parametrize(
    ("epsilon", "sensitivity"),
    [
        (0, 1),
        (-1, 1),
        (float("nan"), 1),
        (float("inf"), 1),
        (1, 0),
        (1, -2),
        (1, float("nan")),
        (True, 1),
        ("x", 1),
    ],
)
def test_rejects_bad_parameters(maker: Maker, epsilon: Any, sensitivity: Any) -> None:
    with pytest.raises(InvalidParameterError):
        maker(epsilon, sensitivity)


def test_rejects_bad_options() -> None:
    with pytest.raises(InvalidParameterError):
        make_report_noisy_max(1, 1, noise="laplace")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        make_exponential(1, 1, monotonic="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        make_exponential(1e-300, 1e10)  # ε/Δ too small to sample sensibly


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
@pytest.mark.parametrize(
    "utilities",
    [
        [],
        [1.0, float("nan")],
        [float("inf"), 0.0],
        [[[1.0]]],
        ["a", "b"],
        3.0,
        [2**60, 0],
        np.zeros((2, 0)),
    ],
)
def test_rejects_bad_utilities(maker: Maker, utilities: Any) -> None:
    m = maker(1, 1)
    with pytest.raises(InvalidDataError):
        m(utilities)


@pytest.mark.parametrize("maker", MAKERS, ids=IDS)
def test_output_pmf_takes_one_vector(maker: Maker) -> None:
    m = maker(1, 1)
    with pytest.raises(InvalidDataError):
        m.info.output_pmf(np.zeros((2, 3)))
    assert m.info.outputs is None
    assert m.info.outputs_of([1.0, 2.0, 3.0]) == [0, 1, 2]
    assert m(np.zeros((0, 3))).shape == (0,)
