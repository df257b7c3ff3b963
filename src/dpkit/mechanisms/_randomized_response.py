"""Randomized response: local differential privacy for one categorical answer per respondent.

Three protocols, each a :class:`~dpkit.core._framework.Measurement` applied to every respondent's
answer independently (local DP: the randomisation happens before the answer leaves the
respondent, so the collector never sees the truth):

* :func:`make_randomized_response` – Warner's two-coin protocol (Warner 1965; Dwork & Roth 2014,
  §2.3): with probability p answer truthfully, otherwise answer "yes" with probability q. With fair
  coins it is ln 3-DP.
* :func:`make_randomized_response_epsilon` – binary randomized response calibrated to a given ε:
  the truth is reported with probability e^ε/(1+e^ε).
* :func:`make_generalized_randomized_response` – k-ary ("direct encoding") randomized response
  (Kairouz, Oh & Viswanath 2014; Wang et al. 2017): the truth with probability e^ε/(e^ε+k-1),
  otherwise one of the other k-1 categories uniformly.

Every sample is exact: rational probabilities are drawn with :func:`dpkit.noise.bernoulli` and
:func:`dpkit.noise.uniform_integers`, and the irrational e^ε-calibrated probabilities
e^ε/(e^ε+k-1) = 1/(1 + (k-1)e^{-ε}) with the exact logistic coin
:func:`dpkit.noise.bernoulli_logistic`, never by comparing a float uniform with a float
probability.

Neighbouring relation and loss: inputs are vectors of answers (one per respondent) under
:class:`~dpkit.core._spaces.ChangeOneDistance`. Each respondent's report depends on their answer
only, so changing one respondent's answer (``d_in = 1``) moves the output distribution by at most
ε, and changing d answers by d·ε (the per-respondent likelihood ratios multiply). The loss is the
guarantee each respondent gets, whoever collects or publishes the reports.

The unbiased estimators (:func:`estimate_proportion`, :func:`estimate_frequencies`) and their
analytic variances (:func:`proportion_variance`, :func:`frequency_variance`) turn the noisy reports
back into population statistics; see docs/randomized_response.md for the derivations and the
worked survey example.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from dpkit._exact import Number, check_alpha, check_epsilon, check_probability, log_upper
from dpkit.core._framework import Measurement
from dpkit.core._losses import PrivacyLoss, PureDP
from dpkit.core._spaces import AtomDomain, ChangeOneDistance, VectorDomain
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._additive import integer_input
from dpkit.mechanisms._info import RandomizedResponseInfo
from dpkit.noise import bernoulli, bernoulli_exp, bernoulli_logistic, uniform_integers

__all__ = [
    "CategoryFrequencies",
    "Estimate",
    "estimate_frequencies",
    "estimate_proportion",
    "frequency_variance",
    "make_generalized_randomized_response",
    "make_randomized_response",
    "make_randomized_response_epsilon",
    "proportion_variance",
]

_HALF = Fraction(1, 2)
_MAX_CATEGORIES = 1_000_000
# Bernoulli(e^{-γ}) for γ above _DIRECT_LIMIT is drawn as a product of Bernoulli(e^{-_SPLIT})
# factors: e^{-γ} = e^{-_SPLIT}·e^{-(γ-_SPLIT)}, so no float threshold ever underflows.
_DIRECT_LIMIT = Fraction(512)
_SPLIT = Fraction(256)


# ----------------------------------------------------------------------------- exact helpers
def _bernoulli_exp_fraction(gamma: Fraction, size: int) -> np.ndarray:
    """``size`` independent Bernoulli(e^{-γ}) draws for a rational γ >= 0, exactly, for any γ.

    For large γ the product rule e^{-γ} = e^{-256}·e^{-(γ-256)} (independent factors, AND-ed)
    keeps every threshold the sampler compares against far from float underflow.
    """
    if gamma <= _DIRECT_LIMIT:
        return np.asarray(bernoulli_exp(gamma, size), dtype=bool)
    out = np.asarray(bernoulli_exp(_SPLIT, size), dtype=bool)
    survivors = np.flatnonzero(out)
    if survivors.size:
        out[survivors] = _bernoulli_exp_fraction(gamma - _SPLIT, survivors.size)
    return out


def _k_ary_response(truth: np.ndarray, k: int, epsilon: Fraction) -> np.ndarray:
    """For each truth t in [0, k): a report R with P(R = t) = e^ε/(e^ε+k-1), else uniform.

    One exact coin per respondent decides "truth or not": P(truth) = e^ε/(e^ε+k-1) =
    1/(1 + (k-1)·e^{-ε}) is Bernoulli(1/(1 + r·e^{-γ})) with r = k-1 and γ = ε, which
    :func:`dpkit.noise.bernoulli_logistic` draws exactly. Otherwise the report is uniform on the
    k-1 other categories: an exact uniform integer u in [0, k-1), shifted past t (u + [u >= t]).
    That is exactly k-ary randomized response, with two draws per respondent whatever k and ε.
    """
    n = truth.size
    keep = np.asarray(bernoulli_logistic(Fraction(k - 1), epsilon, n), dtype=bool)
    other = np.asarray(uniform_integers(k - 1, n), dtype=np.int64)
    other += other >= truth
    return np.where(keep, truth, other).astype(np.int64)


# ----------------------------------------------------------------------------- input checking
def _as_array(data: Any, what: str, dtype: Any = None) -> np.ndarray:
    try:
        return np.asarray(data, dtype=dtype)
    except (ValueError, TypeError) as error:  # ragged nesting and the like
        raise InvalidDataError(what, f"cannot be read as an array ({error})") from None


def _binary_input(data: Any) -> tuple[np.ndarray, tuple[int, ...], bool]:
    """Answers as a flat bool array, the input's shape, and whether it was a scalar."""
    array = _as_array(data, "answers")
    if array.dtype == bool:
        flat = array.reshape(-1)
    elif array.dtype.kind in "iuf":
        flat_values = array.reshape(-1)
        if not np.all((flat_values == 0) | (flat_values == 1)):
            raise InvalidDataError(
                "answers",
                "contains values other than True/False (or 1/0)",
                "Map each answer to a bool first: True for 'yes', False for 'no'.",
            )
        flat = flat_values == 1
    else:
        raise InvalidDataError(
            "answers",
            f"expected bools (or 0/1 integers), got dtype {array.dtype}",
            "Map each answer to a bool first: True for 'yes', False for 'no'.",
        )
    return flat, array.shape, array.ndim == 0


