"""The PostgreSQL ledger store (psycopg 3): the SQLite store's semantics on a shared server.

Semantics (the same as :class:`~dpkit.ledger.SQLiteStore`, so every ledger test runs on both):

* **Serialised writes.** A write transaction takes a transaction-scoped advisory lock
  (``pg_advisory_xact_lock``) keyed by the ledger's schema before it first reads or writes a
  budget, so "read the totals, check the budget, append the entry, update the totals" is
  serialised against every other connection of every process and host, exactly like SQLite's
  single write lock. Finalising a reservation (commit / fail) touches no budget and takes no
  lock; a unique index lets each reservation be finalised only once. The lock is released by
  COMMIT or ROLLBACK, and by the server when a client dies, so a killed process never leaves it
  held. Entry ids are drawn from the entries' identity sequence; those of entries that change
  budgets (create, adjust, reserve, alert) are drawn under the lock, so they increase in commit
  order, which is the order replay applies them in (commit / fail entries change no total; their
  ids are drawn after their reservation committed). A trigger refuses ids the sequence has not
  issued and finalisations that do not follow their reservation (migration 3).
* **Durability.** A write returns only after the server flushed its WAL past the write's commit
  record, so an acknowledged charge survives a crash of the client, the server or the machine.
  A transaction that holds the writer lock commits asynchronously and a second, synchronous
  commit waits for the flush *after* the lock is released, so concurrent writers share WAL
  flushes (see ``PostgresStore._flush``); one that only finalises reservations holds no lock
  and commits synchronously.
* **Group commit, few round trips.** Threads of one process writing at the same time share one
  transaction, which buffers its writes and sends them with its COMMIT: a batch of any size
  costs about three round trips (``_PgBatchTxn``; a refused request is dropped from the buffer
  alone) and one WAL flush; each caller is answered only after the flush.
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
)
from dpkit.ledger._sqlite import (
    _BUDGET_COLUMNS,
    _ENTRY_COLUMNS,
    _analyst_key,
    _budget_values,
    _entry_values,
    _Txn,
)
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
    (
        3,
        "entry ids come from the ledger's sequence; a commit or fail follows its reservation",
        (
            # Writers now draw ids from the identity sequence and insert a batch's entries with
            # OVERRIDING SYSTEM VALUE (one round trip per batch). The database still guarantees
            # what replay relies on: no id the sequence has not issued (so no entry can take an
            # id a later writer will be given), and every finalisation names an earlier
            # reservation of the same dataset.
            """CREATE FUNCTION {s}.dpkit_entry_order() RETURNS trigger LANGUAGE plpgsql AS $$
               DECLARE
                 issued BIGINT := pg_sequence_last_value('{s}.entries_id_seq'::regclass);
                 reserved RECORD;
               BEGIN
                 IF issued IS NULL OR NEW.id > issued THEN
                   RAISE EXCEPTION 'dpkit ledger entry id % was not issued by the ledger''s '
                     'sequence', NEW.id USING ERRCODE = 'check_violation';
                 END IF;
                 IF NEW.kind IN ('commit', 'fail') THEN
                   SELECT id, kind, dataset INTO reserved FROM {s}.entries WHERE id = NEW.ref;
                   IF reserved.id IS NULL OR reserved.kind <> 'reserve'
                      OR reserved.dataset <> NEW.dataset OR NEW.id <= NEW.ref THEN
                     RAISE EXCEPTION 'dpkit ledger: % entry % does not follow reservation % of '
                       'dataset %', NEW.kind, NEW.id, NEW.ref, NEW.dataset
                       USING ERRCODE = 'check_violation';
                   END IF;
                 END IF;
                 RETURN NEW;
               END $$""",
            """CREATE TRIGGER entries_order BEFORE INSERT ON {s}.entries
               FOR EACH ROW EXECUTE FUNCTION {s}.dpkit_entry_order()""",
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
        self._conn.execute(_upsert_budget_sql(self._s), _budget_values(row))

    def append_entry(self, entry: NewEntry) -> int:
        row = self._conn.execute(
            f"INSERT INTO {self._s}.entries (ts, kind, dataset, analyst, loss, query, query_hash,"
            " mechanism, ref, receipt, actor, detail) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
            " RETURNING id",
            _entry_values(entry),
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


_BUDGET_CHANGES = frozenset(("create", "adjust", "reserve", "alert"))
_OPEN_CACHE_SIZE = 16384  # reservations kept per process (older ones are read when finalised)


class _RetryAlone(Exception):
    """A batch's transaction failed on a database error; rerun its requests one by one."""

    def __init__(self, failed: _Request | None = None) -> None:
        super().__init__()
        self.failed = failed


