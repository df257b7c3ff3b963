"""The PostgreSQL ledger store (psycopg 3): the SQLite store's semantics on a shared server.

Semantics (the same as :class:`~dpkit.ledger.SQLiteStore`, so every ledger test runs on both):

* **Serialised writes.** A write transaction takes a transaction-scoped advisory lock
  (``pg_advisory_xact_lock``) keyed by the ledger's schema before it first reads or writes a
  budget, so "read the totals, check the budget, append the entry, update the totals" is
  serialised against every other connection of every process and host, exactly like SQLite's
  single write lock. Finalising a reservation (commit / fail) touches no budget and takes no
  lock; a unique index lets each reservation be finalised only once. The lock is released by
  COMMIT or ROLLBACK, and by the server when a client dies, so a killed process never leaves it
  held. Entry ids come from an identity column; the entries that change budgets (create, adjust,
  reserve, alert) are written under the lock, so their ids increase in commit order, which is the
  order replay applies them in (commit / fail entries change no total).
* **Durability.** A write returns only after the server flushed its WAL past the write's commit
  record, so an acknowledged charge survives a crash of the client, the server or the machine.
  The write itself commits asynchronously and a second, synchronous commit waits for the flush
  *after* the writer lock is released, so concurrent writers share WAL flushes (see
  ``PostgresStore._flush``).
* **Group commit.** Threads of one process writing at the same time share one transaction (each
  request inside its own SAVEPOINT, so a refused request is rolled back alone) and one WAL flush;
  each caller is answered only after the COMMIT.
* **Append-only in the database.** Triggers refuse UPDATE, DELETE and TRUNCATE on the entries
  table, whoever the client is; ``docs/service.md`` shows how to run the service as a role that
  additionally lacks those privileges.
* **Versioned migrations.** A ``schema_version`` table lists every migration applied (number,
  description, time). Opening a ledger applies the missing ones under the advisory lock; a ledger
  written by a newer dpkit is refused.
* **Failures.** If the server is unreachable or restarts, the operation raises
  :class:`LedgerUnavailableError` (a :class:`LedgerError`): nothing acknowledged is lost, and the
  next call reconnects. (A COMMIT whose answer was lost may or may not have happened; the caller
  was not told it did, and replay shows which.)

A URL selects the store: ``postgresql://user:pass@host:5432/db`` (any libpq URL), optionally with
``?schema=name`` (a dpkit parameter, default ``dpkit``) to keep several ledgers in one database.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dpkit.errors import InvalidParameterError
from dpkit.ledger._model import (
    LedgerCorruptError,
    LedgerEntry,
    LedgerError,
    fraction_text,
    loss_to_text,
)
from dpkit.ledger._sqlite import _BUDGET_COLUMNS, _ENTRY_COLUMNS, _analyst_key, _Txn
from dpkit.ledger._store import BudgetRow, GroupCommitStore, NewEntry, StoreTransaction, _Request

__all__ = ["MIGRATIONS", "LedgerUnavailableError", "PostgresStore", "split_url"]

T = TypeVar("T")

FORMAT_NAME = "dpkit-ledger"

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class LedgerUnavailableError(LedgerError):
    """The ledger's database could not be reached; nothing was recorded. Retry later."""


