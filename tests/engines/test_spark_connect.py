"""A Spark Connect DataFrame as a source (what Databricks and ``builder.remote(...)`` give),
against a real local Spark Connect server (the ``spark_connect`` fixture).

The same compiled plans (one fixed bounding salt) give exactly the same aggregates before noise
on a Connect frame as on a classic Spark frame, on DuckDB and on the reference engine: counts,
distinct units, sums, means and a median (its candidate counts), per group and over a join;
twice (the engines' caches). With one (insecure, test-only) seed a whole release over a Connect
frame equals DuckDB's, twice; sample-and-aggregate (``applyInPandas``) runs over Connect. A
session other than the frame's own is refused, naming it. Spark runs few plans here (1-2 s
each on an idle core): the classic-Spark suites cover the rest.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from _engine_oracle import result_dict
from _multitable import UNIT, database, session_options, split

import dpkit as dp
from dpkit.analytics import Session, col, count, count_distinct_units, mean, median
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._engines._spark import SparkEngine, is_connect
from dpkit.analytics._planner import compile_query
from dpkit.analytics._query import Bounding, Query
from dpkit.errors import InvalidParameterError
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed

KEYS = ["R&D", "Sales", "O'Brien"]


def payslips() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    n = 300
    salary = np.round(rng.uniform(2.5e3, 17.5e3, n), 2)
    salary[::19] = np.nan  # NULLs
    return pd.DataFrame(
        {
            "person": rng.integers(0, 60, n).astype(np.int64),
            "dept": rng.choice(KEYS, n),
            "salary": salary,
        }
    )


def the_query(session: Session) -> Query:
    return (
        session.query()
        .group_by("dept", keys=KEYS)
        .bound(max_rows=3)
        .agg(
            count(),
            count_distinct_units("people"),
            dp_sum("salary", (0, 20_000)),
            mean("salary", (0, 20_000)),
            median("salary", (0, 20_000), candidates=16),
        )
    )


def exact(session: Session, plans: int | None = None) -> list[dict[Any, list[int]]]:
    """The exact outputs of the query's plans (the first ``plans`` of them) before noise."""
    compiled = compile_query(
        the_query(session),
        session.schema,
        session.privacy_unit,
        dp.PureDP(4),
        defaults=session.defaults,
        salt=424242,
    )
    return [result_dict(session.engine.run(p), p) for p in compiled.plans[:plans]]


def test_the_fixture_is_a_real_connect_session(spark_connect: Any) -> None:
    frame = spark_connect.createDataFrame(payslips())
    assert is_connect(spark_connect) and is_connect(frame)
    assert type(frame).__module__.startswith("pyspark.sql.connect.")


def test_a_connect_frame_gives_the_same_exact_aggregates(spark: Any, spark_connect: Any) -> None:
    data = payslips()
    reference = exact(Session(data, "person", dp.PureDP(10), engine="pandas"))
    assert len(reference) >= 2  # the main plan and the median's candidate counts
    assert sum(v[0] for v in reference[0].values()) > 0
    remote = spark_connect.createDataFrame(data)
    classic = spark.createDataFrame(data)
    sessions = {
        # spark= left out: the engine runs on the frame's own (Connect) session
        "connect": Session(remote, "person", dp.PureDP(10), engine="spark"),
        "classic": Session(classic, "person", dp.PureDP(10), engine="spark", spark=spark),
        "duckdb": Session(remote, "person", dp.PureDP(10)),  # collected once, as Arrow
    }
    assert is_connect(sessions["connect"].engine._spark)  # type: ignore[attr-defined]
    try:
        for name, session in sessions.items():
            assert session.schema == {"person": "numeric", "dept": "string", "salary": "numeric"}
            # every plan on Connect; classic Spark (1-2 s a plan) runs the main plan, as in
            # test_sources.py, the median's counts being checked against the reference
            plans = 1 if name == "classic" else None
            assert exact(session, plans) == reference[:plans], name
        # twice: the same engine again (its view and caches)
        assert exact(sessions["connect"], 1) == reference[:1]
    finally:
        for session in sessions.values():
            session.close()


