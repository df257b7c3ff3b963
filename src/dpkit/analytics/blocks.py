"""Sample-and-aggregate blocks computed by the Session's engine.

:meth:`dpkit.analytics.Session.sample_and_aggregate` partitions the privacy units (not the rows)
of the table into ``m`` blocks and runs the analyst's function on each block's rows. The
partition is computed **by the engine**:

* every engine applies the query's relational steps (filters, derived columns) first, drops rows
  whose privacy unit is NULL (or NaN), and computes ``block = H(salt, unit) mod m`` where ``H`` is
  a keyed 64-bit hash and ``salt`` a fresh secret 62-bit word from :func:`dpkit.noise.random_words`
  (``-0.0`` is hashed as ``0.0`` so a unit is one value whatever its sign bit):

  - DuckDB: ``hash(unit, salt) % m`` in SQL; rows come back ordered by block and are cut into
    per-block pandas frames in Python;
  - pandas (the reference engine): :func:`pandas.util.hash_pandas_object` with the salt as its
    SipHash key (used by pandas for text only), then the 64-bit hash XOR the salt hashed again
    (pandas' unkeyed 64-bit mix), so numeric ids are salted too;
  - Spark: ``pmod(xxhash64(unit, salt), m)`` and ``groupBy(block).applyInPandas``: the function
    runs on the executors, one pandas frame per block, and only the m output vectors come back.

* **Privacy** needs nothing from the hash but that a unit's block is a function of its id and the
  salt alone: adding or removing one unit then changes the rows of exactly one block, whatever
  the other units are, so it changes one of the m block outputs (docs/sensitivity.md §6). How
  uniform the hash is only affects accuracy (DuckDB's and Spark's hashes are not PRFs; SipHash
  is).

* **Failures.** :func:`safe_call` runs the function on one block. If it raises (any exception,
  ``SystemExit`` too), returns an array of another shape, or returns NaN/±inf in some
  coordinates, the block's output (or those coordinates) is replaced by the public default;
  warnings are silenced. Nothing says which block failed: the default is indistinguishable from
  a block that returned it. Blocks with no rows are computed too (on an empty frame with the
  columns), in the driver for Spark, where ``applyInPandas`` never calls a function for an
  empty group. What cannot be contained: a function that kills its process (``os._exit``), never
  returns, or writes what it saw somewhere (including state it keeps between calls, e.g. a
  scikit-learn estimator with ``warm_start=True`` reused across blocks), or raises
  ``KeyboardInterrupt`` (re-raised, so that Ctrl-C still stops a release; a function that raises
  it on purpose is in the same class as one that writes what it saw); a function's run time is
  also not hidden.

* **Row order.** ``fn`` receives a block's rows in a canonical order: sorted by a hash of each
  row's content (:func:`canonical_order`), on every engine. Without it an order-sensitive ``fn``
  (the first row, an SGD pass, ``head()``) would see rows in an order that DuckDB's parallel sort
  and Spark's shuffle choose from the *whole* table, so a unit in one block could change the
  output of another block, which the privacy argument rules out. The order is a function of the
  block's rows alone (rows with equal hashes are equal, up to a 2^-64 collision of the
  content hash).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics.engines.base import Step
from dpkit.analytics.engines.sql import sql_text
from dpkit.analytics.expr import ColumnKind, columns_of
from dpkit.errors import InvalidParameterError

__all__ = ["BLOCK_ENGINES", "BlockCall", "canonical_order", "engine_blocks", "safe_call"]

BLOCK_ENGINES = ("duckdb", "pandas", "spark")
"""The engines that compute blocks (checked before any reservation)."""


class BlockCall:
    """``fn`` on one block's rows -> a float vector of length d, never raising (picklable, so
    Spark can ship it to its workers).

    A raise, a wrong shape or a non-numeric result gives the whole ``fill`` vector; NaN/±inf
    coordinates are replaced by ``fill``'s coordinates.
    """

    def __init__(self, fn: Callable[[Any], Any], shape: tuple[int, ...], fill: np.ndarray) -> None:
        self.fn = fn
        self.shape = shape
        self.fill = np.asarray(fill, dtype=np.float64).reshape(-1)

    def __call__(self, frame: Any) -> np.ndarray:
        return safe_call(self.fn, frame, self.shape, self.fill)


def safe_call(
    fn: Callable[[Any], Any], frame: Any, shape: tuple[int, ...], fill: np.ndarray
) -> np.ndarray:
    """Run ``fn(frame)`` and map every failure to the public ``fill`` (see :class:`BlockCall`)."""
    out = fill.copy()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            value = np.asarray(fn(frame), dtype=np.float64)
        except KeyboardInterrupt:
            raise
        except BaseException:  # any failure (SystemExit too) maps to the public default
            return out
        if value.shape != shape and not (value.ndim == 0 and shape == (1,)):
            return out
        flat = value.reshape(-1)
        return np.where(np.isfinite(flat), flat, fill)


# ----------------------------------------------------------------------------- engines
def engine_blocks(
    engine: Any,
    steps: tuple[Step, ...],
    unit: str,
    columns: Sequence[str],
    m: int,
    salt: int,
    call: BlockCall,
) -> np.ndarray:
    """The (m, d) matrix of block outputs: row b is ``call`` on block b's rows (never raises on
    account of the function; an engine error is the Session's to handle)."""
    name = getattr(engine, "name", "")
    if name == "duckdb":
        return _duckdb_blocks(engine, steps, unit, columns, m, salt, call)
    if name == "pandas":
        return _pandas_blocks(engine, steps, unit, columns, m, salt, call)
    if name == "spark":
        return _spark_blocks(engine, steps, unit, columns, m, salt, call)
    raise InvalidParameterError(
        "engine", name or type(engine).__name__, "'duckdb', 'pandas' or 'spark' for blocks"
    )


