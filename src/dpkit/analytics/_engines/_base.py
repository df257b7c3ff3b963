"""The bounded relational plan every engine runs, and the small :class:`Engine` protocol.

A :class:`BoundedPlan` is exact and noise-free: it says which rows to keep (steps), how to bound
each privacy unit's contribution, how to turn value columns into clamped grid integers, and which
integer aggregates to compute per group. Its semantics, which every engine implements identically:

1. Apply the steps (derived columns and filters) in order; drop rows whose privacy unit is NULL
   and, with public keys, rows whose key is not one of them; with ``bins``, rows that fall in no
   bin.
2. Value ``j`` of a row is ``idx_j = round_half_up(clamp(v, lower, upper) · 2^-exponent)``, an
   integer; NULL and NaN values give NULL. When the value spec lists ``allowed`` integer ranges,
   ``idx_j`` is then moved to the nearest integer of their union (ties to the lower one).
3. Contribution bounding, per privacy unit: keep the ``max_groups`` groups with the smallest
   ``md5(group text)`` (ties, which only an md5 collision can cause, broken by the key values);
   in each, the ``max_rows_per_group`` rows with the smallest ``md5(row text)``; then overall
   the ``max_rows`` rows with the smallest ``md5(row text)``. The texts start with a secret salt
   and hold the unit, the keys and the row's integer values, each part escaped (``ESCAPE`` is
   doubled and ``SEPARATOR`` becomes ``ESCAPE u``) before the parts are joined by
   ``SEPARATOR``, so distinct tuples give distinct texts. The choice depends only on the unit's
   own rows (which is what the privacy analysis needs), and rows with equal texts contribute
   identically (so ties do not matter).
4. Per group (and bin): integer outputs — rows, distinct units, non-NULL values, sums of
   ``idx_j`` and of ``idx_j²`` — computed exactly.

A group is identified by its key values as :func:`~dpkit.analytics._engines._columns.canonical`
sees them: NaN keys are NULL and ``-0.0`` is ``0.0``, for bounding and aggregation alike.

Results use reserved column names (:attr:`BoundedPlan.group_columns`,
:attr:`BoundedPlan.output_columns`, all starting with ``__dpkit_``), never a user's column name,
so no user column can be mistaken for an aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics._engines._columns import RESERVED_PREFIX
from dpkit.analytics._expr import ColumnKind, Expr, Structural
from dpkit.analytics._keys import KeySet

__all__ = [
    "BinSpec",
    "BoundedPlan",
    "Engine",
    "Output",
    "Step",
    "ValueSpec",
    "escape_part",
    "plan_columns",
    "power_of_two_text",
    "project_to_ranges",
]

SEPARATOR = "\x1f"
"""Separates the parts of a hashed text (the ASCII unit separator)."""

ESCAPE = "\x1e"
"""Escapes SEPARATOR (and itself) inside a part of a hashed text (the ASCII record separator)."""


def escape_part(text: str) -> str:
    """A part of a hashed text, escaped so that joining parts by SEPARATOR is injective."""
    return text.replace(ESCAPE, ESCAPE + ESCAPE).replace(SEPARATOR, ESCAPE + "u")


@dataclass(frozen=True, slots=True)
class ValueSpec:
    """A value column turned into clamped grid integers.

    ``allowed``: sorted, disjoint integer ranges ``(lo, hi)`` (grid units); when given, each
    grid integer is moved to the nearest integer of their union (ties to the lower one), so every
    value lies in a declared union of intervals (``sum(col, values=...)``).
    """

    column: str
    lower: float
    upper: float
    exponent: int
    allowed: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class BinSpec:
    """An extra integer grouping column ``bin``: the grid integer of value ``value`` (``kind =
    "grid"``), or the index of the declared bin of ``column`` (``kind = "edges"``)."""

    kind: Literal["grid", "edges"]
    value: int = 0
    column: str = ""
    edges: tuple[float, ...] = ()


OutputKind: TypeAlias = Literal["rows", "units", "nonnull", "sum", "sumsq"]


@dataclass(frozen=True, slots=True)
class Output:
    """One exact per-group aggregate; ``value`` indexes :attr:`BoundedPlan.values`."""

    kind: OutputKind
    value: int = -1


@dataclass(frozen=True, slots=True, eq=False)
class Step(Structural):
    """A relational step before aggregation: ``filter`` (``expr`` is a predicate),
    ``derive`` (add/replace column ``name``) or ``select`` (keep ``columns``).

    Steps (and the plans that hold them) compare and hash *structurally*: ``==`` on an
    expression builds a predicate, so the dataclass's own ``__eq__`` (which compares fields with
    ``==``) raised "an expression has no truth value" wherever a plan met another plan — as a
    dict key, in a list, in ``==`` (issue 21: the service's warm engine keyed its caches by
    plans).
    """

    kind: Literal["filter", "derive", "select"]
    expr: Expr | None = None
    name: str = ""
    columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class BoundedPlan(Structural):
    """The exact part of a compiled query (see the module docstring for its semantics)."""

    steps: tuple[Step, ...]
    unit: str
    keys: tuple[str, ...]
    key_set: KeySet | None
    max_rows: int | None
    max_groups: int | None
    max_rows_per_group: int | None
    salt: int
    values: tuple[ValueSpec, ...]
    outputs: tuple[Output, ...]
    bins: BinSpec | None = None

    @property
    def group_columns(self) -> tuple[str, ...]:
        """Result columns that identify a group: one per key (in order), then the bin if any.

        Reserved names, never the keys' own names: a key column called like an output column
        cannot be confused with one.
        """
        names = tuple(f"{RESERVED_PREFIX}k{i}" for i in range(len(self.keys)))
        return names + ((f"{RESERVED_PREFIX}bin",) if self.bins else ())

    @property
    def output_columns(self) -> tuple[str, ...]:
        """Result columns of the outputs, in order (reserved names)."""
        return tuple(f"{RESERVED_PREFIX}o{i}" for i in range(len(self.outputs)))

    @property
    def result_columns(self) -> tuple[str, ...]:
        """Every column of :meth:`Engine.run`'s result, in order."""
        return self.group_columns + self.output_columns


