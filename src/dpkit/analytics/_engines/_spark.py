"""The Spark engine: the same compiled plan, rendered as Spark SQL, for tables at scale.

Sources: a Spark DataFrame (classic or Spark Connect), a CSV or Parquet path (read by Spark),
or a pandas / Polars DataFrame, an Arrow table or a DuckDB relation (turned into a Spark
DataFrame). The source is registered as a temporary view under a generated name and dropped
by :meth:`SparkEngine.close`. Sums are computed as ``DECIMAL(38, 0)`` so they are exact (Spark's
``SUM(BIGINT)`` would overflow or fail).

Integer, string and boolean keys and units hash to the same text as on DuckDB, so both engines
keep the same rows; Spark prints some doubles and timestamps differently (``1.0E20``), so with
such keys or units Spark may keep different, equally valid, rows of heavy units.

Spark Connect: a Connect DataFrame (``pyspark.sql.connect``, what Databricks and
``SparkSession.builder.remote(...)`` give) is read on its own server session: the engine
registers its view and runs every query there (``spark=`` defaults to that session; another
session is refused). The engine only sends SQL text, temporary views, pandas / Arrow data and
``applyInPandas`` (sample-and-aggregate), which Connect supports; it uses no RDD,
``sparkContext`` or JVM handle.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env
from sqlglot import exp

from dpkit._extras import require
from dpkit.analytics._engines._base import BoundedPlan, Step
from dpkit.analytics._engines._blocks import rows_select, spark_blocks
from dpkit.analytics._engines._columns import (
    check_declared_schema,
    csv_header,
    floor_arrow_temporal,
    is_parquet_path,
    kind_of_arrow,
    kind_of_pandas,
    pandas_float_columns,
    prepare_pandas,
    resolve_kinds,
)
from dpkit.analytics._engines._csv import StrictCSV
from dpkit.analytics._engines._heavy import (
    MAX_RANGE,
    arrow_candidates,
    candidate_threshold,
    heavy_candidates,
    unit_is_raw,
)
from dpkit.analytics._engines._relation import Relation, sql_relation, sql_steps
from dpkit.analytics._engines._sql import build_query, ident, source_select, sql_text
from dpkit.analytics._expr import Col, ColumnKind, Expr, children
from dpkit.errors import InvalidDataError, InvalidParameterError

require("spark", by="dpkit.analytics._engines._spark")

__all__ = [
    "SparkEngine",
    "default_spark_session",
    "frame_session",
    "inlined_size",
    "is_connect",
    "relation_engine",
]

_IN_LIST = 256
"""Up to this many candidate units are written into the SQL as an IN list; more are a temporary
view, semi-joined."""

_WIDE = 512
"""Plans whose derived columns, expanded into one expression tree (:func:`inlined_size`), have
at least this many nodes (a Lloyd query of dpkit.ml: 178 at d = 2, k = 2; 1,397 at d = 4, k = 3;
1.6·10^6 at d = 50, k = 20) run with :data:`_WIDE_SETTINGS`, set for that query only
(:func:`_scoped_conf`)."""

_PUSH_RULES = (
    "org.apache.spark.sql.catalyst.optimizer.PushDownPredicates",
    "org.apache.spark.sql.catalyst.optimizer.PushPredicateThroughNonJoin",
    "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation",
)
"""Catalyst pushes a filter below a projection by substituting the projection's expressions
into it, as a tree. The derived columns of a wide plan form a DAG that shares its levels (a
Lloyd query's label reads k - 1 indicators, each reading k distances, each d scaled features,
each a clamp that reads its value several times), so pushing the bounding's key filter below
them expanded that DAG into a tree exponential in its depth: the driver ran out of heap while
optimising (d = 4, k = 3 from a Parquet file already did). Those filters only select rows the
engine must compute anyway; without pushdown the plan stays the size of the SQL. A local
source (pandas, Arrow) is a LocalRelation, whose projections ConvertToLocalRelation evaluates
on the driver, interpreted, while optimising (25 s of a 35 s Lloyd step at d = 50, k = 20,
n = 10^4, and out of heap at 10^5): excluded too, so the projections run as generated code."""

_CONF_LOCK = threading.Lock()
"""Held while a query runs with :data:`_WIDE_SETTINGS` (see :func:`_scoped_conf`)."""

_WIDE_SETTINGS = {
    "spark.sql.optimizer.excludedRules": ",".join(_PUSH_RULES),
    # one whole-stage method over a wide projection is too large for Janino (out of heap at
    # d = 50, k = 20); without it each projection is generated as split methods
    "spark.sql.codegen.wholeStage": "false",
}


def default_spark_session() -> Any:
    """The active SparkSession, or a small local one (1 core, no UI)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers (sample-and-aggregate's applyInPandas) run this interpreter unless told
    # otherwise: "python3" on PATH may lack pyarrow and dpkit.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[1]")
        .appName("dpkit")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )


