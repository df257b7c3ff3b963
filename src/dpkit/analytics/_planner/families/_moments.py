"""Means, variances and standard deviations from noisy sums."""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np

from dpkit.analytics._bounding import Contribution
from dpkit.analytics._engines._base import ValueSpec
from dpkit.analytics._planner._compiled import Context, Noisy, OutputRegistry
from dpkit.analytics._planner._noise import (
    Share,
    SumGrid,
    ceil_log2,
    fine_exponent,
    grid_range,
    integer_noise,
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
from dpkit.analytics._query import Mean, Variance, mean, render_bounded, std, variance
from dpkit.analytics._results import Accuracy, clip_columns
from dpkit.core._losses import compose

_NORMAL = NormalDist()  # quantiles via the stdlib (Wichura AS241): scipy.stats costs ~2 s to import


def _compile_moments(
    agg: Mean | Variance, share: Share, contrib: Contribution, main: OutputRegistry
) -> Compiled:
    l1, l2sq = contrib.rows_l1, contrib.rows_l2_squared
    parts = 2 if isinstance(agg, Mean) else 3
    part = share.scaled(Fraction(1, parts))
    low, high = agg.bounds
    magnitude = max(abs(low), abs(high))
    half = (high - low) / 2
    if isinstance(agg, Mean):
        exponent = value_exponent_for_sum(part, contrib, magnitude, half)
        # Rows on the fine grid of a sum with this noise grid (SumGrid): a SUM and an AVG of
        # the same column and bounds then read one clamped value (TPC-H Q1 has two such pairs).
        fine = fine_exponent(magnitude, exponent)
    else:
        exponent = max(ceil_log2(half) - 15, ceil_log2(magnitude) - 31)
        fine = exponent
    low_f, high_f, lo, hi = grid_range(agg.bounds, fine)
    center = (lo + hi) // 2  # fine units
    grid = SumGrid(fine, exponent, max(hi - center, center - lo))
    per_row = max(grid.per_row, 1)
    value = main.value(ValueSpec(agg.column, low_f, high_f, fine))
    count = Noisy(main.output("nonnull", value), integer_noise(part, l1, l2sq))
    total = Noisy(main.output("sum", value), integer_noise(part, l1 * per_row, l2sq * per_row**2))
    squares = None
    uses = [used(count), used(total)]
    if isinstance(agg, Variance):
        squares = Noisy(
            main.output("sumsq", value), integer_noise(part, l1 * per_row**2, l2sq * per_row**4)
        )
        uses.append(used(squares))
    g = 2.0**exponent

    def finish(ctx: Context) -> None:
        n_exact = np.array(ctx.main[count.output], dtype=object)
        s_exact = np.array(ctx.main[total.output], dtype=object)
        centered = [
            grid.to_coarse(int(s) - center * int(n)) for s, n in zip(s_exact, n_exact, strict=True)
        ]
        n_noisy = count.apply(n_exact).astype(np.float64)
        s_noisy = total.apply(centered).astype(np.float64)
        n_safe = np.maximum(n_noisy, 1.0)
        z = float(_NORMAL.inv_cdf(1 - ctx.alpha / 2))
        var_n, var_s = count.variance(), total.variance()
        mean_c = s_noisy / n_safe  # centered mean, noise-grid units
        if squares is None:
            values = np.clip(math.ldexp(center, fine) + mean_c * g, low_f, high_f)
            sd = np.sqrt(var_s / n_safe**2 + mean_c**2 * var_n / n_safe**2) * g
            ctx.columns[agg.name] = values
            ctx.columns[f"{agg.name}_low"] = np.clip(values - z * sd, low_f, high_f)
            ctx.columns[f"{agg.name}_high"] = np.clip(values + z * sd, low_f, high_f)
            ctx.accuracy[agg.name] = Accuracy(
                "approximate",
                float(z * sd[0]) if sd.size else math.nan,
                ctx.alpha,
                count.measurement.name,
                compose(*(u.loss for u in uses)),
                None,
                "first-order interval for noisy sum / noisy count, per group in the table",
            )
            return
        q_exact = np.array(ctx.main[squares.output], dtype=object)
        q_centered = [
            int(q) - 2 * center * int(s) + center * center * int(n)
            for q, s, n in zip(q_exact, s_exact, n_exact, strict=True)
        ]
        q_noisy = squares.apply(q_centered).astype(np.float64)
        var_q = squares.variance()
        raw = q_noisy / n_safe - mean_c**2
        limit = float(per_row) ** 2
        variance_units = np.clip(raw, 0.0, limit)
        grad_q, grad_s = 1 / n_safe, -2 * s_noisy / n_safe**2
        grad_n = -q_noisy / n_safe**2 + 2 * s_noisy**2 / n_safe**3
        sd_var = np.sqrt(grad_q**2 * var_q + grad_s**2 * var_s + grad_n**2 * var_n)
        if isinstance(agg, Variance) and agg.std:
            values = np.sqrt(variance_units) * g
            with np.errstate(divide="ignore", invalid="ignore"):
                sd = (
                    np.where(
                        variance_units > 0, sd_var / (2 * np.sqrt(variance_units)), np.sqrt(sd_var)
                    )
                    * g
                )
            top = math.sqrt(limit) * g
        else:
            values = variance_units * g * g
            sd = sd_var * g * g
            top = limit * g * g
        ctx.columns[agg.name] = values
        ctx.columns[f"{agg.name}_low"] = np.clip(values - z * sd, 0.0, top)
        ctx.columns[f"{agg.name}_high"] = np.clip(values + z * sd, 0.0, top)
        ctx.accuracy[agg.name] = Accuracy(
            "approximate",
            float(z * sd[0]) if sd.size else math.nan,
            ctx.alpha,
            count.measurement.name,
            compose(*(u.loss for u in uses)),
            None,
            "first-order interval from three noisy sums, per group in the table",
        )

    kind = "mean" if isinstance(agg, Mean) else ("std" if agg.std else "variance")
    return (
        finish,
        uses,
        (
            f"{kind} from {parts} noisy sums on grid 2^{exponent}"
            + (f" (rows on grid 2^{fine}, exact)" if fine != exponent else "")
            + f" centred at {math.ldexp(center, fine):g}; "
            f"{count.measurement.name} noise, {parts} equal parts"
        ),
    )


def compile_moments(agg: Mean | Variance, ctx: FamilyContext) -> Compiled:
    return _compile_moments(agg, ctx.share, ctx.contrib, ctx.main)


_BOUNDED = ("column", "lower", "upper")


def _display_mean(frame: Any, agg: Mean) -> None:
    clip_columns(frame, agg.name, float(agg.bounds[0]), float(agg.bounds[1]))


def _display_variance(frame: Any, agg: Variance) -> None:
    """Into [0, the largest variance (or standard deviation) the bounds allow]."""
    half = float(agg.bounds[1] - agg.bounds[0]) / 2
    clip_columns(frame, agg.name, 0.0, half if agg.std else half * half)


register_family(
    Family(
        Mean,
        (Form(mean, _BOUNDED, sql=("AVG", "MEAN"), op="mean"),),
        compile_moments,
        render=lambda agg: render_bounded("mean", agg),
        display=_display_mean,
        summary="the mean of a column clamped to declared bounds",
    )
)
register_family(
    Family(
        Variance,
        (
            Form(
                variance,
                _BOUNDED,
                sql=("VARIANCE", "VAR", "VAR_POP", "VARIANCE_POP"),
                op="variance",
            ),
            Form(std, _BOUNDED, sql=("STDDEV", "STD", "STDDEV_POP"), op="std"),
        ),
        compile_moments,
        render=lambda agg: render_bounded("std" if agg.std else "variance", agg),
        display=_display_variance,
        summary="the population variance (or standard deviation) of a clamped column",
    )
)