class _PgBatchTxn(_PgTxn):
    """The write transaction of one batch, in a few round trips whatever the batch's size.

    Writes are buffered in the client until the batch ends; the reads they affect (budgets,
    entries) are answered from the buffer laid over the database, so every request sees the
    effects of the requests before it exactly as if they had been written. When the batch ends,
    one round trip sends every new entry (one INSERT of one array per column), every changed
    budget row and the COMMIT. So a refused request is undone by dropping its part of the buffer
    (no SAVEPOINT, nothing was sent), and the statements that hold the writer lock are few:

    * the first read of a budget takes the writer lock, reads the dataset's and the analyst's
      rows, and draws entry ids from the entries' identity sequence - in one round trip
      (``BEGIN`` too, when it is the transaction's first); a transaction that took the lock
      commits asynchronously (the lock is released at once) and is answered after a flush on
      the store's second connection, one that did not (finalisations only) commits
      synchronously;
    * ids drawn under the lock are larger than every id of an earlier lock holder, so entries
      that change budgets keep increasing in commit order (replay's order); ids drawn without
      the lock (a commit or fail, which changes no budget) are drawn after the reservation they
      finalise was committed, so they are larger than its id;
    * entries are written with those ids (``OVERRIDING SYSTEM VALUE``); the triggers of migration
      3 refuse an id the sequence has not issued, and a finalisation that does not follow its
      reservation.

    With ``use_cache`` the reservations this process wrote (and saw committed) answer
    ``get_entry`` / ``entries_referring_to`` without a round trip; a finalisation made meanwhile
    by another process is caught by the unique index ``entries_one_final`` at the end of the
    batch, which then reruns each request alone, reading the database (``_RetryAlone``).
    """

    __slots__ = (
        "_begun",
        "_budgets",
        "_dirty",
        "_fetched",
        "_ids",
        "_ids_locked",
        "_new",
        "_refs",
        "_size",
        "_store",
        "_use_cache",
    )

    def __init__(self, store: PostgresStore, conn: Any, size: int, use_cache: bool) -> None:
        super().__init__(conn, f"ledger schema {store.schema!r}", store.schema, store._lock_key)
        self._store = store
        self._size = max(1, size)
        self._use_cache = use_cache
        self._begun = False
        self._budgets: dict[tuple[str, str], BudgetRow | None] = {}
        self._dirty: dict[tuple[str, str], BudgetRow] = {}
        self._new: list[tuple[int, NewEntry]] = []
        self._refs: dict[int, list[LedgerEntry]] = {}  # read from the database
        self._fetched: dict[int, LedgerEntry | None] = {}
        self._ids: list[int] = []  # drawn and unused, in decreasing order (pop() takes the least)
        self._ids_locked = False

    # -- round trips --

    def _round_trip(self, statements: list[tuple[str, Any]]) -> list[list[tuple[Any, ...]]]:
        """Send ``statements`` (after BEGIN, if the transaction has not begun) in one message,
        i.e. one round trip; returns the rows of each (empty for commands).

        The parameters are bound in the client by psycopg's quoting (``ClientCursor``), so that
        the statements travel as one simple query: psycopg's pipeline mode would do the same in
        one round trip but polls the socket while it waits, costing more CPU than it saves."""
        wanted = len(statements)
        if not self._begun:
            statements = [("BEGIN", None), *statements]
            self._begun = True
        sql = "; ".join(s for s, _ in statements)
        params: list[Any] = []
        for _, p in statements:
            if p is not None:
                params.extend(p)
        cursor = self._store._psycopg.ClientCursor(self._conn)
        cursor.execute(sql, params if params else None)
        results: list[list[tuple[Any, ...]]] = []
        tuples = self._store._psycopg.pq.ExecStatus.TUPLES_OK
        while True:  # (pgresult.status, not description: that builds column objects)
            result = cursor.pgresult
            results.append(
                cursor.fetchall() if result is not None and result.status == tuples else []
            )
            if not cursor.nextset():
                break
        return results[len(results) - wanted :]

    def _draw_ids_sql(self, count: int) -> tuple[str, Any]:
        return (
            f"SELECT nextval('{self._store._sequence}') FROM generate_series(1, %s)",
            (count,),
        )

    def _take_ids(self, rows: list[tuple[Any, ...]], locked: bool) -> None:
        self._ids = sorted((int(r[0]) for r in rows), reverse=True)
        self._ids_locked = locked

    def _lock(self) -> None:
        if not self._locked:
            self._lock_and_read(None)

    def _lock_and_read(self, key: tuple[str, str] | None) -> None:
        """One round trip: the writer lock, fresh ids under it, and the budget rows of ``key``'s
        dataset that the charge checks (the dataset's and the analyst's)."""
        statements: list[tuple[str, Any]] = []
        locking = not self._locked
        if locking:
            # a transaction holding the lock commits asynchronously, so that the lock is
            # released at once; it is answered after a flush on the second connection
            statements.append(("SET LOCAL synchronous_commit TO off", None))
            statements.append(("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,)))
            statements.append(self._draw_ids_sql(self._size))
        if key is not None:
            wanted = sorted({key[1], ""})
            statements.append(
                (
                    f"SELECT {_BUDGET_COLUMNS} FROM {self._s}.budgets "
                    "WHERE dataset = %s AND analyst = ANY(%s)",
                    (key[0], wanted),
                )
            )
        cursors = self._round_trip(statements)
        if locking:
            self._locked = True
            self._take_ids(cursors[2], locked=True)
        if key is not None:
            found = {(str(r[0]), str(r[1])): self._budget(tuple(r)) for r in cursors[-1]}
            for analyst in wanted:
                k = (key[0], analyst)
                if k not in self._budgets:
                    self._budgets[k] = found.get(k)

    def _next_id(self, changes_budgets: bool) -> int:
        if changes_budgets and not self._locked:
            self._lock()
        if changes_budgets and not self._ids_locked:
            self._ids = []  # drawn before the lock: not for entries that change budgets
        if not self._ids:
            (cursor,) = self._round_trip([self._draw_ids_sql(self._size)])
            self._take_ids(cursor, locked=self._locked)
        return self._ids.pop()

    # -- a request's part of the buffer --

    @property
    def locked(self) -> bool:
        return self._locked

    def mark(self) -> tuple[Any, ...]:
        return (dict(self._budgets), dict(self._dirty), len(self._new))

    def restore(self, mark: tuple[Any, ...]) -> None:
        budgets, dirty, new = mark
        self._budgets, self._dirty = budgets, dirty
        del self._new[new:]

    # -- StoreTransaction --

    def get_budget(self, dataset: str, analyst: str | None) -> BudgetRow | None:
        key = (dataset, _analyst_key(analyst))
        if key not in self._budgets:
            self._lock_and_read(key)
        return self._budgets.get(key)

    def list_budgets(self) -> list[BudgetRow]:
        rows = {(r.dataset, _analyst_key(r.analyst)): r for r in super().list_budgets()}
        rows.update({k: r for k, r in self._budgets.items() if r is not None})
        return [rows[k] for k in sorted(rows)]

    def put_budget(self, row: BudgetRow) -> None:
        self._lock()
        key = (row.dataset, _analyst_key(row.analyst))
        self._budgets[key] = row
        self._dirty[key] = row

    def append_entry(self, entry: NewEntry) -> int:
        entry_id = self._next_id(entry.kind in _BUDGET_CHANGES)
        self._new.append((entry_id, entry))
        return entry_id

    def _buffered(self) -> list[LedgerEntry]:
        return [e.with_id(i) for i, e in self._new]

    def get_entry(self, entry_id: int) -> LedgerEntry | None:
        for i, e in self._new:
            if i == entry_id:
                return e.with_id(i)
        if self._use_cache:
            known = self._store._open_reservations.get(entry_id)
            if known is not None:
                return known[0]
        if entry_id not in self._fetched:  # the entry and what refers to it, in one round trip
            (cursor,) = self._round_trip(
                [
                    (
                        f"SELECT {_ENTRY_COLUMNS} FROM {self._s}.entries "
                        "WHERE id = %s OR ref = %s ORDER BY id",
                        (entry_id, entry_id),
                    )
                ]
            )
            rows = [self._entry(tuple(r)) for r in cursor]
            self._fetched[entry_id] = next((e for e in rows if e.id == entry_id), None)
            self._refs[entry_id] = [e for e in rows if e.id != entry_id]
        return self._fetched[entry_id]

    def entries_referring_to(self, entry_id: int) -> list[LedgerEntry]:
        stored = self._refs.get(entry_id)
        if stored is None and self._use_cache:
            known = self._store._open_reservations.get(entry_id)
            if known is not None:
                stored = list(known[1])
        if stored is None:
            (cursor,) = self._round_trip(
                [
                    (
                        f"SELECT {_ENTRY_COLUMNS} FROM {self._s}.entries WHERE ref = %s "
                        "ORDER BY id",
                        (entry_id,),
                    )
                ]
            )
            stored = [self._entry(tuple(r)) for r in cursor]
            self._refs[entry_id] = stored
        return stored + [e.with_id(i) for i, e in self._new if e.ref == entry_id]

    def entries(
        self, dataset: str | None = None, analyst: str | None = None, after_id: int = 0
    ) -> Sequence[LedgerEntry]:
        self._lock()
        stored = list(super().entries(dataset, analyst, after_id))
        extra = [
            e
            for e in self._buffered()
            if e.id > after_id
            and (dataset is None or e.dataset == dataset)
            and (dataset is None or analyst is None or _analyst_key(e.analyst) == analyst)
        ]
        if not extra:
            return stored
        return sorted(stored + extra, key=lambda e: e.id)

    # -- the end of the batch --

    def finish(self) -> bool:
        """Write the buffer and COMMIT in one round trip; False if there was nothing to write
        (the transaction, if any, is rolled back)."""
        if not self._new and not self._dirty:
            if self._begun:
                self._conn.execute("ROLLBACK")
            return False
        statements: list[tuple[str, Any]] = []
        if self._new:
            columns: list[list[Any]] = [[] for _ in range(13)]
            for entry_id, e in self._new:
                for column, value in zip(columns, (entry_id, *_entry_values(e)), strict=True):
                    column.append(value)
            # one array per column: the statement's text is the same for every batch size, so
            # psycopg converts it once (a multi-row VALUES list is re-parsed for every batch,
            # inside the writer lock)
            statements.append((_insert_entries_sql(self._s), columns))
        statements += [
            (_upsert_budget_sql(self._s), _budget_values(r)) for r in self._dirty.values()
        ]
        statements.append(("COMMIT", None))
        self._round_trip(statements)
        return True

    def written(self) -> list[LedgerEntry]:
        return self._buffered()


_ENTRY_TYPES = ("bigint", "float8", *["text"] * 7, "bigint", *["text"] * 3)  # _ENTRY_COLUMNS


def _insert_entries_sql(s: str) -> str:
    arrays = ", ".join(f"%s::{t}[]" for t in _ENTRY_TYPES)
    return (
        f"INSERT INTO {s}.entries ({_ENTRY_COLUMNS}) OVERRIDING SYSTEM VALUE "
        f"SELECT * FROM unnest({arrays})"
    )


def _upsert_budget_sql(s: str) -> str:
    return (
        f"INSERT INTO {s}.budgets ({_BUDGET_COLUMNS}) VALUES "
        "(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (dataset, analyst) DO UPDATE SET "
        "privacy_unit = EXCLUDED.privacy_unit, total = EXCLUDED.total, "
        "spent_xi = EXCLUDED.spent_xi, spent_delta = EXCLUDED.spent_delta, "
        "spent_rho = EXCLUDED.spent_rho, charges = EXCLUDED.charges, "
        "alerts_fired = EXCLUDED.alerts_fired, created_at = EXCLUDED.created_at"
    )


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
        # reservation id -> (its entry, entries referring to it), written by this store and
        # committed, not yet finalised by it (see _PgBatchTxn)
        self._open_reservations: dict[int, tuple[LedgerEntry, tuple[LedgerEntry, ...]]] = {}
        self._sequence = ""
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
        self._open_reservations.clear()

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
            row = conn.execute(
                "SELECT pg_get_serial_sequence(%s, 'id')", (f"{s}.entries",)
            ).fetchone()
            self._sequence = str(row[0]) if row is not None and row[0] is not None else ""
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

        The transaction (``_PgBatchTxn``) costs a few round trips whatever the batch's size, and
        commits without waiting for its WAL flush (so the writer lock is released at once, and
        the next batch can start); ``_await_durable`` then waits for a flush covering it before
        anyone is answered. See ``_flush`` for why this is as durable as a synchronous commit.
        If the transaction fails on a database error (a finalisation that lost a race, a lock
        timeout), nothing of it was committed: each request is then run alone, reading the
        database, so the error lands on the request that causes it."""
        try:
            return self._attempt(batch, use_cache=True)
        except _RetryAlone as retry:
            ticket: object | None = None
            for r in batch:
                if r is not retry.failed:  # alone, a request's error is its own
                    r.result = r.error = None
                    ticket = self._attempt([r], use_cache=False) or ticket
            return ticket

    def _attempt(self, batch: list[_Request], *, use_cache: bool) -> object | None:
        psycopg = self._psycopg
        try:
            conn = self._writer()
        except LedgerError as exc:
            for r in batch:
                r.error = exc
            return None
        txn = _PgBatchTxn(self, conn, len(batch), use_cache)
        for r in batch:
            mark = txn.mark()
            try:
                r.result = r.work(txn)
            except psycopg.Error as exc:
                r.result = None
                r.error = self._translate(exc, conn)
                self._abandon(conn)
                if conn.closed or len(batch) == 1:
                    for other in batch:
                        if other.error is None:
                            other.result = None
                            other.error = r.error
                    return None
                raise _RetryAlone(r) from None
            except BaseException as exc:
                r.result = None
                r.error = exc
                txn.restore(mark)
        try:
            if not txn.finish():
                return None
        except psycopg.Error as exc:
            self._abandon(conn)
            if not conn.closed and len(batch) > 1 and not isinstance(exc, psycopg.OperationalError):
                raise _RetryAlone() from None
            error = self._translate(exc, conn)
            for r in batch:  # nothing of the batch was acknowledged
                if r.error is None:
                    r.result = None
                    r.error = error
            return None
        except Exception as exc:  # e.g. a text the client cannot encode: not sent, not committed
            self._abandon(conn)
            if not conn.closed and len(batch) > 1:
                raise _RetryAlone() from None
            for r in batch:
                if r.error is None:
                    r.result = None
                    r.error = exc
            return None
        self._remember(txn.written())
        # a transaction that held the writer lock committed asynchronously: wait for a flush;
        # one that did not (only finalisations) committed synchronously: it is on disk
        return self._ticket() if txn.locked else None

    def _abandon(self, conn: Any) -> None:
        if not conn.closed:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")

    def _remember(self, written: list[LedgerEntry]) -> None:
        """Keep the reservations this process committed (until finalised here), so that
        finalising them needs no read (see ``_PgBatchTxn``)."""
        known = self._open_reservations
        for e in written:
            if e.kind == "reserve":
                known[e.id] = (e, ())
            elif e.ref is not None and e.ref in known:
                if e.kind in ("commit", "fail"):
                    known.pop(e.ref, None)
                else:
                    entry, refs = known[e.ref]
                    known[e.ref] = (entry, (*refs, e))
        while len(known) > _OPEN_CACHE_SIZE:
            known.pop(next(iter(known), -1), None)

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
        self._open_reservations.clear()
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