# Each migration: (version, description, statements). Never edit a released migration: add one.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "budgets, append-only entries, meta",
        (
            """CREATE TABLE {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
            """CREATE TABLE {s}.budgets (
                dataset TEXT NOT NULL,
                analyst TEXT NOT NULL,
                privacy_unit TEXT NOT NULL,
                total TEXT NOT NULL,
                spent_xi TEXT NOT NULL,
                spent_delta TEXT NOT NULL,
                spent_rho TEXT NOT NULL,
                charges BIGINT NOT NULL CHECK (charges >= 0),
                alerts_fired TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (dataset, analyst))""",
            """CREATE TABLE {s}.entries (
                id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                ts DOUBLE PRECISION NOT NULL,
                kind TEXT NOT NULL
                    CHECK (kind IN ('create','adjust','reserve','commit','fail','alert')),
                dataset TEXT NOT NULL,
                analyst TEXT NOT NULL,
                loss TEXT,
                query TEXT NOT NULL,
                query_hash TEXT NOT NULL,
                mechanism TEXT NOT NULL,
                ref BIGINT,
                receipt TEXT NOT NULL,
                actor TEXT NOT NULL,
                detail TEXT NOT NULL)""",
            """CREATE INDEX entries_ref ON {s}.entries (ref) WHERE ref IS NOT NULL""",
            """CREATE INDEX entries_scope ON {s}.entries (dataset, analyst, id)""",
            """CREATE FUNCTION {s}.dpkit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN
                 RAISE EXCEPTION 'dpkit ledger entries are append-only (% refused)', TG_OP
                   USING ERRCODE = 'insufficient_privilege';
               END $$""",
            """CREATE TRIGGER entries_append_only BEFORE UPDATE OR DELETE ON {s}.entries
               FOR EACH ROW EXECUTE FUNCTION {s}.dpkit_append_only()""",
            """CREATE TRIGGER entries_no_truncate BEFORE TRUNCATE ON {s}.entries
               FOR EACH STATEMENT EXECUTE FUNCTION {s}.dpkit_append_only()""",
            """REVOKE UPDATE, DELETE, TRUNCATE ON {s}.entries FROM PUBLIC""",
        ),
    ),
    (
        2,
        "each reservation is finalised (commit or fail) at most once, enforced by an index",
        (
            """CREATE UNIQUE INDEX entries_one_final ON {s}.entries (ref)
               WHERE kind IN ('commit', 'fail')""",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def split_url(url: str) -> tuple[str, str]:
    """Split ``postgresql://...?schema=name`` into the libpq URL and the dpkit schema name."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = "dpkit"
    kept = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    if not _SCHEMA_NAME.match(schema):
        raise InvalidParameterError(
            "schema", schema, "a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 chars)"
        )
    return urlunsplit(parts._replace(query=urlencode(kept))), schema


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


class _PgTxn(_Txn):
    """StoreTransaction over a psycopg connection inside an open transaction (decoding shared
    with the SQLite store: any malformed value means the database was tampered with)."""

    __slots__ = ("_lock_key", "_locked", "_s")

    def __init__(self, conn: Any, where: str, schema: str, lock_key: int | None = None) -> None:
        super().__init__(conn, where)
        self._s = schema
        self._lock_key = lock_key
        self._locked = lock_key is None

    def _lock(self) -> None:
        """Take the writer lock before the first read or write of budgets (or of all entries).

        A commit or fail only reads its reservation and appends a row: it needs no lock (the
        unique index ``entries_one_final`` makes a second finalisation fail), so its WAL flush
        can be shared with other transactions' (PostgreSQL's group commit)."""
        if not self._locked:
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            self._locked = True

    def get_budget(self, dataset: str, analyst: str | None) -> BudgetRow | None:
        self._lock()
        row = self._conn.execute(
            f"SELECT {_BUDGET_COLUMNS} FROM {self._s}.budgets WHERE dataset = %s AND analyst = %s",
            (dataset, _analyst_key(analyst)),
        ).fetchone()
        return None if row is None else self._budget(tuple(row))

    def list_budgets(self) -> list[BudgetRow]:
        self._lock()
        rows = self._conn.execute(
            f"SELECT {_BUDGET_COLUMNS} FROM {self._s}.budgets ORDER BY dataset, analyst"
        ).fetchall()
        return [self._budget(tuple(r)) for r in rows]

    def put_budget(self, row: BudgetRow) -> None:
        self._lock()
        self._conn.execute(
            f"INSERT INTO {self._s}.budgets ({_BUDGET_COLUMNS}) VALUES "
            "(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (dataset, analyst) DO UPDATE SET "
            "privacy_unit = EXCLUDED.privacy_unit, total = EXCLUDED.total, "
            "spent_xi = EXCLUDED.spent_xi, spent_delta = EXCLUDED.spent_delta, "
            "spent_rho = EXCLUDED.spent_rho, charges = EXCLUDED.charges, "
            "alerts_fired = EXCLUDED.alerts_fired, created_at = EXCLUDED.created_at",
            (
                row.dataset,
                _analyst_key(row.analyst),
                row.privacy_unit,
                loss_to_text(row.total),
                fraction_text(row.spend.xi),
                fraction_text(row.spend.delta),
                fraction_text(row.spend.rho),
                row.charges,
                ",".join(row.alerts_fired),
                row.created_at,
            ),
        )

    def append_entry(self, entry: NewEntry) -> int:
        row = self._conn.execute(
            f"INSERT INTO {self._s}.entries (ts, kind, dataset, analyst, loss, query, query_hash,"
            " mechanism, ref, receipt, actor, detail) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
            " RETURNING id",
            (
                entry.timestamp,
                entry.kind,
                entry.dataset,
                _analyst_key(entry.analyst),
                None if entry.loss is None else loss_to_text(entry.loss),
                entry.query,
                entry.query_hash,
                entry.mechanism,
                entry.ref,
                entry.receipt,
                entry.actor,
                entry.detail,
            ),
        ).fetchone()
        if row is None:  # pragma: no cover - RETURNING always answers
            raise LedgerError("the ledger store did not assign an entry id")
        return int(row[0])

    def get_entry(self, entry_id: int) -> LedgerEntry | None:
        row = self._conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM {self._s}.entries WHERE id = %s", (entry_id,)
        ).fetchone()
        return None if row is None else self._entry(tuple(row))

    def entries_referring_to(self, entry_id: int) -> list[LedgerEntry]:
        rows = self._conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM {self._s}.entries WHERE ref = %s ORDER BY id",
            (entry_id,),
        ).fetchall()
        return [self._entry(tuple(r)) for r in rows]

    def entries(
        self, dataset: str | None = None, analyst: str | None = None, after_id: int = 0
    ) -> Sequence[LedgerEntry]:
        self._lock()
        sql = f"SELECT {_ENTRY_COLUMNS} FROM {self._s}.entries WHERE id > %s"
        args: list[Any] = [after_id]
        if dataset is not None:
            sql += " AND dataset = %s"
            args.append(dataset)
            if analyst is not None:
                sql += " AND analyst = %s"
                args.append(analyst)
        sql += " ORDER BY id"
        return [self._entry(tuple(r)) for r in self._conn.execute(sql, args).fetchall()]


