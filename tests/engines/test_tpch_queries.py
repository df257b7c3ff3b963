"""The DP TPC-H queries of benchmarks/tpch.py on every engine: the same exact bounded outputs
before noise on pandas, DuckDB and Spark, and each answered twice, by two analysts of one
ledger, through ``Session.evaluate_sql`` (the caches: the links' key maps, the relation
engines)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from _tpch_tiny import benchmark, tables

import dpkit as dp
from dpkit.analytics import Session
from dpkit.analytics._planner import compile_query
from dpkit.analytics._query import Bounding
from dpkit.ledger import Ledger

BENCH = benchmark()


def _session(engine: str, spark: Any = None, **options: Any) -> Session:
    data = tables()
    return Session(
        {t: data[t] for t in BENCH.PRIVATE},
        privacy_unit=BENCH.UNIT,
        links=BENCH.LINKS,
        public={t: data[t] for t in BENCH.PUBLIC},
        engine=engine,
        spark=spark,
        **({"budget": dp.PureDP(1000)} | options),
    )


def _exact(session: Session, name: str) -> list[pd.DataFrame]:
    query = BENCH.QUERIES[name]
    parsed = session._parse_sql(query.dp)
    built = session._sql_query(parsed, query.keys or None, Bounding(max_rows=query.max_rows))
    single, schema, unit, _, engine = session._resolve(built)
    compiled = compile_query(single, schema, unit, dp.PureDP(1), salt=99)
    out = []
    for plan in compiled.plans:
        frame = engine.run(plan).to_pandas()
        for column in frame.columns:
            if column.startswith("__dpkit_o"):
                # a sum over no values: NULL in SQL, 0 in pandas (the release reads both as 0)
                frame[column] = [0 if v is None else int(v) for v in frame[column]]
        out.append(frame.sort_values(list(frame.columns)).reset_index(drop=True).astype(object))
    return out


@pytest.mark.parametrize("name", sorted(BENCH.QUERIES))
def test_every_engine_gives_the_same_exact_outputs(name: str, spark: Any) -> None:
    results = {}
    for engine in ("pandas", "duckdb", "spark"):
        session = _session(engine, spark if engine == "spark" else None)
        try:
            results[engine] = _exact(session, name)
        finally:
            session.close()
    assert results["pandas"][0]["__dpkit_o0"].sum() > 0, "the tiny database gives no rows"
    for engine in ("duckdb", "spark"):
        for ref, got in zip(results["pandas"], results[engine], strict=True):
            assert ref.values.tolist() == got.values.tolist(), (name, engine)


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_each_query_twice_by_two_analysts(engine: str, tmp_path: Any) -> None:
    ledger = Ledger.open(str(tmp_path / "ledger.sqlite"))
    dataset = "tpch"
    ledger.create_budget(dataset, dp.PureDP(100), privacy_unit=BENCH.UNIT)
    for analyst in ("ana", "bob"):
        ledger.create_budget(dataset, dp.PureDP(40), privacy_unit=BENCH.UNIT, analyst=analyst)
    sessions = [
        _session(engine, ledger=ledger, dataset=dataset, analyst=a, budget=None)
        for a in ("ana", "bob")
    ]
    try:
        for _, query in sorted(BENCH.QUERIES.items()):
            for session in sessions:
                for _ in range(2):
                    release = session.evaluate_sql(
                        query.dp, keys=query.keys or None, max_rows=query.max_rows, epsilon=0.5
                    )
                    assert len(release.table) == max(1, _keys(query))
        for session in sessions:
            assert session.spent == dp.PureDP(0.5 * 2 * len(BENCH.QUERIES))
    finally:
        for session in sessions:
            session.close()


def _keys(query: Any) -> int:
    n = 1
    for values in query.keys.values():
        n *= len(values)
    return n if query.keys else 1
