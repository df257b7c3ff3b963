"""The bounded mode: the most frequent of a public, declared set of candidate values.

``mode("rating", [1, 2, 3, 4, 5])`` releases, per group, one of the declared values: the one
that occurs most often in the column, chosen privately. SQL: ``MODE(rating, 1, 2, 3, 4, 5)``;
the service's JSON: ``{"op": "mode", "column": "rating", "values": [1, 2, 3, 4, 5]}``.

**Counts.** The engine counts the rows at each candidate per group: one binned extra plan (the
histogram family's :class:`~dpkit.analytics._engines._base.BinSpec` ``"edges"``) whose bins are
``[c, next float after c)`` for each candidate c, so a row counts at c exactly when its value
is c as a float64; rows at any other value, NULL or NaN count nowhere. The counts never leave the
finisher.

**Guarantee.** ε-DP for the query's share ε of this aggregation (``share.epsilon()``: ε itself
from a pure budget, ε = sqrt(2ρ) from a zCDP share, as for the quantiles' exponential
mechanism), under the session's neighbouring relation (add or remove one privacy unit, whose
rows are bounded by the declared contribution bounds).

**Reason.** Per group g, the utility of candidate j is u_j = the bounded rows of g at value
c_j. Adding or removing one unit with x_g bounded rows in g moves every u_j in the same
direction (a count only grows when a unit is added, only shrinks when one is removed: the
utility is *monotone*), each by at most x_g. The exponential mechanism with probabilities
∝ exp(ε·u_j/Δ) (:func:`dpkit.mechanisms._exponential.make_exponential` with ``monotonic=True``,
McSherry & Talwar 2007) then costs ε·x_g/Δ in group g. With Δ = ``contrib.rows_l1``, the most
rows one unit has in total after bounding (the L1 sensitivity the histogram family's per-bin
counts use: one unit changes one value's count by at most ``rows_per_group`` in each of at most
``groups`` groups, and by at most ``rows_l1`` in all), the groups together cost
Σ_g ε·x_g/Δ <= ε. The groups and the candidates are public (declared keys, or keys released by
partition selection, which is charged separately); nothing else is read.

So the calibration constant is exactly ``coefficient = ε / rows_l1`` (tested exactly in
tests/unit/analytics/_planner/families/test_mode.py, with the mutants of docs/verification.md §6).

**Accuracy.** With probability >= 1 − α the released value's count is at most
(ln k + ln(1/α))·Δ/ε rows below the most frequent candidate's (Dwork & Roth 2014, Thm. 3.11,
without the factor 2 for a monotone utility), k the number of candidates; reported as a
``"rank"`` accuracy in rows.

**Sampling** is exact (:mod:`dpkit.mechanisms._exponential`, all randomness from
:mod:`dpkit.noise`). Ties between equally frequent candidates are broken by the mechanism's
randomness.

This module is the whole family: the aggregation, its builder, its compiler and its spec
(:func:`~dpkit.analytics._planner._registry.register_family`); the builder
(``dpkit.analytics.mode``), the SQL parser, the service and the plan text read the spec.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, fraction_of
from dpkit.analytics._bounding import Contribution
from dpkit.analytics._engines._base import BinSpec
from dpkit.analytics._keys import check_name
from dpkit.analytics._planner._compiled import Context, Finisher, OutputRegistry
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner._registry import (
    Compiled,
    Family,
    FamilyContext,
    Form,
    Use,
    register_family,
)
from dpkit.analytics._query import _check_column, _check_weight
from dpkit.analytics._results import Accuracy
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms import SelectionInfo
from dpkit.mechanisms._exponential import exponential_utility_bound, make_exponential

__all__ = ["MAX_MODE_VALUES", "Mode", "mode", "mode_edges", "mode_measurement"]

MAX_MODE_VALUES = 256
"""The most declared candidate values of a mode (the engines bin each row by a CASE over about
twice as many edges)."""


@dataclass(frozen=True, slots=True)
class Mode:
    """The most frequent of the declared candidate ``values`` of ``column``, per group."""

    column: str
    values: tuple[Fraction, ...]
    name: str
    weight: Fraction = Fraction(1)


def mode(
    column: Any,
    values: Sequence[Number],
    name: str | None = None,
    *,
    weight: Number = 1,
) -> Mode:
    """The most frequent value of ``column`` among the public candidate ``values``.

    ``values``: 2 to :data:`MAX_MODE_VALUES` distinct finite numbers (codes, ratings, ages...),
    declared, never read from the data. A row counts at a candidate when its value equals it
    (as a float64); other values, NULL and NaN count nowhere. Released with the exponential
    mechanism (module docstring: ε-DP, calibrated to the contribution bounds).

    Example:
        >>> mode("rating", [3, 1, 2]).values
        (Fraction(1, 1), Fraction(2, 1), Fraction(3, 1))
    """
    column_name = _check_column(column)
    allowed = f"a list of 2 to {MAX_MODE_VALUES} distinct numbers (the public candidates)"
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InvalidParameterError("values", values, allowed)
    if not 2 <= len(values) <= MAX_MODE_VALUES:
        raise InvalidParameterError("values", f"{len(values)} values", allowed)
    exact = sorted(fraction_of(f"values[{i}]", v) for i, v in enumerate(values))
    if any(abs(v) >= 2**900 for v in exact):  # before float(): 10**400 would overflow it
        raise InvalidParameterError("values", values, "numbers of magnitude below 2^900")
    floats = [float(v) for v in exact]
    if any(b <= a for a, b in itertools.pairwise(floats)):
        raise InvalidParameterError("values", values, allowed + ", distinct as float64 values")
    return Mode(
        column_name,
        tuple(exact),
        check_name(name or f"mode_{column_name}"),
        _check_weight(weight),
    )


def mode_edges(values: Sequence[Fraction]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(edges, the bin of each candidate): bins ``[c, next float after c)`` for every candidate
    c, with the gaps between them as bins of their own, and a last (closed) gap bin, so that a
    row falls in candidate c's bin exactly when its float64 value is c."""
    edges: list[float] = []
    bins: list[int] = []
    for v in values:
        f = float(v)
        if not edges or edges[-1] != f:
            edges.append(f)
        bins.append(len(edges) - 1)
        edges.append(math.nextafter(f, math.inf))
    edges.append(math.nextafter(edges[-1], math.inf))
    return tuple(edges), tuple(bins)


