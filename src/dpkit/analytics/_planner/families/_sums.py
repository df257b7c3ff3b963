"""Sums of clamped values, and sums over a declared union of intervals."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkit.analytics._bounding import Contribution
from dpkit.analytics._engines._base import ValueSpec
from dpkit.analytics._planner._compiled import Context, Finisher, Noisy, OutputRegistry
from dpkit.analytics._planner._noise import (
    Share,
    SumGrid,
    fine_exponent,
    grid_range,
    integer_gaussian,
    integer_noise,
    sum_grid,
    value_exponent_for_sum,
)
from dpkit.analytics._planner._registry import (
    Compiled,
    Family,
    FamilyContext,
    Form,
    register_family,
    used,
)
from dpkit.analytics._planner._types import Mechanism
from dpkit.analytics._query import Sum, render_bounded, render_values, sum
from dpkit.analytics._results import Accuracy, clip_columns
from dpkit.analytics._valueset import choose_noise, describe_choice, grid_ranges, merge_ranges
from dpkit.errors import InvalidParameterError
from dpkit.noise._grid import choose_exponent


def _sum_finisher(name: str, noisy: Noisy, grid: SumGrid, note: str = "") -> Finisher:
    """Noise on the exact fine-grid totals rounded to the noise grid (see :class:`SumGrid`); the
    interval adds the rounding bound to the noise's exact quantile."""
    g = math.ldexp(1.0, grid.coarse)

    def finish(ctx: Context) -> None:
        totals = [grid.to_coarse(int(v)) for v in ctx.main[noisy.output]]
        released = noisy.apply(totals)  # exact integers: never saturated (Noisy.apply)
        values = np.ldexp(released.astype(np.float64), grid.coarse)
        h = noisy.halfwidth(ctx.alpha) * g + grid.rounding_bound()
        ctx.columns[name] = values
        ctx.columns[f"{name}_low"] = values - h
        ctx.columns[f"{name}_high"] = values + h
        ctx.accuracy[name] = Accuracy(
            "exact",
            h,
            ctx.alpha,
            noisy.measurement.name,
            noisy.loss,
            noisy.expected_abs() * g,
            note,
        )

    return finish


