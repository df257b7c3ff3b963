"""Convexity (Kifer & Lin 2010): run one of several mechanisms chosen with public probabilities.

``make_convex_combination([M_1, ..., M_k], [p_1, ..., p_k])`` picks i with probability p_i
(exact rational probabilities, :func:`dpkit.noise.uniform_integers` on their common denominator)
and releases M_i(x) together with i. Privacy map: the maximum of the parts' losses
(:func:`dpkit.core._losses.parallel`, which promotes mixed kinds conservatively).

Proof: releasing i is a data-independent choice, and given i the output is M_i(x), so for any
event S, P[(i, M_i(x)) ∈ S] = Σ_i p_i·P[M_i(x) ∈ S_i] <= Σ_i p_i(e^{ε_i}P[M_i(y) ∈ S_i] + δ_i)
<= e^{max ε}·P[(i, M_i(y)) ∈ S] + max δ. For zCDP, D_α of the joint (i, M_i) distributions is
log Σ p_i e^{(α−1)D_α(M_i(x)‖M_i(y))}/(α − 1) <= max_i D_α(...) <= α·max ρ_i. (Kifer & Lin 2010
state the same axiom for the mixture without releasing i; releasing i can only add information, so
the bound also covers the hidden-index version by post-processing.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from dpkit._exact import Number, fraction_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import PrivacyLoss, PureDP, parallel
from dpkit.errors import DomainMismatchError, InvalidParameterError
from dpkit.noise import uniform_integers

__all__ = ["make_convex_combination"]


def make_convex_combination(
    measurements: Sequence[Measurement[Any]], probabilities: Sequence[Number]
) -> Measurement[tuple[int, Any]]:
    """Release ``(i, M_i(x))`` with i drawn with the public ``probabilities`` (they sum to 1).

    Example:
        >>> import dpkit as dp
        >>> from dpkit.sensitivity._convexity import make_convex_combination
        >>> m = make_convex_combination(
        ...     [dp.make_laplace(1, epsilon=1), dp.make_laplace(1, epsilon=0.5)], [0.5, 0.5])
        >>> m.loss
        PureDP(epsilon=Fraction(1, 1))
    """
    parts = tuple(measurements)
    if not parts:
        raise InvalidParameterError("measurements", measurements, "a non-empty list")
    probs = [fraction_of("probabilities", p) for p in probabilities]
    if len(probs) != len(parts) or any(p < 0 for p in probs) or sum(probs) != 1:
        raise InvalidParameterError(
            "probabilities", probabilities, f"{len(parts)} numbers >= 0 summing to exactly 1"
        )
    first = parts[0]
    for m in parts[1:]:
        if m.input_metric != first.input_metric:
            raise DomainMismatchError(
                f"convex combination: {m.name} reads {m.input_metric}, {first.name} reads"
                f" {first.input_metric}"
            )
    denominator = math.lcm(*(p.denominator for p in probs))
    cumulative = []
    total = 0
    for p in probs:
        total += int(p * denominator)
        cumulative.append(total)

    def function(data: Any) -> tuple[int, Any]:
        draw = int(uniform_integers(denominator, 1)[0])
        index = next(i for i, c in enumerate(cumulative) if draw < c)
        return index, parts[index](data)

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        losses = [m.privacy_map(d_in) for m, p in zip(parts, probs, strict=True) if p > 0]
        return parallel(*losses) if losses else PureDP(0)

    return Measurement(
        input_domain=first.input_domain,
        input_metric=first.input_metric,
        output_measure=first.output_measure,
        function=function,
        privacy_map=privacy_map,
        name="convex(" + ", ".join(m.name for m in parts) + ")",
        d_in=first.d_in,
    )
