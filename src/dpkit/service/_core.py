"""The service's domain logic, independent of HTTP: datasets, allowances, tokens, queries.

Every check that can refuse a request runs on public information (the registry, the declared
schema and bounds, the query text) before the ledger reserves anything, so a refused request
never charges. Answers go through :class:`dpkit.analytics.Session` with the service's ledger:
the Session reserves before reading and commits the receipt before returning.
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpkit._exact import fraction_of
from dpkit.analytics.expr import Expr
from dpkit.analytics.query import (
    Aggregation,
    KeySet,
    Query,
    count,
    count_distinct_units,
    histogram,
    mean,
    median,
    quantile,
    std,
    sum,
    variance,
)
from dpkit.analytics.querytext import ParsedQuery, parse_query
from dpkit.analytics.results import Release
from dpkit.analytics.session import Session
from dpkit.core.losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import InvalidParameterError, UnsupportedQueryError
from dpkit.ledger import AlertEvent, BudgetMonitor, BudgetStatus, Ledger, LedgerEntry
from dpkit.service._engine import WarmDuckDBEngine
from dpkit.service._registry import DatasetRecord, Principal, Registry
from dpkit.service._webhooks import WebhookSender

__all__ = ["NotFoundError", "PermissionDeniedError", "Service", "ServiceConfig", "check_name"]

logger = logging.getLogger("dpkit.service")

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_KINDS = ("numeric", "text", "bool", "temporal")
_SUFFIXES = (".csv", ".parquet", ".pq")


class PermissionDeniedError(Exception):
    """The caller's role or ownership does not allow this (HTTP 403)."""


class NotFoundError(Exception):
    """No such dataset / analyst / token visible to the caller (HTTP 404)."""


