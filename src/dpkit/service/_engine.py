"""A DuckDB engine for a long-running service: warm data, cached SQL texts, one cursor per thread.

:class:`WarmDuckDBEngine` is :class:`~dpkit.analytics._engines._duckdb.DuckDBEngine` over a
registered file or Parquet directory, with three changes that touch only *how fast* a plan runs,
never *what* it computes:

* **Warm data.** The source expression the base engine would read on every query (``read_csv``
  with every column as text, or the floored ``read_parquet`` view) is evaluated once into an
  in-memory DuckDB table, and plans read that table. The table holds exactly the rows and the
  column types the source expression yields, so every plan returns what it would have returned
  from the file. The file is ``stat``-ed before each plan; if it changed (size, mtime, inode, or
  for a directory the set of files), the table is rebuilt from the new contents. Sources larger
  than ``max_bytes`` are read in place, as the base engine does.
* **Cached SQL.** Building a plan's SQL through sqlglot costs tens of milliseconds. The SQL text
  depends only on public information (the plan, the declared schema, the source's column
  names) and on the plan's contribution-bounding **salt**, which appears in it exactly as a
  string literal. The text is built once per plan shape (the plan with its salt zeroed, keyed
  by its canonical :func:`~dpkit.analytics._expr.structural_key`) with two sentinel salts; if
  the two texts differ exactly at the salt's places, the text is cached as the parts around
  the salt, and each later plan gets ``salt.join(parts)`` with **its own fresh
  salt** (the planner draws one per query; nothing here reuses a salt). Otherwise nothing is
  cached and the SQL is built as usual. No result and no noise is ever cached: the engine
  returns exact aggregates and the Session adds fresh noise after the ledger reserved the
  query's cost.
* **Exact results of salt-free plans.** When a plan has no group keys and no bins and every
  output counts rows or privacy units (``COUNT(*)``, ``COUNT(DISTINCT unit)``, with any
  ``WHERE``), its exact result does not depend on the salt: bounding keeps
  ``min(rows of the unit, bound)`` rows of every unit whichever rows it picks, and every unit
  keeps at least one. For those plans (only) the exact, noise-free result is kept per plan
  shape and per version of the source, and returned again for the same plan on the same data:
  the very value a re-run would compute. It is read only inside :meth:`run`, i.e. after the
  Session reserved the query's cost; noise is still drawn afresh for every query, after the
  engine returns. Whether a plan is cached depends on the plan alone (public), never on the data.
* **Threads.** Each thread runs plans on its own DuckDB cursor (a connection to the same
  in-memory database), so concurrent requests do not serialise on one connection.
* **Large plans elsewhere.** The SQL of a large plan (a long WHERE, many public keys or
  histogram bins: :func:`plan_size` above :data:`LARGE_PLAN`) is built by the same function in
  a separate process (:class:`SqlBuilder`): building it takes seconds of sqlglot work and
  leaves cyclic garbage whose collection stalled every thread of the server, its event loop
  and ``/health`` included, for 100-300 ms at a time.
"""

from __future__ import annotations

import collections
import concurrent.futures
import concurrent.futures.process
import contextlib
import multiprocessing
import os
import secrets
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env
from sqlglot import exp

from dpkit.analytics._engines._base import BoundedPlan
from dpkit.analytics._engines._duckdb import DuckDBEngine
from dpkit.analytics._engines._sql import build_query, ident
from dpkit.analytics._expr import Expr, IsIn, children, structural_key

__all__ = ["LARGE_PLAN", "SqlBuilder", "WarmDuckDBEngine", "plan_size", "salt_free", "source_stamp"]

# two salts no planner draws (planner salts are < 2**62); their digit strings are long enough
# that a user literal holding one is caught by the two-text check below, never mistaken
_SENTINELS = (7_392_018_465_120_938_475_611, 8_615_230_947_781_204_653_927)
_TEMPLATES = 512
_RESULTS = 256

LARGE_PLAN = 64
"""A plan larger than this (:func:`plan_size`) has its SQL built in the builder process."""


def _expr_size(expr: Expr) -> int:
    values = len(expr.values) if isinstance(expr, IsIn) else 0
    return 1 + values + sum(_expr_size(child) for child in children(expr))


def plan_size(plan: BoundedPlan) -> int:
    """About how many SQL nodes per output the plan's text has: expression nodes of its steps,
    public keys (times key columns), bin edges and outputs."""
    size = len(plan.values) + len(plan.outputs)
    for step in plan.steps:
        size += 1 + len(step.columns) + (0 if step.expr is None else _expr_size(step.expr))
    if plan.key_set is not None:
        size += len(plan.key_set.rows) * len(plan.key_set.columns)
    if plan.bins is not None:
        size += len(plan.bins.edges)
    return size


