"""An in-memory ledger store for tests and notebooks: atomic, thread-safe, not durable."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from dpkit.ledger._model import LedgerEntry
from dpkit.ledger._store import BudgetRow, NewEntry, StoreTransaction

__all__ = ["MemoryStore"]

T = TypeVar("T")

_ids = itertools.count(1)


class _MemoryTxn:
    __slots__ = ("_budgets", "_entries")

    def __init__(
        self, budgets: dict[tuple[str, str], BudgetRow], entries: list[LedgerEntry]
    ) -> None:
        self._budgets = budgets
        self._entries = entries

    def get_budget(self, dataset: str, analyst: str | None) -> BudgetRow | None:
        return self._budgets.get((dataset, analyst or ""))

    def list_budgets(self) -> list[BudgetRow]:
        return [self._budgets[k] for k in sorted(self._budgets)]

    def put_budget(self, row: BudgetRow) -> None:
        self._budgets[(row.dataset, row.analyst or "")] = row

    def append_entry(self, entry: NewEntry) -> int:
        entry_id = len(self._entries) + 1
        self._entries.append(entry.with_id(entry_id))
        return entry_id

    def get_entry(self, entry_id: int) -> LedgerEntry | None:
        if 1 <= entry_id <= len(self._entries):
            return self._entries[entry_id - 1]
        return None

    def entries_referring_to(self, entry_id: int) -> list[LedgerEntry]:
        return [e for e in self._entries if e.ref == entry_id]

    def entries(
        self, dataset: str | None = None, analyst: str | None = None, after_id: int = 0
    ) -> Sequence[LedgerEntry]:
        out = []
        for e in self._entries[after_id:]:
            if dataset is not None and e.dataset != dataset:
                continue
            if dataset is not None and analyst is not None and (e.analyst or "") != analyst:
                continue
            out.append(e)
        return out


class MemoryStore:
    """Keeps the ledger in a dict and a list. Writes are atomic (rolled back on error)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._budgets: dict[tuple[str, str], BudgetRow] = {}
        self._entries: list[LedgerEntry] = []
        self._ledger_id = f"memory-{next(_ids)}"

    @property
    def ledger_id(self) -> str:
        return self._ledger_id

    def write(self, work: Callable[[StoreTransaction], T], *, sync: bool = True) -> T:
        with self._lock:
            budgets = dict(self._budgets)
            count = len(self._entries)
            try:
                result = work(_MemoryTxn(budgets, self._entries))
            except BaseException:
                del self._entries[count:]
                raise
            self._budgets = budgets
            return result

    def read(self, work: Callable[[StoreTransaction], T]) -> T:
        with self._lock:
            return work(_MemoryTxn(dict(self._budgets), self._entries))

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"MemoryStore({self._ledger_id!r})"
