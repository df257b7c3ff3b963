"""Private selection keeps its ε-DP claim, and the checks catch versions that do not.

For :func:`make_exponential`, :func:`make_report_noisy_max` (Gumbel and exponential noise) and
:func:`make_permute_and_flip`, at (ε, Δu) = (1, 1), (1/2, 3), (2, 1/4):

* the exact check (:func:`dpkit.testing.check_measurement_exact` on ``info.output_pmf``) over
  base utility vectors u with k <= 4 candidates and *every* vertex neighbour u + Δu·s,
  s ∈ {-1, 0, 1}^k, passes, and the realised loss is the claim to 1e-9 (so the check is
  meaningful: these pairs come arbitrarily close to the worst case);
* the statistical audit on a worst-case pair passes at 100k releases per side (2M behind
  ``slow``) and certifies most of the pair's loss;
* broken versions — a map claiming half the loss, and ``monotonic=True`` used on a utility that
  is not monotone (real loss 2ε) — are flagged by both.

A 2-d array of utilities releases one index per row, each row with fresh randomness, so one call
on ``np.tile(u, (n, 1))`` gives n i.i.d. releases. Sampling runs under the ``seeded`` fixture:
outcomes are reproducible.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.errors import PrivacyCheckError
from dpkit.testing import AuditResult, audit_samples, check_measurement_exact

pytestmark = pytest.mark.usefixtures("seeded")

CI_SAMPLES = 100_000
SLOW_SAMPLES = 2_000_000

Maker = Callable[..., Measurement[Any]]


def rnm_gumbel(epsilon: Any, sensitivity: Any, **kwargs: Any) -> Measurement[Any]:
    return dp.make_report_noisy_max(epsilon, sensitivity, noise="gumbel", **kwargs)


def rnm_exponential(epsilon: Any, sensitivity: Any, **kwargs: Any) -> Measurement[Any]:
    return dp.make_report_noisy_max(epsilon, sensitivity, noise="exponential", **kwargs)


# (id, maker, whether its output distribution is the exponential mechanism's; else it is
# permute-and-flip's)
MAKERS: list[tuple[str, Maker, bool]] = [
    ("exponential", dp.make_exponential, True),
    ("rnm-gumbel", rnm_gumbel, True),
    ("rnm-exponential", rnm_exponential, False),
    ("permute-and-flip", dp.make_permute_and_flip, False),
]
MAKER_IDS = [name for name, _, _ in MAKERS]
MAKER_PARAMS = [(make, exponential) for _, make, exponential in MAKERS]
SETTINGS = [
    (Fraction(1), Fraction(1)),
    (Fraction(1, 2), Fraction(3)),
    (Fraction(2), Fraction(1, 4)),
]
SETTING_IDS = ["eps1-du1", "eps0.5-du3", "eps2-du0.25"]


def epsilon_of(m: Measurement[Any]) -> Fraction:
    assert m.d_in is not None
    claim = m.map(m.d_in)
    assert isinstance(claim, PureDP)
    return claim.epsilon


def base_vectors(epsilon: Fraction, sensitivity: Fraction) -> list[np.ndarray]:
    """Utility vectors to perturb, in units of Δu. ``far`` puts candidate 0 so far below the
    others (c·gap = 30 nats, c = ε/(2Δu)) that moving it down by Δu and the others up by Δu
    changes P(0) by e^ε up to e^-30 relative: the exponential mechanism's supremum, nearly
    attained. Ties, k = 4 and an arithmetic ladder cover the rest."""
    far = float(60 / epsilon)
    units = [[0, 0], [0, 0, 0, 0], [0, 1, 2, 3], [0, 1, 1], [5, 0, 0, 0], [0, far, far, far]]
    return [np.asarray(u, dtype=np.float64) * float(sensitivity) for u in units]


def vertex_pairs(
    bases: Iterable[np.ndarray], sensitivity: Fraction, signs: Iterable[tuple[int, ...]] | None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(u, u + Δu·s) for every base u and every s in ``signs`` (default {-1, 0, 1}^k)."""
    pairs = []
    for u in bases:
        options = signs if signs is not None else itertools.product((-1, 0, 1), repeat=u.size)
        step = float(sensitivity)
        pairs += [
            (u, u + step * np.asarray(s, dtype=np.float64)) for s in options if len(s) == u.size
        ]
    return pairs


def monotone_signs(k_max: int = 4) -> list[tuple[int, ...]]:
    """Sign vectors of monotone neighbours: all coordinates up (or unchanged), or all down."""
    out: list[tuple[int, ...]] = []
    for k in range(1, k_max + 1):
        out += itertools.product((0, 1), repeat=k)
        out += itertools.product((-1, 0), repeat=k)
    return out


