"""The local reference engine: pandas, written for clarity. It is the test oracle of the others.

It follows :class:`~dpkit.analytics._engines._base.BoundedPlan`'s semantics literally, with SQL's
NULL semantics for expressions (pandas' nullable dtypes give Kleene logic for ``& | ~``).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics._engines._base import (
    SEPARATOR,
    BoundedPlan,
    Output,
    Step,
    escape_part,
    project_to_ranges,
)
from dpkit.analytics._engines._blocks import pandas_blocks
from dpkit.analytics._engines._columns import (
    canonical,
    check_declared_schema,
    csv_header,
    floor_arrow_temporal,
    is_parquet_path,
    kind_of_arrow,
    kind_of_pandas,
    parquet_schema,
    prepare_pandas,
    resolve_kinds,
    text_of,
)
from dpkit.analytics._engines._csv import StrictCSV
from dpkit.analytics._engines._relation import Relation, pandas_relation, relation_kinds
from dpkit.analytics._expr import Binary, Case, Col, ColumnKind, Expr, IsIn, Lit, Unary
from dpkit.errors import InvalidDataError, UnsupportedQueryError

__all__ = [
    "PandasEngine",
    "evaluate",
    "grid_indices",
    "md5_text",
    "relation_engine",
    "sql_text",
]

sql_text = text_of
"""The text SQL engines give ``CAST(value AS VARCHAR)`` (None for NULL/NaN)."""


def _text_column(series: pd.Series) -> list[str | None]:
    return [text_of(v) for v in series.tolist()]


def md5_text(salt: str, tag: str, parts: Sequence[str | None]) -> str:
    """md5 hex of salt, tag and the parts (NULL as ``n``, a value as ``v`` + its escaped text),
    joined by SEPARATOR: the same text the SQL engines build."""
    joined = SEPARATOR.join(
        [salt, tag, *("n" if p is None else "v" + escape_part(p) for p in parts)]
    )
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
    if isinstance(expr, Col):
        return _column(df, expr.name)
    if isinstance(expr, Lit):
        return _literal(expr.value, len(df))
    if isinstance(expr, IsIn):
        return _is_in(expr, df)
    if isinstance(expr, Unary):
        return _unary(expr, df)
    if isinstance(expr, Binary):
        if expr.op == "coalesce":
            return _coalesce(expr, df)
        if expr.op == "like":
            return _like(expr, df)
        return _binary(expr, df)
    if isinstance(expr, Case):
        return _case(expr, df)
    raise UnsupportedQueryError(f"unknown expression node {type(expr).__name__}")


def _literal(value: Any, n: int) -> Any:
    """``value`` repeated ``n`` times (NULL as a boolean NA array)."""
    if value is None:
        return _null_like(n)
    if isinstance(value, bool):
        return pd.array([value] * n, dtype="boolean")
    if isinstance(value, int | float):
        return _float_array(np.full(n, float(value)))
    if isinstance(value, _dt.datetime):
        return pd.array(np.full(n, np.datetime64(value, "us")), dtype="datetime64[us]")
    return pd.array([value] * n, dtype="string[python]")


def _is_in(expr: IsIn, df: pd.DataFrame) -> Any:
    """``operand IN (values)``: NULL for a NULL operand, and for no match when a value is NULL."""
    n = len(df)
    operand = evaluate(expr.operand, df)
    values = [v for v in expr.values if v is not None]
    has_null = len(values) != len(expr.values)
    mask = operand.isna()
    matched = np.zeros(n, dtype=bool)
    for value in values:
        eq = operand == value
        # a datetime64 column compares to a plain ndarray (NaT is never equal)
        matched |= (
            eq.to_numpy(dtype=bool, na_value=False)
            if hasattr(eq, "to_numpy")
            else np.asarray(eq, dtype=bool)
        )
    result = pd.array(matched, dtype="boolean")
    result[mask] = pd.NA
    if has_null:
        result[~matched] = pd.NA
    return result


def like_regex(pattern: str) -> str:
    r"""SQL ``LIKE``'s ``pattern`` as a Python regular expression for ``re.fullmatch`` with
    ``re.DOTALL``: ``%`` is ``.*``, ``_`` is ``.``, every other character (``.*+?[](){}^$|\``
    included) is escaped, so matches itself."""
    table = {"%": ".*", "_": "."}
    return "".join(table.get(ch) or re.escape(ch) for ch in pattern)


def _like(expr: Binary, df: pd.DataFrame) -> Any:
    """``operand LIKE pattern`` (a text literal): NULL for a NULL operand."""
    if not (isinstance(expr.right, Lit) and isinstance(expr.right.value, str)):
        raise UnsupportedQueryError("the pattern of LIKE is a text literal")
    strings = pd.Series(evaluate(expr.left, df).astype("string[python]"))
    matched = strings.str.fullmatch(like_regex(expr.right.value), flags=re.DOTALL)
    return _as_boolean(matched.array)


def _case(expr: Case, df: pd.DataFrame) -> Any:
    """``then`` where the condition is TRUE, else ``default`` (a NULL condition is not TRUE)."""
    chosen = _as_boolean(evaluate(expr.condition, df)).to_numpy(dtype=bool, na_value=False)
    then, default = evaluate(expr.then, df), evaluate(expr.default, df)
    then_null = isinstance(expr.then, Lit) and expr.then.value is None
    default_null = isinstance(expr.default, Lit) and expr.default.value is None
    if then_null and default_null:
        return then
    then, default = _naive_utc(then), _naive_utc(default)
    like = default if then_null else then
    if isinstance(like, pd.arrays.FloatingArray):
        then, default = _as_float(then), _as_float(default)
    elif then_null or default_null:
        empty = pd.array([pd.NA] * len(df), dtype=like.dtype)
        then, default = (empty, default) if then_null else (then, empty)
    out = default.copy()
    out[chosen] = then[chosen]
    return out


def _part(op: str, operand: Any) -> Any:
    """The year, month or day of dates / timestamps, as numbers (NULL stays NULL)."""
    stamps = pd.Series(_naive_utc(operand))
    if not pd.api.types.is_datetime64_any_dtype(stamps.dtype):
        raise UnsupportedQueryError(f"{op.upper()} needs a date or timestamp column")
    part = {"year": stamps.dt.year, "month": stamps.dt.month, "day": stamps.dt.day}[op]
    return _float_array(part.to_numpy(dtype=np.float64, na_value=np.nan))


def _unary(expr: Unary, df: pd.DataFrame) -> Any:
    operand = evaluate(expr.operand, df)
    if expr.op == "is_null":
        return pd.array(np.asarray(operand.isna(), dtype=bool), dtype="boolean")
    if expr.op == "is_not_null":
        return pd.array(~np.asarray(operand.isna(), dtype=bool), dtype="boolean")
    if expr.op == "not":
        return ~_as_boolean(operand)
    if expr.op == "as_number":
        numbers = _as_boolean(operand).to_numpy(dtype=np.float64, na_value=np.nan)
        return _float_array(numbers)
    if expr.op == "neg":
        return -_as_float(operand)
    if expr.op == "abs":
        return abs(_as_float(operand))
    if expr.op in ("year", "month", "day"):
        return _part(expr.op, operand)
    if expr.op in ("floor", "ceil"):
        numbers = _as_float(operand)
        raw = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
        out = np.floor(raw) if expr.op == "floor" else np.ceil(raw)
        return _float_array(out)
    strings = pd.Series(operand.astype("string[python]"))
    cased = strings.str.lower() if expr.op == "lower" else strings.str.upper()
    return cased.array


def _coalesce(expr: Binary, df: pd.DataFrame) -> Any:
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


def _binary(expr: Binary, df: pd.DataFrame) -> Any:
    """``and``/``or`` (Kleene logic), arithmetic (:func:`_arithmetic`) and comparisons."""
    n = len(df)
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
        return _arithmetic(expr.op, left, right)
    if isinstance(left, pd.arrays.FloatingArray) or isinstance(right, pd.arrays.FloatingArray):
        left, right = _as_float(left), _as_float(right)
    left, right = _naive_utc(left), _naive_utc(right)
    ops: dict[str, Callable[[Any, Any], Any]] = {
        "<": lambda x, y: x < y,
        "<=": lambda x, y: x <= y,
        ">": lambda x, y: x > y,
        ">=": lambda x, y: x >= y,
        "==": lambda x, y: x == y,
        "!=": lambda x, y: x != y,
    }
    return _as_boolean(ops[expr.op](left, right))


def _arithmetic(op: str, left: Any, right: Any) -> Any:
    """``left op right`` as floats; ``x / 0`` and NaN results are NULL."""
    a, b = _as_float(left), _as_float(right)
    with np.errstate(all="ignore"):
        if op == "+":
            out = a + b
        elif op == "-":
            out = a - b
        elif op == "*":
            out = a * b
        else:
            zero = np.asarray((b == 0).to_numpy(dtype=bool, na_value=False))
            out = a / b
            out[zero] = pd.NA
    return _nan_to_na(out)


def apply_steps(df: pd.DataFrame, steps: Sequence[Step]) -> pd.DataFrame:
    """A plan's relational steps (derive, filter, select) on a frame, in order."""
    for step in steps:
        if step.kind == "derive":
            assert step.expr is not None
            df = df.assign(**{step.name: evaluate(step.expr, df)})
        elif step.kind == "filter":
            assert step.expr is not None
            keep = _as_boolean(evaluate(step.expr, df)).to_numpy(dtype=bool, na_value=False)
            df = df[keep]
        else:
            df = df[list(step.columns)]
    return df


