"""Budget allocation: split a total between planned queries, exactly, never handing out more.

Every strategy returns losses of the budget's kind whose sequential composition is *at most* the
total, exactly (fractions): for ``PureDP`` the εᵢ sum to <= ε; for ``ApproxDP`` both εᵢ and δᵢ
are split in the same shares; for ``ZCDP`` the ρᵢ sum to <= ρ.

* :func:`explicit_split` - given shares, e.g. the seed's 0.5 / 0.3 / 0.2;
* :func:`weighted_split` - proportional to positive weights;
* :func:`equal_split` - k equal parts;
* :class:`GeometricSchedule` - for open-ended streams: query i gets total·(1-r)·r^i, so any
  number of queries spends less than the total;
* :func:`accuracy_allocation` - from target error bars, the smallest total meeting every target,
  or, for a fixed total, the split that minimises the worst relative error;
* :class:`AllocationPool` - dynamic adjustment: allocations are handed out from a pool, unspent
  parts flow back, and the pool can only grow by an administrator's (recorded) raise.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from dpkit._exact import Number, check_positive, fraction_of, sensitivity_of
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.ledger._model import check_loss

__all__ = [
    "AccuracyPlan",
    "AllocationPool",
    "GeometricSchedule",
    "PlannedQuery",
    "PlannedShare",
    "accuracy_allocation",
    "equal_split",
    "explicit_split",
    "scale_loss",
    "weighted_split",
]


def scale_loss(total: PrivacyLoss, share: Fraction) -> PrivacyLoss:
    """``share`` (in [0, 1]) of a budget: every parameter multiplied by ``share``, exactly."""
    if not 0 <= share <= 1:
        raise InvalidParameterError("share", share, "in [0, 1]")
    if isinstance(total, PureDP):
        return PureDP(total.epsilon * share)
    if isinstance(total, ApproxDP):
        return ApproxDP(total.epsilon * share, total.delta * share)
    return ZCDP(total.rho * share)


def _names(names: Sequence[str] | None, count: int) -> list[str]:
    if names is None:
        return [f"q{i + 1}" for i in range(count)]
    out = list(names)
    if len(out) != count or len(set(out)) != count:
        raise InvalidParameterError("names", names, f"{count} distinct names")
    return out


def explicit_split(
    total: PrivacyLoss, shares: Mapping[str, Number] | Sequence[Number]
) -> dict[str, PrivacyLoss]:
    """Split by explicit shares of the total (they must add up to at most 1, exactly).

    Example:
        >>> from dpkit.core._losses import PureDP
        >>> parts = explicit_split(PureDP(1), {"sum": 0.5, "mean": 0.3, "cluster": 0.2})
        >>> [str(p) for p in parts.values()]
        ['ε=0.5', 'ε=0.3', 'ε=0.2']
    """
    total = check_loss(total, "total")
    items = (
        list(shares.items())
        if isinstance(shares, Mapping)
        else [(f"q{i + 1}", s) for i, s in enumerate(shares)]
    )
    if not items:
        raise InvalidParameterError("shares", shares, "at least one share")
    exact = [(name, fraction_of("shares", s)) for name, s in items]
    if any(s < 0 for _, s in exact):
        raise InvalidParameterError("shares", shares, "non-negative shares")
    if sum(s for _, s in exact) > 1:
        raise InvalidParameterError(
            "shares",
            shares,
            "shares adding up to at most 1",
            f"They add up to {float(sum(s for _, s in exact)):g}; scale them down or use "
            "weighted_split.",
        )
    return {name: scale_loss(total, s) for name, s in exact}


def weighted_split(
    total: PrivacyLoss, weights: Mapping[str, Number] | Sequence[Number]
) -> dict[str, PrivacyLoss]:
    """Split in proportion to positive weights; the parts add up to the total exactly."""
    items = (
        list(weights.items())
        if isinstance(weights, Mapping)
        else [(f"q{i + 1}", w) for i, w in enumerate(weights)]
    )
    if not items:
        raise InvalidParameterError("weights", weights, "at least one weight")
    exact = [(name, check_positive("weights", w)) for name, w in items]
    whole = sum(w for _, w in exact)
    return explicit_split(total, {name: w / whole for name, w in exact})


def equal_split(
    total: PrivacyLoss, k: int, *, names: Sequence[str] | None = None
) -> dict[str, PrivacyLoss]:
    """k equal parts (each total/k)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidParameterError("k", k, "a whole number of planned queries >= 1")
    return explicit_split(total, dict.fromkeys(_names(names, k), Fraction(1, k)))


