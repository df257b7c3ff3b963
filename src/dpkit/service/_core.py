"""The service's domain logic, independent of HTTP: datasets, allowances, tokens, queries.

Every check that can refuse a request runs on public information (the registry, the declared
schema and bounds, the query text) before the ledger reserves anything, so a refused request
never charges. Answers go through :class:`dpkit.analytics.Session` with the service's ledger:
the Session reserves before reading and commits the receipt before returning.
"""

from __future__ import annotations

import builtins
import contextlib
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

from dpkit._door import watching
from dpkit._exact import fraction_of
from dpkit.analytics import _session as session_module
from dpkit.analytics._expr import Expr
from dpkit.analytics._families import Form, family_of, forms
from dpkit.analytics._metadata import check_column_keys, registered_bounds, registered_keys
from dpkit.analytics._planner._measurement import QueryMeasurement
from dpkit.analytics._query import Aggregation, KeySet, Query
from dpkit.analytics._querytext import (
    MAX_GROUP_BY,
    MAX_LIST,
    ParsedQuery,
    check_released,
    parse_query,
    parse_where,
    post_process,
)
from dpkit.analytics._results import TableRelease
from dpkit.analytics._session import Session
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import BudgetExceededError, DPError, InvalidParameterError, UnsupportedQueryError
from dpkit.ledger import (
    AlertEvent,
    BudgetMonitor,
    BudgetStatus,
    Ledger,
    LedgerEntry,
)
from dpkit.ledger._ledger import _charged_rows
from dpkit.service._engine import SqlBuilder, WarmDuckDBEngine, source_stamp
from dpkit.service._registry import DatasetRecord, Principal, Registry
from dpkit.service._webhooks import WebhookSender

__all__ = [
    "ConflictError",
    "FailedAfterReservationError",
    "NotFoundError",
    "PermissionDeniedError",
    "Preview",
    "Service",
    "ServiceConfig",
    "check_name",
    "dataset_columns",
    "shown_number",
]

logger = logging.getLogger("dpkit.service")

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_KINDS = ("numeric", "text", "bool", "temporal")
_SUFFIXES = (".csv", ".parquet", ".pq")
_BOUNDS_HELP = (
    "dpkit never reads them from the data: declare the clamping bounds in the query, or ask "
    "the privacy officer to register them with the dataset (bounds.columns.{column} = "
    "[lower, upper]; GET /api/v1/datasets shows the registered bounds)."
)


class PermissionDeniedError(Exception):
    """The caller's role or ownership does not allow this (HTTP 403)."""


class NotFoundError(Exception):
    """No such dataset / analyst / token visible to the caller (HTTP 404)."""


class ConflictError(Exception):
    """The request is valid but would leave the service unusable, e.g. revoking the last
    active officer token (HTTP 409)."""


class FailedAfterReservationError(Exception):
    """A query failed after its loss was reserved in the ledger: the charge stays (there are
    no refunds), and the failure is the service's, not a refusal of the request (HTTP 424).

    Attributes:
        reservation_id: the ledger's reservation (the entry id of the ``reserve``).
        loss: the loss reserved (and charged).
        cause: the class name of the underlying error.
    """

    def __init__(self, reservation_id: int, loss: PrivacyLoss, cause: BaseException) -> None:
        self.reservation_id = int(reservation_id)
        self.loss = loss
        self.cause = type(cause).__name__
        # dpkit's own messages never quote data; anything else is named by its class only
        said = f": {str(cause)[:500]}" if isinstance(cause, DPError) else ""
        super().__init__(
            f"the query failed after its loss ({loss}) was reserved in the ledger (reservation "
            f"{self.reservation_id}; {self.cause}{said}). The charge stays: there are no "
            "refunds, and sending the query again is charged again. This is a failure of the "
            "service or of the dataset's source, not a refusal of the query; tell the privacy "
            "officer the reservation number."
        )


# Limits of what one query request may ask for, checked before anything is reserved (each
# refusal names its limit; docs/service.md, "Limits"). Building the SQL of a key filter costs
# about 1.5 ms per key, so these also bound the CPU one request can take.
MAX_KEYS = 1_000
"""The most public group keys of a query (the product of the per-column lists)."""
MAX_KEY_TEXT = 1_000
"""The longest text key value (characters)."""
MAX_QUANTILE_KEYS = 100
"""The most public keys of a query with a quantile or a median: each group's quantile is its
own release, about 20 ms of CPU."""
MAX_QUANTILE_RELEASES = 500
"""The most quantile releases of a query: its quantile and median aggregates times its public
keys (each is a release of its own, about 4 ms of CPU: 100 quantiles over 100 keys took a
minute of CPU after the reservation)."""
MAX_CELLS = 100_000
"""The most cells (public keys times bins) of a query's histograms and other binned aggregates
(each family declares its cells per group: :attr:`dpkit.analytics._families.Family.cells`)."""
MAX_TOKEN_DAYS = 3650
"""The longest lifetime of a token (days)."""
OFFICER_MARGIN_DAYS = 1
"""An officer token may be revoked only while another officer token stays valid for at least
this long (days): one that expires in a few seconds would leave every officer locked out."""
HEAVY_REQUEST = 1_000
"""A query request larger than this (characters of SQL, plus model and key values) is parsed
and planned in the heavy lane, one at a time."""


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


@dataclass(frozen=True)
class Preview:
    """:meth:`Service.preview`: the plan's text (``explain()``), the loss the ledger would be
    charged, the analyst's allowance left, and whether the charge fits in it now."""

    plan: str
    charge: PrivacyLoss
    remaining: PrivacyLoss | None
    fits: bool