def _lower_priority() -> None:
    """In the builder process: yield the CPU to the server's own threads (its event loop
    answers every request) when both want it."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(10)


def _build_texts(jobs: list[tuple[Any, ...]]) -> list[str]:
    """In the builder process: ``build_query(*args)`` as DuckDB SQL text, for each job."""
    return [build_query(*args).sql(dialect="duckdb", copy=False) for args in jobs]


class SqlBuilder:
    """Builds the SQL of large plans in one separate process (started on first use, with
    ``spawn``), so that its CPU time and its garbage stay out of the server's process, whose
    event loop then keeps answering (``/health`` included) while a large query is planned.

    The texts are exactly :class:`DuckDBEngine`'s (the same function on the same arguments).
    The process runs at a lower priority (``nice`` 10), so that it yields the CPU to the
    server's own threads.
    If the process cannot be used (it died, or cannot start), :meth:`build` returns None and
    the caller builds the text itself.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._closed = False

    def start(self) -> None:
        """Start the process now (it takes a second or two to import dpkit)."""
        with self._lock:
            if self._pool is None and not self._closed:
                context = multiprocessing.get_context("spawn")
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    1, mp_context=context, initializer=_lower_priority
                )
                self._pool.submit(_build_texts, []).result()

    def build(self, jobs: list[tuple[Any, ...]]) -> list[str] | None:
        try:
            self.start()
            with self._lock:
                pool = self._pool
            if pool is None:
                return None
            texts: list[str] = pool.submit(_build_texts, jobs).result()
            return texts
        except concurrent.futures.process.BrokenProcessPool:
            with self._lock:
                self._pool = None  # started again on the next large plan
            return None
        except (OSError, RuntimeError):
            return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def salt_free(plan: BoundedPlan) -> bool:
    """Whether ``plan``'s exact result cannot depend on its salt (see the module docstring)."""
    return (
        not plan.keys
        and plan.bins is None
        and bool(plan.outputs)
        and all(o.kind in ("rows", "units") for o in plan.outputs)
    )


def source_stamp(path: Path) -> tuple[Any, ...]:
    """What changes when a source's contents change: size, mtime and inode of the file, or of
    every file under a directory (sorted by path)."""
    if path.is_dir():
        parts: list[tuple[Any, ...]] = []
        for root, _, files in os.walk(path, followlinks=False):
            for name in files:
                st = os.stat(os.path.join(root, name))
                parts.append((root, name, st.st_size, st.st_mtime_ns, st.st_ino))
        return tuple(sorted(parts))
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _source_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


