"""Strategy selection: evaluate the candidates' analytic errors and keep the best (``explain``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dpkit.errors import InvalidParameterError
from dpkit.workloads._ops import DEFAULT_MAX_BYTES, Kron, Workload
from dpkit.workloads._strategies import (
    AnyStrategy,
    Norm,
    _check_norm,
    expected_error,
    hierarchical,
    identity,
    optimize_kron,
    optimize_p_identity,
    svd_bound,
    wavelet,
)

__all__ = ["Choice", "choose_strategy"]


@dataclass(eq=False)
class Choice:
    """The chosen strategy, every candidate's expected error (unit noise), and the SVD bound."""

    strategy: AnyStrategy
    errors: dict[str, float]
    bound: float | None
    norm: str
    notes: list[str] = field(default_factory=list)

    def explain(self) -> str:
        lines = [
            f"workload strategies under {self.norm} (expected total squared error, unit noise):"
        ]
        for name, err in sorted(self.errors.items(), key=lambda kv: kv[1]):
            mark = "*" if name == self.strategy.name else " "
            ratio = f"  {err / self.bound:.3f}× SVD bound" if self.bound else ""
            lines.append(f" {mark} {name:<40} {err:>14.6g}{ratio}")
        if self.bound is not None:
            lines.append(f"   SVD lower bound (Li & Miklau 2012)       {self.bound:>14.6g}")
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
) -> Choice:
    """Evaluate identity, hierarchical (b = 2, 4, 16), wavelet and OPT_0 (OPT_⊗ for a Kronecker
    workload) by their analytic expected error and return the best.

    Refuses (InvalidParameterError, before any data) when the dense n×n work of the explicit
    candidates would exceed ``max_bytes``.
    """
    norm = _check_norm(norm)
    notes: list[str] = []
    candidates: list[AnyStrategy] = []
    if isinstance(workload, Kron):
        if optimise:
            candidates.append(optimize_kron(workload, norm, max_seconds=max_seconds))
    else:
        n = workload.shape[1]
        if 8 * n * n * 3 > max_bytes:
            raise InvalidParameterError(
                "workload",
                workload.name,
                f"at most {int((max_bytes / 24) ** 0.5):,} cells for explicit strategies "
                f"(max_bytes={max_bytes:,})",
                "Express it as a Kronecker product or marginals, or raise max_bytes.",
            )
        candidates += [identity(n), wavelet(n)]
        candidates += [hierarchical(n, b) for b in (2, 4, 16) if b < max(n, 3)]
        if optimise:
            candidates.append(
                optimize_p_identity(workload, norm, p, max_seconds=max_seconds, max_bytes=max_bytes)
            )
    if not candidates:
        raise InvalidParameterError("optimise", optimise, "True for Kronecker workloads")
    errors = {s.name: expected_error(workload, s, norm, max_bytes=max_bytes) for s in candidates}
    best = min(candidates, key=lambda s: errors[s.name])
    try:
        bound: float | None = svd_bound(workload, max_bytes=max_bytes)
    except InvalidParameterError:
        bound = None
        notes.append("SVD bound skipped: WᵀW too large to decompose")
    if norm == "l1" and bound is not None:
        notes.append("under L1 the SVD bound is loose (Δ₁ >= Δ₂)")
    return Choice(best, errors, bound, norm, notes)
