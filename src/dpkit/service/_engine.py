"""A DuckDB engine for a long-running service: warm data, cached SQL texts, one cursor per thread.

:class:`WarmDuckDBEngine` is :class:`~dpkit.analytics.engines.duckdb_engine.DuckDBEngine` over a
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
  by its canonical :func:`~dpkit.analytics.expr.structural_key`) with two sentinel salts; if
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
"""

from __future__ import annotations

import collections
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

from dpkit.analytics.engines.base import BoundedPlan
from dpkit.analytics.engines.duckdb_engine import DuckDBEngine
from dpkit.analytics.engines.sql import ident
from dpkit.analytics.expr import structural_key

__all__ = ["WarmDuckDBEngine", "salt_free", "source_stamp"]

# two salts no planner draws (planner salts are < 2**62); their digit strings are long enough
# that a user literal holding one is caught by the two-text check below, never mistaken
_SENTINELS = (7_392_018_465_120_938_475_611, 8_615_230_947_781_204_653_927)
_TEMPLATES = 512
_RESULTS = 256


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
    """

    def __init__(
        self,
        path: str | Path,
        *,
        schema: Mapping[str, str] | None = None,
        max_bytes: int = 1 << 30,
    ) -> None:
        super().__init__(str(path), schema=schema)
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

    def _shape(self, plan: BoundedPlan) -> tuple[int, Any] | None:
        """The cache key of ``plan``'s shape (the plan with its salt zeroed) in this generation
        of the data: :func:`~dpkit.analytics.expr.structural_key`, a canonical value whose
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
            build = super().sql
            first, second = (build(replace(plan, salt=s)) for s in _SENTINELS)
            pieces = first.split(str(_SENTINELS[0]))
            if len(pieces) < 2 or str(_SENTINELS[1]).join(pieces) != second:
                return super().sql(plan)
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
