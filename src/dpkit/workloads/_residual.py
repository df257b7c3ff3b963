"""ResidualPlanner (Xiao, He, Toksoz, Ding, Zhang & Kifer, NeurIPS 2023) for marginal workloads.

Every marginal Q_B x (attribute set B) decomposes over the subsets A ⊆ B into *residuals*: with
P1ᵢ = I - 11ᵀ/nᵢ, the A-residual is (⊗_{i∈A} P1ᵢ ⊗_{i∉A} 1ᵀ)·x, and

    Q_B x = Σ_{A⊆B} (A-residual) ⊗_{i∈B∖A} (1/nᵢ)·1.

The base mechanism for A measures its residual with noise of variance σ_A² per cell in
(⊗P1ᵢ)-shaped covariance. A cell of marginal B then has variance
Σ_{A⊆B} σ_A²·Π_{i∈A}(nᵢ-1)/nᵢ·Π_{i∈B∖A} 1/nᵢ², and the workload's weighted total squared error
(Σ_B w_B · cells of B · per-cell variance) is Σ_A σ_A²·v_A with
v_A = Π_{i∈A}(nᵢ-1) · Σ_{B⊇A} w_B Π_{i∈B∖A} 1/nᵢ. Its zCDP cost is Σ_A p_A/(2σ_A²), with
p_A = Π_{i∈A}(nᵢ-1)/nᵢ for the paper's correlated Gaussian. Minimising Σ σ_A² v_A subject to a
budget ρ (Lagrange / Cauchy–Schwarz) gives the closed form

    σ_A² = T·sqrt(p_A / v_A),  T = Σ_A sqrt(p_A v_A) / (2ρ),
    total error = (Σ_A sqrt(p_A v_A))² / (2ρ),

optimal among all Gaussian matrix mechanisms for marginal workloads (Xiao et al., Thm. 5.3 for
the sum-of-variances loss).

Exact release (``cost_model="lattice"``): dpkit measures each A-*marginal* (not the residual)
with iid discrete Gaussian noise N_Z(0, σ_A²) per cell, and projects to the residual by
post-processing. One record moves each A-marginal by one in one cell, so the cost is exactly
Σ_A c²/(2σ_A²) (CKS 2020), i.e. p_A = 1 in the formula above (the planner re-optimises for
that cost). The projected noise has exactly the covariance σ_A²·⊗P1ᵢ, so the reconstruction
and variance formulas are unchanged. The price of exactness is the factor p_A in the cost
(the paper's correlated continuous noise is not sampled exactly here); ``cost_model="gaussian"``
plans (and reports the error of) the paper's mechanism without releasing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from typing import Any, Literal

import numpy as np

from dpkit._exact import Number, check_rho
from dpkit.core._losses import ZCDP, PrivacyLoss
from dpkit.core._release import Release
from dpkit.errors import InvalidDataError, InvalidParameterError, PrivacyCheckError
from dpkit.mechanisms._additive import integer_input
from dpkit.noise._distributions import DiscreteGaussian

__all__ = ["MarginalRelease", "ResidualPlan", "plan_residuals"]

Cells = tuple[int, ...]


def _subsets(s: Cells) -> list[Cells]:
    return [c for k in range(len(s) + 1) for c in combinations(s, k)]


@dataclass(eq=False)
class ResidualPlan:
    """The optimal σ_A² for every residual A in the downward closure of the workload."""

    domain: tuple[int, ...]
    workload: list[Cells]
    weights: list[float]
    rho: Fraction
    cost_model: str
    sigma2: dict[Cells, float]
    v: dict[Cells, float]
    p: dict[Cells, float]
    info: dict[str, Any] = field(default_factory=dict)

    def closed_form_error(self) -> float:
        """(Σ_A sqrt(p_A v_A))² / (2ρ): the optimum of the plan's cost model."""
        s = math.fsum(math.sqrt(self.p[a] * self.v[a]) for a in self.sigma2)
        return s * s / (2 * float(self.rho))

    def expected_error(self) -> float:
        """Σ_B w_B · Σ_cells Var, summed directly from the allocated σ_A² (not the closed form)."""
        return math.fsum(self.sigma2[a] * self.v[a] for a in self.sigma2)

    def cell_variance(self, b: Cells) -> float:
        """Variance of one cell of marginal ``b`` (equal for all its cells)."""
        n = self.domain
        total = 0.0
        for a in _subsets(b):
            term = self.sigma2[a]
            for i in a:
                term *= (n[i] - 1) / n[i]
            for i in b:
                if i not in a:
                    term /= n[i] * n[i]
            total += term
        return total

    def loss(self) -> ZCDP:
        """The exact zCDP cost Σ_A p_A/(2σ_A²) of the release (lattice model: p_A = 1)."""
        if self.cost_model != "lattice":
            raise InvalidParameterError(
                "cost_model", self.cost_model, "'lattice' for a release with exact noise"
            )
        return ZCDP(sum((1 / (2 * s) for s in self.info["sigma2_exact"].values()), Fraction(0)))

    def explain(self) -> str:
        return (
            f"ResidualPlanner ({self.cost_model} cost): {len(self.workload)} marginal(s), "
            f"{len(self.sigma2)} residual(s), ρ={float(self.rho):g}, expected total squared "
            f"error {self.expected_error():.6g} (closed-form optimum "
            f"{self.closed_form_error():.6g})"
        )

    def release(self, marginals: Mapping[Cells, Any], *, contributions: int = 1) -> MarginalRelease:
        """Measure every residual's marginal with exact discrete Gaussian noise and reconstruct.

        ``marginals[A]`` is the integer count table of attribute set A (shape (n_i)_{i∈A}; a
        scalar total for A = ()), e.g. from :func:`dpkit.workloads.marginal_tables`. With
        ``contributions`` = c the noise planned for c = 1 is scaled by c (variance c²σ_A²): each
        marginal moves by at most c in L2 (<= its L1 change c), so residual A still costs
        c²/(2c²σ_A²) = 1/(2σ_A²) and the release costs the plan's loss, whatever c.
        """
        if self.cost_model != "lattice":
            raise InvalidParameterError(
                "cost_model", self.cost_model, "'lattice' to release (plan with it)"
            )
        if isinstance(contributions, bool) or not isinstance(contributions, int):
            raise InvalidParameterError("contributions", contributions, "an integer >= 1")
        if contributions < 1:
            raise InvalidParameterError("contributions", contributions, "an integer >= 1")
        missing = [a for a in self.sigma2 if a not in marginals]
        if missing:
            raise InvalidParameterError(
                "marginals", f"missing {missing[:3]}", "one table per residual of the plan"
            )
        residuals: dict[Cells, np.ndarray] = {}
        c2 = contributions * contributions
        for a, s2 in self.info["sigma2_exact"].items():
            shape = tuple(self.domain[i] for i in a)
            table = integer_input(marginals[a], f"marginals[{a}]")
            if table.shape != shape and not (shape == () and table.size == 1):
                raise InvalidDataError(f"marginals[{a}]", f"shape {table.shape}, expected {shape}")
            table = np.clip(table.reshape(shape), 0, 2**52)
            noise = DiscreteGaussian(s2 * c2).sample(max(1, table.size)).reshape(shape)
            z = (table + noise).astype(np.float64)
            for axis in range(len(a)):  # ⊗P1: subtract the mean along every axis
                z = z - z.mean(axis=axis, keepdims=True)
            residuals[a] = z
        answers = {b: self._marginal(b, residuals) for b in self.workload}
        variances = {b: self.cell_variance(b) * c2 for b in self.workload}
        return MarginalRelease(answers, variances, self.loss())

    def _marginal(self, b: Cells, residuals: Mapping[Cells, np.ndarray]) -> np.ndarray:
        shape = tuple(self.domain[i] for i in b)
        out = np.zeros(shape)
        for a in _subsets(b):
            z = residuals[a]
            factor = 1.0
            idx: list[Any] = []
            for i in b:
                if i in a:
                    idx.append(slice(None))
                else:
                    idx.append(None)
                    factor /= self.domain[i]
            out = out + factor * z[tuple(idx)] if z.ndim else out + factor * float(z)
        return out


