"""The Spark engine: the same compiled plan, rendered as Spark SQL, for tables at scale.

Sources: a Spark DataFrame, a CSV or Parquet path (read by Spark), or a pandas / Polars
DataFrame, an Arrow table or a DuckDB relation (turned into a Spark DataFrame). The source is
registered as a temporary view under a generated name and dropped by :meth:`SparkEngine.close`.
Sums are computed as ``DECIMAL(38, 0)`` so they are exact (Spark's ``SUM(BIGINT)`` would overflow
or fail).

Integer, string and boolean keys and units hash to the same text as on DuckDB, so both engines
keep the same rows; Spark prints some doubles and timestamps differently (``1.0E20``), so with
such keys or units Spark may keep different, equally valid, rows of heavy units.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env
from sqlglot import exp

from dpkit.analytics.engines.base import BoundedPlan
from dpkit.analytics.engines.sql import build_query, ident
from dpkit.analytics.expr import ColumnKind
from dpkit.errors import InvalidDataError

__all__ = ["SparkEngine", "default_spark_session"]


def default_spark_session() -> Any:
    """The active SparkSession, or a small local one (1 core, no UI)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    return (
        SparkSession.builder.master("local[1]")
        .appName("dpkit")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )


def _kind(data_type: Any) -> tuple[ColumnKind, bool]:
    from pyspark.sql import types as T

    if isinstance(data_type, T.BooleanType):
        return "bool", False
    if isinstance(data_type, T.DoubleType | T.FloatType):
        return "numeric", True
    if isinstance(data_type, T.NumericType):
        return "numeric", False
    if isinstance(data_type, T.StringType | T.VarcharType | T.CharType):
        return "string", False
    if isinstance(data_type, T.DateType | T.TimestampType | T.TimestampNTZType):
        return "temporal", False
    return "other", False


class SparkEngine:
    """Runs bounded plans with Spark SQL."""

    name = "spark"

    def __init__(self, source: Any, *, spark: Any = None) -> None:
        try:
            from pyspark.sql import DataFrame
        except ImportError:  # pragma: no cover - depends on the installation
            raise InvalidDataError(
                "engine", "pyspark is not installed", "pip install 'dpkit[spark]'"
            ) from None
        self._spark = spark if spark is not None else default_spark_session()
        if isinstance(source, str | Path):
            path = str(source)
            if not Path(path).exists():
                raise InvalidDataError("source", f"no file at {path!r}")
            if path.lower().endswith((".parquet", ".pq")):
                frame = self._spark.read.parquet(path)
            else:
                frame = self._spark.read.csv(path, header=True, inferSchema=True)
        elif isinstance(source, DataFrame):
            frame = source
        else:
            if isinstance(source, pa.Table):
                source = source.to_pandas()
            elif hasattr(source, "to_arrow_table") and hasattr(source, "fetchall"):
                source = source.to_arrow_table().to_pandas()  # a DuckDB relation
            elif hasattr(source, "to_pandas") and not hasattr(source, "iloc"):
                source = source.to_pandas()  # Polars
            frame = self._from_pandas(source)
        self._view = f"dpkit_src_{secrets.token_hex(8)}"
        frame.createOrReplaceTempView(self._view)
        self._columns = [field.name for field in frame.schema.fields]
        kinds = {field.name: _kind(field.dataType) for field in frame.schema.fields}
        self._schema: dict[str, ColumnKind] = {name: k for name, (k, _) in kinds.items()}
        self._floats = {name for name, (_, is_float) in kinds.items() if is_float}

    def _from_pandas(self, df: Any) -> Any:
        if len(df) == 0:
            from pyspark.sql.pandas.types import from_arrow_schema

            arrow = pa.Schema.from_pandas(df, preserve_index=False)
            schema = from_arrow_schema(arrow)
            return self._spark.createDataFrame([], schema)
        return self._spark.createDataFrame(df)

    def schema(self) -> dict[str, ColumnKind]:
        return dict(self._schema)

    def sql(self, plan: BoundedPlan) -> str:
        """The Spark SQL text that :meth:`run` executes."""
        query = build_query(
            plan,
            exp.Table(this=ident(self._view)),
            self._columns,
            self._schema,
            self._floats,
            "spark",
        )
        return query.sql(dialect="spark")

    def run(self, plan: BoundedPlan) -> pa.Table:
        frame = self._spark.sql(self.sql(plan))
        if hasattr(frame, "toArrow"):
            table: pa.Table = frame.toArrow()
            return table
        return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)  # pragma: no cover

    def close(self) -> None:
        self._spark.catalog.dropTempView(self._view)
