"""The SQLite ledger store: WAL journal, ``synchronous=FULL``, ``BEGIN IMMEDIATE`` writes.

Durability: a write returns only after SQLite's COMMIT returned, and with WAL and
``synchronous=FULL`` that means the WAL was fsync-ed: an acknowledged charge survives a crash.

Atomicity across processes: every write runs under ``BEGIN IMMEDIATE``, which takes SQLite's
single write lock before the first read, so "read the totals, check the budget, append the entry,
update the totals" is serialised against every other process (waiting up to ``timeout``).

Group commit: threads of one process that write at the same time share one transaction (each
request runs inside its own SAVEPOINT, so a refused request is rolled back alone) and one fsync.
Each caller is answered only after that COMMIT, so batching never weakens durability. Writers of
different processes queue on an advisory kernel lock (``<ledger>-writer.lock``, ``flock``) before
``BEGIN IMMEDIATE``, so they are woken at once instead of polling SQLite's busy handler.

Append-only: triggers make SQLite itself refuse UPDATE and DELETE on the entries table.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from dpkit.ledger._model import (
    ENTRY_KINDS,
    EntryKind,
    LedgerCorruptError,
    LedgerEntry,
    LedgerError,
    Spend,
    fraction_text,
    loss_from_text,
    loss_to_text,
    parse_fraction,
)
from dpkit.ledger._store import BudgetRow, NewEntry, StoreTransaction

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows; SQLite's busy handler is used there
    fcntl = None  # type: ignore[assignment]

__all__ = ["SQLiteStore"]

T = TypeVar("T")

SCHEMA_VERSION = "1"
FORMAT_NAME = "dpkit-ledger"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS budgets (
    dataset TEXT NOT NULL,
    analyst TEXT NOT NULL,
    privacy_unit TEXT NOT NULL,
    total TEXT NOT NULL,
    spent_xi TEXT NOT NULL,
    spent_delta TEXT NOT NULL,
    spent_rho TEXT NOT NULL,
    charges INTEGER NOT NULL,
    alerts_fired TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (dataset, analyst)
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    dataset TEXT NOT NULL,
    analyst TEXT NOT NULL,
    loss TEXT,
    query TEXT NOT NULL,
    query_hash TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    ref INTEGER,
    receipt TEXT NOT NULL,
    actor TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_ref ON entries (ref) WHERE ref IS NOT NULL;
CREATE INDEX IF NOT EXISTS entries_scope ON entries (dataset, analyst, id);
CREATE TRIGGER IF NOT EXISTS entries_append_only_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'dpkit ledger entries are append-only'); END;
CREATE TRIGGER IF NOT EXISTS entries_append_only_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'dpkit ledger entries are append-only'); END;
"""

_ENTRY_COLUMNS = (
    "id, ts, kind, dataset, analyst, loss, query, query_hash, mechanism, ref, receipt, actor,"
    " detail"
)
_BUDGET_COLUMNS = (
    "dataset, analyst, privacy_unit, total, spent_xi, spent_delta, spent_rho, charges, "
    "alerts_fired, created_at"
)


def _analyst_key(analyst: str | None) -> str:
    return analyst or ""


