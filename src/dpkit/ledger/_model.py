"""Values the ledger stores and the exact budget arithmetic it applies.

Every budget keeps its spend as a triple ``(ξ, δ, ρ)``: the mechanisms charged so far, taken
together, are *δ-approximately (ξ, ρ)-zCDP* (Bun & Steinke 2016, Def. 8.1): the Rényi divergence
of every order α is at most ξ + ρ·α outside events of probability δ. ε-DP contributes (ε, 0, 0),
(ε, δ)-DP contributes (ε, δ, 0) (ibid., §8), ρ-zCDP contributes (0, 0, ρ), and the coordinates
add under (adaptive) composition (ibid., Lemma 8.3).

Each budget is a privacy *filter* with a fixed stopping rule, so it stays valid when the analyst
picks each loss after seeing earlier answers:

* ``PureDP(E)``: ξ <= E, δ = ρ = 0 (basic composition; Rogers et al. 2016);
* ``ZCDP(R)``: ρ <= R, with ε-DP charged as ε²/2-zCDP on arrival (Bun & Steinke 2016, Prop.
  1.4; the Rényi filter of Feldman & Zrnic 2021);
* ``ApproxDP(E, D)``: either basic composition, ξ <= E and δ <= D, or - when its first charge is
  zCDP - the Rényi filter ρ <= R* with R* the largest ρ whose certified conversion at δ = D is at
  most E (``ZCDP.to_approx``: Bun & Steinke 2016, Prop. 1.3; Canonne, Kamath & Steinke 2020,
  Cor. 13). The two are not mixed in one budget (see :func:`charge_of`).

Every comparison is on fractions.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, TypeAlias

from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import BudgetExceededError, DPError, InvalidParameterError

__all__ = [
    "BudgetStatus",
    "EntryKind",
    "LedgerCorruptError",
    "LedgerEntry",
    "LedgerError",
    "Receipt",
    "ReplayReport",
    "Reservation",
    "ReservationStateError",
    "Spend",
    "UnknownBudgetError",
]

EntryKind: TypeAlias = Literal["create", "adjust", "reserve", "commit", "fail", "alert"]
ENTRY_KINDS: tuple[EntryKind, ...] = ("create", "adjust", "reserve", "commit", "fail", "alert")


# --- errors ------------------------------------------------------------------------------------


class LedgerError(DPError):
    """A ledger operation could not be carried out; nothing was changed."""


class LedgerCorruptError(LedgerError):
    """The ledger's storage is damaged or inconsistent; it refuses every charge (fails closed)."""


class UnknownBudgetError(LedgerError, LookupError):
    """No budget exists for the dataset (or the analyst under it)."""

    def __init__(self, dataset: str, analyst: str | None, known: list[str]) -> None:
        self.dataset = dataset
        self.analyst = analyst
        scope = _scope_name(dataset, analyst)
        shown = ", ".join(repr(k) for k in known[:10]) or "none"
        super().__init__(
            f"no budget for {scope}; known budgets: {shown}. Create it first with "
            f"ledger.create_budget({dataset!r}, total"
            + (f", analyst={analyst!r}" if analyst else "")
            + ")."
        )


class ReservationStateError(LedgerError):
    """A reservation was committed or failed twice, or does not belong to this ledger."""


def _scope_name(dataset: str, analyst: str | None) -> str:
    return f"dataset {dataset!r}" + (f", analyst {analyst!r}" if analyst else "")


# --- exact text codec for losses -------------------------------------------------------------


def fraction_text(value: Fraction) -> str:
    """``n/d`` (or ``n``): the exact text form stored in the ledger."""
    return str(value)


_FRACTION_TEXT = re.compile(r"(\d+)(?:/(\d+))?")


def parse_fraction(text: str, where: str) -> Fraction:
    """Read a stored ``n`` or ``n/d`` (non-negative), or fail closed."""
    match = _FRACTION_TEXT.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise LedgerCorruptError(
            f"{where}: stored value {text!r} is not an exact non-negative fraction; the ledger "
            "file was edited or damaged. Restore it from a backup; dpkit refuses to charge "
            "against it."
        )
    denominator = int(match.group(2)) if match.group(2) is not None else 1
    if denominator == 0:
        raise LedgerCorruptError(f"{where}: stored value {text!r} divides by zero.")
    return Fraction(int(match.group(1)), denominator)


