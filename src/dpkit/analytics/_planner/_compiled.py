"""The compiled query: output registries, noisy outputs, finishers and the release step."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics._engines._base import BoundedPlan, Output, ValueSpec
from dpkit.analytics._engines._columns import canonical
from dpkit.analytics._planner._noise import noise_expected_abs, noise_halfwidth, noise_variance
from dpkit.analytics._planner._types import Part
from dpkit.analytics._query import (
    KeySet,
)
from dpkit.analytics._results import Accuracy
from dpkit.core._framework import Measurement
from dpkit.core._losses import PrivacyLoss
from dpkit.errors import PrivacyCheckError

# ------------------------------------------------------------------ compiled pieces
GroupKey: TypeAlias = tuple[Any, ...]


@dataclass
class OutputRegistry:
    """Deduplicated value specs and outputs of one bounded plan."""

    values: list[ValueSpec] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)

    def value(self, spec: ValueSpec) -> int:
        if spec not in self.values:
            self.values.append(spec)
        return self.values.index(spec)

    def output(self, kind: Any, value: int = -1) -> int:
        out = Output(kind, value)
        if out not in self.outputs:
            self.outputs.append(out)
        return self.outputs.index(out)


@dataclass
class Noisy:
    """One measurement on one integer output vector."""

    output: int
    measurement: Measurement[Any]
    _halfwidths: dict[float, float] = field(default_factory=dict, repr=False, compare=False)

    def apply(self, exact: Any) -> np.ndarray:
        """The exact integer outputs plus the measurement's lattice noise, exactly.

        ``exact`` holds integers of any size (Python ints or int64). The noise is added in
        Python integers, never saturated or wrapped: an int64 total beyond ±2^62 used to be
        clamped by the measurement's input saturation (a silently wrong sum at a large ε over
        billions of rows, where the grid is fine), and the Gaussian's int64 addition could wrap.
        The noise is the measurement's own lattice noise, so the privacy map is unchanged.
        Returns int64 when every released value fits, else float64 (the nearest doubles).
        """
        array = np.asarray(exact)
        array = array.reshape(-1) if array.dtype != object else np.array(list(array.reshape(-1)))
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        noise = self.measurement.noise
        lattice = getattr(noise, "lattice", None)
        if lattice is None or getattr(noise, "exponent", None) != 0:  # pragma: no cover
            raise PrivacyCheckError(
                f"internal check failed: {self.measurement.name} is not integer lattice noise"
            )
        z = np.asarray(lattice.sample(array.size), dtype=np.int64)
        try:
            ints = array.astype(np.int64)  # OverflowError: a value beyond int64
        except OverflowError:
            ints = None
        if ints is not None:
            total = ints + z
            wrapped = ((ints >= 0) == (z >= 0)) & ((total >= 0) != (ints >= 0))
            if not wrapped.any():
                return total
        released = [int(v) + int(d) for v, d in zip(array.tolist(), z.tolist(), strict=True)]
        if all(_INT64_MIN <= v <= _INT64_MAX for v in released):
            return np.array(released, dtype=np.int64)
        return np.array([float(v) for v in released], dtype=np.float64)

    def halfwidth(self, alpha: float) -> float:
        """Cached per alpha: a compiled query may be released many times (audits)."""
        if alpha not in self._halfwidths:
            self._halfwidths[alpha] = noise_halfwidth(self.measurement, alpha)
        return self._halfwidths[alpha]

    def variance(self) -> float:
        return noise_variance(self.measurement)

    def expected_abs(self) -> float:
        return noise_expected_abs(self.measurement)

    @property
    def loss(self) -> PrivacyLoss:
        return self.measurement.loss


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

Finisher: TypeAlias = Callable[["Context"], None]


@dataclass
class Context:
    """What release() passes to each aggregation's finisher.

    ``groups`` are the groups' canonical identities (keys of ``extra``); ``labels`` the key
    values shown in the released tables, in the same order.
    """

    groups: list[GroupKey]
    main: dict[int, np.ndarray]  # output index -> exact values in group order
    extra: dict[int, dict[GroupKey, dict[int, list[int]]]]  # plan -> group -> bin -> outputs
    alpha: float
    columns: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    accuracy: dict[str, Accuracy] = field(default_factory=dict)
    key_names: tuple[str, ...] = ()
    labels: list[GroupKey] = field(default_factory=list)


@dataclass(frozen=True)
class CompiledQuery:
    """A query ready to run: the exact relational plans and the calibrated measurements.

    Attributes:
        plans: the bounded plans to run (plan 0 is the main one).
        loss: the total privacy loss of releasing this query (checked <= the query budget).
        split: the loss of each aggregation (and of partition selection).
        description: a readable account of bounds, sensitivities and mechanisms.
        parts: the explanation as data: each aggregation's (and partition selection's)
            mechanisms with their losses, its composed loss and its text.
    """

    plans: tuple[BoundedPlan, ...]
    loss: PrivacyLoss
    split: Mapping[str, PrivacyLoss]
    description: str
    keys: tuple[str, ...]
    key_set: KeySet | None
    finishers: tuple[Finisher, ...]
    selection: Noisy | None = None
    selection_threshold: int = 0
    mechanisms: tuple[str, ...] = ()
    parts: tuple[Part, ...] = ()

    def explain(self) -> str:
        """How the query will be answered, without touching data."""
        return self.description

    def release(
        self, results: Sequence[pa.Table], alpha: float = 0.05
    ) -> tuple[dict[str, pd.DataFrame], dict[str, Accuracy]]:
        """Add noise to the engine's exact results and build the released tables.

        Engine results are matched to groups by the key values' canonical identity
        (:func:`~dpkit.analytics._engines._columns.canonical`), read from the plans' reserved
        result columns.
        """
        main_rows, seen = _rows_by_group(results[0], self.plans[0])
        if self.key_set is not None:
            labels = list(self.key_set.rows)
            groups = [tuple(canonical(v) for v in row) for row in labels]
        elif not self.keys:
            labels = groups = [()]
        else:
            groups = sorted(main_rows, key=_sort_key)
            labels = [seen[g] for g in groups]
        n_out = len(self.plans[0].outputs)
        empty = {0: [0] * n_out}
        exact = {
            i: np.array([int(main_rows.get(g, empty)[0][i]) for g in groups], dtype=object)
            for i in range(n_out)
        }
        if self.selection is not None:
            units = exact[self.selection.output]
            noisy_units = self.selection.apply(np.array(units, dtype=np.int64))
            chosen = [i for i, v in enumerate(noisy_units) if v >= self.selection_threshold]
            groups = [groups[i] for i in chosen]
            labels = [labels[i] for i in chosen]
            exact = {i: values[chosen] for i, values in exact.items()}
        extra = {
            p: _rows_by_group(table, self.plans[p])[0] for p, table in enumerate(results) if p > 0
        }
        context = Context(
            groups,
            {i: np.array(v, dtype=object) for i, v in exact.items()},
            extra,
            alpha,
            key_names=self.keys,
            labels=labels,
        )
        for finish in self.finishers:
            finish(context)
        # one constructor call: inserting columns one by one costs ~0.3 ms each in pandas
        columns: dict[str, Any] = {k: [g[i] for g in labels] for i, k in enumerate(self.keys)}
        columns.update(context.columns)
        main = pd.DataFrame(columns)
        return {"main": main, **context.tables}, context.accuracy


def _sort_key(group: GroupKey) -> tuple[Any, ...]:
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in group)


def _as_int(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return int(value)
    return int(value)


def _rows_by_group(
    table: pa.Table, plan: BoundedPlan
) -> tuple[dict[GroupKey, dict[int, list[int]]], dict[GroupKey, GroupKey]]:
    """The engine's exact outputs by canonical group identity -> bin (0 without bins), and the
    key values the engine returned for each identity (for display).

    Columns are read by their reserved names (:attr:`BoundedPlan.result_columns`), never by a
    user's column name.
    """
    expected = list(plan.result_columns)
    if list(table.column_names) != expected:
        raise PrivacyCheckError(
            "internal check failed: an engine returned columns "
            f"{list(table.column_names)}, not {expected}; nothing was released. Please report "
            "this."
        )
    data = table.to_pydict()
    n_keys = len(plan.keys)
    key_cols = [data[n] for n in plan.group_columns[:n_keys]]
    bins = data[plan.group_columns[n_keys]] if plan.bins is not None else None
    out_cols = [data[n] for n in plan.output_columns]
    result: dict[GroupKey, dict[int, list[int]]] = {}
    seen: dict[GroupKey, GroupKey] = {}
    for row in range(table.num_rows):
        shown = tuple(col[row] for col in key_cols)
        key = tuple(canonical(v) for v in shown)
        seen.setdefault(key, shown)
        b = int(bins[row]) if bins is not None else 0
        if b in result.get(key, {}):
            # one group, two rows: the engine bounded them as two groups (sensitivity broken)
            raise PrivacyCheckError(
                "internal check failed: an engine returned one group twice (keys that compare "
                "equal); nothing was released. Please report this."
            )
        result.setdefault(key, {})[b] = [_as_int(col[row]) for col in out_cols]
    return result, seen