@dataclass(frozen=True, eq=False, init=False, kw_only=True)
class MarginalRelease(Release[dict[Cells, np.ndarray]]):
    """Marginal tables (unbiased, may be negative: raw) and the per-cell variance of each: the
    :class:`dpkit.Release` of :meth:`ResidualPlan.release` and
    :meth:`~dpkit.workloads.MarginalsStrategy.release` (nothing charged: ``receipt`` is None).
    """

    accuracy: dict[Cells, float]

    def __init__(
        self,
        tables: dict[Cells, np.ndarray],
        cell_variance: dict[Cells, float],
        loss: PrivacyLoss,
    ) -> None:
        fields: dict[str, Any] = {"value": tables, "loss": loss, "accuracy": cell_variance}
        fields |= {"receipt": None, "remaining": None}
        for name, value in fields.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    @property
    def tables(self) -> dict[Cells, np.ndarray]:
        """Each marginal's table by its attribute set (the release's ``value``)."""
        return self.value

    @property
    def cell_variance(self) -> dict[Cells, float]:
        """Each marginal's per-cell variance (the release's ``accuracy``)."""
        return self.accuracy


def check_marginal_domain(domain: Sequence[int]) -> tuple[int, ...]:
    """Attribute sizes, each >= 2 (public; before any data)."""
    dom = tuple(int(d) for d in domain)
    if not dom or any(d < 2 for d in dom):
        raise InvalidParameterError("domain", domain, "sizes >= 2, one per attribute")
    return dom