def loss_to_text(loss: PrivacyLoss) -> str:
    """``pure:ε``, ``approx:ε:δ`` or ``zcdp:ρ`` with exact fractions."""
    if isinstance(loss, PureDP):
        return f"pure:{fraction_text(loss.epsilon)}"
    if isinstance(loss, ApproxDP):
        return f"approx:{fraction_text(loss.epsilon)}:{fraction_text(loss.delta)}"
    return f"zcdp:{fraction_text(loss.rho)}"


@functools.lru_cache(maxsize=4096)
def _decode_loss(text: str) -> PrivacyLoss | None:
    parts = text.split(":")
    try:
        if parts[0] == "pure" and len(parts) == 2:
            return PureDP(parse_fraction(parts[1], ""))
        if parts[0] == "approx" and len(parts) == 3:
            return ApproxDP(parse_fraction(parts[1], ""), parse_fraction(parts[2], ""))
        if parts[0] == "zcdp" and len(parts) == 2:
            return ZCDP(parse_fraction(parts[1], ""))
    except (InvalidParameterError, LedgerCorruptError):
        return None
    return None


def loss_from_text(text: str, where: str = "ledger") -> PrivacyLoss:
    """Decode a stored loss (values are frozen, so decoded texts are cached), or fail closed."""
    loss = _decode_loss(text) if isinstance(text, str) else None
    if loss is None:
        raise LedgerCorruptError(
            f"{where}: stored privacy loss {text!r} cannot be read; the ledger file was edited "
            "or damaged. Restore it from a backup; dpkit refuses to charge against it."
        )
    return loss


BUDGET_CEILING = Fraction(10**9)
"""The largest ε (or ρ) a budget may hold. Decision (issue 21): a budget of ε = 1e308 used to be
accepted without a word. Any ε beyond a few units already promises next to nothing (e^ε), and a
budget this large is only ever useful to check a pipeline against the truth — 1,000 queries at
the largest query loss (:data:`dpkit.analytics._session.QUERY_LOSS_CEILING`, 10^6) fit in it. A
larger one is refused, naming this limit, rather than kept as a number no one meant."""


def check_budget(total: Any, name: str = "total") -> PrivacyLoss:
    """:func:`check_loss` for a budget's total, which also stays within :data:`BUDGET_CEILING`."""
    loss = check_loss(total, name)
    size = loss.rho if isinstance(loss, ZCDP) else loss.epsilon
    if size > BUDGET_CEILING:
        symbol = "ρ" if isinstance(loss, ZCDP) else "ε"
        raise InvalidParameterError(
            name,
            loss,
            f"a budget with {symbol} <= {float(BUDGET_CEILING):g}",
            f"A budget this large protects nothing: at {symbol} = 1e9 a release may be e^(1e9) "
            "times likelier on one table than on its neighbour. To check a pipeline against the "
            "truth, a budget of 1e6 already leaves the noise negligible.",
        )
    return loss


def check_loss(loss: Any, name: str = "loss") -> PrivacyLoss:
    """Validate a privacy loss handed to the ledger (type, finite, non-negative, δ < 1)."""
    if not isinstance(loss, PureDP | ApproxDP | ZCDP):
        raise InvalidParameterError(
            name,
            loss,
            "a privacy loss: PureDP(epsilon), ApproxDP(epsilon, delta) or ZCDP(rho)",
            "Wrap a bare number, e.g. PureDP(0.1) for ε = 0.1.",
        )
    fields = (
        [loss.epsilon]
        if isinstance(loss, PureDP)
        else [loss.epsilon, loss.delta]
        if isinstance(loss, ApproxDP)
        else [loss.rho]
    )
    for value in fields:
        if not isinstance(value, Fraction) or value < 0:
            raise InvalidParameterError(name, loss, "a loss with exact, non-negative parameters")
    if isinstance(loss, ApproxDP) and loss.delta >= 1:
        raise InvalidParameterError(name, loss, "a loss with δ < 1")
    return loss


def query_hash(query: str) -> str:
    """SHA-256 of the query's plan text (stored next to it, so a plan can be matched later)."""
    return hashlib.sha256(query.encode("utf-8")).hexdigest()


# --- the (ξ, δ, ρ) spend and its comparison with a budget ------------------------------------


@dataclass(frozen=True, slots=True)
class Spend:
    """What a budget has absorbed: δ-approximately (ξ, ρ)-zCDP (see the module docstring)."""

    xi: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.xi + other.xi, self.delta + other.delta, self.rho + other.rho)

    def is_zero(self) -> bool:
        return self.xi == 0 and self.delta == 0 and self.rho == 0

    def dominates(self, other: Spend) -> bool:
        return self.xi >= other.xi and self.delta >= other.delta and self.rho >= other.rho

    def join(self, other: Spend) -> Spend:
        """Coordinate-wise maximum (conservative when two records disagree)."""
        return Spend(max(self.xi, other.xi), max(self.delta, other.delta), max(self.rho, other.rho))


