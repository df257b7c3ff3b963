"""Counts of rows and of distinct privacy units."""

from __future__ import annotations

import numpy as np

from dpkit.analytics._planner._compiled import Context, Finisher, Noisy
from dpkit.analytics._planner._noise import integer_noise
from dpkit.analytics._planner._registry import (
    Compiled,
    Family,
    FamilyContext,
    Form,
    register_family,
    used,
)
from dpkit.analytics._query import Count, CountUnits, count, count_distinct_units
from dpkit.analytics._results import Accuracy, round_counts


def _count_finisher(name: str, noisy: Noisy) -> Finisher:
    def finish(ctx: Context) -> None:
        released = noisy.apply(np.array(ctx.main[noisy.output], dtype=np.int64))
        h = noisy.halfwidth(ctx.alpha)
        ctx.columns[name] = released
        ctx.columns[f"{name}_low"] = released - h
        ctx.columns[f"{name}_high"] = released + h
        ctx.accuracy[name] = Accuracy(
            "exact", h, ctx.alpha, noisy.measurement.name, noisy.loss, noisy.expected_abs()
        )

    return finish


def compile_count(agg: Count, ctx: FamilyContext) -> Compiled:
    l1, l2sq = ctx.contrib.rows_l1, ctx.contrib.rows_l2_squared
    noisy = Noisy(ctx.main.output("rows"), integer_noise(ctx.share, l1, l2sq))
    return (
        _count_finisher(agg.name, noisy),
        [used(noisy)],
        f"{noisy.measurement.name} noise, sensitivity L1={l1}, L2²={l2sq}",
    )


def compile_count_units(agg: CountUnits, ctx: FamilyContext) -> Compiled:
    m = ctx.contrib.groups
    noisy = Noisy(ctx.main.output("units"), integer_noise(ctx.share, m, m))
    return (
        _count_finisher(agg.name, noisy),
        [used(noisy)],
        f"{noisy.measurement.name} noise, sensitivity L1={m}, L2²={m}",
    )


register_family(
    Family(
        Count,
        (Form(count, ("*",), sql=("COUNT",), op="count", signature="COUNT(*)"),),
        compile_count,
        render=lambda agg: f"count() as {agg.name}",
        display=lambda frame, agg: round_counts(frame, agg.name),
        counts=lambda agg: (agg.name,),
        value_columns=lambda agg: (),
        summary="the number of rows per group",
    )
)
register_family(
    Family(
        CountUnits,
        (
            Form(
                count_distinct_units,
                ("distinct_unit",),
                sql=("COUNT",),
                op="count_units",
                signature="COUNT(DISTINCT <privacy unit>)",
            ),
        ),
        compile_count_units,
        render=lambda agg: f"countunits() as {agg.name}",
        display=lambda frame, agg: round_counts(frame, agg.name),
        counts=lambda agg: (agg.name,),
        value_columns=lambda agg: (),
        summary="the number of distinct privacy units per group",
    )
)
