"""Engine test fixtures: one shared local SparkSession for the whole test session."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dpkit.analytics._engines import DuckDBEngine, Engine, PandasEngine

ENGINES = ["pandas", "duckdb", "spark"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pyspark = pytest.importorskip("pyspark")
    del pyspark
    from pyspark.sql import SparkSession

    # Python workers (applyInPandas) must run this interpreter, which has pyarrow and dpkit;
    # "python3" on PATH is not the venv's when pytest is started as .venv/bin/python -m pytest.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[1]")
        .appName("dpkit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        # tiny tables: adaptive re-planning costs more than it saves (about 10 % of a small
        # Session query); it never changes a result. Whole-stage code generation stays on, as
        # users run it: the wide-query tests need its limits.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def make(engine_name: str, request: pytest.FixtureRequest) -> Callable[..., Engine]:
    """Build the parametrised engine over a source (and a declared schema, if given)."""

    def build(df: Any, schema: Any = None) -> Engine:
        if engine_name == "pandas":
            return PandasEngine(df, schema=schema)
        if engine_name == "duckdb":
            return DuckDBEngine(df, schema=schema)
        from dpkit.analytics._engines._spark import SparkEngine

        return SparkEngine(df, spark=request.getfixturevalue("spark"), schema=schema)

    return build
