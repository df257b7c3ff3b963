"""The small storage protocol every ledger store implements (SQLite now, PostgreSQL later).

A store offers two things: ``write(work)`` runs ``work`` inside one atomic, durable transaction
that holds the ledger's write lock (so the check and the record of a charge cannot interleave with
another writer, in this process or any other), and ``read(work)`` runs ``work`` on a consistent
snapshot. ``work`` receives a :class:`StoreTransaction` with a handful of row operations; all the
budget logic lives in :class:`dpkit.ledger.Ledger`, so a new store only has to move rows.

If ``work`` raises, the store rolls back everything it did and re-raises: nothing is recorded.
When ``write`` returns, the transaction is on stable storage (an acknowledged charge survives a
crash or power loss).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from dpkit.core.losses import PrivacyLoss
from dpkit.ledger._model import EntryKind, LedgerEntry, Spend

__all__ = ["BudgetRow", "LedgerStore", "NewEntry", "StoreTransaction"]

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

    def write(self, work: Callable[[StoreTransaction], T]) -> T: ...

    def read(self, work: Callable[[StoreTransaction], T]) -> T: ...

    def close(self) -> None: ...