def check_name(what: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidParameterError(
            what, value, "a name of letters, digits, '_', '.', '-' starting with a letter (≤ 64)"
        )
    return value


def check_column(value: str) -> str:
    if not isinstance(value, str) or not _COLUMN.match(value):
        raise InvalidParameterError(
            "column", value, "an identifier of letters, digits and '_' (≤ 64 characters)"
        )
    return value


def loss_from_parts(
    epsilon: float | str | None, delta: float | str | None, rho: float | str | None, what: str
) -> PrivacyLoss:
    """A privacy loss from wire numbers (decimal strings such as "0.01" are read exactly)."""
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise InvalidParameterError(what, (epsilon, delta, rho), "either ε (and δ) or ρ")
        value = fraction_of("rho", rho)
        if value <= 0:
            raise InvalidParameterError("rho", rho, "> 0")
        return ZCDP(value)
    if epsilon is None:
        raise InvalidParameterError(what, None, "epsilon (with an optional delta) or rho")
    eps = fraction_of("epsilon", epsilon)
    if eps <= 0:
        raise InvalidParameterError("epsilon", epsilon, "> 0")
    if delta is not None:
        d = fraction_of("delta", delta)
        if not 0 <= d < 1:
            raise InvalidParameterError("delta", delta, "in [0, 1)")
        if d > 0:
            return ApproxDP(eps, d)
    return PureDP(eps)


def loss_json(loss: PrivacyLoss | None) -> dict[str, Any]:
    """A privacy loss on the wire: its kind, its numbers as floats (for reading), ``exact`` (each
    number as an exact fraction string such as ``"1/10"``) and ``text``."""
    if loss is None:
        return {}
    if isinstance(loss, PureDP):
        parts = {"epsilon": loss.epsilon}
        out: dict[str, Any] = {"kind": "pure"}
    elif isinstance(loss, ApproxDP):
        parts = {"epsilon": loss.epsilon, "delta": loss.delta}
        out = {"kind": "approx"}
    else:
        parts = {"rho": loss.rho}
        out = {"kind": "zcdp"}
    out.update({k: float(v) for k, v in parts.items()})
    out["exact"] = {k: str(v) for k, v in parts.items()}
    out["text"] = str(loss)
    return out


@dataclass
class ServiceConfig:
    """Where the service keeps its state and reads its data.

    Args:
        database: ``sqlite:///path.db`` (default ``sqlite:///dpkit-service.db``) or
            ``postgresql://...``; the ledger and the registry live there.
        data_root: datasets are files or directories under this directory, and nothing else.
        webhook_url: threshold alerts are POSTed here as JSON.
        bootstrap_token: if no officer exists yet, create ``officer`` with this token (else one
            is generated and printed once by ``dpkit serve``).
        engine: the Session engine that reads the sources (``"duckdb"`` or ``"pandas"``).
        cache_mb: with DuckDB, a dataset whose files total at most this many MiB is kept in
            memory per server process (see :mod:`dpkit.service._engine`); larger ones are read
            in place on every query.
    """

    database: str = "sqlite:///dpkit-service.db"
    data_root: str | os.PathLike[str] = "."
    webhook_url: str | None = None
    bootstrap_token: str | None = None
    thresholds: Sequence[float] = (0.5, 0.8, 1.0)
    engine: str = "duckdb"
    cache_mb: float = 1024
    extra: dict[str, Any] = field(default_factory=dict)


class Service:
    """The privacy-budget service (one per server process)."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.data_root = Path(config.data_root).resolve()
        self.alerts: list[AlertEvent] = []
        self._alerts_lock = threading.Lock()
        # webhooks are POSTed by a background thread, never inside the request that crossed
        self.webhooks = WebhookSender(config.webhook_url) if config.webhook_url else None
        callbacks: list[Any] = [self._remember_alert]
        if self.webhooks is not None:
            callbacks.append(self.webhooks)
        self.monitor = BudgetMonitor(
            thresholds=tuple(config.thresholds), callbacks=callbacks, log=True
        )
        database = config.database
        sqlite_path: str | None = None
        if not database.startswith(("postgresql://", "postgres://")):
            sqlite_path = database.removeprefix("sqlite:///") if "://" in database else database
            database = f"sqlite:///{sqlite_path}"
        self.ledger = Ledger.open(database, monitor=self.monitor)
        self.registry = Registry(database, sqlite_path=sqlite_path)
        self._sessions: dict[tuple[str, str], tuple[Session, threading.Lock]] = {}
        self._engines: dict[str, WarmDuckDBEngine] = {}
        self._closed = False
        self._records: dict[str, DatasetRecord] = {}
        self._allowances: set[tuple[str, str]] = set()
        self._sessions_lock = threading.Lock()
        self.bootstrap_token: str | None = None
        if not any(role == "officer" for _, role in self.registry.principals()):
            self.registry.add_principal("officer", "officer")
            _, self.bootstrap_token = self.registry.issue_token("officer", config.bootstrap_token)

    def close(self) -> None:
        self._closed = True
        with self._sessions_lock:
            engines = {id(s.engine): s.engine for s, _ in self._sessions.values()}
            engines.update((id(e), e) for e in self._engines.values())
            for engine in engines.values():
                engine.close()
            self._sessions.clear()
            self._engines.clear()
        self.registry.close()
        self.ledger.close()
        if self.webhooks is not None:
            self.webhooks.close()

    def _remember_alert(self, event: AlertEvent) -> None:
        with self._alerts_lock:
            self.alerts.append(event)
            del self.alerts[:-200]

    # -- auth --

    def authenticate(self, token: str | None) -> Principal | None:
        if not token or len(token) > 200:
            return None
        return self.registry.authenticate(token)

    @staticmethod
    def require(principal: Principal, role: str) -> None:
        if principal.role != role:
            raise PermissionDeniedError(f"this needs the {role} role; you are {principal.role}")

    # -- principals and tokens (officer) --

    def create_principal(self, officer: Principal, name: str, role: str) -> tuple[str, str]:
        self.require(officer, "officer")
        check_name("name", name)
        if role not in ("officer", "analyst"):
            raise InvalidParameterError("role", role, "'officer' or 'analyst'")
        try:
            self.registry.add_principal(name, role)  # type: ignore[arg-type]
        except ValueError as exc:
            raise InvalidParameterError("name", name, "a new name or the same role") from exc
        token_id, token = self.registry.issue_token(name)
        self.registry.audit(officer.name, "officer", "issue_token", "", "ok", {"for": name})
        return token_id, token

    def issue_token(self, officer: Principal, name: str) -> tuple[str, str]:
        self.require(officer, "officer")
        if self.registry.principal_role(name) is None:
            raise NotFoundError(f"no principal named {name!r}")
        token_id, token = self.registry.issue_token(name)
        self.registry.audit(officer.name, "officer", "issue_token", "", "ok", {"for": name})
        return token_id, token

    def revoke_token(self, officer: Principal, token_id: str) -> None:
        self.require(officer, "officer")
        if not self.registry.revoke_token(token_id):
            raise NotFoundError(f"no token {token_id!r}")
        self.registry.audit(officer.name, "officer", "revoke_token", "", "ok", {"token": token_id})

    # -- datasets (officer) --

    def resolve_source(self, source: str) -> Path:
        """``source`` as a path under the data root, or an error naming only the given text."""
        if not isinstance(source, str) or not source or len(source) > 1024 or "\x00" in source:
            raise InvalidParameterError("source", source, "a relative path under the data root")
        if (
            "://" in source
            or source.startswith(("/", "\\", "~"))
            or re.match(r"^[A-Za-z]:", source)
        ):
            raise InvalidParameterError(
                "source", source, "a path relative to the data root (no absolute paths or URLs)"
            )
        if any(part == ".." for part in re.split(r"[\\/]", source)):
            raise InvalidParameterError("source", source, "a path without '..'")
        path = (self.data_root / source).resolve()
        if not path.is_relative_to(self.data_root):
            raise InvalidParameterError(
                "source", source, "a path that stays under the data root (symlinks included)"
            )
        if not path.exists():
            raise InvalidParameterError("source", source, "an existing file under the data root")
        if path.is_file() and path.suffix.lower() not in _SUFFIXES:
            raise InvalidParameterError("source", source, "a .csv or .parquet file")
        if path.is_dir():
            files = [f for f in path.rglob("*") if f.is_file() or f.is_symlink()]
            if (
                path == self.data_root
                or not files
                or any(f.suffix.lower() not in (".parquet", ".pq") for f in files)
                or any(not f.resolve().is_relative_to(self.data_root) for f in files)
            ):
                raise InvalidParameterError(
                    "source",
                    source,
                    "a directory under the data root holding only Parquet files (not the root)",
                )
        return path

    def register_dataset(
        self,
        officer: Principal,
        name: str,
        source: str,
        privacy_unit: str,
        schema: Mapping[str, str],
        bounds: Mapping[str, Any],
        budget: PrivacyLoss,
        description: str = "",
    ) -> DatasetRecord:
        self.require(officer, "officer")
        check_name("name", name)
        check_column(privacy_unit)
        clean_schema: dict[str, str] = {}
        for column, kind in schema.items():
            check_column(column)
            if kind not in _KINDS:
                raise InvalidParameterError(f"schema[{column}]", kind, " | ".join(_KINDS))
            clean_schema[column] = kind
        clean_bounds = _check_bounds(bounds)
        path = self.resolve_source(source)
        if self.registry.dataset(name) is not None or self.ledger.budgets(name):
            raise InvalidParameterError("name", name, "a dataset name not registered yet")
        # open it once to check the unit and the declared columns against the file's header
        # (public metadata; no values are read)
        scratch = Ledger.open("memory://", monitor=BudgetMonitor(log=False))
        scratch.create_budget(name, budget, privacy_unit=privacy_unit)
        probe = Session(
            str(path),
            privacy_unit,
            None,
            dataset=name,
            ledger=scratch,
            schema=clean_schema,
            engine=self.config.engine,
            **clean_bounds["contribution"],
        )
        missing = [c for c in clean_schema if c not in probe.schema]
        if missing:
            raise InvalidParameterError("schema", missing, "columns of the source")
        record = DatasetRecord(
            name,
            str(path.relative_to(self.data_root)),
            privacy_unit,
            clean_schema,
            clean_bounds,
            description[:500],
            time.time(),
            officer.name,
        )
        self.ledger.create_budget(name, budget, privacy_unit=privacy_unit, actor=officer.name)
        self.registry.add_dataset(record)
        self.prewarm([record])
        self.registry.audit(
            officer.name, "officer", "register_dataset", name, "ok", {"budget": str(budget)}
        )
        return record

    def dataset_for(self, principal: Principal, name: str) -> DatasetRecord:
        if not _NAME.match(name or ""):
            raise NotFoundError(f"no dataset named {name!r}")
        record = self._records.get(name)
        if record is None:
            record = self.registry.dataset(name)
            if record is None:
                raise NotFoundError(f"no dataset named {name!r}")
            self._records[name] = record  # registered datasets are never changed or removed
        if principal.role == "analyst" and not self._has_allowance(name, principal.name):
            raise NotFoundError(f"no dataset named {name!r}")  # do not confirm it exists
        return record

    def _has_allowance(self, dataset: str, analyst: str) -> bool:
        if (dataset, analyst) in self._allowances:
            return True  # an allowance, once created, is never removed (only adjusted)
        found = any(b.analyst == analyst for b in self.ledger.budgets(dataset))
        if found:
            self._allowances.add((dataset, analyst))
        return found

    def visible_datasets(self, principal: Principal) -> list[DatasetRecord]:
        records = self.registry.datasets()
        if principal.role == "officer":
            return records
        mine = {b.dataset for b in self.ledger.budgets() if b.analyst == principal.name}
        return [r for r in records if r.name in mine]

    def set_allowance(
        self, officer: Principal, dataset: str, analyst: str, total: PrivacyLoss, reason: str = ""
    ) -> BudgetStatus:
        """Create or adjust an analyst's allowance (never below its spend: the ledger refuses)."""
        self.require(officer, "officer")
        self.dataset_for(officer, dataset)
        check_name("analyst", analyst)
        if self.registry.principal_role(analyst) != "analyst":
            raise NotFoundError(f"no analyst named {analyst!r}")
        try:
            if self._has_allowance(dataset, analyst):
                status = self.ledger.adjust_budget(
                    dataset, total, analyst=analyst, actor=officer.name, reason=reason[:500]
                )
                action = "adjust_allowance"
            else:
                status = self.ledger.create_budget(
                    dataset, total, analyst=analyst, actor=officer.name
                )
                action = "create_allowance"
        except Exception as exc:
            self.registry.audit(
                officer.name,
                "officer",
                "set_allowance",
                dataset,
                "refused",
                {"analyst": analyst, "total": str(total), "reason": str(exc)[:500]},
            )
            raise
        self.registry.audit(
            officer.name,
            "officer",
            action,
            dataset,
            "ok",
            {"analyst": analyst, "total": str(total)},
        )
        return status

    def adjust_dataset_budget(
        self, officer: Principal, dataset: str, total: PrivacyLoss, reason: str = ""
    ) -> BudgetStatus:
        self.require(officer, "officer")
        self.dataset_for(officer, dataset)
        status = self.ledger.adjust_budget(dataset, total, actor=officer.name, reason=reason[:500])
        self.registry.audit(
            officer.name, "officer", "adjust_budget", dataset, "ok", {"total": str(total)}
        )
        return status

    # -- queries (analyst) --

    def build_query(
        self,
        record: DatasetRecord,
        sql: str | None,
        model: Mapping[str, Any] | None,
        keys: Mapping[str, Sequence[Any]] | None,
    ) -> Query | Any:
        """The query from SQL text or the JSON model; public information only."""
        if (sql is None) == (model is None):
            raise InvalidParameterError("sql/query", None, "exactly one of 'sql' and 'query'")
        if sql is not None:
            parsed = _parse_sql(sql, record)
        else:
            assert model is not None
            parsed = _parse_model(model, record)
        built = Query()
        if parsed.where is not None:
            built = built.filter(parsed.where)
        if parsed.group_by:
            for column in parsed.group_by:
                check_column(column)
            key_set = None
            if keys:
                missing = [k for k in parsed.group_by if k not in keys]
                if missing:
                    raise InvalidParameterError("keys", sorted(keys), f"values for {missing}")
                key_set = KeySet.from_dict({k: list(keys[k]) for k in parsed.group_by})
            return built.group_by(*parsed.group_by, keys=key_set).agg(*parsed.aggregations)
        return built.agg(*parsed.aggregations)

    def _engine(self, record: DatasetRecord) -> Any:
        """The dataset's engine, shared by its analysts' sessions in this process: for DuckDB a
        :class:`WarmDuckDBEngine` (warm data, cached SQL, a cursor per thread), else the engine's
        name (each session opens its own)."""
        if self.config.engine != "duckdb":
            return self.config.engine
        with self._sessions_lock:
            found = self._engines.get(record.name)
        if found is not None:
            return found
        engine = WarmDuckDBEngine(
            self.data_root / record.source,
            schema=record.schema,
            max_bytes=int(self.config.cache_mb * 2**20),
        )
        with self._sessions_lock:
            kept = self._engines.setdefault(record.name, engine)
        if kept is not engine or self._closed:
            engine.close()
        return kept

    def prewarm(
        self, records: Sequence[DatasetRecord] | None = None, *, freeze: bool = False
    ) -> threading.Thread | None:
        """Load datasets into this process's engines on a background thread, so that no
        analyst's query waits for it (DuckDB only; a failure is logged and left to the first
        query, which reports it as usual). ``freeze``: then move what loading created to the
        garbage collector's permanent generation (``gc.freeze``; the server's own process)."""
        if self.config.engine != "duckdb":
            return None

        def work() -> None:
            for record in self.registry.datasets() if records is None else records:
                if self._closed:
                    return
                try:
                    self._engine(record)
                except Exception:
                    logger.exception("could not preload dataset %s", record.name)
            if freeze:  # what loading created is long-lived: keep it out of full collections
                gc.freeze()

        thread = threading.Thread(target=work, name="dpkit-prewarm", daemon=True)
        thread.start()
        return thread

    def _session(self, record: DatasetRecord, analyst: str) -> tuple[Session, threading.Lock]:
        key = (record.name, analyst)
        with self._sessions_lock:
            found = self._sessions.get(key)
            if found is not None:
                return found
        engine = self._engine(record)
        session = Session(
            str(self.data_root / record.source),
            record.privacy_unit,
            None,
            ledger=self.ledger,
            dataset=record.name,
            analyst=analyst,
            schema=None if isinstance(engine, WarmDuckDBEngine) else record.schema,
            engine=engine,
            **record.bounds.get("contribution", {}),
        )
        with self._sessions_lock:
            return self._sessions.setdefault(key, (session, threading.Lock()))

    def query(
        self,
        analyst: Principal,
        dataset: str,
        loss: PrivacyLoss,
        *,
        sql: str | None = None,
        model: Mapping[str, Any] | None = None,
        keys: Mapping[str, Sequence[Any]] | None = None,
        alpha: float = 0.05,
    ) -> tuple[Release, PrivacyLoss | None]:
        """Answer a query; returns the release and the analyst's remaining allowance."""
        self.require(analyst, "analyst")
        record = self.dataset_for(analyst, dataset)
        built = self.build_query(record, sql, model, keys)
        session, lock = self._session(record, analyst.name)
        if isinstance(session.engine, WarmDuckDBEngine):  # thread-safe: no lock
            release = session.evaluate(built, loss=loss, alpha=alpha)
        else:
            with lock:
                release = session.evaluate(built, loss=loss, alpha=alpha)
        return release, release.remaining

    # -- reading the books --

    def receipts(
        self, principal: Principal, analyst: str | None = None, limit: int = 500
    ) -> list[LedgerEntry]:
        if principal.role == "analyst":
            if analyst not in (None, principal.name):
                raise PermissionDeniedError("analysts see only their own receipts")
            analyst = principal.name
        entries = self.ledger.history(kinds=["commit"])
        if analyst is not None:
            entries = [e for e in entries if e.analyst == analyst]
        return entries[-limit:][::-1]

    def budgets_for(self, principal: Principal) -> list[BudgetStatus]:
        budgets = self.ledger.budgets()
        if principal.role == "officer":
            return budgets
        return [b for b in budgets if b.analyst == principal.name]

    def alert_entries(self, limit: int = 100) -> list[LedgerEntry]:
        return self.ledger.history(kinds=["alert"])[-limit:][::-1]


def _check_bounds(bounds: Mapping[str, Any]) -> dict[str, Any]:
    contribution: dict[str, int] = {}
    for key in ("max_rows", "max_groups", "max_rows_per_group"):
        value = bounds.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
            raise InvalidParameterError(f"bounds.{key}", value, "an integer in [1, 1000000]")
        contribution[key] = value
    if "max_rows" not in contribution:
        contribution["max_rows"] = 1
    columns: dict[str, list[float]] = {}
    for column, pair in dict(bounds.get("columns") or {}).items():
        check_column(column)
        if (
            not isinstance(pair, list | tuple)
            or len(pair) != 2
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in pair)
            or not pair[0] < pair[1]
        ):
            raise InvalidParameterError(
                f"bounds.columns[{column}]", pair, "[lower, upper], lower < upper"
            )
        columns[column] = [float(pair[0]), float(pair[1])]
    return {"contribution": contribution, "columns": columns}


