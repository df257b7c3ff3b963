"""The DuckDB engine (the default): runs the compiled SQL on an in-process DuckDB connection.

Sources: a CSV or Parquet path (read in place), a pandas DataFrame, an Arrow table, a Polars
frame (through Arrow) or a DuckDB relation. Each engine uses its own connection and registers the
source under a generated view name; user text never reaches SQL except as quoted identifiers and
literals built by sqlglot.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env
from sqlglot import exp

from dpkit.analytics._engines._base import BoundedPlan, Step, plan_columns
from dpkit.analytics._engines._blocks import rows_select, split_sorted
from dpkit.analytics._engines._columns import (
    check_declared_schema,
    csv_header,
    floor_arrow_temporal,
    floor_sql_temporal,
    is_parquet_path,
    kind_of_arrow,
    kind_of_pandas,
    pandas_float_columns,
    prepare_pandas,
    resolve_kinds,
)
from dpkit.analytics._engines._csv import StrictCSV, file_stamp
from dpkit.analytics._engines._heavy import (
    MAX_RANGE,
    arrow_candidates,
    candidate_threshold,
    heavy_candidates,
    unit_is_raw,
)
from dpkit.analytics._engines._relation import (
    Relation,
    clean_columns,
    sql_relation,
    sql_steps,
    unitless,
)
from dpkit.analytics._engines._sql import (
    build_query,
    ident,
    source_select,
    sql_text,
)
from dpkit.analytics._expr import ColumnKind, structural_key
from dpkit.errors import InvalidDataError

__all__ = ["DuckDBEngine", "KeyTable", "relation_engine"]

_IN_LIST = 256

_ONE_PASS_KEPT = 64
"""A relation keeps the one-pass SQL of this many plan shapes (the oldest goes first)."""
"""Up to this many candidate units are written into the SQL as an IN list; more are registered
as an Arrow table and semi-joined."""


def no_nan_folding(connection: duckdb.DuckDBPyConnection) -> None:
    """Turn off DuckDB's statistics propagation on ``connection``: from a Parquet file's
    statistics (which leave NaN out) it folds ``isnan(x)`` to false, so a NaN value reached the
    grid cast and failed the query after the reservation, an error that depended on the data
    (DuckDB 2.0; every dpkit query reads NaN as NULL)."""
    with contextlib.suppress(duckdb.Error):  # an older DuckDB without the option
        connection.execute("SET disabled_optimizers = 'statistics_propagation'")


def _threads() -> int:
    value = os.environ.get("DPKIT_DUCKDB_THREADS")
    return int(value) if value and value.isdigit() and int(value) > 0 else 0


class DuckDBEngine:
    """Runs bounded plans with DuckDB.

    Column kinds come from the source's metadata (a pandas frame's dtypes, an Arrow or Parquet
    schema; every CSV column is text) and the declared ``schema``, never from the values: a CSV
    file is read with every column as text (nothing is sniffed from its rows) and declared
    columns are converted in the query, where a value that does not parse becomes NULL; a
    pandas ``object`` column is converted in Python, by the same rules, when a plan first runs.
    """

    name = "duckdb"

    def __init__(
        self,
        source: Any,
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
        schema: Mapping[str, str] | None = None,
    ) -> None:
        self._own = connection is None
        self._con = connection if connection is not None else duckdb.connect(":memory:")
        if _threads():
            self._con.execute(f"SET threads = {_threads()}")
        no_nan_folding(self._con)
        if self._own:
            # timestamps with a time zone compare with (naive) temporal keys in UTC, as in the
            # reference engine (engines._columns.canonical)
            with contextlib.suppress(duckdb.Error):  # DuckDB built without ICU: no time zones
                self._con.execute("SET TimeZone = 'UTC'")
        self._view = f"dpkit_src_{secrets.token_hex(8)}"
        self._members: tuple[DuckDBEngine, ...] = ()  # the tables a relation reads
        self._file: str | None = None  # a file source (its version: see version())
        self._tables: tuple[DuckDBEngine, ...] = ()  # a relation: every table of its session
        self._seen: Any = None  # a relation: the tables' version its counts were made at
        self._stored: Any = None  # a file's columns, their kinds, floats and integers...
        self._stored_version: Any = None  # ...when it had this version (see version())
        self._key_tables: tuple[KeyTable, ...] = ()  # its links' key maps
        self._relation = False
        # a relation's most rows of one unit and its rows that have a unit, per unit column
        self._unit_rows: dict[str, tuple[int, int]] = {}
        self._unitless: tuple[exp.Select, str] | None = None  # see _run_relation
        self._unitless_engine: DuckDBEngine | None = None
        self._one_pass: dict[Any, str] = {}  # see _one_pass_sql
        self._clear: dict[Any, int] = {}  # a file's version: no unit over this bound
        self._complete: bool | None = None
        self._keepalive: Any = None
        self._integers: set[str] = set()  # columns stored as integers
        self._csv: StrictCSV | None = None  # a CSV file is checked before a plan reads it
        # a pandas source is registered when a plan first runs (see _prepare_pandas)
        self._pandas: Any = source if isinstance(source, pd.DataFrame) else None
        declared = check_declared_schema(schema)
        self._source_sql, storage, floats = self._register(source)
        self._columns = list(storage)
        self._schema, self._conversions = resolve_kinds(storage, declared)
        self._floats = floats
        if self._pandas is not None:
            # converted in Python when first run (prepare_pandas): the view holds the kinds
            self._conversions = {}
            self._floats = pandas_float_columns(self._pandas, self._schema)

    def _register(self, source: Any) -> tuple[exp.Expr, dict[str, ColumnKind], set[str]]:
        """The source as a table expression, its stored kinds and its float columns."""
        if isinstance(source, _SQLRelation):
            self._members = source.members
            self._key_tables = source.keys
            self._relation = not source.rows_only
            self._unitless = source.unitless
            self._tables = source.tables
            if source.rows_only:
                return self._described(source.select.subquery(self._view, copy=False))
            # a view (reads nothing): each plan's SQL names it instead of carrying the whole
            # relation, which sqlglot would otherwise copy and write out again for every plan
            text = sql_text(source.select, "duckdb")
            self._con.execute(f"CREATE TEMP VIEW {self._view} AS {text}")
            return self._described(exp.Table(this=ident(self._view)))
        if isinstance(source, str | Path):
            path = str(source)
            if not Path(path).exists():
                raise InvalidDataError("source", f"no file at {path!r}")
            self._file = path
            self._stored_version = self.version()
            if is_parquet_path(path):
                call = exp.Anonymous(this="read_parquet", expressions=[exp.Literal.string(path)])
                return self._described(self._floored(exp.Table(this=call)))
            header = csv_header(path)
            self._csv = StrictCSV(path, len(header))
            return (
                exp.Table(this=_read_csv_as_text(path, header)),
                dict.fromkeys(header, "string"),
                set(),
            )
        if isinstance(source, pd.DataFrame):
            storage = {str(n): kind_of_pandas(t) for n, t in source.dtypes.items()}
            return exp.Table(this=ident(self._view)), storage, set()
        if isinstance(source, duckdb.DuckDBPyRelation):
            source = source.to_arrow_table()
        elif hasattr(source, "to_arrow") and not isinstance(source, pa.Table):
            source = source.to_arrow()  # Polars
        if isinstance(source, pa.Table):
            source = floor_arrow_temporal(source)  # group on the key that is released
        self._keepalive = source
        self._con.register(self._view, source)
        return self._described(exp.Table(this=ident(self._view)))

    def _floored(self, table: exp.Expr) -> exp.Expr:
        """``table``, with nanosecond temporal columns floored to microseconds in a view (the
        key grouped is the key released: see ``floor_arrow_temporal``)."""
        described = self._con.sql(exp.select(exp.Star()).from_(table.copy()).limit(0).sql("duckdb"))
        replaced = []
        for name, sql_type in zip(described.columns, described.types, strict=True):
            template = floor_sql_temporal(str(sql_type))
            if template is not None:
                quoted = ident(name).sql("duckdb")
                replaced.append(f"{template.format(c=quoted)} AS {quoted}")
        if not replaced:
            return table
        view = f"{self._view}_floored"
        source = table.sql("duckdb")
        self._con.execute(
            f"CREATE TEMP VIEW {view} AS SELECT * REPLACE ({', '.join(replaced)}) FROM {source}"
        )
        return exp.Table(this=ident(view))

    def _described(self, table: exp.Expr) -> tuple[exp.Expr, dict[str, ColumnKind], set[str]]:
        arrow_schema = self._arrow_schema(table)
        storage = {field.name: kind_of_arrow(field.type) for field in arrow_schema}
        floats = {field.name for field in arrow_schema if pa.types.is_floating(field.type)}
        self._integers = {field.name for field in arrow_schema if pa.types.is_integer(field.type)}
        self._stored = (tuple(storage.items()), frozenset(floats), frozenset(self._integers))
        return table, storage, floats

    def _arrow_schema(self, table: exp.Expr) -> Any:
        described = self._con.sql(exp.select(exp.Star()).from_(table.copy()).limit(0).sql("duckdb"))
        return described.to_arrow_table().schema

    def _storage(self, table: exp.Expr) -> tuple[set[str], set[str]]:
        """The columns of ``table`` DuckDB reads as integers, and as floats."""
        arrow_schema = self._arrow_schema(table)
        integers = {field.name for field in arrow_schema if pa.types.is_integer(field.type)}
        return integers, {field.name for field in arrow_schema if pa.types.is_floating(field.type)}

    def _check_stored_types(self) -> None:
        """Refuse to read a file whose columns' types changed since the session opened: the
        queries were planned, and NaN tests left out for integer columns, on the types it had
        then. (A rewrite that keeps them is read as it is now.)"""
        if self._file is None or self._csv is not None:
            return
        version = self.version()
        if version == self._stored_version:
            return
        source = self._source_sql
        arrow_schema = self._arrow_schema(source)
        storage = {field.name: kind_of_arrow(field.type) for field in arrow_schema}
        floats = frozenset(f.name for f in arrow_schema if pa.types.is_floating(f.type))
        integers = frozenset(f.name for f in arrow_schema if pa.types.is_integer(f.type))
        if (tuple(storage.items()), floats, integers) != self._stored:
            raise InvalidDataError(
                "source",
                f"{Path(self._file).name} changed its columns or their types since the session "
                "opened; open a new session to read it as it is now",
            )
        self._stored_version = version

    def _prepare_pandas(self) -> None:
        """Register a pandas source (on first use): columns whose dtype does not carry their
        kind (``object``, or declared otherwise) are converted in Python, never failing."""
        if self._pandas is None or self._keepalive is not None:
            return
        frame = prepare_pandas(self._pandas, self._schema)
        self._integers = {
            str(name)
            for name, dtype in frame.dtypes.items()
            if pd.api.types.is_integer_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
        }
        self._keepalive = frame
        self._con.register(self._view, frame)
        # DuckDB's own reading of the frame decides which columns may hold NaN (a pandas
        # dictionary-of-float column is no float dtype to pandas, yet DuckDB reads its NaN)
        integers, floats = self._storage(exp.Table(this=ident(self._view)))
        self._integers &= integers
        self._floats |= {c for c in floats if self._schema.get(c) == "numeric"}

    def schema(self) -> dict[str, ColumnKind]:
        return dict(self._schema)

    def sql(self, plan: BoundedPlan, candidates: exp.Expr | None = None) -> str:
        """The SQL text that :meth:`run` executes (for inspection and tests); ``candidates``
        as in :func:`~dpkit.analytics._engines._sql.build_query`."""
        query = build_query(
            plan,
            self._source_sql.copy(),
            self._columns,
            self._schema,
            self._floats,
            "duckdb",
            self._conversions,
            candidates,
            self._integers,
        )
        return sql_text(query, "duckdb")  # a fresh tree: no copy needed

    def check(self, plan: BoundedPlan) -> None:
        """Write the plan's SQL (public: no data is read), before anything is reserved: a plan
        the generator cannot write is refused (:func:`~.sql.sql_text`)."""
        self.sql(plan)

    def check_blocks(self, steps: tuple[Step, ...], unit: str, columns: Sequence[str]) -> None:
        """Write the blocks' SQL before anything is reserved (see :meth:`check`)."""
        self._prepare_pandas()
        source = self._source_sql.copy()
        sql_text(rows_select(self, source, steps, unit, columns, 2, 0, "duckdb"), "duckdb")

    def blocks(
        self,
        steps: tuple[Step, ...],
        unit: str,
        columns: Sequence[str],
        m: int,
        salt: int,
        call: Any,
    ) -> np.ndarray:
        """Sample-and-aggregate: ``hash(unit, salt) % m`` in SQL, rows ordered by block, cut
        into per-block frames for ``call`` (:mod:`dpkit.analytics._blocks`)."""
        self._ensure_readable()
        select = rows_select(self, self._source_sql.copy(), steps, unit, columns, m, salt, "duckdb")
        ordered = select.order_by(exp.column("__dpkit_block", quoted=True))
        frame = self._con.sql(sql_text(ordered, "duckdb")).to_arrow_table().to_pandas()
        blocks = frame["__dpkit_block"].to_numpy(dtype=np.int64)
        return split_sorted(frame, blocks, m, call, columns)

    def typed_select(self) -> tuple[exp.Select, dict[str, ColumnKind]]:
        """This table as a SELECT of its columns, each converted to its kind, and the kinds
        (what a relation over several tables reads: :func:`relation_engine`)."""
        self._prepare_pandas()
        select = source_select(self._source_sql.copy(), self._columns, self._conversions, "duckdb")
        return select, dict(self._schema)

    def version(self) -> Any:
        """What identifies this table's current contents: a file's size, modification time
        and inode (None for a source held in memory, which the session must not change)."""
        if self._file is None:
            return None
        try:
            return file_stamp(self._file)
        except OSError:
            return "unreadable"  # (reading it fails next, as for any unreadable file)

    def _ensure_readable(self) -> None:
        """Check a CSV file whole (or UnreadableDataError) and register a pandas source, for
        this table and every table of a relation.

        A relation's links' key maps, its most rows of one unit and whether every row has one
        are kept across queries: they are made again when a file of the session has changed
        since (a file rewritten between two queries: stale counts would skip bounding for a
        unit that now exceeds a bound, and a stale key map would give rows to the wrong unit)."""
        for member in self._members:
            member._ensure_readable()
        self._check_stored_types()
        version = tuple(table.version() for table in self._tables) if self._relation else None
        if self._seen is not None and version != self._seen:
            self._unit_rows.clear()
            self._complete = None
        self._seen = version
        for keys in self._key_tables:
            if not keys.filled or keys.version != version:
                if keys.filled:
                    self._con.execute(f"DELETE FROM {keys.name}")
                self._con.execute(f"INSERT INTO {keys.name} {keys.select}")
                keys.filled = True
                keys.version = version
        if self._csv is not None:
            self._csv.ensure()  # the whole file, strictly, or UnreadableDataError
        self._prepare_pandas()

    def run(self, plan: BoundedPlan) -> pa.Table:
        self._ensure_readable()
        if self._relation:
            return self._run_relation(plan)
        candidates = self._candidates(plan)
        view = None
        predicate: exp.Expr | None = None
        if candidates is not None:
            if candidates.size == 0:
                predicate = exp.false()
            elif candidates.size <= _IN_LIST:
                predicate = exp.In(
                    this=exp.column("__u", quoted=True),
                    expressions=[exp.Literal.number(int(u)) for u in candidates],
                )
            else:
                view = f"{self._view}_heavy"
                self._con.register(view, pa.table({"__u": candidates}))
                sub = exp.select(exp.column("__u", quoted=True)).from_(exp.to_table(view))
                predicate = exp.In(this=exp.column("__u", quoted=True), query=sub.subquery())
        try:
            result: pa.Table = self._con.sql(self.sql(plan, predicate)).to_arrow_table()
        finally:
            if view is not None:
                self._con.unregister(view)
        return result

    def _run_relation(self, plan: BoundedPlan) -> pa.Table:
        """A plan over a relation (joins): its rows after the steps, only the columns the plan
        reads, are computed once into a temporary table, and the plan runs over that (its
        bounding reads them several times; the joins would otherwise run each time). The same
        rows, so the same result.

        When no unit has more rows in the whole relation than the plan's smallest bound
        (:meth:`_within_bounds`), bounding changes nothing and reads nothing: the plan runs
        in one pass over the relation, with no temporary table (the same result again). When
        moreover the unit is only a label (:meth:`_labelled`), that pass does not even find
        whose each row is."""
        if self._within_bounds(plan):
            engine = self._labelled(plan) or self
            return self._con.sql(self._one_pass_sql(engine, plan)).to_arrow_table()
        needed = plan_columns(plan)
        source = source_select(self._source_sql.copy(), self._columns, {}, "duckdb")
        steps = sql_steps("duckdb", set(self._floats))
        current, _ = steps(source, plan.steps, self._columns, self._schema)
        rows = exp.select(*(exp.column(c, quoted=True) for c in needed)).from_(
            current.subquery("__s", copy=False)
        )
        table = f"{self._view}_rows"
        self._con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {sql_text(rows, 'duckdb')}")
        try:
            select = exp.select(exp.Star()).from_(exp.to_table(table))
            inner = DuckDBEngine(_SQLRelation(select, (), rows_only=True), connection=self._con)
            return inner.run(replace(plan, steps=()))
        finally:
            self._con.execute(f"DROP TABLE IF EXISTS {table}")

    def _one_pass_sql(self, engine: DuckDBEngine, plan: BoundedPlan) -> str:
        """``engine``'s one-pass SQL of ``plan`` (no heavy units), kept per plan shape for the
        session: building it costs Python more time than DuckDB takes to run TPC-H Q6 (80 ms
        for Q1's seven clamped sums). Without bounding, the text does not carry the plan's
        salt (checked: a text that holds it is not kept), so a shape gives one text."""
        key = (id(engine), structural_key(replace(plan, salt=0)))
        text = self._one_pass.get(key)
        if text is None:
            text = engine.sql(plan, exp.false())
            if str(plan.salt) not in text:
                self._one_pass[key] = text
                while len(self._one_pass) > _ONE_PASS_KEPT:
                    self._one_pass.pop(next(iter(self._one_pass)))
        return text

    def _labelled(self, plan: BoundedPlan) -> DuckDBEngine | None:
        """An engine over the relation without its links' joins (``_relation.unitless``: the
        private table as stored, every row of unit 0), when ``plan``, run in one pass, gives
        the same result on it: the plan reads the unit only to drop rows that have none (it
        counts no distinct units; no bound is reached, :meth:`_within_bounds`), and every row
        has a unit: the relation has as many rows with a unit as the unitless relation has
        rows (counted once, when first needed, like the most rows of one unit).

        TPC-H Q1, Q6 and Q14 read line items only: their one pass then skips the join of
        every line item with its order (at scale factor 1, half of Q1's time). Like the
        choice of one pass, this only chooses how the same result is computed."""
        if self._unitless is None or plan.unit != self._unitless[1]:
            return None
        if any(output.kind == "units" for output in plan.outputs):
            return None
        if self._unitless_engine is None:
            select = _SQLRelation(self._unitless[0], self._members, rows_only=True)
            self._unitless_engine = DuckDBEngine(select, connection=self._con)
        if self._complete is None:
            rows = exp.select(exp.Count(this=exp.Star())).from_(
                self._unitless[0].subquery("__all", copy=True)
            )
            total = int(self._con.sql(sql_text(rows, "duckdb")).fetchall()[0][0])
            self._complete = total == self._unit_rows[plan.unit][1]
        return self._unitless_engine if self._complete else None

    def _within_bounds(self, plan: BoundedPlan) -> bool:
        """True when no unit exceeds any of the plan's bounds, for certain: no unit has more
        rows in the relation (before the plan's steps) than the smallest bound. Steps only
        derive columns and filter rows, so a unit's rows after them are at most its rows
        before (the argument of :mod:`._heavy`, over the relation's rows); the count groups
        the same unit column as the plan's bounding does, with the same SQL ``GROUP BY``.

        The most rows of one unit is counted once per relation and unit column (one pass over
        the joins, when a plan first needs it) and kept, like the links' key maps, for the
        session, whose tables are fixed. It only chooses how the same result is computed and is
        never released."""
        threshold = candidate_threshold(plan)
        unit_name = plan.unit
        if threshold is None or not unit_is_raw(plan) or unit_name in self._conversions:
            return False
        if unit_name not in self._unit_rows:
            unit = exp.column(unit_name, quoted=True)
            per_unit = (
                exp.select(exp.alias_(exp.Count(this=exp.Star()), "__n", quoted=True))
                .from_(self._source_sql.copy())
                .where(exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null())))
                .group_by(unit)
            )
            counts = exp.select(
                exp.func("COALESCE", exp.Max(this=exp.column("__n", quoted=True)), 0),
                exp.func("COALESCE", exp.Sum(this=exp.column("__n", quoted=True)), 0),
            ).from_(per_unit.subquery("__per_unit", copy=False))
            found = self._con.sql(sql_text(counts, "duckdb")).fetchall()[0]
            self._unit_rows[unit_name] = (int(found[0]), int(found[1]))
        return self._unit_rows[unit_name][0] <= threshold

    def _candidates(self, plan: BoundedPlan) -> Any:
        """The units that may exceed a bound (a sorted int64 array, a superset of those that
        do: see :mod:`dpkit.analytics._engines._heavy`), or None when they cannot be found
        more cheaply than by the query's own per-unit aggregate."""
        self._prepare_pandas()
        threshold = candidate_threshold(plan)
        unit = plan.unit
        if self._relation:
            return None  # finding them would compute the joins once more
        if threshold is None or not unit_is_raw(plan) or unit in self._conversions:
            return None
        kept = self._file is not None and self._csv is None
        version = self.version() if kept else None
        clear = self._clear.get((unit, version)) if kept else None
        if clear is not None and threshold >= clear:
            return np.empty(0, dtype=np.int64)  # no unit has more rows than the bound
        found = self._candidates_of(unit, threshold)
        if kept and found is not None and found.size == 0:
            # no unit of this version of the file has more rows than ``threshold``: later
            # plans whose smallest bound is at least that need not look (the streaming pass
            # below: 0.7 s at 10 M rows). Only chooses how the same result is computed.
            self._clear = {(unit, version): min(threshold, clear or threshold)}
        return found

    def _candidates_of(self, unit: str, threshold: int) -> Any:
        """:meth:`_candidates`, looked for: in an Arrow table's column, or streamed."""
        if isinstance(self._keepalive, pa.Table):
            return arrow_candidates(self._keepalive.column(unit), threshold)
        try:
            return self._candidates_from_sql(unit, threshold)
        except MemoryError:
            return None  # the exact check over every unit: same result (see _heavy)

    def _candidates_from_sql(self, unit: str, threshold: int) -> Any:
        """:meth:`_candidates` for a source DuckDB reads (a file, a pandas frame): the unit's
        range first, then its values streamed in batches."""
        ref = exp.column(unit, quoted=True)
        source = self._source_sql.copy()
        probe = self._con.sql(exp.select(ref).from_(source.copy()).limit(0).sql("duckdb"))
        if not pa.types.is_integer(probe.to_arrow_table().schema.field(0).type):
            return None
        bounds = exp.select(exp.Min(this=ref.copy()), exp.Max(this=ref.copy())).from_(source.copy())
        low, high = self._con.sql(bounds.sql("duckdb")).fetchall()[0]
        if low is None or high is None:
            return heavy_candidates([], 0, 0, threshold)
        if int(high) - int(low) + 1 > MAX_RANGE or int(high) >= 1 << 63:
            return None
        query = (
            exp.select(ref.copy())
            .from_(source)
            .where(exp.Not(this=exp.Is(this=ref.copy(), expression=exp.Null())))
        )
        reader = self._con.sql(query.sql("duckdb")).to_arrow_reader(1 << 20)

        def batches() -> Any:
            for batch in reader:
                yield np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.int64)

        return heavy_candidates(batches(), int(low), int(high), threshold)

    def close(self) -> None:
        if self._own:
            self._con.close()
        elif self._relation:
            with contextlib.suppress(duckdb.Error):  # the connection may be closed already
                self._con.execute(f"DROP VIEW IF EXISTS {self._view}")
        elif self._keepalive is not None:
            self._con.unregister(self._view)


