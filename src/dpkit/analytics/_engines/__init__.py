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
    "ValueSpec",
    "make_engine",
]


def __getattr__(name: str) -> Any:
    if name == "SparkEngine":  # imported lazily: pyspark is an optional dependency
        from dpkit.analytics._engines._spark import SparkEngine

        return SparkEngine
    raise AttributeError(name)


def _is_spark_frame(source: Any) -> bool:
    return type(source).__module__.startswith("pyspark.")


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
            source = source.toArrow()
        return DuckDBEngine(source, schema=schema)
    if engine == "pandas":
        if _is_spark_frame(source):
            source = source.toArrow() if hasattr(source, "toArrow") else source.toPandas()
        elif hasattr(source, "to_arrow_table") and hasattr(source, "fetchall"):
            source = source.to_arrow_table()  # a DuckDB relation
        elif hasattr(source, "to_arrow") and not hasattr(source, "iloc"):
            source = source.to_arrow()  # Polars
        return PandasEngine(source, schema=schema)
    if engine == "spark":
        from dpkit.analytics._engines._spark import SparkEngine

        return SparkEngine(source, spark=spark, schema=schema)
    raise InvalidParameterError("engine", engine, "'duckdb', 'pandas' or 'spark'")
