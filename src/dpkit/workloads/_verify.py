"""Exact privacy check of a strategy measurement, recomputed from B and the noise distribution.

The measurement releases y = B·x + Z with Z iid lattice noise. Neighbouring histograms (L1
distance <= c) shift the mean by v = B·Δx. For the worst case v = c·b_j (all of a unit's
contributions in one cell; the triangle inequality makes this the largest ‖v‖₁ and ‖v‖₂):

* pure DP: the loss of a product of independent coordinates is the sum of the per-coordinate
  losses; each is computed *exactly* (Fractions) by :func:`dpkit.testing.check_tiered_pure_dp`
  for shift |v_i|;
* zCDP: D_α of a product is the sum of per-coordinate D_α (additivity of Rényi divergence); each
  is computed numerically from the pmf (``dpkit.testing._exact._renyi``), the realised ρ is
  max_α Σ_i D_α(|v_i|)/α over the same orders as :func:`check_lattice_zcdp`;
* (ε, δ): the realised ρ as above, converted with the same certified ``ZCDP.to_approx``.

Every distinct column (as a multiset of |entries|) of B is examined.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpkit.core._framework import Measurement
from dpkit.core._losses import ZCDP, ApproxDP, PureDP
from dpkit.noise._distributions import DiscreteLaplace
from dpkit.testing._exact import (
    DEFAULT_ALPHAS,
    CheckResult,
    _radius,
    _renyi,
    check_tiered_pure_dp,
)
from dpkit.workloads._measure import matrix_info

__all__ = ["verify_exact", "verify_marginals_exact"]


def _columns(b: sp.csr_matrix, c: int) -> list[Counter[int]]:
    csc = sp.csc_matrix(abs(b))
    seen: set[tuple[tuple[int, int], ...]] = set()
    out: list[Counter[int]] = []
    for j in range(csc.shape[1]):
        vals = csc.data[csc.indptr[j] : csc.indptr[j + 1]]
        counts = Counter(int(v) * c for v in vals if v != 0)
        key = tuple(sorted(counts.items()))
        if key not in seen:
            seen.add(key)
            out.append(counts)
    return out


def verify_exact(measurement: Measurement[Any], *, rtol: float = 1e-9) -> CheckResult:
    """Recompute the loss of :func:`make_strategy_measurement` from B and its noise; compare
    with ``measurement.map()`` (the claim). Returns a :class:`CheckResult`."""
    info = matrix_info(measurement)
    q, lattice = info.quantised, info.lattice
    c = int(measurement.d_in or 1)
    claim = measurement.map()
    columns = _columns(q.integer_matrix, c)
    if isinstance(claim, PureDP):
        assert isinstance(lattice, DiscreteLaplace)
        per_shift: dict[int, Fraction] = {}
        worst, witness = Fraction(0), 0
        for j, col in enumerate(columns):
            total = Fraction(0)
            for s, mult in col.items():
                if s not in per_shift:
                    res = check_tiered_pure_dp(lattice, s, claim.epsilon)
                    per_shift[s] = Fraction(res.realised)
                total += mult * per_shift[s]
            if total > worst:
                worst, witness = total, j
        return CheckResult(
            notion="pure",
            realised=worst,
            claimed=claim.epsilon,
            passed=worst <= claim.epsilon,
            witness=(witness,),
            detail=f"exact ε of the product noise over {len(columns)} distinct column(s) of B",
        )
    alphas = [float(a) for a in DEFAULT_ALPHAS]
    radius, _ = _radius(lattice, 1e-30)
    divergences: dict[int, np.ndarray] = {}
    best = -math.inf
    witness_t: tuple[Any, ...] = ()
    for j, col in enumerate(columns):
        sums = np.zeros(len(alphas))
        for s, mult in col.items():
            if s not in divergences:
                divergences[s] = np.asarray(_renyi(lattice, s, alphas, radius))
            sums += mult * divergences[s]
        ratio = sums / np.asarray(alphas)
        k = int(np.argmax(ratio))
        if ratio[k] > best:
            best, witness_t = float(ratio[k]), (alphas[k], j)
    if isinstance(claim, ZCDP):
        return CheckResult(
            notion="zcdp",
            realised=best,
            claimed=claim.rho,
            passed=best <= float(claim.rho) * (1 + rtol),
            witness=witness_t,
            detail=f"max over α of Σ_i D_α/α over {len(columns)} distinct column(s) of B",
        )
    assert isinstance(claim, ApproxDP)
    realised = ZCDP(Fraction(best)).to_approx(claim.delta).epsilon
    ok = float(realised) <= float(claim.epsilon) * (1 + 1e-6)
    return CheckResult(
        notion="approx",
        realised=claim.delta if ok else Fraction(1),
        claimed=claim.delta,
        passed=ok,
        witness=witness_t,
        detail=(
            f"realised ρ={best:.6g} converted at δ={float(claim.delta):.3g} gives "
            f"ε={float(realised):.6g} (claimed ε={float(claim.epsilon):.6g})"
        ),
    )


def verify_marginals_exact(
    noise: dict[Any, Any], claim: Any, contributions: int = 1, *, rtol: float = 1e-9
) -> CheckResult:
    """Recompute the loss of an OPT_M release from its per-marginal lattice noise.

    One unit (at most c records) changes each measured marginal by at most c in L1 (a shift of
    c in one cell is the worst case for a product of iid lattice noise, by the triangle
    inequality and the exact per-shift losses); the marginals' noises are independent, so the
    losses add: exact Fractions for pure DP, Σ_a D_α(shift c) maximised over α / α for zCDP.
    ``noise`` and ``claim`` come from :meth:`MarginalsStrategy.noise`.
    """
    c = int(contributions)
    if isinstance(claim, PureDP):
        total = Fraction(0)
        for lattice in noise.values():
            res = check_tiered_pure_dp(lattice, c, claim.epsilon)
            total += Fraction(res.realised)
        return CheckResult(
            notion="pure",
            realised=total,
            claimed=claim.epsilon,
            passed=total <= claim.epsilon,
            witness=(c,),
            detail=f"exact ε summed over {len(noise)} measured marginal(s)",
        )
    alphas = [float(a) for a in DEFAULT_ALPHAS]
    sums = np.zeros(len(alphas))
    cache: dict[Fraction, np.ndarray] = {}
    for lattice in noise.values():
        key = Fraction(lattice.sigma2)
        if key not in cache:
            radius, _ = _radius(lattice, 1e-30)
            cache[key] = np.asarray(_renyi(lattice, c, alphas, radius))
        sums += cache[key]
    ratio = sums / np.asarray(alphas)
    k = int(np.argmax(ratio))
    assert isinstance(claim, ZCDP)
    return CheckResult(
        notion="zcdp",
        realised=float(ratio[k]),
        claimed=claim.rho,
        passed=float(ratio[k]) <= float(claim.rho) * (1 + rtol),
        witness=(alphas[k],),
        detail=f"max over α of Σ_a D_α/α over {len(noise)} measured marginal(s)",
    )
