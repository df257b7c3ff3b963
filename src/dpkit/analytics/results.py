"""What a query returns: a :class:`Release` of result tables, their accuracy and the receipt.

A release's main table has one row per group: the key columns, then for each aggregation
``name`` its released value and, where the noise gives one, a (1-α) interval ``name_low`` /
``name_high`` for the *bounded* value (the exact aggregate of the clamped, contribution-bounded
data, which is what the noise protects; clamping and dropped rows add a bias the interval does
not cover). Histograms and workloads are released as extra tables, found by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.core.losses import PrivacyLoss

__all__ = ["Accuracy", "Release"]


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How accurate one aggregation's released values are.

    Attributes:
        kind: ``"exact"`` — ``halfwidth`` is exact for the noise added (P(|error| > halfwidth)
            <= alpha); ``"approximate"`` — a first-order (delta-method) interval for a ratio of
            noisy values; ``"rank"`` — for quantiles: with probability >= 1 - alpha the released
            value's rank is within ``halfwidth`` of the target rank.
        halfwidth: the interval half-width (in the value's units, or in rows for ``"rank"``),
            for the first group when it varies by group.
        expected_abs: E|noise| when known.
        mechanism: the mechanism used, e.g. ``"geometric"``, ``"discrete_gaussian"``,
            ``"exponential"``.
        loss: the part of the query's privacy loss this aggregation spent.
    """

    kind: Literal["exact", "approximate", "rank"]
    halfwidth: float
    alpha: float
    mechanism: str
    loss: PrivacyLoss
    expected_abs: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Release:
    """The released tables of one query, with accuracy, privacy loss and ledger receipt.

    Attributes:
        table: the main result (one row per group).
        tables: every result table by name (``"main"``, and one per histogram / workload).
        accuracy: per aggregation name.
        loss: the privacy loss charged for the whole query.
        receipt: the ledger's receipt (or a local record when no ledger is attached).
        remaining: the budget left after this query, when known.
        plan: the compiled plan, as text.
    """

    tables: Mapping[str, pd.DataFrame]
    accuracy: Mapping[str, Accuracy]
    loss: PrivacyLoss
    receipt: Any = None
    remaining: PrivacyLoss | None = None
    plan: str = ""
    split: Mapping[str, PrivacyLoss] = field(default_factory=dict)

    @property
    def table(self) -> pd.DataFrame:
        """The main result table."""
        return self.tables["main"]

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def to_pandas(self) -> pd.DataFrame:
        """The main result table (a copy)."""
        return self.table.copy()

    def __repr__(self) -> str:
        names = ", ".join(self.tables)
        return f"Release(tables=[{names}], loss={self.loss}, rows={len(self.table)})"
