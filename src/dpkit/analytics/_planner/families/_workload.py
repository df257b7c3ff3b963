"""Batches of linear queries over the public group keys (``workload(matrix)``)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit._exact import sqrt_upper
from dpkit.analytics._bounding import Contribution
from dpkit.analytics._engines._base import ValueSpec
from dpkit.analytics._planner._compiled import Context, OutputRegistry
from dpkit.analytics._planner._noise import (
    Share,
    SumGrid,
    grid_range,
    integer_gaussian,
    integer_noise,
    linear_noise_halfwidth,
    noise_halfwidth,
    noise_variance,
    sqrt_down,
    sum_grid,
    value_exponent_for_sum,
)
from dpkit.analytics._planner._registry import (
    Compiled,
    Family,
    FamilyContext,
    Form,
    Use,
    register_family,
)
from dpkit.analytics._query import LinearQueries, workload
from dpkit.analytics._results import Accuracy
from dpkit.errors import InvalidParameterError, UnsupportedQueryError
from dpkit.mechanisms import make_geometric
from dpkit.noise._grid import choose_exponent


def _compile_workload(
    agg: LinearQueries,
    share: Share,
    contrib: Contribution,
    main: OutputRegistry,
    n_keys: int | None,
    private_keys: bool,
) -> Compiled:
    if private_keys:
        raise UnsupportedQueryError(
            f"workload {agg.name!r} needs public group keys (its columns are the keys, in "
            "order): pass group_by(..., keys=[...])"
        )
    width = n_keys if n_keys is not None else 1
    matrix = [[Fraction(v) for v in row] for row in agg.matrix]
    if len(matrix[0]) != width:
        raise InvalidParameterError(
            "matrix",
            f"{len(matrix)}x{len(matrix[0])}",
            f"a matrix with {width} columns, one per public group key",
        )
    l1_rows = contrib.rows_l1
    grid: SumGrid | None = None
    if agg.column is not None:
        assert agg.bounds is not None
        magnitude = max(abs(agg.bounds[0]), abs(agg.bounds[1]))
        grid = sum_grid(agg.bounds, value_exponent_for_sum(share, contrib, magnitude, magnitude))
        exponent = grid.coarse
        low_f, high_f, _, _ = grid_range(agg.bounds, grid.fine)
        per_row = max(grid.per_row, 1)
        output = main.output("sum", main.value(ValueSpec(agg.column, low_f, high_f, grid.fine)))
    else:
        exponent, per_row = 0, 1
        output = main.output("rows")
    x_l1 = l1_rows * per_row  # ||Δx||_1 in grid units
    x_l2sq = contrib.rows_l2_squared * per_row * per_row
    n_queries = len(matrix)
    col_l1 = max(sum(abs(row[j]) for row in matrix) for j in range(width))
    col_l2sq = max(sum(row[j] ** 2 for row in matrix) for j in range(width))
    row_l2sq = [float(sum(v * v for v in row)) for row in matrix]
    # strategy "data": noise on x, then W @ noisy x (post-processing)
    data_noise = integer_noise(share, x_l1, x_l2sq)
    data_var = noise_variance(data_noise) * sum(row_l2sq)
    # strategy "direct": noise on round(W x / g_w) with its own grid
    if share.family == "pure":
        scale = col_l1 * x_l1 / share.amount
    else:
        # ||W Δx||_2 <= max_j ||W_j||_2 · ||Δx||_1
        scale = sqrt_upper(Fraction(col_l2sq)) * x_l1 / sqrt_down(2 * share.amount)
    w_exponent = choose_exponent(scale, 10)
    gw = Fraction(2) ** w_exponent
    if share.family == "pure":
        steps = math.ceil(col_l1 * x_l1 / gw) + n_queries
        direct_noise = make_geometric(sensitivity=steps, epsilon=share.amount)
    else:
        # rounding adds < 1 step per coordinate: ||Δ||_2 <= s/g + sqrt(n)
        bound = sqrt_upper(Fraction(col_l2sq)) * x_l1 / gw + sqrt_upper(Fraction(n_queries))
        steps_sq = math.ceil(bound) ** 2
        direct_noise = integer_gaussian(steps_sq, share.amount)
    direct_var = noise_variance(direct_noise) * float(gw) ** 2 * n_queries
    use_direct = direct_var < data_var
    # strategy "optimised": the matrix mechanism with dpkit.workloads' best strategy A (OPT_0,
    # hierarchical, wavelet, identity), noise on B·x (B = A quantised), answers C·(B·x + Z)
    from dpkit.workloads._session import optimised_workload  # scipy.sparse: imported on use

    optimised = optimised_workload(
        np.array([[float(v) for v in row] for row in matrix]),
        "l1" if share.family == "pure" else "l2",
    )
    opt_var = math.inf
    if optimised is not None:
        opt_noise = integer_noise(share, optimised.l1(x_l1), optimised.l2_squared(x_l1))
        opt_var = noise_variance(opt_noise) * optimised.frobenius_sq
    use_opt = opt_var < 0.99 * min(direct_var, data_var)
    names = agg.query_names or tuple(f"q{i}" for i in range(n_queries))
    g = 2.0**exponent

    def finish(ctx: Context) -> None:
        x = [int(v) if grid is None else grid.to_coarse(int(v)) for v in ctx.main[output]]
        if use_opt:
            assert optimised is not None
            y = np.asarray(opt_noise(optimised.measure(np.array(x, dtype=np.int64))))
            noisy = optimised.answers(y) * g
            halfwidths = np.array(
                [
                    linear_noise_halfwidth(opt_noise, row, ctx.alpha) * g
                    for row in optimised.reconstruction.tolist()
                ]
            )
        elif use_direct:
            exact = [sum(row[j] * x[j] for j in range(width)) / gw for row in matrix]
            rounded = np.array([math.floor(v + Fraction(1, 2)) for v in exact], dtype=np.int64)
            noisy = np.asarray(direct_noise(rounded), dtype=np.float64) * float(gw) * g
            # the noise's exact quantile, plus the rounding of W·x to its grid (<= gw/2)
            h = (noise_halfwidth(direct_noise, ctx.alpha) + 0.5) * float(gw) * g
            halfwidths = np.full(n_queries, h)
        else:
            noisy_x = np.asarray(data_noise(np.array(x, dtype=np.int64)), dtype=np.float64)
            w = np.array([[float(v) for v in row] for row in matrix])
            noisy = (w @ noisy_x) * g
            halfwidths = np.array(
                [linear_noise_halfwidth(data_noise, row, ctx.alpha) * g for row in w.tolist()]
            )
        if grid is not None:
            # the sums' rounding (SumGrid): per group up to half a noise step, and over all
            # rows (at most MAX_ROWS_FOR_INTERVALS) half a fine step each
            steps = 0.0 if grid.ratio == 1 else math.ldexp(0.5, grid.coarse)
            rows = grid.rounding_bound() - steps
            halfwidths = halfwidths + np.array(
                [
                    steps * sum(abs(float(v)) for v in row) + rows * max(abs(float(v)) for v in row)
                    for row in matrix
                ]
            )
        ctx.tables[agg.name] = pd.DataFrame(
            {
                "query": list(names),
                "value": noisy,
                "low": noisy - halfwidths,
                "high": noisy + halfwidths,
            }
        )
        ctx.accuracy[agg.name] = Accuracy(
            "exact",
            float(halfwidths[0]),
            ctx.alpha,
            chosen.name,
            share.loss(),
            None,
            "matrix mechanism: noise on the quantised strategy B·x, answers C·(B·x + noise); "
            "per query the smaller of a union and a Chernoff bound on its noise terms"
            if use_opt
            else "noise added to W·x directly (exact quantile, plus the rounding of W·x to its "
            "grid)"
            if use_direct
            else "noise added to x, then W·x: per query the exact quantile of a single noise "
            "term, else the smaller of a union and a Chernoff bound (never below 1 - α coverage)",
        )

    chosen = opt_noise if use_opt else direct_noise if use_direct else data_noise
    strategy = (
        f"matrix mechanism with {optimised.name}"
        if use_opt and optimised is not None
        else "W·x + noise"
        if use_direct
        else "W·(x + noise)"
    )
    errors = sorted([direct_var, data_var, opt_var])
    line = (
        f"{n_queries} linear queries over {width} groups, {chosen.name} noise; strategy "
        f"{strategy} (expected squared error {errors[0] * g * g:.4g} vs "
        f"{errors[1] * g * g:.4g}"
    )
    if optimised is not None and math.isfinite(opt_var):
        line += f"; optimised strategy {optimised.name}: {opt_var * g * g:.4g}"
        if optimised.svd_bound is not None and share.family == "zcdp":
            v = noise_variance(opt_noise) / optimised.quantised.col_l2_sq  # per unit sensitivity
            line += f", SVD lower bound {optimised.svd_bound * v * g * g:.4g}"
    return (finish, [Use(chosen.name, chosen.loss)], line + ")")


def compile_workload(agg: LinearQueries, ctx: FamilyContext) -> Compiled:
    return _compile_workload(agg, ctx.share, ctx.contrib, ctx.main, ctx.n_keys, ctx.private_keys)


def _render_workload(agg: LinearQueries) -> str:
    shape = f"{len(agg.matrix)}x{len(agg.matrix[0])}"
    over = f" of sum({agg.column})" if agg.column else ""
    return f"workload[{shape}]{over} as {agg.name}"


register_family(
    Family(
        LinearQueries,
        (Form(workload),),
        compile_workload,
        render=_render_workload,
        value_columns=lambda agg: (agg.column,) if agg.column else (),
        table=True,
        summary="linear queries over per-group counts or sums, released as a table",
    )
)
