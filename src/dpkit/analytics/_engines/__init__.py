"""Engines run a compiled query's exact, bounded relational plan; none of them draws noise.

* :class:`PandasEngine` — the local reference engine and test oracle;
* :class:`DuckDBEngine` — the default;
* :class:`SparkEngine` — the same plans on Spark, for data at scale.

The :class:`Engine` protocol is three methods: ``schema()``, ``run(plan)`` and ``close()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpkit.analytics._engines._base import BinSpec, BoundedPlan, Engine, Output, Step, ValueSpec
from dpkit.analytics._engines._duckdb import DuckDBEngine
from dpkit.analytics._engines._pandas import PandasEngine
from dpkit.analytics._expr import structural_key
from dpkit.errors import InvalidParameterError

__all__ = [
    "BinSpec",
    "BoundedPlan",
    "DuckDBEngine",
    "Engine",
    "Output",
    "PandasEngine",
    "SparkEngine",
    "Step",
    "Tables",
    "ValueSpec",
    "make_engine",
    "make_tables",
]


def __getattr__(name: str) -> Any:
    if name == "SparkEngine":  # imported lazily: pyspark is an optional dependency
        from dpkit.analytics._engines._spark import SparkEngine

        return SparkEngine
    raise AttributeError(name)


def _is_spark_frame(source: Any) -> bool:
    """A classic or Spark Connect DataFrame (both live under ``pyspark.``; pyspark itself is
    not imported to tell)."""
    return type(source).__module__.startswith("pyspark.")


def _spark_to_arrow(frame: Any) -> Any:
    """A Spark DataFrame (classic or Connect) collected as an Arrow table (through pandas on
    PySpark versions without ``toArrow``)."""
    if hasattr(frame, "toArrow"):
        return frame.toArrow()
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

    return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)  # pragma: no cover


def make_engine(
    engine: Any, source: Any, *, spark: Any = None, schema: Mapping[str, str] | None = None
) -> Engine:
    """An engine over ``source``: ``"duckdb"``, ``"pandas"``, ``"spark"`` or an Engine.

    ``schema`` declares column kinds (see :mod:`dpkit.analytics._engines._columns`); an Engine
    instance brings its own.
    """
    if not isinstance(engine, str):
        if isinstance(engine, Engine):
            if schema:
                raise InvalidParameterError(
                    "schema", schema, "given to the engine itself when the engine is an instance"
                )
            return engine
        raise InvalidParameterError("engine", engine, "'duckdb', 'pandas', 'spark' or an Engine")
    if engine == "duckdb":
        if _is_spark_frame(source):
            source = _spark_to_arrow(source)
        return DuckDBEngine(source, schema=schema)
    if engine == "pandas":
        if _is_spark_frame(source):
            source = _spark_to_arrow(source)
        elif hasattr(source, "to_arrow_table") and hasattr(source, "fetchall"):
            source = source.to_arrow_table()  # a DuckDB relation
        elif hasattr(source, "to_arrow") and not hasattr(source, "iloc"):
            source = source.to_arrow()  # Polars
        return PandasEngine(source, schema=schema)
    if engine == "spark":
        from dpkit.analytics._engines._spark import SparkEngine

        return SparkEngine(source, spark=spark, schema=schema)
    raise InvalidParameterError("engine", engine, "'duckdb', 'pandas' or 'spark'")


class Tables:
    """The engines of a session over several tables: one per table, all on one DuckDB
    connection (or one Spark session), and the engines over their relations (joins)."""

    def __init__(self, kind: str, engines: dict[str, Engine], connection: Any = None) -> None:
        self.kind = kind
        self.engines = engines
        self._connection = connection
        self._relations: dict[Any, Engine] = {}
        self._key_tables: dict[Any, Any] = {}  # DuckDB: each link's key map, computed once

    def relation(self, node: Any) -> Engine:
        """An engine over relation ``node`` (:mod:`._relation`); nothing is read until a plan
        runs. Engines are kept per relation (a relation asked twice gets the same engine)."""
        key = structural_key(node)  # once: a node hashes and compares by it, in Python
        found = self._relations.get(key)
        if found is not None:
            return found
        made: Engine
        if self.kind == "duckdb":
            from dpkit.analytics._engines._duckdb import relation_engine as duckdb_relation

            made = duckdb_relation(
                node,
                self.engines,  # type: ignore[arg-type]
                self._connection,
                self._key_tables,
            )
        elif self.kind == "pandas":
            from dpkit.analytics._engines._pandas import relation_engine as pandas_relation

            made = pandas_relation(node, self.engines)  # type: ignore[arg-type]
        else:
            from dpkit.analytics._engines._spark import relation_engine as spark_relation

            made = spark_relation(node, self.engines)  # type: ignore[arg-type]
        self._relations[key] = made
        return made

    def close(self) -> None:
        for engine in [*self._relations.values(), *self.engines.values()]:
            engine.close()
        self._relations.clear()
        if self._connection is not None:
            self._connection.close()


def make_tables(
    engine: Any,
    sources: Mapping[str, Any],
    *,
    spark: Any = None,
    schemas: Mapping[str, Mapping[str, str]] | None = None,
) -> Tables:
    """Engines over several tables (``name -> source``), of one kind: ``"duckdb"`` (one
    connection), ``"pandas"`` or ``"spark"`` (one Spark session)."""
    if engine not in ("duckdb", "pandas", "spark"):
        raise InvalidParameterError(
            "engine",
            engine,
            "'duckdb', 'pandas' or 'spark' (by name) for a session over several tables",
        )
    schemas = schemas or {}
    if engine == "duckdb":
        import duckdb

        connection = duckdb.connect(":memory:")
        import contextlib

        with contextlib.suppress(duckdb.Error):  # DuckDB built without ICU: no time zones
            connection.execute("SET TimeZone = 'UTC'")
        from dpkit.analytics._engines._duckdb import no_nan_folding

        no_nan_folding(connection)
        engines: dict[str, Engine] = {}
        for name, source in sources.items():
            if _is_spark_frame(source):
                source = _spark_to_arrow(source)
            engines[name] = DuckDBEngine(source, connection=connection, schema=schemas.get(name))
        return Tables("duckdb", engines, connection)
    if engine == "pandas":
        return Tables(
            "pandas",
            {n: make_engine("pandas", s, schema=schemas.get(n)) for n, s in sources.items()},
        )
    from dpkit.analytics._engines._spark import SparkEngine, default_spark_session, frame_session

    # the tables' own session when one is a Spark DataFrame (a Spark Connect frame's views and
    # queries live on its server session), else the active one
    frames = [frame_session(s) for s in sources.values() if _is_spark_frame(s)]
    session = spark if spark is not None else frames[0] if frames else default_spark_session()
    return Tables(
        "spark",
        {n: SparkEngine(s, spark=session, schema=schemas.get(n)) for n, s in sources.items()},
    )
