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

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._blocks import canonical_order
from dpkit.errors import InvalidParameterError

__all__ = ["BlockCall", "canonical_order", "check_blocks", "engine_blocks", "safe_call"]


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
    account of the function; an engine error is the Session's to handle). The engine computes
    the blocks (its ``blocks`` method, :mod:`dpkit.analytics._engines._blocks`)."""
    blocks = getattr(engine, "blocks", None)
    if blocks is None:
        raise InvalidParameterError(
            "engine",
            getattr(engine, "name", type(engine).__name__),
            "an engine with blocks: 'duckdb', 'pandas' or 'spark'",
        )
    result: np.ndarray = blocks(steps, unit, columns, m, salt, call)
    return result


def check_blocks(engine: Any, steps: tuple[Step, ...], unit: str, columns: Sequence[str]) -> None:
    """Let the engine write the SQL :func:`engine_blocks` will run (public: no data is read),
    before anything is reserved; a query the generator cannot write is refused
    (``engines.sql.sql_text``). An engine without ``check_blocks`` accepts here."""
    check = getattr(engine, "check_blocks", None)
    if check is not None:
        check(steps, unit, columns)
