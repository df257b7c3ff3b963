"""The exponential mechanism for quantiles over a finite public set of candidates, sampled
exactly.

**Candidates and their rank intervals.** Candidate j covers a public set S_j of values (a grid
point and the values rounded to it; a bin of a partition); the S_j are disjoint and ordered, and
every counted row falls in exactly one of them. The data enter only as ``below_j`` (rows in the
sets before S_j) and ``upto_j = below_j + #(rows in S_j)``, with ``n`` the rows counted. The
interval ``[below_j, upto_j]`` is the set of ranks the candidate takes: rows tied with it may be
counted on either side. The utility of candidate j for the q-quantile is

    u_j = −dist(q·n, [below_j, upto_j]) = −max(0, below_j − q·n, q·n − upto_j),

so every candidate whose rows straddle the target rank scores 0. (The earlier utility
−|below_j − q·n| looked at one end only: with many rows tied at a value, no candidate came near
q·n, the best score was far below 0, and the bound below, which is relative to the best score,
said nothing about the rank of the released value. On the 1988 CPS the realised rank errors were
886 and 10,152 rows against a printed ±81.)

(Smith 2011's continuous version picks an interval between consecutive sorted values with
weight length × e^{ε·u/2}, then a uniform point in it. Its bound is on the chosen interval's
index; with ties the intervals near q·n have length 0 and are never chosen, so it says nothing
about the rank of the released value, and it can never release a tied value. Here every
candidate is a point with positive weight, and its score already counts the tied rows.)

**The best score is 0.** Let v be the first candidate with ``upto_v >= q·n`` (one exists:
``upto`` of the last candidate is n); then ``below_v = upto_{v−1} < q·n`` (or ``below_v = 0 <=
q·n`` for the first), so u_v = 0.

**Sensitivity.** If one privacy unit adds or removes ``x`` rows, each ``below_j`` moves by some
a ∈ [0, x], each ``upto_j`` by some b ∈ [0, x] and n by x (all in the same direction), so
``below_j − q·n`` moves by a − q·x and ``q·n − upto_j`` by q·x − b, both in [−x, x]; a maximum
of terms that each move by at most x moves by at most x. So |Δu_j| <= x <= Δ.

**Privacy.** The mechanism outputs j with probability ∝ exp(ε·u_j/(2Δ) − penalty_j) (McSherry &
Talwar 2007; ``penalty`` is a public base measure), which is ε-DP when every utility moves by at
most Δ. Over several groups with Δ the most rows a unit has *in total* (L1), a unit with x_g rows
in group g costs Σ_g ε·x_g/Δ <= ε: the per-group mechanisms together are ε-DP.
:func:`log_weights` is the one place the weights are computed: the sampler draws from it and the
exact privacy test (tests/regression/test_em_quantile_privacy.py) checks it on every neighbour.

**Sampling** is exact: propose j uniformly (exact uniform integers) and accept with probability
exp(log_weights_j) (an exact Bernoulli(exp(−γ)) for rational γ >= 0, :mod:`dpkit.noise`); the
accepted j has exactly the exponential mechanism's distribution. Each proposal is accepted with
probability >= 1/C, and proposals come in batches of C.

**Accuracy** (ibid.; Dwork & Roth 2014, Thm. 3.11): without a penalty, with probability
>= 1 − α the output's utility is within (2Δ/ε)·(ln C + ln(1/α)) of the best, which is 0: at most
q·n + N rows lie in the sets before the output and at least q·n − N rows in the sets up to and
including it, N = :func:`rank_error_bound`. With a penalty the bound is
(2Δ/ε)·(ln Σ_j e^{−penalty_j} + penalty_{j*} + ln(1/α)) for the best candidate j*, which depends
on the data through j*: :func:`penalised_rank_error_bound`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpkit.noise import bernoulli_exp_vector, uniform_integers

__all__ = [
    "em_quantile_index",
    "log_weights",
    "penalised_rank_error_bound",
    "rank_error",
    "rank_error_bound",
    "scaled_distances",
    "utilities",
]


def scaled_distances(
    below: Sequence[int], upto: Sequence[int], n: int, q: Fraction
) -> tuple[list[int], int]:
    """(D, d) with −D_j/d = u_j exactly: for q = a/d in lowest terms,
    D_j = max(0, d·below_j − a·n, a·n − d·upto_j) (integers, so the mechanism never needs a
    rational per candidate)."""
    a, d = q.numerator, q.denominator
    target = a * n
    return [max(0, d * lo - target, target - d * hi) for lo, hi in zip(below, upto, strict=True)], d


def utilities(below: Sequence[int], upto: Sequence[int], n: int, q: Fraction) -> list[Fraction]:
    """u_j = −dist(q·n, [below_j, upto_j]) (exact; <= 0, and 0 for some j)."""
    distances, d = scaled_distances(below, upto, n, q)
    return [Fraction(-x, d) for x in distances]


def rank_error(below: int, upto: int, n: int, q: Fraction) -> Fraction:
    """How far the rank interval [below, upto] of a released value is from q·n (0 inside)."""
    return -utilities([below], [upto], n, q)[0]


def _integer_scores(
    below: Sequence[int],
    upto: Sequence[int],
    n: int,
    q: Fraction,
    epsilon: Fraction,
    sensitivity: int,
    penalty: Sequence[Fraction] | None,
) -> tuple[list[int], int]:
    """(S, L): candidate j's score −ε·u_j/(2Δ) + penalty_j is S_j/L (integers, one common
    denominator L), so that log-weight_j = (min S − S_j)/L exactly."""
    distances, d = scaled_distances(below, upto, n, q)
    factor = epsilon / (2 * sensitivity) / d  # score of one unit of D
    extra = list(penalty) if penalty is not None else []
    common = factor.denominator
    for p in extra:
        common = math.lcm(common, p.denominator)
    per_unit = factor.numerator * (common // factor.denominator)
    scores = [x * per_unit for x in distances]
    if extra:
        scores = [
            s + p.numerator * (common // p.denominator) for s, p in zip(scores, extra, strict=True)
        ]
    return scores, common


def log_weights(
    below: Sequence[int],
    upto: Sequence[int],
    n: int,
    q: Fraction,
    epsilon: Fraction,
    sensitivity: int,
    penalty: Sequence[Fraction] | None = None,
) -> list[Fraction]:
    """The exponential mechanism's log-weights ε·u_j/(2Δ) − penalty_j, shifted so the largest is
    0 (exact rationals): candidate j is released with probability ∝ exp(log_weights_j)."""
    scores, common = _integer_scores(below, upto, n, q, epsilon, sensitivity, penalty)
    best = min(scores)
    return [Fraction(best - s, common) for s in scores]


def em_quantile_index(
    below: Sequence[int],
    upto: Sequence[int],
    n: int,
    q: Fraction,
    epsilon: Fraction,
    sensitivity: int,
    penalty: Sequence[Fraction] | None = None,
) -> int:
    """Sample a candidate index by the exponential mechanism (exactly).

    ``below[j]``/``upto[j]``: rows before candidate j's set / up to and including it.
    ``penalty`` (public, data-independent, >= 0) multiplies candidate j's weight by
    exp(−penalty_j): a base measure, which leaves the privacy guarantee unchanged and breaks
    ties (the bounds estimator uses it to prefer smaller magnitudes among equally good bounds).
    """
    candidates = len(below)
    scores, common = _integer_scores(below, upto, n, q, epsilon, sensitivity, penalty)
    best = min(scores)
    gaps = [s - best for s in scores]  # γ_j = gaps_j / common = −log_weights_j
    # int / int is correctly rounded, so each float is within half an ulp of γ_j; a γ beyond
    # the floats (a huge ε) is +inf, which the sampler rejects: its e^{-γ} is below e^{-10^308}
    gaps_float = np.array([_ratio(g, common) for g in gaps], dtype=np.float64)
    while True:
        proposals = uniform_integers(candidates, candidates)
        gamma = gaps_float[proposals]

        def exact(i: int, chosen: np.ndarray = proposals) -> Fraction:
            return Fraction(gaps[int(chosen[i])], common)

        accepted = bernoulli_exp_vector(gamma, exact, 1e-9 * (1.0 + np.abs(gamma)))
        hits = np.flatnonzero(accepted)
        if hits.size:
            return int(proposals[hits[0]])


def _ratio(numerator: int, denominator: int) -> float:
    try:
        return numerator / denominator
    except OverflowError:
        return math.inf


def rank_error_bound(candidates: int, epsilon: Fraction, sensitivity: int, alpha: float) -> float:
    """With probability >= 1 − alpha the output's :func:`rank_error` is at most this (no
    penalty): (2Δ/ε)·(ln C + ln(1/α))."""
    return 2 * sensitivity / float(epsilon) * (math.log(candidates) + math.log(1 / alpha))


def penalised_rank_error_bound(
    penalty: Sequence[Fraction],
    epsilon: Fraction,
    sensitivity: int,
    alpha: float,
    best_penalty: Fraction,
) -> float:
    """With probability >= 1 − alpha the output's :func:`rank_error` is at most this, when the
    best candidate (rank error 0) has penalty ``best_penalty``:
    (2Δ/ε)·(ln Σ_j e^{−penalty_j} + best_penalty + ln(1/α)).

    P(u_out <= −t) <= Σ_{j: u_j <= −t} e^{−p_j − εt/(2Δ)} / e^{−p*} (the normaliser is at least
    the best candidate's weight e^{−p*})."""
    total = math.fsum(math.exp(-float(p)) for p in penalty)
    return (
        2
        * sensitivity
        / float(epsilon)
        * (math.log(total) + float(best_penalty) + math.log(1 / alpha))
    )