def worst_pair(exponential: bool, epsilon: Fraction, sensitivity: Fraction, monotonic: bool) -> Any:
    """A neighbouring pair whose loss on output 0 is (close to) the mechanism's worst case while
    P(0) stays large enough to estimate; c is the coefficient (ε/(2Δu), or ε/Δu if monotonic).

    * Permute-and-flip: u = (0, 0) vs u' = (-Δu, Δu). On u both coins are sure heads and
      P(0) = 1/2; on u' candidate 0's coin is e^{-2cΔu} and P(0) = e^{-2cΔu}/2: the ratio is
      e^{2cΔu} = e^ε exactly (e^{2ε} if the monotone coefficient is misused).
    * Exponential mechanism: P(0) = 1/(1 + W) with W the others' weight. Moving candidate 0 down
      and the other up by Δu multiplies W by e^{2cΔu}, so the ratio (1 + W e^{2cΔu})/(1 + W)
      approaches e^ε only as W → ∞, i.e. as P(0) → 0. u = (0, a) with c·a = 2 (W = e²) gives
      0.90-0.98 of ε with P(0) ≈ 0.12, which maximises the audit's certified bound at 100k
      releases (the bound loses ~3.3 standard errors of ln P(0)).
    """
    if not exponential:
        return np.array([0.0, 0.0]), np.array([-float(sensitivity), float(sensitivity)])
    coefficient = epsilon / sensitivity if monotonic else epsilon / (2 * sensitivity)
    a = float(2 / coefficient)
    d = float(sensitivity)
    return np.array([0.0, a]), np.array([-d, a + d])


def pair_loss(m: Measurement[Any], u: np.ndarray, v: np.ndarray) -> float:
    p, q = m.info.output_pmf(u), m.info.output_pmf(v)
    return float(np.max(np.abs(np.log(p) - np.log(q))))


def audit(m: Measurement[Any], u: np.ndarray, v: np.ndarray, n: int) -> AuditResult:
    """Audit ``m``'s claim at its d_in on n i.i.d. releases for each of u and v (one per row)."""
    a = m(np.tile(u, (n, 1)))
    b = m(np.tile(v, (n, 1)))
    return audit_samples(a, b, epsilon_of(m))


