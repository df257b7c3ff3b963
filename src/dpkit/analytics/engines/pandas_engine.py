"""The local reference engine: pandas, written for clarity. It is the test oracle of the others.

It follows :class:`~dpkit.analytics.engines.base.BoundedPlan`'s semantics literally, with SQL's
NULL semantics for expressions (pandas' nullable dtypes give Kleene logic for ``& | ~``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics.engines.base import (
    SEPARATOR,
    BoundedPlan,
    Output,
    kind_of_arrow,
    project_to_ranges,
)
from dpkit.analytics.expr import Binary, Col, ColumnKind, Expr, IsIn, Lit, Unary
from dpkit.errors import InvalidDataError, UnsupportedQueryError

__all__ = ["PandasEngine", "evaluate", "grid_indices", "sql_text"]


def sql_text(value: Any) -> str | None:
    """The text SQL engines give ``CAST(value AS VARCHAR)`` (None for NULL/NaN)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return None
        return repr(float(value))
    return str(value)


def _text_column(series: pd.Series) -> list[str | None]:
    return [sql_text(v) for v in series.tolist()]


def md5_text(salt: str, tag: str, parts: Sequence[str | None]) -> str:
    """md5 hex of salt, tag and the parts (NULL as ``n``, a value as ``v`` + its text), joined
    by SEPARATOR: the same text the SQL engines build."""
    joined = SEPARATOR.join([salt, tag, *("n" if p is None else "v" + p for p in parts)])
    return hashlib.md5(joined.encode("utf-8"), usedforsecurity=False).hexdigest()


def grid_indices(
    values: np.ndarray, lower: float, upper: float, exponent: int
) -> tuple[np.ndarray, np.ndarray]:
    """(idx as int64, valid mask): round_half_up(clamp(v) · 2^-exponent); NaN is not valid."""
    v = np.asarray(values, dtype=np.float64)
    valid = ~np.isnan(v)
    clamped = np.clip(np.where(valid, v, lower), lower, upper)
    a = np.ldexp(clamped, -exponent)
    f = np.floor(a)
    idx = f.astype(np.int64) + (a - f >= 0.5).astype(np.int64)
    return idx, valid


# ------------------------------------------------------------------------ expressions
def _float_array(values: Any) -> pd.arrays.FloatingArray:
    array = pd.array(np.asarray(values, dtype=np.float64), dtype="Float64")
    return array


def _column(df: pd.DataFrame, name: str) -> Any:
    series = df[name]
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return pd.array(series, dtype="boolean")
    if pd.api.types.is_numeric_dtype(dtype):
        values = series.astype("Float64").array
        return _nan_to_na(values)
    if pd.api.types.is_string_dtype(dtype) or dtype == np.dtype(object):
        return pd.array(series.astype("string[python]"), dtype="string[python]")
    return series.array


def _nan_to_na(values: Any) -> Any:
    raw = values.to_numpy(dtype=np.float64, na_value=np.nan)
    return pd.array(raw, dtype="Float64")  # NaN becomes NA


def _null_like(n: int) -> Any:
    return pd.array([pd.NA] * n, dtype="boolean")