class _ServiceSession(Session):
    """A Session whose :meth:`compile` (run before the ledger reserves anything) also builds
    every plan's engine SQL and checks that it can be sent to the engine, so that everything
    decidable from the request (its parse, its plans, their SQL and the encodability of every
    text in them) is decided before the reservation. The SQL is built again from the same
    plans when they run (the warm engine caches it per plan shape)."""

    def compile(self, query: Query, **kwargs: Any) -> QueryMeasurement:
        compiled = super().compile(query, **kwargs)
        engine = self.engine
        if isinstance(engine, WarmDuckDBEngine):
            for plan in compiled.plans:
                try:
                    text = engine.sql(plan)
                except RecursionError:
                    raise UnsupportedQueryError(
                        "the query is nested too deeply for the engine; write it with fewer levels"
                    ) from None
                except DPError:
                    raise
                except Exception as exc:
                    raise UnsupportedQueryError(
                        f"the query cannot be run by the engine ({type(exc).__name__}); "
                        "nothing was charged"
                    ) from None
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise InvalidParameterError(
                        "query",
                        "(a text of the query)",
                        "texts without lone surrogates (e.g. JSON \\ud800): valid Unicode",
                    ) from None
        return compiled

    bounds_help = _BOUNDS_HELP


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
        token_days: how long a token is valid when its issuer does not say (days; at most
            :data:`MAX_TOKEN_DAYS`).
    """

    database: str = "sqlite:///dpkit-service.db"
    data_root: str | os.PathLike[str] = "."
    webhook_url: str | None = None
    bootstrap_token: str | None = None
    thresholds: Sequence[float] = (0.5, 0.8, 1.0)
    engine: str = "duckdb"
    cache_mb: float = 1024
    token_days: float = 90
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
            if "://" in database and not database.startswith("sqlite:///"):
                # another scheme (mysql://, sqlite:// with two slashes) is no SQLite file name
                raise InvalidParameterError(
                    "database",
                    database.split("://")[0] + "://...",  # (a URL may hold a password)
                    "sqlite:///PATH, postgresql://... or a file path",
                    hint="the service keeps its ledger in SQLite or PostgreSQL",
                )
            sqlite_path = database.removeprefix("sqlite:///")
            database = f"sqlite:///{sqlite_path}"
        self.ledger = Ledger.open(database, monitor=self.monitor)
        self.registry = Registry(database, sqlite_path=sqlite_path)
        self._sessions: dict[tuple[str, str], tuple[Session, threading.Lock]] = {}
        # the files' stamps each session over several tables was opened on (rebuilt on change)
        self._stamps: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._engines: dict[str, WarmDuckDBEngine] = {}
        self._closed = False
        self._records: dict[str, DatasetRecord] = {}
        self._allowances: set[tuple[str, str]] = set()
        self._sessions_lock = threading.Lock()
        self._heavy_lane = threading.Lock()
        # large plans' SQL is built in another process (see dpkit.service._engine)
        self._builder = SqlBuilder() if config.engine == "duckdb" else None
        self.token_days = _token_days(config.token_days, "token_days")
        self.registry.expire_legacy_tokens(time.time() + self.token_days * 86400)
        self.bootstrap_token: str | None = None
        self.bootstrap_officer: str | None = None
        if self.registry.active_officer_tokens() == 0:
            # the first start, or every officer token expired: issue one (printed once by
            # `dpkit serve`), so that regaining access never needs SQL
            officers = sorted(n for n, role in self.registry.principals() if role == "officer")
            if not officers:
                self.registry.add_principal("officer", "officer")
            name = "officer" if not officers or "officer" in officers else officers[0]
            wanted = config.bootstrap_token
            if wanted and self.registry.known_token(wanted):
                wanted = None  # revoked or expired: never brought back
            _, self.bootstrap_token = self.registry.issue_token(
                name, wanted, expires_at=self._expiry(None)
            )
            self.bootstrap_officer = name

    def close(self) -> None:
        self._closed = True
        with self._sessions_lock:
            engines = {
                id(s.engine): s.engine for s, _ in self._sessions.values() if s.tables is None
            }
            engines.update((id(e), e) for e in self._engines.values())
            for engine in engines.values():
                engine.close()
            for session, _ in self._sessions.values():
                if session.tables is not None:
                    session.close()
            self._sessions.clear()
            self._stamps.clear()
            self._engines.clear()
        if self._builder is not None:
            self._builder.close()
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

    def token_expired_at(self, token: str | None) -> float | None:
        """When ``token`` expired, if that is why it is refused (else None)."""
        if not token or len(token) > 200:
            return None
        return self.registry.expired_at(token)

    def _expiry(self, days: float | None) -> float:
        lifetime = self.token_days if days is None else _token_days(days, "expires_in_days")
        return time.time() + lifetime * 86400

    @staticmethod
    def require(principal: Principal, role: str) -> None:
        if principal.role != role:
            raise PermissionDeniedError(f"this needs the {role} role; you are {principal.role}")

    # -- principals and tokens (officer) --

    def create_principal(
        self, officer: Principal, name: str, role: str, expires_in_days: float | None = None
    ) -> tuple[str, str, float]:
        """Create a principal and its first token: (token_id, token, expires_at)."""
        self.require(officer, "officer")
        check_name("name", name)
        if role not in ("officer", "analyst"):
            raise InvalidParameterError("role", role, "'officer' or 'analyst'")
        expires_at = self._expiry(expires_in_days)
        try:
            self.registry.add_principal(name, role)  # type: ignore[arg-type]
        except ValueError as exc:
            raise InvalidParameterError("name", name, "a new name or the same role") from exc
        token_id, token = self.registry.issue_token(name, expires_at=expires_at)
        self.registry.audit(
            officer.name, "officer", "issue_token", "", "ok", {"for": name, "expires": expires_at}
        )
        return token_id, token, expires_at

    def issue_token(
        self, officer: Principal, name: str, expires_in_days: float | None = None
    ) -> tuple[str, str, float]:
        """Another token for ``name``: (token_id, token, expires_at)."""
        self.require(officer, "officer")
        expires_at = self._expiry(expires_in_days)
        if self.registry.principal_role(name) is None:
            raise NotFoundError(f"no principal named {name!r}")
        token_id, token = self.registry.issue_token(name, expires_at=expires_at)
        self.registry.audit(
            officer.name, "officer", "issue_token", "", "ok", {"for": name, "expires": expires_at}
        )
        return token_id, token, expires_at

    def revoke_token(self, officer: Principal, token_id: str) -> None:
        """Revoke a token; never the last active officer token (that would lock every officer
        out: issue another officer token first)."""
        self.require(officer, "officer")
        outcome = self.registry.revoke_token(
            token_id, durable_until=time.time() + OFFICER_MARGIN_DAYS * 86400
        )
        if outcome == "missing":
            raise NotFoundError(f"no token {token_id!r}")
        if outcome == "last_officer":
            self.registry.audit(
                officer.name, "officer", "revoke_token", "", "refused", {"token": token_id}
            )
            raise ConflictError(
                f"{token_id} is the last durable officer token: no other active officer token "
                f"stays valid for at least {OFFICER_MARGIN_DAYS:g} day, so revoking it would "
                "lock every officer out (now, or when the others expire). Issue another officer "
                "token first (POST /api/v1/principals/{name}/tokens), then revoke this one."
            )
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
        source: str | None,
        privacy_unit: str,
        schema: Mapping[str, str],
        bounds: Mapping[str, Any],
        budget: PrivacyLoss,
        description: str = "",
        *,
        tables: Mapping[str, str] | None = None,
        public: Mapping[str, str] | None = None,
        links: Mapping[str, str] | None = None,
    ) -> DatasetRecord:
        """Register a dataset: one ``source`` file (or directory of Parquet files), or several
        tables (``tables``, ``public``, ``links``; see :meth:`_tables_inputs`). Its files are
        opened once here (their headers: public metadata; no values are read) to check the
        unit and the declared columns, so a dataset that cannot be planned is refused now."""
        self.require(officer, "officer")
        check_name("name", name)
        several = tables is not None or public is not None or links is not None
        if several:
            inputs = self._tables_inputs(
                source,
                privacy_unit,
                schema,
                bounds,
                dict(tables or {}),
                dict(public or {}),
                dict(links or {}),
            )
        else:
            inputs = self._file_inputs(source, privacy_unit, schema, bounds)
        if self.registry.dataset(name) is not None or self.ledger.budgets(name):
            raise InvalidParameterError("name", name, "a dataset name not registered yet")
        scratch = Ledger.open("memory://", monitor=BudgetMonitor(log=False))
        scratch.create_budget(name, budget, privacy_unit=privacy_unit)
        probe = Session(
            inputs.files,
            privacy_unit,
            None,
            dataset=name,
            ledger=scratch,
            schema=inputs.schema,
            engine=self.config.engine,
            bounds=inputs.bounds["columns"],  # refused here if a column does not exist
            keys=inputs.bounds.get("keys"),
            **inputs.options,
            **inputs.bounds["contribution"],
        )
        try:
            if probe.catalog is None:
                missing = [c for c in inputs.schema if c not in probe.schema]
            else:
                missing = [
                    f"{t}.{c}"
                    for t, cols in inputs.schema.items()
                    for c in cols
                    if c not in probe.catalog.schemas[t]
                ]
        finally:
            probe.close()
        if missing:
            raise InvalidParameterError(
                "schema", missing, "columns of the tables" if several else "columns of the source"
            )
        record = DatasetRecord(
            name,
            inputs.source,
            privacy_unit,
            inputs.record_schema,
            inputs.bounds,
            description[:500],
            time.time(),
            officer.name,
        )
        self.ledger.create_budget(name, budget, privacy_unit=privacy_unit, actor=officer.name)
        self.registry.add_dataset(record)
        if not several:  # several tables: each analyst's session opens them
            self.prewarm([record])
        self.registry.audit(
            officer.name, "officer", "register_dataset", name, "ok", {"budget": str(budget)}
        )
        return record

    def _file_inputs(
        self,
        source: str | None,
        privacy_unit: str,
        schema: Mapping[str, str],
        bounds: Mapping[str, Any],
    ) -> _Inputs:
        """A dataset of one source, checked (public information only)."""
        if source is None:
            raise InvalidParameterError(
                "source", source, "a path under the data root (or 'tables' for several tables)"
            )
        check_column(privacy_unit)
        clean_schema: dict[str, str] = {}
        for column, kind in schema.items():
            check_column(column)
            if kind not in _KINDS:
                raise InvalidParameterError(f"schema[{column}]", kind, " | ".join(_KINDS))
            clean_schema[column] = kind
        clean_bounds = _check_bounds(bounds)
        path = self.resolve_source(source)
        relative = str(path.relative_to(self.data_root))
        return _Inputs(str(path), clean_schema, {}, clean_bounds, relative, clean_schema)

    def _tables_inputs(
        self,
        source: str | None,
        privacy_unit: str,
        schema: Mapping[str, str],
        bounds: Mapping[str, Any],
        tables: dict[str, str],
        public: dict[str, str],
        links: dict[str, str],
    ) -> _Inputs:
        """A dataset over several tables: private ``tables`` and ``public`` ones ({name: path
        under the data root}), the unit as ``table.column``, ``links`` as foreign keys
        ``{"child.column": "parent.column"}`` and the schema per ``table.column``, checked
        (public information only); the probe then checks the catalog (no path to the unit, a
        cycle, an unknown column)."""
        if source is not None:
            raise InvalidParameterError(
                "source", source, "left out with 'tables' (each table has its own path)"
            )
        if not tables:
            raise InvalidParameterError("tables", tables, "at least one private table")
        for table in [*tables, *public]:
            check_column(table)
        for text in [privacy_unit, *links, *links.values(), *schema]:
            table, dot, column = str(text).partition(".")
            if not dot:
                raise InvalidParameterError("column", text, "'table.column' over several tables")
            check_column(table)
            check_column(column)
        for target, kind in schema.items():
            if kind not in _KINDS:
                raise InvalidParameterError(f"schema[{target}]", kind, " | ".join(_KINDS))
            if target.partition(".")[0] not in {**tables, **public}:
                raise InvalidParameterError("schema", target, "'table.column' of a table given")
        clean_bounds = _check_bounds(bounds)
        paths = {t: self.resolve_source(p) for t, p in {**tables, **public}.items()}
        relative = {t: str(paths[t].relative_to(self.data_root)) for t in paths}
        clean_bounds["tables"] = {
            "private": {t: relative[t] for t in tables},
            "public": {t: relative[t] for t in public},
            "links": dict(links),
        }
        return _Inputs(
            {t: str(paths[t]) for t in tables},
            nested_schema(schema),
            {"public": {t: str(paths[t]) for t in public} or None, "links": links},
            clean_bounds,
            relative[privacy_unit.partition(".")[0]],
            dict(schema),
        )

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
        return self._build(record, sql, model, keys)[0]

    def _build_tables(
        self,
        session: Session,
        sql: str | None,
        model: Mapping[str, Any] | None,
        keys: Mapping[str, Sequence[Any]] | None,
        max_per_key: int | None = None,
    ) -> tuple[Query, ParsedQuery]:
        """The query of SQL text over a dataset of several tables (the session parses its
        joins, subqueries and WITH; a join of private tables on keys of different people is
        truncated at the officer's ``max_per_key``); public information only."""
        if model is not None or sql is None:
            raise InvalidParameterError(
                "query",
                "a JSON query",
                "'sql' text: the JSON query model reads one table, and this dataset has several",
            )
        if len(sql) > 10_000:
            raise UnsupportedQueryError(
                "the query text must be a string of at most 10,000 characters"
            )
        parsed = session._parse_sql(sql)
        if not keys and parsed.group_by:  # the officer's registered key sets, if all have one
            keys = registered_keys(session.keys, parsed.group_by)
        if keys:
            if not parsed.group_by:
                raise InvalidParameterError(
                    "keys",
                    f"{len(keys)} column(s): {sorted(map(str, keys))[:5]}",
                    "keys only with a GROUP BY (the query has none)",
                )
            missing = [k for k in parsed.group_by if k not in keys]
            extra = sorted(str(k) for k in keys if k not in parsed.group_by)
            if missing or extra:
                raise InvalidParameterError(
                    "keys", sorted(map(str, keys))[:5], f"keys for exactly {list(parsed.group_by)}"
                )
            _check_keys({k: keys[k] for k in parsed.group_by})
            _check_work(parsed.aggregations, math.prod(len(keys[k]) for k in parsed.group_by))
        return session._sql_query(parsed, keys or None, None, max_per_key), parsed

    def _build(
        self,
        record: DatasetRecord,
        sql: str | None,
        model: Mapping[str, Any] | None,
        keys: Mapping[str, Sequence[Any]] | None,
    ) -> tuple[Query | Any, ParsedQuery]:
        """The query and what it was parsed from (its HAVING / ORDER BY / LIMIT are applied
        to the release afterwards)."""
        if (sql is None) == (model is None):
            raise InvalidParameterError("sql/query", None, "exactly one of 'sql' and 'query'")
        if sql is not None:
            parsed = _parse_sql(sql, record)
        else:
            assert model is not None
            parsed = _parse_model(model, record)
        built = parsed.rows(Query())
        if not keys and parsed.group_by:  # the officer's registered key sets, if all have one
            keys = registered_keys(record.bounds.get("keys", {}), parsed.group_by)
        if keys and not parsed.group_by:
            # keys of an ungrouped query would be ignored, and the query answered and charged
            # as if they had not been sent: refuse the mismatch instead of guessing
            raise InvalidParameterError(
                "keys",
                f"{len(keys)} column(s): {sorted(map(str, keys))[:5]}",
                "keys only with a GROUP BY (the query has none): group by the key columns, or "
                "leave 'keys' out",
            )
        if parsed.group_by:
            derived = {name for name, _ in parsed.derived}
            for column in parsed.group_by:
                if column not in derived:  # a GROUP BY expression is named by the query
                    check_column(column)
            key_set = None
            if keys:
                missing = [k for k in parsed.group_by if k not in keys]
                if missing:
                    raise InvalidParameterError("keys", sorted(keys), f"values for {missing}")
                extra = sorted(str(k) for k in keys if k not in parsed.group_by)
                if extra:
                    raise InvalidParameterError(
                        "keys",
                        f"keys for {extra[:5]}",
                        f"keys only for the GROUP BY columns {list(parsed.group_by)}",
                    )
                _check_keys({k: keys[k] for k in parsed.group_by})
                key_set = KeySet.from_dict({k: list(keys[k]) for k in parsed.group_by})
            if key_set is not None:
                _check_work(parsed.aggregations, len(key_set))
            grouped = built.group_by(*parsed.group_by, keys=key_set)
            return grouped.agg(*parsed.aggregations), parsed
        return built.agg(*parsed.aggregations), parsed

    def _engine(self, record: DatasetRecord) -> Any:
        """The dataset's engine, shared by its analysts' sessions in this process: for DuckDB a
        :class:`WarmDuckDBEngine` (warm data, cached SQL, a cursor per thread), else the engine's
        name (each session opens its own)."""
        if self.config.engine != "duckdb" or tables_of(record) is not None:
            # several tables: each session opens them (the warm engine reads one source)
            return self.config.engine
        with self._sessions_lock:
            found = self._engines.get(record.name)
        if found is not None:
            return found
        engine = WarmDuckDBEngine(
            self.data_root / record.source,
            schema=record.schema,
            max_bytes=int(self.config.cache_mb * 2**20),
            builder=self._builder,
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
            if records is None and self._builder is not None:
                try:  # the builder process of large plans, ready before the first one
                    self._builder.start()
                except Exception:
                    logger.exception("could not start the SQL builder process")
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
        if tables_of(record) is not None:
            return self._tables_session(record, analyst)
        key = (record.name, analyst)
        with self._sessions_lock:
            found = self._sessions.get(key)
            if found is not None:
                return found
        engine = self._engine(record)
        session = _ServiceSession(
            str(self.data_root / record.source),
            record.privacy_unit,
            None,
            ledger=self.ledger,
            dataset=record.name,
            analyst=analyst,
            schema=None if isinstance(engine, WarmDuckDBEngine) else record.schema,
            engine=engine,
            bounds=record.bounds.get("columns"),
            keys=record.bounds.get("keys"),
            **record.bounds.get("contribution", {}),
        )
        with self._sessions_lock:
            return self._sessions.setdefault(key, (session, threading.Lock()))

    def _tables_session(
        self, record: DatasetRecord, analyst: str
    ) -> tuple[Session, threading.Lock]:
        """The analyst's session over the dataset's tables, opened again when one of the files
        changed (the session keeps per-link key maps computed from the data)."""
        spec = tables_of(record)
        assert spec is not None
        files = {t: self.data_root / p for t, p in {**spec["private"], **spec["public"]}.items()}
        stamp = tuple((t, source_stamp(path)) for t, path in sorted(files.items()))
        key = (record.name, analyst)
        with self._sessions_lock:
            found = self._sessions.get(key)
            if found is not None and self._stamps.get(key) == stamp:
                return found
        session = _ServiceSession(
            {t: str(files[t]) for t in spec["private"]},
            record.privacy_unit,
            None,
            ledger=self.ledger,
            dataset=record.name,
            analyst=analyst,
            schema=nested_schema(record.schema),
            engine=self.config.engine,
            public={t: str(files[t]) for t in spec["public"]} or None,
            links=dict(spec["links"]),
            bounds=record.bounds.get("columns"),
            keys=record.bounds.get("keys"),
            **record.bounds.get("contribution", {}),
        )
        with self._sessions_lock:
            old = self._sessions.get(key)
            if old is not None and self._stamps.get(key) == stamp:
                session.close()  # another thread opened it first
                return old
            self._sessions[key] = (session, threading.Lock())
            self._stamps[key] = stamp
            entry = self._sessions[key]
        if old is not None:
            with old[1]:  # after a query running on it
                old[0].close()
        return entry

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
    ) -> tuple[TableRelease, PrivacyLoss | None]:
        """Answer a query; returns the release and the analyst's remaining allowance.

        Raises:
            FailedAfterReservationError: the query failed after its loss was reserved (the
                charge stays). Any other error is a refusal: nothing was reserved.
        """
        session, lock, built, parsed = self._prepared(
            analyst, dataset, loss, sql, model, keys, plan=False
        )
        with watching() as watch:
            try:
                if isinstance(session.engine, WarmDuckDBEngine):  # thread-safe: no lock
                    release = session.evaluate(built, loss=loss, alpha=alpha)
                else:
                    with lock:
                        release = session.evaluate(built, loss=loss, alpha=alpha)
            except Exception as exc:
                reservation = watch.reservation
                if reservation is not None:
                    raise FailedAfterReservationError(
                        reservation.id, reservation.loss, exc
                    ) from None
                raise
        # HAVING, ORDER BY and LIMIT: post-processing of the released table (no data, no charge)
        release = post_process(release, parsed)
        return release, release.remaining

    def preview(
        self,
        analyst: Principal,
        dataset: str,
        loss: PrivacyLoss,
        *,
        sql: str | None = None,
        model: Mapping[str, Any] | None = None,
        keys: Mapping[str, Sequence[Any]] | None = None,
        alpha: float = 0.05,
    ) -> Preview:
        """How :meth:`query` would answer this request, and what it would charge, decided as
        it decides before its reservation (the parse, the plans and their engine SQL, from the
        request and the dataset's registered metadata). Nothing is read from the data,
        reserved or charged, so it is free; a request :meth:`query` would refuse before its
        reservation is refused here with the same error (a budget too small is reported as
        ``fits=False``, not refused)."""
        session, _, built, _ = self._prepared(analyst, dataset, loss, sql, model, keys, plan=True)
        compiled = session.compile(built, loss=loss, alpha=alpha)  # planned above: SQL cached
        # the rest of what evaluate() decides before its reservation: the rehearsal on an empty
        # table, then the ledger's own checks (a loss of another kind than the budget's is
        # refused as /query refuses it); only a budget too small is fits=False
        session_module.dry_run(compiled, alpha)
        charge = compiled.map(1)
        books = session._books
        try:
            session.ledger.store.read(
                lambda txn: _charged_rows(
                    txn, books.dataset, books.analyst, charge, books.privacy_unit
                )
            )
            fits = True
        except BudgetExceededError:
            fits = False
        return Preview(compiled.explain(), charge, session.remaining, fits)

    def _prepared(
        self,
        analyst: Principal,
        dataset: str,
        loss: PrivacyLoss,
        sql: str | None,
        model: Mapping[str, Any] | None,
        keys: Mapping[str, Sequence[Any]] | None,
        *,
        plan: bool,
    ) -> tuple[Session, Any, Any, ParsedQuery]:
        """Everything :meth:`query` and :meth:`preview` decide before a reservation: the
        request's checks, the analyst's session, the built query and its parse (HAVING and
        ORDER BY checked against the released columns). ``plan``: compile it here too (a
        large request always is)."""
        self.require(analyst, "analyst")
        check_request_texts("sql", sql)
        check_request_texts("query", model)
        check_request_texts("keys", keys)
        record = self.dataset_for(analyst, dataset)
        session, lock = self._session(record, analyst.name)
        # Parsing, planning and building the SQL (everything decided before the reservation)
        # are CPU work holding the GIL; a large query's (long WHERE, many keys or bins) costs
        # up to seconds. Large ones take turns in one lane, so that the event loop (health,
        # other requests) never competes with more than one of them (docs/service.md).
        heavy = _request_size(sql, model, keys) > HEAVY_REQUEST
        with self._heavy_lane if heavy else contextlib.nullcontext():
            if tables_of(record) is not None:
                per_key = record.bounds.get("max_per_key")
                built, parsed = self._build_tables(session, sql, model, keys, per_key)
                schema = session._resolve(built)[1]  # the joined relation's columns
            else:
                built, parsed = self._build(record, sql, model, keys)
                schema = session.schema
            check_released(parsed, schema)  # HAVING / ORDER BY read released columns
            if heavy or plan:  # its SQL is cached by shape; evaluate() finds it ready
                session.compile(built, loss=loss)
        return session, lock, built, parsed

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


def _request_size(sql: str | None, model: Any, keys: Any) -> int:
    """A cheap estimate of a query request's parse and planning work, in characters of SQL: its
    SQL's length, plus 10 per value of its model and its keys (building the SQL of a key or a
    histogram edge costs about as much as parsing ten characters; ``check_request_texts``
    bounds the nesting)."""

    def count(value: Any) -> int:
        if isinstance(value, Mapping):
            return 1 + builtins.sum(count(k) + count(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return 1 + builtins.sum(count(v) for v in value)
        return 10 + len(value) if isinstance(value, str) else 10

    return len(sql or "") + count(model) + count(keys)


def _token_days(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_TOKEN_DAYS
    ):
        raise InvalidParameterError(name, value, f"a number of days in (0, {MAX_TOKEN_DAYS}]")
    return float(value)


def check_request_texts(name: str, value: Any, *, depth: int = 0) -> None:
    """Refuse a request whose texts a store or the engine cannot hold: a lone surrogate (JSON
    ``"\\ud800"``, not valid Unicode) or a NUL character, anywhere in ``value`` (nested lists
    and objects included, at most 32 levels deep). Checked before anything is reserved."""
    if depth > 32:
        raise InvalidParameterError(name, "(nested value)", "at most 32 levels of nesting")
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidParameterError(name, "(a text with a NUL character)", TEXTS_ALLOWED)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParameterError(
                name, "(a text with a lone surrogate)", TEXTS_ALLOWED
            ) from None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_request_texts(name, key, depth=depth + 1)
            check_request_texts(name, item, depth=depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            check_request_texts(name, item, depth=depth + 1)


TEXTS_ALLOWED = (
    "valid Unicode text without NUL characters or lone surrogates (such as JSON \\ud800)"
)


@dataclass
class _Inputs:
    """A dataset's checked registration: what its probe session opens (``files``, ``schema``
    as the session takes it, ``options``), its bounds, its source as recorded (relative to the
    data root) and the schema as recorded."""

    files: str | dict[str, str]
    schema: dict[str, Any]
    options: dict[str, Any]
    bounds: dict[str, Any]
    source: str
    record_schema: dict[str, str]


def shown_number(value: Any) -> int | float:
    """A number as people write it: ``3000``, not ``3000.0``."""
    number = float(value)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


@functools.lru_cache(maxsize=256)
def _stored_kinds(path: str, stamp: tuple[Any, ...]) -> tuple[tuple[str, str], ...]:
    """The kind of every column of a file (or a directory of Parquet files), from its metadata
    only: the Parquet footer's schema, or a CSV file's header (every column text). Cached by
    the file's stamp (a changed file is read again)."""
    from dpkit.analytics._engines._columns import csv_header, kind_of_arrow

    source = Path(path)
    if source.suffix.lower() == ".csv":
        return tuple((name, "string") for name in csv_header(source))
    import pyarrow.dataset as ds  # type: ignore[import-untyped]  # no stubs in the env

    schema = ds.dataset(str(source), format="parquet").schema  # footers only
    return tuple((field.name, str(kind_of_arrow(field.type))) for field in schema)


def _file_kinds(path: Path, declared: Mapping[str, str]) -> dict[str, str]:
    """Each column's kind as a query sees it: stored, or as declared (public names)."""
    try:
        stored = dict(_stored_kinds(str(path), source_stamp(path)))
    except Exception:  # a missing or unreadable file: what was declared (its query will say)
        logger.warning("could not read the columns of %s", path.name)
        stored = {}
    kinds = {**stored, **declared}
    return {name: "text" if kind == "string" else kind for name, kind in kinds.items()}


def dataset_columns(record: DatasetRecord, data_root: Path) -> dict[str, dict[str, Any]]:
    """Each column of a dataset with its kind and, where registered, its bounds and key set
    as people write them, ``{"wage": {"kind": "numeric", "bounds": [0, 3000]}, "dept":
    {"kind": "text", "keys": ["R&D", "Sales"]}}``; over several tables
    per ``table.column``. Read from the files' metadata and the registration, never from
    values."""
    registered = record.bounds.get("columns", {})
    key_sets = record.bounds.get("keys", {})
    spec = tables_of(record)
    kinds: dict[str, str] = {}
    if spec is None:
        kinds = _file_kinds(data_root / record.source, record.schema)
    else:
        declared = nested_schema(record.schema)
        for table, file in {**spec["private"], **spec["public"]}.items():
            for column, kind in _file_kinds(data_root / file, declared.get(table, {})).items():
                kinds[f"{table}.{column}"] = kind
    out: dict[str, dict[str, Any]] = {}
    for name, kind in kinds.items():
        shown: dict[str, Any] = {"kind": kind}
        pair = registered.get(name.rpartition(".")[2])
        if pair is not None:
            shown["bounds"] = [shown_number(pair[0]), shown_number(pair[1])]
        values = key_sets.get(name.rpartition(".")[2])
        if values is not None:
            shown["keys"] = list(values)
        out[name] = shown
    return out


def nested_schema(schema: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """A schema over several tables, ``{"table.column": kind}``, per table."""
    nested: dict[str, dict[str, str]] = {}
    for target, kind in schema.items():
        table, _, column = target.partition(".")
        nested.setdefault(table, {})[column] = kind
    return nested


def tables_of(record: DatasetRecord) -> Mapping[str, Any] | None:
    """The tables of a dataset over several tables (``private`` and ``public`` paths and
    ``links``), or None for a dataset of one source."""
    found = record.bounds.get("tables")
    return found if isinstance(found, Mapping) else None


def _check_work(aggregations: Sequence[Aggregation], keys: int) -> None:
    """Bounds on the release work of a grouped query with ``keys`` public keys."""
    from dpkit.analytics._query import Quantile

    if keys > MAX_QUANTILE_KEYS and any(isinstance(a, Quantile) for a in aggregations):
        raise InvalidParameterError(
            "keys",
            f"{keys:,} key combinations",
            f"at most {MAX_QUANTILE_KEYS} public keys for a query with a quantile or a median "
            "(each group's quantile is a release of its own); split the keys over queries",
        )
    quantiles = builtins.sum(1 for a in aggregations if isinstance(a, Quantile))
    if quantiles * keys > MAX_QUANTILE_RELEASES:
        raise InvalidParameterError(
            "keys",
            f"{quantiles:,} quantile aggregates × {keys:,} key combinations",
            f"at most {MAX_QUANTILE_RELEASES:,} quantile releases (quantile and median "
            "aggregates times public keys) in one query; split the aggregates or the keys over "
            "queries",
        )
    cells = 0
    for agg in aggregations:
        family = family_of(agg)
        if family is not None and family.cells is not None:
            cells += keys * family.cells(agg)
    if cells > MAX_CELLS:
        raise InvalidParameterError(
            "keys",
            f"{cells:,} binned cells",
            f"at most {MAX_CELLS:,} cells (public keys times bins or candidates) in a query's "
            "histograms and other binned aggregates",
        )


def _check_keys(keys: Mapping[str, Sequence[Any]]) -> None:
    """Public keys: at most :data:`MAX_KEYS` in total (the product of the lists), each text at
    most :data:`MAX_KEY_TEXT` characters; checked before the key set is built."""
    total = 1
    for column, values in keys.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise InvalidParameterError(f"keys[{column}]", values, "a list of key values")
        total *= len(values)
        if total > MAX_KEYS:
            raise InvalidParameterError(
                "keys",
                f"{total:,}+ key combinations",
                f"at most {MAX_KEYS:,} public keys in total (the product of the lists)",
            )
        for value in values:
            if isinstance(value, str) and len(value) > MAX_KEY_TEXT:
                raise InvalidParameterError(
                    f"keys[{column}]", value, f"texts of at most {MAX_KEY_TEXT:,} characters"
                )


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
    checked: dict[str, Any] = {"contribution": contribution, "columns": columns}
    registered = bounds.get("keys")
    if registered:
        for column in registered:
            check_column(column)
        key_sets = check_column_keys(registered, "bounds.keys")
        for column, values in key_sets.items():
            _check_keys({column: values})
        checked["keys"] = {column: list(values) for column, values in key_sets.items()}
    per_key = bounds.get("max_per_key")
    if per_key is not None:
        if isinstance(per_key, bool) or not isinstance(per_key, int) or not 1 <= per_key <= 10**6:
            raise InvalidParameterError("bounds.max_per_key", per_key, "an integer in [1, 1000000]")
        checked["max_per_key"] = per_key
    return checked


_SYNTAX_HELP = "The query syntax is described in docs/service.md (Queries)."


def _parse_sql(sql: str, record: DatasetRecord) -> ParsedQuery:
    if not isinstance(sql, str) or len(sql) > 10_000:
        raise UnsupportedQueryError("the query text must be a string of at most 10,000 characters")
    registered = tuple(
        (column, low, high) for column, (low, high) in record.bounds.get("columns", {}).items()
    )
    return _parse_sql_text(sql, record.name, record.privacy_unit, registered)


@functools.lru_cache(maxsize=1024)
def _parse_sql_text(
    sql: str,
    dataset: str,
    privacy_unit: str,
    bounds: tuple[tuple[str, float, float], ...] = (),
) -> ParsedQuery:
    """The parsed query (public text only; refusals are raised, never cached). Keyed by
    strings and numbers only: a parsed query holds expressions, whose ``==`` builds a
    predicate. ``bounds``: the dataset's registered column bounds, ``(column, lower, upper)``."""
    import sqlglot
    from sqlglot import exp

    from dpkit.analytics._querytext import _QueryDialect, check_nesting

    check_nesting(sql)  # before sqlglot's recursive parser sees the text
    try:
        statements = [s for s in sqlglot.parse(sql, read=_QueryDialect) if s is not None]
    except Exception:  # RecursionError included: parse_query below refuses it clearly
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
    return parse_query(
        sql,
        privacy_unit,
        source=f"the dataset ({dataset!r})",
        syntax_help=_SYNTAX_HELP,
        bounds={column: (low, high) for column, low, high in bounds},
        bounds_help=_BOUNDS_HELP,
    )


def _parse_where_text(text: str) -> Expr:
    """The model's ``where``: one boolean expression, parsed on its own (never pasted into a
    statement, where ``age > 1 GROUP BY dept`` or ``... TABLESAMPLE`` would add a clause the
    model does not have)."""
    if len(text) > 10_000:
        raise UnsupportedQueryError("'where' must be a text of at most 10,000 characters")
    return _parse_where_cached(text)


@functools.lru_cache(maxsize=1024)
def _parse_where_cached(text: str) -> Expr:
    return parse_where(text, syntax_help=_SYNTAX_HELP)


def _json_forms() -> dict[str, Form]:
    """The service's JSON ops: each registered family's forms that declare one."""
    return {form.op: form for form in forms() if form.op is not None}


def _parse_model(model: Mapping[str, Any], record: DatasetRecord) -> ParsedQuery:
    """The query of a JSON model: each aggregation by the JSON form its family declares
    (``op`` and the fields of :attr:`dpkit.analytics._families.Form.params`)."""
    declared = record.bounds.get("columns", {})
    aggs: list[Aggregation] = []
    raw = model.get("aggregations")
    if not isinstance(raw, list) or not raw or len(raw) > 50:
        raise InvalidParameterError("aggregations", raw, "a list of 1 to 50 aggregations")
    ops = _json_forms()
    for item in raw:
        if not isinstance(item, Mapping):
            raise InvalidParameterError("aggregation", item, "an object with 'op'")
        op = item.get("op")
        name = item.get("name")
        if name is not None:
            check_column(name)
        form = ops.get(op) if isinstance(op, str) else None
        if form is None:
            raise InvalidParameterError("op", op, " | ".join(ops))
        values: dict[str, Any] = {}
        if "column" in form.params:
            values["column"] = check_column(item.get("column", ""))
        for param in form.params:
            if param in ("*", "distinct_unit", "column", "lower", "upper"):
                continue
            if param.startswith("*"):
                field = param[1:]
                listed = item.get(field) or []
                if not isinstance(listed, list) or len(listed) > MAX_LIST:
                    raise InvalidParameterError(
                        field, listed, f"a list of at most {MAX_LIST:,} increasing numbers"
                    )
                values[field] = listed
            else:
                values[param] = item.get(param)
        if "lower" in form.params:
            lower, upper = item.get("lower"), item.get("upper")
            if lower is None and upper is None:
                column = values["column"]
                lower, upper = registered_bounds(
                    {c: (low, high) for c, (low, high) in declared.items()},
                    column,
                    f"{op}({column})",
                    "given ('lower' and 'upper')",
                    _BOUNDS_HELP,
                )
            values["lower"], values["upper"] = lower, upper
        aggs.append(form.build(values, name or None))
    where: Expr | None = None
    if model.get("where") is not None:
        text = model["where"]
        if not isinstance(text, str):
            raise InvalidParameterError("where", text, "a boolean expression as text")
        where = _parse_where_text(text)
    group_by = model.get("group_by") or []
    if (
        not isinstance(group_by, list)
        or len(group_by) > MAX_GROUP_BY
        or not all(isinstance(g, str) for g in group_by)
    ):
        raise InvalidParameterError(
            "group_by", group_by, f"a list of at most {MAX_GROUP_BY} column names"
        )
    return ParsedQuery(tuple(aggs), where, tuple(check_column(g) for g in group_by))
