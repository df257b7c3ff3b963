"""The exponential-mechanism quantile's printed rank bound, checked *exactly* on its hardest shape.

The release prints N such that, with probability 1 − α, at most q·n + N rows lie below the
released value and at least q·n − N at or below it. Sampling checks (test_em_quantile_ties.py)
run on tables where the bound is loose, so a mutant printing 0.75·N (rank_error_bound's factor 2
replaced by 1.5) survived them (adversarial review of issue 21).

The hard shape: the target rank q·n sits in the middle of a cluster of 2m tied rows at 512,
between large clusters at 0 and 1023, so exactly one candidate (512) has rank error 0 and every
other of the C = 1024 candidates has error m. The union bound behind N gives
P(error = m) ≈ C·e^{−εm/(2Δ)}, which is large for m a little below N = (2Δ/ε)(ln C + ln 1/α):
with m = 0.85·N it is about C^0.15·α^0.85 ≈ 0.22, with m = 0.95·N about 0.07. So a printed
bound below m is false with probability above α, and the correct one (N > m) is never exceeded:
a bound 5% too small fails. The mechanism's output
distribution is computed exactly from its own log-weights (cross-checked against
exp(−ε·error/(2Δ))); no sampling.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, quantile
from dpkit.analytics._em import log_weights

CANDIDATES = list(range(1024))
ALPHA = 0.05


def _hard_table(q: Fraction, m: int) -> np.ndarray:
    """a rows at 0, 2m at 512, b at 1023, with q·n = a + m (the cluster's middle rank)."""
    a = 100
    # a + m = q·(a + 2m + b)  =>  b = (a + m)/q − a − 2m
    b = (a + m) / q - a - 2 * m
    assert b.denominator == 1 and b >= 0
    return np.array([0.0] * a + [512.0] * (2 * m) + [1023.0] * int(b))


def _distribution(values: np.ndarray, q: Fraction, epsilon: Fraction) -> tuple[np.ndarray, ...]:
    """(probabilities, rank errors) over CANDIDATES, exactly as the mechanism weighs them."""
    grid = np.array(CANDIDATES, dtype=np.float64)
    ordered = np.sort(values)
    below = np.searchsorted(ordered, grid, side="left")
    upto = np.searchsorted(ordered, grid, side="right")
    n = values.size
    weights = log_weights([int(b) for b in below], [int(u) for u in upto], n, q, epsilon, 1)
    target = float(q * n)
    error = np.maximum(0.0, np.maximum(below - target, target - upto))
    logw = np.array([float(w) for w in weights])
    # independent check of the implementation's weights: −ε·error/(2Δ), the best shifted to 0
    assert np.allclose(logw, -float(epsilon) * (error - error.min()) / 2)
    p = np.exp(logw - logw.max())
    return p / p.sum(), error


@pytest.mark.parametrize("share", [0.85, 0.95])
@pytest.mark.parametrize("epsilon", [Fraction(1), Fraction(1, 4)])
@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(1, 4)])
def test_printed_rank_bound_holds_exactly_on_its_hardest_shape(
    epsilon: Fraction, q: Fraction, share: float
) -> None:
    true_bound = 2 / float(epsilon) * (math.log(len(CANDIDATES)) + math.log(1 / ALPHA))
    m = math.ceil(share * true_bound)
    assert m < true_bound
    values = _hard_table(q, m)
    frame = pd.DataFrame({"u": np.arange(values.size), "x": values})
    session = Session(frame, "u", dp.PureDP(100), max_rows=1, engine="pandas")
    agg = quantile("x", float(q), (0, 1023), candidates=CANDIDATES, name="v")
    release = session.evaluate(session.query().agg(agg), epsilon=epsilon, alpha=ALPHA)
    accuracy = release.accuracy["v"]
    assert accuracy.kind == "rank" and accuracy.mechanism == "exponential"
    used = Fraction(accuracy.loss.epsilon)  # the selection's own ε
    assert used == epsilon  # one aggregate: the whole ε selects
    p, error = _distribution(values, q, used)
    assert sorted(set(error.tolist())) == [0.0, float(m)]  # the shape is as designed
    printed = accuracy.halfwidth
    assert p[error > printed].sum() <= ALPHA, (printed, m, p[error > printed].sum())
    # the shape is hard: a bound below m (by 15% or 5% of N) would be false more often than α
    assert p[error >= m].sum() > ALPHA