def evaluate(expr: Expr, df: pd.DataFrame) -> Any:
    """Evaluate ``expr`` on ``df`` with SQL NULL semantics; returns a pandas extension array."""
    n = len(df)
    if isinstance(expr, Col):
        return _column(df, expr.name)
    if isinstance(expr, Lit):
        value = expr.value
        if value is None:
            return _null_like(n)
        if isinstance(value, bool):
            return pd.array([value] * n, dtype="boolean")
        if isinstance(value, int | float):
            return _float_array(np.full(n, float(value)))
        return pd.array([value] * n, dtype="string[python]")
    if isinstance(expr, IsIn):
        operand = evaluate(expr.operand, df)
        values = [v for v in expr.values if v is not None]
        has_null = len(values) != len(expr.values)
        mask = operand.isna()
        matched = np.zeros(n, dtype=bool)
        for value in values:
            eq = operand == value
            matched |= eq.to_numpy(dtype=bool, na_value=False)
        result = pd.array(matched, dtype="boolean")
        result[mask] = pd.NA
        if has_null:
            result[~matched] = pd.NA
        return result
    if isinstance(expr, Unary):
        operand = evaluate(expr.operand, df)
        if expr.op == "is_null":
            return pd.array(np.asarray(operand.isna(), dtype=bool), dtype="boolean")
        if expr.op == "is_not_null":
            return pd.array(~np.asarray(operand.isna(), dtype=bool), dtype="boolean")
        if expr.op == "not":
            return ~_as_boolean(operand)
        if expr.op == "neg":
            return -_as_float(operand)
        if expr.op == "abs":
            return abs(_as_float(operand))
        if expr.op in ("floor", "ceil"):
            numbers = _as_float(operand)
            raw = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
            out = np.floor(raw) if expr.op == "floor" else np.ceil(raw)
            return _float_array(out)
        strings = pd.Series(operand.astype("string[python]"))
        cased = strings.str.lower() if expr.op == "lower" else strings.str.upper()
        return cased.array
    if isinstance(expr, Binary):
        if expr.op == "coalesce":
            left = evaluate(expr.left, df)
            right = evaluate(expr.right, df)
            if isinstance(expr.left, Lit) and expr.left.value is None:
                return right
            out = left.copy()
            mask = np.asarray(left.isna(), dtype=bool)
            if isinstance(expr.right, Lit) and expr.right.value is None:
                return out
            out[mask] = _cast_like(right, left)[mask]
            return out
        left_null = isinstance(expr.left, Lit) and expr.left.value is None
        right_null = isinstance(expr.right, Lit) and expr.right.value is None
        if expr.op in ("and", "or"):
            a = _as_boolean(evaluate(expr.left, df))
            b = _as_boolean(evaluate(expr.right, df))
            return a & b if expr.op == "and" else a | b
        if left_null or right_null:
            if expr.op in ("+", "-", "*", "/"):
                return _float_array(np.full(n, np.nan))
            return _null_like(n)
        left = evaluate(expr.left, df)
        right = evaluate(expr.right, df)
        if expr.op in ("+", "-", "*", "/"):
            a, b = _as_float(left), _as_float(right)
            with np.errstate(all="ignore"):
                if expr.op == "+":
                    out = a + b
                elif expr.op == "-":
                    out = a - b
                elif expr.op == "*":
                    out = a * b
                else:
                    zero = np.asarray((b == 0).to_numpy(dtype=bool, na_value=False))
                    out = a / b
                    out[zero] = pd.NA
            return _nan_to_na(out)
        if isinstance(left, pd.arrays.FloatingArray) or isinstance(right, pd.arrays.FloatingArray):
            left, right = _as_float(left), _as_float(right)
        ops: dict[str, Callable[[Any, Any], Any]] = {
            "<": lambda x, y: x < y,
            "<=": lambda x, y: x <= y,
            ">": lambda x, y: x > y,
            ">=": lambda x, y: x >= y,
            "==": lambda x, y: x == y,
            "!=": lambda x, y: x != y,
        }
        return _as_boolean(ops[expr.op](left, right))
    raise UnsupportedQueryError(f"unknown expression node {type(expr).__name__}")


def _as_float(values: Any) -> Any:
    if isinstance(values, pd.arrays.FloatingArray):
        return values
    return pd.array(values, dtype="Float64")


def _as_boolean(values: Any) -> Any:
    if isinstance(values, pd.arrays.BooleanArray):
        return values
    return pd.array(values, dtype="boolean")


def _cast_like(values: Any, like: Any) -> Any:
    return pd.array(values, dtype=like.dtype)


# ------------------------------------------------------------------------ engine
def _as_dataframe(source: Any) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, pa.Table):
        return source.to_pandas()
    raise InvalidDataError("source", f"the pandas engine cannot read {type(source).__name__}")