@dataclass
class GeometricSchedule:
    """Open-ended streams: query i (from 0) gets total·(1-r)·r^i; all of them sum to < total.

    Args:
        total: the budget for the whole (unbounded) stream.
        ratio: r in (0, 1); larger r spends more slowly (later queries keep more).
    """

    total: PrivacyLoss
    ratio: Fraction = Fraction(1, 2)
    _issued: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.total = check_loss(self.total, "total")
        self.ratio = fraction_of("ratio", self.ratio)
        if not 0 < self.ratio < 1:
            raise InvalidParameterError("ratio", self.ratio, "in (0, 1)")

    def share(self, index: int) -> Fraction:
        return (1 - self.ratio) * self.ratio**index

    def loss(self, index: int) -> PrivacyLoss:
        """The allocation of query ``index`` (0-based)."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidParameterError("index", index, "a whole number >= 0")
        return scale_loss(self.total, self.share(index))

    def next(self) -> PrivacyLoss:
        """The next query's allocation."""
        out = self.loss(self._issued)
        self._issued += 1
        return out

    def first(self, n: int) -> list[PrivacyLoss]:
        return [self.loss(i) for i in range(n)]

    def __iter__(self) -> Iterator[PrivacyLoss]:
        index = 0
        while True:
            yield self.loss(index)
            index += 1


# --- accuracy-driven allocation -------------------------------------------------------------

Mechanism = Literal["laplace", "gaussian"]

# A rational lower bound on π (so Δ²/(π·e²) computed with it is an upper bound on the needed ρ).
_PI_LOWER = Fraction(314159265358979, 10**14)


@dataclass(frozen=True, slots=True)
class PlannedQuery:
    """A query to be answered with a target error bar.

    Args:
        name: a label for the plan.
        sensitivity: Δ (L1 for Laplace, L2 for Gaussian).
        target_error: the target expected absolute error E|noise|.
        mechanism: "laplace" (ε-DP, E|noise| = Δ/ε) or "gaussian" (zCDP,
            E|noise| = σ·sqrt(2/π) with σ = Δ/sqrt(2ρ)).
    """

    name: str
    sensitivity: Number
    target_error: Number
    mechanism: Mechanism = "laplace"


@dataclass(frozen=True, slots=True)
class PlannedShare:
    """One query's allocation and the error it gets."""

    name: str
    loss: PrivacyLoss
    expected_error: float
    target_error: float
    relative_error: float


@dataclass(frozen=True, slots=True)
class AccuracyPlan:
    """The allocation found, its total, and the worst relative error (error / target)."""

    shares: tuple[PlannedShare, ...]
    total: PrivacyLoss
    worst_relative_error: float
    objective: str

    def as_dict(self) -> dict[str, PrivacyLoss]:
        return {s.name: s.loss for s in self.shares}

    def __str__(self) -> str:
        lines = [
            f"allocation ({self.objective}): total {self.total}, worst error/target "
            f"{self.worst_relative_error:.4g}"
        ]
        width = max(len(s.name) for s in self.shares)
        lines.extend(
            f"  {s.name:<{width}}  {s.loss!s:<24} E|error| {s.expected_error:.4g}"
            f" (target {s.target_error:.4g}, ratio {s.relative_error:.3f})"
            for s in self.shares
        )
        return "\n".join(lines)


def _demand(query: PlannedQuery) -> tuple[Fraction, Fraction, Fraction]:
    """(Δ, e, c) where the cheapest loss meeting e is c (ε for Laplace, ρ for Gaussian)."""
    if not isinstance(query, PlannedQuery):
        raise InvalidParameterError("queries", query, "PlannedQuery values")
    delta = sensitivity_of("sensitivity", query.sensitivity)
    if delta <= 0:
        raise InvalidParameterError("sensitivity", query.sensitivity, "> 0")
    error = check_positive("target_error", query.target_error)
    if query.mechanism == "laplace":
        return delta, error, delta / error
    if query.mechanism == "gaussian":
        return delta, error, delta * delta / (_PI_LOWER * error * error)
    raise InvalidParameterError("mechanism", query.mechanism, "'laplace' or 'gaussian'")


def _expected_error(query: PlannedQuery, cost: Fraction, sensitivity: Fraction) -> float:
    if cost == 0:
        return math.inf
    if query.mechanism == "laplace":
        return float(sensitivity / cost)
    sigma = float(sensitivity) / math.sqrt(2 * float(cost))
    return sigma * math.sqrt(2 / math.pi)