def is_connect(obj: Any) -> bool:
    """Whether ``obj`` (a DataFrame or SparkSession) is Spark Connect's, not classic Spark's."""
    return type(obj).__module__.startswith("pyspark.sql.connect.")


def _is_dataframe(source: Any) -> bool:
    """A classic or Spark Connect DataFrame. PySpark 3.5's Connect DataFrame is no subclass of
    ``pyspark.sql.DataFrame`` (4.x's is); its module is loaded whenever such a frame exists."""
    from pyspark.sql import DataFrame

    if isinstance(source, DataFrame):
        return True
    connect = sys.modules.get("pyspark.sql.connect.dataframe")
    return connect is not None and isinstance(source, connect.DataFrame)


def frame_session(frame: Any) -> Any:
    """The SparkSession a DataFrame belongs to (its temporary views and queries live there)."""
    return frame.sparkSession


def _same_session(spark: Any, own: Any) -> bool:
    """Whether ``spark`` can see the temporary views of a frame of session ``own``: never
    across classic and Connect; two Connect sessions only with the same server session id
    (classic sessions are not compared: that was never checked and the JVM resolves it)."""
    if is_connect(spark) != is_connect(own):
        return False
    if is_connect(own):
        return spark is own or getattr(spark, "session_id", None) == getattr(
            own, "session_id", object()
        )
    return True


def inlined_size(plan: BoundedPlan) -> int:
    """The number of nodes of the largest derived column of ``plan`` with every derived column
    it reads substituted by its expression (as Catalyst substitutes them when it pushes a
    filter below the projections): public, from the plan's expressions alone."""
    sizes: dict[str, int] = {}

    def size(expr: Expr) -> int:
        if isinstance(expr, Col):
            return sizes.get(expr.name, 1)
        return 1 + sum(size(child) for child in children(expr))

    for step in plan.steps:
        if step.kind == "derive" and step.expr is not None:
            sizes[step.name] = size(step.expr)
    return max(sizes.values(), default=0)


