"""The exponential mechanism for quantiles over a bounded, discretised domain, sampled exactly.

Candidates are points ``c_0 < c_1 < ... < c_{C-1}`` of a public domain; the data enter only as
``below_j = #{values < c_j}`` and ``n``. The utility of c_j for the q-quantile is
``u_j = -|below_j - q·n|``. If one privacy unit adds or removes ``x`` rows, ``below_j`` moves by
``a <= x`` and ``n`` by ``x``, so u_j moves by ``|a - q·x| <= x``.

The mechanism outputs j with probability ∝ exp(ε·u_j / (2Δ)) (McSherry & Talwar 2007), which is
ε-DP when every utility moves by at most Δ. Over several groups with ``Δ`` the most rows a unit
has *in total* (L1), a unit with x_g rows in group g costs Σ_g ε·x_g/Δ <= ε: the per-group
mechanisms together are ε-DP.

Sampling is exact: propose j uniformly (exact uniform integers) and accept with probability
exp(-ε·(u* - u_j)/(2Δ)) (an exact Bernoulli(exp(-γ)) for rational γ, :mod:`dpkit.noise`); the
accepted j has exactly the exponential mechanism's distribution. Each proposal is accepted with
probability >= 1/C, and proposals come in batches of C.

Accuracy (ibid.; Dwork & Roth 2014, Thm. 3.11): with probability >= 1 - α, the output's utility
is within (2Δ/ε)·(ln C + ln(1/α)) of the best, i.e. its rank is that close to q·n.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpkit.noise import bernoulli_exp_vector, uniform_integers

__all__ = ["em_quantile_index", "rank_error_bound"]


def em_quantile_index(
    below: list[int],
    n: int,
    q: Fraction,
    epsilon: Fraction,
    sensitivity: int,
    penalty: list[Fraction] | None = None,
) -> int:
    """Sample a candidate index by the exponential mechanism (exactly).

    ``penalty`` (public, data-independent, >= 0) multiplies candidate j's weight by
    exp(-penalty_j): a base measure, which leaves the privacy guarantee unchanged and breaks
    ties (the bounds estimator uses it to prefer smaller magnitudes among equally good bounds).
    """
    candidates = len(below)
    target = q * n
    factor = epsilon / (2 * sensitivity)
    extra = penalty if penalty is not None else [Fraction(0)] * candidates
    # gaps g_j = (u* - u_j)·ε/(2Δ) + penalty_j, shifted so the smallest is 0; exact rationals
    scores = [abs(b - target) * factor + p for b, p in zip(below, extra, strict=True)]
    best = min(scores)
    gaps = [score - best for score in scores]
    gaps_float = np.array([float(g) for g in gaps], dtype=np.float64)
    while True:
        proposals = uniform_integers(candidates, candidates)
        gamma = gaps_float[proposals]

        def exact(i: int, chosen: np.ndarray = proposals) -> Fraction:
            return gaps[int(chosen[i])]

        accepted = bernoulli_exp_vector(gamma, exact, 1e-9 * (1.0 + np.abs(gamma)))
        hits = np.flatnonzero(accepted)
        if hits.size:
            return int(proposals[hits[0]])


def rank_error_bound(candidates: int, epsilon: Fraction, sensitivity: int, alpha: float) -> float:
    """With probability >= 1 - alpha the output's rank error is at most this."""
    return 2 * sensitivity / float(epsilon) * (math.log(candidates) + math.log(1 / alpha))
