"""RDP and PLD accounting through Google's ``dp-accounting`` package, next to exact zCDP.

We do not re-implement these accountants; we build ``dp_accounting`` events, ask each available
accountant for ε at the given δ, round its floating-point answer *up*, and report the smallest:

* RDP (Mironov 2017; subsampled Gaussian: Mironov, Talwar & Zhang 2019) via
  ``dp_accounting.rdp.RdpAccountant`` - its RDP-to-DP conversion is that of Canonne, Kamath &
  Steinke 2020 / Asoodeh et al. 2021 over a grid of orders;
* PLD (privacy-loss distributions: Meiser & Mohammadi 2018; Koskela et al. 2020; Doroshenko et
  al. 2022 "connect the dots") via ``dp_accounting.pld.PLDAccountant``, with pessimistic
  discretisation (an upper bound up to the package's floating point);
* pure ε-DP, exact, for Laplace events (ε = Δ/b = 1/z each, basic composition);
* zCDP, exact, for Gaussian events (ρ = 1/(2·z²) for noise multiplier z = σ/Δ, Bun & Steinke
  2016, Prop. 1.6) and ``ZCDpEvent``, converted by :meth:`dpkit.core.losses.ZCDP.to_approx`.

Floats from ``dp_accounting`` are rounded up by a relative 1e-9 before they become fractions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from dp_accounting import dp_event  # type: ignore[import-untyped]
from dp_accounting.pld import pld_privacy_accountant  # type: ignore[import-untyped]
from dp_accounting.privacy_accountant import NeighboringRelation  # type: ignore[import-untyped]
from dp_accounting.rdp import rdp_privacy_accountant  # type: ignore[import-untyped]

from dpkit._exact import Number, check_delta
from dpkit.core.losses import ZCDP, ApproxDP
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

__all__ = [
    "AccountingResult",
    "Neighbouring",
    "composed",
    "gaussian_event",
    "laplace_event",
    "numerical_epsilon",
    "pld_epsilon",
    "poisson_subsampled",
    "pure_epsilon",
    "rdp_epsilon",
    "self_composed",
    "zcdp_epsilon",
]

Neighbouring = Literal["add_or_remove", "replace"]
Method = Literal["pure", "zcdp", "rdp", "pld"]

_MARGIN = Fraction(1, 10**9)


def _relation(neighbouring: Neighbouring) -> Any:
    if neighbouring == "add_or_remove":
        return NeighboringRelation.ADD_OR_REMOVE_ONE
    if neighbouring == "replace":
        return NeighboringRelation.REPLACE_ONE
    raise InvalidParameterError("neighbouring", neighbouring, "'add_or_remove' or 'replace'")


def _positive_float(name: str, value: Number) -> float:
    out = float(value)
    if not math.isfinite(out) or out <= 0:
        raise InvalidParameterError(name, value, "a finite number > 0")
    return out


# --- building events (thin, validated wrappers around dp_accounting.dp_event) ---------------


def gaussian_event(noise_multiplier: Number) -> Any:
    """One Gaussian mechanism with σ = noise_multiplier · (L2 sensitivity)."""
    return dp_event.GaussianDpEvent(_positive_float("noise_multiplier", noise_multiplier))


def laplace_event(noise_multiplier: Number) -> Any:
    """One Laplace mechanism with scale b = noise_multiplier · (L1 sensitivity)."""
    return dp_event.LaplaceDpEvent(_positive_float("noise_multiplier", noise_multiplier))


def poisson_subsampled(event: Any, sampling_probability: Number) -> Any:
    """``event`` run on a Poisson subsample (each row kept with this probability)."""
    q = float(sampling_probability)
    if not 0 < q <= 1:
        raise InvalidParameterError("sampling_probability", sampling_probability, "in (0, 1]")
    return dp_event.PoissonSampledDpEvent(q, event)


def self_composed(event: Any, count: int) -> Any:
    """``event`` repeated ``count`` times (adaptively)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidParameterError("count", count, "a whole number >= 1")
    return dp_event.SelfComposedDpEvent(event, count)


def composed(events: Sequence[Any]) -> Any:
    """Several events run one after another (adaptively)."""
    if not events:
        raise InvalidParameterError("events", events, "at least one event")
    return dp_event.ComposedDpEvent(list(events))


# --- accountants -----------------------------------------------------------------------------


def _round_up(value: float) -> Fraction:
    if not math.isfinite(value):
        raise UnsupportedQueryError(f"the accountant returned ε = {value}: no finite bound")
    exact = Fraction(max(value, 0.0))
    return exact + exact * _MARGIN + Fraction(1, 10**15)


def rdp_epsilon(
    event: Any,
    delta: Number,
    *,
    orders: Sequence[float] | None = None,
    neighbouring: Neighbouring = "add_or_remove",
) -> Fraction:
    """ε at δ from dp_accounting's RDP accountant, rounded up."""
    d = check_delta(delta, allow_zero=False)
    accountant = rdp_privacy_accountant.RdpAccountant(
        orders=list(orders) if orders is not None else None,
        neighboring_relation=_relation(neighbouring),
    )
    if not accountant.supports(event):
        raise UnsupportedQueryError(f"the RDP accountant does not support {event!r}")
    accountant.compose(event)
    return _round_up(float(accountant.get_epsilon(float(d))))