def _naive_utc(values: Any) -> Any:
    """Time-zone-aware timestamps as naive UTC (how temporal literals and keys compare)."""
    if isinstance(getattr(values, "dtype", None), pd.DatetimeTZDtype):
        return pd.Series(values).dt.tz_convert("UTC").dt.tz_localize(None).array
    return values


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
def _relation_steps(df: pd.DataFrame, steps: Sequence[Step]) -> pd.DataFrame:
    """:func:`apply_steps`, except that a column copied or renamed (a derived bare column)
    keeps its dtype, as in SQL (an integer unit stays an integer: its hashed text is ``1``,
    not ``1.0``)."""
    for step in steps:
        if step.kind == "derive" and isinstance(step.expr, Col):
            df = df.assign(**{step.name: df[step.expr.name]})
        else:
            df = apply_steps(df, (step,))
    return df


@dataclass(frozen=True, slots=True)
class _Deferred:
    """A frame computed when a plan first runs (a relation over several tables)."""

    load: Callable[[], pd.DataFrame]
    kinds: Mapping[str, ColumnKind]


def relation_engine(node: Relation, tables: Mapping[str, PandasEngine]) -> PandasEngine:
    """An engine over relation ``node`` (:mod:`._relation`) of ``tables``; the frames are
    read and joined only when a plan first runs."""
    kinds = relation_kinds(node, lambda name: tables[name].schema())

    def load() -> pd.DataFrame:
        return pandas_relation(node, lambda name: tables[name]._data(), _relation_steps)

    return PandasEngine(_Deferred(load, kinds))


