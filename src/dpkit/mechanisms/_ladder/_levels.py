"""The ladder's level sets on the integers: breadth-first construction with a convergence
certificate, and the capped variant.

Notation (ladder.md §2). D ⊂ Z is the symmetric shift set (the neighbour set ±V in grid units)
and D0 = D ∪ {0}; m >= 0 is the dilation radius (δ in grid units). The cumulative sets are

    B_0 = [-m, m],   B_t = B_{t-1} ⊕ D0,        the levels R_0 = B_0, R_t = B_t \\ B_{t-1},

and the level of an integer k is L(k) = min{t : k ∈ B_t} (∞ if there is none). Everything is
symmetric about 0, so only the half-line [0, ∞) is stored. Δ = max D is the *period*.

Convergence certificate (ladder.md, Theorem 2). Let e_n be the end of the component of B_n that
contains 0 and E = e_n - Δ. If E >= 0 and the top window repeats,

    (B_{n+1} ∩ [E + Δ, ∞)) = (B_n ∩ [E, ∞)) + Δ,

then R_{t+1} = R_t + Δ (on the half-line) for every t >= n + 1: the levels 0..n+1 are listed and
the rest is their periodic tail.

Cap (ladder.md, Theorem 3). If no certificate appears by level T, the construction stops and
uses L'(k) = L(k) on B_T, T + 1 on [-τ, τ] \\ B_T with τ = max(B_T) + Δ, and
T + 1 + ⌈(|k| - τ)/Δ⌉ beyond. L' = min(L, T + 1 + h) with h a staircase, so it is as private as
L and agrees with it on every level up to T.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpkit.mechanisms._ladder._sets import Ranges, normalize

__all__ = [
    "LevelSets",
    "build_levels",
    "certificate",
    "level_differences",
    "shift_ranges",
    "step",
]


@dataclass(frozen=True, slots=True, eq=False)
class LevelSets:
    """Levels 0..H of a ladder on the integers, positive half-line, with a periodic tail.

    ``lo[offsets[t]:offsets[t+1]]``, ``hi[...]`` are the ranges of R_t ∩ [0, ∞) for t <= H; for
    j >= 1, R_{H+j} ∩ [0, ∞) = (R_H ∩ [0, ∞)) + j·period. Levels are symmetric: L(-k) = L(k).

    Attributes:
        lo, hi: int64 range ends, level-major, sorted within a level.
        offsets: int64 array of length H + 2.
        period: Δ >= 1, the translation of the tail per level.
        radius: m, the half-width of level 0.
        converged_at: n if the certificate holds at n (then H = n + 1), else None.
        capped_at: T if the construction was capped at T (then H = T + 2), else None.
        tops: τ_t = max(B_t) for t = 0..H.
    """

    lo: np.ndarray
    hi: np.ndarray
    offsets: np.ndarray
    period: int
    radius: int
    converged_at: int | None
    capped_at: int | None
    tops: np.ndarray

    @property
    def head(self) -> int:
        """H, the last listed level (the tail repeats it)."""
        return int(self.offsets.size - 2)

    def level_ranges(self, t: int) -> Ranges:
        """R_t ∩ [0, ∞) for any t >= 0 (tail levels by translation)."""
        h = self.head
        shift = 0
        if t > h:
            shift, t = (t - h) * self.period, h
        a, b = int(self.offsets[t]), int(self.offsets[t + 1])
        return self.lo[a:b] + shift, self.hi[a:b] + shift

    def half_counts(self) -> np.ndarray:
        """|R_t ∩ [0, ∞)| for t = 0..H (int64, exact)."""
        sizes = self.hi - self.lo + 1
        cum = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        return np.diff(cum[self.offsets])

    def full_counts(self) -> np.ndarray:
        """|R_t| for t = 0..H: twice the half-line count, minus one for 0 at level 0."""
        counts = 2 * self.half_counts()
        counts[0] -= 1
        return counts

    def pieces_per_level(self) -> np.ndarray:
        """The number of ranges of R_t on the whole line (both sides), t = 0..H."""
        per_half = np.diff(self.offsets)
        zero_piece = (self.lo[self.offsets[:-1]] == 0).astype(np.int64)  # [0, x] and [-x, 0]
        return 2 * per_half - zero_piece

    def head_pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All listed ranges of the half-line sorted by position, with their levels."""
        level = np.repeat(np.arange(self.head + 1, dtype=np.int64), np.diff(self.offsets))
        order = np.argsort(self.lo, kind="stable")
        return self.lo[order], self.hi[order], level[order]


