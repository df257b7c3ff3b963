"""Propose-test-release (Dwork & Lei 2009) with the distance to instability.

The analyst proposes a sensitivity bound b. With B^(k)(x) the distance-k sensitivity of
:mod:`dpkit.sensitivity._local` (exact, or an upper bound with B^(k)(y) <= B^(k+1)(x) for
neighbours), the distance to instability is d(x) = min{k >= 0 : B^(k)(x) > b}, capped at a public
C. Then:

1. **test**: d̂ = min(d(x), C) + Z with Z discrete Laplace of scale 1/ε_test (exact);
2. if d̂ <= T = ⌈ln(1/δ)/ε_test⌉: **refuse** — the result says so; the refusal *is* the output;
3. else **release** f(x) rounded to the grid + discrete Laplace noise for sensitivity b
   (plus one grid step of float/rounding slack) at ε_release.

Guarantee: (ε_test + ε_release, δ)-DP under substitution of one unit (public n).
Sketch: d is 1-sensitive (B^(k)(y) <= B^(k+1)(x) in both directions; capping keeps it), so the
test is ε_test-DP. If d(x) >= 1 then LS(x) <= B^(0)(x) <= b, so for every neighbour y the release
step is ε_release-DP, and composition gives the bound. If d(x) = 0 the release happens with
probability P(Z > T) <= e^{−ε_test(T+1)} <= δ, which the δ pays for (Vadhan 2017, Prop. 3.4).
A refusal is charged like a release: the Measurement's loss is the same either way, and the
result is a :class:`PTRResult` value, never an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, check_delta, check_epsilon, log_upper, sensitivity_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import ApproxDP
from dpkit.core._spaces import AtomDomain, ChangeOneDistance, VectorDomain
from dpkit.errors import InvalidParameterError, UnsupportedQueryError
from dpkit.noise import discrete_laplace
from dpkit.sensitivity._data import Bounds, Statistic, check_n, make_statistic, prepare
from dpkit.sensitivity._info import SensitivityInfo
from dpkit.sensitivity._local import _a_k_sorted
from dpkit.sensitivity._noise import discrete_laplace_wide
from dpkit.sensitivity._smooth import default_exponent, statistic_range, statistic_value

__all__ = ["PTRResult", "distance_to_instability", "make_propose_test_release"]


@dataclass(frozen=True, slots=True)
class PTRResult:
    """The output of propose-test-release: ``value`` is None exactly when ``refused``."""

    value: float | None
    refused: bool

    def __float__(self) -> float:
        return math.nan if self.value is None else self.value


def distance_to_instability(
    xp: np.ndarray, stat: Statistic, bounds: Bounds, bound: float, cap: int
) -> int:
    """min(d(x), cap) with d(x) = min{k : B^(k)(x) > bound}; binary search (B^(k) is monotone)."""
    if _a_k_sorted(xp, stat, 0, bounds) > bound:
        return 0
    if _a_k_sorted(xp, stat, cap, bounds) <= bound:
        return cap
    lo, hi = 0, cap  # B^(lo) <= bound < B^(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _a_k_sorted(xp, stat, mid, bounds) > bound:
            hi = mid
        else:
            lo = mid
    return hi


def make_propose_test_release(
    statistic: str,
    *,
    lower: Number,
    upper: Number,
    n: int,
    bound: Number,
    epsilon_test: Number,
    epsilon_release: Number,
    delta: Number,
    q: Number | None = None,
    trim: Number | None = None,
    noisy_test: bool = True,
) -> Measurement[PTRResult]:
    """Propose-test-release for ``statistic`` with proposed local-sensitivity ``bound``.

    Guarantee: (ε_test + ε_release, δ)-DP (module docstring; docs/sensitivity.md §4).
    ``noisy_test=False`` is the classic mistake (a test without noise) and is **not private**;
    it exists so the audit can show it fails, and its claimed loss is the same false one.

    Example:
        >>> from dpkit.sensitivity._ptr import make_propose_test_release
        >>> m = make_propose_test_release("median", lower=0, upper=100, n=101, bound=1,
        ...                               epsilon_test=0.5, epsilon_release=0.5, delta=1e-6)
        >>> str(m.loss)
        'ε=1, δ=1e-06'
    """
    stat = make_statistic(statistic, q=q, trim=trim)
    if stat.name == "variance":
        raise UnsupportedQueryError(
            "variance: its float computation has no proven error bound here; use "
            "sample_and_aggregate for a release"
        )
    bounds = Bounds.of(lower, upper)
    size = check_n(n)
    b = sensitivity_of("bound", bound)
    if b <= 0:
        raise InvalidParameterError("bound", bound, "> 0")
    e_test = check_epsilon(epsilon_test, "epsilon_test")
    e_rel = check_epsilon(epsilon_release, "epsilon_release")
    dlt = check_delta(delta, allow_zero=False)
    threshold = math.ceil(log_upper(1 / dlt) / e_test)
    cap = min(size + 1, threshold + math.ceil(Fraction(40) / e_test) + 1)
    low, high = statistic_range(stat, bounds, size)
    exponent = default_exponent(low, high)
    g = Fraction(2) ** exponent
    steps = math.ceil((b + g) / g)
    scale = Fraction(steps) / e_rel
    width = high - low
    lo_idx = math.floor(Fraction(low - width) / g)
    hi_idx = math.ceil(Fraction(high + width) / g)
    loss = ApproxDP(e_test + e_rel, dlt)

    def release_many(data: Any, k: int) -> list[PTRResult]:
        xp = prepare(data, bounds, size)
        d = distance_to_instability(xp, stat, bounds, float(b), cap)
        noise = discrete_laplace(1 / e_test, k) if noisy_test else np.zeros(k, dtype=np.int64)
        passed = (d + noise) > threshold
        centre = round(Fraction(statistic_value(xp, stat)) / g)
        out_noise = discrete_laplace_wide(scale, int(passed.sum()))
        values = iter(out_noise)
        results = []
        for ok in passed:
            if ok:
                index = min(max(centre + next(values), lo_idx), hi_idx)
                results.append(PTRResult(math.ldexp(float(index), exponent), False))
            else:
                results.append(PTRResult(None, True))
        return results

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float"), size=size),
        input_metric=ChangeOneDistance(),
        output_measure="approx",
        function=lambda data: release_many(data, 1)[0],
        privacy_map=lambda d_in: loss if d_in <= 1 else _refuse_group(d_in),
        name=f"propose_test_release({stat.name})",
        d_in=Fraction(1),
        info=SensitivityInfo(threshold=threshold, release_many=release_many, bound=b),
    )


def _refuse_group(d_in: Fraction) -> ApproxDP:
    raise InvalidParameterError(
        "d_in", d_in, "at most 1: propose-test-release is calibrated for one substitution"
    )
