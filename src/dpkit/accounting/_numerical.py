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
  2016, Prop. 1.6) and ``ZCDpEvent``, converted by :meth:`dpkit.core._losses.ZCDP.to_approx`;
* μ-GDP, exact and tight, for compositions of Gaussian events (homogeneous or not): the
  composition of Gaussian mechanisms with sensitivities Δ_i and noise σ_i is exactly μ-GDP with
  μ = sqrt(Σ (Δ_i/σ_i)²) (Dong, Roth & Su 2022, Cor. 3.3), and a μ-GDP mechanism is
  (ε, δ(ε))-DP with δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (ibid., Cor. 2.13; Balle & Wang
  2018, Thm. 8), which is the *optimal* δ for that ε. We invert it by bracketed root finding
  in log space and round ε up (see :func:`gdp_epsilon`).

``numerical_epsilon`` picks the fastest method that is tight: the closed form when every event
is Gaussian (sub-millisecond, exact), otherwise PLD with connect-the-dots discretisation on an
interval scaled to the size of ε (plus the cheap pure and RDP bounds), reporting the smallest.

Floats from ``dp_accounting`` are rounded up by a relative 1e-9 before they become fractions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from dp_accounting import dp_event  # type: ignore[import-untyped]
from dp_accounting.pld import pld_privacy_accountant  # type: ignore[import-untyped]
from dp_accounting.pld import privacy_loss_distribution as _pld
from dp_accounting.privacy_accountant import NeighboringRelation  # type: ignore[import-untyped]
from dp_accounting.rdp import rdp_privacy_accountant  # type: ignore[import-untyped]
from scipy import optimize, special

from dpkit._exact import Number, check_delta
from dpkit.core._losses import ZCDP, ApproxDP
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

__all__ = [
    "AccountingResult",
    "Neighbouring",
    "composed",
    "gaussian_event",
    "gdp_epsilon",
    "gdp_mu",
    "laplace_event",
    "numerical_epsilon",
    "pld_epsilon",
    "poisson_subsampled",
    "pure_epsilon",
    "randomized_response_event",
    "rdp_epsilon",
    "self_composed",
    "zcdp_epsilon",
]

Neighbouring = Literal["add_or_remove", "replace"]
Method = Literal["gdp", "pure", "zcdp", "rdp", "pld"]

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
    """One Gaussian mechanism with σ = noise_multiplier · (L2 sensitivity).

    The sensitivity is taken under the neighbouring relation used for accounting (for
    ``"replace"``, the largest change when one record is replaced).
    """
    return dp_event.GaussianDpEvent(_positive_float("noise_multiplier", noise_multiplier))


def laplace_event(noise_multiplier: Number) -> Any:
    """One Laplace mechanism with scale b = noise_multiplier · (L1 sensitivity)."""
    return dp_event.LaplaceDpEvent(_positive_float("noise_multiplier", noise_multiplier))


def randomized_response_event(noise_parameter: Number, num_buckets: int) -> Any:
    """Randomized response over ``num_buckets`` values: keep the input with probability
    1 − p, otherwise answer uniformly at random (p = ``noise_parameter``). PLD only, and only
    for the ``"replace"`` neighbouring relation (as in dp-accounting)."""
    p = float(noise_parameter)
    if not 0 < p <= 1:
        raise InvalidParameterError("noise_parameter", noise_parameter, "in (0, 1]")
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < 2:
        raise InvalidParameterError("num_buckets", num_buckets, "a whole number >= 2")
    return dp_event.RandomizedResponseDpEvent(p, num_buckets)


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