def test_a_release_over_a_connect_frame_equals_duckdbs(spark_connect: Any) -> None:
    data = payslips()
    remote = spark_connect.createDataFrame(data)
    tables = []
    for engine, source in (("spark", remote), ("duckdb", data)):
        session = Session(source, "person", dp.PureDP(10), engine=engine)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureRandomnessWarning)
            for _ in range(2):  # twice: a warm session releases the same way
                with insecure_deterministic_seed(5):
                    query = (  # one plan (no median): the exact test covers the rest
                        session.query()
                        .group_by("dept", keys=KEYS)
                        .bound(max_rows=3)
                        .agg(count(), dp_sum("salary", (0, 20_000)), mean("salary", (0, 20_000)))
                    )
                    tables.append(session.evaluate(query, epsilon=1).table)
        session.close()
    for table in tables[1:]:
        pd.testing.assert_frame_equal(table, tables[0])


def _join(session: Session) -> Query:
    return (
        session.query("lineitem")
        .join("orders", on=("l_orderkey", "o_orderkey"))
        .join("customer", on=("o_custkey", "c_custkey"))
        .with_column("rev", col("l_extendedprice") * (1 - col("l_discount")))
        .group_by("c_segment", keys=["AUTO", "BUILD", "MACH"])
        .agg(count(), dp_sum("rev", bounds=(0, 10_000)))
    )


def _join_exact(session: Session) -> list[list[tuple[Any, ...]]]:
    single, schema, unit, _, engine = session._resolve(_join(session))
    compiled = compile_query(
        single, schema, unit, dp.PureDP(1), defaults=Bounding(max_rows=3), salt=12345
    )
    out = []
    for plan in compiled.plans:
        frame = engine.run(plan).to_pandas()
        outputs = [c.startswith("__dpkit_o") for c in frame.columns]  # ints (text on pandas)
        rows = [
            tuple(
                None if pd.isna(v) else int(v) if o else v
                for v, o in zip(row, outputs, strict=True)
            )
            for row in frame.itertuples(index=False)
        ]
        out.append(sorted(rows, key=repr))
    return out


def test_a_join_of_connect_frames_gives_the_same_exact_aggregates(spark_connect: Any) -> None:
    db = database(0)
    private, public = split(db)
    results = {}
    for name in ("pandas", "connect"):
        if name == "connect":
            private = {n: spark_connect.createDataFrame(f) for n, f in private.items()}
            public = {n: spark_connect.createDataFrame(f) for n, f in public.items()}
        session = Session(
            private,
            privacy_unit=UNIT,
            budget=dp.PureDP(10),
            engine="spark" if name == "connect" else "pandas",
            public=public,
            **session_options(),
        )
        try:  # once: test_join_engines.py runs each join twice on classic Spark
            results[name] = _join_exact(session)
        finally:
            session.close()
    assert results["connect"] == results["pandas"]
    assert sum(row[1] for row in results["pandas"][0]) > 0


def test_another_session_than_the_frames_own_is_refused(spark: Any, spark_connect: Any) -> None:
    remote = spark_connect.createDataFrame(payslips())
    with pytest.raises(InvalidParameterError, match="Spark Connect SparkSession the source"):
        SparkEngine(remote, spark=spark)
    with pytest.raises(InvalidParameterError, match="classic Spark SparkSession the source"):
        SparkEngine(spark.createDataFrame(payslips()), spark=spark_connect)
    with pytest.raises(InvalidParameterError, match="spark="):
        Session(remote, "person", dp.PureDP(10), engine="spark", spark=spark)


def test_sample_and_aggregate_runs_over_connect(spark_connect: Any, seeded: None) -> None:
    """applyInPandas over Connect: every unit's rows in one block (xxhash64 of the unit), as
    tests/engines/test_sample_aggregate_engines.py checks on classic Spark."""
    df = pd.DataFrame({"user": np.repeat(np.arange(30), 2), "x": np.arange(60.0)})

    def units(rows: pd.DataFrame) -> np.ndarray:
        ids = rows["user"].to_numpy()
        counts = np.bincount(ids.astype(np.int64), minlength=30)
        return np.array([len(set(ids.tolist())), float(np.all(counts[counts > 0] == 2))])

    session = Session(spark_connect.createDataFrame(df), "user", dp.PureDP(100), engine="spark")
    release = session.sample_and_aggregate(
        units,
        columns=["user"],
        output_shape=2,
        output_range=(0, 30),
        n_range=(30, 30),
        m=3,
        epsilon=100,
        aggregator="inverse_median",
        names=["units", "whole"],
    )
    session.close()
    assert release.table["whole"][0] > 0.5  # every block holds whole units
    assert 3 <= release.table["units"][0] <= 20
