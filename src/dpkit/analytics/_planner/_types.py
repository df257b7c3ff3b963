"""Type aliases shared by the planner modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

if TYPE_CHECKING:
    from dpkit.core import PrivacyLoss

Mechanism: TypeAlias = Literal["auto", "laplace", "gaussian"]
Family: TypeAlias = Literal["pure", "zcdp"]


@dataclass(frozen=True, slots=True)
class Use:
    """One mechanism an aggregation runs and the loss it spends: the structure the compiler
    composes the losses from and the ledger records the mechanisms from (never the prose)."""

    mechanism: str
    loss: PrivacyLoss


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a compiled query's explanation, as data: an aggregation (or partition
    selection), the mechanisms it runs with their losses, its composed loss, and its line of
    ``explain()``. A query's loss is composed from its parts; ``explain()`` is their text."""

    name: str
    uses: tuple[Use, ...]
    loss: PrivacyLoss
    text: str
