"""Exact distance-k sensitivity A^(k) of the range, trimmed mean and variance, against brute force.

The reference enumerates, on the domain D = {0, ..., 6} with declared bounds [L, U] = [0, 6],
every y within k substitutions of x (values in D), computes LS_f(y) by brute force over single
substitutions and takes the max. Why a finite enumeration is exhaustive for the continuous
problem (values anywhere in [L, U]):

* LS over one substitution: the range, the trimmed mean and the variance are, as functions of the
  one substituted value v, piecewise linear and monotone (range: also constant in between),
  monotone, and a quadratic (b − m)² − (a − m)² (m = mean of the others) respectively, so the
  largest |change| is at v ∈ {L, U}, or v = m for the variance, which the reference adds exactly.
* The k-ball: the proofs in ``dpkit.sensitivity._local`` (and docs/sensitivity.md §2) show a
  maximising y moves each substituted value to L or U (both in D) and keeps the others at data
  values. If some maximiser needed a value strictly inside (L, U), the reference, which also
  tries every value of D, would still give at most the true A^(k), and the finer-grid test below
  (D' = {0, 1/2, ..., 6}) checks that interior values never beat the algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from dpkit.sensitivity import _local as local
from dpkit.sensitivity import distance_k_sensitivity, smooth_sensitivity
from dpkit.sensitivity._data import Bounds, make_statistic, prepare

L, U = 0.0, 6.0
DOMAIN = tuple(float(v) for v in range(7))
STATS = [("range", None), ("trimmed_mean", 0.2), ("trimmed_mean", 0.34), ("variance", None)]

AK = Callable[[tuple[float, ...], str, float | None, int], float]


def _f(name: str, y: tuple[float, ...], trim: float | None) -> float:
    s = sorted(y)
    n = len(s)
    if name == "range":
        return s[-1] - s[0]
    if name == "variance":
        return float(np.var(np.asarray(s)))
    t = math.floor((trim or 0.0) * n)
    return sum(s[t : n - t]) / (n - 2 * t)


def _ls(name: str, y: tuple[float, ...], trim: float | None, domain: tuple[float, ...]) -> float:
    base = _f(name, y, trim)
    best = 0.0
    for i in range(len(y)):
        others = y[:i] + y[i + 1 :]
        candidates = domain
        if name == "variance" and others:
            candidates = (*domain, sum(others) / len(others))
        for v in candidates:
            best = max(best, abs(_f(name, (*others, v), trim) - base))
    return best


def _brute(
    name: str, x: tuple[float, ...], trim: float | None, kmax: int, domain: tuple[float, ...]
) -> list[float]:
    """[A^(0), ..., A^(kmax)] by enumerating the k-balls (multisets suffice: f is symmetric)."""
    reach = {tuple(sorted(x))}
    out = []
    for _ in range(kmax + 1):
        out.append(max(_ls(name, y, trim, domain) for y in reach))
        reach |= {
            tuple(sorted((*y[:i], v, *y[i + 1 :])))
            for y in reach
            for i in range(len(y))
            for v in domain
        }
    return out


def _dpkit(x: tuple[float, ...], name: str, trim: float | None, k: int) -> float:
    kw = {"trim": trim} if trim is not None else {}
    return distance_k_sensitivity(x, name, k, lower=L, upper=U, **kw)


def _off_by_one(x: tuple[float, ...], name: str, trim: float | None, k: int) -> float:
    """Broken: uses A^(k−1) for k >= 1 (an off-by-one in the distance)."""
    return _dpkit(x, name, trim, max(k - 1, 0))


def _old_variance_bound(x: tuple[float, ...], name: str, trim: float | None, k: int) -> float:
    """The previous (U−L)²/n for k >= 1: an upper bound, not exact."""
    if name == "variance" and k >= 1:
        return (U - L) ** 2 / len(x)
    return _dpkit(x, name, trim, k)


def _mismatches(fn: AK, seed: int, cases: int = 12, kmax: int = 3) -> list[object]:
    rng = np.random.default_rng(seed)
    bad: list[object] = []
    for name, trim in STATS:
        for _ in range(cases):
            n = int(rng.integers(1, 6))
            x = tuple(float(v) for v in rng.choice(DOMAIN, n))
            brute = _brute(name, x, trim, kmax, DOMAIN)
            for k in range(kmax + 1):
                mine = fn(x, name, trim, k)
                if abs(mine - brute[k]) > 1e-9:
                    bad.append((name, trim, x, k, mine, brute[k]))
    return bad


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_a_k_equals_brute_force(seed: int) -> None:
    assert _mismatches(_dpkit, seed) == []


def test_broken_variants_are_flagged() -> None:
    assert _mismatches(_off_by_one, 0)  # A^(k−1) in place of A^(k)
    bad = _mismatches(_old_variance_bound, 0)
    assert bad and all(case[0] == "variance" for case in bad)  # type: ignore[index]


def test_interior_values_never_beat_the_algorithm() -> None:
    """Finer domain (halves, non-integer data): still equal, so L/U substitutions suffice."""
    fine = tuple(v / 2 for v in range(13))
    rng = np.random.default_rng(5)
    for name, trim in STATS:
        for _ in range(5):
            n = int(rng.integers(2, 5))
            x = tuple(float(v) for v in rng.choice(fine, n))
            brute = _brute(name, x, trim, 2, fine)
            for k in range(3):
                assert _dpkit(x, name, trim, k) == pytest.approx(brute[k], abs=1e-9)


def test_random_continuous_data_large_k() -> None:
    """k up to n + 1 on non-grid data: the variance reaches GS = (U−L)²(n−1)/n² for k >= n."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        n = int(rng.integers(2, 9))
        x = tuple(rng.uniform(L, U, n).round(3))
        values = [_dpkit(x, "variance", None, k) for k in range(n + 2)]
        assert values == sorted(values)  # A^(k) is non-decreasing in k
        assert values[n] == pytest.approx((U - L) ** 2 * (n - 1) / n**2)


