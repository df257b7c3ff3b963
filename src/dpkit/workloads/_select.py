"""Strategy selection: evaluate the candidates' analytic errors and keep the best (``explain``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpkit.errors import InvalidParameterError
from dpkit.workloads._eigen import EigenDesign, closed_form_spectrum, eigen_design, tree_unit_error
from dpkit.workloads._marginals_opt import optimize_marginals
from dpkit.workloads._ops import DEFAULT_MAX_BYTES, Kron, Marginals, Workload
from dpkit.workloads._residual import plan_residuals
from dpkit.workloads._strategies import (
    AnyStrategy,
    Norm,
    _check_norm,
    expected_error,
    hierarchical,
    identity,
    optimize_kron,
    optimize_p_identity,
    optimize_tree_weights,
    svd_bound,
    wavelet,
)

__all__ = ["Choice", "choose_strategy"]


@dataclass(eq=False)
class Choice:
    """The chosen strategy, every candidate's expected error (unit noise), and the lower bound
    (the SVD bound; for marginals under L2, ResidualPlanner's optimum over Gaussian mechanisms)."""

    strategy: Any  # Strategy | KronStrategy | MarginalsStrategy | ResidualPlan
    errors: dict[str, float]
    bound: float | None
    norm: str
    notes: list[str] = field(default_factory=list)
    bound_name: str = "SVD lower bound (Li & Miklau 2012)"
    chosen: str = ""

    def __post_init__(self) -> None:
        if not self.chosen:
            self.chosen = str(getattr(self.strategy, "name", ""))

    def explain(self) -> str:
        lines = [
            f"workload strategies under {self.norm} (expected total squared error, unit noise):"
        ]
        width = max([40, *(len(name) for name in self.errors)])
        for name, err in sorted(self.errors.items(), key=lambda kv: kv[1]):
            mark = "*" if name == self.chosen else " "
            ratio = f"  {err / self.bound:.3f}× bound" if self.bound else ""
            lines.append(f" {mark} {name:<{width}} {err:>14.6g}{ratio}")
        if self.bound is not None:
            lines.append(f"   {self.bound_name:<{width}} {self.bound:>14.6g}")
        lines.extend(f"   note: {n}" for n in self.notes)
        return "\n".join(lines)


def choose_strategy(
    workload: Workload,
    norm: Norm = "l2",
    *,
    optimise: bool = True,
    p: int | None = None,
    max_seconds: float = 8.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_eigh_n: int | None = None,
) -> Choice:
    """Evaluate identity, hierarchical (b = 2, 4, 16; with optimised level weights where the
    closed form applies), wavelet, OPT_0 and, under L2, the
    column-normalised eigen-design (OPT_⊗ for a Kronecker workload) by their analytic expected
    error and return the best.

    Prefix and AllRange work at any n: identity, the trees and Haar (on n = b^L cells) and the
    eigen-design have closed-form errors, OPT_0 needs O(p²n). Other workloads refuse
    (InvalidParameterError, before any data) when the dense n×n work of the explicit candidates
    would exceed ``max_bytes``; their eigen-design needs a dense ``eigh`` and an O(n³) error
    (n <= ``max_eigh_n``; by default scaled to ``max_seconds``: about 2 s at n = 1024 on one
    core, so 1024·(max_seconds/2)^{1/3}, i.e. 812 for the Session's 1 s, 1625 for 8 s).
    The chosen strategy may be one whose exact release does not fit ``max_bytes`` (the
    eigen-design at large n): ``notes`` then names the best releasable candidate.
    """
    norm = _check_norm(norm)
    if isinstance(workload, Marginals):
        return _choose_marginals(workload, norm, max_seconds)
    notes: list[str] = []
    candidates: list[AnyStrategy] = []
    if isinstance(workload, Kron):
        if optimise:
            candidates.append(optimize_kron(workload, norm, max_seconds=max_seconds))
    else:
        n = workload.shape[1]
        dense_ok = 8 * n * n * 3 <= max_bytes
        closed = closed_form_spectrum(workload) is not None
        if not dense_ok and not closed:
            raise InvalidParameterError(
                "workload",
                workload.name,
                f"at most {int((max_bytes / 24) ** 0.5):,} cells for explicit strategies "
                f"(max_bytes={max_bytes:,})",
                "Express it as a Kronecker product or marginals, or raise max_bytes.",
            )
        candidates.append(identity(n))
        trees = [("wavelet", 2)] + [("hierarchical", b) for b in (2, 4, 16) if b < max(n, 3)]
        for kind, b in trees:
            if dense_ok or tree_unit_error(workload, kind, n, b) is not None:
                candidates.append(wavelet(n) if kind == "wavelet" else hierarchical(n, b))
            else:
                notes.append(
                    f"{kind} b={b} skipped: n is not a power of {b} and too large for dense"
                )
        for b in (2, 4, 16):  # closed-form level weights (n = b^L, Prefix/AllRange): milliseconds
            weighted = optimize_tree_weights(workload, norm, b) if b < max(n, 3) else None
            if weighted is not None:
                candidates.append(weighted)
        if optimise:
            candidates.append(
                optimize_p_identity(workload, norm, p, max_seconds=max_seconds, max_bytes=max_bytes)
            )
        if max_eigh_n is None:
            max_eigh_n = int(1024 * (max(max_seconds, 0.0) / 2) ** (1 / 3))
        if norm == "l2" and (closed or (dense_ok and n <= max_eigh_n)):
            candidates.append(eigen_design(workload, max_bytes=max_bytes, max_dense_n=max_eigh_n))
        elif norm == "l2":
            notes.append(f"eigen-design skipped: dense eigh above max_eigh_n={max_eigh_n:,}")
        elif norm == "l1":
            notes.append(
                "eigen-design not considered under L1: its dense columns make Δ₁²/Δ₂² grow "
                "like n/ln n (115–1,380× the bound measured at n = 256–4096)"
            )
    if not candidates:
        raise InvalidParameterError("optimise", optimise, "True for Kronecker workloads")
    errors = {s.name: expected_error(workload, s, norm, max_bytes=max_bytes) for s in candidates}
    best = min(candidates, key=lambda s: errors[s.name])
    if isinstance(best, EigenDesign) and best.release_bytes > max_bytes:
        releasable = [s for s in candidates if not isinstance(s, EigenDesign)]
        if releasable:
            alt = min(releasable, key=lambda s: errors[s.name])
            notes.append(
                f"the eigen-design's exact release needs its dense {best.n}×{best.n} matrix "
                f"(> max_bytes={max_bytes:,}), so make_strategy_measurement refuses it; the best "
                f"releasable candidate is {alt.name} ({errors[alt.name]:.6g}, "
                f"{errors[alt.name] / errors[best.name]:.3f}× the eigen-design)"
            )
    try:
        bound: float | None = svd_bound(workload, max_bytes=max_bytes)
    except InvalidParameterError:
        bound = None
        notes.append("SVD bound skipped: WᵀW too large to decompose")
    if norm == "l1" and bound is not None:
        notes.append("under L1 the SVD bound is loose (Δ₁ >= Δ₂)")
    return Choice(best, errors, bound, norm, notes)


def _choose_marginals(workload: Marginals, norm: Norm, max_seconds: float) -> Choice:
    """Marginal workloads: OPT_M (exact lattice release) against dpkit's exact ResidualPlanner
    release, at noise variance 1 per unit sensitivity (L2: ρ = 1/2; L1: Laplace b = 1)."""
    sets = workload.attribute_sets
    weights = [w * w for w in workload.weights]  # row weights w: variance weights w²
    opt = optimize_marginals(
        workload.domain, sets, weights=weights, norm=norm, max_seconds=max_seconds
    )
    v = 1.0 if norm == "l2" else 2.0
    errors = {opt.name: opt.expected_error(v)}
    notes = [f"OPT_M support: the downward closure of the workload ({len(opt.support)} sets)"]
    bound: float | None = None
    chosen: Any = opt
    if norm == "l2":
        rp = plan_residuals(workload.domain, sets, 0.5, weights=weights, cost_model="lattice")
        paper = plan_residuals(workload.domain, sets, 0.5, weights=weights, cost_model="gaussian")
        name = "ResidualPlanner (exact lattice release)"
        errors[name] = rp.expected_error()
        bound = paper.closed_form_error()
        if errors[name] < errors[opt.name]:
            chosen = rp
        notes.append(
            "bound: ResidualPlanner's optimum over Gaussian mechanisms (correlated continuous "
            "noise, not released exactly by dpkit)"
        )
        best = name if chosen is rp else opt.name
    else:
        best = opt.name
    return Choice(
        chosen,
        errors,
        bound,
        norm,
        notes,
        bound_name="ResidualPlanner optimum (Xiao et al. 2023)",
        chosen=best,
    )
