"""Audits of the Session's data-dependent quantiles (inverse sensitivity, smooth sensitivity,
PTR) on hard neighbouring groups, where neighbours differ by all k rows of one unit: ties,
duplicated values, local sensitivity jumping between neighbours, a distance to instability at
the PTR threshold. Each has a broken variant the auditor flags: per-row calibration of the
inverse mechanism (k ignored), noise scaled to the local rather than the smooth sensitivity, and
a PTR test without noise."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpkit.analytics._dd_quantile import (
    GroupCounts,
    distance_to_instability,
    f_window,
    inverse_release,
    ptr_release,
)
from dpkit.analytics._planner.families._quantile import build
from dpkit.sensitivity._noise import discrete_laplace_wide
from dpkit.testing import audit_samples

HALF = Fraction(1, 2)
LO, HI = 0, 127


def _group(data: list[int], lo: int = LO, hi: int = HI) -> GroupCounts:
    values, counts = np.unique(np.array(data, dtype=np.int64), return_counts=True)
    return GroupCounts(values, counts, lo, hi)


# ------------------------------------------------------------------------------ inverse
# x: four tied rows; y: one more unit with k = 3 rows far above (duplicates): every path length
# above the ties drops by 3, below rises by 3.
X_INV = [10] * 4
Y_INV = [10] * 4 + [100] * 3


def _inverse_samples(data: list[int], rate: Fraction, size: int) -> np.ndarray:
    group = _group(data)
    return np.array([inverse_release(group, HALF, rate) for _ in range(size)], dtype=np.float64)


def test_inverse_passes_audit_on_ties_and_duplicates(seeded: None) -> None:
    plan = build("inverse", HALF, LO, HI, 0, Fraction(1), Fraction(0), 3, 3, 1, None)
    rate = plan.params["rate"]
    a, b = _inverse_samples(X_INV, rate, 3000), _inverse_samples(Y_INV, rate, 3000)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1, events="discrete").passed


def test_inverse_calibrated_per_row_is_flagged(seeded: None) -> None:
    """Broken: the utility sensitivity 1 (one row) instead of k = 3 rows of one unit."""
    rate = Fraction(1, 2)  # ε/(2·1) at ε = 1
    a, b = _inverse_samples(X_INV, rate, 3000), _inverse_samples(Y_INV, rate, 3000)
    assert not (
        audit_samples(a, b, 1, events="discrete").passed
        and audit_samples(b, a, 1, events="discrete").passed
    )


# ------------------------------------------------------------------------------ smooth
# the local sensitivity jumps: x = 0×5, 1000×4 (median 0 with a gap of 1000 next to it); adding
# one row at 0 closes the gap (LS 0) — the local-Laplace release is then exactly 0.
X_SMOOTH = [0] * 5 + [1000] * 4
Y_SMOOTH = [0] * 6 + [1000] * 4


def _smooth_samples(data: list[int], size: int) -> np.ndarray:
    plan = build("smooth", HALF, 0, 1023, 0, Fraction(1), Fraction(0), 1, 1, 1, None)
    group = _group(data, 0, 1023)
    return np.array([plan.release(group) for _ in range(size)])


def _local_laplace(data: list[int], size: int) -> np.ndarray:
    """NOT PRIVATE: f + discrete Laplace(LS(x)/ε) on the same grid (ε = 1, k = 1)."""
    group = _group(data, 0, 1023)
    local = f_window(group, HALF, 0)
    f = group.statistic(HALF)
    if local == 0:
        return np.full(size, float(f))
    noise = discrete_laplace_wide(Fraction(local), size)
    return np.array([float(f + z) for z in noise])


def test_smooth_passes_audit_where_local_sensitivity_jumps(seeded: None) -> None:
    a, b = _smooth_samples(X_SMOOTH, 1500), _smooth_samples(Y_SMOOTH, 1500)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1).passed


def test_noise_scaled_to_local_sensitivity_is_flagged(seeded: None) -> None:
    a, b = _local_laplace(X_SMOOTH, 3000), _local_laplace(Y_SMOOTH, 3000)
    assert not (audit_samples(a, b, 1).passed and audit_samples(b, a, 1).passed)


# ------------------------------------------------------------------------------ PTR
DELTA = Fraction(1, 1000)


def _ptr_pair() -> tuple[list[int], list[int], dict[str, object]]:
    """Neighbours whose distances to instability straddle the threshold: d(x) = T + 1, d(y) = T
    (y has one more row below the 31 tied rows, which moves the rank towards their edge)."""
    plan = build("ptr", HALF, LO, HI, 0, Fraction(1), DELTA, 1, 1, 1, Fraction(1))
    p = plan.params
    x = [0] * 30 + [50] * 31 + [120] * 30
    y = [0] * 31 + [50] * 31 + [120] * 30
    bound, cap = p["bound_steps"], p["cap"]
    dx = distance_to_instability(_group(x), HALF, 1, bound, cap)  # type: ignore[arg-type]
    dy = distance_to_instability(_group(y), HALF, 1, bound, cap)  # type: ignore[arg-type]
    assert (dx, dy) == (p["threshold"] + 1, p["threshold"])  # type: ignore[operator]
    return x, y, p


def _ptr_samples(data: list[int], p: dict[str, object], size: int, noisy: bool) -> np.ndarray:
    group = _group(data)
    out = []
    for _ in range(size):
        value = ptr_release(
            group,
            HALF,
            1,
            p["bound_steps"],  # type: ignore[arg-type]
            p["epsilon_test"],  # type: ignore[arg-type]
            p["threshold"],  # type: ignore[arg-type]
            p["cap"],  # type: ignore[arg-type]
            p["scale"],  # type: ignore[arg-type]
            noisy_test=noisy,
        )
        out.append(-1000.0 if value is None else float(value))  # a refusal is an output
    return np.array(out)


def test_ptr_passes_audit_at_the_threshold(seeded: None) -> None:
    x, y, p = _ptr_pair()
    a, b = _ptr_samples(x, p, 3000, True), _ptr_samples(y, p, 3000, True)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1, float(DELTA)).passed


def test_ptr_without_test_noise_is_flagged(seeded: None) -> None:
    x, y, p = _ptr_pair()
    a, b = _ptr_samples(x, p, 600, False), _ptr_samples(y, p, 600, False)
    result = audit_samples(a, b, 1, float(DELTA))
    assert not result.passed
    assert math.isinf(result.epsilon_lower_bound) or result.epsilon_lower_bound > 1


@pytest.mark.parametrize("method", ["inverse", "smooth"])
def test_releases_stay_in_the_public_range(method: str, seeded: None) -> None:
    plan = build(method, HALF, LO, HI, 0, Fraction(1), Fraction(0), 1, 1, 1, None)
    group = _group([3, 3, 3, 90])
    values = np.array([plan.release(group) for _ in range(200)])
    assert np.all(values >= LO - (HI - LO)) and np.all(values <= HI + (HI - LO))