def _parse_sql(sql: str, record: DatasetRecord) -> ParsedQuery:
    if not isinstance(sql, str) or len(sql) > 10_000:
        raise UnsupportedQueryError("the query text must be a string of at most 10,000 characters")
    return _parse_sql_text(sql, record.name, record.privacy_unit)


@functools.lru_cache(maxsize=1024)
def _parse_sql_text(sql: str, dataset: str, privacy_unit: str) -> ParsedQuery:
    """The parsed query (public text only; refusals are raised, never cached)."""
    import sqlglot
    from sqlglot import exp

    from dpkit.analytics.querytext import _QueryDialect

    try:
        statements = [s for s in sqlglot.parse(sql, read=_QueryDialect) if s is not None]
    except Exception:
        statements = []
    for statement in statements:
        for table in statement.find_all(exp.Table):
            if (
                table.args.get("db")
                or table.args.get("catalog")
                or not isinstance(table.this, exp.Identifier)
                or table.name != dataset
            ):
                raise UnsupportedQueryError(
                    "FROM may only name the dataset itself (or be left out); files, paths, "
                    "functions and other tables are refused"
                )
    return parse_query(sql, privacy_unit)


_MODEL_KINDS = (
    "count",
    "count_units",
    "sum",
    "mean",
    "variance",
    "std",
    "median",
    "quantile",
    "histogram",
)


