"""Domains (what data looks like), metrics (how far apart two inputs are) and measures (which
kind of privacy loss a measurement reports). They are small frozen values compared by equality
when pieces of a pipeline are chained."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

__all__ = [
    "AbsoluteDistance",
    "AtomDomain",
    "ChangeOneDistance",
    "Domain",
    "L1Distance",
    "L2Distance",
    "Measure",
    "Metric",
    "SymmetricDistance",
    "TableDomain",
    "UnitDistance",
    "VectorDomain",
]


@dataclass(frozen=True, slots=True)
class AtomDomain:
    """A scalar: ``float``, ``int``, ``bool`` or a ``category`` (an index into a finite set).

    ``bounds`` (inclusive) is known when a transformation has clamped the data; ``size`` is the
    number of categories for a category domain.
    """

    kind: Literal["float", "int", "bool", "category"] = "float"
    bounds: tuple[Fraction, Fraction] | None = None
    size: int | None = None

    def __str__(self) -> str:
        extra = f"[{self.bounds[0]}, {self.bounds[1]}]" if self.bounds else ""
        extra += f"<{self.size}>" if self.size else ""
        return f"{self.kind}{extra}"


@dataclass(frozen=True, slots=True)
class VectorDomain:
    """A 1-d array of atoms, of any length (``size=None``) or a fixed public length."""

    element: AtomDomain = AtomDomain()
    size: int | None = None

    def __str__(self) -> str:
        return f"vector<{self.element}>" + (f"[{self.size}]" if self.size is not None else "")


@dataclass(frozen=True, slots=True)
class TableDomain:
    """A table with these columns, each ``(name, kind)`` (what a Session's schema declares)."""

    columns: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return "table(" + ", ".join(f"{n}: {k}" for n, k in self.columns) + ")"


Domain = AtomDomain | VectorDomain | TableDomain


@dataclass(frozen=True, slots=True)
class SymmetricDistance:
    """Datasets as multisets of rows: d(x, x') = |x Δ x'| (one person added or removed = 1)."""

    def __str__(self) -> str:
        return "symmetric distance (add/remove)"


@dataclass(frozen=True, slots=True)
class ChangeOneDistance:
    """Datasets of a public size: d(x, x') = number of positions that differ (substitution)."""

    def __str__(self) -> str:
        return "change-one distance (substitute)"


@dataclass(frozen=True, slots=True)
class AbsoluteDistance:
    """Scalars: d(a, b) = |a - b|."""

    def __str__(self) -> str:
        return "absolute distance"


@dataclass(frozen=True, slots=True)
class L1Distance:
    """Vectors: d(a, b) = Σ|a_i - b_i|."""

    def __str__(self) -> str:
        return "L1 distance"


@dataclass(frozen=True, slots=True)
class L2Distance:
    """Vectors: d(a, b) = sqrt(Σ(a_i - b_i)²)."""

    def __str__(self) -> str:
        return "L2 distance"


@dataclass(frozen=True, slots=True)
class UnitDistance:
    """Tables as sets of privacy units: d(x, x') = the number of units whose rows differ (one
    unit added or removed with all its rows = 1). The neighbour relation of a Session
    (user-level differential privacy); ``unit`` names the column that identifies a unit.
    ``bounded`` marks exact aggregates computed after contribution bounding, where one unit
    moves each output by at most the plan's declared bounds."""

    unit: str
    bounded: bool = False

    def __str__(self) -> str:
        kind = "bounded contributions of " if self.bounded else ""
        return f"unit distance ({kind}privacy unit {self.unit!r})"


Metric = (
    SymmetricDistance
    | ChangeOneDistance
    | AbsoluteDistance
    | L1Distance
    | L2Distance
    | UnitDistance
)

Measure = Literal["pure", "approx", "zcdp"]
"""Which privacy loss a measurement's map returns: PureDP, ApproxDP or ZCDP."""
