"""Randomized response keeps its ε-DP claim, and the checks catch versions that do not.

For each protocol — Warner's two-coin :func:`make_randomized_response`,
:func:`make_randomized_response_epsilon` and k-ary
:func:`make_generalized_randomized_response` — at several parameters:

* the exact check (:func:`dpkit.testing.check_measurement_exact` on ``info.output_pmf``, or
  the Fractions of ``info.exact_output_pmf`` when present) over *every* pair of answers passes,
  and the realised loss equals the claim (to 1e-30 with Fractions, 1e-12 with floats);
* the statistical audit of one respondent's report on two different answers passes at 100k
  reports per side (2M behind ``slow``) and certifies most of ε;
* broken versions — a map claiming half the loss, and a two-coin map that looks at the "yes"
  ratio only — are flagged by both.

Each respondent's report depends on their own answer only, with fresh randomness, so one call on
``np.full(n, answer)`` gives n i.i.d. releases of the one-respondent mechanism (the audit's
``vectorised=True``). Sampling runs under the ``seeded`` fixture: outcomes are reproducible.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

import dpkit as dp
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.errors import PrivacyCheckError
from dpkit.testing import AuditResult, audit_measurement, check_measurement_exact

pytestmark = pytest.mark.usefixtures("seeded")

CI_SAMPLES = 100_000
SLOW_SAMPLES = 2_000_000

COLOURS = ["red", "green", "blue"]

# (id, constructor). The unfair two-coin protocol (p = 1/2, q = 3/4) has P(yes|yes) = 7/8,
# P(yes|no) = 3/8, P(no|no) = 5/8, P(no|yes) = 1/8: its loss ln 5 comes from the "no" answer, the
# other ratio (7/3) is smaller; (p = 1/4, q = 1/3) is the mirror case, bound by "yes" (ln 2).
MECHANISMS: list[tuple[str, Callable[[], Measurement[Any]]]] = [
    ("two-coin-fair", lambda: dp.make_randomized_response()),
    ("two-coin-no-binds", lambda: dp.make_randomized_response(Fraction(1, 2), Fraction(3, 4))),
    ("two-coin-yes-binds", lambda: dp.make_randomized_response(Fraction(1, 4), Fraction(1, 3))),
    ("epsilon-1", lambda: dp.make_randomized_response_epsilon(1)),
    ("epsilon-1/4", lambda: dp.make_randomized_response_epsilon("1/4")),
    ("grr-labels-eps-2", lambda: dp.make_generalized_randomized_response(COLOURS, 2)),
    ("grr-k10-eps-1/2", lambda: dp.make_generalized_randomized_response(10, 0.5)),
]
IDS = [name for name, _ in MECHANISMS]
MAKERS = [make for _, make in MECHANISMS]


def epsilon_of(m: Measurement[Any]) -> Fraction:
    assert m.d_in is not None
    claim = m.map(m.d_in)
    assert isinstance(claim, PureDP)
    return claim.epsilon


def answers(m: Measurement[Any]) -> list[Any]:
    """Every possible answer: True/False, or the categories."""
    outputs = list(m.info.outputs)
    return [False, True] if outputs == [False, True] else outputs


def all_pairs(m: Measurement[Any]) -> list[tuple[Any, Any]]:
    """Every pair of distinct answers (the checks test both orders of each)."""
    return list(itertools.combinations(answers(m), 2))


def audit(m: Measurement[Any], n: int) -> AuditResult:
    """Audit one respondent's report on two different answers (the first two; for k-ary RR
    every pair of answers is alike by symmetry). Labels are audited by their index."""
    a, b, *_ = answers(m)
    labels = m.info.labels
    statistic = None if labels is None else (lambda label: float(labels.index(label)))
    return audit_measurement(m, a, b, n, vectorised=True, statistic=statistic)


def claiming_half(m: Measurement[Any]) -> Measurement[Any]:
    half = epsilon_of(m) / 2
    return dataclasses.replace(m, privacy_map=lambda d: PureDP(half * math.ceil(d)))


# ----------------------------------------------------------------------- exact check
@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_exact_check_over_every_pair_of_answers_is_tight(
    make: Callable[[], Measurement[Any]],
) -> None:
    m = make()
    result = check_measurement_exact(m, neighbour_pairs=all_pairs(m)).raise_if_failed()
    claimed = epsilon_of(m)
    assert result.claimed == claimed
    if isinstance(result.realised, Fraction):  # exact probabilities: ln to 50 digits
        # the claim is ln(ratio) rounded *up* to a fraction, by at most ~1e-35 relative
        assert 0 <= claimed - result.realised <= Fraction(1, 10**30)
    else:
        assert math.isclose(result.realised, float(claimed), rel_tol=1e-12)


def test_the_exact_fractions_are_used_when_declared() -> None:
    m = dp.make_randomized_response()
    assert m.info.exact_output_pmf is not None
    result = check_measurement_exact(m, neighbour_pairs=[(True, False)])
    assert isinstance(result.realised, Fraction)
    assert abs(result.realised - Fraction(math.log(3))) < Fraction(1, 10**15)


# ----------------------------------------------------------------------- statistical audit
@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_audit_passes_and_is_not_vacuous(make: Callable[[], Measurement[Any]]) -> None:
    m = make()
    result = audit(m, CI_SAMPLES).raise_if_failed()
    # the worst event is a single report whose ratio is the whole e^ε and whose mass is 0.1-0.9:
    # the audit certifies most of ε at this size
    assert result.epsilon_lower_bound > 0.75 * float(epsilon_of(m))


@pytest.mark.slow
@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_audit_passes_at_scale(make: Callable[[], Measurement[Any]]) -> None:
    m = make()
    result = audit(m, SLOW_SAMPLES).raise_if_failed()
    assert result.epsilon_lower_bound > 0.95 * float(epsilon_of(m))


# ----------------------------------------------------------------------- broken versions
@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_claiming_half_the_loss_is_flagged_by_both_checks(
    make: Callable[[], Measurement[Any]],
) -> None:
    m = make()
    broken = claiming_half(m)
    exact = check_measurement_exact(broken, neighbour_pairs=all_pairs(broken))
    assert not exact.passed
    assert float(exact.realised) > float(exact.claimed) * 1.99
    with pytest.raises(PrivacyCheckError, match="realised ε is"):
        exact.raise_if_failed()
    result = audit(broken, CI_SAMPLES)
    assert not result.passed
    assert result.epsilon_lower_bound > float(epsilon_of(broken))
    with pytest.raises(PrivacyCheckError, match="refutes the claim"):
        result.raise_if_failed()


def test_two_coin_map_reading_only_the_yes_ratio_is_flagged() -> None:
    """A plausible bug: ε = ln(P(yes|yes)/P(yes|no)), forgetting the "no" answer. With p = 1/2,
    q = 3/4 it claims ln(7/3) ≈ 0.85 while "no" gives ln 5 ≈ 1.61."""
    m = dp.make_randomized_response(Fraction(1, 2), Fraction(3, 4))
    wrong = Fraction(math.log(7 / 3))
    broken = dataclasses.replace(m, privacy_map=lambda d: PureDP(wrong * math.ceil(d)))
    exact = check_measurement_exact(broken, neighbour_pairs=[(True, False)])
    assert not exact.passed
    assert exact.witness[2] == 0  # output index 0: the report "no"
    assert abs(float(exact.realised) - math.log(5)) < 1e-12
    result = audit(broken, CI_SAMPLES)
    assert not result.passed and result.epsilon_lower_bound > 1.4
    assert "x == 0" in result.event  # the "no" report (False) gives it away


@pytest.mark.slow
@pytest.mark.parametrize("make", [MAKERS[0], MAKERS[3], MAKERS[5]], ids=[IDS[0], IDS[3], IDS[5]])
def test_claiming_ninety_percent_is_refuted_at_scale(make: Callable[[], Measurement[Any]]) -> None:
    m = make()
    short = epsilon_of(m) * Fraction(9, 10)
    broken = dataclasses.replace(m, privacy_map=lambda d: PureDP(short * math.ceil(d)))
    assert not check_measurement_exact(broken, neighbour_pairs=all_pairs(broken)).passed
    assert not audit(broken, SLOW_SAMPLES).passed
