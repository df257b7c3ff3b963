"""The small storage protocol every ledger store implements (SQLite now, PostgreSQL later).

A store offers two things: ``write(work)`` runs ``work`` inside one atomic, durable transaction
that holds the ledger's write lock (so the check and the record of a charge cannot interleave with
another writer, in this process or any other), and ``read(work)`` runs ``work`` on a consistent
snapshot. ``work`` receives a :class:`StoreTransaction` with a handful of row operations; all the
budget logic lives in :class:`dpkit.ledger.Ledger`, so a new store only has to move rows.

If ``work`` raises, the store rolls back everything it did and re-raises: nothing is recorded.
When ``write`` returns, the transaction is on stable storage (an acknowledged charge survives a
crash or power loss).

:class:`GroupCommitStore` is the write path the SQLite and PostgreSQL stores share: concurrent
writers of one process share a transaction and its wait for stable storage (an fsync, a WAL
flush), which the stores share across processes too (see docs/ledger.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from dpkit.core._losses import PrivacyLoss
from dpkit.ledger._model import EntryKind, LedgerEntry, LedgerError, Spend

__all__ = ["BudgetRow", "GroupCommitStore", "LedgerStore", "NewEntry", "StoreTransaction"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """A budget with its running totals (kept in step with the entries, checked by replay)."""

    dataset: str
    analyst: str | None
    privacy_unit: str
    total: PrivacyLoss
    spend: Spend
    charges: int
    alerts_fired: tuple[str, ...] = field(default=())
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class NewEntry:
    """An entry about to be appended (the store assigns its id)."""

    timestamp: float
    kind: EntryKind
    dataset: str
    analyst: str | None
    loss: PrivacyLoss | None = None
    query: str = ""
    query_hash: str = ""
    mechanism: str = ""
    ref: int | None = None
    receipt: str = ""
    actor: str = ""
    detail: str = ""

    def with_id(self, entry_id: int) -> LedgerEntry:
        """The entry as stored under ``entry_id``."""
        return LedgerEntry(
            id=entry_id,
            timestamp=self.timestamp,
            kind=self.kind,
            dataset=self.dataset,
            analyst=self.analyst or None,
            loss=self.loss,
            query=self.query,
            query_hash=self.query_hash,
            mechanism=self.mechanism,
            ref=self.ref,
            receipt=self.receipt,
            actor=self.actor,
            detail=self.detail,
        )


class StoreTransaction(Protocol):
    """Row operations available inside ``LedgerStore.write`` / ``LedgerStore.read``."""

    def get_budget(self, dataset: str, analyst: str | None) -> BudgetRow | None: ...

    def list_budgets(self) -> list[BudgetRow]: ...

    def put_budget(self, row: BudgetRow) -> None:
        """Insert or replace the budget row for ``(row.dataset, row.analyst)``."""
        ...

    def append_entry(self, entry: NewEntry) -> int:
        """Append an entry; returns its id (strictly increasing). Entries are never changed."""
        ...

    def get_entry(self, entry_id: int) -> LedgerEntry | None: ...

    def entries_referring_to(self, entry_id: int) -> list[LedgerEntry]: ...

    def entries(
        self, dataset: str | None = None, analyst: str | None = None, after_id: int = 0
    ) -> Sequence[LedgerEntry]:
        """Entries in id order, optionally for one dataset (and one analyst under it)."""
        ...


class LedgerStore(Protocol):
    """Durable, atomic storage for a :class:`dpkit.ledger.Ledger`."""

    @property
    def ledger_id(self) -> str:
        """A stable identifier of this ledger (so a reservation cannot be used on another)."""
        ...

    def write(self, work: Callable[[StoreTransaction], T], *, sync: bool = True) -> T:
        """Run ``work`` in one atomic transaction; return once it is on stable storage.

        ``sync=False`` allows returning once the transaction is committed and survives the
        death of any process (the operating system holds it) but before it is on stable
        storage; it must still be ordered before every later write, so a later synced write
        makes it durable too. The ledger uses it only for finalising a reservation, whose
        charge was already durable (see ``Ledger(durable_receipts=...)``). A store may always
        treat it as ``sync=True``.
        """
        ...

    def read(self, work: Callable[[StoreTransaction], T]) -> T: ...

    def close(self) -> None: ...


class _Request:
    """One caller's ``work`` waiting in the group-commit queue."""

    __slots__ = ("done", "error", "event", "result", "sync", "work")

    def __init__(self, work: Callable[[StoreTransaction], Any], sync: bool = True) -> None:
        self.work = work
        self.sync = sync
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.event = _Latch()  # set when done, or when handed the leader's role


