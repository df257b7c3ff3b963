"""The SQL compiler's handling of many derived columns: independent ones share one SELECT,
NaN -> NULL is tested once per chain of + - * (the same values as after every operation, on
every engine), and a k-means Lloyd query at d = 50, k = 20 stays a few levels deep and linear
in size (it used to be hundreds of levels: minutes to build, or a RecursionError)."""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Engine, Session, col
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._engines._duckdb import DuckDBEngine
from dpkit.analytics._engines._sql import build_query

pytestmark = pytest.mark.usefixtures("seeded")

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, 1.0, -2.5, 1e308, -1e308, 3.0]


def frame() -> pd.DataFrame:
    values = np.array(SPECIAL)
    a, b = np.meshgrid(values, values)
    return pd.DataFrame({"u": np.arange(a.size), "a": a.ravel(), "b": b.ravel()})


def test_nan_is_null_after_arithmetic_chains_on_every_engine(
    make: Callable[..., Engine],
) -> None:
    """inf - inf, inf * 0, NaN and overflow inside a chain: the chain is NULL exactly where the
    reference (pandas) engine's value is NULL, and the other values agree."""
    df = frame()
    session = Session(df, "u", dp.PureDP(1), engine=make(df), max_rows=1)
    query = (
        session.query()
        .with_column("e", (col("a") * col("b") + col("a")) - col("b") * 2.0)
        .with_column("f", col("a") * 0.0 + (col("b") - col("b")))
        .with_column("g", col("e").is_null().as_number() + col("f").is_null().as_number() * 2.0)
        .with_column("h", col("e").fill_null(7.0))
    )
    query = query.group_by("g", keys=[0.0, 1.0, 2.0, 3.0]).agg(
        dp.analytics.count(name="n"), dp_sum("h", (-10, 10), name="s")
    )
    plan = session.compile(query, epsilon=1).plans[0]
    got = session.engine.run(plan).to_pydict()
    reference = Session(df, "u", dp.PureDP(1), engine="pandas", max_rows=1)
    ref_plan = reference.compile(query, epsilon=1).plans[0]
    want = reference.engine.run(ref_plan).to_pydict()

    def by_key(table: dict[str, list[object]], columns: list[str]) -> dict[float, list[int]]:
        keys, *outputs = (table[c] for c in columns)
        return {float(str(key)): [int(str(o[i])) for o in outputs] for i, key in enumerate(keys)}

    assert by_key(got, [*plan.group_columns, *plan.output_columns]) == by_key(
        want, [*ref_plan.group_columns, *ref_plan.output_columns]
    )


def test_lloyd_query_at_d50_k20_is_shallow_and_linear() -> None:
    from dpkit.ml._common import check_box
    from dpkit.ml._kmeans import _public_spread
    from dpkit.ml._session import _assignment, _counts_and_sums, _row_map

    d, k = 50, 20
    rng = np.random.default_rng(0)  # test data only
    df = pd.DataFrame(rng.uniform(-1, 1, (200, d)), columns=[f"x{i}" for i in range(d)])
    df["u"] = np.arange(200)
    session = Session(df, "u", dp.PureDP(1), engine="duckdb", max_rows=1)
    base, z = _row_map(session.query(), list(df.columns[:d]), check_box((-1, 1), d=d))
    centres = _public_spread(k, d)
    query = _counts_and_sums(
        _assignment(base, z, centres, "__ml_label"), z, "__ml_label", k, Fraction(1), Fraction(1)
    )
    plan = session.compile(query, epsilon=1).plans[0]
    engine = session.engine
    assert isinstance(engine, DuckDBEngine)
    text = engine.sql(plan)
    # about ten levels of derived columns (plus the bounding), not one per derived column
    assert len(set(re.findall(r"__s\d+", text))) < 15
    assert len(text) < 1_000_000  # linear in k·d (≈ 300 kB); was exponential in depth
    exact = engine.run(plan).to_pydict()
    counts = dict(zip(exact[plan.group_columns[0]], exact[plan.output_columns[0]], strict=True))
    x = df.iloc[:, :d].to_numpy()
    labels = np.argmin(((x[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
    assert [int(counts.get(j, 0)) for j in range(k)] == np.bincount(labels, minlength=k).tolist()


def test_independent_derived_columns_share_a_select() -> None:
    df = frame()
    session = Session(df, "u", dp.PureDP(1), engine="duckdb", max_rows=1)
    query = session.query()
    for i in range(40):  # independent: one level
        query = query.with_column(f"c{i}", col("a") * float(i))
    query = query.with_column("t", col("c1") + col("c2"))  # reads that level: a second one
    plan = session.compile(query.agg(dp_sum("t", (-1, 1), name="s")), epsilon=1).plans[0]
    engine = session.engine
    assert isinstance(engine, DuckDBEngine)
    tree = build_query(
        plan, engine._source_sql.copy(), engine._columns, engine._schema, engine._floats, "duckdb"
    )
    assert len(set(re.findall(r"__s\d+", tree.sql("duckdb")))) == 3  # source, level, level
