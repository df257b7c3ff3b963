"""Histograms over public bin edges."""

from __future__ import annotations

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics._engines._base import BinSpec
from dpkit.analytics._planner._compiled import Context, Finisher, GroupKey, Noisy, OutputRegistry
from dpkit.analytics._planner._noise import integer_noise
from dpkit.analytics._planner._registry import (
    Compiled,
    Family,
    FamilyContext,
    Form,
    register_family,
    used,
)
from dpkit.analytics._query import Histogram, histogram
from dpkit.analytics._results import Accuracy, round_counts


def _histogram_finisher(agg: Histogram, noisy: Noisy, plan_index: int) -> Finisher:
    n_bins = len(agg.edges) - 1

    def finish(ctx: Context) -> None:
        per_group = ctx.extra[plan_index]
        rows: list[GroupKey] = []
        exact: list[int] = []
        for group, label in zip(ctx.groups, ctx.labels, strict=True):
            bins = per_group.get(group, {})
            for b in range(n_bins):
                rows.append((*label, b))
                exact.append(bins.get(b, [0])[noisy.output])
        released = noisy.apply(np.array(exact, dtype=np.int64))
        h = noisy.halfwidth(ctx.alpha)
        table = pd.DataFrame({k: [r[i] for r in rows] for i, k in enumerate(ctx.key_names)})
        table["bin_low"] = [agg.edges[r[-1]] for r in rows]
        table["bin_high"] = [agg.edges[r[-1] + 1] for r in rows]
        table["count"] = released
        table["count_low"] = released - h
        table["count_high"] = released + h
        ctx.tables[agg.name] = table
        ctx.accuracy[agg.name] = Accuracy(
            "exact", h, ctx.alpha, noisy.measurement.name, noisy.loss, noisy.expected_abs()
        )

    return finish


def compile_histogram(agg: Histogram, ctx: FamilyContext) -> Compiled:
    registry = OutputRegistry()
    out = registry.output("rows")
    plan_index = len(ctx.extra_plans) + 1
    ctx.extra_plans.append(
        ctx.make_plan(registry, BinSpec("edges", column=agg.column, edges=agg.edges))
    )
    noisy = Noisy(out, integer_noise(ctx.share, ctx.contrib.rows_l1, ctx.contrib.rows_l2_squared))
    return (
        _histogram_finisher(agg, noisy, plan_index),
        [used(noisy)],
        (
            f"{len(agg.edges) - 1} bins; {noisy.measurement.name} noise, sensitivity "
            f"L1={ctx.contrib.rows_l1}"
        ),
    )


def _display_histogram(frame: pd.DataFrame, agg: Histogram) -> None:
    if "bin_low" in frame.columns and "count" in frame.columns:  # the histogram's own table
        round_counts(frame, "count")


register_family(
    Family(
        Histogram,
        (Form(histogram, ("column", "*edges"), sql=("HISTOGRAM",), op="histogram"),),
        compile_histogram,
        render=lambda agg: f"histogram({agg.column}, {len(agg.edges) - 1} bins) as {agg.name}",
        table=True,
        table_columns=("bin_low", "bin_high", "count", "count_low", "count_high"),
        cells=lambda agg: len(agg.edges) - 1,
        display=_display_histogram,
        counts=lambda agg: ("count",),
        summary="counts in declared bins, released as a table",
    )
)
