"""Joins on every engine: the same relation and the same exact bounded outputs before noise,
each unit's joined rows its own (removing a unit with every row reachable from it changes no
other unit's rows), and the bounds' sensitivity realised, never exceeded, on neighbours."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _multitable import UNIT, database, remove_unit, session_options, split, units
from sqlglot import exp

import dpkit as dp
from dpkit.analytics import Session, col, count
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._bounding import contribution
from dpkit.analytics._engines._columns import RELATION_UNIT
from dpkit.analytics._planner import compile_query
from dpkit.analytics._query import Bounding, Query

NATIONS = ["A", "B", "C", "D", "D2"]


def _revenue(q: Query) -> Query:
    return q.with_column("rev", col("l_extendedprice") * (1 - col("l_discount")))


SHAPES: dict[str, Callable[[Session], Query]] = {
    "lineitem-orders-customer-nation": lambda s: (
        _revenue(
            s.query("lineitem")
            .join("orders", on=("l_orderkey", "o_orderkey"))
            .join("customer", on=("o_custkey", "c_custkey"))
            .join("nation", on=("c_nationkey", "n_nationkey"))
        )
        .group_by("n_name", keys=NATIONS)
        .agg(count(), dp_sum("rev", bounds=(0, 10_000)))
    ),
    "customer-left-orders": lambda s: (
        s.query("customer")
        .join("orders", on=("c_custkey", "o_custkey"), how="left")
        .group_by("c_segment", keys=["AUTO", "BUILD", "MACH"])
        .agg(count(), dp_sum("o_totalprice", bounds=(0, 1000)))
    ),
    "filtered-subquery": lambda s: _revenue(
        s.query("orders")
        .filter(col("o_orderstatus") == "F")
        .alias("o")
        .join("lineitem", on=("o.o_orderkey", "l_orderkey"))
    ).agg(count(), dp_sum("rev", bounds=(0, 10_000))),
    "per-unit-orders": lambda s: (
        s.query("customer")
        .join("orders", on=("c_custkey", "o_custkey"), how="left")
        .per_unit("c_custkey", n=("count", "o_orderkey"))
        .group_by("n", keys=list(range(8)))
        .agg(count())
    ),
    "public-join-private": lambda s: (
        s.query("nation")
        .join("customer", on=("n_nationkey", "c_nationkey"))
        .group_by("n_name", keys=NATIONS)
        .agg(count())
    ),
    "self-join-on-unit": lambda s: (
        s.query("orders")
        .alias("a")
        .join(s.query("orders").alias("b"), on=("a.o_custkey", "b.o_custkey"))
        .filter(col("a.o_orderkey") < col("b.o_orderkey"))
        .agg(count())
    ),
}


def _session(db: dict[str, pd.DataFrame], engine: str, spark: Any = None, **more: Any) -> Session:
    private, public = split(db)
    return Session(
        private,
        privacy_unit=UNIT,
        budget=dp.PureDP(10),
        engine=engine,
        public=public,
        spark=spark,
        **session_options(**more),
    )


def _exact(session: Session, query: Query, max_rows: int = 3) -> list[pd.DataFrame]:
    """The exact bounded outputs of every plan of ``query`` (a fixed salt: engines agree)."""
    single, schema, unit, _, engine = session._resolve(query)
    compiled = compile_query(
        single, schema, unit, dp.PureDP(1), defaults=Bounding(max_rows=max_rows), salt=12345
    )
    out = []
    for plan in compiled.plans:
        frame = engine.run(plan).to_pandas()
        columns = list(frame.columns)
        out.append(frame.sort_values(columns).reset_index(drop=True).astype(object))
    return out


def _relation_rows(session: Session, query: Query) -> pd.DataFrame:
    engine = session._resolve(query)[4]
    if session.tables is not None and session.tables.kind == "pandas":
        frame = engine._data()  # type: ignore[attr-defined]
    elif session.tables is not None and session.tables.kind == "duckdb":
        engine._ensure_readable()  # type: ignore[attr-defined]  # fills the links' key maps
        text = exp.select("*").from_(engine._source_sql.copy()).sql("duckdb")  # type: ignore[attr-defined]
        frame = engine._con.sql(text).df()  # type: ignore[attr-defined]
    else:
        frame = engine._frame.toPandas()  # type: ignore[attr-defined]
    return frame


def _values(series: pd.Series, column: str) -> list[Any]:
    """A result column's values; outputs (integers, possibly as decimals or text) as ints."""
    if not column.startswith("__dpkit_o"):
        return list(series)
    return [None if v is None else int(v) for v in series]


