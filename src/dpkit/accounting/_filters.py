"""Privacy filters and odometers: fully adaptive composition.

With *adaptive* privacy parameters, the analyst picks each next query's loss after seeing earlier
answers, so the number of queries and their losses are random. Ordinary composition theorems do
not cover that (Rogers, Roth, Ullman & Vadhan 2016). Two objects do:

* a **filter** holds a fixed budget and refuses (raises :class:`BudgetExceededError`, recording
  nothing) the first query whose loss would take the total past a stopping rule; the whole
  interaction is then private with the budget;
* an **odometer** makes no promise in advance and reports, at every moment, a bound on the loss
  so far that holds simultaneously for all times.

Filters here (each rule exact in fractions; transcendental values rounded up):

* :class:`BasicFilter` - Σεᵢ <= ε and Σδᵢ <= δ (Rogers et al. 2016: basic composition holds
  for filters).
* :class:`ZCDPFilter` - Σρᵢ <= ρ with ε-DP charged as ε²/2 (the Rényi filter of Feldman & Zrnic
  2021, at every order; Whitehouse, Ramdas, Rogers & Wu 2023).
* :class:`AdvancedFilter` - the advanced-composition filter of Whitehouse et al. 2023:
  with δ = δ' + δ'', continue while sqrt(2·ln(1/δ')·Σεᵢ²) + ½·Σεᵢ² <= ε and Σδᵢ <= δ''. It
  matches advanced composition's rate and constants although the εᵢ are chosen adaptively.

Odometer: :class:`PrivacyOdometer` reports min(basic Σεᵢ, a zCDP bound stitched from filters at
budgets ρ_j = ρ₀·2^j with δ_j = δ/((j+1)(j+2)), Σ_j δ_j = δ) - the filters-to-odometers
construction of Whitehouse et al. 2023; the basic sum is a valid odometer for pure ε-DP
(Rogers et al. 2016) and fails with probability 0, so the minimum keeps failure probability δ.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from dpkit._exact import (
    Number,
    check_delta,
    check_positive,
    fraction_of,
    log_upper,
    sqrt_upper,
)
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.ledger._model import check_loss

__all__ = [
    "AdvancedFilter",
    "BasicFilter",
    "OdometerReading",
    "PrivacyFilter",
    "PrivacyOdometer",
    "ZCDPFilter",
]


class PrivacyFilter(Protocol):
    """A stopping rule over adaptively chosen losses that guarantees a fixed total."""

    @property
    def budget(self) -> PrivacyLoss: ...

    def admits(self, loss: PrivacyLoss) -> bool:
        """Would the filter let this next loss through? (Records nothing.)"""
        ...

    def spend(self, loss: PrivacyLoss) -> None:
        """Record the next loss, or raise BudgetExceededError and record nothing."""
        ...


class _FilterBase:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @property
    def count(self) -> int:
        """How many losses were admitted."""
        return self._count

    def admits(self, loss: PrivacyLoss) -> bool:
        with self._lock:
            return self._admits(check_loss(loss))

    def spend(self, loss: PrivacyLoss) -> None:
        loss = check_loss(loss)
        with self._lock:
            if not self._admits(loss):
                raise BudgetExceededError(loss, self._remaining(), scope=self._name())
            self._record(loss)
            self._count += 1

    def _admits(self, loss: PrivacyLoss) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _record(self, loss: PrivacyLoss) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _remaining(self) -> PrivacyLoss:  # pragma: no cover - abstract
        raise NotImplementedError

    def _name(self) -> str:
        return type(self).__name__


def _eps_delta(loss: PrivacyLoss, who: str) -> tuple[Fraction, Fraction]:
    if isinstance(loss, PureDP):
        return loss.epsilon, Fraction(0)
    if isinstance(loss, ApproxDP):
        return loss.epsilon, loss.delta
    raise InvalidParameterError(
        "loss", loss, f"a PureDP or ApproxDP loss for the {who}", "Use a ZCDPFilter for zCDP."
    )


class BasicFilter(_FilterBase):
    """Σεᵢ <= ε and Σδᵢ <= δ, for adaptively chosen (εᵢ, δᵢ) (Rogers et al. 2016)."""

    def __init__(self, budget: PureDP | ApproxDP) -> None:
        super().__init__()
        budget = check_loss(budget, "budget")  # type: ignore[assignment]
        self._budget_eps, self._budget_delta = _eps_delta(budget, "basic filter")
        self._budget = budget
        self._eps = Fraction(0)
        self._delta = Fraction(0)

    @property
    def budget(self) -> PrivacyLoss:
        return self._budget

    @property
    def spent(self) -> ApproxDP:
        return ApproxDP(self._eps, self._delta)

    def _admits(self, loss: PrivacyLoss) -> bool:
        try:
            e, d = _eps_delta(loss, "basic filter")
        except InvalidParameterError:
            return False
        return self._eps + e <= self._budget_eps and self._delta + d <= self._budget_delta

    def _record(self, loss: PrivacyLoss) -> None:
        e, d = _eps_delta(loss, "basic filter")
        self._eps += e
        self._delta += d

    def _remaining(self) -> PrivacyLoss:
        return ApproxDP(self._budget_eps - self._eps, self._budget_delta - self._delta)


def _rho_of(loss: PrivacyLoss) -> Fraction | None:
    if isinstance(loss, ZCDP):
        return loss.rho
    if isinstance(loss, PureDP) or (isinstance(loss, ApproxDP) and loss.delta == 0):
        return loss.epsilon**2 / 2
    return None


class ZCDPFilter(_FilterBase):
    """Σρᵢ <= ρ for adaptively chosen zCDP (or ε-DP, as ε²/2) losses (Feldman & Zrnic 2021)."""

    def __init__(self, rho: Number) -> None:
        super().__init__()
        self._rho_budget = check_positive("rho", rho)
        self._rho = Fraction(0)

    @property
    def budget(self) -> PrivacyLoss:
        return ZCDP(self._rho_budget)

    @property
    def spent(self) -> ZCDP:
        return ZCDP(self._rho)

    def guarantee(self, delta: Number) -> ApproxDP:
        """The (ε, δ)-DP the whole interaction has, whatever the analyst does."""
        return ZCDP(self._rho_budget).to_approx(delta)

    def _admits(self, loss: PrivacyLoss) -> bool:
        rho = _rho_of(loss)
        return rho is not None and self._rho + rho <= self._rho_budget

    def _record(self, loss: PrivacyLoss) -> None:
        rho = _rho_of(loss)
        assert rho is not None
        self._rho += rho

    def _remaining(self) -> PrivacyLoss:
        return ZCDP(self._rho_budget - self._rho)


class AdvancedFilter(_FilterBase):
    """The advanced-composition filter of Whitehouse, Ramdas, Rogers & Wu 2023.

    Args:
        epsilon: the total ε guaranteed.
        delta: the total δ guaranteed, split as δ' (for the concentration term) + δ''
            (for the mechanisms' own δᵢ).
        delta_split: the share of δ used as δ'; the rest bounds Σδᵢ (default: all of δ when only
            pure losses are expected - use e.g. 1/2 for approximate-DP queries).
    """

    def __init__(self, epsilon: Number, delta: Number, *, delta_split: Number = 1) -> None:
        super().__init__()
        self._epsilon = check_positive("epsilon", epsilon)
        self._delta = check_delta(delta, allow_zero=False)
        split = fraction_of("delta_split", delta_split)
        if not 0 < split <= 1:
            raise InvalidParameterError("delta_split", delta_split, "in (0, 1]")
        self._delta_prime = self._delta * split
        self._delta_pp = self._delta - self._delta_prime
        self._log_term = 2 * log_upper(1 / self._delta_prime)
        self._sum_sq = Fraction(0)
        self._sum_eps = Fraction(0)
        self._sum_delta = Fraction(0)

    @property
    def budget(self) -> PrivacyLoss:
        return ApproxDP(self._epsilon, self._delta)

    @property
    def spent(self) -> ApproxDP:
        """The guarantee so far if the interaction stopped now (min of advanced and basic)."""
        advanced = sqrt_upper(self._log_term * self._sum_sq) + self._sum_sq / 2
        return ApproxDP(min(advanced, self._sum_eps), self._sum_delta + self._delta_prime)

    def _bound(self, sum_sq: Fraction) -> Fraction:
        return sqrt_upper(self._log_term * sum_sq) + sum_sq / 2

    def _admits(self, loss: PrivacyLoss) -> bool:
        try:
            e, d = _eps_delta(loss, "advanced filter")
        except InvalidParameterError:
            return False
        return (
            self._bound(self._sum_sq + e * e) <= self._epsilon
            and self._sum_delta + d <= self._delta_pp
        )

    def _record(self, loss: PrivacyLoss) -> None:
        e, d = _eps_delta(loss, "advanced filter")
        self._sum_sq += e * e
        self._sum_eps += e
        self._sum_delta += d

    def _remaining(self) -> PrivacyLoss:
        return ApproxDP(
            max(Fraction(0), self._epsilon - self._bound(self._sum_sq)),
            self._delta_pp - self._sum_delta,
        )


@dataclass(frozen=True, slots=True)
class OdometerReading:
    """A bound on the loss so far, valid simultaneously at all times with failure δ."""

    loss: ApproxDP
    method: str


class PrivacyOdometer:
    """Tracks adaptively chosen pure-DP or zCDP losses; reports a time-uniform (ε, δ) bound.

    Args:
        delta: the failure probability of the reported bounds (all times together).
        rho_min: the smallest zCDP level of the stitched filters (ρ₀).
    """

    def __init__(self, delta: Number, *, rho_min: Number = Fraction(1, 10**6)) -> None:
        self._delta = check_delta(delta, allow_zero=False)
        self._rho_min = check_positive("rho_min", rho_min)
        self._lock = threading.Lock()
        self._sum_eps: Fraction | None = Fraction(0)  # None once a zCDP loss was recorded
        self._rho = Fraction(0)
        self._count = 0
        self._levels: dict[int, tuple[Fraction, Fraction]] = {}

    @property
    def count(self) -> int:
        return self._count

    def _level(self, j: int) -> tuple[Fraction, Fraction]:
        """(ρ_j, ε of ρ_j-zCDP at δ_j): the j-th stitched filter, computed once."""
        if j not in self._levels:
            rho_j = self._rho_min * 2**j
            delta_j = self._delta / ((j + 1) * (j + 2))
            self._levels[j] = (rho_j, ZCDP(rho_j).to_approx(delta_j).epsilon)
        return self._levels[j]

    def record(self, loss: PrivacyLoss) -> OdometerReading:
        loss = check_loss(loss)
        rho = _rho_of(loss)
        if rho is None:
            raise InvalidParameterError(
                "loss",
                loss,
                "a PureDP or ZCDP loss for the odometer",
                "(ε, δ) losses with δ > 0 need a filter (BasicFilter or AdvancedFilter).",
            )
        with self._lock:
            self._rho += rho
            if self._sum_eps is not None:
                self._sum_eps = (
                    self._sum_eps + loss.epsilon if isinstance(loss, PureDP | ApproxDP) else None
                )
            self._count += 1
            return self._reading()

    def reading(self) -> OdometerReading:
        with self._lock:
            return self._reading()

    def _reading(self) -> OdometerReading:
        if self._rho == 0:
            return OdometerReading(ApproxDP(0, self._delta), "none")
        j = 0
        while self._rho_min * 2**j < self._rho:
            j += 1
        stitched = self._level(j)[1]
        if self._sum_eps is not None and self._sum_eps <= stitched:
            return OdometerReading(ApproxDP(self._sum_eps, self._delta), "basic")
        return OdometerReading(ApproxDP(stitched, self._delta), "zcdp-stitched")