class WarmDuckDBEngine(DuckDBEngine):
    """:class:`DuckDBEngine` over ``path`` with warm data, cached SQL and per-thread cursors.

    Args:
        path: a CSV or Parquet file, or a directory of Parquet files.
        schema: the declared column kinds (as for :class:`DuckDBEngine`).
        max_bytes: keep the source in memory only if its files total at most this many bytes.
        builder: where the SQL of large plans is built (another process); None: here.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        schema: Mapping[str, str] | None = None,
        max_bytes: int = 1 << 30,
        builder: SqlBuilder | None = None,
    ) -> None:
        super().__init__(str(path), schema=schema)
        self._builder = builder
        self._path = Path(path)
        self._file_sql = self._source_sql
        self._max_bytes = max_bytes
        self._guard = threading.Lock()
        self._local = threading.local()
        self._generation = 0
        self._table: str | None = None
        self._stale: str | None = None
        self._stamp: tuple[Any, ...] | None = None
        self._templates: collections.OrderedDict[tuple[int, Any], list[str]] = (
            collections.OrderedDict()
        )
        self._results: collections.OrderedDict[tuple[int, Any], pa.Table] = (
            collections.OrderedDict()
        )
        self._refresh()

    # -- warm data --

    @property
    def warm(self) -> bool:
        """Whether plans read the in-memory copy (else the file, in place)."""
        return self._table is not None

    def _refresh(self) -> None:
        """(Re)build the in-memory copy if the source changed since it was taken."""
        stamp = source_stamp(self._path)
        if stamp == self._stamp:
            return
        with self._guard:
            if stamp == self._stamp:
                return
            stale, self._stale = self._stale, self._table
            if _source_bytes(self._path) <= self._max_bytes:
                name = f"dpkit_warm_{secrets.token_hex(8)}"
                source = self._file_sql.sql(dialect="duckdb")
                self._con.execute(f"CREATE TABLE {name} AS SELECT * FROM {source}")
                self._table = name
                self._source_sql = exp.Table(this=ident(name))
            else:
                self._table = None
                self._source_sql = self._file_sql
            self._templates.clear()
            self._results.clear()
            self._stamp = stamp
            self._generation += 1
            if stale is not None:  # two generations back: no plan can still be reading it
                self._con.execute(f"DROP TABLE IF EXISTS {stale}")

    # -- cached SQL --

    def _build(self, plans: list[BoundedPlan]) -> list[str]:
        """The SQL texts of ``plans`` as :class:`DuckDBEngine` builds them: here, or for a
        large plan (:func:`plan_size` above :data:`LARGE_PLAN`) in the builder process, if any
        (building a large plan's SQL takes seconds of sqlglot and leaves cyclic garbage whose
        collections stall every thread of the server for 100-300 ms)."""
        builder = self._builder
        if builder is not None and plan_size(plans[0]) > LARGE_PLAN:
            jobs = [self._sql_args(plan) for plan in plans]
            built = builder.build(jobs)
            if built is not None:
                return built
        return [DuckDBEngine.sql(self, plan) for plan in plans]

    def _sql_args(self, plan: BoundedPlan) -> tuple[Any, ...]:
        """What :meth:`DuckDBEngine.sql` passes to ``build_query`` (without candidates)."""
        return (
            plan,
            self._source_sql.copy(),
            self._columns,
            self._schema,
            self._floats,
            "duckdb",
            self._conversions,
            None,
            self._integers,
        )

    def _shape(self, plan: BoundedPlan) -> tuple[int, Any] | None:
        """The cache key of ``plan``'s shape (the plan with its salt zeroed) in this generation
        of the data: :func:`~dpkit.analytics._expr.structural_key`, a canonical value whose
        ``==`` is an exact bool (a plan's own ``==`` would compare its expressions, and an
        expression's ``==`` builds a predicate). None if the plan has no such key."""
        try:
            return (self._generation, structural_key(replace(plan, salt=0)))
        except TypeError:
            return None

    def sql(self, plan: BoundedPlan, candidates: exp.Expr | None = None) -> str:
        """The plan's SQL, from a per-shape template with the salt filled in. Plans with a
        heavy-unit candidate list (the engine's pre-count) are built as usual, uncached; this
        engine's :meth:`run` does not use the pre-count, so it bounds every unit exactly."""
        if candidates is not None:
            return super().sql(plan, candidates)
        key = self._shape(plan)
        if key is None:  # no structural key (an unusual key value): build as usual
            return super().sql(plan)
        with self._guard:
            parts = self._templates.get(key)
            if parts is not None:
                self._templates.move_to_end(key)
        if parts is None:
            first, second = self._build([replace(plan, salt=s) for s in _SENTINELS])
            pieces = first.split(str(_SENTINELS[0]))
            if len(pieces) < 2 or str(_SENTINELS[1]).join(pieces) != second:
                (text,) = self._build([plan])
                return text
            parts = pieces
            with self._guard:
                self._templates[key] = parts
                while len(self._templates) > _TEMPLATES:
                    self._templates.popitem(last=False)
        return str(int(plan.salt)).join(parts)

    # -- running --

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        local = self._local
        if getattr(local, "generation", None) != self._generation or local.cursor is None:
            local.cursor = self._con.cursor()
            local.generation = self._generation
        cursor: duckdb.DuckDBPyConnection = local.cursor
        return cursor

    def run(self, plan: BoundedPlan) -> pa.Table:
        self._refresh()
        self._check_stored_types()  # a file rewritten with other column types is refused
        key: tuple[int, Any] | None = None
        if self._table is not None and salt_free(plan):
            key = self._shape(plan)
        if key is not None:
            with self._guard:
                cached = self._results.get(key)
                if cached is not None:
                    self._results.move_to_end(key)
                    return cached
        result = self._execute(plan)
        if key is not None:
            with self._guard:
                self._results[key] = result
                while len(self._results) > _RESULTS:
                    self._results.popitem(last=False)
        return result

    def _execute(self, plan: BoundedPlan) -> pa.Table:
        text = self.sql(plan)
        if self._table is None:
            # in place: the floored Parquet view is a temp view of the main connection
            with self._guard:
                result: pa.Table = self._con.sql(text).to_arrow_table()
            return result
        result = self._cursor().sql(text).to_arrow_table()
        return result