class _Txn:
    """StoreTransaction over one sqlite3 connection inside an open transaction."""

    __slots__ = ("_conn", "_where")

    def __init__(self, conn: sqlite3.Connection, where: str) -> None:
        self._conn = conn
        self._where = where

    def get_budget(self, dataset: str, analyst: str | None) -> BudgetRow | None:
        row = self._conn.execute(
            f"SELECT {_BUDGET_COLUMNS} FROM budgets WHERE dataset = ? AND analyst = ?",
            (dataset, _analyst_key(analyst)),
        ).fetchone()
        return None if row is None else self._budget(row)

    def list_budgets(self) -> list[BudgetRow]:
        rows = self._conn.execute(
            f"SELECT {_BUDGET_COLUMNS} FROM budgets ORDER BY dataset, analyst"
        ).fetchall()
        return [self._budget(r) for r in rows]

    def put_budget(self, row: BudgetRow) -> None:
        self._conn.execute(
            f"INSERT OR REPLACE INTO budgets ({_BUDGET_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
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
        cursor = self._conn.execute(
            "INSERT INTO entries (ts, kind, dataset, analyst, loss, query, query_hash, mechanism,"
            " ref, receipt, actor, detail) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
        )
        entry_id = cursor.lastrowid
        if entry_id is None:  # pragma: no cover - sqlite always sets it after an INSERT
            raise LedgerError("the ledger store did not assign an entry id")
        return entry_id

    def get_entry(self, entry_id: int) -> LedgerEntry | None:
        row = self._conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE id = ?", (entry_id,)
        ).fetchone()
        return None if row is None else self._entry(row)

    def entries_referring_to(self, entry_id: int) -> list[LedgerEntry]:
        rows = self._conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE ref = ? ORDER BY id", (entry_id,)
        ).fetchall()
        return [self._entry(r) for r in rows]

    def entries(
        self, dataset: str | None = None, analyst: str | None = None, after_id: int = 0
    ) -> Sequence[LedgerEntry]:
        sql = f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE id > ?"
        args: list[Any] = [after_id]
        if dataset is not None:
            sql += " AND dataset = ?"
            args.append(dataset)
            if analyst is not None:
                sql += " AND analyst = ?"
                args.append(analyst)
        sql += " ORDER BY id"
        return [self._entry(r) for r in self._conn.execute(sql, args).fetchall()]

    # -- decoding (any malformed value means the file was damaged: fail closed) --

    def _budget(self, row: tuple[Any, ...]) -> BudgetRow:
        where = f"{self._where}: budget {row[0]!r}/{row[1]!r}"
        if not isinstance(row[7], int) or row[7] < 0:
            raise LedgerCorruptError(f"{where}: charge count {row[7]!r} is not a count")
        return BudgetRow(
            dataset=str(row[0]),
            analyst=str(row[1]) or None,
            privacy_unit=str(row[2]),
            total=loss_from_text(str(row[3]), where),
            spend=Spend(
                parse_fraction(str(row[4]), where),
                parse_fraction(str(row[5]), where),
                parse_fraction(str(row[6]), where),
            ),
            charges=row[7],
            alerts_fired=tuple(a for a in str(row[8]).split(",") if a),
            created_at=float(row[9]),
        )

    def _entry(self, row: tuple[Any, ...]) -> LedgerEntry:
        where = f"{self._where}: entry {row[0]!r}"
        kind = row[2]
        if kind not in ENTRY_KINDS:
            raise LedgerCorruptError(f"{where}: unknown entry kind {kind!r}; the ledger is damaged")
        entry_kind: EntryKind = kind
        return LedgerEntry(
            id=int(row[0]),
            timestamp=float(row[1]),
            kind=entry_kind,
            dataset=str(row[3]),
            analyst=str(row[4]) or None,
            loss=None if row[5] is None else loss_from_text(str(row[5]), where),
            query=str(row[6]),
            query_hash=str(row[7]),
            mechanism=str(row[8]),
            ref=None if row[9] is None else int(row[9]),
            receipt=str(row[10]),
            actor=str(row[11]),
            detail=str(row[12]),
        )


class _Request:
    __slots__ = ("done", "error", "event", "result", "work")

    def __init__(self, work: Callable[[StoreTransaction], Any]) -> None:
        self.work = work
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.event = threading.Event()  # set when done, or when handed the leader's role


