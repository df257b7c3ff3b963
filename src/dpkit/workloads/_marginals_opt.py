"""OPT_M: HDMM's marginals strategy optimiser (McKenna et al., PVLDB 2018, §6), with exact noise.

A *marginals strategy* measures a weighted set of marginals, A = [√u_a·M_a]_{a∈S}, M_a the
marginal on attribute set a. Every M_aᵀM_a = ⊗_{i∈a} I ⊗_{i∉a} J (J = 11ᵀ) is diagonal in the
residual basis of ResidualPlanner: on the eigenspace of residual b (dimension
dim_b = Π_{i∈b}(nᵢ-1)) it has eigenvalue N_a = Π_{i∉a} nᵢ when b ⊆ a and 0 otherwise. Hence,
with N = Π nᵢ and cells_a = Π_{i∈a} nᵢ,

    AᵀA has eigenvalue N·κ_b,  κ_b = Σ_{a∈S, a⊇b} u_a / cells_a,

and a marginal workload with variance weights w_B has WᵀW eigenvalue N·g_b,
g_b = Σ_{B⊇b} w_B / cells_B. The expected total squared error with noise variance σ² per row is
σ²·Σ_b dim_b g_b / κ_b (the sum over the downward closure of the workload), and the
sensitivity is Δ₂² = Σ_a u_a (one record moves every marginal by one in one cell), Δ₁ = Σ √u_a.
OPT_M minimises

    L2 (Gaussian, zCDP): (Σ u_a) · Σ_b dim_b g_b / κ_b(u)     — convex in u,
    L1 (Laplace, ε-DP):  (Σ √u_a)² · Σ_b dim_b g_b / κ_b(u),

by L-BFGS-B with the analytic gradient (κ = M·u for a sparse M with M_{ba} = 1/cells_a, b ⊆ a).
HDMM optimises over all 2^d attribute sets; dpkit restricts the support S to the downward
closure of the workload (the sets whose residuals the workload needs), which keeps the problem
at |S| variables (576 for all 2- and 3-way marginals of 15 attributes; 166,751 for 100
attributes). Starts (deterministic): ResidualPlanner's exact-noise allocation u_a ∝ 1/σ_A² (so
the result is never worse than dpkit's exact ResidualPlanner release), the workload's own
marginals, and the whole closure uniformly; the best wins.

Release (exact): marginal a is measured with iid discrete Gaussian noise N_Z(0, s_a²),
s_a² = Σu/(2ρ)/u_a rounded up to a rational, so the zCDP cost is exactly
Σ_a c²/(2 s_a²) <= ρ (Canonne, Kamath & Steinke 2020; each marginal has L2 sensitivity c). Under
L1 marginal a gets discrete Laplace noise of scale t_a = c·Σθ/(ε θ_a), θ_a = √u_a, so
ε = Σ_a c/t_a exactly. Reconstruction is generalised least squares in the residual basis with
the exact lattice variances v_a: residual b of x̂ is (1/κ_b)·Σ_{a⊇b} t_{a,b}/v_a with
κ_b = Σ_{a⊇b} 1/(v_a·cells_a), t_{a,b} = P1_b(Σ_{a∖b} y_a)/Π_{i∈a∖b} nᵢ, and marginal B is
Σ_{b⊆B} (residual b)/cells_B broadcast over B; each cell of B has variance
Σ_{b⊆B} dim_b/(cells_B² κ_b).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from dpkit._exact import Number, check_epsilon, check_rho
from dpkit.core._losses import ZCDP, PrivacyLoss, PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._additive import integer_input
from dpkit.noise._distributions import DiscreteGaussian, DiscreteLaplace, LatticeNoise
from dpkit.workloads._residual import (
    MarginalRelease,
    _subsets,
    check_marginal_domain,
    check_marginal_sets,
    plan_residuals,
)

__all__ = ["MarginalsStrategy", "optimize_marginals"]

Cells = tuple[int, ...]


class _Budget(Exception):
    pass


@dataclass(eq=False)
class MarginalsStrategy:
    """Weights u_a >= 0 on the marginals of ``support`` (OPT_M's result)."""

    domain: tuple[int, ...]
    workload: list[Cells]
    workload_weights: list[float]
    support: list[Cells]
    u: np.ndarray
    norm: Literal["l1", "l2"]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"OPT_M marginals({int(np.count_nonzero(self.u))} measured, {self.norm})"

    def sensitivity(self, norm: str | None = None) -> float:
        """Δ₂ = √Σu_a or Δ₁ = Σ√u_a (each marginal moves by one in one cell)."""
        norm = norm or self.norm
        return float(math.sqrt(np.sum(self.u)) if norm == "l2" else np.sum(np.sqrt(self.u)))

    def _structure(self) -> _Structure:
        return _Structure(self.domain, self.workload, self.workload_weights, self.support)

    def expected_error(self, noise_variance: float = 1.0) -> float:
        """v·Δ²·Σ_b dim_b g_b/κ_b: total squared error over the workload's cells (weighted)."""
        st = self._structure()
        delta = self.sensitivity()
        return float(noise_variance * delta * delta * st.unit_error(self.u))

    def explain(self) -> str:
        lines = [
            f"{self.name}: expected total squared error {self.expected_error():.6g} at unit "
            f"noise per unit sensitivity over {len(self.workload)} marginal(s)"
        ]
        lines += [f"  start {k}: {v:.6g}" for k, v in self.info.get("starts", {}).items()]
        return "\n".join(lines)

    def noise(
        self,
        *,
        rho: Number | None = None,
        epsilon: Number | None = None,
        contributions: int = 1,
    ) -> tuple[dict[Cells, LatticeNoise], PrivacyLoss]:
        """The lattice noise of every measured marginal and the exact loss of the release
        (from the parameters only; :func:`verify_marginals_exact` rechecks it)."""
        if isinstance(contributions, bool) or not isinstance(contributions, int):
            raise InvalidParameterError("contributions", contributions, "an integer >= 1")
        if contributions < 1:
            raise InvalidParameterError("contributions", contributions, "an integer >= 1")
        c = contributions
        measured = [(a, float(ua)) for a, ua in zip(self.support, self.u, strict=True) if ua > 0]
        noise: dict[Cells, LatticeNoise] = {}
        loss: PrivacyLoss
        if self.norm == "l2":
            if rho is None or epsilon is not None:
                raise InvalidParameterError("rho", rho, "given (alone) for an L2 strategy")
            r = check_rho(rho)
            if r <= 0:
                raise InvalidParameterError("rho", rho, "> 0")
            total = math.fsum(ua for _, ua in measured)
            cost = Fraction(0)
            for a, ua in measured:
                s2 = Fraction(total / (2 * float(r)) / ua) * (1 + Fraction(1, 10**9))
                noise[a] = DiscreteGaussian(s2 * c * c)  # sensitivity c, variance s²c²
                cost += 1 / (2 * s2)  # c² / (2 s² c²)
            loss = ZCDP(cost)
            if loss.rho > r:
                raise InvalidParameterError("rho", rho, "a budget the rounding can meet")
        else:
            if epsilon is None or rho is not None:
                raise InvalidParameterError("epsilon", epsilon, "given (alone) for L1")
            eps = check_epsilon(epsilon)
            theta = {a: math.sqrt(ua) for a, ua in measured}
            total = math.fsum(theta.values())
            cost = Fraction(0)
            for a, th in theta.items():
                t = Fraction(c * total / (float(eps) * th)) * (1 + Fraction(1, 10**9))
                noise[a] = DiscreteLaplace(t)
                cost += Fraction(c) / t
            loss = PureDP(cost)
            if loss.epsilon > eps:
                raise InvalidParameterError("epsilon", epsilon, "a budget the rounding can meet")
        return noise, loss

    def release(
        self,
        marginals: Mapping[Cells, Any],
        *,
        rho: Number | None = None,
        epsilon: Number | None = None,
        contributions: int = 1,
    ) -> MarginalRelease:
        """Measure every marginal with u_a > 0 with exact lattice noise; reconstruct the
        workload's marginals by GLS (module doc). ``rho`` for L2, ``epsilon`` for L1. All
        parameters are checked before any table is read."""
        noise, loss = self.noise(rho=rho, epsilon=epsilon, contributions=contributions)
        measured = [a for a in self.support if a in noise]
        missing = [a for a in measured if a not in marginals]
        if missing:
            raise InvalidParameterError(
                "marginals", f"missing {missing[:3]}", "one table per measured marginal"
            )
        dom = self.domain
        noisy: dict[Cells, np.ndarray] = {}
        var: dict[Cells, float] = {}
        for a in measured:
            shape = tuple(dom[i] for i in a)
            table = integer_input(marginals[a], f"marginals[{a}]")
            if table.size != max(1, math.prod(shape)):
                raise InvalidDataError(f"marginals[{a}]", f"shape {table.shape}, expected {shape}")
            table = np.clip(table.reshape(shape), 0, 2**52)
            z = noise[a].sample(max(1, table.size)).reshape(shape)
            noisy[a] = (table + z).astype(np.float64)
            var[a] = float(noise[a].variance())
        cells = {a: math.prod(dom[i] for i in a) for a in self.support}
        closure = sorted({b for s in self.workload for b in _subsets(s)}, key=lambda t: (len(t), t))
        resid: dict[Cells, np.ndarray] = {}
        kappa: dict[Cells, float] = {}
        for b in closure:
            acc: np.ndarray | float = 0.0
            k = 0.0
            for a in measured:
                if not set(b) <= set(a):
                    continue
                y = noisy[a]
                drop = tuple(pos for pos, i in enumerate(a) if i not in b)
                t = y.sum(axis=drop) if drop else y
                t = t / math.prod(dom[i] for i in a if i not in b)
                for axis in range(len(b)):
                    t = t - t.mean(axis=axis, keepdims=True)
                acc = acc + t / var[a]
                k += 1.0 / (var[a] * cells[a])
            if k <= 0:
                raise InvalidParameterError("strategy", self.name, f"a marginal covering {b}")
            kappa[b] = k
            resid[b] = np.asarray(acc) / k
        tables: dict[Cells, np.ndarray] = {}
        variances: dict[Cells, float] = {}
        for bigb in self.workload:
            shape = tuple(dom[i] for i in bigb)
            out = np.zeros(shape)
            v = 0.0
            cb = math.prod(shape)
            for b in _subsets(bigb):
                idx = tuple(slice(None) if i in b else None for i in bigb)
                rb = resid[b]
                out = out + (rb[idx] if rb.ndim else float(rb)) / cb
                v += math.prod(dom[i] - 1 for i in b) / (cb * cb * kappa[b])
            tables[bigb] = out
            variances[bigb] = v
        return MarginalRelease(tables, variances, loss)


class _Structure:
    """The sparse containment matrix and the constants c_b of a marginal workload."""

    def __init__(
        self,
        domain: tuple[int, ...],
        workload: list[Cells],
        weights: list[float],
        support: list[Cells],
    ) -> None:
        closure = sorted({b for s in workload for b in _subsets(s)}, key=lambda t: (len(t), t))
        index = {b: k for k, b in enumerate(closure)}
        g = np.zeros(len(closure))
        for s, w in zip(workload, weights, strict=True):
            cells = math.prod(domain[i] for i in s)
            for b in _subsets(s):
                g[index[b]] += w / cells
        dim = np.array([math.prod(domain[i] - 1 for i in b) for b in closure], dtype=np.float64)
        self.c = dim * g
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for j, a in enumerate(support):
            inv = 1.0 / math.prod(domain[i] for i in a)
            for b in _subsets(a):
                k = index.get(b)
                if k is not None:
                    rows.append(k)
                    cols.append(j)
                    vals.append(inv)
        self.m = sp.csr_matrix((vals, (rows, cols)), shape=(len(closure), len(support)))
        self.mt = sp.csr_matrix(self.m.T)

    def unit_error(self, u: np.ndarray) -> float:
        kappa = self.m @ u
        if np.any(kappa <= 0):
            return math.inf
        return float(np.sum(self.c / kappa))


def optimize_marginals(
    domain: Sequence[int],
    workload: Sequence[Sequence[int]],
    *,
    weights: Sequence[float] | None = None,
    norm: Literal["l1", "l2"] = "l2",
    max_iter: int = 1000,
    max_seconds: float = 30.0,
    max_support: int = 2_000_000,
) -> MarginalsStrategy:
    """OPT_M over the downward closure of a marginal workload (module doc). All checks use
    public parameters only."""
    if norm not in ("l1", "l2"):
        raise InvalidParameterError("norm", norm, "'l1' (Laplace) or 'l2' (Gaussian)")
    dom = check_marginal_domain(domain)
    sets, w = check_marginal_sets(workload, weights, dom)
    if sum(2 ** len(s) for s in sets) > max_support:
        raise InvalidParameterError(
            "workload", f"{len(sets)} marginals", f"a closure of at most {max_support} sets"
        )
    start = time.perf_counter()
    support = sorted({b for s in sets for b in _subsets(s)}, key=lambda t: (len(t), t))
    st = _Structure(dom, sets, w, support)
    pos = {a: j for j, a in enumerate(support)}
    rp = plan_residuals(dom, sets, 1.0, weights=w, cost_model="lattice")
    u_rp = np.array([1.0 / rp.sigma2[a] for a in support])
    u_wl = np.full(len(support), 1e-6)
    u_wl[[pos[s] for s in set(sets)]] = 1.0
    starts = {
        "ResidualPlanner allocation": u_rp,
        "workload marginals": u_wl,
        "uniform closure": np.ones(len(support)),
    }
    best: tuple[float, np.ndarray, str] | None = None
    runs: dict[str, float] = {}
    for label, u0 in starts.items():
        if best is not None and time.perf_counter() - start > max_seconds / 2:
            break
        u0 = u0 / np.sum(u0)
        state: dict[str, Any] = {"u": u0, "f": _objective_value(u0, st, norm)}

        def fun(phi: np.ndarray, state: dict[str, Any] = state) -> tuple[float, np.ndarray]:
            f, g = _objective(phi, st, norm)
            if f < state["f"]:
                state["u"], state["f"] = _u_of(phi, norm), f
            if time.perf_counter() - start > max_seconds:
                raise _Budget
            return f, g

        phi0 = np.sqrt(u0) if norm == "l2" else u0**0.25
        with contextlib.suppress(_Budget):
            minimize(
                fun,
                phi0,
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": max_iter, "maxfun": 2 * max_iter, "ftol": 1e-12},
            )
        runs[label] = float(state["f"])
        if best is None or state["f"] < best[0]:
            best = (float(state["f"]), state["u"], label)
    assert best is not None
    u = np.asarray(best[1], dtype=np.float64)
    u = np.where(u > 1e-12 * np.max(u), u, 0.0) / np.max(u)
    if not math.isfinite(st.unit_error(u)):  # pruning never uncovers a residual, but be sure
        u = np.asarray(best[1]) / np.max(best[1])
    return MarginalsStrategy(
        dom,
        sets,
        w,
        support,
        u,
        norm,
        {"seconds": time.perf_counter() - start, "start": best[2], "starts": runs},
    )


def _u_of(phi: np.ndarray, norm: str) -> np.ndarray:
    return np.asarray(phi * phi if norm == "l2" else phi**4)


def _objective_value(u: np.ndarray, st: _Structure, norm: str) -> float:
    scale = float(np.sum(u)) if norm == "l2" else float(np.sum(np.sqrt(u))) ** 2
    return scale * st.unit_error(u)


def _objective(phi: np.ndarray, st: _Structure, norm: str) -> tuple[float, np.ndarray]:
    """The OPT_M objective and its gradient in φ (u = φ² for L2; θ = φ², u = θ² for L1)."""
    u = _u_of(phi, norm)
    kappa = st.m @ u
    if np.any(kappa <= 0):
        return math.inf, np.zeros_like(phi)
    f_unit = float(np.sum(st.c / kappa))
    d_unit = -(st.mt @ (st.c / (kappa * kappa)))  # ∂F/∂u
    if norm == "l2":
        s = float(np.sum(u))
        return s * f_unit, 2 * phi * (f_unit + s * d_unit)
    theta = phi * phi
    s = float(np.sum(theta))
    d_theta = 2 * s * f_unit + s * s * 2 * theta * d_unit
    return s * s * f_unit, 2 * phi * d_theta