def _leaf_pld(event: Any, interval: float, relation: Any, count: int) -> Any:
    """PLD (connect-the-dots, pessimistic) of ``count`` runs of one non-Gaussian leaf event."""
    if isinstance(event, dp_event.LaplaceDpEvent):
        if relation == NeighboringRelation.REPLACE_ONE:
            return None
        one = _pld.from_laplace_mechanism(
            float(event.noise_multiplier),
            value_discretization_interval=interval,
            use_connect_dots=True,
        )
    elif isinstance(event, dp_event.RandomizedResponseDpEvent):
        if relation != NeighboringRelation.REPLACE_ONE:
            return None
        if 1 < count <= _RR_EXACT_MAX:
            return _composed_rr_pld(
                float(event.noise_parameter), int(event.num_buckets), count, interval
            )
        one = _pld.from_randomized_response(
            noise_parameter=float(event.noise_parameter),
            num_buckets=int(event.num_buckets),
            value_discretization_interval=interval,
            neighboring_relation=relation,
        )
    elif isinstance(event, dp_event.PoissonSampledDpEvent):
        q = float(event.sampling_probability)
        inner = event.event
        if isinstance(inner, dp_event.GaussianDpEvent):
            one = _pld.from_gaussian_mechanism(
                float(inner.noise_multiplier),
                value_discretization_interval=interval,
                sampling_prob=q,
                use_connect_dots=True,
                neighboring_relation=relation,
            )
        elif isinstance(inner, dp_event.LaplaceDpEvent):
            if relation == NeighboringRelation.REPLACE_ONE:
                return None
            one = _pld.from_laplace_mechanism(
                float(inner.noise_multiplier),
                value_discretization_interval=interval,
                sampling_prob=q,
                use_connect_dots=True,
            )
        else:
            return None
    else:
        return None
    return one if count == 1 else one.self_compose(count)


_RR_EXACT_MAX = 200


def _composed_rr_pld(p: float, buckets: int, count: int, interval: float) -> Any:
    """PLD of ``count`` runs of randomized response (replace one), discretised *once*.

    On neighbours x, x' the output sequence's likelihood ratio depends only on (i, j) = (how
    many outputs equal x, how many equal x'), so the pair of multinomial distributions of (i, j)
    is an exact dominating pair for the composition. Building the PLD from it rounds each loss
    up once (error < h) instead of once per run (< count·h) as composing ``count`` discretised
    single-run PLDs does. Same construction as dp-accounting's ``from_randomized_response``
    (REPLACE_ONE), with the multinomial in place of the one-run distribution.
    """
    hit = math.log(1 - p * (buckets - 1) / buckets)  # output = the input
    miss = math.log(p / buckets)  # output = the neighbour's input
    other = math.log((buckets - 2) * p / buckets) if buckets > 2 else -math.inf
    i, j = np.meshgrid(np.arange(count + 1), np.arange(count + 1), indexing="ij")
    rest = count - i - j
    keep = rest >= 0 if buckets > 2 else rest == 0
    i, j, rest = i[keep], j[keep], rest[keep]
    log_multinomial = (
        special.gammaln(count + 1)
        - special.gammaln(i + 1)
        - special.gammaln(j + 1)
        - special.gammaln(rest + 1)
    )
    with np.errstate(invalid="ignore"):
        base = log_multinomial + np.where(rest > 0, rest * other, 0.0)
    upper = base + i * hit + j * miss
    lower = base + i * miss + j * hit
    keys = list(zip(i.tolist(), j.tolist(), strict=True))
    return _pld.from_two_probability_mass_functions(
        dict(zip(keys, lower.tolist(), strict=True)),
        dict(zip(keys, upper.tolist(), strict=True)),
        True,
        interval,
        symmetric=True,
    )


