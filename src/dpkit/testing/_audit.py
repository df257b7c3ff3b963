"""Statistical privacy audits: a lower bound on the real privacy loss, from samples.

An audit runs a mechanism many times on two neighbouring inputs and looks for an output event E
whose probabilities under the two inputs are too far apart for the claimed loss. It can refute a
claim (with a stated confidence), never prove one: a passing audit means only that this family of
events, at this sample size, found nothing.

The procedure (:func:`audit_samples`):

1. each sample set is split into a *selection* half and a *held-out* half;
2. on the selection half, every event in a fixed family (threshold sets {x >= c}, {x <= c} and
   intervals for real outputs; singletons and threshold sets for discrete outputs), in either
   direction (a against b, b against a), is scored by the privacy loss it certifies on that half;
   the best one is chosen;
3. on the held-out half, *only that event* is counted: Clopper–Pearson bounds give p_lo <= P_a(E)
   and q_hi >= P_b(E), each with probability >= 1 - (1 - confidence)/2, so both hold with
   probability >= ``confidence`` (union bound);
4. if the mechanism were (ε, δ)-DP then P_a(E) <= e^ε·P_b(E) + δ, hence
   ε >= ln((p_lo - δ)/q_hi) =: ε_lb whenever both bounds hold.

Because the held-out half is independent of the selection and exactly one event is evaluated on
it, there is no multiple-comparison correction to make: P(ε_lb > true ε) <= 1 - confidence,
however many events the selection step looked at. For zCDP claims (:func:`audit_samples_zcdp`)
step 4 uses the Rényi divergence of the two Bernoulli distributions of 1{E}, which
post-processing cannot increase: ρ >= max_α D_α(Ber(p_lo) ‖ Ber(q_hi))/α =: ρ_lb (D_α grows as p
rises above q and as q falls below p, so the corner of the confidence box is the smallest value).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit._exact import Number, fraction_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError, PrivacyCheckError
from dpkit.noise._distributions import GridNoise

__all__ = ["AuditResult", "audit_measurement", "audit_samples", "audit_samples_zcdp"]

Events = Literal["auto", "real", "discrete"]

_DISCRETE_MAX_VALUES = 64  # "auto": at most this many distinct values means discrete outputs
_AUDIT_ALPHAS = np.geomspace(1.01, 200.0, 60)


@dataclass(frozen=True, slots=True)
class AuditResult:
    """The outcome of a statistical privacy audit.

    Attributes:
        epsilon_lower_bound: ε_lb = max(0, ln((p_lo - δ)/q_hi)) for the chosen event: with
            probability >= ``confidence`` the mechanism's real ε (at the claimed δ; at δ = 0 for
            a zCDP audit) is at least this.
        claimed: the claimed loss.
        passed: False when the audit refutes the claim (ε_lb > ε, or ρ_lb > ρ for zCDP).
        event: the chosen event, e.g. ``"x >= 1.5"``, and the direction it was tested in.
        counts: held-out counts (k_a, n_a, k_b, n_b): k_a of n_a samples of the first set fell
            in the event, k_b of n_b of the second (after orienting the direction).
        confidence: the confidence of the bound.
        rho_lower_bound: for zCDP audits, ρ_lb; else None.
    """

    epsilon_lower_bound: float
    claimed: PrivacyLoss
    passed: bool
    event: str
    counts: tuple[int, int, int, int]
    confidence: float
    rho_lower_bound: float | None = None

    def raise_if_failed(self) -> AuditResult:
        """Raise :class:`PrivacyCheckError` if the audit refutes the claim; else return self."""
        if not self.passed:
            k_a, n_a, k_b, n_b = self.counts
            found = (
                f"ρ is at least {self.rho_lower_bound:.4g}"
                if self.rho_lower_bound is not None
                else f"ε is at least {self.epsilon_lower_bound:.4g}"
            )
            raise PrivacyCheckError(
                f"the audit refutes the claim {self.claimed}: with confidence "
                f"{self.confidence:.4%} the realised {found} (event {self.event}: {k_a}/{n_a} "
                f"vs {k_b}/{n_b} held-out samples). The mechanism leaks more than its privacy "
                "map says: check its noise calibration."
            )
        return self


# ----------------------------------------------------------------------- helpers
def _samples(name: str, values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim == 2 and 1 in array.shape:
        array = array.reshape(-1)
    if array.ndim != 1 or array.dtype.kind not in "biuf":
        raise InvalidParameterError(
            name,
            f"array of shape {array.shape} and dtype {array.dtype}",
            "a 1-d array of numbers (one release per entry)",
            "For vector outputs, audit one coordinate or a scalar statistic of the release.",
        )
    if array.size < 20:
        raise InvalidParameterError(name, f"{array.size} samples", "at least 20 samples")
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise InvalidParameterError(name, "samples with NaN or inf", "finite samples")
    return array


def _check_confidence(confidence: float) -> float:
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not (0.5 <= float(confidence) < 1)
    ):
        raise InvalidParameterError("confidence", confidence, "in [0.5, 1), e.g. 0.999")
    return float(confidence)


def _lower(k: np.ndarray, n: int, level: float) -> np.ndarray:
    """Clopper–Pearson lower bound: P(p >= bound) >= level."""
    from scipy.stats import beta  # here: scipy.stats costs ~1 s to import (every CLI query)

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = beta.ppf(1.0 - level, k, n - k + 1.0)
    return np.where(k <= 0, 0.0, out)


def _upper(k: np.ndarray, n: int, level: float) -> np.ndarray:
    """Clopper–Pearson upper bound: P(p <= bound) >= level."""
    from scipy.stats import beta

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = beta.ppf(level, k + 1.0, n - k)
    return np.where(k >= n, 1.0, out)


def _epsilon_bound(p_lo: np.ndarray, q_hi: np.ndarray, delta: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.log((p_lo - delta) / q_hi)
    return np.where(p_lo > delta, np.maximum(value, 0.0), 0.0)


def _rho_bound(p_lo: np.ndarray, q_hi: np.ndarray) -> np.ndarray:
    """max over α of D_α(Ber(p_lo) ‖ Ber(q_hi))/α where p_lo > q_hi, else 0."""
    p = np.clip(np.asarray(p_lo, dtype=np.float64), 1e-300, 1.0)
    q = np.clip(np.asarray(q_hi, dtype=np.float64), 1e-300, 1.0)
    a = _AUDIT_ALPHAS[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = a * np.log(p) + (1 - a) * np.log(q)
        outside = a * np.log1p(-p) + (1 - a) * np.log1p(-q)
        outside = np.where(p >= 1.0, -np.inf, outside)
        divergence = np.logaddexp(inside, outside) / (a - 1)
    best = np.max(divergence / a, axis=0)
    return np.where(p_lo > q_hi, np.maximum(best, 0.0), 0.0)


def _events(pooled: np.ndarray, kind: Events) -> tuple[np.ndarray, np.ndarray, str]:
    """The event family as closed intervals [lo, hi] (±inf for one-sided sets)."""
    values = np.unique(pooled)
    discrete = kind == "discrete" or (kind == "auto" and values.size <= _DISCRETE_MAX_VALUES)
    inf = np.inf
    if discrete:
        lo = np.concatenate([values, np.full(values.size, -inf), values])
        hi = np.concatenate([values, values, np.full(values.size, inf)])
        return lo, hi, "discrete"
    levels = np.concatenate(
        [[1e-4, 3e-4, 1e-3, 3e-3], np.linspace(0.005, 0.995, 199), [0.997, 0.999, 0.9997, 0.9999]]
    )
    cuts = np.unique(np.quantile(pooled, levels, method="inverted_cdf"))
    coarse = np.unique(np.quantile(pooled, np.linspace(0.02, 0.98, 49), method="inverted_cdf"))
    i, j = np.triu_indices(coarse.size, k=1)
    lo = np.concatenate([np.full(cuts.size, -inf), cuts, coarse[i]])
    hi = np.concatenate([cuts, np.full(cuts.size, inf), coarse[j]])
    return lo, hi, "real"


def _count(sorted_values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.searchsorted(sorted_values, hi, side="right") - np.searchsorted(
        sorted_values, lo, side="left"
    )


def _describe(lo: float, hi: float) -> str:
    if math.isinf(lo):
        return f"x <= {hi:.10g}"
    if math.isinf(hi):
        return f"x >= {lo:.10g}"
    if lo == hi:
        return f"x == {lo:.10g}"
    return f"{lo:.10g} <= x <= {hi:.10g}"


def _audit(
    samples_a: Any, samples_b: Any, claimed: PrivacyLoss, confidence: float, events: Events
) -> AuditResult:
    if events not in ("auto", "real", "discrete"):
        raise InvalidParameterError("events", events, "'auto', 'real' or 'discrete'")
    confidence = _check_confidence(confidence)
    a = _samples("samples_a", samples_a)
    b = _samples("samples_b", samples_b)
    half_a, half_b = a.size // 2, b.size // 2
    select_a, held_a = np.sort(a[:half_a]), np.sort(a[half_a:])
    select_b, held_b = np.sort(b[:half_b]), np.sort(b[half_b:])
    level = 1.0 - (1.0 - confidence) / 2.0
    zcdp = isinstance(claimed, ZCDP)
    delta = float(claimed.delta) if isinstance(claimed, ApproxDP) else 0.0

    def score(k_p: np.ndarray, n_p: int, k_q: np.ndarray, n_q: int) -> np.ndarray:
        p_lo, q_hi = _lower(k_p, n_p, level), _upper(k_q, n_q, level)
        return _rho_bound(p_lo, q_hi) if zcdp else _epsilon_bound(p_lo, q_hi, delta)

    lo, hi, family = _events(np.concatenate([select_a, select_b]), events)
    count_a, count_b = _count(select_a, lo, hi), _count(select_b, lo, hi)
    forward = score(count_a, select_a.size, count_b, select_b.size)
    backward = score(count_b, select_b.size, count_a, select_a.size)
    if float(backward.max()) > float(forward.max()):
        index, swapped = int(np.argmax(backward)), True
    else:
        index, swapped = int(np.argmax(forward)), False

    event_lo, event_hi = np.array([lo[index]]), np.array([hi[index]])
    k_a = int(_count(held_a, event_lo, event_hi)[0])
    k_b = int(_count(held_b, event_lo, event_hi)[0])
    n_a, n_b = held_a.size, held_b.size
    if swapped:
        k_p, n_p, k_q, n_q, direction = k_b, n_b, k_a, n_a, "P_b(E) against P_a(E)"
    else:
        k_p, n_p, k_q, n_q, direction = k_a, n_a, k_b, n_b, "P_a(E) against P_b(E)"
    p_lo = _lower(np.array([k_p]), n_p, level)
    q_hi = _upper(np.array([k_q]), n_q, level)
    epsilon_lb = float(_epsilon_bound(p_lo, q_hi, delta)[0])
    description = f"E = {{{_describe(lo[index], hi[index])}}}, {direction} ({family} outputs)"
    if isinstance(claimed, ZCDP):
        rho_lb = float(_rho_bound(p_lo, q_hi)[0])
        return AuditResult(
            epsilon_lb,
            claimed,
            rho_lb <= float(claimed.rho),
            description,
            (k_p, n_p, k_q, n_q),
            confidence,
            rho_lb,
        )
    return AuditResult(
        epsilon_lb,
        claimed,
        epsilon_lb <= float(claimed.epsilon),
        description,
        (k_p, n_p, k_q, n_q),
        confidence,
    )


# ----------------------------------------------------------------------- public
def audit_samples(
    samples_a: Any,
    samples_b: Any,
    claimed_epsilon: Number,
    claimed_delta: Number = 0,
    confidence: float = 0.999,
    events: Events = "auto",
) -> AuditResult:
    """Audit an (ε, δ) claim from i.i.d. releases on two neighbouring inputs.

    Args:
        samples_a: releases of the mechanism on input a (a 1-d array of numbers, i.i.d. in the
            order given: the first half selects the event, the second half tests it).
        samples_b: releases on input b, a neighbour of a.
        claimed_epsilon: the claimed ε.
        claimed_delta: the claimed δ (default 0: pure DP).
        confidence: the probability that the returned lower bound is valid (default 0.999); at
            most ``1 - confidence`` of audits of a correct mechanism fail.
        events: the event family: ``"discrete"`` (singletons and threshold sets over the
            observed values), ``"real"`` (threshold sets at ~200 quantiles and ~1200 intervals)
            or ``"auto"`` (discrete when there are at most 64 distinct values).

    Returns:
        An :class:`AuditResult`; its lower bound is valid at ``confidence`` with no correction
        for the number of events examined, because exactly one event — chosen on the selection
        half — is evaluated on the independent held-out half.

    Example:
        >>> import numpy as np
        >>> from dpkit.testing import audit_samples
        >>> coin = np.array([0, 1] * 500)
        >>> audit_samples(coin, coin, claimed_epsilon=0.1).passed
        True
    """
    eps = fraction_of("claimed_epsilon", claimed_epsilon)
    delta = fraction_of("claimed_delta", claimed_delta)
    claimed: PrivacyLoss = PureDP(eps) if delta == 0 else ApproxDP(eps, delta)
    return _audit(samples_a, samples_b, claimed, confidence, events)


def audit_samples_zcdp(
    samples_a: Any,
    samples_b: Any,
    claimed_rho: Number,
    confidence: float = 0.999,
    events: Events = "auto",
) -> AuditResult:
    """Audit a ρ-zCDP claim from i.i.d. releases on two neighbouring inputs.

    Same procedure as :func:`audit_samples`; the chosen event E gives
    ρ_lb = max_α D_α(Ber(p_lo) ‖ Ber(q_hi))/α over 60 orders α in [1.01, 200], a valid lower
    bound on ρ with probability >= ``confidence`` (a ρ-zCDP mechanism has
    D_α(Ber(P_a(E)) ‖ Ber(P_b(E))) <= α·ρ for every α by post-processing).
    """
    rho = fraction_of("claimed_rho", claimed_rho)
    return _audit(samples_a, samples_b, ZCDP(rho), confidence, events)


def _releases(
    measurement: Measurement[Any],
    data: Any,
    n: int,
    vectorised: bool,
    statistic: Callable[[Any], float] | None,
) -> np.ndarray:
    if vectorised:
        if np.ndim(data) != 0:
            raise InvalidParameterError(
                "vectorised",
                True,
                "False for array inputs",
                "Only a scalar input can be tiled into one call; arrays are released one by one.",
            )
        many = measurement.info.release_many
        try:
            if many is not None:  # the mechanism's own batch of independent scalar releases
                out = np.asarray(many(data, n))
            else:
                out = np.asarray(measurement(np.full(n, data)))
        except InvalidDataError:
            # e.g. grid mechanisms refuse vectors off their grid (rounding could move several
            # coordinates); a scalar is fine, so release it n times instead
            return _releases(measurement, data, n, False, statistic)
        if out.shape != (n,):
            raise InvalidParameterError(
                "vectorised",
                True,
                "False for this measurement",
                f"Called on {n} copies of the input it returned shape {out.shape}, not ({n},).",
            )
        releases: list[Any] | np.ndarray = out
    else:
        releases = [measurement(data) for _ in range(n)]
    if statistic is not None:
        return np.array([statistic(value) for value in releases], dtype=np.float64)
    return np.asarray(releases, dtype=np.float64)


def audit_measurement(
    measurement: Measurement[Any],
    data_a: Any,
    data_b: Any,
    n_samples: int,
    *,
    d_in: Number | None = None,
    confidence: float = 0.999,
    events: Events = "auto",
    vectorised: bool | None = None,
    statistic: Callable[[Any], float] | None = None,
) -> AuditResult:
    """Run ``measurement`` ``n_samples`` times on each of two inputs and audit its claim.

    Args:
        measurement: the measurement to audit.
        data_a, data_b: two inputs at distance at most ``d_in`` (the caller vouches for this).
        n_samples: releases per input.
        d_in: the distance between the inputs; default ``measurement.d_in`` (the distance the
            measurement was calibrated for). The claim audited is ``measurement.map(d_in)``:
            PureDP and ApproxDP with :func:`audit_samples`, ZCDP with
            :func:`audit_samples_zcdp`.
        confidence, events: see :func:`audit_samples`.
        vectorised: call the measurement once on ``np.full(n_samples, data)`` instead of
            ``n_samples`` times. Only valid when it adds independent noise per element; the
            default is True exactly for scalar inputs to additive grid mechanisms
            (``measurement.noise`` is a GridNoise). If the tiled call is refused with
            InvalidDataError (a grid mechanism refuses vectors off its grid), the releases are
            drawn one call at a time.
        statistic: a function applied to each release to make it a number (for vector or
            structured outputs).
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 40:
        raise InvalidParameterError("n_samples", n_samples, "an integer >= 40")
    distance = measurement.d_in if d_in is None else fraction_of("d_in", d_in)
    if distance is None:
        raise InvalidParameterError("d_in", d_in, "given: the measurement has no default d_in")
    claim = measurement.map(Fraction(distance))
    if vectorised is None:
        vectorised = (
            isinstance(measurement.noise, GridNoise)
            and np.ndim(data_a) == 0
            and np.ndim(data_b) == 0
        )
    a = _releases(measurement, data_a, n_samples, vectorised, statistic)
    b = _releases(measurement, data_b, n_samples, vectorised, statistic)
    return _audit(a, b, claim, confidence, events)
