"""Engine test fixtures: one shared local SparkSession for the whole test session, and a Spark
Connect session served by that same JVM."""

from __future__ import annotations

import contextlib
import os
import socket
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


@pytest.fixture(scope="session")
def spark_connect(spark: Any) -> Iterator[Any]:
    """A Spark Connect session (``pyspark.sql.connect``) on a real local Connect server: the
    gRPC service started inside the classic fixture's JVM, on a free loopback port, so no second
    JVM boots (about a second on top of the classic session). Skips, saying why, only when
    PySpark's Connect client libraries (``pyspark[connect]``, in the test extra) are missing."""
    for module in ("grpc", "grpc_status", "google.rpc", "zstandard"):
        pytest.importorskip(module, reason="the Spark Connect client: pip install -e '.[test]'")
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = spark._jsc.sc()
    context.conf().set("spark.connect.grpc.binding.address", "127.0.0.1")
    context.conf().set("spark.connect.grpc.binding.port", str(port))
    service = getattr(spark._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
    service = getattr(service, "MODULE$")
    service.start(context)
    # the Connect client's own builder (pyspark.sql.SparkSession.builder.remote would switch
    # the whole process to Connect mode, and the classic fixture with it)
    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    yield session
    session.stop()
    with contextlib.suppress(Exception):  # the JVM stops it at exit otherwise
        none = spark._jvm.scala.Option.empty()
        service.stop(none, none)


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