def _smooth(x: tuple[float, ...], name: str, trim: float | None, beta: float) -> float:
    kw = {"trim": trim} if trim is not None else {}
    return smooth_sensitivity(x, name, beta, lower=L, upper=U, **kw)


def _smoothness_violations(s_fn: Callable[..., float], seed: int) -> list[object]:
    """Every neighbour y of x (one value replaced by any value of D): S(y) <= e^β·S(x)."""
    rng = np.random.default_rng(seed)
    bad: list[object] = []
    for name, trim in STATS:
        for _ in range(6):
            n = int(rng.integers(1, 6))
            x = tuple(float(v) for v in rng.choice(DOMAIN, n))
            for beta in (0.1, 0.7):
                sx = s_fn(x, name, trim, beta)
                for i in range(n):
                    for v in DOMAIN:
                        y = (*x[:i], v, *x[i + 1 :])
                        if s_fn(y, name, trim, beta) > math.exp(beta) * sx * (1 + 1e-12):
                            bad.append((name, x, y, beta))
    return bad


def test_smooth_is_max_over_k_and_beta_smooth() -> None:
    rng = np.random.default_rng(2)
    for name, trim in STATS:
        for _ in range(6):
            n = int(rng.integers(1, 7))
            x = tuple(float(v) for v in rng.choice(DOMAIN, n))
            for beta in (0.05, 0.5, 2.0):
                direct = max(math.exp(-k * beta) * _dpkit(x, name, trim, k) for k in range(n + 2))
                smooth = _smooth(x, name, trim, beta)
                assert direct <= smooth <= direct * (1 + 1e-8) + 1e-12
    assert _smoothness_violations(_smooth, 3) == []


def test_local_sensitivity_alone_is_flagged_as_not_smooth() -> None:
    def ls_only(x: tuple[float, ...], name: str, trim: float | None, beta: float) -> float:
        return _dpkit(x, name, trim, 0)

    assert _smoothness_violations(ls_only, 3)


def _all_vs_each(fast: Callable[[np.ndarray, Bounds], np.ndarray], seed: int) -> int:
    rng = np.random.default_rng(seed)
    bounds = Bounds.of(L, U)
    bad = 0
    for it in range(60):
        n = int(rng.integers(1, 30))
        x = rng.choice((*DOMAIN, 0.5, 2.7), n) if it % 2 else rng.uniform(-1, 7, n)
        xp = prepare(x, bounds)
        each = np.array([local._variance_ak(xp, bounds, k) for k in range(n + 1)])
        bad += not np.allclose(fast(xp, bounds), each, rtol=1e-12, atol=1e-12)
    return bad


def _ends_only(xp: np.ndarray, bounds: Bounds) -> np.ndarray:
    """Broken: no vertex search (candidates only at the ends of each index range)."""
    return local._variance_ak_all(xp, bounds, vertex_search=False)


def test_variance_all_k_matches_per_k_formula() -> None:
    """The O(n log n) all-k algorithm (vertex candidates) equals the O(n)-per-k formula."""
    assert _all_vs_each(local._variance_ak_all, 8) == 0
    assert _all_vs_each(_ends_only, 8) > 0


def test_variance_k_is_linear_time() -> None:
    x = np.random.default_rng(0).normal(3, 1, 200_000)
    xp = prepare(x, Bounds.of(L, U))
    assert make_statistic("variance").name == "variance"
    value = local._variance_ak(xp, Bounds.of(L, U), 5)
    assert 0 < value <= (U - L) ** 2 / x.size