def project_to_ranges(values: Any, allowed: tuple[tuple[int, int], ...]) -> Any:
    """The nearest integer of the union of ``allowed`` ranges to each int64 value (ties go down).

    The reference semantics of :attr:`ValueSpec.allowed` (numpy arrays in, int64 array out).
    """
    units = np.asarray(values, dtype=np.int64)
    lo = np.array([a for a, _ in allowed], dtype=np.int64)
    hi = np.array([b for _, b in allowed], dtype=np.int64)
    i = np.searchsorted(lo, units, side="right") - 1
    below = i < 0
    j = np.clip(i, 0, None)
    inside = ~below & (units <= hi[j])
    nxt = np.clip(i + 1, 0, lo.size - 1)
    down, up = hi[j], lo[nxt]
    pick_up = (i + 1 < lo.size) & ((up - units) < (units - down))
    out = np.where(inside, units, np.where(pick_up, up, down))
    return np.where(below, lo[0], out)


def plan_columns(plan: BoundedPlan) -> tuple[str, ...]:
    """The columns a plan reads after its steps: the unit, the keys, the value columns and the
    binned column (each once, in that order)."""
    names = [plan.unit, *plan.keys, *(v.column for v in plan.values)]
    if plan.bins is not None and plan.bins.kind == "edges":
        names.append(plan.bins.column)
    return tuple(dict.fromkeys(names))


def power_of_two_text(exponent: int) -> str:
    """2^exponent as the shortest decimal that parses back to exactly that double."""
    return repr(2.0**exponent)


@runtime_checkable
class Engine(Protocol):
    """Runs bounded plans on one table. Engines never draw noise."""

    name: str

    def schema(self) -> dict[str, ColumnKind]:
        """Column name -> kind, from metadata or the declared schema only (no rows are read)."""
        ...

    def run(self, plan: BoundedPlan) -> pa.Table:
        """The plan's result: one row per non-empty group, columns ``plan.result_columns``
        (group keys, bin, then the outputs: integers; sums may be arbitrary-precision
        decimals)."""
        ...

    def close(self) -> None:
        """Release engine resources (views, connections) created by this engine."""
        ...
