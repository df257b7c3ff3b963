"""The DuckDB engine (the default): runs the compiled SQL on an in-process DuckDB connection.

Sources: a CSV or Parquet path (read in place), a pandas DataFrame, an Arrow table, a Polars
frame (through Arrow) or a DuckDB relation. Each engine uses its own connection and registers the
source under a generated view name; user text never reaches SQL except as quoted identifiers and
literals built by sqlglot.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env
from sqlglot import exp

from dpkit.analytics.engines.base import BoundedPlan, kind_of_arrow
from dpkit.analytics.engines.sql import build_query, ident
from dpkit.analytics.expr import ColumnKind
from dpkit.errors import InvalidDataError

__all__ = ["DuckDBEngine"]


def _threads() -> int:
    value = os.environ.get("DPKIT_DUCKDB_THREADS")
    return int(value) if value and value.isdigit() and int(value) > 0 else 0


class DuckDBEngine:
    """Runs bounded plans with DuckDB."""

    name = "duckdb"

    def __init__(self, source: Any, *, connection: duckdb.DuckDBPyConnection | None = None) -> None:
        self._own = connection is None
        self._con = connection if connection is not None else duckdb.connect(":memory:")
        if _threads():
            self._con.execute(f"SET threads = {_threads()}")
        self._view = f"dpkit_src_{secrets.token_hex(8)}"
        self._keepalive: Any = None
        self._source_sql = self._register(source)
        described = self._con.sql(
            exp.select(exp.Star()).from_(self._source_sql.copy()).limit(0).sql("duckdb")
        )
        arrow_schema = described.to_arrow_table().schema
        self._columns = [field.name for field in arrow_schema]
        self._schema: dict[str, ColumnKind] = {
            field.name: kind_of_arrow(field.type) for field in arrow_schema
        }
        self._floats = {field.name for field in arrow_schema if pa.types.is_floating(field.type)}

    def _register(self, source: Any) -> exp.Expr:
        if isinstance(source, str | Path):
            path = str(source)
            if not Path(path).exists():
                raise InvalidDataError("source", f"no file at {path!r}")
            reader = (
                "read_parquet" if path.lower().endswith((".parquet", ".pq")) else ("read_csv_auto")
            )
            call = exp.Anonymous(this=reader, expressions=[exp.Literal.string(path)])
            return exp.Table(this=call)
        if isinstance(source, duckdb.DuckDBPyRelation):
            source = source.to_arrow_table()
        elif hasattr(source, "to_arrow") and not isinstance(source, pa.Table):
            source = source.to_arrow()  # Polars
        self._keepalive = source
        self._con.register(self._view, source)
        return exp.Table(this=ident(self._view))

    def schema(self) -> dict[str, ColumnKind]:
        return dict(self._schema)

    def sql(self, plan: BoundedPlan) -> str:
        """The SQL text that :meth:`run` executes (for inspection and tests)."""
        query = build_query(
            plan, self._source_sql.copy(), self._columns, self._schema, self._floats, "duckdb"
        )
        return query.sql(dialect="duckdb")

    def run(self, plan: BoundedPlan) -> pa.Table:
        result: pa.Table = self._con.sql(self.sql(plan)).to_arrow_table()
        return result

    def close(self) -> None:
        if self._own:
            self._con.close()
        else:
            self._con.unregister(self._view)