def _flatten(event: Any, count: int, gaussian: list[float], leaves: list[tuple[Any, int]]) -> bool:
    """Split an event tree into Σ 1/z² over Gaussian leaves and (leaf, count) pairs."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return True
    if isinstance(event, dp_event.GaussianDpEvent):
        gaussian.append(count / float(event.noise_multiplier) ** 2)
        return True
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return _flatten(event.event, count * int(event.count), gaussian, leaves)
    if isinstance(event, dp_event.ComposedDpEvent):
        return all(_flatten(part, count, gaussian, leaves) for part in event.events)
    leaves.append((event, count))
    return True


def _connect_dots_pld(event: Any, interval: float, relation: Any) -> Any:
    """The composed PLD, or None when some leaf is not one we build (the caller falls back).

    Gaussian leaves are first merged into one Gaussian with μ = sqrt(Σ 1/z²): this is exact
    (the composition of Gaussian mechanisms is μ-GDP, Dong, Roth & Su 2022, Cor. 3.3) and
    removes their discretisation error except once.
    """
    gaussian: list[float] = []
    leaves: list[tuple[Any, int]] = []
    _flatten(event, 1, gaussian, leaves)
    parts = []
    if gaussian:
        mu = math.sqrt(math.fsum(gaussian)) * (1 + 1e-12)
        parts.append(
            _pld.from_gaussian_mechanism(
                1.0 / mu,
                value_discretization_interval=interval,
                use_connect_dots=True,
                # σ = z·Δ with Δ the sensitivity under the chosen relation: the loss is that
                # of N(0, σ²) against N(Δ, σ²) for both relations (dp-accounting's REPLACE_ONE
                # Gaussian doubles Δ instead; zCDP, RDP and μ-GDP here all use Δ).
                neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            )
        )
    for leaf, count in leaves:
        built = _leaf_pld(leaf, interval, relation, count)
        if built is None:
            return None
        parts.append(built)
    if not parts:
        return _pld.identity(value_discretization_interval=interval)
    total = parts[0]
    for part in parts[1:]:
        total = total.compose(part)
    return total


def _auto_interval(event: Any, delta: float, neighbouring: Neighbouring) -> float:
    """Discretisation interval ~ ε/10⁴ (from a cheap RDP upper bound), within [1e-4, 1e-2].

    The grid of a composed PLD spans a range of losses that grows with ε; scaling the interval
    with ε keeps the number of grid points (time, memory) roughly constant while the relative
    error in ε stays ~1e-5 (measured in tests/unit/accounting/test_numerical.py and
    benchmarks/accounting.py).
    """
    try:
        rough = float(rdp_epsilon(event, delta, neighbouring=neighbouring))
    except (UnsupportedQueryError, ValueError):
        try:
            rough = float(
                pld_epsilon(
                    event, delta, value_discretization_interval=0.05, neighbouring=neighbouring
                )
            )
        except UnsupportedQueryError:
            rough = 1.0
    return min(1e-2, max(1e-4, rough * 1e-4))


def pld_epsilon(
    event: Any,
    delta: Number,
    *,
    value_discretization_interval: float | None = 1e-4,
    neighbouring: Neighbouring = "add_or_remove",
) -> Fraction:
    """ε at δ from dp-accounting's privacy-loss distributions, rounded up.

    Leaves (Laplace, randomized response, Poisson-subsampled Gaussian or Laplace) are built with
    the *connect-the-dots* discretisation (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022),
    which is pessimistic: the PLD it builds dominates the true one, so δ(ε) and hence ε are
    upper bounds (up to floating point; the result is rounded up by a relative 1e-9). Gaussian
    leaves are merged exactly into one Gaussian first. Events we do not build go through
    ``dp_accounting.pld.PLDAccountant`` (also pessimistic).

    ``value_discretization_interval=None`` picks ε/10⁴ (from an RDP upper bound) within
    [1e-4, 1e-2]. Error: the answer is always an upper bound. For the classical pessimistic
    rounding of losses up to a grid of step h ("privacy buckets"), k composed mechanisms
    overstate ε by at most k·h; for randomized response (a discrete PLD) up to 200 runs are
    composed exactly first and rounded once (< h), beyond that k runs add < k·h. For the
    continuous leaves dp-accounting gives no
    a-priori bound for connect-the-dots; Doroshenko et al. 2022 show it is markedly tighter in
    practice, and we measure it: the tests require < 1e-4 relative excess over a finer grid and
    over the μ-GDP closed form; benchmarks/accounting.py compares with a 10× finer grid
    (docs/accounting.md has the figures).
    """
    d = check_delta(delta, allow_zero=False)
    relation = _relation(neighbouring)
    interval = (
        _auto_interval(event, float(d), neighbouring)
        if value_discretization_interval is None
        else _positive_float("value_discretization_interval", value_discretization_interval)
    )
    built = _connect_dots_pld(event, interval, relation)
    if built is not None:
        return _round_up(float(built.get_epsilon_for_delta(float(d))))
    accountant = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=relation,
        value_discretization_interval=interval,
    )
    if not accountant.supports(event):
        raise UnsupportedQueryError(f"the PLD accountant does not support {event!r}")
    accountant.compose(event)
    return _round_up(float(accountant.get_epsilon(float(d))))


# --- exact μ-GDP (Gaussian compositions) -------------------------------------------------------


def gdp_mu(event: Any) -> float | None:
    """μ of a composition of Gaussian events (μ = sqrt(Σ 1/z_i²), z_i = σ_i/Δ_i), else None.

    Rounded up by a relative 1e-12 to cover the floating-point sum.
    """
    gaussian: list[float] = []
    leaves: list[tuple[Any, int]] = []
    _flatten(event, 1, gaussian, leaves)
    if leaves:
        return None
    return math.sqrt(math.fsum(gaussian)) * (1 + 1e-12)


def _gdp_log_delta(epsilon: float, mu: float) -> float:
    """log δ(ε) for μ-GDP, computed in log space so that e^ε Φ(·) cannot overflow."""
    log_a = float(special.log_ndtr(-epsilon / mu + mu / 2))
    log_b = float(special.log_ndtr(-epsilon / mu - mu / 2))
    ratio = epsilon + log_b - log_a  # < 0: e^ε Φ(b) < Φ(a)
    if ratio >= 0:
        return -math.inf
    return log_a + math.log(-math.expm1(ratio))


def gdp_epsilon(event: Any, delta: Number) -> Fraction:
    """The exact ε at δ of a composition of Gaussian events, through μ-GDP; rounded up.

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) is continuous and strictly decreasing in ε, so
    we bracket the root of log δ(ε) = log δ (the upper end from the zCDP bound
    ε ≤ ρ + 2·sqrt(ρ·log(1/δ)), ρ = μ²/2, doubled until it is past the root), solve it with
    Brent's method to ~1e-15 relative, then move the answer up by a relative 1e-9 and check
    δ(ε) ≤ δ there (stepping further up if not), so floating-point error cannot make ε too small.
    """
    d = float(check_delta(delta, allow_zero=False))
    mu = gdp_mu(event)
    if mu is None:
        raise UnsupportedQueryError(
            f"the μ-GDP closed form needs Gaussian events only; got {type(event).__name__}"
        )
    if mu == 0:
        return Fraction(0)
    target = math.log(d)

    def f(eps: float) -> float:
        return _gdp_log_delta(eps, mu) - target

    if f(0.0) <= 0:
        return Fraction(0)
    rho = mu * mu / 2
    hi = rho + 2 * math.sqrt(rho * math.log(1 / d)) + 1.0
    while f(hi) > 0:
        hi *= 2
    root = float(optimize.brentq(f, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps))
    eps = root * (1 + 1e-9) + 1e-12
    while f(eps) > 0:
        eps = eps * (1 + 1e-9) + 1e-12
    return _round_up(eps)


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
    """The tightest certified ε at δ, which accountant gave it, and every accountant's answer.

    ``detail`` says how the reported ε was obtained (e.g. the closed form and μ, or the PLD
    discretisation interval).
    """

    loss: ApproxDP
    method: Method
    epsilons: dict[str, Fraction] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    detail: str = ""

    def __str__(self) -> str:
        shown = ", ".join(f"{k}: ε={float(v):.6g}" for k, v in self.epsilons.items())
        how = f"; {self.detail}" if self.detail else ""
        return f"{self.loss} by {self.method} ({shown}{how})"


_ALL: tuple[Method, ...] = ("gdp", "pure", "zcdp", "rdp", "pld")


def numerical_epsilon(
    event: Any,
    delta: Number,
    *,
    methods: Sequence[Method] | None = None,
    neighbouring: Neighbouring = "add_or_remove",
    value_discretization_interval: float | None = None,
) -> AccountingResult:
    """Certified ε at δ by the fastest tight method; ``method`` and ``detail`` say which.

    With ``methods=None`` (automatic):

    * every event Gaussian (homogeneous or not) → the exact μ-GDP closed form
      (:func:`gdp_epsilon`), which is the optimal ε; nothing else is run;
    * otherwise → PLD with connect-the-dots discretisation on an interval ~ ε/10⁴
      (:func:`pld_epsilon`), next to the cheap exact-pure and RDP bounds; the smallest wins.

    With explicit ``methods``, each listed accountant that supports the event is run and the
    smallest ε is reported. Every candidate is an upper bound, rounded up.

    Example:
        >>> event = self_composed(gaussian_event(100.0), 1000)
        >>> result = numerical_epsilon(event, 1e-6)
        >>> result.method, round(float(result.loss.epsilon), 2)
        ('gdp', 1.37)
    """
    d = check_delta(delta, allow_zero=False)
    _relation(neighbouring)
    if methods is None:
        mu = gdp_mu(event)
        if mu is not None:
            eps = gdp_epsilon(event, d)
            return AccountingResult(
                ApproxDP(eps, d),
                "gdp",
                {"gdp": eps},
                {},
                f"exact μ-GDP closed form, μ = {mu:.6g}",
            )
    chosen: Sequence[Method] = ("pure", "rdp", "pld") if methods is None else methods
    epsilons: dict[str, Fraction] = {}
    errors: dict[str, str] = {}
    interval = value_discretization_interval
    for method in chosen:
        try:
            if method == "gdp":
                epsilons[method] = gdp_epsilon(event, d)
            elif method == "pure":
                epsilons[method] = pure_epsilon(event)
            elif method == "zcdp":
                epsilons[method] = zcdp_epsilon(event, d)
            elif method == "rdp":
                epsilons[method] = rdp_epsilon(event, d, neighbouring=neighbouring)
            elif method == "pld":
                if interval is None:
                    rough = epsilons.get("rdp")
                    interval = (
                        min(1e-2, max(1e-4, float(rough) * 1e-4))
                        if rough is not None
                        else _auto_interval(event, float(d), neighbouring)
                    )
                epsilons[method] = pld_epsilon(
                    event,
                    d,
                    neighbouring=neighbouring,
                    value_discretization_interval=interval,
                )
            else:
                raise InvalidParameterError("methods", method, f"one of {_ALL}")
        except UnsupportedQueryError as exc:
            errors[method] = str(exc)
    if not epsilons:
        raise UnsupportedQueryError(
            "no accountant supports this event: "
            + "; ".join(f"{k}: {v}" for k, v in errors.items())
        )
    found: list[Method] = [m for m in chosen if m in epsilons]
    best = min(found, key=lambda m: epsilons[m])
    details = {
        "gdp": "exact μ-GDP closed form",
        "pure": "exact basic composition of pure ε-DP",
        "zcdp": "exact zCDP composition",
        "rdp": "Rényi DP (dp-accounting)",
        "pld": f"PLD, connect-the-dots, interval {interval:.3g}" if interval else "PLD",
    }
    return AccountingResult(ApproxDP(epsilons[best], d), best, epsilons, errors, details[best])


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