def check_blocks(engine: Any, steps: tuple[Step, ...], unit: str, columns: Sequence[str]) -> None:
    """Write the SQL :func:`engine_blocks` will run (public: no data is read), before anything
    is reserved; a query the generator cannot write is refused (``engines.sql.sql_text``)."""
    from sqlglot import exp

    name: Any = getattr(engine, "name", "")
    if name == "duckdb":
        engine._prepare_pandas()
        source = engine._source_sql.copy()
    elif name == "spark":
        engine._prepare()
        source = exp.Table(this=exp.to_identifier(engine._view, quoted=True))
    else:
        return
    sql_text(_rows_select(engine, source, steps, unit, columns, 2, 0, name), name)


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


def _split_sorted(
    frame: pd.DataFrame, blocks: np.ndarray, m: int, call: BlockCall, columns: Sequence[str]
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


def _pandas_blocks(
    engine: Any,
    steps: tuple[Step, ...],
    unit: str,
    columns: Sequence[str],
    m: int,
    salt: int,
    call: BlockCall,
) -> np.ndarray:
    from dpkit.analytics.engines.pandas_engine import apply_steps

    df = apply_steps(engine._data(), steps)
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
    return _split_sorted(df.reset_index(drop=True), blocks, m, call, columns)


def _rows_select(
    engine: Any,
    source: Any,
    steps: tuple[Step, ...],
    unit: str,
    columns: Sequence[str],
    m: int,
    salt: int,
    dialect: str,
) -> Any:
    """SELECT block, columns FROM (source after the steps) WHERE unit IS NOT NULL."""
    from sqlglot import exp

    from dpkit.analytics.engines.sql import (
        _ExprCompiler,
        _select,
        column,
        converted,
        double,
        literal,
    )

    conversions: dict[str, ColumnKind] = dict(engine._conversions)
    schema: dict[str, ColumnKind] = dict(engine._schema)
    floats = set(engine._floats) | {c for c, k in conversions.items() if k == "numeric"}
    floats -= {c for c, k in conversions.items() if k != "numeric"}
    compiler = _ExprCompiler(schema, floats, dialect)  # type: ignore[arg-type]
    names = list(engine._columns)
    first = [
        exp.alias_(converted(c, conversions[c], dialect), c, quoted=True)  # type: ignore[arg-type]
        if c in conversions
        else column(c)
        for c in names
    ]
    query: Any = _select(*first).from_(source, copy=False)
    # consecutive derived columns that do not read one another share one SELECT, as in
    # engines.sql.build_query: one subquery level per derived column nested 2,000 levels
    # deep for 2,000 independent columns (the planner counts levels as shared)
    level: dict[str, Any] = {}

    def close_level() -> None:
        nonlocal query, names
        if not level:
            return
        sub = query.subquery("__s", copy=False)
        kept = [column(c) for c in names if c not in level]
        derived = [exp.alias_(v, n, quoted=True, copy=False) for n, v in level.items()]
        query = _select(*kept, *derived).from_(sub, copy=False)
        names = [c for c in names if c not in level] + list(level)
        level.clear()

    for step in steps:
        if step.kind == "derive":
            assert step.expr is not None
            if step.name in level or columns_of(step.expr) & level.keys():
                close_level()
            level[step.name] = compiler.compile(step.expr)
            kind = compiler.kind(step.expr)
            compiler.schema[step.name] = kind if kind is not None else "numeric"
            compiler.float_columns.discard(step.name)
            continue
        close_level()
        sub = query.subquery("__s", copy=False)
        if step.kind == "filter":
            assert step.expr is not None
            query = _select("*").from_(sub).where(compiler.compile(step.expr))
        else:
            names = list(step.columns)
            query = _select(*[column(c) for c in names]).from_(sub)
    close_level()
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


def _duckdb_blocks(
    engine: Any,
    steps: tuple[Step, ...],
    unit: str,
    columns: Sequence[str],
    m: int,
    salt: int,
    call: BlockCall,
) -> np.ndarray:
    from sqlglot import exp

    engine._prepare_pandas()
    select = _rows_select(
        engine, engine._source_sql.copy(), steps, unit, columns, m, salt, "duckdb"
    )
    ordered = select.order_by(exp.column("__dpkit_block", quoted=True))
    table = engine._con.sql(sql_text(ordered, "duckdb")).to_arrow_table()
    frame = table.to_pandas()
    blocks = frame["__dpkit_block"].to_numpy(dtype=np.int64)
    return _split_sorted(frame, blocks, m, call, columns)


def _spark_blocks(
    engine: Any,
    steps: tuple[Step, ...],
    unit: str,
    columns: Sequence[str],
    m: int,
    salt: int,
    call: BlockCall,
) -> np.ndarray:
    from sqlglot import exp

    engine._prepare()
    select = _rows_select(
        engine,
        exp.Table(this=exp.to_identifier(engine._view, quoted=True)),
        steps,
        unit,
        columns,
        m,
        salt,
        "spark",
    )
    frame = engine._spark.sql(sql_text(select, "spark"))
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