class PandasEngine:
    """The reference engine over a pandas DataFrame (kept as given; never modified).

    Also reads an Arrow table, or a CSV or Parquet path. Column kinds come from the dtypes (or
    the Arrow / Parquet schema; every CSV column is text) and the declared ``schema``; the data
    is loaded and converted to those kinds only when a plan runs (after the session reserved the
    query's budget), and conversions never fail (see :mod:`._columns`).
    """

    name = "pandas"

    def __init__(self, source: Any, *, schema: Mapping[str, str] | None = None) -> None:
        self._source = source
        self._loaded: pd.DataFrame | None = None
        self._csv: StrictCSV | None = None  # a CSV file is checked before it is read
        if isinstance(source, pd.DataFrame):
            storage = {str(n): kind_of_pandas(t) for n, t in source.dtypes.items()}
        elif isinstance(source, _Deferred):
            storage = dict(source.kinds)
        elif isinstance(source, pa.Table):
            storage = {f.name: kind_of_arrow(f.type) for f in source.schema}
        elif isinstance(source, str | Path):
            path = str(source)
            if not Path(path).exists():
                raise InvalidDataError("source", f"no file at {path!r}")
            if is_parquet_path(path):
                storage = {f.name: kind_of_arrow(f.type) for f in parquet_schema(path)}
            else:
                header = csv_header(path)
                self._csv = StrictCSV(path, len(header))
                storage = dict.fromkeys(header, "string")
        else:
            raise InvalidDataError(
                "source", f"the pandas engine cannot read {type(source).__name__}"
            )
        self._kinds, _ = resolve_kinds(storage, check_declared_schema(schema))

    def schema(self) -> dict[str, ColumnKind]:
        return dict(self._kinds)

    def close(self) -> None:
        """Nothing to release."""

    def _data(self) -> pd.DataFrame:
        """The table with every column converted to its kind (loaded on first use)."""
        if self._loaded is not None:
            return self._loaded
        source = self._source
        if isinstance(source, _Deferred):
            self._loaded = source.load()  # its tables' frames, already converted
            return self._loaded
        if isinstance(source, pa.Table):
            df = floor_arrow_temporal(source).to_pandas(date_as_object=False)
        elif isinstance(source, str | Path):
            if self._csv is not None:
                # the whole file, strictly, or UnreadableDataError (engines._csv); read with
                # pandas' strict settings too, so a line it reads otherwise is an error
                self._csv.ensure()
                df = pd.read_csv(
                    source,
                    dtype=str,
                    keep_default_na=False,
                    na_values=[""],
                    encoding="utf-8-sig",
                    encoding_errors="strict",
                    on_bad_lines="error",
                    engine="c",
                )
            else:
                import pyarrow.parquet as pq  # type: ignore[import-untyped]  # no stubs

                df = floor_arrow_temporal(pq.read_table(source)).to_pandas(date_as_object=False)
        else:
            df = source
        self._loaded = prepare_pandas(df, self._kinds)
        return self._loaded

    def blocks(
        self,
        steps: tuple[Step, ...],
        unit: str,
        columns: Sequence[str],
        m: int,
        salt: int,
        call: Any,
    ) -> np.ndarray:
        """Sample-and-aggregate: a keyed SipHash of each unit (:mod:`dpkit.analytics._blocks`)."""
        df = apply_steps(self._data(), steps)
        return pandas_blocks(df, unit, columns, m, salt, call)

    def run(self, plan: BoundedPlan) -> pa.Table:
        df = apply_steps(self._data(), plan.steps)
        return self._aggregate(df.reset_index(drop=True), plan)

    def _aggregate(self, df: pd.DataFrame, plan: BoundedPlan) -> pa.Table:
        work = pd.DataFrame({"u": df[plan.unit]})
        keys = [[canonical(v) for v in df[key].tolist()] for key in plan.keys]
        for j, spec in enumerate(plan.values):
            raw = _as_float(_column(df, spec.column)).to_numpy(dtype=np.float64, na_value=np.nan)
            idx, valid = grid_indices(raw, spec.lower, spec.upper, spec.exponent)
            if spec.allowed:
                idx = project_to_ranges(idx, spec.allowed)
            work[f"v{j}"] = pd.array(np.where(valid, idx, 0), dtype="Int64")
            work.loc[~valid, f"v{j}"] = pd.NA
        # one canonical identity per group, for bounding and aggregation alike
        identities: dict[tuple[Any, ...], int] = {}
        rows = list(zip(*keys, strict=True)) if keys else [()] * len(df)
        work["g"] = np.fromiter(
            (identities.setdefault(row, len(identities)) for row in rows),
            dtype=np.int64,
            count=len(rows),
        )
        groups = list(identities)
        keep = np.array(work["u"].notna().to_numpy(), dtype=bool)
        if plan.key_set is not None:
            declared = {tuple(canonical(v) for v in row) for row in plan.key_set.rows}
            wanted = np.array([g in declared for g in groups], dtype=bool)
            keep &= wanted[work["g"].to_numpy()] if groups else keep
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
        work = _bound(work, plan, groups)
        return _summarise(work, plan, groups)