def _check_categories(categories: int | Sequence[Any]) -> tuple[int, tuple[Any, ...] | None]:
    """(k, labels or None) for an int count or a sequence of distinct hashable labels."""
    if isinstance(categories, bool):
        raise InvalidParameterError(
            "categories", categories, "an integer k >= 2 or a sequence of at least 2 labels"
        )
    if isinstance(categories, int | np.integer):
        k = int(categories)
        if not 2 <= k <= _MAX_CATEGORIES:
            raise InvalidParameterError(
                "categories",
                categories,
                f"an integer in [2, {_MAX_CATEGORIES}]",
                "With one category there is nothing to protect; for very many categories "
                "randomized response is too noisy to be useful (use a hashing protocol).",
            )
        return k, None
    if isinstance(categories, str | bytes) or not isinstance(categories, Sequence | np.ndarray):
        raise InvalidParameterError(
            "categories",
            categories,
            "an integer k >= 2 or a sequence of at least 2 labels",
            "Pass e.g. categories=3 or categories=['red', 'green', 'blue'].",
        )
    labels = tuple(np.asarray(categories, dtype=object).reshape(-1).tolist())
    if not 2 <= len(labels) <= _MAX_CATEGORIES:
        raise InvalidParameterError(
            "categories", categories, f"a sequence of 2 to {_MAX_CATEGORIES} labels"
        )
    if not all(isinstance(label, Hashable) for label in labels):
        raise InvalidParameterError("categories", categories, "a sequence of hashable labels")
    if len(set(labels)) != len(labels):
        raise InvalidParameterError("categories", categories, "a sequence of distinct labels")
    return len(labels), labels