def shift_ranges(v_lo: np.ndarray, v_hi: np.ndarray, adjacency: int = 1) -> Ranges:
    """D0 = {0} ∪ V ∪ -V, normalised (V given by integer ranges in [0, ∞))."""
    lo = np.concatenate([-v_hi, [0], v_lo]).astype(np.int64)
    hi = np.concatenate([-v_lo, [0], v_hi]).astype(np.int64)
    return normalize(lo, hi, adjacency)


def step(b: Ranges, d0: Ranges, period: int, adjacency: int = 1) -> Ranges:
    """(B ⊕ D0) ∩ [0, ∞) for a symmetric B given by its half-line part ``b`` (b_lo[0] == 0).

    The component [0, e] stands for [-e, e]; other mirrored components -[a, b] can only land in
    [0, Δ], so only those with a <= Δ are shifted.
    """
    lo, hi = b
    d_lo, d_hi = d0
    lo = lo.copy()
    lo[0] = -hi[0]  # the component containing 0 is [-e, e] on the whole line
    parts_lo = [(lo[None, :] + d_lo[:, None]).reshape(-1)]
    parts_hi = [(hi[None, :] + d_hi[:, None]).reshape(-1)]
    near = np.flatnonzero((lo > 0) & (lo <= period))
    positive = d_hi > 0
    if near.size and np.any(positive):
        parts_lo.append((-hi[near][None, :] + d_lo[positive][:, None]).reshape(-1))
        parts_hi.append((-lo[near][None, :] + d_hi[positive][:, None]).reshape(-1))
    new_lo = np.concatenate(parts_lo)
    new_hi = np.concatenate(parts_hi)
    keep = new_hi >= 0
    return normalize(np.maximum(new_lo[keep], 0), new_hi[keep], adjacency)


def certificate(old: Ranges, new: Ranges, period: int) -> bool:
    """Theorem 2's test between B_n (``old``) and B_{n+1} (``new``), half-line parts.

    True iff e_n >= Δ (e_n: end of the component containing 0, E = e_n - Δ) and
    (new ∩ [E + Δ, ∞)) == (old ∩ [E, ∞)) + Δ, compared exactly as integer arrays.
    """
    o_lo, o_hi = old
    n_lo, n_hi = new
    edge = int(o_hi[0]) - period
    if o_lo[0] != 0 or edge < 0:
        return False
    i = int(np.searchsorted(o_hi, edge))  # first component reaching the window
    j = int(np.searchsorted(n_hi, edge + period))
    if o_lo.size - i != n_lo.size - j:
        return False
    return bool(
        np.array_equal(np.maximum(o_lo[i:], edge) + period, np.maximum(n_lo[j:], edge + period))
        and np.array_equal(o_hi[i:] + period, n_hi[j:])
    )


def build_levels(
    v_lo: np.ndarray,
    v_hi: np.ndarray,
    radius: int,
    *,
    max_levels: int,
    max_ranges: int = 4_000_000,
) -> LevelSets:
    """Build the ladder on the integers for the neighbour set V (integer ranges in [0, ∞)).

    Stops at the first n where :func:`certificate` holds (exact ladder, H = n + 1), or caps at
    T = ``max_levels`` (or earlier, once more than ``max_ranges`` ranges are stored) with the
    staircase continuation of Theorem 3 (H = T + 2).
    """
    period = int(np.max(v_hi))
    d0 = shift_ranges(np.asarray(v_lo, np.int64), np.asarray(v_hi, np.int64))
    current: Ranges = (np.array([0], np.int64), np.array([radius], np.int64))
    cumulative_lo = [current[0]]
    cumulative_hi = [current[1]]
    stored = 1
    t = 0
    converged_at: int | None = None
    capped_at: int | None = None
    while True:
        if t >= max_levels or stored > max_ranges:
            capped_at = t
            break
        nxt = step(current, d0, period)
        cumulative_lo.append(nxt[0])
        cumulative_hi.append(nxt[1])
        stored += nxt[0].size
        t += 1
        if certificate(current, nxt, period):
            converged_at = t - 1
            break
        current = nxt
    if capped_at is not None:
        top = int(current[1][-1]) + period  # τ_{T+1}
        cumulative_lo += [np.array([0], np.int64), np.array([0], np.int64)]
        cumulative_hi += [np.array([top], np.int64), np.array([top + period], np.int64)]
    sizes = [a.size for a in cumulative_lo]
    b_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    b_lo = np.concatenate(cumulative_lo).astype(np.int64)
    b_hi = np.concatenate(cumulative_hi).astype(np.int64)
    r_lo, r_hi, r_off = level_differences(b_lo, b_hi, b_off)
    return LevelSets(
        lo=r_lo,
        hi=r_hi,
        offsets=r_off,
        period=period,
        radius=radius,
        converged_at=converged_at,
        capped_at=capped_at,
        tops=b_hi[b_off[1:] - 1],
    )


