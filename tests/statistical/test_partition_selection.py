"""Partition selection releases a key held by one unit with probability at most its δ.

A query that groups by private keys releases a group only when its noisy count of distinct units,
``count + Z`` with Z discrete Laplace of scale t = m/ε_sel (m = max_groups, the number of groups
one unit can touch), reaches the threshold ``T = 1 + ⌈t·ln(m/δ_sel)⌉``. Keys that only one unit
holds exist in one neighbour and not the other; releasing any of them is the "bad event" whose
probability is the δ of selection. One unit holds at most m such keys, each released
independently with probability p = P(1 + Z >= T), so the bad event has probability
1 - (1 - p)^m, which must be at most δ_sel (the δ the planner's loss split charges for selection).

* The exact test reads t (from the compiled selection measurement's declared noise), T (the
  compiled threshold) and δ_sel (the compiled loss split) from the planner, computes p in closed
  form with 60-digit mpmath (P(Z >= k) = α^k/(1 + α), α = e^{-1/t}, k >= 0), and checks the bad
  event's probability is <= δ_sel, for several (m, ε, δ) and both aggregation families (the
  Gaussian one keeps δ/2 for selection). Mutants killed: threshold 1, ln(1/δ) for ln(m/δ).
* The end-to-end test runs a Session on 4,000 units that each hold max_groups = 3 keys of their
  own and counts the units with at least one released key: at most δ_sel plus 5 standard
  errors. Under the ln(1/δ) mutant the rate is ~0.14 against δ_sel = 0.1 (about 10 σ above).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, count
from dpkit.analytics._planner import CompiledQuery
from dpkit.analytics._query import Query
from dpkit.noise._distributions import DiscreteLaplace

mpmath.mp.dps = 60


def _session(df: pd.DataFrame, budget: dp.ApproxDP) -> Session:
    return Session(df, "user", budget)


def _compiled(m: int, epsilon: Fraction, delta: Fraction, mechanism: str) -> CompiledQuery:
    schema_frame = pd.DataFrame({"user": [1], "k": ["a"]})
    session = _session(schema_frame, dp.ApproxDP(epsilon, delta))
    query = Query().group_by("k").bound(max_groups=m, max_rows_per_group=1).agg(count())
    measurement = session.compile(query, epsilon=epsilon, delta=delta, mechanism=mechanism)  # type: ignore[arg-type]
    assert measurement.compiled is not None
    return measurement.compiled


def _release_probability(scale: Fraction, threshold: int) -> mpmath.mpf:
    """P(1 + Z >= threshold) for Z discrete Laplace of the given scale, exactly to 60 digits."""
    alpha = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
    k = threshold - 1  # Z >= k
    if k <= 0:  # P(Z >= k) = 1 - P(Z <= k - 1) = 1 - α^{1-k}/(1 + α)
        return 1 - alpha ** (1 - k) / (1 + alpha)
    return alpha**k / (1 + alpha)


CASES = [
    # (max_groups m, ε, δ)
    (1, Fraction(1), Fraction(1, 10**6)),
    (2, Fraction(1), Fraction(1, 10**6)),
    (3, Fraction(1, 2), Fraction(1, 10**5)),
    (5, Fraction(1), Fraction(1, 10**6)),
    (10, Fraction(2), Fraction(1, 10**9)),
    (50, Fraction(1, 10), Fraction(1, 10**4)),
    (200, Fraction(8), Fraction(1, 10**7)),
]


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
@pytest.mark.parametrize(("m", "epsilon", "delta"), CASES)
def test_a_key_held_by_one_unit_is_released_with_probability_at_most_delta(
    m: int, epsilon: Fraction, delta: Fraction, mechanism: str
) -> None:
    compiled = _compiled(m, epsilon, delta, mechanism)
    assert compiled.selection is not None
    selection_loss = compiled.split["partition selection"]
    assert isinstance(selection_loss, dp.ApproxDP)
    sel_delta = selection_loss.delta
    assert 0 < sel_delta <= delta
    measurement = compiled.selection.measurement
    lattice = measurement.noise.lattice
    assert isinstance(lattice, DiscreteLaplace)
    # the noise must hide one unit's m counts within the selection's ε (L1 distance m)
    assert measurement.noise.exponent == 0
    assert m / lattice.scale <= selection_loss.epsilon
    p = _release_probability(lattice.scale, compiled.selection_threshold)
    bad_event = 1 - (1 - p) ** m  # any of the unit's m own keys released
    assert bad_event <= mpmath.mpf(sel_delta.numerator) / sel_delta.denominator, (
        f"m={m}, ε={epsilon}, δ={delta}: a unit's own keys are released with probability "
        f"{mpmath.nstr(bad_event, 6)} > δ_sel = {float(sel_delta):.3g} (threshold "
        f"{compiled.selection_threshold}, scale {float(lattice.scale):.4g})"
    )


def test_selection_end_to_end_releases_single_unit_keys_rarely(seeded: None) -> None:
    """4,000 units, each the only holder of 3 keys (max_groups = 3): count the units whose keys
    leak. Large δ = 0.1 makes the rate measurable (expected ≈ 0.05 here)."""
    m, units = 3, 4000
    epsilon, delta = Fraction(1), Fraction(1, 10)
    user = np.repeat(np.arange(units), m)
    slot = np.tile(np.arange(m), units)
    df = pd.DataFrame({"user": user, "k": [f"u{u}-{j}" for u, j in zip(user, slot, strict=True)]})
    session = _session(df, dp.ApproxDP(epsilon, delta))
    query = session.query().group_by("k").bound(max_groups=m, max_rows_per_group=1).agg(count())
    release = session.evaluate(query, epsilon=epsilon, delta=delta, mechanism="laplace")
    sel = release.split["partition selection"]
    assert isinstance(sel, dp.ApproxDP)
    leaked_units = {key.split("-")[0] for key in release.table["k"]}
    rate = len(leaked_units) / units
    bound = float(sel.delta)
    allowed = bound + 5 * math.sqrt(bound * (1 - bound) / units)
    assert rate <= allowed, (
        f"{len(leaked_units)} of {units} units had a key only they hold released: rate {rate:.4f}"
        f" > δ_sel {bound} + 5 standard errors ({allowed:.4f})"
    )
