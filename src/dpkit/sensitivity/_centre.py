"""A "centre of attention"-style aggregator for sample-and-aggregate (NRS 2007 §4; Smith 2011).

The m block outputs of sample-and-aggregate (one coordinate at a time) are summarised by the
mean of the values that the *bulk* of the blocks agree on:

1. **Where is the attention?** The (½ − γ) and (½ + γ) quantiles a <= b of the m values are
   released with the inverse sensitivity (exponential) mechanism, ε/4 each (γ = ``coverage``,
   default 1/4: the interquartile range). Substituting one block value moves every path length
   by at most one, so each is (ε/4)-DP (McSherry & Talwar 2007; Asi & Duchi 2020).
2. **The centre.** Given the released interval [a, b] (public from here on), the values are
   clipped to it and their mean is released with discrete Laplace noise for the sensitivity
   (b − a)/m on the public grid g (plus g for the float mean's rounding and the grid rounding:
   ``math.fsum`` is correctly rounded and one division adds at most half an ulp), at ε/2.
3. The result is clamped to the declared output range (post-processing).

**Guarantee:** pure ε-DP for value vectors of the public length m that differ in one coordinate
(one block), by adaptive sequential composition: ε/4 + ε/4 + ε/2. In sample-and-aggregate one
privacy unit changes one block, so the whole release is ε-DP per coordinate budget.

Unlike Smith's widened winsorized mean, the interval is not widened: the aggregate is the centre
of where the blocks concentrate (a trimmed-mean–like, robust centre), and its noise is
(b − a)/(m·ε/2), so it is accurate when the middle 2γ of the blocks agree, even if a few blocks
are wild. The declared output range only bounds the search for a and b; it is never the noise
scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, check_epsilon, fraction_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.core._spaces import AtomDomain, ChangeOneDistance, VectorDomain
from dpkit.errors import InternalError, InvalidParameterError
from dpkit.sensitivity._data import Bounds
from dpkit.sensitivity._info import SensitivityInfo
from dpkit.sensitivity._inverse import make_inverse_sensitivity
from dpkit.sensitivity._noise import discrete_laplace_wide

__all__ = ["make_centre_of_attention"]


def _release_many(m: Measurement[Any]) -> Callable[..., Any]:
    release_many = m.info.release_many
    if release_many is None:  # pragma: no cover - make_inverse_sensitivity always states it
        raise InternalError(f"{m.name} states no release_many", charged=False)
    return release_many


def make_centre_of_attention(
    *,
    m: int,
    lower: Number,
    upper: Number,
    epsilon: Number,
    coverage: Number = Fraction(1, 4),
    interval: Any = None,
) -> Measurement[float]:
    """The centre-of-attention aggregator of m values in [lower, upper] (module docstring).

    Guarantee: ε-DP under substitution of one of the m values (``ChangeOneDistance``); NaN is
    mapped to ``lower`` and values are clamped, so no value can make it raise. ``interval`` is
    for tests only: a function ``values -> (a, b)`` that replaces step 1 (a broken variant when
    it is not private). All parameters are checked here, before any data is read.

    Example:
        >>> import numpy as np
        >>> from dpkit.sensitivity._centre import make_centre_of_attention
        >>> agg = make_centre_of_attention(m=100, lower=-10, upper=10, epsilon=1)
        >>> -10 <= agg(np.full(100, 2.0)) <= 10
        True
    """
    if isinstance(m, bool) or not isinstance(m, int) or not 2 <= m < 2**40:
        raise InvalidParameterError("m", m, "an integer in [2, 2^40)")
    size = m
    bounds = Bounds.of(lower, upper)
    eps = check_epsilon(epsilon)
    gamma = fraction_of("coverage", coverage)
    if not 0 < gamma < Fraction(1, 2):
        raise InvalidParameterError("coverage", coverage, "in (0, 1/2)")
    lo, hi = bounds.lower, bounds.upper
    exponent = math.frexp(max(abs(lo), abs(hi), hi - lo))[1] - 40
    g = Fraction(2) ** exponent
    q_lo = make_inverse_sensitivity(
        "quantile", q=Fraction(1, 2) - gamma, lower=lo, upper=hi, n=size, epsilon=eps / 4
    )
    q_hi = make_inverse_sensitivity(
        "quantile", q=Fraction(1, 2) + gamma, lower=lo, upper=hi, n=size, epsilon=eps / 4
    )
    lo_idx, hi_idx = math.floor(Fraction(lo) / g), math.ceil(Fraction(hi) / g)

    def release_many(data: Any, k: int) -> np.ndarray:
        values = np.asarray(data, dtype=np.float64).reshape(-1)
        if values.size != size:
            raise InvalidParameterError("data", f"{values.size} values", f"exactly m={size}")
        values = np.clip(np.where(np.isnan(values), lo, values), lo, hi)
        if interval is None:
            a_all = _release_many(q_lo)(values, k)
            b_all = _release_many(q_hi)(values, k)
        else:
            pairs = [interval(values) for _ in range(k)]
            a_all = np.array([p[0] for p in pairs], dtype=np.float64)
            b_all = np.array([p[1] for p in pairs], dtype=np.float64)
        a_all, b_all = np.minimum(a_all, b_all), np.maximum(a_all, b_all)
        # one mean and noise scale per distinct interval (few), noise drawn in batches
        keys, inverse = np.unique(np.column_stack([a_all, b_all]), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        out = np.empty(k)
        for j, (a, b) in enumerate(keys):
            rows = np.flatnonzero(inverse == j)
            mean = math.fsum(np.clip(values, a, b)) / size
            width = Fraction(float(b)) - Fraction(float(a))
            steps = math.ceil((width / size + g) / g)
            noise = discrete_laplace_wide(Fraction(steps) / (eps / 2), rows.size)
            centre = round(Fraction(mean) / g)
            index = [min(max(centre + z, lo_idx), hi_idx) for z in noise]
            out[rows] = np.ldexp(np.array(index, dtype=np.float64), exponent)
        return out

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float"), size=size),
        input_metric=ChangeOneDistance(),
        output_measure="pure",
        function=lambda data: float(release_many(data, 1)[0]),
        privacy_map=lambda d_in: PureDP(eps * math.ceil(d_in)),
        name=f"centre_of_attention(m={size}, coverage={gamma})",
        d_in=Fraction(1),
        info=SensitivityInfo(release_many=release_many, grid_exponent=exponent),
    )