def _category_indices(
    data: Any, k: int, labels: tuple[Any, ...] | None
) -> tuple[np.ndarray, tuple[int, ...], bool]:
    """Answers as flat int64 indices in [0, k), the input's shape, and whether it was scalar."""
    if labels is None:
        raw = _as_array(data, "answers")
        if raw.dtype.kind == "f" and not np.all(np.isfinite(raw) & (raw == np.round(raw))):
            # a category domain, checked per answer: in the local model each answer is one
            # person's own input to their own randomiser, so a refusal reveals nothing else
            raise InvalidDataError(
                "answers",
                "contains values that are not category indices",
                "Each answer must be the index of one of the categories.",
            )
        indices = integer_input(raw, "answers")
        shape, scalar = indices.shape, indices.ndim == 0
        flat = indices.reshape(-1)
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= k):
            raise InvalidDataError(
                "answers",
                f"an answer is not a category index in [0, {k})",
                "Each answer must be the index of one of the categories.",
            )
        return flat, shape, scalar
    position = {label: i for i, label in enumerate(labels)}
    array = _as_array(data, "answers", dtype=object)
    out = np.empty(array.size, dtype=np.int64)
    for i, value in enumerate(array.reshape(-1).tolist()):
        try:
            out[i] = position[value]
        except (KeyError, TypeError):
            raise InvalidDataError(
                "answers",
                f"an answer is not one of the {len(labels)} categories",
                "Each answer must be one of the labels the mechanism was built with.",
            ) from None
    return out, array.shape, array.ndim == 0


def _per_respondent_map(epsilon: Fraction) -> Callable[[Fraction], PrivacyLoss]:
    """d answers changed: the likelihood ratios of d independent reports multiply: d·ε."""

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return PureDP(epsilon * math.ceil(d_in))

    return privacy_map


