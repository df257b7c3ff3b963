"""The optimised strategy for the Session's ``workload(matrix)`` family (planner/families/workload).

The family already compares two strategies: noise on x then W·x, and noise on W·x. This module
adds the matrix mechanism with a strategy from :func:`choose_strategy` (identity, hierarchical,
wavelet, OPT_0): it quantises the strategy (B = round(A·2^k), integers), and precomputes the
reconstruction C = W·(A_qᵀA_q)⁻¹·A_qᵀ·2^-k so that the answers are C·(B·x + Z). The family
supplies the lattice noise for an integer vector whose neighbours differ by at most
‖BΔx‖₁ <= ‖Δx‖₁·max_j‖b_j‖₁ (pure ε) or ‖BΔx‖₂² <= ‖Δx‖₁²·max_j‖b_j‖₂² (zCDP): the triangle
inequality over the changed cells, with the column norms of B computed exactly in integers. The
answers are W·x + C·Z exactly (A_q has full column rank), so the expected total squared error is
v·‖C‖_F² (v the noise variance) and each query's interval comes from the weights C[i] of its
independent lattice noises. Nothing here reads data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from dpkit.errors import InvalidParameterError
from dpkit.workloads._measure import QuantisedStrategy, quantise
from dpkit.workloads._ops import Explicit
from dpkit.workloads._select import choose_strategy
from dpkit.workloads._strategies import svd_bound

__all__ = ["OptimisedWorkload", "optimised_workload"]


@dataclass(eq=False)
class OptimisedWorkload:
    """A quantised strategy with its reconstruction matrix (see the module doc)."""

    name: str
    quantised: QuantisedStrategy
    reconstruction: np.ndarray  # C: m × rows of B, answers = C @ (B x + Z)
    svd_bound: float | None  # ‖·‖ bound per unit noise variance, in the same units as ‖C‖_F²·v

    @property
    def frobenius_sq(self) -> float:
        return float(np.sum(self.reconstruction**2))

    def l1(self, x_l1: int) -> int:
        """The L1 sensitivity of B·x when ‖Δx‖₁ <= x_l1 (exact integer)."""
        return x_l1 * self.quantised.col_l1

    def l2_squared(self, x_l1: int) -> int:
        """A bound on the squared L2 sensitivity of B·x when ‖Δx‖₁ <= x_l1 (exact integer)."""
        return x_l1 * x_l1 * self.quantised.col_l2_sq

    def measure(self, x: np.ndarray) -> np.ndarray:
        """B·x for an integer vector x, clamped per cell to [-cap, cap] (public, from B) so that it
        stays exact in int64; clamping is 1-Lipschitz per cell, so ‖Δx‖₁ never grows."""
        cap = self.quantised.cap
        clipped = np.clip(np.asarray(x, dtype=np.int64), -cap, cap)
        return np.asarray(self.quantised.integer_matrix @ clipped, dtype=np.int64)

    def answers(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(self.reconstruction @ np.asarray(y, dtype=np.float64))


def optimised_workload(
    matrix: np.ndarray, norm: str, *, max_seconds: float = 1.0, max_cells: int = 2048
) -> OptimisedWorkload | None:
    """The best strategy for ``matrix`` (public) by analytic error, or ``None`` when the
    workload has more than ``max_cells`` columns (dense (AᵀA)⁻¹ needed for C) or one query."""
    w = np.asarray(matrix, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] < 2 or w.shape[1] > max_cells or w.shape[1] < 2:
        return None
    if norm not in ("l1", "l2"):
        raise InvalidParameterError("norm", norm, "'l1' or 'l2'")
    workload = Explicit(w, "W")
    choice = choose_strategy(workload, norm, max_seconds=max_seconds)  # type: ignore[arg-type]
    q = quantise(choice.strategy)
    a = q.matrix().toarray()
    gram = a.T @ a
    try:
        chol = sla.cho_factor(gram, lower=True)
    except np.linalg.LinAlgError:
        return None
    c = w @ sla.cho_solve(chol, a.T) * math.ldexp(1.0, -q.exponent)
    try:
        bound: float | None = svd_bound(workload)
    except InvalidParameterError:
        bound = None
    return OptimisedWorkload(choice.strategy.name, q, np.asarray(c), bound)
