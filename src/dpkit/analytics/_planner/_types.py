"""Type aliases shared by the planner modules."""

from __future__ import annotations

from typing import Literal, TypeAlias

Mechanism: TypeAlias = Literal["auto", "laplace", "gaussian"]
Family: TypeAlias = Literal["pure", "zcdp"]