def check_marginal_sets(
    workload: Sequence[Sequence[int]], weights: Sequence[float] | None, dom: tuple[int, ...]
) -> tuple[list[Cells], list[float]]:
    """The marginals' attribute sets (sorted index tuples) and their positive weights."""
    sets: list[Cells] = []
    for s in workload:
        t = tuple(sorted({int(i) for i in s}))
        if any(i < 0 or i >= len(dom) for i in t):
            raise InvalidParameterError("workload", s, f"attribute indices in 0..{len(dom) - 1}")
        sets.append(t)
    if not sets:
        raise InvalidParameterError("workload", workload, "at least one attribute set")
    w = [1.0] * len(sets) if weights is None else [float(x) for x in weights]
    if len(w) != len(sets) or not all(x > 0 and math.isfinite(x) for x in w):
        raise InvalidParameterError("weights", weights, "one positive weight per marginal")
    return sets, w


def plan_residuals(
    domain: Sequence[int],
    workload: Sequence[Sequence[int]],
    rho: Number,
    *,
    weights: Sequence[float] | None = None,
    cost_model: Literal["lattice", "gaussian"] = "lattice",
    max_residuals: int = 5_000_000,
) -> ResidualPlan:
    """Plan the optimal residual measurements for a weighted marginal workload (closed form).

    Args:
        domain: number of values per attribute (declared, public).
        workload: attribute sets (tuples of indices), one per marginal.
        rho: the zCDP budget of the whole release.
        weights: per-marginal weights in the sum-of-variances loss (default 1).
        cost_model: "lattice" (exact dpkit release, p_A = 1) or "gaussian" (the paper's).
        max_residuals: refuse (before any data) workloads whose closure is larger.
    """
    dom = check_marginal_domain(domain)
    r = check_rho(rho)
    if r <= 0:
        raise InvalidParameterError("rho", rho, "> 0")
    if cost_model not in ("lattice", "gaussian"):
        raise InvalidParameterError("cost_model", cost_model, "'lattice' or 'gaussian'")
    sets, w = check_marginal_sets(workload, weights, dom)
    estimate = sum(2 ** len(s) for s in sets)
    if estimate > max_residuals:
        raise InvalidParameterError(
            "workload", f"{len(sets)} marginals", f"at most max_residuals={max_residuals} residuals"
        )
    inv = [1.0 / d for d in dom]
    v: dict[Cells, float] = {}
    for b, wb in zip(sets, w, strict=True):
        for a in _subsets(b):
            term = wb
            for i in b:
                if i not in a:
                    term *= inv[i]
            v[a] = v.get(a, 0.0) + term
    p: dict[Cells, float] = {}
    for a in v:
        prod = 1.0
        cells = 1.0
        for i in a:
            prod *= (dom[i] - 1) / dom[i]
            cells *= dom[i] - 1
        v[a] *= cells
        p[a] = prod if cost_model == "gaussian" else 1.0
    total = math.fsum(math.sqrt(p[a] * v[a]) for a in v)
    scale_t = total / (2 * float(r))
    sigma2 = {a: scale_t * math.sqrt(p[a] / v[a]) for a in v}
    info: dict[str, Any] = {}
    if cost_model == "lattice":
        # exact rationals, rounded up so the exact cost never exceeds ρ
        exact = {a: Fraction(s) * (1 + Fraction(1, 10**12)) for a, s in sigma2.items()}
        info["sigma2_exact"] = exact
    plan = ResidualPlan(dom, sets, w, r, cost_model, sigma2, v, p, info)
    # a check, not an assert: it must survive python -O
    if cost_model == "lattice" and not plan.loss().rho <= r:
        raise PrivacyCheckError(
            f"internal check failed: the plan's exact cost {plan.loss()} exceeds the budget "
            f"ρ = {r}; nothing was measured. Please report this."
        )
    return plan
