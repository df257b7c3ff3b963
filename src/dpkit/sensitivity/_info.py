"""The typed facts the data-dependent mechanisms attach to their Measurement (``.info``).

Both classes extend :class:`dpkit.core.MechanismInfo`; every field is optional (``None``: not
stated) and read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpkit.core._framework import MechanismInfo

if TYPE_CHECKING:
    import numpy as np

    from dpkit.sensitivity._bun_steinke import ZCDPNoise

__all__ = ["SampleAggregateInfo", "SensitivityInfo"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SensitivityInfo(MechanismInfo):
    """Smooth sensitivity, propose-test-release, inverse sensitivity and the teaching mechanism
    (each states only the fields that apply to it)."""

    alpha: Fraction | None = None
    """Smooth sensitivity: the noise scale's multiplier α (noise = S*/α · Z)."""
    beta: Fraction | None = None
    """Smooth sensitivity: the smoothing parameter β of S*."""
    gamma: int | None = None
    """Smooth sensitivity: the Cauchy-type noise's tail exponent γ."""
    zcdp_noise: ZCDPNoise | None = None
    """Smooth sensitivity under zCDP: the Bun–Steinke noise family and its calibration."""
    grid_bits: int | None = None
    """Smooth variance: values are rounded to (upper − lower)·2^-grid_bits."""
    threshold: int | None = None
    """Propose-test-release: the distance to instability the noisy test must exceed."""
    bound: Fraction | None = None
    """Propose-test-release: the proposed sensitivity bound."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleAggregateInfo(MechanismInfo):
    """Sample-and-aggregate over privacy units."""

    block_values: Callable[[Any], np.ndarray]
    """``block_values(data)``: the statistic on each of the m disjoint blocks (no noise)."""
    aggregate: Callable[[np.ndarray], float]
    """``aggregate(column)``: the private aggregation of one coordinate's m block values."""
    m: int
    """The number of blocks."""