def charge_of(
    loss: PrivacyLoss, budget: PrivacyLoss, scope: str, current: Spend | None = None
) -> Spend:
    """The spend a loss adds to a budget of ``budget``'s kind (holding ``current``), or a clear
    error if it cannot be charged there.

    An ``ApproxDP`` budget runs one of two fixed stopping rules, chosen by its first charge (made
    before any of its answers exist): basic composition of (ε, δ) charges, or a Rényi filter on
    ρ (ε-DP charges then count ε²/2) converted at the budget's δ. Both are valid for adaptively
    chosen losses; coupling the two in one rule would let the zCDP allowance depend on earlier
    answers, which no filter theorem covers, so mixing is refused.
    """
    current = current if current is not None else Spend()
    if isinstance(budget, ZCDP):
        if isinstance(loss, ZCDP):
            return Spend(rho=loss.rho)
        if isinstance(loss, ApproxDP) and loss.delta > 0:
            raise InvalidParameterError(
                "loss",
                loss,
                f"a PureDP or ZCDP loss for the zCDP budget of {scope}",
                "(ε, δ)-DP with δ > 0 implies no finite zCDP guarantee; calibrate the mechanism "
                "for zCDP (e.g. a Gaussian's ZCDP loss) or give the dataset an ApproxDP budget.",
            )
        return Spend(rho=loss.epsilon**2 / 2)  # Bun & Steinke 2016, Prop. 1.4
    if isinstance(budget, PureDP):
        if isinstance(loss, PureDP):
            return Spend(xi=loss.epsilon)
        if isinstance(loss, ApproxDP):
            if loss.delta > 0:
                raise BudgetExceededError(
                    loss,
                    PureDP(max(Fraction(0), budget.epsilon - current.xi)),
                    scope=f"{scope} has a pure ε-DP budget (δ = 0), so no δ > 0 can be charged",
                    hint=(
                        "Asking for less ε cannot help: what needs δ > 0 is the query's kind — "
                        "private group keys (partition selection) and Gaussian noise. Declare the "
                        "group keys (group_by(col, keys=[...]), or --keys col=a,b) and spend ε "
                        "alone (no delta), or have the privacy officer give the dataset an "
                        "(ε, δ) or ρ budget."
                    ),
                )
            return Spend(xi=loss.epsilon)
        raise InvalidParameterError(
            "loss",
            loss,
            f"a PureDP loss for the pure ε-DP budget of {scope}",
            "ρ-zCDP implies no pure ε-DP guarantee; give the dataset an ApproxDP or ZCDP budget.",
        )
    # An ApproxDP budget.
    if current.rho > 0:  # the Rényi-filter rule
        if isinstance(loss, ZCDP):
            return Spend(rho=loss.rho)
        if isinstance(loss, PureDP) or loss.delta == 0:
            return Spend(rho=loss.epsilon**2 / 2)
        raise InvalidParameterError(
            "loss",
            loss,
            f"a ZCDP or PureDP loss: the (ε, δ) budget of {scope} already holds zCDP charges",
            "(ε, δ) charges with δ > 0 and zCDP charges cannot share one (ε, δ) budget safely; "
            "use a separate analyst budget for them.",
        )
    if isinstance(loss, ZCDP):
        if current.xi > 0 or current.delta > 0:
            raise InvalidParameterError(
                "loss",
                loss,
                f"an (ε, δ) or ε loss: the (ε, δ) budget of {scope} already holds (ε, δ) charges",
                "Convert it first, e.g. loss.to_approx(delta=1e-9), and charge that; or use a "
                "separate analyst budget for zCDP work.",
            )
        return Spend(rho=loss.rho)
    if isinstance(loss, PureDP):
        return Spend(xi=loss.epsilon)
    return Spend(xi=loss.epsilon, delta=loss.delta)


def spent_loss(spend: Spend, budget: PrivacyLoss) -> PrivacyLoss:
    """The spend expressed in the budget's kind (an upper bound, exact where the kind allows)."""
    if isinstance(budget, PureDP):
        return PureDP(spend.xi)
    if isinstance(budget, ZCDP):
        return ZCDP(spend.rho + spend.xi**2 / 2)
    if spend.rho == 0:
        return ApproxDP(spend.xi, spend.delta)
    if spend.delta < budget.delta:
        converted = ZCDP(spend.rho).to_approx(budget.delta - spend.delta).epsilon
        return ApproxDP(spend.xi + converted, budget.delta)
    # Not reachable for a spend that fits; still a valid bound: convert ρ at a fresh δ'.
    extra = min(budget.delta / 2 if budget.delta > 0 else Fraction(1, 10**9), (1 - spend.delta) / 2)
    converted = ZCDP(spend.rho).to_approx(extra).epsilon
    return ApproxDP(spend.xi + converted, spend.delta + extra)


