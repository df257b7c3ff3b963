"""Every kind of source gives the same aggregates: a pandas, Polars or Arrow table, a DuckDB
relation, a Parquet file and a CSV file, through a Session on each engine.

The same compiled plans (one fixed bounding salt) run on each source and must return identical
exact aggregates before noise; and with one (insecure, test-only) seed the whole
``Session.evaluate`` releases identical tables.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from _engine_oracle import result_dict

import dpkit as dp
from dpkit.analytics import Session, count, count_distinct_units, mean, median
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._planner import CompiledQuery, compile_query
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed

KEYS = ["R&D", "Sales", "O'Brien"]


def payslips() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 400
    salary = np.round(
        np.where(rng.random(n) < 0.3, rng.uniform(16e3, 17.5e3, n), rng.uniform(2.5e3, 3e3, n)), 2
    )
    salary[::23] = np.nan  # NULL in every source (an empty field in the CSV)
    return pd.DataFrame(
        {
            "person": rng.integers(0, 90, n).astype(np.int64),
            "dept": rng.choice(KEYS, n),
            "month": rng.integers(1, 13, n).astype(np.int64),
            "salary": salary,
        }
    )


# Polars is optional for users but in the `test` extra: its test below skips (and -ra reports
# the skip) only when it is not installed; it is never dropped from the list silently.
SOURCES = ["pandas", "arrow", "duckdb_relation", "parquet", "csv"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    folder = tmp_path_factory.mktemp("sources")
    df = payslips()
    paths = {"parquet": folder / "payslips.parquet", "csv": folder / "payslips.csv"}
    df.to_parquet(paths["parquet"], index=False)
    df.to_csv(paths["csv"], index=False)
    yield paths


def make_source(kind: str, files: dict[str, Path]) -> Any:
    df = payslips()
    if kind == "pandas":
        return df
    if kind == "polars":
        import polars as pl

        return pl.from_pandas(df)
    if kind == "arrow":
        return pa.Table.from_pandas(df, preserve_index=False)
    if kind == "duckdb_relation":
        con = duckdb.connect()
        con.register("payslips", df)
        return con.sql("SELECT * FROM payslips")
    return str(files[kind])


def the_query(session: Session) -> Any:
    return (
        session.query()
        .group_by("dept", keys=KEYS)
        .bound(max_rows=3)
        .agg(
            count(),
            count_distinct_units("people"),
            dp_sum("salary", (0, 20_000)),
            dp_sum("salary", values=[(2_500, 3_000), (16_000, 17_500)], name="bill"),
            mean("salary", (0, 20_000)),
            median("salary", (0, 20_000), candidates=64),
        )
    )


def compiled_for(session: Session) -> CompiledQuery:
    return compile_query(
        the_query(session),
        session.schema,
        session.privacy_unit,
        dp.PureDP(4),
        defaults=session.defaults,
        salt=424242,
    )


Result = tuple[list[dict[Any, list[int]]], pd.DataFrame | None]


@pytest.fixture
def run(
    engine_name: str, files: dict[str, Path], request: pytest.FixtureRequest
) -> Callable[[str], Result]:
    spark = request.getfixturevalue("spark") if engine_name == "spark" else None

    def go(kind: str) -> Result:
        # a CSV file stores no types: every column is text unless declared (the unit may stay
        # text: it is only hashed and counted, and "17" hashes like the integer 17)
        declared = {"month": "numeric", "salary": "numeric"} if kind == "csv" else None
        session = Session(
            make_source(kind, files),
            "person",
            dp.PureDP(10),
            engine=engine_name,
            spark=spark,
            schema=declared,
        )
        assert session.schema == {
            "person": "string" if kind == "csv" else "numeric",
            "dept": "string",
            "month": "numeric",
            "salary": "numeric",
        }
        compiled = compiled_for(session)
        # a 1-core local Spark takes ~1.5 s per plan: there, the main plan only, no release
        plans = compiled.plans[:1] if engine_name == "spark" else compiled.plans
        exact = [result_dict(session.engine.run(p), p) for p in plans]
        release = None
        if engine_name != "spark":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", InsecureRandomnessWarning)
                with insecure_deterministic_seed(5):
                    release = session.evaluate(the_query(session), epsilon=4).table
        session.close()
        return exact, release

    return go


def test_every_source_gives_the_same_aggregates(
    run: Callable[[str], Result], engine_name: str
) -> None:
    reference = Session(payslips(), "person", dp.PureDP(10), engine="pandas")
    expected = [result_dict(reference.engine.run(p), p) for p in compiled_for(reference).plans]
    assert sum(v[0] for v in expected[0].values()) > 0
    releases = {}
    for kind in SOURCES:
        if engine_name == "spark" and kind in ("pandas", "arrow"):
            continue  # Spark reads an Arrow table through pandas, like a pandas one
        exact, releases[kind] = run(kind)
        assert exact == expected[: len(exact)], kind
    if engine_name != "spark":
        for kind in SOURCES[1:]:
            pd.testing.assert_frame_equal(releases[kind], releases["pandas"], obj=kind)


def test_a_polars_source_gives_the_same_aggregates(
    run: Callable[[str], Result], engine_name: str
) -> None:
    pytest.importorskip("polars", reason="polars is in the test extra: pip install -e '.[test]'")
    reference = Session(payslips(), "person", dp.PureDP(10), engine="pandas")
    expected = [result_dict(reference.engine.run(p), p) for p in compiled_for(reference).plans]
    exact, release = run("polars")
    assert exact == expected[: len(exact)]
    if engine_name != "spark":
        _, from_pandas = run("pandas")
        pd.testing.assert_frame_equal(release, from_pandas, obj="polars")
