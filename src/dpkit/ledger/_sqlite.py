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
import struct
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
from dpkit.ledger._store import (
    BudgetRow,
    GroupCommitStore,
    NewEntry,
    StoreTransaction,
    _Request,
)

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


def _budget_values(row: BudgetRow) -> tuple[Any, ...]:
    """A budget row's column values in ``_BUDGET_COLUMNS`` order (both SQL stores)."""
    return (
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
    )


def _entry_values(entry: NewEntry) -> tuple[Any, ...]:
    """A new entry's column values in ``_ENTRY_COLUMNS`` order without the id (both SQL
    stores)."""
    return (
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
    )


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
            _budget_values(row),
        )

    def append_entry(self, entry: NewEntry) -> int:
        cursor = self._conn.execute(
            "INSERT INTO entries (ts, kind, dataset, analyst, loss, query, query_hash, mechanism,"
            " ref, receipt, actor, detail) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            _entry_values(entry),
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


# fdatasync flushes the data and the metadata needed to read it back (the file's size), as
# SQLite's own sync does on Linux; fsync elsewhere.
_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class _SharedFsync:
    """Group fsync of a ledger's write-ahead log across every process that writes it.

    A writer COMMITs with ``synchronous=NORMAL`` (SQLite appends the transaction's frames to
    the WAL, i.e. hands them to the kernel, and returns without an fsync), releases the write
    lock, takes a *ticket*, and waits until an fsync of the WAL that *started after* the ticket
    was taken has returned. Such an fsync covers every frame written before it began - in
    particular this COMMIT's, whichever process wrote them - so the transaction is then exactly
    as durable as a ``synchronous=FULL`` COMMIT, which fsyncs the same file before returning.

    Two small files next to the ledger coordinate the processes, through kernel locks (``flock``,
    released by the kernel when a process dies, so a crash never leaves one held):

    * ``<ledger>-fsync`` holds two counters, ``started`` and ``done``, read and written only
      under an ``flock`` of that file (so no process ever reads a torn value);
    * ``<ledger>-fsync.lock`` is held by the one process that is fsyncing.

    ``ticket()`` returns ``started + 1``: the number of the first fsync that will start after
    it. ``wait(t)`` takes the fsync lock; if ``done >= t`` someone's fsync covered us, else it
    sets ``started += 1`` (to ``k >= t``), fsyncs the WAL, and sets ``done = k``. While one
    process fsyncs, every other writer COMMITs and queues on the fsync lock; the next holder's
    one fsync covers all of them (group commit across processes). If a holder dies mid-fsync,
    ``done`` stays behind ``started`` and the next holder fsyncs again, so nobody is ever
    answered on the strength of an fsync that did not finish.

    Checkpoints keep SQLite's own ``synchronous=NORMAL`` protection: the WAL is fsync-ed before
    its frames are copied into the database, the database after, and the WAL header before the
    WAL is reused, so a checkpoint can never drop a transaction the WAL held.
    """

    def __init__(self, db_path: str) -> None:
        # the name SQLite gives the WAL: of the resolved path (symbolic links followed), fixed
        # at open, so a later chdir cannot point us at another file
        db_path = os.path.realpath(db_path)
        self._wal = f"{db_path}-wal"
        self._dir = os.path.dirname(db_path)
        self._state_fd = os.open(f"{db_path}-fsync", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._sync_fd = os.open(f"{db_path}-fsync.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            os.close(self._state_fd)
            raise
        # flock is held per open file, not per thread: threads of this process take these first
        self._state_mutex = threading.Lock()
        self._sync_mutex = threading.Lock()
        self._wal_inode: tuple[int, int] | None = None
        self.fsyncs = 0  # fsyncs this process ran (for tests and benchmarks)

    @contextlib.contextmanager
    def _state(self) -> Iterator[list[int]]:
        with self._state_mutex:
            fcntl.flock(self._state_fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(self._state_fd, 16, 0)
                values = list(struct.unpack("<QQ", raw)) if len(raw) == 16 else [0, 0]
                before = list(values)
                yield values
                if values != before:
                    os.pwrite(self._state_fd, struct.pack("<QQ", *values), 0)
            finally:
                fcntl.flock(self._state_fd, fcntl.LOCK_UN)

    def ticket(self) -> int:
        """Call after COMMIT returned: the number of an fsync that will cover that COMMIT."""
        with self._state() as state:
            return state[0] + 1

    def wait(self, ticket: int) -> None:
        """Return once an fsync numbered ``ticket`` or later has completed (maybe running it)."""
        with self._sync_mutex:
            fcntl.flock(self._sync_fd, fcntl.LOCK_EX)
            try:
                with self._state() as state:
                    if state[1] >= ticket:
                        return
                    state[0] += 1
                    number = state[0]
                self._fsync_wal()
                with self._state() as state:
                    state[1] = max(state[1], number)
            finally:
                fcntl.flock(self._sync_fd, fcntl.LOCK_UN)

    def _fsync_wal(self) -> None:
        # (the WAL exists while any connection is open, and the writer waiting for this fsync
        # holds one: if it is missing, something is wrong, and the error reaches the caller)
        fd = os.open(self._wal, os.O_RDONLY)
        try:
            _datasync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self.fsyncs += 1
        inode = (st.st_dev, st.st_ino)
        if inode != self._wal_inode:  # a new WAL file: make its directory entry durable too
            dir_fd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._wal_inode = inode

    def close(self) -> None:
        for fd in (self._state_fd, self._sync_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class SQLiteStore(GroupCommitStore):
    """A ledger in one SQLite file (or ``":memory:"`` for tests).

    Args:
        path: the database file; created (with its schema) if missing.
        timeout: seconds to wait for another process's write lock before giving up.
        group_commit: share one transaction between threads writing at the same time.
        shared_fsync: share fsyncs with the other processes writing the same file (group commit
            across processes, see :class:`_SharedFsync`); ``False`` lets every COMMIT fsync
            under the write lock (SQLite's ``synchronous=FULL``). Durability is the same.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 60.0,
        group_commit: bool = True,
        shared_fsync: bool = True,
    ) -> None:
        self.path = str(path)
        self.timeout = timeout
        self._memory = self.path == ":memory:"
        self._init_group_commit(group_commit)
        self._read_lock = threading.Lock()
        self._wconn = self._connect()
        self._ledger_id = self._initialise()
        self._rconn = self._wconn if self._memory else self._connect()
        self._lock_fd: int | None = None
        self._fsync: _SharedFsync | None = None
        if fcntl is not None and not self._memory:
            try:
                self._lock_fd = os.open(f"{self.path}-writer.lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                self._lock_fd = None  # e.g. a read-only directory: SQLite's own locking suffices
            if shared_fsync and self._lock_fd is not None:
                try:
                    self._fsync = _SharedFsync(self.path)
                except OSError:
                    self._fsync = None  # keep synchronous=FULL: every COMMIT fsyncs itself
        if self._fsync is not None:
            # COMMIT only writes the WAL; _await_durable fsyncs it before anyone is answered
            self._wconn.execute("PRAGMA synchronous = NORMAL")

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

    def _describe(self) -> str:
        return f"ledger {self.path!r}"

    @property
    def ledger_id(self) -> str:
        return self._ledger_id

    # -- the protocol --

    def _run_batch(self, batch: list[_Request]) -> object | None:
        """One transaction for the batch, under the writer lock; returns the durability ticket
        (``None`` when the COMMIT already fsync-ed, or nothing was committed)."""
        with self._process_lock():
            committed = self._run_batch_locked(batch)
        if not committed or self._fsync is None:
            return None
        return self._fsync.ticket()

    def _await_durable(self, token: object) -> None:
        assert self._fsync is not None and isinstance(token, int)
        try:
            self._fsync.wait(token)
        except OSError as exc:
            raise LedgerError(
                f"ledger {self.path!r}: could not fsync the write-ahead log ({exc}); the "
                "change was written but is not confirmed durable, so it is not acknowledged "
                "(a charge in it still counts as spent)."
            ) from exc

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

    def _run_batch_locked(self, batch: list[_Request]) -> bool:
        """Run the batch in one transaction; True if a COMMIT with a successful request ran."""
        conn = self._wconn
        txn = _Txn(conn, f"ledger {self.path!r}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            refused = self._translate(exc)
            for r in batch:
                r.error = refused
            return False
        try:
            if len(batch) == 1:  # alone: no savepoint needed, a refusal rolls back everything
                only = batch[0]
                try:
                    only.result = only.work(txn)
                except BaseException as exc:
                    only.result = None
                    only.error = self._translate(exc) if isinstance(exc, sqlite3.Error) else exc
                    conn.execute("ROLLBACK")
                    return False
            else:
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
            return False
        return any(r.error is None for r in batch)

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
        if not self._close_writers():
            return
        with self._read_lock:
            for conn in {id(self._wconn): self._wconn, id(self._rconn): self._rconn}.values():
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._lock_fd)
                self._lock_fd = None
            if self._fsync is not None:
                self._fsync.close()
                self._fsync = None

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"
