"""Sums whose per-row values are declared to lie in a union of intervals: what one privacy unit
can do to a group's sum, and which noise (geometric, staircase or ladder) to add for it.

On the grid of spacing g = 2^e, the declared set V becomes integer ranges U (each interval
[a, b] widened outward to [⌊a/g⌋, ⌈b/g⌉]); the engines round each value to the grid and move it
to the nearest integer of U (:attr:`~dpkit.analytics._engines._base.ValueSpec.allowed`), so every
row adds an element of U to its group's exact integer sum, and a NULL (or a row that is not
there) adds 0.

One privacy unit keeps at most c rows in a group (``Contribution.rows_per_group``), in at most m
groups (``Contribution.groups``), at most L1 rows in all (``Contribution.rows_l1``). Adding or
removing it moves each group sum it touches by ±s with s in the **c-fold sumset**

    S_c = (U ∪ {0}) ⊕ ... ⊕ (U ∪ {0})     (c times)

and touches at most m groups. Three pure-DP noises are compared, per group, in grid units:

* ``geometric`` — discrete Laplace for the vector of group sums at L1 sensitivity L1·max|U|,
  with the whole ε;
* ``staircase`` — the lattice staircase with period D = max|S_c| = c·max|U| in each group at
  ε/m (a shift of at most D moves its level by at most one; at most m groups move);
* ``ladder`` — the ladder on the integers for the neighbour set {|s| : s ∈ S_c}
  (:func:`dpkit.mechanisms.make_discrete_ladder`) in each group at ε/m (a shift in ±S_c
  moves its level by at most one; at most m groups move).

Each is ε-DP for one unit added or removed; the one with the smallest E|noise| is used, the
ladder only if it beats the better of the other two by more than 0.1% (at V = [0, Δ] the ladder
*is* the staircase, and ties go to the simpler mechanism). S_c is built exactly, interval by
interval; when c > 64 or it has more than 2,048 ranges the ladder is not considered (gaps have
long closed by then: the sums of many values fill them), and the explanation says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit.core._framework import Measurement, MechanismInfo
from dpkit.core._losses import PureDP
from dpkit.core._spaces import AtomDomain, SymmetricDistance, VectorDomain
from dpkit.errors import DPError, InternalError
from dpkit.mechanisms import LadderInfo, StaircaseInfo, make_geometric
from dpkit.mechanisms._ladder_mechanism import LadderLattice, make_discrete_ladder
from dpkit.mechanisms._staircase import DiscreteStaircase, staircase_optimal_gamma
from dpkit.noise._distributions import GridNoise
from dpkit.noise._grid import grid_spacing

__all__ = [
    "LADDER_MARGIN",
    "MAX_FOLD",
    "MAX_RANGES",
    "NoiseChoice",
    "choose_noise",
    "describe_choice",
    "fold",
    "grid_ranges",
    "magnitudes",
    "merge_ranges",
    "sumset",
]

Ranges = tuple[tuple[int, int], ...]

LADDER_MARGIN = 1e-3
"""The ladder replaces a simpler noise only if its E|noise| is smaller by more than this share."""
MAX_FOLD = 64
"""The ladder is considered for at most this many rows per unit in a group."""
MAX_RANGES = 2048
"""... and when the c-fold sumset has at most this many integer ranges."""
_MAX_LADDER_EPSILON = Fraction(100)
_MAX_STAIRCASE_PERIOD = 2**50


def merge_ranges(pairs: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted integer ranges with overlapping or adjacent ones merged ({0..3} ∪ {4..5} = {0..5})."""
    ordered = sorted(pairs)
    if not ordered:
        return ()
    out = [list(ordered[0])]
    for lo, hi in ordered[1:]:
        if lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def grid_ranges(values: Sequence[tuple[Fraction, Fraction]], exponent: int) -> Ranges:
    """The declared intervals widened outward to the grid 2^exponent, in grid units."""
    g = grid_spacing(exponent)
    return merge_ranges((math.floor(lo / g), math.ceil(hi / g)) for lo, hi in values)


def sumset(a: Ranges, b: Ranges) -> Ranges:
    """{x + y : x ∈ a, y ∈ b} as merged integer ranges."""
    return merge_ranges((x0 + y0, x1 + y1) for x0, x1 in a for y0, y1 in b)


def fold(ranges: Ranges, times: int, limit: int = MAX_RANGES) -> Ranges | None:
    """The ``times``-fold sumset of ``ranges``, or None if it grows beyond ``limit`` ranges."""
    out = ranges
    for _ in range(times - 1):
        out = sumset(out, ranges)
        if len(out) > limit:
            return None
    return out


def magnitudes(ranges: Ranges) -> Ranges:
    """{|s| : s in ranges} as merged ranges of integers >= 0."""
    pieces = []
    for lo, hi in ranges:
        if lo >= 0:
            pieces.append((lo, hi))
        elif hi <= 0:
            pieces.append((-hi, -lo))
        else:
            pieces.append((0, max(-lo, hi)))
    return merge_ranges(pieces)


@dataclass(frozen=True)
class NoiseChoice:
    """The noise chosen for one sum over a declared value set, and why."""

    measurement: Measurement[Any]
    chosen: str
    expected_abs: dict[str, float]  # per group, in grid units, for every candidate considered
    fold: int  # c: rows per unit in a group
    neighbor_ranges: int | None  # ranges in S_c (None: not built)
    note: str = ""  # why the ladder was not considered, if it was not
    info: MechanismInfo = field(default_factory=MechanismInfo)  # the ladder's, if built


