"""Review of issue 10: the Session's data-dependent quantiles checked at the *unit* level, on
every neighbour of small hard tables (one unit = up to k rows added or removed), through the
mechanisms' own release code (noise samplers replaced by recorders):

* smooth: the scale the release uses is a β-smooth upper bound on the unit-level local
  sensitivity (the two hypotheses of NRS07's theorem), for k = 1, 2, 3;
* PTR: the exact (ε/G, δ/G) hockey-stick divergence of the per-group output distribution
  (refusal or f + discrete Laplace), with the distance to instability read off the release;
* inverse: the exact per-group pure-DP loss ε·k/L1 of P(t) ∝ exp(−rate·len(t)).

Before this file only k = 1 was exercised for smooth sensitivity and PTR, so a release that
ignored k (β instead of β/k, distances in rows instead of units) passed the suite.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.noise
import dpkit.sensitivity._noise as noise_mod
from dpkit.analytics._dd_quantile import GroupCounts, run_lengths
from dpkit.analytics._planner.families._quantile import SMOOTH_OUTPUT_SHIFT, build
from dpkit.testing import check_finite_approx_dp, check_finite_pure_dp

HALF = Fraction(1, 2)
LO, HI = 0, 5


def _group(data: tuple[int, ...]) -> GroupCounts:
    values, counts = np.unique(np.array(data, dtype=np.int64), return_counts=True)
    return GroupCounts(values, counts, LO, HI)


def _neighbours(data: tuple[int, ...], k: int, add_values: range | tuple[int, ...]) -> Iterator:
    """Every table one unit (1..k rows) away: rows added (values from add_values) or removed."""
    seen = set()
    for j in range(1, k + 1):
        for extra in itertools.combinations_with_replacement(add_values, j):
            seen.add(tuple(sorted(data + extra)))
        for drop in itertools.combinations(range(len(data)), j):
            kept = [v for i, v in enumerate(data) if i not in drop]
            seen.add(tuple(kept))
    yield from seen


def _small_tables(max_n: int) -> list[tuple[int, ...]]:
    return [
        t
        for n in range(max_n + 1)
        for t in itertools.combinations_with_replacement(range(LO, HI + 1), n)
    ]


# ------------------------------------------------------------------------------ smooth
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("q", [HALF, Fraction(1, 4), Fraction(1)])
def test_smooth_scale_is_a_beta_smooth_bound_on_unit_sensitivity(
    k: int, q: Fraction, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = 2
    plan = build("smooth", q, LO, HI, 0, Fraction(1), Fraction(0), k * groups, k, groups, None)
    smooth = plan.params["plan"]
    assert plan.loss.epsilon <= 1  # type: ignore[attr-defined]
    assert smooth.loss.epsilon <= Fraction(1, groups)
    recorded: list[Fraction] = []

    def record(scale: Fraction, gamma: int, size: int) -> np.ndarray:
        recorded.append(Fraction(scale))
        return np.zeros(size, dtype=np.int64)

    monkeypatch.setattr(noise_mod, "cauchy_lattice", record)
    cache: dict[tuple[int, ...], tuple[Fraction, Fraction]] = {}

    def released(data: tuple[int, ...]) -> tuple[Fraction, Fraction]:
        """(f in value steps, S = scale·α in value steps) as the release computes them."""
        if data not in cache:
            value = plan.release(_group(data))
            scale = recorded.pop()
            cache[data] = (Fraction(value), scale * smooth.alpha / 2**SMOOTH_OUTPUT_SHIFT)
        return cache[data]

    growth = math.exp(float(smooth.beta) + 2.0**-29)
    for x in _small_tables(4 if k < 3 else 3):
        fx, sx = released(x)
        for y in _neighbours(x, k, range(LO, HI + 1)):
            fy, sy = released(y)
            assert abs(fx - fy) <= sx, (x, y, "S(x) below the unit-level local sensitivity")
            assert float(sy) <= growth * float(sx), (x, y, "S not β-smooth over one unit")
            assert float(sx) <= growth * float(sy), (x, y, "S not β-smooth over one unit")


# ------------------------------------------------------------------------------ PTR
def _ptr_tables() -> list[tuple[int, ...]]:
    """Runs of tied values at the median, so the distance to instability (in units of k rows)
    spans the threshold, and medians one or two rows from the edge of their run (safe per row,
    unsafe per unit): a·0, b·2, c·5 rows."""
    return [
        (0,) * a + (2,) * b + (5,) * c
        for a in (0, 3, 6, 20)
        for b in (3, 5, 8, 13, 23, 70)
        for c in (0, 3, 6)
    ]


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("q", [HALF, Fraction(9, 10)])
def test_ptr_is_exactly_eps_delta_per_group_at_unit_level(
    k: int, q: Fraction, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(The 0.9-quantile: k rows added below move its rank by about k, where the median's moves
    by k/2, so a distance counted in rows instead of units shows on it.)"""
    groups, epsilon, delta = 2, Fraction(4), Fraction(1, 10**4)
    plan = build("ptr", q, LO, HI, 0, epsilon, delta, k * groups, k, groups, Fraction(1))
    p = plan.params
    eps_g, delta_g = epsilon / groups, delta / groups
    assert p["epsilon_test"] + p["epsilon_test"] <= eps_g
    state: dict[str, Any] = {"z": 0, "scales": []}

    def test_noise(scale: Any, size: int) -> np.ndarray:
        return np.full(size, state["z"], dtype=np.int64)

    def release_noise(scale: Fraction, size: int) -> np.ndarray:
        state["scales"].append(Fraction(scale))
        return np.zeros(size, dtype=np.int64)

    monkeypatch.setattr(dpkit.noise, "discrete_laplace", test_noise)
    monkeypatch.setattr(noise_mod, "discrete_laplace_wide", release_noise)
    threshold, cap = int(p["threshold"]), int(p["cap"])
    cache: dict[tuple[int, ...], tuple[int, int, Fraction]] = {}

    def observed(data: tuple[int, ...]) -> tuple[int, int, Fraction]:
        """(min(d, cap), f, release scale) read off the release itself."""
        if data in cache:
            return cache[data]
        group = _group(data)
        low, high = threshold - cap - 1, threshold + 1  # released at high, refused at low
        state["z"] = high
        f = plan.release(group)
        assert not math.isnan(f)
        scale = state["scales"][-1]
        while high - low > 1:
            state["z"] = mid = (low + high) // 2
            if math.isnan(plan.release(group)):
                low = mid
            else:
                high = mid
        cache[data] = (threshold + 1 - high, int(f), scale)
        return cache[data]

    et = float(p["epsilon_test"])
    rate_t = math.exp(-et)

    def p_release(d: int) -> float:
        # P(d + Z > T), Z ~ discrete Laplace: P(Z >= m) = r^m/(1+r) (m >= 1), 1 − r^{1−m}/(1+r)
        m = threshold + 1 - d
        return rate_t**m / (1 + rate_t) if m >= 1 else 1 - rate_t ** (1 - m) / (1 + rate_t)

    span = 60

    def pmf(data: tuple[int, ...]) -> np.ndarray:
        d, f, scale = observed(data)
        rel = p_release(d)
        z = np.arange(-span, span + 1)
        r = math.exp(-1 / float(scale))
        dl = (1 - r) / (1 + r) * r ** np.abs(z)
        out = np.zeros(2 * span + 1 + HI - LO + 3)
        out[f - LO + 1 : f - LO + 1 + dl.size] = rel * dl
        out[0] = rel * (1 - dl.sum())  # the tails, lumped (post-processing)
        out[-1] = 1 - rel
        return out

    pairs = [(x, y) for x in _ptr_tables() for y in _neighbours(x, k, (0, 2, 5))]
    distances = {observed(x)[0] for x, _ in pairs}
    assert min(distances) <= threshold < max(distances) or q != HALF  # straddles T
    for x, y in pairs:
        (dx, fx, _), (dy, fy, _) = observed(x), observed(y)
        assert abs(dx - dy) <= 1, (x, y, "d not 1-Lipschitz per unit")
        # the test's premise: d >= 1 only where one unit moves f by at most the proposed bound
        assert dx == 0 or abs(fx - fy) <= p["bound_steps"], (x, y, "d >= 1 on an unstable table")
    result = check_finite_approx_dp(pmf, pairs, eps_g, delta_g)
    assert result.passed, result