def level_differences(
    b_lo: np.ndarray, b_hi: np.ndarray, b_off: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R_t = B_t \\ B_{t-1} for every t at once (R_0 = B_0), given nested B_0 ⊆ B_1 ⊆ ...

    Sets are half-line integer ranges, level-major (``b_off`` delimits level t). Each component
    of B_{t-1} lies inside exactly one component of B_t (its *owner*). A component of B_t with
    no owned components is new as a whole; otherwise its new part is the run of gaps before,
    between and after the components it owns. The pieces are emitted directly in position
    order (no sort): every owned component j contributes "the gap before j" at slot 2j and, if
    it is the last one of its owner, "the gap after j" at slot 2j + 1; a component that owns
    nothing goes just before the slot of the first component owned by a later one.
    """
    levels = b_off.size - 1
    tag = np.repeat(np.arange(levels, dtype=np.int64), np.diff(b_off))
    big = np.int64(1) << np.int64(max(int(b_hi.max()).bit_length() + 1, 1))
    # new sets: levels 1..; old sets: levels 0..levels-2, tagged with the level of their new set
    new = slice(int(b_off[1]), int(b_off[-1]))
    old = slice(0, int(b_off[-2]))
    n_lo, n_hi, n_tag = b_lo[new], b_hi[new], tag[new]
    o_lo, o_hi, o_tag = b_lo[old], b_hi[old], tag[old] + 1
    owner = np.searchsorted(n_tag * big + n_lo, o_tag * big + o_lo, side="right") - 1
    count = owner.size
    first = np.ones(count, dtype=bool)
    first[1:] = owner[1:] != owner[:-1]
    last = np.ones(count, dtype=bool)
    last[:-1] = owner[1:] != owner[:-1]
    before_lo = np.where(first, n_lo[owner], np.concatenate([[0], o_hi[:-1] + 1]))
    before_hi = o_lo - 1
    after_lo = o_hi + 1
    after_hi = n_hi[owner]
    slot_lo = np.empty(2 * count, dtype=np.int64)
    slot_hi = np.empty(2 * count, dtype=np.int64)
    slot_lo[0::2], slot_hi[0::2] = before_lo, before_hi
    slot_lo[1::2], slot_hi[1::2] = after_lo, after_hi
    slot_ok = np.empty(2 * count, dtype=bool)
    slot_ok[0::2] = before_lo <= before_hi
    slot_ok[1::2] = last & (after_lo <= after_hi)
    orphan = np.ones(n_lo.size, dtype=bool)
    orphan[owner] = False
    orphans = np.flatnonzero(orphan)
    # merge orphans into the slot sequence: orphan i precedes slot 2·(#owned with owner < i)
    at = 2 * np.searchsorted(owner, orphans)
    total = 2 * count + orphans.size
    place_orphan = at + np.arange(orphans.size)
    is_slot = np.ones(total, dtype=bool)
    is_slot[place_orphan] = False
    out_lo = np.empty(total, dtype=np.int64)
    out_hi = np.empty(total, dtype=np.int64)
    out_ok = np.empty(total, dtype=bool)
    out_tag = np.empty(total, dtype=np.int64)
    out_lo[place_orphan], out_hi[place_orphan] = n_lo[orphans], n_hi[orphans]
    out_ok[place_orphan] = True
    out_tag[place_orphan] = n_tag[orphans]
    out_lo[is_slot], out_hi[is_slot], out_ok[is_slot] = slot_lo, slot_hi, slot_ok
    out_tag[is_slot] = np.repeat(o_tag, 2)
    out_lo, out_hi, out_tag = out_lo[out_ok], out_hi[out_ok], out_tag[out_ok]
    r_lo = np.concatenate([b_lo[: b_off[1]], out_lo])
    r_hi = np.concatenate([b_hi[: b_off[1]], out_hi])
    per_level = np.bincount(out_tag, minlength=levels)
    per_level[0] = int(b_off[1])
    r_off = np.concatenate([[0], np.cumsum(per_level)]).astype(np.int64)
    return r_lo, r_hi, r_off
