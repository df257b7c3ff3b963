"""The typed facts each mechanism family attaches to its Measurement (``measurement.info``).

Each class extends :class:`dpkit.core.MechanismInfo` (the fields generic tools read) with the
facts of one family. All fields are optional and read-only; ``None`` means "not stated".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpkit.core._framework import MechanismInfo

if TYPE_CHECKING:
    from dpkit.mechanisms._ladder._noise import LadderLattice

__all__ = [
    "AdditiveInfo",
    "LadderInfo",
    "LadderVectorInfo",
    "RandomizedResponseInfo",
    "SelectionInfo",
    "StaircaseInfo",
    "SumInIntervalsInfo",
]

Real = Fraction | float | int


@dataclass(frozen=True, slots=True, kw_only=True)
class AdditiveInfo(MechanismInfo):
    """Value + noise on a grid: Laplace, geometric, Gaussian, discrete Gaussian."""

    scale: Real | None = None
    """The Laplace scale b (in output units; an exact fraction)."""
    sigma: float | None = None
    """The Gaussian standard deviation σ (in output units)."""
    sigma2: Fraction | None = None
    """The discrete Gaussian's variance parameter σ² (in grid steps), when given exactly."""
    calibration: str | None = None
    """How σ was calibrated: ``"analytic"``/``"classic"`` for (ε, δ), ``"zcdp"`` for ρ."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StaircaseInfo(AdditiveInfo):
    """The (discrete) staircase mechanism (Geng & Viswanath 2016)."""

    gamma: float | None = None
    """γ as asked (or the optimum for ``cost``): the first step's share of a period."""
    cost: str | None = None
    """The cost γ was optimised for: ``"l1"`` (E|noise|) or ``"l2"`` (E noise²)."""
    period: int | None = None
    """The staircase's period in grid steps (the sensitivity on the grid)."""
    first_step: int | None = None
    """The first step's length in grid steps (γ·period, rounded, at least 1)."""
    effective_gamma: float | None = None
    """first_step / period: the γ actually used."""
    epsilon: Fraction | None = None
    """ε per period (the noise's rate), when the staircase is a part of a larger release."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SelectionInfo(MechanismInfo):
    """Selection mechanisms: exponential, report-noisy-max, permute-and-flip."""

    epsilon: Fraction | None = None
    """The ε the mechanism was calibrated for."""
    sensitivity: Fraction | None = None
    """Δu: how far one coordinate of the utility vector moves between neighbours."""
    monotonic: bool | None = None
    """True when utilities move in one direction only (halves the noise)."""
    coefficient: Fraction | None = None
    """The exponent's coefficient: P(r) ∝ exp(coefficient · u_r)."""
    utility_bound: Callable[[int, float], float] | None = None
    """``utility_bound(k, alpha)``: the utility loss exceeded with probability at most alpha."""
    noise: str | None = None
    """Report-noisy-max's noise: ``"gumbel"`` or ``"exponential"``."""
    noise_scale: Fraction | None = None
    """Report-noisy-max: the scale b of the equivalent additive noise (exact)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RandomizedResponseInfo(MechanismInfo):
    """Randomized response (binary, ε-calibrated and generalized to k categories)."""

    epsilon: Fraction | None = None
    """The per-respondent ε (calibrated versions)."""
    truth_probability: Real | None = None
    """p: the chance of reporting the true answer (exact for :func:`make_randomized_response`)."""
    random_yes_probability: Fraction | None = None
    """q: the chance of a random "yes" when not answering truthfully (binary, two-coin form)."""
    likelihood_ratio: Fraction | None = None
    """The largest ratio of report probabilities between two answers (e^ε, exactly)."""
    other_probability: float | None = None
    """Generalized RR: the chance of reporting one given other category."""
    categories: int | None = None
    """Generalized RR: the number k of categories."""
    labels: tuple[Any, ...] | None = None
    """Generalized RR: the category labels, when given (else indices 0..k-1)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LadderInfo(MechanismInfo):
    """The ladder mechanism (``make_ladder``, ``make_discrete_ladder``); see ladder.md."""

    neighbor_set: tuple[Any, ...] | None = None
    """V, the neighbour set as given (intervals of what one record can add)."""
    neighbor_set_units: tuple[tuple[int, int], ...] | None = None
    """V in grid units: integer ranges (lo, hi)."""
    grid_exact: bool | None = None
    """Whether V already lay on the grid (else it was widened to grid multiples)."""
    delta: Fraction | None = None
    """The ladder's δ (its first level's radius) in output units."""
    delta_units: int | None = None
    """The same δ in grid steps."""
    scale: int | None = None
    """G >= 1: the noise lives on G·Z (isolated-point neighbour sets with gcd G)."""
    levels: int | None = None
    """The number of explicitly built levels (before the periodic tail)."""
    converged_at: int | None = None
    """The level at which the periodic-tail certificate held (None: it was capped)."""
    capped_at: int | None = None
    """The level at which construction was capped (None: it converged)."""
    tv_to_uncapped: float | None = None
    """Total-variation distance between the capped noise and the uncapped one (0 if none)."""
    expected_abs: float | None = None
    """E|noise| in output units (exact up to float rounding)."""
    variance: float | None = None
    """Var(noise) in output units."""
    laplace_expected_abs: float | None = None
    """E|noise| of the Laplace mechanism at the same ε and sensitivity (for comparison)."""
    staircase_expected_abs: float | None = None
    """E|noise| of the optimal staircase at the same ε and sensitivity."""
    rate: float | None = None
    """expected_abs / staircase_expected_abs (below 1: the ladder beats the staircase)."""
    ladder_noise: LadderLattice | None = None
    """The noise distribution itself (on the integers, in grid steps)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SumInIntervalsInfo(MechanismInfo):
    """``make_sum_in_intervals``: a sum with the best of Laplace, staircase and ladder noise."""

    chosen: str | None = None
    """The noise used: ``"laplace"``, ``"staircase"`` or ``"ladder"``."""
    expected_abs: Mapping[str, float] | None = None
    """E|noise| of each candidate, in output units."""
    value_set: tuple[Any, ...] | None = None
    """The declared value set (intervals)."""
    sensitivity: Fraction | None = None
    """The largest |value| on the grid: the sum's sensitivity."""
    ladder: LadderInfo | None = None
    """The ladder candidate's info (built whichever noise is chosen)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LadderVectorInfo(MechanismInfo):
    """``make_ladder_vector``: one ladder per coordinate, ε split between them."""

    split: tuple[Fraction, ...] | None = None
    """The weights w_i (ε_i = w_i·ε)."""
    epsilons: tuple[Fraction, ...] | None = None
    """The per-coordinate ε_i."""
    expected_l1: float | None = None
    """Σ_i E|noise_i|: the expected L1 error."""
    parts: Sequence[LadderInfo] | None = None
    """The per-coordinate ladders' info."""
