"""dpkit.mechanisms._randomized_response: claims, exact sampling, estimators, the seed survey."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dpkit.core._losses import PureDP
from dpkit.core._spaces import ChangeOneDistance
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms import _randomized_response as rr
from dpkit.mechanisms._randomized_response import (
    Estimate,
    estimate_frequencies,
    estimate_proportion,
    frequency_variance,
    make_generalized_randomized_response,
    make_randomized_response,
    make_randomized_response_epsilon,
    proportion_variance,
)
from dpkit.noise import _exact

P_VALUE_FLOOR = 1e-6


@pytest.fixture
def force_exact() -> Iterator[None]:
    """Send every Bernoulli(e^{-γ}) draw down the exact (interval arithmetic) path."""
    _exact._FORCE_EXACT = True
    try:
        yield
    finally:
        _exact._FORCE_EXACT = False


def _chi_square_p(samples: np.ndarray, outputs: Sequence[Any], pmf: np.ndarray) -> float:
    counts = np.array([np.count_nonzero(samples == y) for y in outputs], dtype=np.float64)
    assert counts.sum() == samples.size, "a sample outside the declared outputs"
    expected = pmf * samples.size
    assert np.all(expected >= 5), "test too small for a chi-square test"
    return float(stats.chisquare(counts, expected).pvalue)


def _worst_log_ratio(pmf: Callable[[Any], np.ndarray], inputs: Sequence[Any]) -> float:
    worst = 0.0
    for x, y in itertools.permutations(inputs, 2):
        worst = max(worst, float(np.max(np.abs(np.log(pmf(x)) - np.log(pmf(y))))))
    return worst


# ---------------------------------------------------------------------------- two-coin protocol
def test_fair_coins_cost_ln3_rounded_up_tightly() -> None:
    m = make_randomized_response()
    with localcontext() as ctx:
        ctx.prec = 60
        ln3 = Fraction(Decimal(3).ln())
    epsilon = m.loss.epsilon
    assert isinstance(m.loss, PureDP)
    assert epsilon >= ln3
    assert epsilon - ln3 < Fraction(1, 10**30)
    assert m.info.likelihood_ratio == 3
    assert m.info.exact_output_pmf(True) == (Fraction(1, 4), Fraction(3, 4))
    assert m.info.exact_output_pmf(False) == (Fraction(3, 4), Fraction(1, 4))


def test_epsilon_of_unfair_coins_is_the_larger_ratio() -> None:
    # p = 1/4, q = 1/3: P(yes|yes) = 1/2, P(yes|no) = 1/4; ratios 2 and (3/4)/(1/2) = 3/2.
    m = make_randomized_response(truth_probability="1/4", random_yes_probability="1/3")
    assert m.info.likelihood_ratio == 2
    assert 0 <= m.loss.epsilon - Fraction(math.log(2)) < 1e-15
    # p = 1/2, q = 0.9: P(yes|yes) = 0.95, P(yes|no) = 0.45: the "no" ratio 0.55/0.05 = 11 wins
    m = make_randomized_response(0.5, 0.9)
    assert m.info.likelihood_ratio == 11


@pytest.mark.parametrize(("p", "q"), [(0.5, 0.5), ("1/3", "1/5"), (0.9, 0.5), (0.05, 0.99)])
def test_two_coin_claim_holds_exactly_and_is_tight(p: Any, q: Any) -> None:
    m = make_randomized_response(p, q)
    exact = m.info.exact_output_pmf
    ratio = max(
        a / b
        for x, y in itertools.permutations([True, False], 2)
        for a, b in zip(exact(x), exact(y), strict=True)
    )
    assert ratio == m.info.likelihood_ratio
    worst = _worst_log_ratio(m.info.output_pmf, [True, False])
    assert worst <= float(m.loss.epsilon) + 1e-9
    assert worst >= float(m.loss.epsilon) - 1e-9  # the claim is not loose


@pytest.mark.parametrize(("p", "q"), [(0.5, 0.5), (0.2, 0.7)])
def test_two_coin_sampler_matches_its_pmf(p: float, q: float) -> None:
    m = make_randomized_response(p, q)
    for answer in (True, False):
        samples = m(np.full(100_000, answer))
        assert _chi_square_p(samples, [False, True], m.info.output_pmf(answer)) > P_VALUE_FLOOR


def test_shapes_and_types_are_kept() -> None:
    m = make_randomized_response()
    assert isinstance(m(True), bool)
    assert isinstance(m(np.True_), bool)
    assert isinstance(m(0), bool)
    out = m([True, False, True])
    assert out.dtype == bool and out.shape == (3,)
    assert m(np.zeros((4, 5), dtype=np.int64)).shape == (4, 5)
    assert m(np.array([1.0, 0.0])).dtype == bool
    assert m(np.array([], dtype=bool)).shape == (0,)
    assert m.input_metric == ChangeOneDistance()
    assert m.info.outputs == [False, True]


def test_privacy_map_counts_changed_respondents() -> None:
    m = make_randomized_response_epsilon("1/2")
    assert m.map(1) == PureDP(Fraction(1, 2))
    assert m.map(3) == PureDP(Fraction(3, 2))
    assert m.map(0) == PureDP(0)
    assert m.map(Fraction(3, 2)) == PureDP(1)  # a fractional distance rounds up: 2 respondents


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"truth_probability": 0}, "truth_probability"),
        ({"truth_probability": 1}, "truth_probability"),
        ({"truth_probability": 1.5}, "truth_probability"),
        ({"truth_probability": -0.1}, "truth_probability"),
        ({"truth_probability": float("nan")}, "truth_probability"),
        ({"random_yes_probability": 0}, "random_yes_probability"),
        ({"random_yes_probability": 1}, "random_yes_probability"),
        ({"random_yes_probability": 2}, "random_yes_probability"),
        ({"random_yes_probability": True}, "random_yes_probability"),
    ],
)
def test_two_coin_rejects_bad_probabilities(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_randomized_response(**kwargs)
    assert info.value.parameter == parameter


@pytest.mark.parametrize("data", [[0, 2], [0.5], ["yes"], [float("nan")], [None]])
def test_binary_mechanisms_reject_non_binary_answers(data: Any) -> None:
    for m in (make_randomized_response(), make_randomized_response_epsilon(1)):
        with pytest.raises(InvalidDataError):
            m(data)


# ---------------------------------------------------------------------------- seed example
def test_seed_example_observed_30_yes_estimates_10_percent() -> None:
    """The worked example: 100 respondents, 30 'yes' reports, fair coins -> about 10%."""
    reports = np.array([True] * 30 + [False] * 70)
    estimate = estimate_proportion(reports)
    assert estimate.value == pytest.approx(0.1, abs=1e-12)  # 2·0.3 - 1/2
    assert estimate.n == 100
    assert estimate.standard_error == pytest.approx(math.sqrt(0.3 * 0.7 / 100) / 0.5)


def test_seed_example_30_true_yes_is_unbiased_over_2000_surveys() -> None:
    """100 respondents, 30 truly 'yes': E[share of yes] = 0.3·0.5 + 0.25 = 0.4 and the
    estimator averages to 0.3 (within 4 standard errors over 2000 repeated surveys)."""
    m = make_randomized_response()
    truth = np.zeros((2000, 100), dtype=bool)
    truth[:, :30] = True
    reports = m(truth)
    assert reports.shape == (2000, 100)
    shares = reports.mean(axis=1)
    estimates = 2 * shares - 0.5
    for row in range(5):  # the estimator is p̂ = 2ȳ - 1/2 for fair coins
        assert estimate_proportion(reports[row]).value == pytest.approx(estimates[row])
    variance = proportion_variance(0.3, 100)
    assert variance == pytest.approx(3 / 400)
    se_mean = math.sqrt(variance / 2000)
    assert abs(shares.mean() - 0.4) < 4 * se_mean * 0.5  # Var(ȳ) = p²·Var(p̂)
    assert abs(estimates.mean() - 0.3) < 4 * se_mean
    assert estimates.var(ddof=1) == pytest.approx(variance, rel=0.15)


def test_unfair_coins_estimator_is_unbiased() -> None:
    p, q, pi = Fraction(3, 10), Fraction(7, 10), 0.25
    m = make_randomized_response(p, q)
    truth = np.zeros((1000, 200), dtype=bool)
    truth[:, :50] = True
    reports = m(truth)
    values = np.array([estimate_proportion(row, p, q).value for row in reports])
    se_mean = math.sqrt(proportion_variance(pi, 200, p, q) / 1000)
    assert abs(values.mean() - pi) < 4 * se_mean
    sampled = proportion_variance(pi, 200, p, q, population="sampled")
    fixed = proportion_variance(pi, 200, p, q)
    assert sampled - fixed == pytest.approx(pi * (1 - pi) / 200)


def test_estimate_confidence_interval() -> None:
    estimate = Estimate(0.1, 0.05, 100)
    low, high = estimate.confidence_interval(0.05)
    assert low == pytest.approx(0.1 - 1.959964 * 0.05, abs=1e-6)
    assert high == pytest.approx(0.1 + 1.959964 * 0.05, abs=1e-6)
    with pytest.raises(InvalidParameterError):
        estimate.confidence_interval(1.5)


def test_estimators_reject_bad_input() -> None:
    with pytest.raises(InvalidDataError):
        estimate_proportion([])
    with pytest.raises(InvalidParameterError):
        estimate_proportion([True], truth_probability=0)
    with pytest.raises(InvalidDataError):
        estimate_frequencies([], 3, 1)
    with pytest.raises(InvalidDataError):
        estimate_frequencies([0, 3], 3, 1)
    with pytest.raises(InvalidParameterError):
        proportion_variance(1.5, 10)
    with pytest.raises(InvalidParameterError):
        proportion_variance(0.5, 0)
    with pytest.raises(InvalidParameterError):
        frequency_variance(0.5, 10, 3, 1, population="other")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- ε-calibrated binary
@pytest.mark.parametrize("epsilon", [Fraction(1, 10), 1, "5/2"])
def test_binary_epsilon_claim_is_exact_and_tight(epsilon: Any) -> None:
    m = make_randomized_response_epsilon(epsilon)
    assert m.loss == PureDP(epsilon if not isinstance(epsilon, str) else Fraction(epsilon))
    worst = _worst_log_ratio(m.info.output_pmf, [True, False])
    assert abs(worst - float(m.loss.epsilon)) < 1e-9
    assert m.info.output_pmf(True)[1] == pytest.approx(
        1 / (1 + math.exp(-float(Fraction(epsilon))))
    )


def test_binary_epsilon_sampler_matches_its_pmf() -> None:
    m = make_randomized_response_epsilon("3/4")
    for answer in (True, False):
        samples = m(np.full(100_000, answer))
        assert _chi_square_p(samples, [False, True], m.info.output_pmf(answer)) > P_VALUE_FLOOR


def test_binary_epsilon_exact_path(force_exact: None) -> None:
    m = make_randomized_response_epsilon(1)
    samples = m(np.ones(3000, dtype=bool))
    assert _chi_square_p(samples, [False, True], m.info.output_pmf(True)) > P_VALUE_FLOOR


def test_huge_epsilon_always_tells_the_truth() -> None:
    m = make_randomized_response_epsilon(10_000)
    truth = np.array([True, False] * 50)
    assert np.array_equal(m(truth), truth)
    g = make_generalized_randomized_response(4, 5000)
    assert np.array_equal(g(np.arange(4)), np.arange(4))


def test_split_bernoulli_for_large_gamma_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """e^{-γ} drawn as a product of e^{-split} factors: forced here for a small γ."""
    monkeypatch.setattr(rr, "_DIRECT_LIMIT", Fraction(1, 2))
    monkeypatch.setattr(rr, "_SPLIT", Fraction(1, 4))
    draws = rr._bernoulli_exp_fraction(Fraction(13, 10), 100_000)
    p = math.exp(-1.3)
    counts = np.array([np.count_nonzero(~draws), np.count_nonzero(draws)], dtype=np.float64)
    assert stats.chisquare(counts, [1e5 * (1 - p), 1e5 * p]).pvalue > P_VALUE_FLOOR


@pytest.mark.parametrize("epsilon", [0, -1, float("nan"), float("inf"), "abc", True])
def test_epsilon_mechanisms_reject_bad_epsilon(epsilon: Any) -> None:
    with pytest.raises(InvalidParameterError):
        make_randomized_response_epsilon(epsilon)
    with pytest.raises(InvalidParameterError):
        make_generalized_randomized_response(3, epsilon)


def test_binary_epsilon_reports_estimate_the_proportion() -> None:
    m = make_randomized_response_epsilon(1)
    truth = np.zeros(20_000, dtype=bool)
    truth[:6000] = True
    estimate = estimate_frequencies(m(truth), 2, 1)[1]
    assert abs(estimate.value - 0.3) < 5 * estimate.standard_error


# ---------------------------------------------------------------------------- k-ary
@pytest.mark.parametrize(("k", "epsilon"), [(2, 1), (3, "1/2"), (5, 2), (10, 4)])
def test_generalized_claim_is_exact_and_tight(k: int, epsilon: Any) -> None:
    m = make_generalized_randomized_response(k, epsilon)
    assert m.loss == PureDP(Fraction(epsilon))
    pmf = m.info.output_pmf
    for x in range(k):
        assert pmf(x).sum() == pytest.approx(1.0)
        assert pmf(x)[x] == pytest.approx(
            math.exp(float(Fraction(epsilon))) / (math.exp(float(Fraction(epsilon))) + k - 1)
        )
    worst = _worst_log_ratio(pmf, list(range(k)))
    assert abs(worst - float(Fraction(epsilon))) < 1e-9


@pytest.mark.parametrize(("k", "epsilon", "truth"), [(3, 1, 0), (5, "3/2", 3), (8, 3, 7)])
def test_generalized_sampler_matches_its_pmf(k: int, epsilon: Any, truth: int) -> None:
    m = make_generalized_randomized_response(k, epsilon)
    samples = m(np.full(100_000, truth))
    assert samples.dtype == np.int64
    assert _chi_square_p(samples, list(range(k)), m.info.output_pmf(truth)) > P_VALUE_FLOOR


def test_generalized_exact_path(force_exact: None) -> None:
    m = make_generalized_randomized_response(4, 1)
    samples = m(np.full(3000, 2))
    assert _chi_square_p(samples, list(range(4)), m.info.output_pmf(2)) > P_VALUE_FLOOR


def test_generalized_with_labels() -> None:
    labels = ["red", "green", "blue"]
    m = make_generalized_randomized_response(labels, epsilon=1)
    assert m.info.outputs == labels
    assert m("green") in labels
    out = m(np.array([["red", "blue"], ["green", "green"]]))
    assert out.shape == (2, 2)
    assert set(out.reshape(-1).tolist()) <= set(labels)
    samples = m(["blue"] * 100_000)
    assert _chi_square_p(samples, labels, m.info.output_pmf("blue")) > P_VALUE_FLOOR
    with pytest.raises(InvalidDataError):
        m(["purple"])
    with pytest.raises(InvalidDataError):
        m.info.output_pmf("purple")


def test_generalized_shapes() -> None:
    m = make_generalized_randomized_response(4, 1)
    assert isinstance(m(2), int)
    assert m(np.zeros((3, 2), dtype=np.int32)).shape == (3, 2)
    assert m(np.array([1.0, 3.0])).dtype == np.int64
    assert m(np.array([], dtype=np.int64)).shape == (0,)
    assert m.info.outputs == [0, 1, 2, 3]


@pytest.mark.parametrize("categories", [1, 0, -3, True, [], ["a"], ["a", "a"], "abc", 2.5, None])
def test_generalized_rejects_bad_categories(categories: Any) -> None:
    with pytest.raises(InvalidParameterError):
        make_generalized_randomized_response(categories, 1)


@pytest.mark.parametrize("data", [[0, 4], [-1], [1.5], [True, False], ["a"], [float("nan")]])
def test_generalized_rejects_answers_out_of_range(data: Any) -> None:
    m = make_generalized_randomized_response(4, 1)
    with pytest.raises(InvalidDataError):
        m(data)


def test_frequency_estimates_are_unbiased_with_the_analytic_variance() -> None:
    k, epsilon, n, reps = 4, 1, 1000, 800
    frequencies = np.array([0.1, 0.2, 0.3, 0.4])
    truth = np.repeat(np.arange(k), (frequencies * n).astype(int))
    m = make_generalized_randomized_response(k, epsilon)
    reports = m(np.tile(truth, (reps, 1)))
    values = np.array([estimate_frequencies(row, k, epsilon).values for row in reports])
    for j in range(k):
        variance = frequency_variance(float(frequencies[j]), n, k, epsilon)
        assert abs(values[:, j].mean() - frequencies[j]) < 4 * math.sqrt(variance / reps)
        assert values[:, j].var(ddof=1) == pytest.approx(variance, rel=0.3)
    one = estimate_frequencies(reports[0], k, epsilon)
    assert len(one) == k
    assert one.values.sum() == pytest.approx(1.0)
    assert one.confidence_intervals(0.05).shape == (k, 2)
    assert one[2].standard_error == pytest.approx(float(one.standard_errors[2]))


def test_frequency_estimates_with_labels() -> None:
    labels = ("a", "b", "c")
    m = make_generalized_randomized_response(labels, 2)
    estimate = estimate_frequencies(m(["a"] * 5000), labels, 2)
    assert estimate.categories == labels
    assert abs(estimate[0].value - 1.0) < 5 * estimate[0].standard_error
