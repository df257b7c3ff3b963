"""Contribution bounding: from declared bounds to sensitivities; and a private bounds estimator.

Neighbouring tables differ by all the rows of one privacy unit (add/remove). After bounding
(:class:`~dpkit.analytics._query.Bounding`), one unit has at most

* ``c`` rows in any one group (``max_rows_per_group``, and never more than ``max_rows``),
* ``m`` groups (``max_groups``, and never more than ``max_rows`` or the number of public keys),
* ``L1 = min(k, m·c)`` rows in total,

so a per-group vector of row counts moves by at most ``L1`` in L1 norm, and by at most
``sqrt(L2²)`` in L2 norm with ``L2² = ⌊L1/c⌋·c² + (L1 mod c)²`` (the most uneven spread). Every
number here comes from the declaration, never from the data.

The bounds estimator (:func:`bounds_candidates`, used by
:meth:`dpkit.analytics.Session.estimate_bounds`) finds clamping bounds privately: it runs the
exponential-mechanism quantile (:mod:`dpkit.analytics._em`) for a low and a high quantile over a
logarithmic grid of candidates ``0, ±2^i``, spending a budget the caller declares. It never reads
bounds from the data for free.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpkit.analytics._query import Bounding
from dpkit.errors import UnsupportedQueryError

__all__ = ["Contribution", "bounds_candidates", "contribution"]


@dataclass(frozen=True, slots=True)
class Contribution:
    """The most one privacy unit can contribute after bounding.

    Attributes:
        rows_l1: rows in total.
        rows_per_group: rows in one group.
        groups: groups touched (1 without grouping).
    """

    rows_l1: int
    rows_per_group: int
    groups: int

    @property
    def rows_l2_squared(self) -> int:
        """The largest Σ_g x_g² with x_g <= rows_per_group and Σ_g x_g <= rows_l1."""
        c = self.rows_per_group
        return (self.rows_l1 // c) * c * c + (self.rows_l1 % c) ** 2


def _min(*values: int | None) -> int | None:
    given = [v for v in values if v is not None]
    return min(given) if given else None


def contribution(bounding: Bounding, grouped: bool, n_keys: int | None = None) -> Contribution:
    """The sensitivity facts of a bounding declaration, or a clear error when it bounds nothing.

    ``n_keys``: the number of public group keys, when declared. Every engine drops the rows
    whose key is not one of them before bounding, so one unit touches at most ``n_keys`` groups
    whatever ``max_groups`` or ``max_rows`` allow: the distinct-unit count of a query with two
    public keys moves by at most 2, not by ``max_rows`` (issue 21). Public, like the bounds.

    Raises:
        UnsupportedQueryError: no bound limits a unit's rows (or, grouped, its groups).
    """
    k, m, c = bounding.max_rows, bounding.max_groups, bounding.max_rows_per_group
    if not grouped:
        per = _min(k, c)
        if per is None:
            raise UnsupportedQueryError(
                "no contribution bound: declare how many rows one privacy unit may contribute, "
                "e.g. query.bound(max_rows=10) (or Session(..., max_rows=10)). dpkit never reads "
                "this bound from the data; rows beyond it are dropped."
            )
        return Contribution(per, per, 1)
    per_group = _min(c, k)
    groups = _min(m, k)
    if groups is not None and n_keys is not None:
        groups = min(groups, max(n_keys, 1))
    if per_group is None or groups is None:
        raise UnsupportedQueryError(
            "no contribution bound for a grouped query: declare max_rows (rows per unit in "
            "total), or both max_groups and max_rows_per_group, e.g. "
            ".group_by('dept', ...).bound(max_rows=10). dpkit never reads these from the data."
        )
    total = groups * per_group if k is None else min(k, groups * per_group)
    return Contribution(total, min(per_group, total), min(groups, total))


def bounds_candidates(low_exponent: int = -20, high_exponent: int = 60) -> tuple[float, ...]:
    """The public candidate grid of the bounds estimator: -2^h .. -2^l, 0, 2^l .. 2^h."""
    if low_exponent >= high_exponent:
        raise UnsupportedQueryError("bounds_candidates: low_exponent must be < high_exponent")
    positive = [2.0**i for i in range(low_exponent, high_exponent + 1)]
    return tuple([-p for p in reversed(positive)] + [0.0] + positive)
