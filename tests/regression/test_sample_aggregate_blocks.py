"""Review of issue 10 (sample-and-aggregate blocks in the Session).

1. A unit must change the output of its own block only. DuckDB's ``ORDER BY block`` (parallel,
   not stable) and Spark's shuffle hand a block's rows to ``fn`` in an order chosen from the whole
   table, so an order-sensitive ``fn`` (the first row, ``head()``, one SGD pass) changed the
   outputs of blocks the added unit is not in. The blocks are now handed over in a canonical
   order (content hash), on every engine.
2. The pandas engine's "fresh secret salt" was ignored for numeric unit ids (pandas' hash_key
   keys text only): the partition was the same fixed function of the id in every release.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.analytics._blocks import BlockCall, canonical_order, engine_blocks
from dpkit.analytics._planner import rewrite, validate
from dpkit.analytics._query import Query, count

M = 8
SALT = 0x1234_5678_9ABC_DEF


def _first_rows(rows: pd.DataFrame) -> np.ndarray:
    """Order-sensitive: the first three values of the block (0 where there are fewer)."""
    x = rows["x"].to_numpy(dtype=np.float64)[:3]
    return np.concatenate([x, np.zeros(3 - x.size)])


def _blocks(df: pd.DataFrame, engine: str, fn: Any = _first_rows, d: int = 3) -> np.ndarray:
    session = Session(df, privacy_unit="user", budget=dp.PureDP(1), engine=engine)
    checked = validate(Query().agg(count()), session.schema, session.privacy_unit)
    steps = rewrite(checked.steps, frozenset({"user", "x"}))
    call = BlockCall(fn, (d,), np.zeros(d))
    return engine_blocks(session.engine, steps, "user", ["x"], M, SALT, call)


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_a_unit_changes_only_its_own_block_even_for_order_sensitive_fn(engine: str) -> None:
    rng = np.random.default_rng(0)
    n = 60_000  # large enough for DuckDB to scan and sort in parallel
    df = pd.DataFrame({"user": np.arange(n), "x": rng.normal(size=n)})
    extra = pd.DataFrame({"user": [n + 7] * 3, "x": [-50.0, -60.0, -70.0]})
    neighbour = pd.concat([df, extra], ignore_index=True)
    shuffled = df.sample(frac=1.0, random_state=1).reset_index(drop=True)
    a, b, c = _blocks(df, engine), _blocks(neighbour, engine), _blocks(shuffled, engine)
    changed = np.flatnonzero(np.any(a != b, axis=1))
    assert changed.size <= 1, f"the added unit changed blocks {changed.tolist()}"
    # the order is a function of the block's rows, not of where they sit in the table
    assert np.array_equal(a, c)


def test_canonical_order_depends_on_content_only() -> None:
    frame = pd.DataFrame({"x": [3.0, -0.0, 0.0, np.nan, 1.0], "s": ["a", "b", "b", None, "c"]})
    perm = np.random.default_rng(1).permutation(len(frame))
    other = frame.iloc[perm].reset_index(drop=True)
    first = frame.iloc[canonical_order(frame)].reset_index(drop=True)
    second = other.iloc[canonical_order(other)].reset_index(drop=True)
    pd.testing.assert_frame_equal(first, second)
    # -0.0 and 0.0 are distinct rows (fn can see the sign bit): their order is fixed too
    assert [np.signbit(v) for v in first["x"] if v == 0] == [
        np.signbit(v) for v in second["x"] if v == 0
    ]


def test_pandas_blocks_of_numeric_ids_change_with_the_salt() -> None:
    df = pd.DataFrame({"user": np.arange(200), "x": np.arange(200.0)})

    def ids(rows: pd.DataFrame) -> np.ndarray:
        return np.array([float(rows["x"].min()) if len(rows) else -1.0])

    session = Session(df, privacy_unit="user", budget=dp.PureDP(1), engine="pandas")
    checked = validate(Query().agg(count()), session.schema, session.privacy_unit)
    steps = rewrite(checked.steps, frozenset({"user", "x"}))
    call = BlockCall(ids, (1,), np.zeros(1))
    outs = {
        tuple(engine_blocks(session.engine, steps, "user", ["x"], M, salt, call)[:, 0])
        for salt in (1, 2, 3, 4)
    }
    assert len(outs) > 1, "the partition of numeric ids ignores the salt"
