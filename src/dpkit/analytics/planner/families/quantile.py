"""Quantiles by the exponential mechanism over a public grid (:mod:`dpkit.analytics._em`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dpkit.analytics._em import em_quantile_index, rank_error_bound
from dpkit.analytics.bounding import Contribution
from dpkit.analytics.engines.base import BinSpec, BoundedPlan, ValueSpec
from dpkit.analytics.planner.compiled import Context, OutputRegistry
from dpkit.analytics.planner.noise import Share, ceil_log2, floor_log2, grid_range
from dpkit.analytics.planner.registry import Compiled, FamilyContext, register
from dpkit.analytics.query import (
    Quantile,
)
from dpkit.analytics.results import Accuracy
from dpkit.core.losses import PureDP


def _compile_quantile(
    agg: Quantile,
    share: Share,
    contrib: Contribution,
    extra_plans: list[BoundedPlan],
    make_plan: Callable[..., BoundedPlan],
) -> Compiled:
    low, high = agg.bounds
    magnitude = max(abs(low), abs(high))
    exponent = max(floor_log2((high - low) / agg.candidates), ceil_log2(magnitude) - 40)
    low_f, high_f, lo, hi = grid_range(agg.bounds, exponent)
    registry = OutputRegistry()
    value = registry.value(ValueSpec(agg.column, low_f, high_f, exponent))
    out = registry.output("rows")
    plan_index = len(extra_plans) + 1
    extra_plans.append(make_plan(registry, BinSpec("grid", value=value)))
    epsilon = share.epsilon()
    sensitivity = contrib.rows_l1
    candidates = hi - lo + 1
    loss = PureDP(epsilon)

    def finish(ctx: Context) -> None:
        per_group = ctx.extra[plan_index]
        values = []
        for group in ctx.groups:
            bins = per_group.get(group, {})
            counts = np.zeros(candidates, dtype=np.int64)
            for b, outputs in bins.items():
                counts[b - lo] = outputs[out]
            below = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
            n = int(counts.sum())
            j = em_quantile_index([int(b) for b in below], n, agg.q, epsilon, sensitivity)
            values.append(math.ldexp(float(lo + j), exponent))
        ctx.columns[agg.name] = np.array(values, dtype=np.float64)
        bound = rank_error_bound(candidates, epsilon, sensitivity, ctx.alpha)
        ctx.accuracy[agg.name] = Accuracy(
            "rank",
            bound,
            ctx.alpha,
            "exponential",
            loss,
            None,
            f"the released value's rank is within ±{bound:.3g} rows of q·n with probability "
            f">= {1 - ctx.alpha:g}",
        )

    text = (
        f"exponential mechanism over {candidates} grid points of [{low_f:g}, {high_f:g}] "
        f"(step 2^{exponent}), ε={float(epsilon):.4g}, utility sensitivity {sensitivity}"
    )
    return finish, [loss], text


@register(Quantile)
def compile_quantile(agg: Quantile, ctx: FamilyContext) -> Compiled:
    return _compile_quantile(agg, ctx.share, ctx.contrib, ctx.extra_plans, ctx.make_plan)