class SQLiteStore:
    """A ledger in one SQLite file (or ``":memory:"`` for tests).

    Args:
        path: the database file; created (with its schema) if missing.
        timeout: seconds to wait for another process's write lock before giving up.
        group_commit: share one transaction between threads writing at the same time.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 60.0, group_commit: bool = True
    ) -> None:
        self.path = str(path)
        self.timeout = timeout
        self.group_commit = group_commit
        self._memory = self.path == ":memory:"
        self._cv = threading.Condition()
        self._pending: list[_Request] = []
        self._leader = False
        self._read_lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        self._wconn = self._connect()
        self._ledger_id = self._initialise()
        self._rconn = self._wconn if self._memory else self._connect()
        self._lock_fd: int | None = None
        if fcntl is not None and not self._memory:
            try:
                self._lock_fd = os.open(f"{self.path}-writer.lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                self._lock_fd = None  # e.g. a read-only directory: SQLite's own locking suffices

    # -- connections --

    def _connect(self) -> sqlite3.Connection:
        try:
            if not self._memory:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            if not self._memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                if mode is None or str(mode[0]).lower() != "wal":
                    raise LedgerError(
                        f"ledger {self.path!r}: SQLite refused WAL journaling ({mode!r}); put "
                        "the ledger on a local file system that supports it."
                    )
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            return conn
        except sqlite3.DatabaseError as exc:
            raise self._translate(exc) from exc

    def _initialise(self) -> str:
        conn = self._wconn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise self._translate(exc) from exc
        try:
            tables = {
                str(r[0])
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            tables.discard("sqlite_sequence")
            if tables and "meta" not in tables:
                raise LedgerCorruptError(
                    f"{self.path!r} is an SQLite database but not a dpkit ledger (tables: "
                    f"{sorted(tables)}); point dpkit at a new file or at an existing ledger."
                )
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
            if not meta:
                ledger_id = hashlib.sha256(
                    f"{os.path.abspath(self.path)}|{time.time_ns()}|{os.getpid()}".encode()
                ).hexdigest()[:16]
                meta = {
                    "format": FORMAT_NAME,
                    "schema_version": SCHEMA_VERSION,
                    "ledger_id": ledger_id,
                }
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._translate(exc) from exc
            raise
        if meta.get("format") != FORMAT_NAME:
            raise LedgerCorruptError(
                f"{self.path!r} is not a dpkit ledger (format {meta.get('format')!r})."
            )
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self.path!r} has schema version {meta.get('schema_version')!r}; this "
                f"dpkit reads version {SCHEMA_VERSION}. Upgrade dpkit to read it."
            )
        return str(meta.get("ledger_id", ""))

    def _translate(self, exc: sqlite3.Error) -> LedgerError:
        message = str(exc)
        if isinstance(exc, sqlite3.OperationalError):
            if "locked" in message or "busy" in message:
                return LedgerError(
                    f"ledger {self.path!r} stayed locked by another writer for more than "
                    f"{self.timeout} s ({message}); nothing was recorded. Retry, or raise timeout."
                )
            if "disk" in message or "readonly" in message or "unable to open" in message:
                return LedgerError(f"ledger {self.path!r}: {message}; nothing was recorded.")
        if isinstance(exc, sqlite3.IntegrityError):
            return LedgerError(f"ledger {self.path!r} refused a change: {message}")
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
            return LedgerCorruptError(
                f"ledger {self.path!r} is damaged or not a dpkit ledger ({message}); dpkit "
                "refuses to charge against it. Restore the file (and its -wal file) from a backup."
            )
        return LedgerError(f"ledger {self.path!r}: {message}; nothing was recorded.")

    def _check_usable(self) -> None:
        if self._closed:
            raise LedgerError(f"ledger {self.path!r} is closed; open it again with Ledger.open.")
        if os.getpid() != self._pid:
            raise LedgerError(
                f"ledger {self.path!r} was opened in another process (pid {self._pid}); a forked "
                "child must open its own Ledger."
            )

    @property
    def ledger_id(self) -> str:
        return self._ledger_id

    # -- the protocol --

    def write(self, work: Callable[[StoreTransaction], T]) -> T:
        """Run ``work`` in a durable transaction, sharing it with concurrent writers.

        The first writer becomes the leader; writers arriving while it works queue up. When its
        transaction committed, the leader answers the requests it carried and hands the role to
        the oldest queued writer, which takes every queued request into the next transaction.
        Each thread is woken exactly once.
        """
        self._check_usable()
        request = _Request(work)
        with self._cv:
            self._pending.append(request)
            lead = not self._leader
            self._leader = True
        if not lead:
            request.event.wait()
            if request.done:
                return self._answer(request)
        with self._cv:  # we lead: take the queue (ours included)
            if self.group_commit:
                batch, self._pending = self._pending, []
            else:
                self._pending.remove(request)
                batch = [request]
        successor: _Request | None = None
        try:
            self._run_batch(batch)
        finally:
            with self._cv:
                for r in batch:
                    r.done = True
                if self._pending:
                    successor = self._pending[0]
                else:
                    self._leader = False
                    self._cv.notify_all()  # only close() waits on this
            for r in batch:
                if r is not request:
                    r.event.set()
            if successor is not None:
                successor.event.set()
        return self._answer(request)

    @staticmethod
    def _answer(request: _Request) -> Any:
        if request.error is not None:
            raise request.error
        return request.result

    def _run_batch(self, batch: list[_Request]) -> None:
        with self._process_lock():
            self._run_batch_locked(batch)

    @contextlib.contextmanager
    def _process_lock(self) -> Iterator[None]:
        """Queue writers of other processes on a kernel lock (woken at once when it is free),
        instead of SQLite's busy handler, which polls with sleeps of up to 100 ms. Advisory: the
        correctness still comes from BEGIN IMMEDIATE; the kernel drops the lock of a dead
        process."""
        if self._lock_fd is None:
            yield
            return
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _run_batch_locked(self, batch: list[_Request]) -> None:
        conn = self._wconn
        txn = _Txn(conn, f"ledger {self.path!r}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            refused = self._translate(exc)
            for r in batch:
                r.error = refused
            return
        try:
            for r in batch:
                conn.execute("SAVEPOINT dpkit_request")
                try:
                    r.result = r.work(txn)
                except BaseException as exc:
                    conn.execute("ROLLBACK TO dpkit_request")
                    r.error = self._translate(exc) if isinstance(exc, sqlite3.Error) else exc
                conn.execute("RELEASE dpkit_request")
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            error: BaseException = self._translate(exc) if isinstance(exc, sqlite3.Error) else exc
            for r in batch:
                if r.error is None:
                    r.result = None
                    r.error = error

    def read(self, work: Callable[[StoreTransaction], T]) -> T:
        self._check_usable()
        if self._memory:
            return self.write(work)
        with self._read_lock:
            conn = self._rconn
            try:
                conn.execute("BEGIN")
                try:
                    return work(_Txn(conn, f"ledger {self.path!r}"))
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._translate(exc) from exc

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            while self._leader:
                self._cv.wait()
        with self._read_lock:
            for conn in {id(self._wconn): self._wconn, id(self._rconn): self._rconn}.values():
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._lock_fd)
                self._lock_fd = None

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"
