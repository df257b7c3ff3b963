"""A plain pandas computation of a bounded plan's aggregates when no unit exceeds its bounds.

Deliberately naive and separate from the reference engine: clamp, round to the grid, group, sum.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dpkit.analytics._engines._base import BoundedPlan


def _nearest(x: float, allowed: tuple[tuple[int, int], ...]) -> float:
    """The nearest integer of the union of ranges to x, ties to the lower (NaN stays NaN)."""
    if np.isnan(x):
        return x
    candidates = [min(max(int(x), lo), hi) for lo, hi in allowed]
    return float(min(candidates, key=lambda c: (abs(c - x), c)))


def plain(df: pd.DataFrame, plan: BoundedPlan) -> dict[tuple[Any, ...], list[int]]:
    assert not plan.steps
    work = df[df[plan.unit].notna()].copy()
    if plan.key_set is not None:
        keys = set(plan.key_set.rows)
        mask = [tuple(r) in keys for r in work[list(plan.keys)].itertuples(index=False)]
        work = work[np.array(mask, dtype=bool)]
    for j, spec in enumerate(plan.values):
        v = work[spec.column].astype("float64").to_numpy()
        c = np.clip(v, spec.lower, spec.upper)
        a = c * 2.0 ** (-spec.exponent)
        idx = np.floor(a) + (a - np.floor(a) >= 0.5)
        if spec.allowed:
            idx = np.array([_nearest(x, spec.allowed) for x in idx])
        work[f"__v{j}"] = pd.array(np.where(np.isnan(v), np.nan, idx), dtype="Float64")
    out: dict[tuple[Any, ...], list[int]] = {}
    groups = work.groupby(list(plan.keys), dropna=False) if plan.keys else [((), work)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        values = []
        for o in plan.outputs:
            if o.kind == "rows":
                values.append(len(part))
            elif o.kind == "units":
                values.append(part[plan.unit].nunique())
            else:
                col = part[f"__v{o.value}"].dropna().astype("int64")
                values.append(
                    {"nonnull": len(col), "sum": int(col.sum()), "sumsq": int((col * col).sum())}[
                        o.kind
                    ]
                )
        out[tuple(None if (isinstance(k, float) and np.isnan(k)) else k for k in key)] = values
    return out


def result_dict(table: pa.Table, plan: BoundedPlan) -> dict[tuple[Any, ...], list[int]]:
    assert table.column_names == list(plan.result_columns)
    data = table.to_pydict()
    n = table.num_rows
    cols = list(plan.group_columns)
    outs = list(plan.output_columns)
    result = {}
    for r in range(n):
        key = tuple(data[c][r] for c in cols)
        result[key] = [int(data[o][r]) if data[o][r] is not None else 0 for o in outs]
    return result
