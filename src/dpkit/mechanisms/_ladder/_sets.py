"""Unions of integer ranges as sorted numpy arrays: the ladder's set arithmetic.

A set is a pair ``(lo, hi)`` of int64 arrays, sorted, with ``lo[i] <= hi[i]``. It denotes either

* a set of integers, the union of the ranges {lo[i], ..., hi[i]} (``adjacency=1``: ranges are
  *disjoint and not adjacent*, lo[i+1] >= hi[i] + 2, so every maximal run of integers is one
  range), or
* a closed subset of the real line, the union of the intervals [lo[i], hi[i]] (``adjacency=0``:
  intervals are disjoint, lo[i+1] > hi[i]).

Every operation is vectorised (sorting, running maxima, searchsorted); none loops over points
or ranges in Python. All arithmetic is on exact int64 integers; callers keep magnitudes below
2^62.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "Ranges",
    "contains",
    "count",
    "difference",
    "is_subset",
    "minkowski",
    "normalize",
]

Ranges = tuple[np.ndarray, np.ndarray]

_EMPTY = np.zeros(0, dtype=np.int64)


def normalize(lo: np.ndarray, hi: np.ndarray, adjacency: int = 1) -> Ranges:
    """Sort ranges by their low end and merge those that overlap (or touch, see module doc).

    Merging: after sorting, a range starts a new component iff its low end exceeds the running
    maximum of the high ends before it by more than ``adjacency``.
    """
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    if lo.size == 0:
        return _EMPTY, _EMPTY
    order = np.argsort(lo, kind="stable")
    lo = lo[order]
    run = np.maximum.accumulate(hi[order])
    start = np.empty(lo.size, dtype=bool)
    start[0] = True
    np.greater(lo[1:], run[:-1] + adjacency, out=start[1:])
    first = np.flatnonzero(start)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = lo.size - 1
    return lo[first], run[last]


def minkowski(a: Ranges, b: Ranges, adjacency: int = 1) -> Ranges:
    """A ⊕ B = {x + y}: the normalised union of all pairwise sums [a_lo + b_lo, a_hi + b_hi].

    For integer ranges this is exact because the integer points of a sum of two integer ranges
    are the sums of their integer points.
    """
    a_lo, a_hi = a
    b_lo, b_hi = b
    lo = (a_lo[None, :] + b_lo[:, None]).reshape(-1)
    hi = (a_hi[None, :] + b_hi[:, None]).reshape(-1)
    return normalize(lo, hi, adjacency)


def count(ranges: Ranges) -> int:
    """The number of integers in a set of integer ranges (exact, Python int)."""
    lo, hi = ranges
    return int(np.sum(hi - lo + 1, dtype=np.int64)) if lo.size else 0


def _sweep(parts: list[tuple[Ranges, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints and the value of Σ weight·1[x in part] on [bp[i], bp[i+1]) (integers)."""
    positions = []
    deltas = []
    for (lo, hi), weight in parts:
        positions += [lo, hi + 1]
        deltas += [np.full(lo.size, weight, dtype=np.int64), np.full(lo.size, -weight, np.int64)]
    pos = np.concatenate(positions)
    delta = np.concatenate(deltas)
    order = np.argsort(pos, kind="stable")
    pos = pos[order]
    value = np.cumsum(delta[order])
    keep = np.empty(pos.size, dtype=bool)
    if pos.size:
        keep[-1] = True
        np.not_equal(pos[1:], pos[:-1], out=keep[:-1])
    return pos[keep], value[keep]


def _where(bp: np.ndarray, value: np.ndarray, mask: np.ndarray) -> Ranges:
    """Integer ranges [bp[i], bp[i+1] - 1] where ``mask[i]``, merged."""
    if bp.size < 2:
        return _EMPTY, _EMPTY
    idx = np.flatnonzero(mask[:-1])
    return normalize(bp[idx], bp[idx + 1] - 1, 1)


def difference(a: Ranges, b: Ranges) -> Ranges:
    """A minus B for sets of integers."""
    if a[0].size == 0:
        return _EMPTY, _EMPTY
    if b[0].size == 0:
        return a
    bp, value = _sweep([(a, 2), (b, -1)])
    return _where(bp, value, value == 2)


def is_subset(a: Ranges, b: Ranges) -> bool:
    """Whether every integer of A is in B."""
    if a[0].size == 0:
        return True
    if b[0].size == 0:
        return False
    _, value = _sweep([(a, 2), (b, -1)])
    return not bool(np.any(value == 2))


def contains(ranges: Ranges, points: np.ndarray) -> np.ndarray:
    """Membership of integer points (vectorised binary search)."""
    lo, hi = ranges
    points = np.asarray(points, dtype=np.int64)
    if lo.size == 0:
        return np.zeros(points.shape, dtype=bool)
    i = np.searchsorted(lo, points, side="right") - 1
    inside = i >= 0
    j = np.clip(i, 0, None)
    return inside & (points <= hi[j])
