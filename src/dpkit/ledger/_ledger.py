"""The privacy-budget ledger: exact budgets, atomic reservations, an append-only record.

Life of a release::

    reservation = ledger.reserve("visits", PureDP(0.1), analyst="ana", query=plan_text)
    # ... only now read the data and run the mechanism ...
    receipt = ledger.commit(reservation)          # or ledger.fail(reservation, reason)

``reserve`` checks the budget and records the charge in one atomic, durable transaction, before
any data is read; if the composed loss would exceed the dataset's budget (or the analyst's budget
under it) it raises :class:`~dpkit.errors.BudgetExceededError` and records nothing. A reservation
is spent from that moment on: ``fail`` and crashes keep the charge (no refunds - an error message
or a timing difference can leak as much as a result).

Durability (spend before speak): ``reserve`` returns only once the charge is on stable storage
(fsync-ed), so no data is read for a charge that a crash - of any process, of the machine, or a
power loss - could erase. ``commit`` and ``fail`` only *finalise* a reservation: they add a
record, never a charge, because an unfinalised reservation already counts in full. So by
default they return once their transaction is committed and handed to the operating system:
that survives the death of any process (kill -9), is ordered before every later write, and
reaches stable storage with the next fsync of the ledger (any later reservation's, from any
process). A power loss in between can at worst turn a committed reservation back into a pending
one - the same charge, still spent, whose receipt id is derived from the reservation's id. This
halves the fsyncs of a release cycle. ``durable_receipts=True`` makes them wait for stable
storage too. (docs/ledger.md, "Durability and group commit", has the argument.)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpkit.core._losses import PrivacyLoss
from dpkit.errors import BudgetExceededError, DPError, InvalidParameterError
from dpkit.ledger._alerts import AlertEvent, BudgetMonitor
from dpkit.ledger._memory import MemoryStore
from dpkit.ledger._model import (
    BudgetStatus,
    LedgerCorruptError,
    LedgerEntry,
    LedgerError,
    Receipt,
    ReplayReport,
    Reservation,
    ReservationStateError,
    Spend,
    UnknownBudgetError,
    _scope_name,
    charge_of,
    check_budget,
    check_loss,
    fits,
    loss_kind,
    query_hash,
    remaining_loss,
    spent_loss,
    used_fraction,
)
from dpkit.ledger._sqlite import SQLiteStore
from dpkit.ledger._store import BudgetRow, LedgerStore, NewEntry, StoreTransaction

__all__ = ["Ledger", "open_store"]


def open_store(
    target: str | os.PathLike[str], *, timeout: float = 60.0, group_commit: bool = True
) -> LedgerStore:
    """A store for ``target``: ``"sqlite:///relative.db"``, ``"sqlite:////abs/path.db"``, a
    plain path, ``":memory:"`` (SQLite in memory), ``"memory://"`` (the dict store) or
    ``"postgresql://user:pass@host/db[?schema=name]"`` (PostgreSQL, needs ``dpkit[postgres]``)."""
    if isinstance(target, os.PathLike):
        return SQLiteStore(os.fspath(target), timeout=timeout, group_commit=group_commit)
    if not isinstance(target, str) or not target:
        raise InvalidParameterError(
            "path_or_url", target, "a file path or a URL such as 'sqlite:///ledger.db'"
        )
    if target == "memory://":
        return MemoryStore()
    if target.startswith("sqlite://"):
        rest = target[len("sqlite://") :]
        if not rest.startswith("/"):
            raise InvalidParameterError(
                "path_or_url", target, "sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        path = rest[1:]
        if path in ("", ":memory:"):
            path = ":memory:"
        return SQLiteStore(path, timeout=timeout, group_commit=group_commit)
    if target.startswith(("postgresql://", "postgres://")):
        from dpkit.ledger._postgres import PostgresStore

        return PostgresStore(target, timeout=timeout, group_commit=group_commit)
    if "://" in target:
        scheme = target.split("://", 1)[0]
        raise InvalidParameterError(
            "path_or_url",
            target,
            "a SQLite path or URL ('sqlite:///ledger.db'), 'postgresql://...' or 'memory://'",
            f"The {scheme!r} store is not available in this version of dpkit.",
        )
    return SQLiteStore(target, timeout=timeout, group_commit=group_commit)


def _check_text(name: str, value: Any) -> str:
    """A string every store can hold: no NUL character (PostgreSQL's text refuses it) and no
    lone surrogate (not encodable as UTF-8). Refused here, from the caller's own input, before
    anything is written - otherwise the store's encoder would fail mid-batch."""
    if not isinstance(value, str):
        raise InvalidParameterError(name, value, "a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        ok = False
    else:
        ok = "\x00" not in value
    if not ok:
        raise InvalidParameterError(
            name,
            value.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace"),
            "text without NUL characters or lone surrogates (storable as UTF-8)",
        )
    return value


def _storable(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced (for a record that must be written)."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def _check_name(name: str, value: Any, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidParameterError(
            name, value, "a non-empty string" + (" or None" if optional else "")
        )
    _check_text(name, value)
    if "," in value and name == "privacy_unit":
        raise InvalidParameterError(name, value, "a name without commas")
    return value


class Ledger:
    """Budgets per dataset (and per analyst under a dataset), with an append-only record.

    Open one with :meth:`Ledger.open`. All methods are safe to call from many threads, and
    (with the SQLite store) from many processes on the same file.
    """

    def __init__(
        self,
        store: LedgerStore,
        *,
        monitor: BudgetMonitor | None = None,
        verify: bool = True,
        clock: Callable[[], float] = time.time,
        durable_receipts: bool = False,
    ) -> None:
        self._store = store
        self._sync_final = bool(durable_receipts)
        self.monitor = monitor if monitor is not None else BudgetMonitor(log=True)
        self._clock = clock
        self._exhausted: set[tuple[str, str | None]] = set()
        self._hint_lock = threading.Lock()
        if verify:
            report = self.replay()
            if not report.ok:
                raise LedgerCorruptError(
                    "the ledger's stored totals disagree with its entries ("
                    + "; ".join(report.mismatches[:5])
                    + "). dpkit refuses to charge against it (fails closed). Inspect it with "
                    "Ledger.open(..., verify=False).replay(), then ledger.repair(actor=...) keeps "
                    "the larger of the two records."
                )

    @classmethod
    def open(
        cls,
        path_or_url: str | os.PathLike[str] | LedgerStore,
        *,
        monitor: BudgetMonitor | None = None,
        verify: bool = True,
        timeout: float = 60.0,
        group_commit: bool = True,
        clock: Callable[[], float] = time.time,
        durable_receipts: bool = False,
    ) -> Ledger:
        """Open (creating if needed) the ledger at ``path_or_url``.

        Args:
            path_or_url: ``"sqlite:///ledger.db"``, a path, ``":memory:"``, ``"memory://"``, or a
                :class:`LedgerStore` instance.
            monitor: where threshold alerts go (default: 50/80/100 % to the log).
            verify: replay the entries and refuse to open a ledger whose totals disagree.
            timeout: seconds to wait for another process's write lock.
            group_commit: let concurrent threads share a transaction (and its fsync).
            durable_receipts: make ``commit`` and ``fail`` wait for stable storage too. By
                default they return once the operating system holds them (they survive kill -9
                of any process, and the next reservation's fsync makes them power-loss
                durable); the charge itself is always on stable storage before ``reserve``
                returns. See the module docstring.
        """
        if isinstance(path_or_url, str | os.PathLike | Path):
            store = open_store(path_or_url, timeout=timeout, group_commit=group_commit)
        else:
            store = path_or_url
        try:
            return cls(
                store,
                monitor=monitor,
                verify=verify,
                clock=clock,
                durable_receipts=durable_receipts,
            )
        except BaseException:
            store.close()
            raise

    @property
    def store(self) -> LedgerStore:
        return self._store

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self._store!r})"

    # -- budgets ----------------------------------------------------------------------------

    def create_budget(
        self,
        dataset: str,
        total: PrivacyLoss,
        *,
        analyst: str | None = None,
        privacy_unit: str = "row",
        actor: str = "",
    ) -> BudgetStatus:
        """Create the budget of ``dataset`` (or of ``analyst`` under it).

        An analyst's budget lives under the dataset's: every charge counts against both, so
        analysts together can never spend more than the dataset's budget. An analyst budget must
        itself be within the dataset budget, and uses the dataset's privacy unit.
        """
        _check_name("dataset", dataset)
        _check_name("analyst", analyst, optional=True)
        _check_name("privacy_unit", privacy_unit)
        _check_text("actor", actor)
        total = check_budget(total, "total")
        now = self._clock()

        def work(txn: StoreTransaction) -> BudgetStatus:
            if txn.get_budget(dataset, analyst) is not None:
                raise LedgerError(
                    f"{_scope_name(dataset, analyst)} already has a budget; change it with "
                    "ledger.adjust_budget(...) (an administrator action, recorded)."
                )
            unit = privacy_unit
            if analyst is not None:
                parent = txn.get_budget(dataset, None)
                if parent is None:
                    raise UnknownBudgetError(dataset, None, _known(txn))
                if not total <= parent.total:
                    raise InvalidParameterError(
                        "total",
                        total,
                        f"within the dataset's budget ({parent.total})",
                        "An analyst's budget lives under the dataset's budget.",
                    )
                if privacy_unit not in ("row", parent.privacy_unit):
                    raise InvalidParameterError(
                        "privacy_unit",
                        privacy_unit,
                        f"the dataset's privacy unit {parent.privacy_unit!r}",
                    )
                unit = parent.privacy_unit
            row = BudgetRow(dataset, analyst, unit, total, Spend(), 0, (), now)
            txn.put_budget(row)
            txn.append_entry(
                NewEntry(
                    now,
                    "create",
                    dataset,
                    analyst,
                    loss=total,
                    actor=actor,
                    detail=f"privacy_unit={unit}",
                )
            )
            return _status(row)

        return self._store.write(work)

    def adjust_budget(
        self,
        dataset: str,
        total: PrivacyLoss,
        *,
        analyst: str | None = None,
        actor: str = "admin",
        reason: str = "",
    ) -> BudgetStatus:
        """Set a budget's total (an administrator action, recorded as an ``adjust`` entry).

        Raising is always possible; lowering is allowed only down to what was already spent -
        nobody can lower a budget below its spend. The kind (PureDP / ApproxDP / ZCDP) stays.
        Thresholds above the new usage are re-armed.
        """
        _check_name("dataset", dataset)
        _check_name("analyst", analyst, optional=True)
        _check_text("actor", actor)
        _check_text("reason", reason)
        total = check_budget(total, "total")
        now = self._clock()

        def work(txn: StoreTransaction) -> tuple[BudgetStatus, list[AlertEvent]]:
            row = _require(txn, dataset, analyst)
            if type(total) is not type(row.total):
                raise InvalidParameterError(
                    "total",
                    total,
                    f"a {type(row.total).__name__} like the current {row.total}",
                    "A budget keeps its kind; create a new dataset budget to change kind.",
                )
            if not fits(row.spend, total):
                raise InvalidParameterError(
                    "total",
                    total,
                    f"at least what was already spent ({spent_loss(row.spend, row.total)})",
                    "Spent budget cannot be taken back.",
                )
            if analyst is not None:
                parent = _require(txn, dataset, None)
                if not total <= parent.total:
                    raise InvalidParameterError(
                        "total",
                        total,
                        f"within the dataset's budget ({parent.total})",
                        "Raise the dataset's budget first.",
                    )
            entry_id = txn.append_entry(
                NewEntry(now, "adjust", dataset, analyst, loss=total, actor=actor, detail=reason)
            )
            used = used_fraction(row.spend, total)
            fired = tuple(a for a in row.alerts_fired if Fraction(a) <= used)
            new_row = BudgetRow(
                row.dataset,
                row.analyst,
                row.privacy_unit,
                total,
                row.spend,
                row.charges,
                fired,
                row.created_at,
            )
            events = self._alerts(txn, new_row, entry_id, now)
            txn.put_budget(_with_alerts(new_row, events))
            return _status(new_row), events

        status, events = self._store.write(work)
        with self._hint_lock:
            self._exhausted = {h for h in self._exhausted if h[0] != dataset}
        self.monitor.deliver(events)
        return status

    # -- charges ----------------------------------------------------------------------------

    def reserve(
        self,
        dataset: str,
        loss: PrivacyLoss,
        *,
        analyst: str | None = None,
        query: str = "",
        mechanism: str = "",
        privacy_unit: str | None = None,
    ) -> Reservation:
        """Check and record a charge atomically, before any data is read.

        Returns only once the charge is on stable storage (fsync-ed; shared with concurrent
        writers of every process, see docs/ledger.md), so a result computed after it can never
        outlive its charge.

        Raises:
            BudgetExceededError: the composed loss would exceed the analyst's or the dataset's
                budget; nothing was recorded.
            UnknownBudgetError: no budget for the dataset (or the analyst).
            InvalidParameterError: the loss is not a valid privacy loss, or cannot be charged to
                a budget of this kind (e.g. zCDP against pure ε-DP).
        """
        _check_name("dataset", dataset)
        _check_name("analyst", analyst, optional=True)
        loss = check_loss(loss)
        if not isinstance(query, str) or not isinstance(mechanism, str):
            raise InvalidParameterError("query/mechanism", (query, mechanism), "strings")
        _check_text("query", query)
        _check_text("mechanism", mechanism)
        now = self._clock()
        digest = query_hash(query)

        def check(txn: StoreTransaction) -> list[BudgetRow]:
            return _charged_rows(txn, dataset, analyst, loss, privacy_unit)

        # Once a budget has refused a charge, later charges are checked on a snapshot first: a
        # refusal needs no write lock (a snapshot taken after this call began shows a spend at
        # least as large as any earlier one, and spends only grow), so an exhausted budget does
        # not queue every caller behind the writers. The snapshot never grants anything.
        hint = (dataset, analyst)
        if hint in self._exhausted:
            self._store.read(check)

        def work(txn: StoreTransaction) -> tuple[Reservation, list[AlertEvent]]:
            try:
                updated = check(txn)
            except BudgetExceededError:
                with self._hint_lock:
                    self._exhausted.add(hint)
                raise
            entry_id = txn.append_entry(
                NewEntry(
                    now,
                    "reserve",
                    dataset,
                    analyst,
                    loss=loss,
                    query=query,
                    query_hash=digest,
                    mechanism=mechanism,
                    actor=analyst or "",
                )
            )
            events: list[AlertEvent] = []
            for row in updated:
                row_events = self._alerts(txn, row, entry_id, now)
                txn.put_budget(_with_alerts(row, row_events))
                events.extend(row_events)
            reservation = Reservation(
                entry_id, dataset, analyst, loss, query, mechanism, now, self._store.ledger_id
            )
            return reservation, events

        reservation, events = self._store.write(work)
        self.monitor.deliver(events)
        return reservation

    def commit(self, reservation: Reservation, receipt: str | None = None) -> Receipt:
        """Finalise a reservation after its result was computed; returns the receipt.

        Returns once the record is committed and survives the death of any process; it is on
        stable storage with the next fsync (at once with ``durable_receipts=True``). Losing it
        to a power loss cannot lower a spend: the reservation it finalises was already durable
        and counts in full (see the module docstring)."""
        if receipt is not None and (not isinstance(receipt, str) or not receipt):
            raise InvalidParameterError("receipt", receipt, "a non-empty string or None")
        if receipt is not None:
            _check_text("receipt", receipt)
        now = self._clock()
        receipt_id = receipt or f"rcpt-{self._store.ledger_id[:8]}-{reservation.id:010d}"

        def work(txn: StoreTransaction) -> Receipt:
            self._check_open_reservation(txn, reservation)
            txn.append_entry(
                NewEntry(
                    now,
                    "commit",
                    reservation.dataset,
                    reservation.analyst,
                    loss=reservation.loss,
                    ref=reservation.id,
                    receipt=receipt_id,
                    actor=reservation.analyst or "",
                )
            )
            return Receipt(
                receipt_id,
                reservation.id,
                reservation.dataset,
                reservation.analyst,
                reservation.loss,
                now,
            )

        return self._store.write(work, sync=self._sync_final)

    def fail(self, reservation: Reservation, reason: str = "") -> None:
        """Record that the reserved query failed. The charge stays: there are no refunds."""
        now = self._clock()

        def work(txn: StoreTransaction) -> None:
            self._check_open_reservation(txn, reservation)
            txn.append_entry(
                NewEntry(
                    now,
                    "fail",
                    reservation.dataset,
                    reservation.analyst,
                    loss=reservation.loss,
                    ref=reservation.id,
                    actor=reservation.analyst or "",
                    detail=_storable(str(reason)[:2000]),
                )
            )

        self._store.write(work, sync=self._sync_final)

    def _check_open_reservation(self, txn: StoreTransaction, reservation: Reservation) -> None:
        if not isinstance(reservation, Reservation):
            raise InvalidParameterError(
                "reservation", reservation, "a Reservation returned by ledger.reserve"
            )
        if reservation.ledger_id != self._store.ledger_id:
            raise ReservationStateError(
                f"reservation {reservation.id} was made on another ledger "
                f"({reservation.ledger_id}), not this one ({self._store.ledger_id})."
            )
        entry = txn.get_entry(reservation.id)
        if entry is None or entry.kind != "reserve" or entry.dataset != reservation.dataset:
            raise ReservationStateError(f"reservation {reservation.id} is not in this ledger.")
        done = [e for e in txn.entries_referring_to(reservation.id) if e.kind in ("commit", "fail")]
        if done:
            raise ReservationStateError(
                f"reservation {reservation.id} was already finalised ({done[0].kind} at entry "
                f"{done[0].id}); each reservation is committed or failed exactly once."
            )

    # -- queries ----------------------------------------------------------------------------

    def budget(self, dataset: str, analyst: str | None = None) -> BudgetStatus:
        """The budget of ``dataset`` (or of ``analyst`` under it) and what was spent."""
        return self._store.read(lambda txn: _status(_require(txn, dataset, analyst)))

    def budgets(self, dataset: str | None = None) -> list[BudgetStatus]:
        """Every budget (of one dataset, if given), dataset budgets before their analysts'."""
        rows = self._store.read(lambda txn: txn.list_budgets())
        return [_status(r) for r in rows if dataset is None or r.dataset == dataset]

    def spent(self, dataset: str, analyst: str | None = None) -> PrivacyLoss:
        """What has been spent, in the budget's kind (an exact value or a certified bound)."""
        return self.budget(dataset, analyst).spent

    def remaining(self, dataset: str, analyst: str | None = None) -> PrivacyLoss:
        """Budget minus spend, per coordinate (whether a next charge fits: :meth:`can_afford`)."""
        return self.budget(dataset, analyst).remaining

    def can_afford(self, dataset: str, loss: PrivacyLoss, analyst: str | None = None) -> bool:
        """Would ``reserve(dataset, loss, analyst=analyst)`` succeed right now? (No record.)"""
        loss = check_loss(loss)

        def work(txn: StoreTransaction) -> bool:
            rows = [_require(txn, dataset, None)]
            if analyst is not None:
                rows.append(_require(txn, dataset, analyst))
            for row in rows:
                scope = _scope_name(row.dataset, row.analyst)
                try:
                    if not fits(
                        row.spend + charge_of(loss, row.total, scope, row.spend), row.total
                    ):
                        return False
                except (BudgetExceededError, InvalidParameterError):
                    return False
            return True

        return self._store.read(work)

    def history(
        self,
        dataset: str | None = None,
        analyst: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[LedgerEntry]:
        """Entries in order (of one dataset and analyst, and of some kinds, if given)."""
        entries = self._store.read(lambda txn: list(txn.entries(dataset, analyst)))
        if kinds is not None:
            entries = [e for e in entries if e.kind in kinds]
        return entries

    def pending(self) -> list[LedgerEntry]:
        """Reservations never committed nor failed (e.g. their process crashed): still spent."""
        return self._store.read(lambda txn: _pending(txn.entries()))

    def consumption(
        self, dataset: str | None = None, analyst: str | None = None
    ) -> dict[tuple[str, str | None], list[tuple[float, Fraction, PrivacyLoss]]]:
        """Per budget, the running (time, used share, spent) after every charge, from the entries.

        Used by ``dpkit budget history`` to plot consumption over time.
        """
        entries = self._store.read(lambda txn: list(txn.entries(dataset)))
        series: dict[tuple[str, str | None], list[tuple[float, Fraction, PrivacyLoss]]] = {}
        rows: dict[tuple[str, str], BudgetRow] = {}
        for e in entries:
            key = (e.dataset, e.analyst or "")
            if e.kind in ("create", "adjust") and e.loss is not None:
                rows = _apply(rows, e)
                continue
            if e.kind != "reserve" or e.loss is None:
                continue
            rows = _apply(rows, e)
            for scope_key in [(e.dataset, "")] + ([key] if e.analyst else []):
                row = rows.get(scope_key)
                if row is None:
                    continue
                scope_analyst = scope_key[1] or None
                if analyst is not None and scope_analyst not in (None, analyst):
                    continue
                point = (
                    e.timestamp,
                    used_fraction(row.spend, row.total),
                    spent_loss(row.spend, row.total),
                )
                series.setdefault((scope_key[0], scope_analyst), []).append(point)
        return series

    # -- integrity --------------------------------------------------------------------------

    def replay(self) -> ReplayReport:
        """Recompute every budget's total and spend from the entries; compare with the stored."""
        return self._store.read(_replay)

    def repair(self, *, actor: str) -> ReplayReport:
        """After a failed replay: keep, per budget, the larger of the stored and replayed spend.

        Never lowers a spend. Recorded as ``adjust`` entries with the actor's name.
        """
        _check_name("actor", actor)
        now = self._clock()

        def work(txn: StoreTransaction) -> ReplayReport:
            report = _replay(txn)
            rebuilt = _rebuild(txn.entries())
            for row in txn.list_budgets():
                key = (row.dataset, row.analyst or "")
                if key not in rebuilt:
                    continue
                fresh = rebuilt[key]
                spend = row.spend.join(fresh.spend)
                if spend == row.spend and fresh.charges <= row.charges:
                    continue
                txn.put_budget(
                    BudgetRow(
                        row.dataset,
                        row.analyst,
                        row.privacy_unit,
                        row.total,
                        spend,
                        max(row.charges, fresh.charges),
                        row.alerts_fired,
                        row.created_at,
                    )
                )
                txn.append_entry(
                    NewEntry(
                        now,
                        "adjust",
                        row.dataset,
                        row.analyst,
                        loss=row.total,
                        actor=actor,
                        detail="repair: spend raised to the replayed total",
                    )
                )
            return report

        return self._store.write(work)

    # -- alerts -----------------------------------------------------------------------------

    def _alerts(
        self, txn: StoreTransaction, row: BudgetRow, entry_id: int, now: float
    ) -> list[AlertEvent]:
        used = used_fraction(row.spend, row.total)
        events = []
        for threshold in self.monitor.crossed(used, row.alerts_fired):
            event = AlertEvent(
                row.dataset,
                row.analyst,
                threshold,
                used,
                spent_loss(row.spend, row.total),
                row.total,
                entry_id,
                now,
            )
            txn.append_entry(
                NewEntry(
                    now,
                    "alert",
                    row.dataset,
                    row.analyst,
                    ref=entry_id,
                    detail=f"threshold={threshold};used={used}",
                )
            )
            events.append(event)
        return events


# --- helpers ------------------------------------------------------------------------------------


def _charged_rows(
    txn: StoreTransaction,
    dataset: str,
    analyst: str | None,
    loss: PrivacyLoss,
    privacy_unit: str | None,
) -> list[BudgetRow]:
    """The budget rows after charging ``loss``, or the error that refuses the charge."""
    scopes = [_require(txn, dataset, None)]
    if analyst is not None:
        scopes.append(_require(txn, dataset, analyst))
    if privacy_unit is not None and privacy_unit != scopes[0].privacy_unit:
        raise InvalidParameterError(
            "privacy_unit",
            privacy_unit,
            f"the privacy unit of dataset {dataset!r}: {scopes[0].privacy_unit!r}",
        )
    updated: list[BudgetRow] = []
    for row in reversed(scopes):  # the analyst's budget is checked first
        scope = _scope_name(row.dataset, row.analyst)
        new_spend = row.spend + charge_of(loss, row.total, scope, row.spend)
        if not fits(new_spend, row.total):
            raise BudgetExceededError(loss, remaining_loss(row.spend, row.total), scope=scope)
        updated.append(
            BudgetRow(
                row.dataset,
                row.analyst,
                row.privacy_unit,
                row.total,
                new_spend,
                row.charges + 1,
                row.alerts_fired,
                row.created_at,
            )
        )
    return updated


def _known(txn: StoreTransaction) -> list[str]:
    return [r.dataset + (f"/{r.analyst}" if r.analyst else "") for r in txn.list_budgets()]


def _require(txn: StoreTransaction, dataset: str, analyst: str | None) -> BudgetRow:
    row = txn.get_budget(dataset, analyst)
    if row is None:
        raise UnknownBudgetError(dataset, analyst, _known(txn))
    return row


def _with_alerts(row: BudgetRow, events: list[AlertEvent]) -> BudgetRow:
    if not events:
        return row
    fired = row.alerts_fired + tuple(str(e.threshold) for e in events)
    return BudgetRow(
        row.dataset,
        row.analyst,
        row.privacy_unit,
        row.total,
        row.spend,
        row.charges,
        fired,
        row.created_at,
    )


def _status(row: BudgetRow) -> BudgetStatus:
    return BudgetStatus(
        dataset=row.dataset,
        analyst=row.analyst,
        privacy_unit=row.privacy_unit,
        total=row.total,
        spent=spent_loss(row.spend, row.total),
        remaining=remaining_loss(row.spend, row.total),
        used=used_fraction(row.spend, row.total),
        charges=row.charges,
        spend=row.spend,
    )


def _pending(entries: Sequence[LedgerEntry]) -> list[LedgerEntry]:
    reserved: dict[int, LedgerEntry] = {}
    for e in entries:
        if e.kind == "reserve":
            reserved[e.id] = e
        elif e.kind in ("commit", "fail") and e.ref is not None:
            reserved.pop(e.ref, None)
    return list(reserved.values())


def _apply(
    rows: dict[tuple[str, str], BudgetRow], e: LedgerEntry
) -> dict[tuple[str, str], BudgetRow]:
    """Apply one entry to budgets being rebuilt from scratch (mutates and returns ``rows``)."""
    key = (e.dataset, e.analyst or "")
    if e.kind == "create" and e.loss is not None:
        unit = (
            e.detail.removeprefix("privacy_unit=")
            if e.detail.startswith("privacy_unit=")
            else "row"
        )
        rows[key] = BudgetRow(e.dataset, e.analyst, unit, e.loss, Spend(), 0, (), e.timestamp)
    elif e.kind == "adjust" and e.loss is not None and key in rows:
        r = rows[key]
        rows[key] = BudgetRow(
            r.dataset, r.analyst, r.privacy_unit, e.loss, r.spend, r.charges, (), r.created_at
        )
    elif e.kind == "reserve" and e.loss is not None:
        for scope_key in [(e.dataset, "")] + ([key] if e.analyst else []):
            if scope_key not in rows:
                continue
            r = rows[scope_key]
            try:
                charge = charge_of(e.loss, r.total, "replay", r.spend)
            except DPError:
                charge = Spend()  # refused at reserve time, so never recorded
            rows[scope_key] = BudgetRow(
                r.dataset,
                r.analyst,
                r.privacy_unit,
                r.total,
                r.spend + charge,
                r.charges + 1,
                (),
                r.created_at,
            )
    return rows


def _rebuild(entries: Sequence[LedgerEntry]) -> dict[tuple[str, str], BudgetRow]:
    """Budgets recomputed from scratch from the entries."""
    rows: dict[tuple[str, str], BudgetRow] = {}
    for e in entries:
        _apply(rows, e)
    return rows


def _replay(txn: StoreTransaction) -> ReplayReport:
    entries = txn.entries()
    rebuilt = _rebuild(entries)
    stored = {(r.dataset, r.analyst or ""): r for r in txn.list_budgets()}
    mismatches: list[str] = []
    for key in sorted(set(rebuilt) | set(stored)):
        name = _scope_name(key[0], key[1] or None)
        if key not in stored:
            mismatches.append(f"{name}: has entries but no stored budget")
            continue
        if key not in rebuilt:
            mismatches.append(f"{name}: stored budget without a 'create' entry")
            continue
        s, r = stored[key], rebuilt[key]
        if loss_kind(s.total) != loss_kind(r.total) or s.total != r.total:
            mismatches.append(f"{name}: stored total {s.total} but entries give {r.total}")
        if s.spend != r.spend:
            mismatches.append(
                f"{name}: stored spend {spent_loss(s.spend, s.total)} but entries give "
                f"{spent_loss(r.spend, r.total)}"
            )
        if s.charges != r.charges:
            mismatches.append(f"{name}: stored {s.charges} charges but entries give {r.charges}")
    return ReplayReport(
        entries=len(entries),
        budgets=len(stored),
        mismatches=tuple(mismatches),
        pending=tuple(e.id for e in _pending(entries)),
    )