# ----------------------------------------------------------------------------- mechanisms
def make_randomized_response(
    truth_probability: Number = _HALF,
    random_yes_probability: Number = _HALF,
) -> Measurement[Any]:
    """Warner's two-coin randomized response for a yes/no question: ε = ln 3 with fair coins.

    Each respondent flips a first coin: with probability p (``truth_probability``) they answer
    truthfully; otherwise they flip a second coin and answer "yes" with probability q
    (``random_yes_probability``), whatever the truth.

    Guarantee:
        ε-DP for each respondent (local DP), with
        ε = ln max(P(yes|yes)/P(yes|no), P(no|no)/P(no|yes)), rounded up to a fraction, where
        P(yes|yes) = p + (1-p)q and P(yes|no) = (1-p)q. For p = q = 1/2: P(yes|yes) = 3/4,
        P(yes|no) = 1/4, ε = ln 3. On a vector of answers under the change-one distance, d
        changed answers cost d·ε.

    Reason:
        The only output events are "yes" and "no", and the two likelihood ratios above are the
        largest ratios between the output distributions of the two possible answers (Dwork & Roth
        2014, Claim 3.5, for fair coins). Reports of different respondents are independent and
        each depends on its own answer only.

    Accuracy:
        The fraction ȳ of "yes" reports has mean (1-p)q + p·π for a true proportion π, so
        π̂ = (ȳ - (1-p)q)/p is unbiased (:func:`estimate_proportion`), with variance
        :func:`proportion_variance`: 3/(4n) for n respondents with fair coins.

    Sampling:
        Exact: both coins are Bernoulli draws with the given rational probabilities.

    Args:
        truth_probability: p in (0, 1): the chance of answering truthfully. p = 1 would be no
            privacy at all, so it is refused.
        random_yes_probability: q in (0, 1): the chance of a random "yes". q = 0 or 1 would let
            one of the answers give the truth away, so it is refused.

    Returns:
        A Measurement taking a bool (or an array of bools / 0-1 integers, one per respondent) and
        returning the reported answers as bools of the same shape. ``info.output_pmf(x)`` is
        ``[P(False | x), P(True | x)]`` (``info.outputs == [False, True]``) and
        ``info.exact_output_pmf(x)`` the same probabilities as fractions.

    Raises:
        InvalidParameterError: a probability outside the allowed range.

    Example:
        >>> m = make_randomized_response()
        >>> round(float(m.loss.epsilon), 6)  # ln 3
        1.098612
        >>> m.info.output_pmf(True).tolist()
        [0.25, 0.75]
        >>> m([True, False, True]).shape
        (3,)
    """
    p = check_probability(truth_probability, "truth_probability", open_low=True)
    q = check_probability(random_yes_probability, "random_yes_probability")
    if p == 1:
        raise InvalidParameterError(
            "truth_probability",
            truth_probability,
            "a probability in (0, 1)",
            "With p = 1 every respondent answers truthfully: that is no privacy at all.",
        )
    if q in (0, 1):
        raise InvalidParameterError(
            "random_yes_probability",
            random_yes_probability,
            "a probability in (0, 1)",
            "With q = 0 (or 1) a 'yes' (or a 'no') can only be the truth, so it reveals the "
            "answer: the protocol would not be differentially private.",
        )
    yes_if_yes = p + (1 - p) * q
    yes_if_no = (1 - p) * q
    ratio = max(yes_if_yes / yes_if_no, (1 - yes_if_no) / (1 - yes_if_yes))
    epsilon = log_upper(ratio)

    def exact_pmf(answer: Any) -> tuple[Fraction, Fraction]:
        truth, _, _ = _binary_input(answer)
        if truth.size != 1:
            raise InvalidDataError("answer", "output_pmf takes a single answer")
        yes = yes_if_yes if truth[0] else yes_if_no
        return 1 - yes, yes

    def output_pmf(answer: Any) -> np.ndarray:
        return np.array([float(x) for x in exact_pmf(answer)], dtype=np.float64)

    def function(data: Any) -> Any:
        truth, shape, scalar = _binary_input(data)
        honest = bernoulli(p, truth.size)
        random_yes = bernoulli(q, truth.size)
        out = np.where(honest, truth, random_yes)
        return bool(out[0]) if scalar else out.reshape(shape)

    return Measurement(
        input_domain=VectorDomain(AtomDomain("bool")),
        input_metric=ChangeOneDistance(),
        output_measure="pure",
        function=function,
        privacy_map=_per_respondent_map(epsilon),
        name="randomized_response",
        d_in=Fraction(1),
        info=RandomizedResponseInfo(
            truth_probability=p,
            random_yes_probability=q,
            likelihood_ratio=ratio,
            outputs=[False, True],
            output_pmf=output_pmf,
            exact_output_pmf=exact_pmf,
        ),
    )


