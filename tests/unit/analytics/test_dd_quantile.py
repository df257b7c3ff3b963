"""The exact pieces of the Session's data-dependent quantiles (dpkit.analytics._dd_quantile),
checked against brute force: path lengths by breadth-first search, the window bound F^(D) and the
smooth bound by enumeration, and Lemma 1 (one unit of k rows moves f by at most F^(k-1), and
F^(D)(y) <= F^(D+1)(x)) on random neighbours."""

from __future__ import annotations

import itertools
import math
from collections import deque
from fractions import Fraction

import numpy as np
import pytest

from dpkit.analytics._dd_quantile import (
    GroupCounts,
    f_window,
    path_length,
    rank_of,
    run_lengths,
    smooth_bound,
)

QS = [Fraction(0), Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(3, 5), Fraction(1)]
QS.append(Fraction(0.9))  # a float level: a huge power-of-two denominator


def _is_stat(a: int, e: int, b: int, q: Fraction, empty_ok: bool) -> bool:
    n = a + e + b
    if n == 0:
        return empty_ok
    r = rank_of(n, q)
    return a < r <= a + e


def _bfs(a: int, e: int, b: int, q: Fraction, empty_ok: bool = False, cap: int = 24) -> int:
    seen = {(a, e, b)}
    todo = deque([((a, e, b), 0)])
    while todo:
        (x, y, z), d = todo.popleft()
        if _is_stat(x, y, z, q, empty_ok):
            return d
        for dx, dy, dz in itertools.product((-1, 0, 1), repeat=3):
            if abs(dx) + abs(dy) + abs(dz) != 1:
                continue
            state = (x + dx, y + dy, z + dz)
            if min(state) < 0 or max(state) > cap or state in seen:
                continue
            seen.add(state)
            todo.append((state, d + 1))
    raise AssertionError("unreachable")  # pragma: no cover


@pytest.mark.parametrize("q", QS)
def test_path_length_is_the_breadth_first_distance(q: Fraction) -> None:
    states = [s for s in itertools.product(range(7), repeat=3) if sum(s) <= 7]
    a = np.array([s[0] for s in states], dtype=object)
    e = np.array([s[1] for s in states], dtype=object)
    b = np.array([s[2] for s in states], dtype=object)
    got = path_length(a, e, b, q)
    for state, value in zip(states, got, strict=True):
        assert value == _bfs(*state, q), (state, q)


def _expand(group: GroupCounts) -> np.ndarray:
    return np.repeat(group.values, group.counts)


def _random_group(rng: np.random.Generator, lo: int = 0, hi: int = 12) -> GroupCounts:
    n = int(rng.integers(0, 9))
    data = rng.integers(lo, hi + 1, n)
    values, counts = np.unique(data, return_counts=True)
    return GroupCounts(values, counts, lo, hi)


def _stat(data: np.ndarray, q: Fraction, lo: int) -> int:
    data = np.sort(data)
    r = rank_of(data.size, q)
    return lo if r == 0 else int(data[r - 1])


def _padded(data: np.ndarray, i: int, lo: int, hi: int) -> int:
    if i <= 0:
        return lo
    if i > data.size:
        return hi
    return int(np.sort(data)[i - 1])


@pytest.mark.parametrize("q", QS)
def test_run_lengths_match_bfs_per_candidate(q: Fraction) -> None:
    rng = np.random.default_rng(11)
    lo, hi = 0, 9
    for _ in range(25):
        group = _random_group(rng, lo, hi)
        first, count, length = run_lengths(group, q)
        assert int(count.sum()) == hi - lo + 1
        data = _expand(group)
        for f, c, ln in zip(first, count, length, strict=True):
            for t in range(int(f), int(f + c)):
                a = int(np.sum(data < t))
                e = int(np.sum(data == t))
                b = int(np.sum(data > t))
                assert ln == _bfs(a, e, b, q, empty_ok=(t == lo)), (data, t, q)


@pytest.mark.parametrize("q", QS)
def test_window_bound_and_lemma_one(q: Fraction) -> None:
    rng = np.random.default_rng(5)
    lo, hi = 0, 12
    for _ in range(60):
        group = _random_group(rng, lo, hi)
        data = _expand(group)
        r = rank_of(data.size, q)
        for d in range(0, 5):
            brute = max(
                _padded(data, b, lo, hi) - _padded(data, a, lo, hi)
                for a in range(r - d - 1, r + 1)
                for b in range(r, r + d + 2)
                if b - a <= d + 1
            )
            assert f_window(group, q, d) == brute
        # neighbours: k rows added or removed (one unit); f moves by <= F^(k-1)(x), and one row
        # changes F^(D) by at most one step of D
        k = int(rng.integers(1, 4))
        for _ in range(10):
            y = data.copy()
            for _ in range(int(rng.integers(1, k + 1))):
                if y.size and rng.random() < 0.5:
                    y = np.delete(y, int(rng.integers(0, y.size)))
                else:
                    y = np.append(y, int(rng.integers(lo, hi + 1)))
            fx, fy = _stat(data, q, lo), _stat(y, q, lo)
            assert abs(fx - fy) <= f_window(group, q, k - 1)
        # one row added or removed: F^(D)(y) <= F^(D+1)(x)
        for i in range(data.size + hi - lo + 1):
            y = np.delete(data, i) if i < data.size else np.append(data, lo + i - data.size)
            values, counts = np.unique(y, return_counts=True)
            other = GroupCounts(values, counts, lo, hi)
            for d in range(4):
                assert f_window(other, q, d) <= f_window(group, q, d + 1)


@pytest.mark.parametrize("q", QS)
def test_smooth_bound_is_the_pairwise_maximum(q: Fraction) -> None:
    rng = np.random.default_rng(9)
    lo, hi = -5, 40
    for _ in range(60):
        group = _random_group(rng, lo, hi)
        data = _expand(group)
        r = rank_of(data.size, q)
        beta, k = float(rng.uniform(0.05, 2)), int(rng.integers(1, 4))
        brute = max(
            (_padded(data, b, lo, hi) - _padded(data, a, lo, hi)) * math.exp(-beta / k * (b - a))
            for a in range(0, r + 1)
            for b in range(r, data.size + 2)
        )
        brute = max(brute, (hi - lo) * math.exp(-50))
        got = math.exp(smooth_bound(group, q, beta, k))
        assert got == pytest.approx(brute, rel=1e-12)


def test_smooth_bound_is_fast_and_exact_on_many_distinct_values() -> None:
    rng = np.random.default_rng(2)
    values = np.unique(rng.integers(0, 2**32, 20_000))
    counts = rng.integers(1, 5, values.size)
    group = GroupCounts(values, counts, 0, 2**32)
    got = smooth_bound(group, Fraction(1, 2), 0.1, 3)
    # brute force over the a-side × b-side pairs near the rank (the far pairs are tiny)
    r = rank_of(group.n, Fraction(1, 2))
    ar, av = group.a_side(r)
    br, bv = group.b_side(r)
    best = -math.inf
    for i in range(ar.size):
        with np.errstate(divide="ignore"):
            score = np.log((bv - av[i]).astype(np.float64)) - 0.1 / 3 * (br - ar[i])
        best = max(best, float(np.max(score)))
    assert got == pytest.approx(best, abs=1e-9)
