"""Consistency post-processing of frequency estimates (Wang, Lopuhaä-Zwakenberg, Li, Skoric &
Li 2020, "Locally differentially private frequency estimation with consistency", NDSS).

Post-processing never costs privacy (Dwork & Roth 2014, Prop. 2.1): these functions read only the
released estimates. They trade the estimates' unbiasedness for a smaller error and for numbers
people can read (no negative frequencies, a total of 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit.errors import InvalidDataError, InvalidParameterError

__all__ = ["METHODS", "norm_sub", "postprocess", "project_simplex"]

METHODS = ("norm_sub", "simplex")


def _vector(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0 or not np.all(np.isfinite(v)):
        raise InvalidDataError("estimates", "must be a non-empty vector of finite numbers")
    return v


def project_simplex(values: Any, total: float = 1.0) -> np.ndarray:
    """The Euclidean projection of ``values`` onto {x >= 0, Σx = total} (sort-based, O(d log d)).

    The result is max(v - τ, 0) with the unique τ that makes it sum to ``total`` (Held, Wolfe &
    Crowder 1974; Duchi et al. 2008).
    """
    v = _vector(values)
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - total
    index = np.arange(1, v.size + 1)
    rho = int(np.flatnonzero(u - cumulative / index > 0)[-1])
    tau = cumulative[rho] / (rho + 1)
    return np.maximum(v - tau, 0.0)


def norm_sub(values: Any, total: float = 1.0) -> np.ndarray:
    """Norm-Sub (Wang et al. 2020): zero the negative estimates and subtract the same amount δ
    from every positive one, repeating until the estimates are non-negative and sum to ``total``.

    The fixed point is max(v - δ, 0) with Σ max(v - δ, 0) = total, which is exactly the
    Euclidean projection onto the simplex; this function runs the paper's iteration (each round
    is vectorised; at most d rounds, usually a handful) and so agrees with
    :func:`project_simplex` to rounding.
    """
    v = _vector(values)
    keep = np.ones(v.size, dtype=bool)
    out = v.copy()
    for _ in range(v.size):  # rounds of the iteration (at most d), not a loop over values
        delta = (float(v[keep].sum()) - total) / int(keep.sum())
        out = np.where(keep, v - delta, 0.0)
        negative = out < 0
        if not negative.any():
            return out
        keep &= ~negative
    return np.maximum(out, 0.0)


def postprocess(values: Any, method: str | None) -> np.ndarray | None:
    """Apply a named consistency method (``"norm_sub"``, ``"simplex"``) or none (None)."""
    if method is None:
        return None
    if method == "norm_sub":
        return norm_sub(values)
    if method == "simplex":
        return project_simplex(values)
    raise InvalidParameterError("postprocess", method, f"None or one of {METHODS}")