@dataclass(slots=True)
class KeyTable:
    """A link's key map (:class:`~._relation.KeyUnit`), computed into a temporary table when a
    plan first reads it (after the reservation: creating it empty reads no rows) and kept for
    the session, whose tables are fixed: every later query reads the table instead of
    grouping the parent table again."""

    name: str
    select: str
    filled: bool = False
    version: Any = None  # the session's tables' version it was filled at


@dataclass(frozen=True, slots=True)
class _SQLRelation:
    """A relation over tables of one connection, as the source of a new engine."""

    select: exp.Select
    members: tuple[DuckDBEngine, ...]
    rows_only: bool = False  # a relation's rows, computed: no joins to run again
    keys: tuple[KeyTable, ...] = ()
    unitless: tuple[exp.Select, str] | None = None  # see _relation.unitless: SELECT, unit
    tables: tuple[DuckDBEngine, ...] = ()  # every table of the session (their version)


def relation_engine(
    node: Relation,
    tables: Mapping[str, DuckDBEngine],
    connection: duckdb.DuckDBPyConnection,
    key_tables: dict[Any, KeyTable] | None = None,
) -> DuckDBEngine:
    """An engine over relation ``node`` (:mod:`._relation`) of ``tables``, which all use
    ``connection``. Nothing is read: the relation is a subquery the plans run over, its links'
    key maps temporary tables (``key_tables``, shared by the session's relations) filled when
    a plan first runs."""
    members = {}
    cache = key_tables if key_tables is not None else {}
    used: list[KeyTable] = []

    def source(name: str) -> tuple[exp.Select, Mapping[str, ColumnKind]]:
        members[name] = tables[name]
        return tables[name].typed_select()

    def keys(key_node: Any, select: exp.Select) -> exp.Select:
        found = cache.get(key_node)
        if found is None:
            name = f"dpkit_keys_{secrets.token_hex(8)}"
            text = sql_text(select, "duckdb")
            connection.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM ({text}) LIMIT 0")
            found = cache[key_node] = KeyTable(name, text)
        used.append(found)
        return exp.select(exp.Star()).from_(exp.to_table(found.name))

    def nan_free(name: str) -> set[str]:  # stored as integers, read as stored
        tables[name]._prepare_pandas()  # (a pandas frame's storage is known once registered)
        return tables[name]._integers - set(tables[name]._conversions)

    clean = clean_columns(node, nan_free)
    select, _ = sql_relation(node, source, sql_steps("duckdb", clean=clean), keys, clean=clean)
    found = unitless(node)
    labelled = None
    if found is not None:
        label_clean = clean_columns(found[0], nan_free)
        labelled_select = sql_relation(
            found[0], source, sql_steps("duckdb", clean=label_clean), keys, clean=label_clean
        )
        labelled = (labelled_select[0], found[1])
    relation = _SQLRelation(
        select,
        tuple(members.values()),
        keys=tuple(used),
        unitless=labelled,
        tables=tuple(tables.values()),
    )
    return DuckDBEngine(relation, connection=connection)


def _read_csv_as_text(path: str, header: list[str]) -> exp.Expr:
    """read_csv with the dialect fixed and every column as text: nothing is sniffed or inferred
    from the rows (a later row that did not fit an inferred type would fail, quoting itself),
    and nothing skipped (a malformed file is refused whole: engines._csv)."""

    def named(name: str, value: exp.Expr) -> exp.Expr:
        return exp.PropertyEQ(this=exp.to_identifier(name), expression=value)

    columns = exp.Struct(
        expressions=[
            exp.PropertyEQ(this=exp.Literal.string(name), expression=exp.Literal.string("VARCHAR"))
            for name in header
        ]
    )
    return exp.Anonymous(
        this="read_csv",
        expressions=[
            exp.Literal.string(path),
            named("header", exp.true()),
            named("auto_detect", exp.false()),
            named("delim", exp.Literal.string(",")),
            named("quote", exp.Literal.string('"')),
            named("escape", exp.Literal.string('"')),
            named("columns", columns),
            # the file was checked (engines._csv) before a plan reads it; strict, so that a
            # line DuckDB reads otherwise is an error rather than a different table
            named("ignore_errors", exp.false()),
            named("strict_mode", exp.true()),
        ],
    )