class PostgresStore(GroupCommitStore):
    """A ledger in a PostgreSQL schema.

    Every write waits for its WAL flush, even a finalisation (``sync=False``): PostgreSQL's
    asynchronous commit keeps the commit record in the server's memory, so it would not survive
    a crash of the server's processes.

    Args:
        url: a libpq URL (``postgresql://user:pass@host/db``), optionally ``?schema=name``.
        timeout: seconds to wait for a connection and for the writer lock before giving up.
        group_commit: share one transaction between threads writing at the same time.
    """

    honours_unsynced = False
    pipeline = True  # the flush runs on its own connection: the next batch need not wait for it

    def __init__(self, url: str, *, timeout: float = 60.0, group_commit: bool = True) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise LedgerError(
                "the PostgreSQL ledger needs psycopg 3: pip install 'dpkit[postgres]'"
            ) from exc
        self._psycopg = psycopg
        self.url, self.schema = split_url(url)
        self.timeout = timeout
        self._init_group_commit(group_commit)
        self._lock_key = int.from_bytes(
            hashlib.sha256(f"dpkit-ledger:{self.schema}".encode()).digest()[:8], "big", signed=True
        )
        self._read_lock = threading.Lock()
        self._wconn: Any = None
        self._rconn: Any = None
        self._fconn: Any = None  # runs the flushes (see _await_durable), beside the writer
        self._flush_lock = threading.Lock()  # one flush at a time on _fconn
        self._flush_state = threading.Lock()
        self._flushes_started = 0
        self._flushes_done = 0
        self._ledger_id = self._initialise()

    # -- connections --

    def _connect(self) -> Any:
        try:
            conn = self._psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self.timeout))
            )
            conn.execute("SET synchronous_commit = on")
            conn.execute(f"SET lock_timeout = {int(self.timeout * 1000)}")
            return conn
        except self._psycopg.Error as exc:
            raise self._translate(exc) from exc

    def _writer(self) -> Any:
        if self._wconn is None or self._wconn.closed:
            self._wconn = self._connect()
        return self._wconn

    def _reader(self) -> Any:
        if self._rconn is None or self._rconn.closed:
            self._rconn = self._connect()
        return self._rconn

    def _drop(self, conn: Any) -> None:
        """Forget a connection after a connection-level failure (the next call reconnects)."""
        with contextlib.suppress(Exception):
            conn.close()
        if conn is self._wconn:
            self._wconn = None
        if conn is self._rconn:
            self._rconn = None
        if conn is self._fconn:
            self._fconn = None

    def _initialise(self) -> str:
        conn = self._writer()
        s = self.schema
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            tables = {
                str(r[0])
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (s,),
                ).fetchall()
            }
            if tables and "schema_version" not in tables:
                raise LedgerCorruptError(
                    f"schema {s!r} of {_redact(self.url)} holds tables {sorted(tables)} but is "
                    "not a dpkit ledger; choose another schema with ?schema=name."
                )
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version INTEGER PRIMARY KEY, "
                "description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )
            row = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
            current = 0 if row is None or row[0] is None else int(row[0])
            if current > SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger schema {s!r} has schema version {current}; this dpkit reads up to "
                    f"version {SCHEMA_VERSION}. Upgrade dpkit to read it."
                )
            for version, description, statements in MIGRATIONS:
                if version <= current:
                    continue
                for statement in statements:
                    conn.execute(statement.replace("{s}", s))
                conn.execute(
                    f"INSERT INTO {s}.schema_version VALUES (%s, %s, %s)",
                    (version, description, time.time()),
                )
            meta = {str(k): str(v) for k, v in conn.execute(f"SELECT key, value FROM {s}.meta")}
            if not meta:
                ledger_id = hashlib.sha256(
                    f"{_redact(self.url)}|{s}|{time.time_ns()}|{os.getpid()}".encode()
                ).hexdigest()[:16]
                meta = {"format": FORMAT_NAME, "ledger_id": ledger_id}
                for key, value in meta.items():
                    conn.execute(f"INSERT INTO {s}.meta VALUES (%s, %s)", (key, value))
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            if isinstance(exc, self._psycopg.Error):
                raise self._translate(exc, conn) from exc
            raise
        if meta.get("format") != FORMAT_NAME:
            raise LedgerCorruptError(f"schema {s!r} is not a dpkit ledger.")
        return str(meta.get("ledger_id", ""))

    def _translate(self, exc: Exception, conn: Any = None) -> LedgerError:
        psycopg = self._psycopg
        where = f"ledger {_redact(self.url)} (schema {self.schema})"
        if isinstance(exc, psycopg.OperationalError) and (conn is None or conn.closed):
            if conn is not None:
                self._drop(conn)
            return LedgerUnavailableError(
                f"{where} is unavailable ({str(exc).strip()}); nothing was recorded. Retry."
            )
        if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
            return LedgerError(
                f"{where} stayed locked by another writer for more than {self.timeout} s; "
                "nothing was recorded. Retry, or raise timeout."
            )
        if isinstance(exc, psycopg.errors.InsufficientPrivilege | psycopg.IntegrityError):
            return LedgerError(f"{where} refused a change: {str(exc).strip()}")
        if isinstance(exc, psycopg.OperationalError):
            if conn is not None:
                self._drop(conn)
            return LedgerUnavailableError(
                f"{where} is unavailable ({str(exc).strip()}); nothing was recorded. Retry."
            )
        return LedgerError(f"{where}: {str(exc).strip()}; nothing was recorded.")

    def _describe(self) -> str:
        return f"ledger {self.schema!r}"

    @property
    def ledger_id(self) -> str:
        return self._ledger_id

    # -- the protocol --

    def _run_batch(self, batch: list[_Request]) -> object | None:
        """Run the batch in one transaction; returns a flush ticket if anything was committed.

        The transaction commits without waiting for its WAL flush (so the writer lock is
        released at once, and the next batch can start); ``_await_durable`` then waits for a
        flush covering it before anyone is answered. See ``_flush`` for why this is as durable
        as a synchronous commit."""
        psycopg = self._psycopg
        try:
            conn = self._writer()
            # one round trip opens the transaction (and the first request's savepoint)
            conn.execute(
                "BEGIN; SET LOCAL synchronous_commit TO off"
                + ("; SAVEPOINT dpkit_request" if len(batch) > 1 else "")
            )
        except (psycopg.Error, LedgerError) as exc:
            refused = exc if isinstance(exc, LedgerError) else self._translate(exc, self._wconn)
            if self._wconn is not None:
                with contextlib.suppress(Exception):
                    self._wconn.execute("ROLLBACK")
            for r in batch:
                r.error = refused
            return None
        txn = _PgTxn(conn, f"ledger schema {self.schema!r}", self.schema, self._lock_key)
        try:
            if len(batch) == 1:  # alone: no savepoint needed, a refusal rolls back everything
                only = batch[0]
                try:
                    only.result = only.work(txn)
                except BaseException as exc:
                    only.result = None
                    only.error = (
                        self._translate(exc, conn) if isinstance(exc, psycopg.Error) else exc
                    )
                    conn.execute("ROLLBACK")
                    return None
                conn.execute("COMMIT")
                return self._ticket()
            for i, r in enumerate(batch):
                if i:  # the previous request is kept; this one gets a savepoint of its own
                    conn.execute("RELEASE SAVEPOINT dpkit_request; SAVEPOINT dpkit_request")
                try:
                    r.result = r.work(txn)
                except BaseException as exc:
                    conn.execute("ROLLBACK TO SAVEPOINT dpkit_request")
                    r.error = self._translate(exc, conn) if isinstance(exc, psycopg.Error) else exc
            conn.execute("COMMIT")  # commits the last savepoint's work too
        except BaseException as exc:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            error: BaseException = (
                self._translate(exc, conn) if isinstance(exc, psycopg.Error) else exc
            )
            for r in batch:  # nothing of the batch was acknowledged
                if r.error is None:
                    r.result = None
                    r.error = error
            return None
        return self._ticket() if any(r.error is None for r in batch) else None

    def _ticket(self) -> int:
        """After a COMMIT returned: the number of the first flush that will start after it."""
        with self._flush_state:
            return self._flushes_started + 1

    def _await_durable(self, token: object) -> None:
        """Wait for a flush numbered ``token`` or later (running it, or sharing another
        thread's): flushes of this process run one at a time on their own connection, each
        covering every COMMIT that returned before it started."""
        assert isinstance(token, int)
        psycopg = self._psycopg
        with self._flush_lock:
            with self._flush_state:
                if self._flushes_done >= token:
                    return
                self._flushes_started += 1
                number = self._flushes_started
            conn = None
            try:
                if self._fconn is None or self._fconn.closed:
                    self._fconn = self._connect()
                conn = self._fconn
                self._flush(conn)
            except psycopg.Error as exc:
                with contextlib.suppress(Exception):
                    if conn is not None:
                        conn.execute("ROLLBACK")
                raise self._translate(exc, conn) from exc
            with self._flush_state:
                self._flushes_done = max(self._flushes_done, number)

    def _durability_unknown(self, exc: BaseException) -> BaseException:
        if isinstance(exc, LedgerError):
            return type(exc)(
                f"{exc} The change was committed but its flush to disk was not confirmed, so it "
                "is not acknowledged (a charge in it still counts as spent; replay shows it)."
            )
        return exc

    @staticmethod
    def _flush(conn: Any) -> None:
        """Wait until the WAL is on disk up to (and past) the transaction just committed.

        A transaction that takes an xid and commits with ``synchronous_commit = on`` returns
        only after the server flushed the WAL up to its own commit record, and the WAL is
        flushed in order, so the earlier commit is durable too. This waits *after* the writer
        lock was released, so the flushes of many writers coalesce (PostgreSQL's group commit)
        instead of being serialised under the lock.

        Why it is safe: nobody is told of a charge before this returns, so an acknowledged
        charge is never lost. Another writer may already have seen the charge in the totals
        before it was durable; if the server crashed in between, that writer's own transaction
        (later in the WAL) is lost as well, and it was not acknowledged either. A charge that
        became durable but whose flush we did not see answered is an unacknowledged charge that
        stays spent (no refunds), as with a lost COMMIT reply.
        """
        conn.execute("BEGIN; SELECT pg_current_xact_id(); COMMIT")

    def read(self, work: Callable[[StoreTransaction], T]) -> T:
        """Run ``work`` on a consistent snapshot (retried once on a fresh connection if the
        server dropped the old one: a read changes nothing, so retrying is safe)."""
        self._check_usable()
        try:
            return self._read_once(work)
        except LedgerUnavailableError:
            return self._read_once(work)

    def _read_once(self, work: Callable[[StoreTransaction], T]) -> T:
        psycopg = self._psycopg
        with self._read_lock:
            conn = self._reader()
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                try:
                    return work(_PgTxn(conn, f"ledger schema {self.schema!r}", self.schema))
                finally:
                    if not conn.closed:
                        conn.execute("COMMIT")
            except psycopg.Error as exc:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
                raise self._translate(exc, conn) from exc

    def close(self) -> None:
        if not self._close_writers():
            return
        with self._read_lock:
            for conn in (self._wconn, self._rconn, self._fconn):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
            self._wconn = self._rconn = self._fconn = None

    def __repr__(self) -> str:
        return f"PostgresStore({_redact(self.url)!r}, schema={self.schema!r})"