def _compile_values_sum(
    agg: Sum, share: Share, contrib: Contribution, main: OutputRegistry, mechanism: Mechanism
) -> Compiled:
    """A sum over a declared union of intervals (:mod:`._valueset`): values are moved to the
    nearest declared value on the grid; a pure share picks geometric, staircase or ladder noise.

    The noise grid is the sum's usual one, refined if needed so that max|V| spans at least 2^20
    grid steps (the ladder's resolution). The engine works on a fine grid (as for every sum,
    :class:`SumGrid`): the declared intervals are widened outward to it and each rounded value
    is moved to the nearest point of that widened set; the exact total is then rounded to the
    noise grid. One row then moves the rounded total by a value of the fine intervals divided by
    r = 2^(coarse - fine) and rounded down or up, so the neighbour set the noise is calibrated
    for is built from the intervals ``[⌊lo/r⌋, ⌈hi/r⌉]``: it contains every change the engine
    and the rounding can produce (for c rows, ⌊Σv/r⌋ >= Σ⌊v/r⌋ and ⌈Σv/r⌉ <= Σ⌈v/r⌉).
    """
    assert agg.values is not None
    low, high = agg.bounds
    magnitude = max(abs(low), abs(high))
    exponent = min(
        value_exponent_for_sum(share, contrib, magnitude, magnitude), choose_exponent(magnitude)
    )
    # headroom 61: the projection's integer differences stay within a BIGINT
    fine = fine_exponent(magnitude, exponent, headroom=61)
    fine_units = grid_ranges(agg.values, fine)
    grid = SumGrid(fine, exponent, max(max(abs(a), abs(b)) for a, b in fine_units))
    r = grid.ratio
    units = merge_ranges((a // r, -(-b // r)) for a, b in fine_units)
    per_row = max(max(abs(a), abs(b)) for a, b in units)
    value = main.value(ValueSpec(agg.column, float(low), float(high), fine, fine_units))
    output = main.output("sum", value)
    g = 2.0**exponent
    head = (
        f"values {render_values(agg.values)} on grid 2^{exponent} (each moved to the nearest "
        f"declared value; exact sum on grid 2^{fine}); "
    )
    if share.family == "zcdp":
        l2sq = contrib.rows_l2_squared * per_row * per_row
        noisy = Noisy(output, integer_gaussian(l2sq, share.amount))
        text = (
            f"{head}{noisy.measurement.name} noise, sensitivity L2²={l2sq} grid steps² (the "
            "ladder and staircase need a pure-DP share)"
        )
        return _sum_finisher(agg.name, noisy, grid), [used(noisy)], text
    choice = choose_noise(
        units,
        share.amount,
        contrib.rows_l1,
        contrib.rows_per_group,
        contrib.groups,
        geometric_only=mechanism == "laplace",
    )
    noisy = Noisy(output, choice.measurement)
    c, m = contrib.rows_per_group, contrib.groups
    target = "a group's sum" if m > 1 else "the sum"
    if choice.neighbor_ranges is None:
        reach = f"one unit moves {target} by <= {c}·{per_row} grid steps"
    elif c == 1:
        reach = f"one unit moves {target} by ± one declared value (or 0)"
    else:
        reach = (
            f"one unit moves {target} by ± a sum of <= {c} declared values "
            f"({choice.neighbor_ranges} intervals)"
        )
    groups = f", in <= {m} groups at ε/{m} each" if m > 1 and choice.chosen != "geometric" else ""
    described = describe_choice(choice, g)
    text = f"{head}{reach}{groups}; {described}"
    return _sum_finisher(agg.name, noisy, grid, described), [used(noisy)], text


def compile_sum(agg: Sum, ctx: FamilyContext) -> Compiled:
    if agg.values is not None:
        return _compile_values_sum(agg, ctx.share, ctx.contrib, ctx.main, ctx.mechanism)
    l1, l2sq = ctx.contrib.rows_l1, ctx.contrib.rows_l2_squared
    magnitude = max(abs(agg.bounds[0]), abs(agg.bounds[1]))
    if magnitude == 0:
        raise InvalidParameterError("bounds", agg.bounds, "not both zero (the sum is 0)")
    grid = sum_grid(
        agg.bounds, value_exponent_for_sum(ctx.share, ctx.contrib, magnitude, magnitude)
    )
    low_f, high_f, _, _ = grid_range(agg.bounds, grid.fine)
    per_row = grid.per_row
    value = ctx.main.value(ValueSpec(agg.column, low_f, high_f, grid.fine))
    noisy = Noisy(
        ctx.main.output("sum", value),
        integer_noise(ctx.share, l1 * per_row, l2sq * per_row * per_row),
    )
    return (
        _sum_finisher(agg.name, noisy, grid),
        [used(noisy)],
        (
            f"clamp to [{low_f:g}, {high_f:g}]; exact sum on grid 2^{grid.fine}, rounded to "
            f"grid 2^{grid.coarse}; {noisy.measurement.name} noise, sensitivity "
            f"L1={l1}·{per_row} grid steps"
        ),
    )


def _render_sum(agg: Sum) -> str:
    if agg.values is not None:
        return f"sum({agg.column}, values {render_values(agg.values)}) as {agg.name}"
    return render_bounded("sum", agg)


def _display_sum(frame: Any, agg: Sum) -> None:
    """A sum of values >= 0 is >= 0 (and of values <= 0 is <= 0)."""
    low, high = float(agg.bounds[0]), float(agg.bounds[1])
    clip_columns(frame, agg.name, 0.0 if low >= 0 else None, 0.0 if high <= 0 else None)


register_family(
    Family(
        Sum,
        (Form(sum, ("column", "lower", "upper"), sql=("SUM",), op="sum"),),
        compile_sum,
        render=_render_sum,
        display=_display_sum,
        summary="the sum of a column clamped to declared bounds (or a declared value set)",
    )
)