def make_randomized_response_epsilon(epsilon: Number) -> Measurement[Any]:
    """Binary randomized response calibrated to ε: report the truth with prob. e^ε/(1+e^ε).

    Guarantee:
        ε-DP for each respondent (local DP), exactly: the loss is the given ε, not rounded.
        On a vector of answers under the change-one distance, d changed answers cost d·ε.

    Reason:
        P(report = x | x) / P(report = x | not x) = (e^ε/(1+e^ε)) / (1/(1+e^ε)) = e^ε for both
        outputs, the largest possible ratio (Warner 1965; Kairouz, Oh & Viswanath 2014 show this
        is the optimal binary ε-LDP mechanism).

    Sampling:
        Exact: one Bernoulli(1/(1 + e^{-ε})) = Bernoulli(e^ε/(1 + e^ε)) coin per respondent,
        drawn with :func:`dpkit.noise.bernoulli_logistic`, decides whether the truth is
        reported.

    Accuracy:
        With P = e^ε/(1+e^ε), the fraction ȳ of "yes" reports has mean (1-P) + (2P-1)π, so
        π̂ = (ȳ - (1-P))/(2P-1) is unbiased: use :func:`estimate_frequencies` with k = 2 (its
        entry 1 is the proportion of True).

    Args:
        epsilon: ε > 0.

    Returns:
        A Measurement taking a bool (or an array of bools / 0-1 integers) and returning bools of
        the same shape; ``info.output_pmf(x)`` is ``[P(False | x), P(True | x)]``.

    Example:
        >>> m = make_randomized_response_epsilon(1)
        >>> m.loss
        PureDP(epsilon=Fraction(1, 1))
        >>> m.info.output_pmf(True).round(4).tolist()
        [0.2689, 0.7311]
    """
    eps = check_epsilon(epsilon)
    truth_float = 1.0 / (1.0 + math.exp(-min(float(eps), 700.0)))

    def output_pmf(answer: Any) -> np.ndarray:
        truth, _, _ = _binary_input(answer)
        if truth.size != 1:
            raise InvalidDataError("answer", "output_pmf takes a single answer")
        lie = math.exp(-float(eps)) / (1.0 + math.exp(-float(eps)))
        return np.array([truth_float, lie] if not truth[0] else [lie, truth_float])

    def function(data: Any) -> Any:
        truth, shape, scalar = _binary_input(data)
        out = _k_ary_response(truth.astype(np.int64), 2, eps) == 1
        return bool(out[0]) if scalar else out.reshape(shape)

    return Measurement(
        input_domain=VectorDomain(AtomDomain("bool")),
        input_metric=ChangeOneDistance(),
        output_measure="pure",
        function=function,
        privacy_map=_per_respondent_map(eps),
        name="randomized_response_epsilon",
        d_in=Fraction(1),
        info=RandomizedResponseInfo(
            epsilon=eps,
            truth_probability=truth_float,
            outputs=[False, True],
            output_pmf=output_pmf,
        ),
    )


def make_generalized_randomized_response(
    categories: int | Sequence[Any],
    epsilon: Number,
) -> Measurement[Any]:
    """k-ary randomized response: the truth with prob. e^ε/(e^ε+k-1), else another at random.

    Guarantee:
        ε-DP for each respondent (local DP), exactly ε. On a vector of answers under the
        change-one distance, d changed answers cost d·ε.

    Reason:
        Every output y has probability e^ε/(e^ε+k-1) if y is the answer and 1/(e^ε+k-1) if not,
        so for two answers x, x' the ratio P(y|x)/P(y|x') is e^ε, 1 or e^{-ε} (Kairouz, Oh &
        Viswanath 2014; "direct encoding" in Wang et al. 2017, USENIX Security).

    Sampling:
        Exact: one coin with P(truth) = e^ε/(e^ε+k-1) = 1/(1 + (k-1)e^{-ε})
        (:func:`dpkit.noise.bernoulli_logistic`, exact), otherwise an exact uniform draw among
        the k-1 other categories. Two draws per respondent whatever k and ε.

    Accuracy:
        With p = e^ε/(e^ε+k-1) and q = 1/(e^ε+k-1), the fraction c_j/n of reports of category j
        has mean q + (p-q)f_j, so f̂_j = (c_j/n - q)/(p-q) is unbiased
        (:func:`estimate_frequencies`), with variance
        (q(1-q) + f_j(p-q)(1-p-q)) / (n(p-q)²) (:func:`frequency_variance`).

    Args:
        categories: the number k >= 2 of categories (answers are indices 0..k-1), or the
            sequence of k distinct labels (answers and reports are labels).
        epsilon: ε > 0.

    Returns:
        A Measurement taking one answer (or an array of answers) and returning reports of the
        same shape (int64 indices, or labels). ``info.outputs`` lists the categories in order
        and ``info.output_pmf(x)`` gives the report probabilities for answer x in that order.

    Raises:
        InvalidParameterError: fewer than 2 categories, repeated labels, or a bad ε.
        InvalidDataError (when called): an answer that is not one of the categories.

    Example:
        >>> m = make_generalized_randomized_response(["red", "green", "blue"], epsilon=1)
        >>> m.loss
        PureDP(epsilon=Fraction(1, 1))
        >>> m.info.output_pmf("green").round(4).tolist()
        [0.2119, 0.5761, 0.2119]
        >>> m(["red", "blue"]).shape
        (2,)
    """
    k, labels = _check_categories(categories)
    eps = check_epsilon(epsilon)
    neg = math.exp(-min(float(eps), 745.0))
    p_float = 1.0 / (1.0 + (k - 1) * neg)
    q_float = neg / (1.0 + (k - 1) * neg)
    outputs: list[Any] = list(range(k)) if labels is None else list(labels)
    label_array = None if labels is None else np.empty(k, dtype=object)
    if label_array is not None and labels is not None:
        label_array[:] = labels

    def output_pmf(answer: Any) -> np.ndarray:
        index, _, _ = _category_indices(answer, k, labels)
        if index.size != 1:
            raise InvalidDataError("answer", "output_pmf takes a single answer")
        pmf = np.full(k, q_float)
        pmf[int(index[0])] = p_float
        return pmf

    def function(data: Any) -> Any:
        truth, shape, scalar = _category_indices(data, k, labels)
        reports = _k_ary_response(truth, k, eps)
        if label_array is not None and labels is not None:
            if scalar:
                return labels[int(reports[0])]
            return label_array[reports].reshape(shape)
        return int(reports[0]) if scalar else reports.reshape(shape)

    domain = AtomDomain("category", size=k)
    return Measurement(
        input_domain=VectorDomain(domain),
        input_metric=ChangeOneDistance(),
        output_measure="pure",
        function=function,
        privacy_map=_per_respondent_map(eps),
        name="generalized_randomized_response",
        d_in=Fraction(1),
        info=RandomizedResponseInfo(
            epsilon=eps,
            categories=k,
            labels=labels,
            truth_probability=p_float,
            other_probability=q_float,
            outputs=outputs,
            output_pmf=output_pmf,
        ),
    )