def accuracy_allocation(
    queries: Sequence[PlannedQuery], *, total: PrivacyLoss | None = None
) -> AccuracyPlan:
    """Allocate from error targets.

    Without ``total``: each query gets the smallest loss meeting its target (Laplace
    εᵢ = Δᵢ/eᵢ; Gaussian ρᵢ = Δᵢ²/(π·eᵢ²)), which minimises the total. With ``total``: the
    split minimising the worst ratio error/target - every query gets the same ratio, so
    costᵢ ∝ Δᵢ/eᵢ (Laplace) or ∝ Δᵢ²/eᵢ² (Gaussian); a ratio <= 1 means every target is met.
    The shares add up to the total exactly. All queries must use the same mechanism kind.
    """
    if not queries:
        raise InvalidParameterError("queries", queries, "at least one planned query")
    kinds = {q.mechanism for q in queries}
    if len(kinds) != 1:
        raise InvalidParameterError(
            "queries",
            sorted(kinds),
            "queries of one mechanism kind",
            "Plan Laplace (ε-DP) and Gaussian (zCDP) queries separately.",
        )
    names = [q.name for q in queries]
    if len(set(names)) != len(names):
        raise InvalidParameterError("queries", names, "distinct query names")
    demands = [_demand(q) for q in queries]
    gaussian = queries[0].mechanism == "gaussian"

    def make(cost: Fraction) -> PrivacyLoss:
        return ZCDP(cost) if gaussian else PureDP(cost)

    if total is None:
        costs = [c for _, _, c in demands]
        objective = "smallest total meeting every target"
        total_loss = make(sum(costs, Fraction(0)))
    else:
        total_loss = check_loss(total, "total")
        if gaussian and not isinstance(total_loss, ZCDP):
            raise InvalidParameterError("total", total, "a ZCDP budget for Gaussian queries")
        if not gaussian and not isinstance(total_loss, PureDP):
            raise InvalidParameterError("total", total, "a PureDP budget for Laplace queries")
        budget = total_loss.rho if isinstance(total_loss, ZCDP) else total_loss.epsilon
        whole = sum((c for _, _, c in demands), Fraction(0))
        costs = [budget * c / whole for _, _, c in demands]
        objective = "smallest worst relative error for the fixed total"
    shares = []
    for q, (sens, err, _), cost in zip(queries, demands, costs, strict=True):
        expected = _expected_error(q, cost, sens)
        shares.append(PlannedShare(q.name, make(cost), expected, float(err), expected / float(err)))
    worst = max(s.relative_error for s in shares)
    return AccuracyPlan(tuple(shares), total_loss, worst, objective)


# --- dynamic adjustment ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Slot:
    allocated: PrivacyLoss
    spent: PrivacyLoss | None


def _zero_like(loss: PrivacyLoss) -> PrivacyLoss:
    return scale_loss(loss, Fraction(0))


def _sub(a: PrivacyLoss, b: PrivacyLoss) -> PrivacyLoss:
    if isinstance(a, PureDP) and isinstance(b, PureDP):
        return PureDP(a.epsilon - b.epsilon)
    if isinstance(a, ApproxDP) and isinstance(b, ApproxDP):
        return ApproxDP(a.epsilon - b.epsilon, a.delta - b.delta)
    if isinstance(a, ZCDP) and isinstance(b, ZCDP):
        return ZCDP(a.rho - b.rho)
    raise InvalidParameterError("loss", b, f"a {type(a).__name__} like the pool's budget")


def _add(a: PrivacyLoss, b: PrivacyLoss) -> PrivacyLoss:
    if isinstance(a, PureDP) and isinstance(b, PureDP):
        return PureDP(a.epsilon + b.epsilon)
    if isinstance(a, ApproxDP) and isinstance(b, ApproxDP):
        return ApproxDP(a.epsilon + b.epsilon, a.delta + b.delta)
    if isinstance(a, ZCDP) and isinstance(b, ZCDP):
        return ZCDP(a.rho + b.rho)
    raise InvalidParameterError("loss", b, f"a {type(a).__name__} like the pool's budget")


def _le(a: PrivacyLoss, b: PrivacyLoss) -> bool:
    if isinstance(a, PureDP) and isinstance(b, PureDP):
        return a.epsilon <= b.epsilon
    if isinstance(a, ApproxDP) and isinstance(b, ApproxDP):
        return a.epsilon <= b.epsilon and a.delta <= b.delta
    if isinstance(a, ZCDP) and isinstance(b, ZCDP):
        return a.rho <= b.rho
    return False


