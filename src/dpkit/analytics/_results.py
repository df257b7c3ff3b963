"""What a query returns: a :class:`TableRelease` of result tables, their accuracy and the
receipt (a :class:`dpkit.Release` whose value is the tables by name).

A release's main table has one row per group: the key columns, then for each aggregation
``name`` its released value and, where the noise gives one, a (1-α) interval ``name_low`` /
``name_high`` for the *bounded* value (the exact aggregate of the clamped, contribution-bounded
data, which is what the noise protects; clamping and dropped rows add a bias the interval does
not cover). Histograms and workloads are released as extra tables, found by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.core._losses import PrivacyLoss
from dpkit.core._release import Release

__all__ = ["Accuracy", "TableRelease", "post_process"]


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How accurate one aggregation's released values are.

    Attributes:
        kind: ``"exact"`` — ``halfwidth`` is exact for the noise added (P(|error| > halfwidth)
            <= alpha); ``"approximate"`` — a first-order (delta-method) interval for a ratio of
            noisy values; ``"rank"`` — for quantiles, a bound in rows with probability
            >= 1 - alpha; ``note`` says exactly what it bounds. For the exponential mechanism:
            at most q·n + halfwidth rows lie below the released value and at least
            q·n − halfwidth rows at or below it (rows tied at the value count on either side;
            n is the group's rows with a value); for inverse sensitivity: the rows to add or
            remove for the released value to become the exact q-quantile.
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


@dataclass(frozen=True, init=False)
class TableRelease(Release[Mapping[str, pd.DataFrame]]):
    """The released tables of one query, with accuracy, privacy loss and ledger receipt: the
    :class:`dpkit.Release` a Session query returns.

    Attributes:
        value: every result table by name (``"main"``, and one per histogram / workload); also
            :attr:`tables`.
        table: the main result (one row per group).
        accuracy: per aggregation name.
        loss: the privacy loss charged for the whole query.
        receipt: the ledger's receipt (or a local record when no ledger is attached).
        remaining: the budget left after this query, when known.
        plan: the compiled plan, as text.
        split: the loss of each aggregation, by name.
    """

    receipt: Any = None
    accuracy: Mapping[str, Accuracy] = field(default_factory=dict)
    plan: str = ""
    split: Mapping[str, PrivacyLoss] = field(default_factory=dict)

    def __init__(
        self,
        tables: Mapping[str, pd.DataFrame],
        accuracy: Mapping[str, Accuracy],
        loss: PrivacyLoss,
        receipt: Any = None,
        remaining: PrivacyLoss | None = None,
        plan: str = "",
        split: Mapping[str, PrivacyLoss] | None = None,
    ) -> None:
        fields: dict[str, Any] = {"value": tables, "loss": loss, "receipt": receipt}
        fields |= {"accuracy": accuracy, "remaining": remaining, "plan": plan}
        fields["split"] = {} if split is None else split
        for name, value in fields.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    @property
    def tables(self) -> Mapping[str, pd.DataFrame]:
        """Every result table by name (the release's ``value``)."""
        return self.value

    @property
    def table(self) -> pd.DataFrame:
        """The main result table."""
        return self.tables["main"]

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def to_pandas(self) -> pd.DataFrame:
        """The main result table (a copy)."""
        return self.table.copy()

    def display(self, query: Any) -> dict[str, pd.DataFrame]:
        """Every table post-processed for display (see :func:`post_process`); ``table`` stays raw.

        ``query`` is the query that was evaluated (or its aggregations): it says which columns
        are counts and which bounds were declared.

        Example:
            >>> import pandas as pd
            >>> import dpkit as dp
            >>> from dpkit.analytics import Session, count
            >>> df = pd.DataFrame({"user": [1, 2, 3]})
            >>> session = Session(df, privacy_unit="user", budget=dp.PureDP(1), max_rows=1)
            >>> query = session.query().agg(count())
            >>> shown = session.evaluate(query, epsilon=1).display(query)["main"]
            >>> bool((shown["count"] >= 0).all() and (shown["count_low"] >= 0).all())
            True
        """
        aggregations = _aggregations_of(query)
        return {name: post_process(frame, aggregations) for name, frame in self.tables.items()}

    def __repr__(self) -> str:
        names = ", ".join(self.tables)
        return f"TableRelease(tables=[{names}], loss={self.loss}, rows={len(self.table)})"


def _aggregations_of(query: Any) -> tuple[Any, ...]:
    if isinstance(query, Iterable) and not isinstance(query, str | bytes):
        return tuple(query)
    plan = getattr(query, "plan", query)
    aggregations = getattr(plan, "aggregations", None)
    if aggregations is None:
        raise TypeError("display() needs the evaluated query (or its aggregations)")
    return tuple(aggregations)


def clip_columns(frame: pd.DataFrame, column: str, low: float | None, high: float | None) -> None:
    """Clip ``column`` and its interval columns into [low, high] (None: unbounded), in place."""
    for name in (column, f"{column}_low", f"{column}_high"):
        if name in frame.columns:
            values = frame[name].astype("float64")
            frame[name] = values.clip(lower=low, upper=high)


def round_counts(frame: pd.DataFrame, column: str) -> None:
    """Clip ``column`` and its interval columns at 0 and round them to integers, in place."""
    for name in (column, f"{column}_low", f"{column}_high"):
        if name in frame.columns:
            values = frame[name].astype("float64").clip(lower=0)
            frame[name] = np.round(values).astype("int64") if values.notna().all() else values


def post_process(frame: pd.DataFrame, aggregations: Iterable[Any]) -> pd.DataFrame:
    """A copy of a released table made readable, by post-processing only (free under DP).

    * counts (``COUNT(*)``, distinct units, histogram bins, marginal cells and ranges): clipped
      at 0 and rounded to integers, with their intervals;
    * sums: clipped to the signs the declared bounds allow (a sum of values >= 0 is >= 0);
    * means, medians and quantiles: clipped into the declared bounds;
    * variances and standard deviations: clipped into [0, the largest the bounds allow].

    Each aggregate family declares its own step (:attr:`dpkit.analytics._families.Family.display`).
    The raw values are unbiased; these are not (clipping moves them towards the feasible range).
    Use the raw :attr:`TableRelease.table` for further statistics.
    """
    from dpkit.analytics._families import family_of

    out = frame.copy()
    for agg in aggregations:
        family = family_of(agg)
        if family is not None and family.display is not None:
            family.display(out, agg)
    return out