# ------------------------------------------------------------------------------ inverse
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("q", [HALF, Fraction(1, 3), Fraction(1)])
def test_inverse_is_exactly_eps_k_over_l1_per_group(k: int, q: Fraction) -> None:
    l1 = 2 * k  # two groups of k rows
    plan = build("inverse", q, LO, HI, 0, Fraction(1), Fraction(0), l1, k, 2, None)
    rate = float(plan.params["rate"])

    @functools.cache
    def pmf(data: tuple[int, ...]) -> np.ndarray:
        first, count, length = run_lengths(_group(data), q)
        order = np.argsort(first)  # runs come data values first, then the gaps
        assert np.array_equal(np.cumsum(count[order])[:-1] + LO, first[order][1:])
        lengths = np.repeat(length[order], count[order]).astype(np.float64)
        w = np.exp(-rate * (lengths - lengths.min()))
        return w / w.sum()

    tables = _small_tables(3 if k < 3 else 2)
    pairs = [(x, y) for x in tables for y in _neighbours(x, k, range(LO, HI + 1))]
    result = check_finite_pure_dp(pmf, pairs, Fraction(k, l1))
    assert result.passed, result


# ------------------------------------------------------------------------------ Session split
@pytest.mark.parametrize(
    ("method", "extra", "text"),
    [
        ("smooth", {}, "per group at ε=0.5, k=2 rows per unit"),
        ("ptr", {"ptr_bound": 1}, "δ=5e-07 per group"),
        ("inverse", {}, "exp(-ε·len(t)/(2·4))"),
    ],
)
def test_session_splits_the_budget_over_the_groups_a_unit_touches(
    method: str, extra: dict[str, Any], text: str
) -> None:
    """G = 2 groups of k = 2 rows (L1 = 4): the calibration the tests above check is the one
    the Session compiles, and the query is charged no more than asked."""
    import pandas as pd

    import dpkit as dp
    from dpkit.analytics import Session, median

    df = pd.DataFrame({"user": [1, 1, 2], "g": [0, 1, 0], "x": [1.0, 2.0, 3.0]})
    session = Session(
        df,
        privacy_unit="user",
        budget=dp.ApproxDP(10, 1e-3),
        engine="pandas",
        max_groups=2,
        max_rows_per_group=2,
    )
    query = (
        session.query().group_by("g", keys=[0, 1]).agg(median("x", (0, 10), method=method, **extra))
    )
    assert text in session.explain(query, epsilon=1, delta=1e-6)
    assert session.compile(query, epsilon=1, delta=1e-6).loss <= dp.ApproxDP(1, 1e-6)