def _edge_bins(values: np.ndarray, edges: tuple[float, ...]) -> np.ndarray:
    edge_array = np.asarray(edges, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    inside = (values >= edge_array[0]) & (values <= edge_array[-1])
    idx = np.searchsorted(edge_array, values, side="right") - 1
    idx = np.minimum(idx, len(edges) - 2)
    out[inside] = idx[inside]
    return out


def _bound(work: pd.DataFrame, plan: BoundedPlan, groups: list[tuple[Any, ...]]) -> pd.DataFrame:
    """Contribution bounding exactly as specified in BoundedPlan's docstring; a group is the
    canonical identity ``g`` (the same one :func:`_summarise` aggregates by)."""
    k, m, c = plan.max_rows, plan.max_groups, plan.max_rows_per_group
    if work.empty:
        return work
    unit_text = pd.Series(_text_column(work["u"]), index=work.index)
    heavy = np.zeros(len(work), dtype=bool)
    if k is not None:
        heavy |= unit_text.groupby(unit_text).transform("size").to_numpy() > k
    if m is not None or c is not None:
        ug = pd.DataFrame({"t": unit_text, "g": work["g"]})
        if m is not None:
            heavy |= ug.groupby("t")["g"].transform("nunique").to_numpy() > m
        if c is not None:
            heavy |= ug.groupby(["t", "g"])["g"].transform("size").to_numpy() > c
    if not heavy.any():
        return work
    light = work[~heavy]
    rows = work[heavy].copy()
    salt = str(plan.salt)
    key_texts = [[text_of(v) for v in group] for group in groups]
    value_cols = [f"v{j}" for j in range(len(plan.values))] + (["b"] if plan.bins else [])
    value_texts = [_text_column(rows[name]) for name in value_cols]
    units = _text_column(rows["u"])
    group_ids = rows["g"].tolist()
    rows["_unit"] = units
    rows["_gh"] = [
        md5_text(salt, "g", [unit, *key_texts[g]]) for unit, g in zip(units, group_ids, strict=True)
    ]
    rows["_rh"] = [
        md5_text(salt, "r", [unit, *key_texts[g], *(t[i] for t in value_texts)])
        for i, (unit, g) in enumerate(zip(units, group_ids, strict=True))
    ]
    if m is not None:
        distinct = rows[["_unit", "g", "_gh"]].drop_duplicates()
        # ties (an md5 collision) are broken by the key values, so distinct groups never share
        # a rank
        distinct["_tie"] = [_joined(key_texts[g]) for g in distinct["g"].tolist()]
        distinct = distinct.sort_values(["_unit", "_gh", "_tie"], kind="mergesort")
        distinct["_gr"] = distinct.groupby("_unit").cumcount()
        chosen = distinct[distinct["_gr"] < m][["_unit", "g"]]
        rows = rows.merge(chosen, on=["_unit", "g"], how="inner")
    rows = rows.sort_values(["_unit", "_rh"], kind="mergesort")
    if c is not None:
        rows = rows[rows.groupby(["_unit", "g"]).cumcount() < c]
    if k is not None:
        rows = rows[rows.groupby("_unit").cumcount() < k]
    rows = rows.drop(columns=["_unit", "_gh", "_rh"])
    return pd.concat([light, rows], ignore_index=True)


def _joined(texts: Sequence[str | None]) -> str:
    return SEPARATOR.join("n" if t is None else "v" + escape_part(t) for t in texts)


def _summarise(work: pd.DataFrame, plan: BoundedPlan, groups: list[tuple[Any, ...]]) -> pa.Table:
    by = ["g"] + (["b"] if plan.bins is not None else [])
    parts: list[tuple[tuple[Any, ...], pd.DataFrame]]
    if plan.keys or plan.bins is not None:
        parts = [
            (key if isinstance(key, tuple) else (key,), part)
            for key, part in work.groupby(by, sort=False, dropna=False)
        ]
    else:
        parts = [((0,), work)]
    key_values: list[list[Any]] = [[] for _ in plan.keys]
    bins: list[int] = []
    outs: list[list[str]] = [[] for _ in plan.outputs]
    for key, part in parts:
        group = groups[int(key[0])] if plan.keys else ()
        for i, value in enumerate(group):
            key_values[i].append(value)
        if plan.bins is not None:
            bins.append(int(key[1]))
        for i, out in enumerate(plan.outputs):
            outs[i].append(str(_output(part, out)))
    arrays: list[Any] = [_key_array(v) for v in key_values]
    if plan.bins is not None:
        arrays.append(pa.array(bins, pa.int64()))
    arrays.extend(pa.array(v, pa.string()) for v in outs)
    return pa.Table.from_arrays(arrays, names=list(plan.result_columns))


def _key_array(values: list[Any]) -> Any:
    """Group key values as an Arrow array; integers beyond int64 (a uint64 column) become
    uint64 or decimals instead of failing (whether that happens depends on one unit's key)."""
    if not values:
        return pa.array([], pa.null())
    try:
        return pa.array(values)
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
        ints = [v for v in values if v is not None]
        if all(isinstance(v, int | np.integer) for v in ints):
            if all(int(v) >= 0 for v in ints) and max(map(int, ints)) < 2**64:
                return pa.array([None if v is None else int(v) for v in values], pa.uint64())
            decimals = [None if v is None else decimal.Decimal(int(v)) for v in values]
            return pa.array(decimals, pa.decimal128(38, 0))
        return pa.array([None if v is None else str(v) for v in values], pa.string())


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