class _Latch:
    """A one-shot event with one waiter, waiting once: what the queue needs of
    ``threading.Event`` (a request is waited on once, by its own thread), at a fraction of its
    cost (one lock, no Condition); the group commit sets and waits on one per write. Setting
    it again is harmless."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        with contextlib.suppress(RuntimeError):  # already set
            self._lock.release()

    def wait(self) -> None:
        self._lock.acquire()


class GroupCommitStore:
    """Group commit for a store with one write connection per process (a base class).

    The first writer becomes the leader; writers arriving while it works queue up. The leader
    runs the whole queue in one transaction (``_run_batch``: each request in its own SAVEPOINT,
    so a refused request is rolled back alone), waits until its COMMIT is on stable storage
    (``_await_durable``; requests written with ``sync=False`` are answered before that wait),
    answers the callers of its batch, and hands the leader's role to the oldest queued writer,
    which takes every queued request into the next transaction. With ``pipeline = True`` the
    role is handed over right after the COMMIT instead, so a batch's wait overlaps the next
    batch's work. Either way an answer is never given before its transaction is durable, and
    each thread is woken exactly once.

    Subclasses implement ``_check_usable``, ``_run_batch`` (run every request of the batch in
    one transaction, set each request's ``result`` or ``error``, and return a token for
    ``_await_durable``, or ``None`` if nothing needs waiting for) and ``_await_durable`` (return
    once everything committed before the token was taken is on stable storage; raise if that
    cannot be confirmed).
    """

    group_commit: bool
    honours_unsynced = True  # False: every write waits for stable storage
    # True: hand the leader's role over as soon as the batch COMMITted, so the next batch runs
    # while this one waits for stable storage (more, smaller transactions); False: hand it over
    # after the wait, so the next batch gathers everyone who arrived meanwhile (fewer, larger
    # transactions: better when the CPU, not the disk, is the bottleneck).
    pipeline = False

    def _init_group_commit(self, group_commit: bool) -> None:
        self.group_commit = group_commit
        self._cv = threading.Condition()
        self._pending: list[_Request] = []
        self._leader = False
        self._in_flight = 0  # batches committed but not yet answered (waiting to be durable)
        self._closed = False
        self._pid = os.getpid()
        self.transactions = 0  # write transactions run by this store (tests, benchmarks)

    def _describe(self) -> str:  # pragma: no cover - every store overrides it
        """How errors name this ledger, e.g. ``ledger '/path/to/file'``."""
        raise NotImplementedError

    def _check_usable(self) -> None:
        if self._closed:
            raise LedgerError(f"{self._describe()} is closed; open it again with Ledger.open.")
        if os.getpid() != self._pid:
            raise LedgerError(
                f"{self._describe()} was opened in another process (pid {self._pid}); a forked "
                "child must open its own Ledger."
            )

    def _run_batch(self, batch: list[_Request]) -> object | None:  # pragma: no cover
        raise NotImplementedError

    def _await_durable(self, token: object) -> None:  # pragma: no cover
        raise NotImplementedError

    def _durability_unknown(self, exc: BaseException) -> BaseException:
        """The error given to callers whose COMMIT happened but could not be confirmed durable."""
        return exc

    def write(self, work: Callable[[StoreTransaction], T], *, sync: bool = True) -> T:
        """Run ``work`` in a durable transaction, sharing it with concurrent writers.

        With ``sync=False`` (stores whose ``honours_unsynced`` is true) the call returns once
        its COMMIT returned - written to the operating system, so it survives the death of any
        process, but on stable storage only with the next synced write or checkpoint."""
        self._check_usable()
        request = _Request(work, sync or not self.honours_unsynced)
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
            self._in_flight += 1
            self.transactions += 1
        token: object | None = None
        answered: list[_Request] = []
        handed = False
        try:
            try:
                token = self._run_batch(batch)
            except BaseException as exc:
                for r in batch:  # the batch failed: nobody in it is acknowledged
                    r.result = None
                    if r.error is None:
                        r.error = exc
                raise
            finally:
                if self.pipeline or token is None:
                    handed = True
                    self._hand_over()
            if token is not None:
                answered = [r for r in batch if not r.sync and r is not request]
                self._wake(answered)  # committed: what needs no fsync is answered now
                if all(not r.sync for r in batch if r.error is None):
                    token = None
            if token is not None:
                try:
                    self._await_durable(token)
                except BaseException as exc:
                    error = self._durability_unknown(exc)
                    for r in batch:  # committed, but not confirmed durable: not acknowledged
                        if r.error is None:
                            r.result = None
                            r.error = error
        finally:
            if not handed:
                self._hand_over()
            self._wake([r for r in batch if r is not request and r not in answered])
            with self._cv:
                request.done = True
                self._in_flight -= 1
                self._cv.notify_all()  # only close() waits on this
        return self._answer(request)

    def _wake(self, requests: list[_Request]) -> None:
        if not requests:
            return
        with self._cv:
            for r in requests:
                r.done = True
        for r in requests:
            r.event.set()

    def _hand_over(self) -> None:
        """Give the leader's role to the oldest queued writer (or leave it free)."""
        with self._cv:
            successor = self._pending[0] if self._pending else None
            if successor is None:
                self._leader = False
                self._cv.notify_all()
        if successor is not None:
            successor.event.set()

    @staticmethod
    def _answer(request: _Request) -> Any:
        if request.error is not None:
            raise request.error
        return request.result

    def _close_writers(self) -> bool:
        """Refuse new writes and wait for running ones; False if it was closed already."""
        with self._cv:
            if self._closed:
                return False
            self._closed = True
            while self._leader or self._in_flight:
                self._cv.wait()
        return True