def pld_epsilon(
    event: Any,
    delta: Number,
    *,
    value_discretization_interval: float = 1e-4,
    neighbouring: Neighbouring = "add_or_remove",
) -> Fraction:
    """ε at δ from dp_accounting's PLD accountant (pessimistic discretisation), rounded up."""
    d = check_delta(delta, allow_zero=False)
    accountant = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=_relation(neighbouring),
        value_discretization_interval=value_discretization_interval,
    )
    if not accountant.supports(event):
        raise UnsupportedQueryError(f"the PLD accountant does not support {event!r}")
    accountant.compose(event)
    return _round_up(float(accountant.get_epsilon(float(d))))


def _rho_of(event: Any) -> Fraction | None:
    """Exact ρ of a composition of Gaussian / zCDP events, or None if another event occurs."""
    if isinstance(event, dp_event.GaussianDpEvent):
        z = Fraction(float(event.noise_multiplier))
        return None if z == 0 else 1 / (2 * z * z)
    if isinstance(event, dp_event.ZCDpEvent):
        return Fraction(float(event.rho)) if float(event.xi) == 0 else None
    return _composed(event, _rho_of)


def _pure_of(event: Any) -> Fraction | None:
    """Exact ε of a composition of Laplace events (ε = 1/z each), or None."""
    if isinstance(event, dp_event.LaplaceDpEvent):
        return 1 / Fraction(float(event.noise_multiplier))
    return _composed(event, _pure_of)


def pure_epsilon(event: Any) -> Fraction:
    """ε by exact basic composition of Laplace events (ε = 1/noise_multiplier each), δ = 0."""
    epsilon = _pure_of(event)
    if epsilon is None:
        raise UnsupportedQueryError(
            f"pure ε-DP accounting needs Laplace events only; got {type(event).__name__}"
        )
    return epsilon


def zcdp_epsilon(event: Any, delta: Number) -> Fraction:
    """ε at δ by exact zCDP composition (Gaussian and zCDP events only)."""
    rho = _rho_of(event)
    if rho is None:
        raise UnsupportedQueryError(
            f"zCDP accounting needs Gaussian or zCDP events only; got {type(event).__name__}"
        )
    if rho == 0:
        return Fraction(0)
    return ZCDP(rho).to_approx(delta).epsilon


@dataclass(frozen=True, slots=True)
class AccountingResult:
    """The tightest certified ε at δ, which accountant gave it, and every accountant's answer."""

    loss: ApproxDP
    method: Method
    epsilons: dict[str, Fraction] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        shown = ", ".join(f"{k}: ε={float(v):.6g}" for k, v in self.epsilons.items())
        return f"{self.loss} by {self.method} ({shown})"


def numerical_epsilon(
    event: Any,
    delta: Number,
    *,
    methods: Sequence[Method] = ("pure", "zcdp", "rdp", "pld"),
    neighbouring: Neighbouring = "add_or_remove",
    value_discretization_interval: float = 1e-4,
) -> AccountingResult:
    """Ask every applicable accountant for ε at δ; report the tightest (smallest ε).

    Example:
        >>> event = self_composed(gaussian_event(100.0), 1000)
        >>> result = numerical_epsilon(event, 1e-6)
        >>> result.method, round(float(result.loss.epsilon), 2)
        ('pld', 1.37)
    """
    d = check_delta(delta, allow_zero=False)
    epsilons: dict[str, Fraction] = {}
    errors: dict[str, str] = {}
    for method in methods:
        try:
            if method == "pure":
                epsilons[method] = pure_epsilon(event)
            elif method == "zcdp":
                epsilons[method] = zcdp_epsilon(event, d)
            elif method == "rdp":
                epsilons[method] = rdp_epsilon(event, d, neighbouring=neighbouring)
            elif method == "pld":
                epsilons[method] = pld_epsilon(
                    event,
                    d,
                    neighbouring=neighbouring,
                    value_discretization_interval=value_discretization_interval,
                )
            else:
                raise InvalidParameterError("methods", method, "'pure', 'zcdp', 'rdp' or 'pld'")
        except UnsupportedQueryError as exc:
            errors[method] = str(exc)
    if not epsilons:
        raise UnsupportedQueryError(
            "no accountant supports this event: "
            + "; ".join(f"{k}: {v}" for k, v in errors.items())
        )
    found: list[Method] = [m for m in methods if m in epsilons]
    best = min(found, key=lambda m: epsilons[m])
    return AccountingResult(ApproxDP(epsilons[best], d), best, epsilons, errors)


def _composed(event: Any, leaf: Callable[[Any], Fraction | None]) -> Fraction | None:
    """Sum ``leaf`` exactly over (self-)composed events; None if any part has no exact value."""
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = leaf(event.event)
        return None if inner is None else inner * int(event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        total = Fraction(0)
        for part in event.events:
            inner = leaf(part)
            if inner is None:
                return None
            total += inner
        return total
    if isinstance(event, dp_event.NoOpDpEvent):
        return Fraction(0)
    return None