def lattice_measurement(
    name: str, lattice: Any, total_epsilon: Fraction, info: MechanismInfo
) -> Measurement[Any]:
    """Integer group sums + independent ``lattice`` noise in each coordinate.

    The privacy map reads d_in as privacy units added or removed: ``total_epsilon`` per unit
    (the caller has proved that one unit moves the noise's level by at most one in each of the at
    most m groups it touches, at rate total_epsilon/m).
    """

    def function(data: Any) -> Any:
        values = np.asarray(data, dtype=np.int64)
        noise = np.asarray(lattice.sample(values.size), dtype=np.int64)
        return values + noise.reshape(values.shape)

    return Measurement(
        VectorDomain(AtomDomain("int")),
        SymmetricDistance(),
        "pure",
        function,
        lambda d: PureDP(total_epsilon * math.ceil(d)),
        name=name,
        noise=GridNoise(lattice, 0),
        d_in=Fraction(1),
        info=info,
    )


@functools.lru_cache(maxsize=64)
def _ladder(neighbor: Ranges, epsilon: Fraction) -> tuple[LadderLattice, int]:
    """The ladder noise for shifts in ±neighbor (integers) at rate ε, and its δ (cached: a query
    is compiled for explain() and again for evaluate())."""
    measurement = make_discrete_ladder([list(r) for r in neighbor], epsilon)
    info = measurement.info
    if not isinstance(info, LadderInfo) or info.ladder_noise is None or info.delta_units is None:
        raise InternalError("make_discrete_ladder states no ladder noise", charged=False)
    return info.ladder_noise, info.delta_units


def choose_noise(
    units: Ranges,
    epsilon: Fraction,
    rows_l1: int,
    rows_per_group: int,
    groups: int,
    *,
    geometric_only: bool = False,
) -> NoiseChoice:
    """The best of geometric, staircase and ladder noise for a sum over ``units`` (see the module
    docstring), each ``epsilon``-DP for one privacy unit added or removed."""
    per_row = max(max(abs(lo), abs(hi)) for lo, hi in units)
    geometric = make_geometric(sensitivity=rows_l1 * per_row, epsilon=epsilon)
    expected = {"geometric": float(geometric.noise.expected_abs())}
    candidates: dict[str, Measurement[Any]] = {"geometric": geometric}
    c, m = rows_per_group, groups
    if geometric_only:
        return NoiseChoice(geometric, "geometric", expected, c, None, "mechanism='laplace' asked")
    per_group = epsilon / m
    period = c * per_row
    notes = []
    if period <= _MAX_STAIRCASE_PERIOD:
        gamma = staircase_optimal_gamma(per_group)
        first_step = min(max(math.floor(gamma * period + 0.5), 1), period)
        stair = DiscreteStaircase(period=period, first_step=first_step, epsilon=per_group)
        facts = StaircaseInfo(period=period, first_step=first_step, epsilon=per_group)
        candidates["staircase"] = lattice_measurement("staircase", stair, epsilon, facts)
        expected["staircase"] = float(stair.expected_abs())
    else:
        notes.append(f"staircase not considered: period {period} grid steps > 2^50")
    best = min(expected, key=lambda k: expected[k])
    neighbor_count: int | None = None
    info = MechanismInfo()
    if c > MAX_FOLD:
        notes.append(f"ladder not considered: {c} rows per unit and group (at most {MAX_FOLD})")
    elif per_group > _MAX_LADDER_EPSILON:
        notes.append(f"ladder not considered: ε per group {float(per_group):.4g} > 100")
    else:
        with_zero = merge_ranges([*units, (0, 0)])
        summed = fold(with_zero, c)
        if summed is None:
            notes.append(
                f"ladder not considered: the {c}-fold sums have more than {MAX_RANGES} ranges"
            )
        else:
            neighbor = magnitudes(summed)
            neighbor_count = len(summed)
            try:
                lattice, delta_units = _ladder(neighbor, per_group)
            except DPError as error:  # pragma: no cover - guards of the ladder construction
                notes.append(f"ladder not considered: {error}")
            else:
                info = LadderInfo(neighbor_set_units=neighbor, delta_units=delta_units)
                candidates["ladder"] = lattice_measurement("ladder", lattice, epsilon, info)
                expected["ladder"] = float(lattice.expected_abs())
                if expected["ladder"] < (1 - LADDER_MARGIN) * expected[best]:
                    best = "ladder"
    return NoiseChoice(candidates[best], best, expected, c, neighbor_count, "; ".join(notes), info)


def _amount(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def describe_choice(choice: NoiseChoice, g: float) -> str:
    """'ladder noise, E|noise| 3,356 (vs staircase 3,522, geometric 5,000)', in value units."""
    others = ", ".join(
        f"{name} {_amount(value * g)}"
        for name, value in sorted(choice.expected_abs.items(), key=lambda kv: kv[1])
        if name != choice.chosen
    )
    text = f"{choice.chosen} noise, E|noise| {_amount(choice.expected_abs[choice.chosen] * g)}"
    if others:
        text += f" (vs {others})"
    if choice.note:
        text += f"; {choice.note}"
    return text