def mode_measurement(share: Share, contrib: Contribution) -> Measurement[Any]:
    """The exponential mechanism one mode runs in every group: ε = ``share.epsilon()``, utility
    sensitivity Δ = ``contrib.rows_l1``, monotone (coefficient ε/Δ; module docstring)."""
    return make_exponential(share.epsilon(), contrib.rows_l1, monotonic=True)


def _calibration(measurement: Measurement[Any]) -> tuple[Fraction, Fraction]:
    """(ε, Δ): what the selection mechanism states it was built with (its typed info)."""
    info = measurement.info
    if not isinstance(info, SelectionInfo) or info.epsilon is None or info.sensitivity is None:
        raise TypeError("the exponential mechanism states no ε or sensitivity")  # dpkit's bug
    return info.epsilon, info.sensitivity


def _mode_finisher(
    agg: Mode,
    measurement: Measurement[Any],
    out: int,
    plan_index: int,
    bins: tuple[int, ...],
) -> Finisher:
    floats = np.array([float(v) for v in agg.values], dtype=np.float64)
    epsilon, sensitivity = _calibration(measurement)
    loss = PureDP(epsilon)

    def finish(ctx: Context) -> None:
        per_group = ctx.extra[plan_index]
        counts = np.zeros((len(ctx.groups), len(bins)), dtype=np.float64)
        for g, group in enumerate(ctx.groups):
            found = per_group.get(group, {})
            counts[g] = [found.get(b, [0])[out] for b in bins]
        chosen = (
            np.asarray(measurement(counts), dtype=np.int64)
            if len(ctx.groups)
            else np.empty(0, dtype=np.int64)
        )
        ctx.columns[agg.name] = floats[chosen]
        bound = exponential_utility_bound(
            len(bins), epsilon, sensitivity, ctx.alpha, monotonic=True
        )
        note = (
            f"with probability >= {1 - ctx.alpha:g}, the released value's count is at most "
            f"{bound:.4g} rows below the most frequent candidate's (exponential mechanism over "
            f"{len(bins)} declared values)"
        )
        ctx.accuracy[agg.name] = Accuracy("rank", bound, ctx.alpha, "exponential", loss, None, note)

    return finish


def compile_mode(agg: Mode, ctx: FamilyContext) -> Compiled:
    """Per-candidate counts from one binned plan; the exponential mechanism per group."""
    registry = OutputRegistry()
    out = registry.output("rows")
    edges, bins = mode_edges(agg.values)
    plan_index = ctx.add_plan(registry, BinSpec("edges", column=agg.column, edges=edges))
    measurement = mode_measurement(ctx.share, ctx.contrib)
    epsilon, _ = _calibration(measurement)
    text = (
        f"exponential mechanism over {len(agg.values)} declared values, "
        f"ε={float(epsilon):.4g}, utility (rows at the value) sensitivity "
        f"{ctx.contrib.rows_l1}, monotone"
    )
    return (
        _mode_finisher(agg, measurement, out, plan_index, bins),
        [Use(measurement.name, PureDP(epsilon))],
        text,
    )


def _render_mode(agg: Mode) -> str:
    first, last = float(agg.values[0]), float(agg.values[-1])
    return f"mode({agg.column}, {len(agg.values)} values in [{first:g}, {last:g}]) as {agg.name}"


register_family(
    Family(
        Mode,
        (Form(mode, ("column", "*values"), sql=("MODE",), op="mode"),),
        compile_mode,
        render=_render_mode,
        columns=lambda agg: (agg.name,),
        cells=lambda agg: 2 * len(agg.values),
        summary="the most frequent of declared candidate values (exponential mechanism)",
        gaussian=False,
    )
)