# ----------------------------------------------------------------------------- estimators
@dataclass(frozen=True, slots=True)
class Estimate:
    """An unbiased estimate of a proportion, with its (estimated) standard error.

    Attributes:
        value: the point estimate. It is unbiased, and therefore can fall outside [0, 1]; clip
            it yourself if you need a proportion (clipping introduces bias).
        standard_error: the plug-in estimate of the estimator's standard deviation.
        n: the number of reports the estimate is based on.
    """

    value: float
    standard_error: float
    n: int

    def confidence_interval(self, alpha: float = 0.05) -> tuple[float, float]:
        """A normal-approximation (1 - α) confidence interval: value ± z_{1-α/2}·standard_error.

        The normal approximation is good when n·min(ȳ, 1-ȳ) is at least ~10 (the reports are a
        sum of independent Bernoulli variables).
        """
        a = check_alpha(alpha)
        z = NormalDist().inv_cdf(1 - a / 2)
        return self.value - z * self.standard_error, self.value + z * self.standard_error


@dataclass(frozen=True, slots=True, eq=False)
class CategoryFrequencies:
    """Unbiased estimates of the frequency of every category, with standard errors.

    Attributes:
        values: f̂_j for each category j, in the order of ``categories`` (they sum to 1 exactly,
            up to float rounding, but single entries can be negative).
        standard_errors: the plug-in standard error of each f̂_j.
        categories: the categories (indices 0..k-1, or the labels).
        n: the number of reports.
    """

    values: np.ndarray
    standard_errors: np.ndarray
    categories: tuple[Any, ...]
    n: int

    def __getitem__(self, index: int) -> Estimate:
        """The estimate for the category at position ``index``."""
        return Estimate(float(self.values[index]), float(self.standard_errors[index]), self.n)

    def __len__(self) -> int:
        return len(self.categories)

    def confidence_intervals(self, alpha: float = 0.05) -> np.ndarray:
        """Per-category normal-approximation (1 - α) intervals, as a (k, 2) array.

        Each interval covers its own f_j with probability ~1 - α; for simultaneous coverage of
        all k categories use alpha/k (Bonferroni).
        """
        a = check_alpha(alpha)
        z = NormalDist().inv_cdf(1 - a / 2)
        return np.stack(
            [self.values - z * self.standard_errors, self.values + z * self.standard_errors], axis=1
        )


