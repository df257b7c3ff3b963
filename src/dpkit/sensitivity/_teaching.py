"""Deliberately broken mechanisms that show why local sensitivity is not private.

**Nothing here is differentially private.** :func:`make_local_laplace_unsafe` adds Laplace
noise scaled to the *local* sensitivity LS_f(x). Its claimed ε is what a naive analysis would
say; the statistical auditor refutes it (tests/statistical/test_sensitivity_smooth.py and
docs/sensitivity.md §1): on x = (0, 0, 1, 1, 100) the median's LS is 1, but on the neighbour
(0, 1, 1, 1, 100) it is 0, so the second release is exactly 1 with probability one and the first
almost never: the noise *scale* reveals which dataset it was.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, check_epsilon
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.core._spaces import AtomDomain, ChangeOneDistance, VectorDomain
from dpkit.errors import UnsupportedQueryError
from dpkit.sensitivity._data import Bounds, check_n, make_statistic, prepare
from dpkit.sensitivity._info import SensitivityInfo
from dpkit.sensitivity._local import _a_k_sorted
from dpkit.sensitivity._noise import discrete_laplace_wide
from dpkit.sensitivity._smooth import default_exponent, statistic_range, statistic_value

__all__ = ["make_local_laplace_unsafe"]


def make_local_laplace_unsafe(
    statistic: str,
    *,
    lower: Number,
    upper: Number,
    n: int,
    epsilon: Number,
    q: Number | None = None,
    trim: Number | None = None,
) -> Measurement[float]:
    """NOT PRIVATE: f(x) + Laplace(LS_f(x)/ε) on a grid, with the (false) claim PureDP(ε)."""
    stat = make_statistic(statistic, q=q, trim=trim)
    if stat.name == "variance":
        raise UnsupportedQueryError("variance: not supported by this teaching mechanism")
    bounds = Bounds.of(lower, upper)
    size = check_n(n)
    eps = check_epsilon(epsilon)
    exponent = default_exponent(*statistic_range(stat, bounds, size))
    g = Fraction(2) ** exponent

    def release_many(data: Any, k: int) -> np.ndarray:
        xp = prepare(data, bounds, size)
        centre = round(Fraction(statistic_value(xp, stat)) / g)
        local = Fraction(_a_k_sorted(xp, stat, 0, bounds))
        if local == 0:
            noise = np.zeros(k, dtype=np.int64)
        else:
            noise = np.array(discrete_laplace_wide(local / (eps * g), k), dtype=np.int64)
        return np.ldexp((centre + noise).astype(np.float64), exponent)

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float"), size=size),
        input_metric=ChangeOneDistance(),
        output_measure="pure",
        function=lambda data: float(release_many(data, 1)[0]),
        privacy_map=lambda d_in: PureDP(eps * d_in),
        name=f"local_laplace_UNSAFE({stat.name})",
        d_in=Fraction(1),
        info=SensitivityInfo(release_many=release_many),
    )