class PandasEngine:
    """The reference engine over a pandas DataFrame (kept as given; never modified)."""

    name = "pandas"

    def __init__(self, source: Any) -> None:
        self._df = _as_dataframe(source)

    def schema(self) -> dict[str, ColumnKind]:
        out: dict[str, ColumnKind] = {}
        for name, dtype in self._df.dtypes.items():
            out[str(name)] = _kind_of_pandas(self._df[name], dtype)
        return out

    def close(self) -> None:
        """Nothing to release."""

    def run(self, plan: BoundedPlan) -> pa.Table:
        df = self._df
        for step in plan.steps:
            if step.kind == "derive":
                assert step.expr is not None
                df = df.assign(**{step.name: evaluate(step.expr, df)})
            elif step.kind == "filter":
                assert step.expr is not None
                keep = _as_boolean(evaluate(step.expr, df)).to_numpy(dtype=bool, na_value=False)
                df = df[keep]
            else:
                df = df[list(step.columns)]
        return self._aggregate(df.reset_index(drop=True), plan)

    def _aggregate(self, df: pd.DataFrame, plan: BoundedPlan) -> pa.Table:
        work = pd.DataFrame({"u": df[plan.unit]})
        for i, key in enumerate(plan.keys):
            work[f"k{i}"] = df[key]
        for j, spec in enumerate(plan.values):
            raw = _as_float(_column(df, spec.column)).to_numpy(dtype=np.float64, na_value=np.nan)
            idx, valid = grid_indices(raw, spec.lower, spec.upper, spec.exponent)
            if spec.allowed:
                idx = project_to_ranges(idx, spec.allowed)
            work[f"v{j}"] = pd.array(np.where(valid, idx, 0), dtype="Int64")
            work.loc[~valid, f"v{j}"] = pd.NA
        keep = np.array(work["u"].notna().to_numpy(), dtype=bool)
        if plan.key_set is not None:
            keep &= _in_key_set(work, plan)
        if plan.bins is not None:
            if plan.bins.kind == "grid":
                bins = work[f"v{plan.bins.value}"]
            else:
                raw = _as_float(_column(df, plan.bins.column)).to_numpy(
                    dtype=np.float64, na_value=np.nan
                )
                bins = pd.array(_edge_bins(raw, plan.bins.edges), dtype="Int64")
            work["b"] = bins
            keep &= work["b"].notna().to_numpy()
        work = work[keep].reset_index(drop=True)
        work = _bound(work, plan)
        group_cols = [f"k{i}" for i in range(len(plan.keys))] + (["b"] if plan.bins else [])
        return _summarise(work, plan, group_cols)


def _kind_of_pandas(series: pd.Series, dtype: Any) -> ColumnKind:
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_numeric_dtype(dtype):
        return "numeric"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "temporal"
    if pd.api.types.is_string_dtype(dtype):
        if dtype == np.dtype(object):
            sample = series.dropna()
            if len(sample) and not all(isinstance(v, str) for v in sample.iloc[:100]):
                try:
                    return kind_of_arrow(pa.array(sample.iloc[:100].tolist()).type)
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    return "other"
        return "string"
    return "other"


def _in_key_set(work: pd.DataFrame, plan: BoundedPlan) -> np.ndarray:
    assert plan.key_set is not None
    keys = set(plan.key_set.rows)
    columns = [work[f"k{i}"].tolist() for i in range(len(plan.keys))]
    return np.array([tuple(row) in keys for row in zip(*columns, strict=True)], dtype=bool)