def estimate_proportion(
    responses: Any,
    truth_probability: Number = _HALF,
    random_yes_probability: Number = _HALF,
) -> Estimate:
    """Unbiased estimate of the true proportion of "yes" from two-coin randomized responses.

    With ȳ the fraction of "yes" reports, E[ȳ] = p·π + (1-p)q for a true proportion π, so
    π̂ = (ȳ - (1-p)q)/p is unbiased; for fair coins π̂ = 2ȳ - 1/2 (Dwork & Roth 2014, §2.3).
    The standard error is the plug-in sqrt(ȳ(1-ȳ)/n)/p, which is the exact standard deviation
    when respondents are a random sample of the population and slightly conservative for a fixed
    group of respondents (see :func:`proportion_variance`).

    Args:
        responses: the reports, as bools or 0/1 integers (any shape; all are pooled).
        truth_probability: p in (0, 1], as used by the mechanism.
        random_yes_probability: q in [0, 1], as used by the mechanism.

    Returns:
        An :class:`Estimate` (value, standard_error, n; ``.confidence_interval(alpha)``).

    Example:
        The survey of the seed example: 100 respondents, 30 "yes" reports, fair coins:

        >>> est = estimate_proportion([True] * 30 + [False] * 70)
        >>> round(est.value, 10)
        0.1
        >>> round(est.standard_error, 4)
        0.0917
    """
    p = check_probability(truth_probability, "truth_probability", open_low=True)
    q = check_probability(random_yes_probability, "random_yes_probability")
    answers, _, _ = _binary_input(responses)
    n = int(answers.size)
    if n == 0:
        raise InvalidDataError("responses", "is empty", "An estimate needs at least one report.")
    mean = float(np.count_nonzero(answers)) / n
    value = (mean - float((1 - p) * q)) / float(p)
    standard_error = math.sqrt(mean * (1.0 - mean) / n) / float(p)
    return Estimate(value, standard_error, n)


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError("n", n, "an integer >= 1 (the number of respondents)")
    return int(n)


def _check_fraction_01(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | Fraction):
        raise InvalidParameterError(name, value, "a number in [0, 1]")
    if not 0.0 <= float(value) <= 1.0:
        raise InvalidParameterError(name, value, "a number in [0, 1]")
    return float(value)


def proportion_variance(
    true_proportion: float,
    n: int,
    truth_probability: Number = _HALF,
    random_yes_probability: Number = _HALF,
    *,
    population: Literal["fixed", "sampled"] = "fixed",
) -> float:
    """The exact variance of :func:`estimate_proportion`'s value for n respondents.

    With a = P(yes|yes) = p + (1-p)q and b = P(yes|no) = (1-p)q:

    * ``population="fixed"``: a fixed group of n respondents, a fraction π of whom truly answer
      "yes"; the only randomness is the coins: Var = (π·a(1-a) + (1-π)·b(1-b)) / (n·p²). For fair
      coins a(1-a) = b(1-b) = 3/16, so Var = 3/(4n) whatever π.
    * ``population="sampled"``: respondents drawn at random from a population with proportion π:
      each report is Bernoulli(λ) with λ = pπ + (1-p)q, and Var = λ(1-λ)/(n·p²); this exceeds the
      fixed-group variance by π(1-π)/n, the sampling variance of the true answers.

    Example:
        >>> round(proportion_variance(0.3, 100), 12)  # fair coins: 3/(4n)
        0.0075
    """
    pi = _check_fraction_01(true_proportion, "true_proportion")
    count = _check_n(n)
    p = float(check_probability(truth_probability, "truth_probability", open_low=True))
    q = float(check_probability(random_yes_probability, "random_yes_probability"))
    if population == "fixed":
        a = p + (1 - p) * q
        b = (1 - p) * q
        return (pi * a * (1 - a) + (1 - pi) * b * (1 - b)) / (count * p * p)
    if population == "sampled":
        lam = p * pi + (1 - p) * q
        return lam * (1 - lam) / (count * p * p)
    raise InvalidParameterError("population", population, "'fixed' or 'sampled'")


