"""The service's own records, next to the ledger in the same database: datasets, principals,
hashed tokens and the append-only audit log.

The ledger stays the single source of truth for budgets and charges; this registry only says
what a dataset name points to (the source path, which analysts never see), who may call the API,
and what was asked (every query, refusal and budget change, in ``svc_audit``, which triggers make
append-only in the database itself).

Tokens: the service hands a token out once (``secrets.token_urlsafe(32)``, 256 random bits) and
stores only its SHA-256. A hash of a 256-bit random secret needs no salt or slow KDF: nobody can
search that space, and a stolen table gives no token.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dpkit.ledger._postgres import LedgerUnavailableError, split_url

__all__ = [
    "MAX_AUDIT_DETAIL",
    "MAX_AUDIT_TEXT",
    "AuditRecord",
    "DatasetRecord",
    "Principal",
    "Registry",
    "bounded_detail",
    "hash_token",
]

MAX_AUDIT_TEXT = 2_000
"""The longest text an audit record keeps (characters); longer ones are cut, with a marker."""
MAX_AUDIT_ITEMS = 100
"""The most entries of a list or object an audit record keeps."""
MAX_AUDIT_DETAIL = 8_192
"""The largest detail (JSON characters) of one audit record; a larger one keeps its head, its
length and its SHA-256."""

Role = Literal["officer", "analyst"]

_SQLITE_DDL = (
    """CREATE TABLE IF NOT EXISTS svc_datasets (
        name TEXT PRIMARY KEY, source TEXT NOT NULL, privacy_unit TEXT NOT NULL,
        schema_json TEXT NOT NULL, bounds_json TEXT NOT NULL, description TEXT NOT NULL,
        created_at REAL NOT NULL, created_by TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS svc_principals (
        name TEXT PRIMARY KEY, role TEXT NOT NULL CHECK (role IN ('officer','analyst')),
        created_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS svc_tokens (
        token_id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, principal TEXT NOT NULL,
        created_at REAL NOT NULL, revoked_at REAL, expires_at REAL)""",
    """CREATE TABLE IF NOT EXISTS svc_audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, actor TEXT NOT NULL,
        role TEXT NOT NULL, action TEXT NOT NULL, dataset TEXT NOT NULL, outcome TEXT NOT NULL,
        detail TEXT NOT NULL)""",
    """CREATE TRIGGER IF NOT EXISTS svc_audit_no_update BEFORE UPDATE ON svc_audit
       BEGIN SELECT RAISE(ABORT, 'the dpkit audit log is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS svc_audit_no_delete BEFORE DELETE ON svc_audit
       BEGIN SELECT RAISE(ABORT, 'the dpkit audit log is append-only'); END""",
)

_PG_DDL = (
    """CREATE TABLE IF NOT EXISTS {s}.svc_datasets (
        name TEXT PRIMARY KEY, source TEXT NOT NULL, privacy_unit TEXT NOT NULL,
        schema_json TEXT NOT NULL, bounds_json TEXT NOT NULL, description TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, created_by TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS {s}.svc_principals (
        name TEXT PRIMARY KEY, role TEXT NOT NULL CHECK (role IN ('officer','analyst')),
        created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS {s}.svc_tokens (
        token_id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, principal TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION,
        expires_at DOUBLE PRECISION)""",
    """ALTER TABLE {s}.svc_tokens ADD COLUMN IF NOT EXISTS expires_at DOUBLE PRECISION""",
    """CREATE TABLE IF NOT EXISTS {s}.svc_audit (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ts DOUBLE PRECISION NOT NULL,
        actor TEXT NOT NULL, role TEXT NOT NULL, action TEXT NOT NULL, dataset TEXT NOT NULL,
        outcome TEXT NOT NULL, detail TEXT NOT NULL)""",
    """DROP TRIGGER IF EXISTS svc_audit_append_only ON {s}.svc_audit""",
    """CREATE TRIGGER svc_audit_append_only BEFORE UPDATE OR DELETE ON {s}.svc_audit
       FOR EACH ROW EXECUTE FUNCTION {s}.dpkit_append_only()""",
    """DROP TRIGGER IF EXISTS svc_audit_no_truncate ON {s}.svc_audit""",
    """CREATE TRIGGER svc_audit_no_truncate BEFORE TRUNCATE ON {s}.svc_audit
       FOR EACH STATEMENT EXECUTE FUNCTION {s}.dpkit_append_only()""",
)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role
    token_id: str = ""


@dataclass(frozen=True, slots=True)
class DatasetRecord:
    name: str
    source: str  # relative to the data root; never shown to analysts
    privacy_unit: str
    schema: dict[str, str]
    bounds: dict[str, Any]
    description: str
    created_at: float
    created_by: str


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    timestamp: float
    actor: str
    role: str
    action: str
    dataset: str
    outcome: str
    detail: dict[str, Any]


class Registry:
    """Datasets, principals, tokens and the audit log in SQLite or PostgreSQL."""

    def __init__(self, database: str, *, sqlite_path: str | None = None) -> None:
        self._lock = threading.Lock()
        self._audit_turn = threading.Lock()
        self._queue_lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._epoch = 0
        self._pg = database.startswith(("postgresql://", "postgres://"))
        self._conn: Any = None
        if self._pg:
            self._url, schema = split_url(database)
            self._p = f"{schema}."
            self._ddl = [d.replace("{s}", schema) for d in _PG_DDL]
        else:
            assert sqlite_path is not None
            self._sqlite_path = sqlite_path
            self._p = ""
            self._ddl = list(_SQLITE_DDL)
        with self._cursor() as conn:
            for statement in self._ddl:
                conn.execute(statement)
            if not self._pg:  # tokens of a registry written before tokens expired
                columns = {str(r[1]) for r in conn.all("PRAGMA table_info(svc_tokens)")}
                if "expires_at" not in columns:
                    conn.execute("ALTER TABLE svc_tokens ADD COLUMN expires_at REAL")

    # -- connection handling --

    def _connect(self) -> Any:
        if self._pg:
            import psycopg

            try:
                return psycopg.connect(self._url, autocommit=True, connect_timeout=10)
            except psycopg.OperationalError as exc:
                raise LedgerUnavailableError(
                    f"the service database is unavailable ({exc})"
                ) from exc
        conn = sqlite3.connect(
            self._sqlite_path, timeout=60, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            try:
                yield _Adapter(self._conn, self._pg)
            except Exception as exc:
                if self._pg:
                    import psycopg

                    if isinstance(exc, psycopg.OperationalError):
                        with contextlib.suppress(Exception):
                            self._conn.close()
                        self._conn = None
                        raise LedgerUnavailableError(
                            f"the service database is unavailable ({exc})"
                        ) from exc
                raise

    @property
    def local_reads(self) -> bool:
        """Whether reads are local and quick (SQLite), fine to run on an event loop."""
        return not self._pg

    @contextlib.contextmanager
    def _reader(self) -> Iterator[Any]:
        """A cursor for reads: on SQLite a connection of this thread's own (WAL readers do not
        block each other or the writer), on PostgreSQL the shared one."""
        if self._pg:
            with self._cursor() as c:
                yield c
            return
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is None or getattr(local, "epoch", None) != self._epoch:
            conn = sqlite3.connect(
                self._sqlite_path, timeout=60, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA busy_timeout = 60000")
            local.conn, local.epoch = conn, self._epoch
            with self._lock:
                self._readers.append(conn)
        yield _Adapter(conn, False)

    def close(self) -> None:
        with self._lock:
            self._epoch += 1
            for reader in self._readers:
                with contextlib.suppress(Exception):
                    reader.close()
            self._readers.clear()
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None

    # -- principals and tokens --

    def add_principal(self, name: str, role: Role) -> bool:
        """Create a principal; False if it already existed (with this role)."""
        with self._cursor() as c:
            row = c.one(f"SELECT role FROM {self._p}svc_principals WHERE name = ?", (name,))
            if row is not None:
                if row[0] != role:
                    raise ValueError(f"principal {name!r} exists with role {row[0]!r}")
                return False
            c.execute(
                f"INSERT INTO {self._p}svc_principals VALUES (?, ?, ?)", (name, role, time.time())
            )
            return True

    def principal_role(self, name: str) -> Role | None:
        with self._reader() as c:
            row = c.one(f"SELECT role FROM {self._p}svc_principals WHERE name = ?", (name,))
        return None if row is None else row[0]

    def principals(self) -> list[tuple[str, str]]:
        with self._cursor() as c:
            return [
                (str(r[0]), str(r[1]))
                for r in c.all(f"SELECT name, role FROM {self._p}svc_principals ORDER BY name")
            ]

    def issue_token(
        self, principal: str, token: str | None = None, *, expires_at: float | None = None
    ) -> tuple[str, str]:
        """A new token for ``principal``: (token_id, token), valid until ``expires_at`` (a
        Unix time). Only the hash is stored."""
        token = token or secrets.token_urlsafe(32)
        digest = hash_token(token)
        token_id = "tok_" + digest[:12]
        with self._cursor() as c:
            c.execute(
                f"INSERT INTO {self._p}svc_tokens (token_id, token_hash, principal, created_at, "
                "revoked_at, expires_at) VALUES (?, ?, ?, ?, NULL, ?)",
                (token_id, digest, principal, time.time(), expires_at),
            )
        return token_id, token

    def known_token(self, token: str) -> bool:
        """Whether ``token`` was ever issued (revoked or expired included)."""
        with self._reader() as c:
            row = c.one(
                f"SELECT 1 FROM {self._p}svc_tokens WHERE token_hash = ?", (hash_token(token),)
            )
        return row is not None

    def expire_legacy_tokens(self, expires_at: float) -> None:
        """Give tokens issued before tokens expired (no expiry stored) this expiry."""
        with self._cursor() as c:
            c.execute(
                f"UPDATE {self._p}svc_tokens SET expires_at = ? WHERE expires_at IS NULL",
                (expires_at,),
            )

    def active_officer_tokens(self, now: float | None = None) -> int:
        """How many unrevoked, unexpired tokens officers hold."""
        now = time.time() if now is None else now
        with self._cursor() as c:
            row = c.one(
                f"SELECT COUNT(*) FROM {self._p}svc_tokens t JOIN {self._p}svc_principals p "
                "ON p.name = t.principal WHERE p.role = 'officer' AND t.revoked_at IS NULL "
                "AND (t.expires_at IS NULL OR t.expires_at > ?)",
                (now,),
            )
        return int(row[0])

    def revoke_token(self, token_id: str, durable_until: float | None = None) -> str:
        """Revoke a token: ``"revoked"`` (or already was), ``"missing"``, or ``"last_officer"``
        (refused: no other officer token stays valid until ``durable_until`` (default: now),
        and revoking it would lock every officer out, at once or when those expire). Checked
        and written in one transaction that serialises revocations."""
        now = time.time()
        until = now if durable_until is None else max(now, durable_until)
        with self._cursor() as c, c.transaction(lock=f"{self._p}svc_tokens"):
            row = c.one(
                f"SELECT t.revoked_at, p.role FROM {self._p}svc_tokens t LEFT JOIN "
                f"{self._p}svc_principals p ON p.name = t.principal WHERE t.token_id = ?",
                (token_id,),
            )
            if row is None:
                return "missing"
            if row[0] is not None:
                return "revoked"
            if row[1] == "officer":
                others = c.one(
                    f"SELECT COUNT(*) FROM {self._p}svc_tokens t JOIN {self._p}svc_principals p "
                    "ON p.name = t.principal WHERE p.role = 'officer' AND t.revoked_at IS NULL "
                    "AND (t.expires_at IS NULL OR t.expires_at > ?) AND t.token_id <> ?",
                    (until, token_id),
                )
                if int(others[0]) == 0:
                    return "last_officer"
            c.execute(
                f"UPDATE {self._p}svc_tokens SET revoked_at = ? WHERE token_id = ?",
                (now, token_id),
            )
            return "revoked"

    def tokens(self) -> list[dict[str, Any]]:
        with self._cursor() as c:
            rows = c.all(
                f"SELECT token_id, principal, created_at, revoked_at, expires_at FROM "
                f"{self._p}svc_tokens ORDER BY created_at"
            )
        return [
            {
                "token_id": r[0],
                "principal": r[1],
                "created_at": r[2],
                "revoked_at": r[3],
                "expires_at": r[4],
            }
            for r in rows
        ]

    def authenticate(self, token: str, now: float | None = None) -> Principal | None:
        """The principal of an unrevoked, unexpired token (None otherwise)."""
        now = time.time() if now is None else now
        digest = hash_token(token)
        with self._reader() as c:
            row = c.one(
                f"SELECT t.token_id, p.name, p.role FROM {self._p}svc_tokens t JOIN "
                f"{self._p}svc_principals p ON p.name = t.principal "
                "WHERE t.token_hash = ? AND t.revoked_at IS NULL "
                "AND (t.expires_at IS NULL OR t.expires_at > ?)",
                (digest, now),
            )
        if row is None or not secrets.compare_digest(digest, hash_token(token)):
            return None
        return Principal(str(row[1]), row[2], str(row[0]))

    def expired_at(self, token: str, now: float | None = None) -> float | None:
        """When ``token`` expired, if it is an unrevoked token past its expiry (else None)."""
        now = time.time() if now is None else now
        with self._reader() as c:
            row = c.one(
                f"SELECT expires_at FROM {self._p}svc_tokens WHERE token_hash = ? AND "
                "revoked_at IS NULL AND expires_at IS NOT NULL AND expires_at <= ?",
                (hash_token(token), now),
            )
        return None if row is None else float(row[0])

    # -- datasets --

    def add_dataset(self, record: DatasetRecord) -> None:
        with self._cursor() as c:
            c.execute(
                f"INSERT INTO {self._p}svc_datasets VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.name,
                    record.source,
                    record.privacy_unit,
                    json.dumps(record.schema, sort_keys=True),
                    json.dumps(record.bounds, sort_keys=True),
                    record.description,
                    record.created_at,
                    record.created_by,
                ),
            )

    def dataset(self, name: str) -> DatasetRecord | None:
        with self._reader() as c:
            row = c.one(f"SELECT * FROM {self._p}svc_datasets WHERE name = ?", (name,))
        return None if row is None else _dataset(row)

    def datasets(self) -> list[DatasetRecord]:
        with self._cursor() as c:
            return [
                _dataset(r) for r in c.all(f"SELECT * FROM {self._p}svc_datasets ORDER BY name")
            ]

    # -- audit --

    def audit(
        self,
        actor: str,
        role: str,
        action: str,
        dataset: str,
        outcome: str,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Append one record to the audit log; it is written when this returns.

        Concurrent callers share writes (group commit): records queue, and whichever caller
        holds the writer's turn writes every queued record in one transaction; each caller
        returns once its own record is written (or raises the write's error).
        """
        row = (
            time.time(),
            actor,
            role,
            action,
            dataset,
            outcome,
            bounded_detail(detail or {}),
        )
        item = _Pending(row)
        with self._queue_lock:
            self._pending.append(item)
        with self._audit_turn:
            if not item.done:
                with self._queue_lock:
                    batch, self._pending = self._pending, []
                error: BaseException | None = None
                try:
                    with self._cursor() as c:
                        c.many(
                            f"INSERT INTO {self._p}svc_audit (ts, actor, role, action, dataset, "
                            "outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [pending.row for pending in batch],
                        )
                except BaseException as exc:
                    error = exc
                for pending in batch:
                    pending.error, pending.done = error, True
        if item.error is not None:
            raise item.error

    def audit_log(
        self,
        limit: int = 200,
        actor: str | None = None,
        action: str | None = None,
        before: int | None = None,
    ) -> list[AuditRecord]:
        """Records newest first: at most ``limit``, with ids below ``before`` if given (to
        page back through the log)."""
        sql = (
            f"SELECT id, ts, actor, role, action, dataset, outcome, detail FROM "
            f"{self._p}svc_audit WHERE 1 = 1"
        )
        args: list[Any] = []
        if actor is not None:
            sql += " AND actor = ?"
            args.append(actor)
        if action is not None:
            sql += " AND action = ?"
            args.append(action)
        if before is not None:
            sql += " AND id < ?"
            args.append(int(before))
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(int(limit))
        with self._cursor() as c:
            rows = c.all(sql, args)
        return [
            AuditRecord(
                int(r[0]), float(r[1]), r[2], r[3], r[4], r[5], r[6], _read_detail(str(r[7]))
            )
            for r in rows
        ]


def _cut(text: str, limit: int = MAX_AUDIT_TEXT) -> str:
    """``text`` as valid Unicode (a lone surrogate becomes the escape ``\\ud800``, which
    JSON answers can carry), at most ``limit`` characters, with a marker if cut."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[truncated: {len(text):,} characters]"


def _bounded(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _cut(value)
    if depth >= 8:
        return "…[nested deeper than 8 levels: not recorded]"
    if isinstance(value, Mapping):
        items = list(value.items())
        out = {_cut(str(k), 200): _bounded(v, depth + 1) for k, v in items[:MAX_AUDIT_ITEMS]}
        if len(items) > MAX_AUDIT_ITEMS:
            out["…"] = f"[truncated: {len(items):,} entries]"
        return out
    if isinstance(value, list | tuple):
        kept = [_bounded(v, depth + 1) for v in value[:MAX_AUDIT_ITEMS]]
        if len(value) > MAX_AUDIT_ITEMS:
            kept.append(f"…[truncated: {len(value):,} items]")
        return kept
    return _cut(str(value))


def bounded_detail(detail: Mapping[str, Any]) -> str:
    """The JSON text an audit record stores for ``detail``: texts cut at
    :data:`MAX_AUDIT_TEXT` characters, lists and objects at :data:`MAX_AUDIT_ITEMS` entries and
    8 levels, each cut marked; if still longer than :data:`MAX_AUDIT_DETAIL`, its head, length
    and SHA-256. What a refused (uncharged) request can add to the append-only log is bounded."""
    text = json.dumps(_bounded(detail), sort_keys=True)
    if len(text) <= MAX_AUDIT_DETAIL:
        return text
    return json.dumps(
        {
            "truncated": True,
            "characters": len(text),
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "head": text[: MAX_AUDIT_DETAIL // 2],
        },
        sort_keys=True,
    )


def _read_detail(text: str) -> dict[str, Any]:
    """A stored detail, bounded again (records written before the bounds existed)."""
    if len(text) > MAX_AUDIT_DETAIL:
        text = bounded_detail({"stored": text})
    try:
        value = json.loads(text)
    except ValueError:
        return {"stored": _cut(text)}
    bounded = _bounded(value)
    return bounded if isinstance(bounded, dict) else {"stored": bounded}


def _dataset(row: Sequence[Any]) -> DatasetRecord:
    return DatasetRecord(
        name=str(row[0]),
        source=str(row[1]),
        privacy_unit=str(row[2]),
        schema=json.loads(str(row[3])),
        bounds=json.loads(str(row[4])),
        description=str(row[5]),
        created_at=float(row[6]),
        created_by=str(row[7]),
    )


class _Pending:
    """An audit record waiting to be written by whichever caller holds the writer's turn."""

    __slots__ = ("done", "error", "row")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.row = row
        self.done = False
        self.error: BaseException | None = None


class _Adapter:
    """``?`` placeholders on both SQLite and psycopg (which wants ``%s``)."""

    __slots__ = ("_conn", "_pg")

    def __init__(self, conn: Any, pg: bool) -> None:
        self._conn = conn
        self._pg = pg

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        if self._pg:
            sql = sql.replace("?", "%s")
        return self._conn.execute(sql, tuple(args))

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute ``sql`` for every row, in one transaction."""
        if self._pg:
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.executemany(sql.replace("?", "%s"), [tuple(r) for r in rows])
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.executemany(sql, [tuple(r) for r in rows])
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    @contextlib.contextmanager
    def transaction(self, lock: str) -> Iterator[None]:
        """One transaction that serialises with every other writer of ``lock``'s table (SQLite:
        BEGIN IMMEDIATE; PostgreSQL: a SHARE ROW EXCLUSIVE lock of the table)."""
        if self._pg:
            with self._conn.transaction():
                self._conn.execute(f"LOCK TABLE {lock} IN SHARE ROW EXCLUSIVE MODE")
                yield
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self.execute(sql, args).fetchone()

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        return list(self.execute(sql, args).fetchall())