def _text(value: Any) -> str:
    if pd.isna(value):
        return "NULL"
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def _canonical(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    return sorted(tuple(_text(v) for v in row) for row in frame.itertuples(index=False))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_engines_agree_exactly_before_noise(shape: str, spark: Any) -> None:
    db = database(0)
    results = {}
    for engine in ("pandas", "duckdb", "spark"):
        session = _session(db, engine, spark=spark if engine == "spark" else None)
        try:
            query = SHAPES[shape](session)
            first = _exact(session, query)
            again = _exact(session, query)  # the relation engine is kept: same results
            for a, b in zip(first, again, strict=True):
                pd.testing.assert_frame_equal(a, b)
            results[engine] = first
        finally:
            session.close()
    for engine in ("duckdb", "spark"):
        for ref, got in zip(results["pandas"], results[engine], strict=True):
            assert ref.shape == got.shape, (engine, ref, got)
            for column in ref.columns:
                left, right = _values(ref[column], column), _values(got[column], column)
                assert left == right, (engine, column)


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_removing_a_unit_changes_no_other_units_rows(shape: str, engine: str) -> None:
    """The join plans are unit-local: for every unit u, the relation over the neighbour
    without u (and every row reachable from it) has exactly the same rows of every other
    unit, and none of u's."""
    db = database(1)
    session = _session(db, engine)
    try:
        full = _relation_rows(session, _unaggregated(SHAPES[shape](session)))
    finally:
        session.close()
    assert full[RELATION_UNIT].notna().any()
    for u in units(db):
        neighbour = _session(remove_unit(db, u), engine)
        try:
            rows = _relation_rows(neighbour, _unaggregated(SHAPES[shape](neighbour)))
        finally:
            neighbour.close()
        assert not (rows[RELATION_UNIT] == u).any()
        others = full[(full[RELATION_UNIT] != u) & full[RELATION_UNIT].notna()]
        kept = rows[rows[RELATION_UNIT].notna()]
        assert _canonical(others) == _canonical(kept), (shape, u)


def _unaggregated(query: Query) -> Query:
    from dpkit.analytics._joins import split_relation
    from dpkit.analytics._query import Aggregate

    chain, root = split_relation(query.plan)
    # the relation with the chain's filters and derived columns, without the aggregate
    plan = root
    for node in reversed([n for n in chain if not isinstance(n, Aggregate)]):
        from dataclasses import replace

        plan = replace(node, child=plan)  # type: ignore[arg-type]
    return Query(plan)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_bounded_outputs_move_by_at_most_the_claimed_sensitivity(shape: str) -> None:
    """On every neighbour, the exact bounded outputs differ by at most what the planner's
    contribution bounds claim, and the heavy customer (whose line items exceed the bound)
    reaches it: a planner that understated the bound by one would fail here."""
    db = database(2)
    max_rows = 3
    session = _session(db, "duckdb")
    try:
        base = _exact(session, SHAPES[shape](session), max_rows)[0]
    finally:
        session.close()
    claim = contribution(Bounding(max_rows=max_rows), False, None).rows_l1
    worst = Fraction(0)
    for u in units(db):
        neighbour = _session(remove_unit(db, u), "duckdb")
        try:
            other = _exact(neighbour, SHAPES[shape](neighbour), max_rows)[0]
        finally:
            neighbour.close()
        keys = [c for c in base.columns if c.startswith("__dpkit_k")]
        if keys:
            merged = base.merge(other, on=keys, how="outer", suffixes=("", "_n")).fillna(0)
        else:
            merged = pd.concat([base, other.add_suffix("_n")], axis=1).fillna(0)
        rows = "__dpkit_o0"
        moved = sum(
            abs(int(a) - int(b)) for a, b in zip(merged[rows], merged[rows + "_n"], strict=True)
        )
        assert moved <= claim, (shape, u, moved)
        worst = max(worst, Fraction(moved))
    if shape != "per-unit-orders":  # one row per unit there
        assert worst == claim, (shape, worst)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_relation_within_its_bounds_runs_in_one_pass_with_the_same_outputs(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB skips bounding (one pass, no temporary table) exactly when no unit has more rows
    in the relation than the bound, and gives the reference engine's outputs on both sides of
    that line (the heavy customer's rows decide it)."""
    from dpkit.analytics._engines._duckdb import DuckDBEngine

    chosen: list[tuple[int | None, bool]] = []
    within = DuckDBEngine._within_bounds

    def spy(self: DuckDBEngine, plan: Any) -> bool:
        result = within(self, plan)
        chosen.append((plan.max_rows, result))
        return result

    monkeypatch.setattr(DuckDBEngine, "_within_bounds", spy)
    db = database(2)
    reference, duck = _session(db, "pandas"), _session(db, "duckdb")
    try:
        rows = _relation_rows(duck, SHAPES[shape](duck))
        most = int(rows[RELATION_UNIT].value_counts().max())
        for max_rows in sorted({max(most - 1, 1), most, most + 1}):
            want = _exact(reference, SHAPES[shape](reference), max_rows)
            got = _exact(duck, SHAPES[shape](duck), max_rows)
            for ref, out in zip(want, got, strict=True):
                assert ref.shape == out.shape, (shape, max_rows)
                for column in ref.columns:
                    assert _values(ref[column], column) == _values(out[column], column)
    finally:
        reference.close()
        duck.close()
    assert chosen and all(
        one_pass == (bound is not None and bound >= most) for bound, one_pass in chosen
    )
    if most > 1:
        assert {one_pass for _, one_pass in chosen} == {True, False}


def _complete(db: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """``db`` without the rows that reach no unit or several: every order has a customer key,
    every line item's order key is held by orders of one customer."""
    orders = db["orders"][db["orders"]["o_custkey"].notna()]
    per_key = orders.groupby("o_orderkey")["o_custkey"].nunique()
    single = set(per_key[per_key == 1].index.tolist())
    lineitem = db["lineitem"][db["lineitem"]["l_orderkey"].isin(single)]
    return {**db, "orders": orders, "lineitem": lineitem}


LABELLED: dict[str, Callable[[Session], Query]] = {
    "lineitem": lambda s: (
        _revenue(s.query("lineitem"))
        .group_by("l_returnflag", keys=["A", "N", "R"])
        .agg(count(), dp_sum("rev", bounds=(0, 10_000)))
    ),
    "nation-customer": SHAPES["public-join-private"],
    "customer-left-nation": lambda s: (
        s.query("customer")
        .join("nation", on=("c_nationkey", "n_nationkey"), how="left")
        .group_by("n_name", keys=NATIONS)
        .agg(count(), dp_sum("c_acctbal", bounds=(0, 1000)))
    ),
    "lineitem-orders": SHAPES["filtered-subquery"],  # two private tables: never labelled
    "units-counted": lambda s: s.query("lineitem").agg(dp.analytics.count_distinct_units()),
}


@pytest.mark.parametrize("complete", [True, False])
@pytest.mark.parametrize("shape", sorted(LABELLED))
def test_a_relation_of_one_private_table_whose_every_row_has_a_unit_skips_its_joins(
    shape: str, complete: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one pass, DuckDB reads a relation of one private table without finding each row's
    unit (no join with the links' key maps) exactly when every row of the table has one unit
    and the plan counts no distinct units; the outputs are the reference engine's either way
    (rows of no unit, or of several, decide it)."""
    from dpkit.analytics._engines._duckdb import DuckDBEngine

    used: list[bool] = []
    labelled = DuckDBEngine._labelled

    def spy(self: DuckDBEngine, plan: Any) -> Any:
        result = labelled(self, plan)
        used.append(result is not None)
        return result

    monkeypatch.setattr(DuckDBEngine, "_labelled", spy)
    db = database(2)
    if complete:
        db = _complete(db)
    else:  # line items of no order or of two customers; a customer row with no key
        nobody = db["customer"].iloc[:1].assign(c_custkey=np.nan)
        db = {**db, "customer": pd.concat([db["customer"], nobody], ignore_index=True)}
    reference, duck = _session(db, "pandas"), _session(db, "duckdb")
    try:
        for _ in range(2):  # the counts are kept: the second query reads them
            want = _exact(reference, LABELLED[shape](reference), 1000)
            got = _exact(duck, LABELLED[shape](duck), 1000)
            for ref, out in zip(want, got, strict=True):
                assert ref.shape == out.shape, shape
                for column in ref.columns:
                    assert _values(ref[column], column) == _values(out[column], column)
    finally:
        reference.close()
        duck.close()
    eligible = shape in ("lineitem", "nation-customer", "customer-left-nation")
    assert used and all(u == (eligible and complete) for u in used), used


@pytest.mark.parametrize("shape", ["public-join-private", "lineitem-orders-customer-nation"])
def test_nan_keys_on_both_sides_match_nothing_in_duckdb(shape: str) -> None:
    """A NaN join key matches nothing, even a NaN on the other side (DuckDB's ``NaN = NaN`` is
    true): integer-stored keys skip the NaN test, float-stored ones never do."""
    db = database(0)
    assert db["customer"]["c_nationkey"].isna().any()
    nan_nation = pd.DataFrame({"n_nationkey": [np.nan], "n_name": ["A"]})
    db = {**db, "nation": pd.concat([db["nation"], nan_nation], ignore_index=True)}
    arrow = {  # numpy's NaN stays NaN in Arrow (pandas would give NULL)
        name: pa.table({c: pa.array(frame[c].to_numpy()) for c in frame.columns})
        for name, frame in db.items()
    }
    assert pc.sum(pc.is_nan(arrow["nation"]["n_nationkey"])).as_py() == 1  # NaN, not NULL
    reference, duck = _session(db, "pandas"), _session(arrow, "duckdb")
    try:
        want = _exact(reference, SHAPES[shape](reference), 1000)
        got = _exact(duck, SHAPES[shape](duck), 1000)
        for ref, out in zip(want, got, strict=True):
            assert ref.shape == out.shape, shape
            for column in ref.columns:
                assert _values(ref[column], column) == _values(out[column], column)
    finally:
        reference.close()
        duck.close()


def test_a_file_rewritten_between_two_queries_is_read_as_it_is_now(tmp_path: Any) -> None:
    """The key maps and the counts kept across a session's queries are made again when one of
    its files changes: a customer who now has many line items is bounded (a stale count would
    answer in one pass, unbounded), and an order that moved to another customer is theirs."""
    db = _complete(database(3))
    paths = {}
    for name, frame in db.items():
        paths[name] = str(tmp_path / f"{name}.parquet")
        frame.to_parquet(paths[name], index=False)
    query = LABELLED["lineitem"]

    def duck() -> Session:
        return Session(
            {t: paths[t] for t in ("customer", "orders", "lineitem")},
            privacy_unit=UNIT,
            budget=dp.PureDP(10),
            engine="duckdb",
            public={"nation": paths["nation"]},
            **session_options(),
        )

    session = duck()
    try:
        most = int(_relation_rows(session, query(session))[RELATION_UNIT].value_counts().max())
        before = _exact(session, query(session), most)  # one pass: no unit above the bound
        lineitem = db["lineitem"]
        heavy = pd.concat([lineitem] + [lineitem.iloc[:1]] * (3 * most), ignore_index=True)
        moved = db["orders"].copy()
        moved.loc[moved.index[0], "o_custkey"] = float(moved["o_custkey"].max())
        heavy.to_parquet(paths["lineitem"], index=False)
        moved.to_parquet(paths["orders"], index=False)
        stale = _exact(session, query(session), most)
    finally:
        session.close()
    fresh_session = duck()
    try:
        fresh = _exact(fresh_session, query(fresh_session), most)
    finally:
        fresh_session.close()
    assert [f.to_dict("list") for f in stale] == [f.to_dict("list") for f in fresh]
    assert [f.to_dict("list") for f in stale] != [f.to_dict("list") for f in before]


def test_a_one_pass_plan_shape_builds_its_sql_once() -> None:
    """Queries of one shape (each with its own salt) reuse the one-pass SQL text, which does not
    hold the salt, and give the reference engine's outputs each time."""
    from dpkit.analytics._engines._duckdb import DuckDBEngine

    db = _complete(database(2))
    reference, duck = _session(db, "pandas"), _session(db, "duckdb")
    built: list[int] = []
    sql = DuckDBEngine.sql

    def spy(self: DuckDBEngine, plan: Any, candidates: Any = None) -> str:
        built.append(plan.salt)
        return sql(self, plan, candidates)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(DuckDBEngine, "sql", spy)
            for salt in (4_611_686_018_427_387_001, 2_305_843_009_213_693_951, 987_654_321_987_654):
                query = LABELLED["lineitem"](duck)
                single, schema, unit, _, engine = duck._resolve(query)
                plans = compile_query(
                    single, schema, unit, dp.PureDP(1), defaults=Bounding(max_rows=1000), salt=salt
                ).plans
                want = _exact(reference, LABELLED["lineitem"](reference), 1000)
                got = [engine.run(p).to_pandas() for p in plans]
                for ref, out in zip(want, got, strict=True):
                    out = out.sort_values(list(out.columns)).reset_index(drop=True).astype(object)
                    for column in ref.columns:
                        assert _values(ref[column], column) == _values(out[column], column)
    finally:
        reference.close()
        duck.close()
    assert built == [4_611_686_018_427_387_001]  # built for the first salt only