@contextlib.contextmanager
def _scoped_conf(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Apply ``settings`` to ``spark``'s SQL conf for the block, then restore the previous
    values (an excluded-rules list is extended, not replaced). The conf is the session's: a
    query run concurrently on the same SparkSession sees these settings meanwhile (they change
    how a plan is optimised and compiled, not its result). Scoped blocks of this process run one
    at a time (:data:`_CONF_LOCK`), so two wide queries in two threads cannot interleave their
    saves and restores and leave the settings on."""
    if not settings:
        yield
        return
    with _CONF_LOCK:
        yield from _apply_and_restore(spark, settings)


def _apply_and_restore(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    conf = spark.conf
    before = {key: conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            old = before[key]
            if key.endswith("excludedRules") and old:
                value = ",".join([old, value])
            conf.set(key, value)
        yield
    finally:
        for key, old in before.items():
            if old is None:
                conf.unset(key)
            else:
                conf.set(key, old)


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
    """Runs bounded plans with Spark SQL.

    Column kinds come from metadata (the Spark, Parquet, Arrow schema or pandas dtypes; every
    CSV column is text, read without ``inferSchema``) and the declared ``schema``. A pandas,
    Polars or Arrow table or a DuckDB relation becomes a Spark DataFrame when a plan first runs,
    its ``object`` (and declared) columns converted in Python by the rules every engine shares.
    """

    name = "spark"

    def __init__(
        self, source: Any, *, spark: Any = None, schema: Mapping[str, str] | None = None
    ) -> None:
        frame = _is_dataframe(source)
        if frame:
            own = frame_session(source)
            if spark is None:
                spark = own  # a Connect frame's views and queries live on its server session
            elif not _same_session(spark, own):
                kind = "Spark Connect" if is_connect(own) else "classic Spark"
                raise InvalidParameterError(
                    "spark",
                    f"a {'Spark Connect' if is_connect(spark) else 'classic'} "
                    f"{type(spark).__name__}",
                    f"the {kind} SparkSession the source DataFrame belongs to, or None",
                    "leave spark= out to use the DataFrame's own session",
                )
        self._spark = spark if spark is not None else default_spark_session()
        declared = check_declared_schema(schema)
        self._view = f"dpkit_src_{secrets.token_hex(8)}"
        self._members: tuple[SparkEngine, ...] = ()  # the tables a relation reads
        self._relation = False
        self._frame: Any = None
        self._pandas: Any = None
        self._csv: StrictCSV | None = None  # a CSV file is checked before a plan reads it
        if isinstance(source, str | Path):
            path = str(source)
            if not Path(path).exists():
                raise InvalidDataError("source", f"no file at {path!r}")
            if is_parquet_path(path):
                self._frame = self._spark.read.parquet(path)
            else:
                from pyspark.sql import types as T

                header = csv_header(path)
                self._csv = StrictCSV(path, len(header))
                text_schema = T.StructType([T.StructField(n, T.StringType()) for n in header])
                # the dialect of DuckDB's reader and pandas': "" escapes a quote, and a quoted
                # field may hold a line break (multiLine; a file is then read by one task)
                self._frame = self._spark.read.csv(
                    path,
                    header=True,
                    schema=text_schema,
                    enforceSchema=True,
                    escape='"',
                    multiLine=True,
                    mode="FAILFAST",
                )
        elif frame:
            self._frame = source
        else:
            if hasattr(source, "to_arrow_table") and hasattr(source, "fetchall"):
                source = source.to_arrow_table()  # a DuckDB relation
            elif hasattr(source, "to_arrow") and not hasattr(source, "iloc"):
                source = source.to_arrow()  # Polars
            if isinstance(source, pa.Table):
                storage = {f.name: kind_of_arrow(f.type) for f in source.schema}
            else:
                storage = {str(n): kind_of_pandas(t) for n, t in source.dtypes.items()}
            self._pandas = source
        if self._frame is not None:
            kinds = {field.name: _kind(field.dataType) for field in self._frame.schema.fields}
            storage = {name: k for name, (k, _) in kinds.items()}
            self._columns = [field.name for field in self._frame.schema.fields]
            self._schema, self._conversions = resolve_kinds(storage, declared)
            self._floats = {
                name
                for name, (_, is_float) in kinds.items()
                if is_float and name not in self._conversions
            }
            self._frame.createOrReplaceTempView(self._view)
        else:
            self._columns = list(storage)
            self._schema, _ = resolve_kinds(storage, declared)
            self._conversions = {}
            self._floats = set()  # known once the pandas frame is prepared

    def _prepare(self) -> None:
        """Turn a local source into a Spark DataFrame (on first use), converting in Python the
        columns whose dtype does not carry their kind (never failing)."""
        if self._frame is not None:
            return
        source = self._pandas
        df = (
            floor_arrow_temporal(source).to_pandas(date_as_object=False)
            if isinstance(source, pa.Table)
            else source
        )
        df = prepare_pandas(df, self._schema)
        self._floats = pandas_float_columns(df, self._schema)
        self._frame = self._from_pandas(df)
        self._frame.createOrReplaceTempView(self._view)

    def _from_pandas(self, df: Any) -> Any:
        if len(df) == 0:
            from pyspark.sql.pandas.types import from_arrow_schema

            arrow = pa.Schema.from_pandas(df, preserve_index=False)
            schema = from_arrow_schema(arrow)
            return self._spark.createDataFrame([], schema)
        return self._spark.createDataFrame(df)

    def schema(self) -> dict[str, ColumnKind]:
        return dict(self._schema)

    def _integers(self) -> set[str]:
        """Columns the Spark frame stores as integers (byte, short, int, long)."""
        from pyspark.sql import types as T

        integral = T.ByteType | T.ShortType | T.IntegerType | T.LongType
        return {f.name for f in self._frame.schema.fields if isinstance(f.dataType, integral)}

    def sql(self, plan: BoundedPlan, candidates: exp.Expr | None = None) -> str:
        """The Spark SQL text that :meth:`run` executes; ``candidates`` as in
        :func:`~dpkit.analytics._engines._sql.build_query`."""
        self._prepare()
        query = build_query(
            plan,
            exp.Table(this=ident(self._view)),
            self._columns,
            self._schema,
            self._floats,
            "spark",
            self._conversions,
            candidates,
            self._integers(),
        )
        return sql_text(query, "spark")  # a fresh tree: no copy needed

    def check(self, plan: BoundedPlan) -> None:
        """Write the plan's SQL before anything is reserved (see DuckDBEngine.check)."""
        self.sql(plan)

    def _blocks_select(
        self, steps: tuple[Step, ...], unit: str, columns: Sequence[str], m: int, salt: int
    ) -> Any:
        self._prepare()
        source = exp.Table(this=exp.to_identifier(self._view, quoted=True))
        return rows_select(self, source, steps, unit, columns, m, salt, "spark")

    def check_blocks(self, steps: tuple[Step, ...], unit: str, columns: Sequence[str]) -> None:
        """Write the blocks' SQL before anything is reserved (see :meth:`check`)."""
        sql_text(self._blocks_select(steps, unit, columns, 2, 0), "spark")

    def blocks(
        self,
        steps: tuple[Step, ...],
        unit: str,
        columns: Sequence[str],
        m: int,
        salt: int,
        call: Any,
    ) -> Any:
        """Sample-and-aggregate: ``pmod(xxhash64(unit, salt), m)``, then ``call`` per block on
        the executors (:mod:`dpkit.analytics._blocks`)."""
        select = self._blocks_select(steps, unit, columns, m, salt)
        return spark_blocks(self._spark.sql(sql_text(select, "spark")), columns, m, call)

    def typed_select(self) -> tuple[exp.Select, dict[str, ColumnKind]]:
        """This table as a SELECT of its columns, each converted to its kind, and the kinds
        (what a relation over several tables reads: :func:`relation_engine`)."""
        self._prepare()
        table = exp.Table(this=ident(self._view))
        return source_select(table, self._columns, self._conversions, "spark"), dict(self._schema)

    def _ensure_readable(self) -> None:
        for member in self._members:
            member._ensure_readable()
        if self._csv is not None:
            # the whole file, strictly, or UnreadableDataError (engines._csv): Spark's own
            # reader skips or swallows malformed lines whatever its mode
            self._csv.ensure()
        self._prepare()

    def run(self, plan: BoundedPlan) -> pa.Table:
        self._ensure_readable()
        candidates = self._candidates(plan)
        view = None
        predicate: exp.Expr | None = None
        if candidates is not None:
            unit = exp.column("__u", quoted=True)
            if candidates.size == 0:
                predicate = exp.false()
            elif candidates.size <= _IN_LIST:
                values = [exp.Literal.number(int(u)) for u in candidates]
                predicate = exp.In(this=unit, expressions=values)
            else:
                view = f"{self._view}_heavy"
                heavy = self._spark.createDataFrame(pa.table({"__u": candidates}).to_pandas())
                heavy.createOrReplaceTempView(view)
                sub = exp.select(unit.copy()).from_(exp.to_table(view))
                predicate = exp.In(this=unit, query=sub.subquery())
        settings = _WIDE_SETTINGS if inlined_size(plan) >= _WIDE else {}
        try:
            text = self.sql(plan, predicate)
            with _scoped_conf(self._spark, settings):  # the optimizer runs at toArrow
                frame = self._spark.sql(text)
                if hasattr(frame, "toArrow"):
                    table: pa.Table = frame.toArrow()
                    return table
                return pa.Table.from_pandas(  # pragma: no cover
                    frame.toPandas(), preserve_index=False
                )
        finally:
            if view is not None:
                self._spark.catalog.dropTempView(view)

    def _candidates(self, plan: BoundedPlan) -> Any:
        """The units that may exceed a bound (see :mod:`dpkit.analytics._engines._heavy`): the
        unit column is collected to the driver as Arrow and counted with one ``bincount``,
        instead of a per-unit aggregate over every row (a shuffle of every unit); None when
        that does not apply (no integer unit column of moderate range)."""
        self._prepare()
        threshold = candidate_threshold(plan)
        unit = plan.unit
        if self._relation:
            return None  # finding them would compute the joins once more
        if threshold is None or not unit_is_raw(plan) or unit in self._conversions:
            return None
        if unit not in self._integers() or not hasattr(self._frame, "toArrow"):
            return None
        ref = exp.column(unit, quoted=True)
        table = exp.Table(this=ident(self._view))
        # the range first, in Spark (one small aggregate): a wide-ranged unit (e.g. random
        # 64-bit ids) is never collected to the driver, where it could only be discarded
        bounds = exp.select(exp.Min(this=ref.copy()), exp.Max(this=ref.copy())).from_(table.copy())
        low, high = self._spark.sql(bounds.sql(dialect="spark")).collect()[0]
        if low is None or high is None:
            return heavy_candidates([], 0, 0, threshold)
        if int(high) - int(low) + 1 > MAX_RANGE:
            return None
        query = (
            exp.select(ref)
            .from_(table)
            .where(exp.Not(this=exp.Is(this=ref.copy(), expression=exp.Null())))
        )
        try:
            values = self._spark.sql(query.sql(dialect="spark")).toArrow()
            return arrow_candidates(values.column(0), threshold)
        except MemoryError:
            return None  # the exact check over every unit: same result (see _heavy)

    def close(self) -> None:
        if self._frame is not None:
            self._spark.catalog.dropTempView(self._view)


def relation_engine(
    node: Relation, tables: Mapping[str, SparkEngine], spark: Any = None
) -> SparkEngine:
    """An engine over relation ``node`` (:mod:`._relation`) of ``tables`` (one Spark session).
    Nothing is read: the relation is a lazy DataFrame the plans run over."""
    members: dict[str, SparkEngine] = {}

    def source(name: str) -> tuple[exp.Select, Mapping[str, ColumnKind]]:
        members[name] = tables[name]
        return tables[name].typed_select()

    select, _ = sql_relation(node, source, sql_steps("spark"), dialect="spark")
    first = next(iter(tables.values()))
    session = spark if spark is not None else first._spark
    engine = SparkEngine(session.sql(sql_text(select, "spark")), spark=session)
    engine._members = tuple(members.values())
    engine._relation = True
    return engine