def _parse_model(model: Mapping[str, Any], record: DatasetRecord) -> ParsedQuery:
    declared = record.bounds.get("columns", {})
    aggs: list[Aggregation] = []
    raw = model.get("aggregations")
    if not isinstance(raw, list) or not raw or len(raw) > 50:
        raise InvalidParameterError("aggregations", raw, "a list of 1 to 50 aggregations")
    for item in raw:
        if not isinstance(item, Mapping):
            raise InvalidParameterError("aggregation", item, "an object with 'op'")
        op = item.get("op")
        name = item.get("name")
        if name is not None:
            check_column(name)
        if op == "count":
            aggs.append(count(name or "count"))
            continue
        if op == "count_units":
            aggs.append(count_distinct_units(name or "units"))
            continue
        if op not in _MODEL_KINDS:
            raise InvalidParameterError("op", op, " | ".join(_MODEL_KINDS))
        column = check_column(item.get("column", ""))
        if op == "histogram":
            aggs.append(histogram(column, list(item.get("edges") or []), name))
            continue
        lower, upper = item.get("lower"), item.get("upper")
        if lower is None and upper is None and column in declared:
            lower, upper = declared[column]
        bounds = (lower, upper)
        if op == "quantile":
            aggs.append(quantile(column, item.get("q"), bounds, name))  # type: ignore[arg-type]
            continue
        builders: dict[str, Any] = {
            "sum": sum,
            "mean": mean,
            "variance": variance,
            "std": std,
            "median": median,
        }
        builder = builders[op]
        aggs.append(builder(column, bounds, name))
    where: Expr | None = None
    if model.get("where") is not None:
        text = model["where"]
        if not isinstance(text, str):
            raise InvalidParameterError("where", text, "a boolean expression as text")
        where = _parse_sql(f"SELECT COUNT(*) WHERE {text}", record).where
    group_by = model.get("group_by") or []
    if not isinstance(group_by, list) or not all(isinstance(g, str) for g in group_by):
        raise InvalidParameterError("group_by", group_by, "a list of column names")
    return ParsedQuery(tuple(aggs), where, tuple(check_column(g) for g in group_by))
