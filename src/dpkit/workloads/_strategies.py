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
* the column-normalised eigen-design A = Λ^{1/4}VᵀD (Li & Miklau 2012; :mod:`._eigen`), with
  closed-form spectra and an O(n log² n) exact error for Prefix and AllRange;
* Kronecker strategies ⊗Aᵢ for Kronecker workloads (OPT_⊗: optimise each factor; for one
  product ‖(⊗Wᵢ)(⊗Aᵢ)⁺‖_F² = Π‖WᵢAᵢ⁺‖_F² and Δ(⊗Aᵢ) = ΠΔ(Aᵢ), so the factors separate).

The SVD lower bound (Li & Miklau, "An adaptive mechanism for accurate query answering under
differential privacy", PVLDB 2012, Thm. 1 for L2): for every strategy A,
tr(WᵀW (AᵀA)⁻¹)·Δ₂(A)² >= (Σᵢ λᵢ(WᵀW)^{1/2})² / n, attained when AᵀA ∝ (WᵀW)^{1/2} with equal column
norms. Because Δ₁ >= Δ₂, the same number bounds the L1 objective too (loosely).
"""

from __future__ import annotations

import contextlib
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
from dpkit.workloads._eigen import EigenDesign, tree_level_traces, tree_unit_error
from dpkit.workloads._ops import (
    DEFAULT_MAX_BYTES,
    AllRange,
    Kron,
    Prefix,
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
    "optimize_tree_weights",
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


AnyStrategy = Strategy | KronStrategy | EigenDesign


# ------------------------------------------------------------------------------- baselines
def identity(n: int) -> Strategy:
    """A = I (noise on every cell)."""
    return Strategy(
        sp.identity(n, format="csr", dtype=np.float64), f"identity({n})", {"kind": "identity"}
    )


def hierarchical(n: int, branching: int = 2, weights: Sequence[float] | None = None) -> Strategy:
    """Every node of a b-ary tree over the n cells (leaves included), unweighted (Hay et al. 2010)
    or with one positive weight per level (root first; :func:`optimize_tree_weights`).

    Levels go from the root (one node: all cells) down to singletons; each level partitions the
    cells into contiguous blocks, so every column has exactly one entry w_l per level
    (Δ₁ = Σ w_l, Δ₂² = Σ w_l²; unweighted: levels and √levels).
    """
    if isinstance(branching, bool) or not isinstance(branching, int) or branching < 2:
        raise InvalidParameterError("branching", branching, "an integer >= 2")
    levels = max(1, math.ceil(math.log(n, branching) - 1e-12)) + 1 if n > 1 else 1
    w = np.ones(levels) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (levels,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise InvalidParameterError(
            "weights", weights, f"{levels} positive finite weights (one per level, root first)"
        )
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
    mat = sp.csr_matrix((np.repeat(w, n), (r, c)), shape=(offset, n))
    info: dict[str, Any] = {"levels": levels, "kind": "hierarchical", "branching": branching}
    name = f"hierarchical({n}, b={branching})"
    if weights is not None:
        info["weights"] = w
        name = f"weighted hierarchical({n}, b={branching})"
    return Strategy(mat, name, info)


def optimize_tree_weights(
    workload: Workload, norm: Norm = "l2", branching: int = 2
) -> Strategy | None:
    """The b-ary tree with per-level weights minimising the exact expected error, for Prefix and
    AllRange on n = b^L cells (``None`` otherwise).

    With u_l = w_l², AᵀA = Σ_l u_l s_l Q_{s_l}, diagonal on the level subspaces R_m with
    eigenvalue κ_m(u) = Σ_{l>=m} u_l s_l (the unweighted closed form of
    :func:`dpkit.workloads._eigen.tree_unit_error`), so Err/v = Δ(u)²·Σ_m tr(WᵀW P_m)/κ_m(u) with
    Δ² = Σu (L2) or (Σ√u)² (L1): L+1 variables, minimised by L-BFGS-B over log u from the
    uniform and a geometric start (level weights as in the budget allocation of Cormode et al.,
    ICDE 2012, and Qardaji, Yang & Li, PVLDB 2013, here optimised for the workload).
    """
    norm = _check_norm(norm)
    n = workload.shape[1]
    parts = tree_level_traces(workload, n, branching)
    if parts is None:
        return None
    sizes, traces = parts

    def objective(logu: np.ndarray) -> float:
        u = np.exp(logu)
        kappa = np.cumsum((u * sizes)[::-1])[::-1]
        sens2 = float(np.sum(u)) if norm == "l2" else float(np.sum(np.sqrt(u))) ** 2
        return sens2 * float(np.sum(traces / kappa))

    best: tuple[float, np.ndarray] | None = None
    scale = objective(np.zeros(sizes.size))  # the unweighted tree: the objective in O(1) units
    bounds = [(-30.0, 0.0)] * sizes.size  # scale-free: u <= 1; u >= e^-30 keeps weights > 0
    for x0 in (np.zeros(sizes.size), np.log(sizes / sizes[0]) / 2):
        res = minimize(lambda x: objective(x) / scale, x0, method="L-BFGS-B", bounds=bounds)
        value = objective(np.asarray(res.x))
        if best is None or value < best[0]:
            best = (value, np.asarray(res.x))
    assert best is not None
    w = np.sqrt(np.exp(best[1] - np.max(best[1])))  # largest weight 1
    strategy = hierarchical(n, branching, w)
    strategy.info["objective"] = best[0]
    strategy.name = f"weighted hierarchical({n}, b={branching}, {norm})"
    return strategy


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
    return Strategy(sp.csr_matrix(mat[keep]), f"wavelet({n})", {"kind": "wavelet"})


def p_identity(theta: np.ndarray, norm: Norm) -> Strategy:
    """A = [I; Θ]·D with D normalising each column to unit L1 (Laplace, Θ >= 0) or L2 (Gaussian,
    Θ of any sign) norm."""
    norm = _check_norm(norm)
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim != 2 or not np.all(np.isfinite(theta)):
        raise InvalidParameterError("theta", f"shape {theta.shape}", "a finite p×n matrix")
    if norm == "l1" and np.any(theta < 0):
        raise InvalidParameterError("theta", "negative entries", "Θ >= 0 under L1")
    d = _column_scale(theta, norm)
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


def _p_identity_value(
    theta: np.ndarray, workload: Workload, norm: Norm, *, orthogonal_rows: bool = False
) -> float:
    """The objective alone (Woodbury, two O(p²n) products): tr(WᵀW (AᵀA)⁻¹) for A = [I; Θ]D.

    (AᵀA)⁻¹ = D⁻¹(I - Θᵀ(I_p + ΘΘᵀ)⁻¹Θ)D⁻¹, so tr(G (AᵀA)⁻¹) = Σ_j G_jj/d_j² - tr(K·ΘG'Θᵀ).
    ``orthogonal_rows`` (the spectral start): ΘΘᵀ is the diagonal of squared row norms.
    """
    p = theta.shape[0]
    d = _column_scale(theta, norm)
    if orthogonal_rows:
        gram_p = np.diag(1.0 + np.einsum("ij,ij->i", theta, theta))
    else:
        gram_p = np.eye(p) + theta @ theta.T
    chol = sla.cho_factor(gram_p, lower=True)
    big_p = workload.gram_matmat((theta / d[None, :]).T).T / d[None, :]
    q = big_p @ theta.T
    return float(np.sum(workload.gram_diag() / (d * d)) - np.trace(sla.cho_solve(chol, q)))


def _top_eigenpairs(
    workload: Workload, p: int, max_bytes: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The p largest eigenvalues of WᵀW (descending) and their orthonormal eigenvectors (p×n).

    Closed forms for Prefix (WᵀW)⁻¹ = tridiag(-1, 2, -1) with a 1 in the top corner:
    v_k(j) ∝ cos((2j+1)(2k-1)π/(4n+2)); AllRange ((n+1)T⁻¹): v_k(j) ∝ sin((j+1)kπ/(n+1)).
    Other workloads: a dense eigendecomposition of WᵀW when it fits, else ``None``.
    """
    n = workload.shape[1]
    if isinstance(workload, Prefix | AllRange):
        k = np.arange(1, p + 1, dtype=np.float64)[:, None]
        j = np.arange(n, dtype=np.float64)[None, :]
        if isinstance(workload, Prefix):
            vecs = np.cos((2 * j + 1) * (2 * k - 1) * (np.pi / (4 * n + 2)))
            lam = 1.0 / (4 * np.sin((2 * k[:, 0] - 1) * np.pi / (4 * n + 2)) ** 2)
        else:
            vecs = np.sin((j + 1) * k * (np.pi / (n + 1)))
            lam = (n + 1) / (4 * np.sin(k[:, 0] * np.pi / (2 * n + 2)) ** 2)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return np.asarray(lam), vecs
    if 3 * 8 * n * n > max_bytes or n > 8192:
        return None
    lam, vecs = np.linalg.eigh(workload.gram_dense(max_bytes))
    order = np.argsort(lam)[::-1][:p]
    return np.clip(lam[order], 0.0, None), np.asarray(vecs[:, order].T)


def _spectral_start(workload: Workload, p: int, max_bytes: int) -> np.ndarray | None:
    """Θ₀ whose Gram I + Θ₀ᵀΘ₀ follows the SVD bound's optimum on the top p eigenvectors.

    The SVD bound is attained by AᵀA ∝ (WᵀW)^{1/2}. A p-Identity strategy has AᵀA = D(I + ΘᵀΘ)D:
    a floor f on every direction plus p free directions. Taking the top-p eigenvectors uₖ of WᵀW
    with AᵀA-eigenvalues xₖ ∝ √λₖ and the floor f elsewhere, under the trace budget
    Σxₖ + (n-p)f = n, the error Σ_{k<=p} λₖ/xₖ + Σ_{k>p} λₖ/f is minimised in closed form:
    with S = Σ_{k<=p} √λₖ and R = Σ_{k>p} λₖ, f = n√R / (S√(n-p) + √R(n-p)) and
    xₖ = √λₖ (n - (n-p)f)/S; then Θ₀ = diag(√(xₖ/f - 1))·[u₁ … u_p]ᵀ (deterministic).
    """
    n = workload.shape[1]
    pairs = _top_eigenpairs(workload, p, max_bytes)
    if pairs is None or p >= n:
        return None
    lam, vecs = pairs
    roots = np.sqrt(lam)
    top = float(np.sum(roots))
    rest = max(0.0, workload.gram_trace() - float(np.sum(lam)))
    if top <= 0:
        return None
    if rest <= 0:
        floor = 1e-3
    else:
        floor = n * math.sqrt(rest) / (top * math.sqrt(n - p) + math.sqrt(rest) * (n - p))
    x = roots * (n - (n - p) * floor) / top
    weights = np.sqrt(np.clip(x / floor - 1.0, 0.0, 1e8))
    return np.asarray(weights[:, None] * vecs)


def _block_start(p: int, n: int) -> np.ndarray:
    """HDMM-style start: row i covers cells [i·n/p, (i+1)·n/p) plus a deterministic ripple."""
    block = np.arange(n) * p // n
    theta0 = np.zeros((p, n))
    theta0[block, np.arange(n)] = 1.0
    ripple = 0.5 + 0.5 * np.sin(np.outer(np.arange(1, p + 1), np.arange(1, n + 1)) * 0.7071)
    return np.asarray(theta0 + 0.05 * ripple)


def _tree_start(p: int, n: int) -> np.ndarray:
    """A dyadic-tree start: the upper levels of a binary hierarchy (blocks of s, 2s, 4s, … cells,
    s the smallest size whose levels fit in p rows), unit weights; unused rows are zero."""
    s = 1
    while sum(-(-n // (s << lv)) for lv in range(max(1, math.ceil(math.log2(n / s)) + 1))) > p:
        s *= 2
    theta0 = np.zeros((p, n))
    row, size, cells = 0, s, np.arange(n)
    while row < p:
        blocks = cells // size
        count = int(blocks[-1]) + 1
        if row + count > p:
            break
        theta0[row + blocks, cells] = 1.0
        row += count
        if count == 1:
            break
        size *= 2
    return theta0


_WORK_FLOPS = 4.3e9  # p²n per product: ≈ 1-2 s single-threaded


def default_p(n: int, norm: Norm) -> int:
    """p for OPT_0. L2: n/2 (n <= 512) or n/4, capped so that p²n <= 4.3e9 (about 1 s per O(p²n)
    product on one core): the spectral start is near-optimal for the family without iterating,
    and the family needs p ≈ n/4 to come within 5 % of the SVD bound (docs/workloads.md).
    L1: HDMM's n/16, capped at p²n <= 4.2e6 so that L-BFGS-B gets hundreds of steps in the
    time budget (measured: at n = 4096, p = 32 beats p = 64 and p = 128 within 8 s)."""
    if norm == "l2":
        p = n // 2 if n <= 512 else n // 4
        cap = int(math.sqrt(_WORK_FLOPS / max(1, n)))
    else:
        p = n // 16
        cap = int(math.sqrt(4.2e6 / max(1, n)))
    return max(1, min(p, cap, n - 1 if n > 1 else 1))


class _Budget(Exception):
    pass


def optimize_p_identity(
    workload: Workload,
    norm: Norm = "l2",
    p: int | None = None,
    *,
    max_iter: int = 500,
    max_seconds: float = 8.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Strategy:
    """HDMM OPT_0: the p-Identity strategy minimising ‖W A⁺‖_F² (Δ(A) = 1), by L-BFGS-B.

    Starts (deterministic, no randomness): under L2 the spectral start of
    :func:`_spectral_start` (closed-form eigenvectors for Prefix and AllRange; Θ may have any
    sign, since Δ₂ only sees squares) and HDMM's block pattern; under L1 the block pattern
    (Θ >= 0, so that the column L1 norm is 1 + ΣᵢΘᵢⱼ). Each start is refined by L-BFGS-B with
    the analytic Woodbury gradient (O(p²n) per step; the workload enters only through WᵀW·V,
    O(pn) for Prefix and AllRange) until ``max_iter`` or the shared ``max_seconds`` budget runs
    out; the best objective wins. ``p`` defaults to :func:`default_p`.
    """
    norm = _check_norm(norm)
    n = workload.shape[1]
    if p is None:
        p = default_p(n, norm)
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise InvalidParameterError("p", p, "an integer >= 1")
    if not (isinstance(max_seconds, int | float) and max_seconds > 0):
        raise InvalidParameterError("max_seconds", max_seconds, "a positive number of seconds")
    check_dense_memory("the p-Identity parameters and work arrays", 8 * p, n, max_bytes)
    gdiag = workload.gram_diag()
    start = time.perf_counter()
    starts: list[tuple[str, np.ndarray]] = []
    if norm == "l2":
        spectral = _spectral_start(workload, p, max_bytes)
        if spectral is not None:
            starts.append(("spectral", spectral))
    starts.append(("tree", _tree_start(p, n)))
    starts.append(("block", _block_start(p, n)))
    best: tuple[float, np.ndarray, str, int] | None = None
    runs: dict[str, float] = {}
    cost = 0.0
    for label, theta0 in starts:
        elapsed = time.perf_counter() - start
        if best is not None and (elapsed > max_seconds / 2 or elapsed + 3 * cost > max_seconds):
            break  # a restart only with half of the budget left and room for its evaluations
        tick = time.perf_counter()
        f0 = _p_identity_value(theta0, workload, norm, orthogonal_rows=label == "spectral")
        cost = time.perf_counter() - tick  # a gradient costs about 4 value evaluations
        state: dict[str, Any] = {"x": theta0.ravel(), "f": f0, "nit": 0}
        if time.perf_counter() - start + 10 * cost > max_seconds:  # < 2-3 steps: not worth it
            runs[label] = f0  # no time for a step: keep the start as it is
            if best is None or f0 < best[0]:
                best = (f0, state["x"], label, 0)
            continue

        def tracked(x: np.ndarray, state: dict[str, Any] = state) -> tuple[float, np.ndarray]:
            theta = x * x if norm == "l1" else x  # L1: Θ = φ² keeps Θ >= 0 without bounds
            f, g = _p_identity_objective(theta, workload, p, norm, gdiag)
            if f < state["f"]:
                state["x"], state["f"] = np.array(theta), f
            if time.perf_counter() - start > max_seconds:
                raise _Budget
            return f, (2 * x * g if norm == "l1" else g)

        def count(_: Any, state: dict[str, Any] = state) -> None:
            state["nit"] += 1

        with contextlib.suppress(_Budget):
            minimize(
                tracked,
                np.sqrt(theta0.ravel() + 1e-4) if norm == "l1" else theta0.ravel(),
                jac=True,
                method="L-BFGS-B",
                callback=count,
                options={"maxiter": max_iter, "maxfun": 2 * max_iter, "ftol": 1e-7},
            )
        runs[label] = float(state["f"])
        if best is None or state["f"] < best[0]:
            best = (float(state["f"]), state["x"], label, int(state["nit"]))
    assert best is not None
    elapsed = time.perf_counter() - start
    theta = np.asarray(best[1]).reshape(p, n)
    strategy = p_identity(theta, norm)
    strategy.name = f"OPT_0 p-identity(p={p}, {norm})"
    strategy.info.update(
        {
            "objective": best[0],
            "seconds": elapsed,
            "iterations": best[3],
            "start": best[2],
            "starts": runs,
        }
    )
    return strategy


def optimize_kron(
    workload: Kron,
    norm: Norm = "l2",
    p: Sequence[int | None] | None = None,
    *,
    max_seconds: float = 8.0,
) -> KronStrategy:
    """OPT_⊗ (HDMM §5.2) for one Kronecker product: optimise a p-Identity per factor (the time
    budget is shared equally between the factors)."""
    ps = list(p) if p is not None else [None] * len(workload.factors)
    each = max_seconds / max(1, len(workload.factors))
    return KronStrategy(
        [
            optimize_p_identity(f, norm, pi, max_seconds=each)
            for f, pi in zip(workload.factors, ps, strict=True)
        ]
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
        norm: Norm = "l1" if "l1" in strategy.name else "l2"
        return _p_identity_value(strategy.info["theta"], workload, norm)
    structured = _structured_unit_error(workload, strategy)
    if structured is not None:
        return structured
    check_dense_memory(f"AᵀA of {strategy.name}", n, n, max_bytes // 3)
    ata = (strategy.matrix.T @ strategy.matrix).toarray()
    chol = sla.cho_factor(ata, lower=True)
    g = workload.gram_matmat(np.eye(n))
    return float(np.trace(sla.cho_solve(chol, g)))


def _structured_unit_error(workload: Workload, strategy: Strategy) -> float | None:
    """Closed forms that need no dense n×n: identity (‖W‖_F²) and, for Prefix/AllRange on
    n = b^L cells, the b-ary tree and the Haar basis (``_eigen.tree_unit_error``). The ``kind`` tag
    is checked against the matrix's shape and number of non-zeros."""
    kind = strategy.info.get("kind")
    n, nnz = strategy.shape[1], strategy.matrix.nnz
    if kind == "identity" and strategy.shape == (n, n) and nnz == n:
        return workload.gram_trace()
    if kind == "hierarchical" and nnz == n * int(strategy.info["levels"]):
        weights = strategy.info.get("weights")
        return tree_unit_error(
            workload, "hierarchical", n, int(strategy.info["branching"]), weights
        )
    if kind == "wavelet" and strategy.shape[0] == n:
        return tree_unit_error(workload, "wavelet", n, 2)
    return None


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
    elif isinstance(strategy, EigenDesign):
        unit = strategy.unit_error(workload, max_bytes)
    else:
        unit = _unit_error_explicit(workload, strategy, max_bytes)
    return noise_variance * strategy.sensitivity(norm) ** 2 * unit


def svd_bound(workload: Workload, *, max_bytes: int = DEFAULT_MAX_BYTES) -> float:
    """(Σ √λᵢ(WᵀW))² / n: no strategy has smaller Δ₂(A)²·‖WA⁺‖_F² (Li & Miklau 2012)."""
    if isinstance(workload, Kron):
        return math.prod(svd_bound(f, max_bytes=max_bytes) for f in workload.factors)
    ev = workload.gram_eigenvalues(max_bytes)
    return float(np.sum(np.sqrt(np.clip(ev, 0, None))) ** 2 / workload.shape[1])


def kron_matrix(strategy: AnyStrategy, max_bytes: int = DEFAULT_MAX_BYTES) -> sp.csr_matrix:
    """The explicit sparse matrix of a (small) strategy (the eigen-design: its dense matrix,
    refused above ``max_bytes``)."""
    if isinstance(strategy, Strategy):
        return strategy.matrix
    if isinstance(strategy, EigenDesign):
        return sp.csr_matrix(strategy.dense(max_bytes))
    return reduce(lambda a, b: sp.kron(a, b, format="csr"), [f.matrix for f in strategy.factors])
