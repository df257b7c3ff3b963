"""The privacy-budget ledger: exact budgets, atomic reservations, an append-only durable record.

>>> from dpkit.core._losses import PureDP
>>> ledger = Ledger.open(":memory:")
>>> _ = ledger.create_budget("visits", PureDP(1))
>>> for _ in range(100):
...     ledger.commit(ledger.reserve("visits", PureDP(0.01)))  # doctest: +ELLIPSIS
Receipt(...)
...
>>> ledger.remaining("visits")
PureDP(epsilon=Fraction(0, 1))
"""

from dpkit.ledger._alerts import DEFAULT_THRESHOLDS, AlertEvent, BudgetMonitor
from dpkit.ledger._ledger import Ledger, open_store
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
)
from dpkit.ledger._sqlite import SQLiteStore
from dpkit.ledger._store import BudgetRow, LedgerStore, NewEntry, StoreTransaction

__all__ = [
    "DEFAULT_THRESHOLDS",
    "AlertEvent",
    "BudgetMonitor",
    "BudgetRow",
    "BudgetStatus",
    "Ledger",
    "LedgerCorruptError",
    "LedgerEntry",
    "LedgerError",
    "LedgerStore",
    "MemoryStore",
    "NewEntry",
    "Receipt",
    "ReplayReport",
    "Reservation",
    "ReservationStateError",
    "SQLiteStore",
    "Spend",
    "StoreTransaction",
    "UnknownBudgetError",
    "open_store",
]