def _grr_probabilities(k: int, epsilon: Number) -> tuple[float, float]:
    eps = check_epsilon(epsilon)
    neg = math.exp(-min(float(eps), 745.0))
    return 1.0 / (1.0 + (k - 1) * neg), neg / (1.0 + (k - 1) * neg)


def estimate_frequencies(
    reports: Any,
    k: int | Sequence[Any],
    epsilon: Number,
) -> CategoryFrequencies:
    """Unbiased estimates of every category's true frequency from k-ary randomized responses.

    With p = e^ε/(e^ε+k-1), q = 1/(e^ε+k-1) and c_j the number of reports of category j among
    n: E[c_j/n] = q + (p-q)f_j, so f̂_j = (c_j/n - q)/(p-q) is unbiased (Wang et al. 2017). The
    standard error of each is the plug-in sqrt(ŷ_j(1-ŷ_j)/n)/(p-q) with ŷ_j = c_j/n.

    Args:
        reports: the reports of :func:`make_generalized_randomized_response` (indices, or labels
            when ``k`` is a sequence of labels); for k = 2, bools are read as indices 0/1, so
            the reports of :func:`make_randomized_response_epsilon` work too.
        k: the number of categories, or the category labels, as given to the mechanism.
        epsilon: the ε the mechanism used.

    Returns:
        A :class:`CategoryFrequencies`; ``result[j]`` is the :class:`Estimate` of category j.

    Example:
        >>> est = estimate_frequencies([0, 0, 1, 2, 2, 2], 3, epsilon=2)
        >>> round(float(est.values.sum()), 10)
        1.0
    """
    count, labels = _check_categories(k)
    p, q = _grr_probabilities(count, epsilon)
    array = np.asarray(reports)
    if labels is None and count == 2 and array.dtype == bool:
        array = array.astype(np.int64)
    indices, _, _ = _category_indices(array if labels is None else reports, count, labels)
    n = int(indices.size)
    if n == 0:
        raise InvalidDataError("reports", "is empty", "An estimate needs at least one report.")
    shares = np.bincount(indices, minlength=count).astype(np.float64) / n
    values = (shares - q) / (p - q)
    errors = np.sqrt(shares * (1.0 - shares) / n) / (p - q)
    categories = tuple(range(count)) if labels is None else labels
    return CategoryFrequencies(values, errors, categories, n)


def frequency_variance(
    true_frequency: float,
    n: int,
    k: int,
    epsilon: Number,
    *,
    population: Literal["fixed", "sampled"] = "fixed",
) -> float:
    """The exact variance of one entry of :func:`estimate_frequencies` for n respondents.

    * ``population="fixed"``: a fixed group, a fraction f of whom have the category:
      Var = (q(1-q) + f(p-q)(1-p-q)) / (n(p-q)²) (Wang et al. 2017, Thm. 2).
    * ``population="sampled"``: respondents sampled at random: Var = λ(1-λ)/(n(p-q)²) with
      λ = q + (p-q)f.

    Example:
        For k = 2 and ε = 1 the fixed-group variance is e/((e-1)²·n) whatever f:

        >>> round(frequency_variance(0.3, 1000, 2, 1) * 1000, 6)
        0.920674
    """
    f = _check_fraction_01(true_frequency, "true_frequency")
    count = _check_n(n)
    k_count, _ = _check_categories(k)
    p, q = _grr_probabilities(k_count, epsilon)
    if population == "fixed":
        return (q * (1 - q) + f * (p - q) * (1 - p - q)) / (count * (p - q) ** 2)
    if population == "sampled":
        lam = q + (p - q) * f
        return lam * (1 - lam) / (count * (p - q) ** 2)
    raise InvalidParameterError("population", population, "'fixed' or 'sampled'")