# ----------------------------------------------------------------------- exact check
@pytest.mark.parametrize(("epsilon", "sensitivity"), SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_exact_check_over_every_vertex_neighbour_is_tight(
    make: Maker, exponential: bool, epsilon: Fraction, sensitivity: Fraction
) -> None:
    m = make(epsilon, sensitivity)
    pairs = vertex_pairs(base_vectors(epsilon, sensitivity), sensitivity, None)
    result = check_measurement_exact(m, neighbour_pairs=pairs).raise_if_failed()
    assert result.claimed == epsilon
    assert math.isclose(result.realised, float(epsilon), rel_tol=1e-9)
    if not exponential:  # permute-and-flip attains ε exactly, already at u = (0, 0)
        two = [pair for pair in pairs if pair[0].size == 2]
        realised = check_measurement_exact(m, neighbour_pairs=two).realised
        assert math.isclose(realised, float(epsilon), rel_tol=1e-12)


@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_monotonic_claim_holds_on_monotone_neighbours_and_is_tight(
    make: Maker, exponential: bool
) -> None:
    epsilon, sensitivity = Fraction(1), Fraction(2)
    m = make(epsilon, sensitivity, monotonic=True)
    # with coefficient ε/Δu, 30 nats below the others is a gap of 30·Δu/ε
    bases = [*base_vectors(epsilon, sensitivity)[:-1], np.array([0.0, 60.0, 60.0, 60.0])]
    pairs = vertex_pairs(bases, sensitivity, monotone_signs())
    result = check_measurement_exact(m, neighbour_pairs=pairs).raise_if_failed()
    assert math.isclose(result.realised, float(epsilon), rel_tol=1e-9)


# ----------------------------------------------------------------------- statistical audit
@pytest.mark.parametrize(("epsilon", "sensitivity"), SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_audit_on_a_worst_case_pair_passes_and_is_not_vacuous(
    make: Maker, exponential: bool, epsilon: Fraction, sensitivity: Fraction
) -> None:
    m = make(epsilon, sensitivity)
    u, v = worst_pair(exponential, epsilon, sensitivity, monotonic=False)
    loss = pair_loss(m, u, v)
    assert loss >= (0.89 if exponential else 0.999999) * float(epsilon)
    result = audit(m, u, v, CI_SAMPLES).raise_if_failed()
    # certified at this size (over seeds): 0.85-0.97 of the pair's loss, except 0.71-0.85 for
    # the exponential mechanism at ε = 1/2, where the two probabilities are close
    assert result.epsilon_lower_bound > (0.6 if exponential else 0.8) * loss


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "sensitivity"), SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_audit_passes_at_scale(
    make: Maker, exponential: bool, epsilon: Fraction, sensitivity: Fraction
) -> None:
    m = make(epsilon, sensitivity)
    u, v = worst_pair(exponential, epsilon, sensitivity, monotonic=False)
    result = audit(m, u, v, SLOW_SAMPLES).raise_if_failed()
    assert result.epsilon_lower_bound > 0.9 * pair_loss(m, u, v)


@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_monotonic_audit_on_a_monotone_pair_passes(make: Maker, exponential: bool) -> None:
    """Monotone worst case: only the others move up, u = (0, a) vs (0, a + Δu) (a = 0 for
    permute-and-flip: P(0) goes from 1/2 to e^{-ε}/2)."""
    epsilon, sensitivity = Fraction(1), Fraction(1)
    m = make(epsilon, sensitivity, monotonic=True)
    a = 2.0 if exponential else 0.0
    u, v = np.array([0.0, a]), np.array([0.0, a + 1.0])
    result = audit(m, u, v, CI_SAMPLES).raise_if_failed()
    assert result.epsilon_lower_bound > 0.7 * pair_loss(m, u, v)


# ----------------------------------------------------------------------- broken versions
@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_claiming_half_the_loss_is_flagged_by_both_checks(make: Maker, exponential: bool) -> None:
    epsilon, sensitivity = Fraction(1), Fraction(1)
    m = make(epsilon, sensitivity)
    broken = dataclasses.replace(m, privacy_map=lambda d: PureDP(epsilon / 2 * d / sensitivity))
    pairs = vertex_pairs(base_vectors(epsilon, sensitivity), sensitivity, None)
    exact = check_measurement_exact(broken, neighbour_pairs=pairs)
    assert not exact.passed
    assert math.isclose(exact.realised, 1.0, rel_tol=1e-9) and exact.claimed == Fraction(1, 2)
    with pytest.raises(PrivacyCheckError, match="realised ε is"):
        exact.raise_if_failed()
    u, v = worst_pair(exponential, epsilon, sensitivity, monotonic=False)
    result = audit(broken, u, v, CI_SAMPLES)
    assert not result.passed and result.epsilon_lower_bound > 0.5
    with pytest.raises(PrivacyCheckError, match="refutes the claim"):
        result.raise_if_failed()


@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_monotonic_misuse_on_a_non_monotone_utility_is_flagged(
    make: Maker, exponential: bool
) -> None:
    """``monotonic=True`` is the caller's promise. Broken, it halves the noise for utilities
    whose scores move in opposite directions, and the real loss reaches 2ε."""
    epsilon, sensitivity = Fraction(1), Fraction(1)
    m = make(epsilon, sensitivity, monotonic=True)
    bases = [*base_vectors(epsilon, sensitivity)[:-1], np.array([0.0, 30.0, 30.0, 30.0])]
    exact = check_measurement_exact(m, neighbour_pairs=vertex_pairs(bases, sensitivity, None))
    assert not exact.passed
    assert math.isclose(exact.realised, 2.0, rel_tol=1e-9)
    u, v = worst_pair(exponential, epsilon, sensitivity, monotonic=True)
    result = audit(m, u, v, CI_SAMPLES)
    assert not result.passed and result.epsilon_lower_bound > 1.0


@pytest.mark.slow
@pytest.mark.parametrize(("make", "exponential"), MAKER_PARAMS, ids=MAKER_IDS)
def test_claiming_ninety_percent_of_the_pair_loss_is_refuted_at_scale(
    make: Maker, exponential: bool
) -> None:
    epsilon, sensitivity = Fraction(1), Fraction(1)
    m = make(epsilon, sensitivity)
    u, v = worst_pair(exponential, epsilon, sensitivity, monotonic=False)
    short = Fraction(0.9 * pair_loss(m, u, v))
    broken = dataclasses.replace(m, privacy_map=lambda d: PureDP(short * d / sensitivity))
    assert not check_measurement_exact(broken, neighbour_pairs=[(u, v)]).passed
    assert not audit(broken, u, v, SLOW_SAMPLES).passed