def fits(spend: Spend, budget: PrivacyLoss) -> bool:
    """Does a total spend stay within the budget?"""
    if isinstance(budget, PureDP):
        return spend.delta == 0 and spend.rho == 0 and spend.xi <= budget.epsilon
    if isinstance(budget, ZCDP):
        return spend.delta == 0 and spend.xi == 0 and spend.rho <= budget.rho
    if spend.delta > budget.delta:
        return False
    if spend.rho == 0:
        return spend.xi <= budget.epsilon
    if spend.delta == budget.delta:
        return False
    if spend.xi > budget.epsilon:
        return False
    converted = ZCDP(spend.rho).to_approx(budget.delta - spend.delta).epsilon
    return spend.xi + converted <= budget.epsilon


def remaining_loss(spend: Spend, budget: PrivacyLoss) -> PrivacyLoss:
    """Budget minus spend, coordinate-wise in the budget's kind (never negative).

    Conversions are not linear, so whether the *next* charge fits is decided by ``fits`` on the
    composed spend; this value is for display and planning.
    """
    spent = spent_loss(spend, budget)
    if isinstance(budget, PureDP):
        assert isinstance(spent, PureDP)
        return PureDP(max(Fraction(0), budget.epsilon - spent.epsilon))
    if isinstance(budget, ZCDP):
        assert isinstance(spent, ZCDP)
        return ZCDP(max(Fraction(0), budget.rho - spent.rho))
    assert isinstance(spent, ApproxDP)
    return ApproxDP(
        max(Fraction(0), budget.epsilon - spent.epsilon),
        max(Fraction(0), budget.delta - spent.delta),
    )


def used_fraction(spend: Spend, budget: PrivacyLoss) -> Fraction:
    """How much of the budget is used, in [0, 1] (the largest coordinate's share)."""
    spent = spent_loss(spend, budget)
    shares: list[Fraction] = []
    if isinstance(budget, PureDP) and isinstance(spent, PureDP):
        shares.append(_share(spent.epsilon, budget.epsilon))
        if spend.delta > 0 or spend.rho > 0:
            shares.append(Fraction(1))
    elif isinstance(budget, ZCDP) and isinstance(spent, ZCDP):
        shares.append(_share(spent.rho, budget.rho))
    elif isinstance(budget, ApproxDP) and isinstance(spent, ApproxDP):
        shares.append(_share(spent.epsilon, budget.epsilon))
        shares.append(_share(spend.delta, budget.delta))
    return min(Fraction(1), max(shares, default=Fraction(0)))


def _share(used: Fraction, total: Fraction) -> Fraction:
    if total == 0:
        return Fraction(0) if used == 0 else Fraction(1)
    return used / total


def loss_kind(loss: PrivacyLoss) -> str:
    return (
        "pure" if isinstance(loss, PureDP) else "approx" if isinstance(loss, ApproxDP) else "zcdp"
    )


def finite_float(value: Fraction) -> float:
    out = float(value)
    return out if math.isfinite(out) else math.inf


# --- records handed to users -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reservation:
    """A charge recorded before any data is read. It stays spent whatever happens next."""

    id: int
    dataset: str
    analyst: str | None
    loss: PrivacyLoss
    query: str
    mechanism: str
    created_at: float
    ledger_id: str


@dataclass(frozen=True, slots=True)
class Receipt:
    """Proof that a release was recorded: its id appears in the ledger next to the charge."""

    id: str
    reservation_id: int
    dataset: str
    analyst: str | None
    loss: PrivacyLoss
    committed_at: float

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One append-only ledger row."""

    id: int
    timestamp: float
    kind: EntryKind
    dataset: str
    analyst: str | None
    loss: PrivacyLoss | None
    query: str
    query_hash: str
    mechanism: str
    ref: int | None
    receipt: str
    actor: str
    detail: str


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A budget and what has been spent from it."""

    dataset: str
    analyst: str | None
    privacy_unit: str
    total: PrivacyLoss
    spent: PrivacyLoss
    remaining: PrivacyLoss
    used: Fraction
    charges: int
    spend: Spend


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The result of recomputing every total from the append-only entries."""

    entries: int
    budgets: int
    mismatches: tuple[str, ...]
    pending: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches
