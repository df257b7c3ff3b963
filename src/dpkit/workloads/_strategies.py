"""Measurement strategies A for the matrix mechanism, their exact sensitivity and expected error.

The matrix mechanism (Li, Miklau, Hay, McGregor & Rastogi, VLDB J. 2015) answers a workload W by
measuring y = A·x + noise and returning W·A⁺·y. With noise of variance v per unit sensitivity
(v = σ² for the Gaussian, 2b² for the Laplace at b = 1/ε), the expected total squared error is

    Err(W, A) = v · Δ(A)² · ‖W A⁺‖_F² = v · Δ(A)² · tr(WᵀW (AᵀA)⁻¹),

with Δ(A) the largest column norm of A (L2 for Gaussian, L1 for Laplace): one record changes one
cell of x, so A·x moves by one column. Strategies here:

* ``identity`` — A = I;
* ``hierarchical(n, b)`` — every node of a b-ary tree over the cells (Hay, Rastogi, Miklau &
  Suciu, PVLDB 2010), unweighted;
* ``wavelet(n)`` — the Haar wavelet basis (Xiao, Wang & Gehrke, ICDE 2010), padded to a power
  of two;
* ``p_identity`` / :func:`optimize_p_identity` — HDMM's OPT_0 (McKenna, Miklau, Hay &
  Machanavajjhala, PVLDB 2018, §5.1): A = [I; Θ]·D with Θ ∈ R^{p×n}, Θ >= 0, and D the diagonal
  that normalises every column (L1 norm 1 for Laplace; L2 norm 1 for Gaussian), so Δ(A) = 1 and
  Err ∝ tr(WᵀW (AᵀA)⁻¹), minimised over Θ by L-BFGS-B with the analytic gradient. With
  K = (I_p + ΘΘᵀ)⁻¹ (Woodbury), the objective costs one product WᵀW·(ΘD⁻¹)ᵀ (O(pn) for Prefix
  and AllRange through their implicit Gram operators) plus O(p²n).
* Kronecker strategies ⊗Aᵢ for Kronecker workloads (OPT_⊗: optimise each factor; for one
  product ‖(⊗Wᵢ)(⊗Aᵢ)⁺‖_F² = Π‖WᵢAᵢ⁺‖_F² and Δ(⊗Aᵢ) = ΠΔ(Aᵢ), so the factors separate).

The SVD lower bound (Li & Miklau, "An adaptive mechanism for accurate query answering under
differential privacy", PVLDB 2012, Thm. 1 for L2): for every strategy A,
tr(WᵀW (AᵀA)⁻¹)·Δ₂(A)² >= (Σᵢ λᵢ(WᵀW)^{1/2})² / n, attained when AᵀA ∝ (WᵀW)^{1/2} with equal column
norms. Because Δ₁ >= Δ₂, the same number bounds the L1 objective too (loosely).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Literal

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.optimize import minimize

from dpkit.errors import InvalidParameterError
from dpkit.workloads._ops import (
    DEFAULT_MAX_BYTES,
    Kron,
    Workload,
    check_dense_memory,
)

__all__ = [
    "KronStrategy",
    "Strategy",
    "expected_error",
    "hierarchical",
    "identity",
    "optimize_kron",
    "optimize_p_identity",
    "p_identity",
    "svd_bound",
    "wavelet",
]

Norm = Literal["l1", "l2"]


def _check_norm(norm: Any) -> Norm:
    if norm not in ("l1", "l2"):
        raise InvalidParameterError("norm", norm, "'l1' (Laplace, pure ε) or 'l2' (Gaussian)")
    return norm


@dataclass(eq=False)
class Strategy:
    """An explicit strategy matrix A (scipy.sparse CSR), with its name and provenance.

    ``info`` holds how it was built (e.g. the optimiser's time and objective).
    """

    matrix: sp.csr_matrix
    name: str
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.matrix.shape[0]), int(self.matrix.shape[1]))

    @property
    def factors(self) -> list[Strategy]:
        return [self]

    def sensitivity(self, norm: Norm) -> float:
        """Δ(A): the largest L1 or L2 column norm, computed from A (exact up to float rounding;
        the release quantises A and recomputes it exactly in integers)."""
        norm = _check_norm(norm)
        a = abs(self.matrix)
        if norm == "l1":
            return float(np.max(np.asarray(a.sum(axis=0))))
        return float(math.sqrt(np.max(np.asarray(a.multiply(a).sum(axis=0)))))


@dataclass(eq=False)
class KronStrategy:
    """A₁ ⊗ A₂ ⊗ … (never formed): one explicit strategy per attribute."""

    factors: list[Strategy]
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            self.name = " ⊗ ".join(f.name for f in self.factors)

    @property
    def shape(self) -> tuple[int, int]:
        return (
            math.prod(f.shape[0] for f in self.factors),
            math.prod(f.shape[1] for f in self.factors),
        )

    def sensitivity(self, norm: Norm) -> float:
        return math.prod(f.sensitivity(norm) for f in self.factors)


AnyStrategy = Strategy | KronStrategy


# ------------------------------------------------------------------------------- baselines
def identity(n: int) -> Strategy:
    """A = I (noise on every cell)."""
    return Strategy(sp.identity(n, format="csr", dtype=np.float64), f"identity({n})")


def hierarchical(n: int, branching: int = 2) -> Strategy:
    """Every node of a b-ary tree over the n cells (leaves included), unweighted (Hay et al. 2010).

    Levels go from the root (one node: all cells) down to singletons; each level partitions the
    cells into contiguous blocks, so every column has exactly one 1 per level (Δ₁ = levels,
    Δ₂ = √levels).
    """
    if isinstance(branching, bool) or not isinstance(branching, int) or branching < 2:
        raise InvalidParameterError("branching", branching, "an integer >= 2")
    levels = max(1, math.ceil(math.log(n, branching) - 1e-12)) + 1 if n > 1 else 1
    cells = np.arange(n)
    rows, cols = [], []
    offset = 0
    for level in range(levels):
        block = branching ** (levels - 1 - level)
        node = cells // block
        rows.append(offset + node)
        cols.append(cells)
        offset += int(node[-1]) + 1
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    mat = sp.csr_matrix((np.ones(r.size), (r, c)), shape=(offset, n))
    return Strategy(mat, f"hierarchical({n}, b={branching})", {"levels": levels})


def wavelet(n: int) -> Strategy:
    """The (unnormalised, ±1) Haar wavelet basis (Xiao, Wang & Gehrke 2010) on 2^⌈log₂n⌉ cells,
    restricted to the first n columns (still full column rank)."""
    size = 1 << max(0, math.ceil(math.log2(n))) if n > 1 else 1
    rows: list[np.ndarray] = [np.ones(size)]
    r_idx, c_idx, vals = [np.zeros(size, dtype=np.int64)], [np.arange(size)], [rows[0]]
    row = 1
    block = size
    while block > 1:
        half = block // 2
        starts = np.arange(0, size, block)
        for s in starts:
            cols_ = np.arange(s, s + block)
            r_idx.append(np.full(block, row))
            c_idx.append(cols_)
            vals.append(np.where(cols_ < s + half, 1.0, -1.0))
            row += 1
        block = half
    mat = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(r_idx), np.concatenate(c_idx))), shape=(row, size)
    )
    mat = sp.csr_matrix(mat[:, :n])
    keep = np.flatnonzero(np.asarray(abs(mat).sum(axis=1)).ravel() > 0)
    return Strategy(sp.csr_matrix(mat[keep]), f"wavelet({n})")


def p_identity(theta: np.ndarray, norm: Norm) -> Strategy:
    """A = [I; Θ]·D with D normalising each column to unit L1 (Laplace) or L2 (Gaussian) norm."""
    norm = _check_norm(norm)
    theta = np.asarray(theta, dtype=np.float64)
    d = _column_scale(theta, norm)
    theta.shape[1]
    mat = sp.vstack([sp.diags(d), sp.csr_matrix(theta * d[None, :])]).tocsr()
    return Strategy(mat, f"p-identity(p={theta.shape[0]}, {norm})", {"theta": theta})


def _column_scale(theta: np.ndarray, norm: Norm) -> np.ndarray:
    if norm == "l1":
        return np.asarray(1.0 / (1.0 + theta.sum(axis=0)))
    return np.asarray(1.0 / np.sqrt(1.0 + (theta * theta).sum(axis=0)))


# ------------------------------------------------------------------------------ OPT_0 (HDMM)
def _p_identity_objective(
    theta_flat: np.ndarray, workload: Workload, p: int, norm: Norm, gdiag: np.ndarray
) -> tuple[float, np.ndarray]:
    """tr(WᵀW (AᵀA)⁻¹) for A = [I; Θ]D and its gradient in Θ (derivation in docs/workloads.md)."""
    n = workload.shape[1]
    theta = theta_flat.reshape(p, n)
    d = _column_scale(theta, norm)
    gram_p = np.eye(p) + theta @ theta.T
    chol = sla.cho_factor(gram_p, lower=True)
    scaled = theta / d[None, :]
    big_p = workload.gram_matmat(scaled.T).T / d[None, :]  # P = Θ G', G' = D⁻¹GD⁻¹
    q = big_p @ theta.T  # Q = Θ G' Θᵀ
    kq = sla.cho_solve(chol, q)
    value = float(np.sum(gdiag / (d * d)) - np.trace(kq))
    k_theta = sla.cho_solve(chol, theta)  # KΘ
    qk_theta = q @ k_theta  # Q K Θ
    r = -2.0 * sla.cho_solve(chol, big_p - qk_theta) / d[None, :]  # Gr[n:]
    xgx = gdiag / (d * d) - 2 * np.sum(k_theta * big_p, axis=0) + np.sum(k_theta * qk_theta, axis=0)
    diag_top = -2.0 * xgx / d
    s = diag_top + np.sum(theta * r, axis=0)
    if norm == "l1":
        grad = r * d[None, :] - (d * d * s)[None, :]
    else:
        grad = r * d[None, :] - theta * (d**3 * s)[None, :]
    return value, grad.ravel()


def optimize_p_identity(
    workload: Workload,
    norm: Norm = "l2",
    p: int | None = None,
    *,
    max_iter: int = 500,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Strategy:
    """HDMM OPT_0: the p-Identity strategy minimising ‖W A⁺‖_F² (Δ(A) = 1), by L-BFGS-B.

    Start: Θ = a deterministic block pattern (row i covers cells [i·n/p, (i+1)·n/p), weight 1)
    plus a small deterministic ripple that breaks ties; no randomness is involved. ``p``
    defaults to max(1, n/16) as in HDMM, capped so Θ (p×n) and the p×n work arrays fit in
    ``max_bytes``.
    """
    norm = _check_norm(norm)
    n = workload.shape[1]
    if p is None:
        p = max(1, n // 16)
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise InvalidParameterError("p", p, "an integer >= 1")
    check_dense_memory("the p-Identity parameters and work arrays", 8 * p, n, max_bytes)
    gdiag = workload.gram_diag()
    block = np.arange(n) * p // n
    theta0 = np.zeros((p, n))
    theta0[block, np.arange(n)] = 1.0
    ripple = 0.5 + 0.5 * np.sin(np.outer(np.arange(1, p + 1), np.arange(1, n + 1)) * 0.7071)
    theta0 = theta0 + 0.05 * ripple
    start = time.perf_counter()
    result = minimize(
        _p_identity_objective,
        theta0.ravel(),
        args=(workload, p, norm, gdiag),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None)] * (p * n),
        options={"maxiter": max_iter, "maxfun": 2 * max_iter},
    )
    elapsed = time.perf_counter() - start
    theta = np.asarray(result.x).reshape(p, n)
    strategy = p_identity(theta, norm)
    strategy.name = f"OPT_0 p-identity(p={p}, {norm})"
    strategy.info.update(
        {"objective": float(result.fun), "seconds": elapsed, "iterations": int(result.nit)}
    )
    return strategy


def optimize_kron(
    workload: Kron, norm: Norm = "l2", p: Sequence[int | None] | None = None
) -> KronStrategy:
    """OPT_⊗ (HDMM §5.2) for one Kronecker product: optimise a p-Identity per factor."""
    ps = list(p) if p is not None else [None] * len(workload.factors)
    return KronStrategy(
        [optimize_p_identity(f, norm, pi) for f, pi in zip(workload.factors, ps, strict=True)]
    )


# ---------------------------------------------------------------------------------- errors
def _unit_error_explicit(workload: Workload, strategy: Strategy, max_bytes: int) -> float:
    """‖W A⁺‖_F² = tr(WᵀW (AᵀA)⁻¹) for an explicit strategy (dense n×n Cholesky)."""
    n = strategy.shape[1]
    if workload.shape[1] != n:
        raise InvalidParameterError(
            "strategy", f"{strategy.name} over {n} cells", f"{workload.shape[1]} cells"
        )
    if "theta" in strategy.info:
        theta = strategy.info["theta"]
        norm: Norm = "l1" if "l1" in strategy.name else "l2"
        value, _ = _p_identity_objective(
            theta.ravel(), workload, theta.shape[0], norm, workload.gram_diag()
        )
        d = _column_scale(theta, norm)
        # objective is for A normalised with D; the stored matrix is the same A
        del d
        return value
    check_dense_memory(f"AᵀA of {strategy.name}", n, n, max_bytes // 3)
    ata = (strategy.matrix.T @ strategy.matrix).toarray()
    chol = sla.cho_factor(ata, lower=True)
    g = workload.gram_matmat(np.eye(n))
    return float(np.trace(sla.cho_solve(chol, g)))


def expected_error(
    workload: Workload,
    strategy: AnyStrategy,
    norm: Norm = "l2",
    noise_variance: float = 1.0,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> float:
    """Expected total squared error v·Δ(A)²·‖W A⁺‖_F², v = noise variance per unit sensitivity.

    For a Kronecker workload and Kronecker strategy with matching factors the error factorises.
    """
    norm = _check_norm(norm)
    if isinstance(strategy, KronStrategy):
        if not isinstance(workload, Kron) or len(workload.factors) != len(strategy.factors):
            raise InvalidParameterError(
                "workload", workload.name, "a Kron workload with one factor per strategy factor"
            )
        unit = math.prod(
            _unit_error_explicit(w, a, max_bytes)
            for w, a in zip(workload.factors, strategy.factors, strict=True)
        )
    else:
        unit = _unit_error_explicit(workload, strategy, max_bytes)
    return noise_variance * strategy.sensitivity(norm) ** 2 * unit


def svd_bound(workload: Workload, *, max_bytes: int = DEFAULT_MAX_BYTES) -> float:
    """(Σ √λᵢ(WᵀW))² / n: no strategy has smaller Δ₂(A)²·‖WA⁺‖_F² (Li & Miklau 2012)."""
    if isinstance(workload, Kron):
        return math.prod(svd_bound(f, max_bytes=max_bytes) for f in workload.factors)
    ev = workload.gram_eigenvalues(max_bytes)
    return float(np.sum(np.sqrt(np.clip(ev, 0, None))) ** 2 / workload.shape[1])


def kron_matrix(strategy: AnyStrategy) -> sp.csr_matrix:
    """The explicit sparse matrix of a (small) strategy."""
    if isinstance(strategy, Strategy):
        return strategy.matrix
    return reduce(lambda a, b: sp.kron(a, b, format="csr"), [f.matrix for f in strategy.factors])
