"""Sample-and-aggregate blocks inside the engines (see :mod:`dpkit.analytics._blocks` for the
privacy argument): the block of each privacy unit, the canonical row order, and the per-engine
ways to cut the rows into blocks. The engines' ``blocks`` and ``check_blocks`` methods use
these; nothing outside the engines package reads an engine's private state."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
from sqlglot import exp

from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._sql import (
    Dialect,
    _select,
    column,
    double,
    expr_compiler,
    literal,
    source_select,
    step_levels,
)
from dpkit.analytics._expr import ColumnKind

__all__ = ["canonical_order", "pandas_blocks", "rows_select", "spark_blocks", "split_sorted"]


def canonical_order(frame: pd.DataFrame) -> np.ndarray:
    """A permutation putting ``frame``'s rows in an order that depends on their content only:
    ascending 64-bit content hash (:func:`pandas.util.hash_pandas_object`, index excluded), ties
    (equal rows) kept in place. Never raises: a frame pandas cannot hash keeps its order."""
    if len(frame) < 2:
        return np.arange(len(frame))
    return np.argsort(_content_hash(frame), kind="stable")


def _content_hash(frame: pd.DataFrame) -> np.ndarray:
    """Each row's 64-bit content hash (index excluded); zeros (the given order) for a frame
    pandas cannot hash."""
    try:
        return pd.util.hash_pandas_object(frame, index=False).to_numpy(dtype=np.uint64)
    except Exception:  # pragma: no cover - the Session's column types are all hashable
        return np.zeros(len(frame), dtype=np.uint64)


def split_sorted(
    frame: pd.DataFrame, blocks: np.ndarray, m: int, call: Any, columns: Sequence[str]
) -> np.ndarray:
    """Rows -> one call per block, each block's rows in :func:`canonical_order` (empty blocks
    get an empty frame)."""
    data = frame[list(columns)].reset_index(drop=True)
    blocks = np.asarray(blocks, dtype=np.int64)
    if len(data) > 1:
        order = np.lexsort((_content_hash(data), blocks))
        data, blocks = data.iloc[order].reset_index(drop=True), blocks[order]
    bounds = np.searchsorted(blocks, np.arange(m + 1), side="left")
    out = np.empty((m, call.fill.size))
    for b in range(m):
        out[b] = call(data.iloc[int(bounds[b]) : int(bounds[b + 1])])
    return out


def pandas_blocks(
    df: pd.DataFrame,
    unit: str,
    columns: Sequence[str],
    m: int,
    salt: int,
    call: Any,
) -> np.ndarray:
    """The pandas engine's blocks of ``df`` (its rows after the plan's steps)."""
    units = df[unit]
    if pd.api.types.is_float_dtype(units.dtype):
        units = units.astype("float64") + 0.0  # -0.0 is 0.0
    keep = units.notna().to_numpy(dtype=bool)
    df, units = df[keep], units[keep]
    key = format(salt & ((1 << 64) - 1), "016x")[:16]
    hashed = pd.util.hash_pandas_object(
        units.reset_index(drop=True), index=False, hash_key=key
    ).to_numpy(dtype=np.uint64)
    # pandas uses hash_key for text only (numbers get a fixed, unkeyed mix): mix the salt in
    # again so that numeric ids get a fresh partition per release too
    salted = pd.Series(hashed ^ np.uint64(salt & ((1 << 64) - 1)))
    hashed = pd.util.hash_pandas_object(salted, index=False).to_numpy(dtype=np.uint64)
    blocks = (hashed % np.uint64(m)).astype(np.int64)
    return split_sorted(df.reset_index(drop=True), blocks, m, call, columns)


def rows_select(
    tables: Any,
    source: Any,
    steps: tuple[Step, ...],
    unit: str,
    columns: Sequence[str],
    m: int,
    salt: int,
    dialect: Dialect,
) -> Any:
    """SELECT block, columns FROM (source after the steps) WHERE unit IS NOT NULL.

    ``tables`` is the SQL engine itself (DuckDB or Spark): its declared conversions, schema,
    float columns and column names, read here inside the engines package."""
    conversions: dict[str, ColumnKind] = dict(tables._conversions)
    compiler = expr_compiler(tables._schema, tables._floats, conversions, dialect)
    floats = set(compiler.float_columns)  # the source's, before the steps
    names = list(tables._columns)
    query: Any = source_select(source, names, conversions, dialect)
    for expressions, where in step_levels(steps, compiler, names):
        query = _select(*expressions).from_(query.subquery("__s", copy=False), copy=False)
        if where is not None:
            query = query.where(where, copy=False)
    sub = query.subquery("__r", copy=False)
    u: Any = column(unit)
    condition: Any = exp.Not(this=exp.Is(this=u, expression=exp.Null()))
    if unit in floats:
        u = exp.Add(this=u, expression=double(0.0))
        condition = exp.and_(condition, exp.Not(this=exp.IsNan(this=column(unit))))
    if dialect == "duckdb":
        hashed: Any = exp.Anonymous(this="hash", expressions=[u, literal(salt)])
        block = exp.cast(exp.Mod(this=hashed, expression=literal(m)), "BIGINT")
    else:
        hashed = exp.Anonymous(this="xxhash64", expressions=[u, literal(salt)])
        block = exp.cast(exp.Anonymous(this="pmod", expressions=[hashed, literal(m)]), "BIGINT")
    select = _select(
        exp.alias_(block, "__dpkit_block", quoted=True), *[column(c) for c in columns]
    ).from_(sub)
    return select.where(condition)


def spark_blocks(frame: Any, columns: Sequence[str], m: int, call: Any) -> np.ndarray:
    """The (m, d) block outputs from a Spark frame of (block, columns): ``call`` runs on the
    executors, one pandas frame per block (``applyInPandas``); empty blocks in the driver."""
    d = call.fill.size
    names = [f"__dpkit_o{j}" for j in range(d)]
    schema = "__dpkit_block long, " + ", ".join(f"{n} double" for n in names)
    wanted = list(columns)

    def per_block(part: pd.DataFrame) -> pd.DataFrame:
        block = int(part["__dpkit_block"].iloc[0])
        rows = part[wanted].reset_index(drop=True)
        values = call(rows.iloc[canonical_order(rows)].reset_index(drop=True))
        row = {"__dpkit_block": [block], **{n: [float(values[j])] for j, n in enumerate(names)}}
        return pd.DataFrame(row)

    result = frame.groupBy("__dpkit_block").applyInPandas(per_block, schema=schema).toPandas()
    out = np.full((m, d), math.nan)
    seen = np.zeros(m, dtype=bool)
    for row in result.itertuples(index=False):
        b = int(row[0])
        out[b] = np.asarray(row[1:], dtype=np.float64)
        seen[b] = True
    if not seen.all():
        # an empty block: the function runs on an empty frame with the columns, in the driver
        empty = frame.select(*wanted).limit(0).toPandas()
        value = call(empty)
        out[~seen] = value
    return out