def _same_kind(loss: PrivacyLoss, like: PrivacyLoss) -> PrivacyLoss:
    if type(loss) is type(like):
        return loss
    if isinstance(like, ApproxDP) and isinstance(loss, PureDP):
        return loss.to_approx()
    raise InvalidParameterError("loss", loss, f"a {type(like).__name__} like the pool's budget")


class AllocationPool:
    """Hand out allocations from a budget; unspent parts flow back; never more than the total.

    Invariant (checked exactly on every call): Σ (outstanding allocations) + Σ (settled spends)
    <= total, coordinate-wise. ``settle(name, spent)`` closes an allocation and returns its
    unspent part to the pool; ``raise_total`` (an administrator action) grows the pool and is
    recorded in ``events``; nothing can lower the total below what is allocated or spent.
    """

    def __init__(self, total: PrivacyLoss) -> None:
        self._total = check_loss(total, "total")
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()
        self.events: list[tuple[str, str, PrivacyLoss]] = []

    @property
    def total(self) -> PrivacyLoss:
        return self._total

    def _committed(self) -> PrivacyLoss:
        out = _zero_like(self._total)
        for slot in self._slots.values():
            out = _add(out, slot.spent if slot.spent is not None else slot.allocated)
        return out

    @property
    def available(self) -> PrivacyLoss:
        """What can still be allocated."""
        with self._lock:
            return _sub(self._total, self._committed())

    @property
    def spent(self) -> PrivacyLoss:
        with self._lock:
            out = _zero_like(self._total)
            for slot in self._slots.values():
                if slot.spent is not None:
                    out = _add(out, slot.spent)
            return out

    def allocations(self) -> dict[str, PrivacyLoss]:
        """Open allocations (not settled yet)."""
        with self._lock:
            return {n: s.allocated for n, s in self._slots.items() if s.spent is None}

    def allocate(self, name: str, loss: PrivacyLoss) -> PrivacyLoss:
        """Reserve ``loss`` of the pool for ``name``; refuse if the pool cannot cover it."""
        loss = _same_kind(check_loss(loss), self._total)
        with self._lock:
            if name in self._slots:
                raise InvalidParameterError("name", name, "a name not allocated yet")
            available = _sub(self._total, self._committed())
            if not _le(loss, available):
                raise BudgetExceededError(loss, available, scope=f"allocation pool ({name!r})")
            self._slots[name] = _Slot(loss, None)
            self.events.append(("allocate", name, loss))
            return loss

    def allocate_split(self, shares: Mapping[str, PrivacyLoss]) -> dict[str, PrivacyLoss]:
        """Allocate several at once (all or nothing)."""
        converted = {n: _same_kind(check_loss(x), self._total) for n, x in shares.items()}
        with self._lock:
            need = _zero_like(self._total)
            for x in converted.values():
                need = _add(need, x)
            available = _sub(self._total, self._committed())
            if not _le(need, available) or any(n in self._slots for n in converted):
                raise BudgetExceededError(need, available, scope="allocation pool")
            for n, x in converted.items():
                self._slots[n] = _Slot(x, None)
                self.events.append(("allocate", n, x))
            return converted

    def settle(self, name: str, spent: PrivacyLoss) -> PrivacyLoss:
        """Close ``name``'s allocation having spent ``spent`` (<= the allocation); the unspent
        part flows back to the pool. Returns what flowed back."""
        spent = _same_kind(check_loss(spent), self._total)
        with self._lock:
            slot = self._slots.get(name)
            if slot is None or slot.spent is not None:
                raise InvalidParameterError("name", name, "an open allocation")
            if not _le(spent, slot.allocated):
                raise BudgetExceededError(spent, slot.allocated, scope=f"allocation {name!r}")
            self._slots[name] = _Slot(slot.allocated, spent)
            back = _sub(slot.allocated, spent)
            self.events.append(("settle", name, spent))
            return back

    def cancel(self, name: str) -> PrivacyLoss:
        """Drop an allocation nothing was spent from: all of it flows back."""
        return self.settle(name, _zero_like(self._total))

    def raise_total(self, new_total: PrivacyLoss, *, actor: str) -> None:
        """An administrator grows the pool (recorded). Lowering is refused."""
        new_total = _same_kind(check_loss(new_total, "new_total"), self._total)
        with self._lock:
            if not _le(self._total, new_total):
                raise InvalidParameterError(
                    "new_total",
                    new_total,
                    f"at least the current total {self._total}",
                    "Budgets are only raised; what was allocated or spent stays.",
                )
            self._total = new_total
            self.events.append(("raise", actor, new_total))