def _edge_bins(values: np.ndarray, edges: tuple[float, ...]) -> np.ndarray:
    edge_array = np.asarray(edges, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    inside = (values >= edge_array[0]) & (values <= edge_array[-1])
    idx = np.searchsorted(edge_array, values, side="right") - 1
    idx = np.minimum(idx, len(edges) - 2)
    out[inside] = idx[inside]
    return out


def _texts(work: pd.DataFrame, names: list[str]) -> list[list[str | None]]:
    return [_text_column(work[name]) for name in names]


def _bound(work: pd.DataFrame, plan: BoundedPlan) -> pd.DataFrame:
    """Contribution bounding exactly as specified in BoundedPlan's docstring."""
    k, m, c = plan.max_rows, plan.max_groups, plan.max_rows_per_group
    key_cols = [f"k{i}" for i in range(len(plan.keys))]
    if work.empty:
        return work
    unit_text = pd.Series(_text_column(work["u"]), index=work.index)
    group_id = (
        pd.Series(
            list(zip(*[work[c_].tolist() for c_ in key_cols], strict=True)),
            index=work.index,
            dtype=object,
        )
        if key_cols
        else pd.Series([()] * len(work), index=work.index, dtype=object)
    )
    per_unit = work.groupby(unit_text, sort=False)
    heavy = np.zeros(len(work), dtype=bool)
    n_rows = per_unit["u"].transform("size").to_numpy()
    if k is not None:
        heavy |= n_rows > k
    if m is not None or c is not None:
        ug = pd.DataFrame({"t": unit_text, "g": group_id.map(repr)})
        n_groups = ug.groupby("t")["g"].transform("nunique").to_numpy()
        n_in_group = ug.groupby(["t", "g"])["g"].transform("size").to_numpy()
        if m is not None:
            heavy |= n_groups > m
        if c is not None:
            heavy |= n_in_group > c
    if not heavy.any():
        return work
    light = work[~heavy]
    rows = work[heavy].copy()
    salt = str(plan.salt)
    key_texts = _texts(rows, key_cols)
    value_cols = [f"v{j}" for j in range(len(plan.values))] + (["b"] if plan.bins else [])
    value_texts = _texts(rows, value_cols)
    units = _text_column(rows["u"])
    group_hash = []
    row_hash = []
    for i, unit in enumerate(units):
        keys_i = [texts[i] for texts in key_texts]
        group_hash.append(md5_text(salt, "g", [unit, *keys_i]))
        row_hash.append(md5_text(salt, "r", [unit, *keys_i, *(t[i] for t in value_texts)]))
    rows["_unit"] = units
    rows["_group"] = group_id[heavy].map(repr).to_numpy()
    rows["_gh"] = group_hash
    rows["_rh"] = row_hash
    if m is not None:
        distinct = rows[["_unit", "_group", "_gh"]].drop_duplicates()
        distinct = distinct.sort_values(["_unit", "_gh"])
        distinct["_gr"] = distinct.groupby("_unit").cumcount()
        chosen = distinct[distinct["_gr"] < m][["_unit", "_group"]]
        rows = rows.merge(chosen, on=["_unit", "_group"], how="inner")
    rows = rows.sort_values(["_unit", "_rh"], kind="mergesort")
    if c is not None:
        rows = rows[rows.groupby(["_unit", "_group"]).cumcount() < c]
    if k is not None:
        rows = rows[rows.groupby("_unit").cumcount() < k]
    rows = rows.drop(columns=["_unit", "_group", "_gh", "_rh"])
    return pd.concat([light, rows], ignore_index=True)


def _summarise(work: pd.DataFrame, plan: BoundedPlan, group_cols: list[str]) -> pa.Table:
    results: dict[tuple[Any, ...], list[int]] = {}
    if group_cols:
        grouped = work.groupby(group_cols, sort=False, dropna=False)
        parts: list[tuple[tuple[Any, ...], pd.DataFrame]] = [
            (key if isinstance(key, tuple) else (key,), part) for key, part in grouped
        ]
    else:
        parts = [((), work)]
    for key, part in parts:
        results[key] = [_output(part, out) for out in plan.outputs]
    names = list(plan.group_columns)
    columns: dict[str, list[Any]] = {name: [] for name in names}
    outs: list[list[int]] = [[] for _ in plan.outputs]
    for key, values in results.items():
        for name, value in zip(names, key, strict=True):
            columns[name].append(_plain(value))
        for i, value in enumerate(values):
            outs[i].append(value)
    arrays: dict[str, Any] = {
        name: pa.array(vals) if vals else pa.array([], pa.null()) for name, vals in columns.items()
    }
    if plan.bins is not None:
        arrays["bin"] = pa.array([int(v) for v in columns["bin"]], pa.int64())
    for i, vals in enumerate(outs):
        arrays[f"o{i}"] = pa.array([str(v) for v in vals], pa.string())
    return pa.table(arrays)


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float | np.floating) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def _output(part: pd.DataFrame, out: Output) -> int:
    if out.kind == "rows":
        return len(part)
    if out.kind == "units":
        return int(part["u"].nunique())
    values = part[f"v{out.value}"].dropna()
    if out.kind == "nonnull":
        return len(values)
    ints = [int(v) for v in values.tolist()]
    if out.kind == "sum":
        return sum(ints)
    return sum(v * v for v in ints)
