"""Standalone entry points for the analytics planner: pick and build a quantile mechanism from
public parameters only, with a sentence for ``explain()``.

The planner (after its split into one compiler per aggregate family) can call
:func:`choose_quantile_method` for the documented default and :func:`make_quantile` to build
the Measurement; both look only at public inputs (declared n, bounds, ε, δ), never at data.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from dpkit._exact import Number, check_delta, check_epsilon
from dpkit.core._framework import Measurement
from dpkit.errors import InternalError, InvalidParameterError
from dpkit.sensitivity._data import Bounds, check_n
from dpkit.sensitivity._info import SensitivityInfo
from dpkit.sensitivity._inverse import make_inverse_sensitivity
from dpkit.sensitivity._ptr import make_propose_test_release
from dpkit.sensitivity._smooth import make_smooth_sensitivity

__all__ = ["QUANTILE_METHODS", "choose_quantile_method", "make_quantile"]

QUANTILE_METHODS = ("inverse", "smooth", "ptr", "exponential")


def choose_quantile_method(
    *, n: int | None, lower: Number, upper: Number, epsilon: Number, delta: Number = 0
) -> tuple[str, str]:
    """The default method for a quantile and the reason, from public parameters only.

    * no public n (add/remove neighbours): ``"exponential"`` — the analytics layer's
      exponential mechanism over a candidate grid, which needs no n;
    * otherwise ``"inverse"``: near instance-optimal (Asi & Duchi 2020), pure ε, error a few
      ranks independent of the bounds' width; it was the most accurate in every benchmark row
      (docs/sensitivity.md §9).
    """
    Bounds.of(lower, upper)
    check_epsilon(epsilon)
    check_delta(delta)
    if n is None:
        return (
            "exponential",
            "exponential mechanism over a grid of the declared bounds: the number of rows is not"
            " public, and the data-dependent methods here need a public n",
        )
    check_n(n)
    return (
        "inverse",
        f"inverse sensitivity mechanism (Asi & Duchi 2020) over a fine grid of [{lower}, {upper}]:"
        " near instance-optimal, its rank error does not grow with the bounds' width",
    )


def make_quantile(
    method: str,
    *,
    q: Number,
    lower: Number,
    upper: Number,
    n: int,
    epsilon: Number,
    delta: Number = 0,
    bound: Number | None = None,
) -> Measurement[Any]:
    """Build the quantile Measurement for ``method`` (``info.explain`` says what runs).

    ``"smooth"`` uses Cauchy-type noise (pure ε) when δ = 0 and Laplace ((ε, δ)) otherwise;
    ``"ptr"`` needs the proposed sensitivity ``bound`` and δ > 0 and splits ε in half;
    ``"exponential"`` is the analytics layer's own mechanism and is not built here.
    """
    if method not in QUANTILE_METHODS:
        raise InvalidParameterError("method", method, "one of " + ", ".join(QUANTILE_METHODS))
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    if method == "exponential":
        raise InvalidParameterError(
            "method", method, "built by the analytics planner (dpkit.analytics._em), not here"
        )
    m: Measurement[Any]
    if method == "inverse":
        m = make_inverse_sensitivity("quantile", q=q, lower=lower, upper=upper, n=n, epsilon=eps)
        text = f"inverse sensitivity mechanism, ε={float(eps):g}"
    elif method == "smooth":
        noise = "cauchy" if dlt == 0 else "laplace"
        m = make_smooth_sensitivity(
            "quantile", q=q, lower=lower, upper=upper, n=n, epsilon=eps, delta=dlt, noise=noise
        )
        text = (
            f"β-smooth sensitivity with {noise} noise (β={float(_beta(m)):.3g}), "
            f"ε={float(eps):g}" + (f", δ={float(dlt):g}" if dlt else "")
        )
    else:
        if bound is None:
            raise InvalidParameterError("bound", bound, "the proposed sensitivity for method='ptr'")
        m = make_propose_test_release(
            "quantile",
            q=q,
            lower=lower,
            upper=upper,
            n=n,
            bound=bound,
            epsilon_test=eps / 2,
            epsilon_release=eps / 2,
            delta=delta,
        )
        text = (
            f"propose-test-release with proposed sensitivity {bound}, ε={float(eps):g} "
            f"(half for the test), δ={float(dlt):g}; it may refuse"
        )
    return replace(m, info=replace(m.info, explain=text))


def _beta(m: Measurement[Any]) -> Fraction:
    beta = m.info.beta if isinstance(m.info, SensitivityInfo) else None
    if beta is None:  # pragma: no cover - make_smooth_sensitivity always states β
        raise InternalError(f"{m.name} states no β", charged=False)
    return beta
