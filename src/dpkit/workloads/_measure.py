"""Measuring y = A·x + noise with exact dpkit noise, and reconstructing W·A⁺·y with variances.

Privacy (the claim, and why it holds exactly):

1. The strategy is *quantised* before anything else: B = round(A·2^k) (integers, |B| < 2^bits)
   and A_q = B·2^-k is the strategy actually used (analytics and reconstruction use A_q, so the
   error formulas are those of the released mechanism). For integer x, B·x is an exact integer:
   no output rounding, hence no rounding term in the privacy map.
2. Neighbouring histograms differ by Δx with ‖Δx‖₁ <= c (c = contributions of one privacy unit,
   each record in one cell). B·Δx = Σ_j Δx_j·b_j, so ‖BΔx‖ <= c·max_j ‖b_j‖ (triangle
   inequality), the largest column norm of B, computed exactly in integers.
3. Gaussian (``norm="l2"``): y_int = B·x + Z, Z iid discrete Gaussian N_Z(0, σ²) per row. For an
   integer shift vector v, D_α(N_Z(0,σ²)^m ‖ N_Z(v,σ²)^m) <= α‖v‖²/(2σ²) (Canonne, Kamath &
   Steinke 2020, Thm. 14, per coordinate, summed), so the release is ρ-zCDP with
   ρ = c²·max_j‖b_j‖₂²/(2σ²), a Fraction. (ε, δ) goes through zCDP (``ZCDP.to_approx``).
4. Laplace (``norm="l1"``): Z iid discrete Laplace with scale t; ln p(o-a)/p(o-b) <= ‖a-b‖₁/t, so
   ε = c·max_j‖b_j‖₁/t exactly (Ghosh, Roughgarden & Sundararajan 2009).
5. The histogram is clamped to [0, cap] per cell first, cap = ⌊(2^52-1)/max row ‖b_i‖₁⌋ (public:
   from B). Clamping is 1-Lipschitz per cell, so neighbours stay within ‖Δx‖₁ <= c, and |B·x|
   stays below 2^52: float64 holds it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.optimize import lsq_linear
from scipy.sparse.linalg import lsmr

from dpkit._exact import Number, check_delta, check_epsilon, check_rho
from dpkit.core._framework import Measurement, MechanismInfo
from dpkit.core._losses import ZCDP, PrivacyLoss, PureDP
from dpkit.core._release import Release
from dpkit.core._spaces import AtomDomain, L1Distance, VectorDomain
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._additive import integer_input
from dpkit.noise._distributions import DiscreteGaussian, DiscreteLaplace, LatticeNoise
from dpkit.workloads._ops import (
    DEFAULT_MAX_BYTES,
    Workload,
    check_dense_memory,
    query_variances,
)
from dpkit.workloads._strategies import (
    AnyStrategy,
    KronStrategy,
    _check_norm,
    kron_matrix,
)

__all__ = ["QuantisedStrategy", "WorkloadRelease", "make_strategy_measurement", "quantise"]

_MAX_EXACT = 2**52 - 1


@dataclass(eq=False)
class QuantisedStrategy:
    """B = round(A·2^k) as an int64 CSR matrix; the strategy used is A_q = B·2^-k."""

    integer_matrix: sp.csr_matrix
    exponent: int  # k
    name: str
    col_l1: int  # max_j ‖b_j‖₁ (exact)
    col_l2_sq: int  # max_j ‖b_j‖₂² (exact)
    cap: int  # per-cell clamp of the histogram

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.integer_matrix.shape[0]), int(self.integer_matrix.shape[1]))

    def matrix(self) -> sp.csr_matrix:
        """A_q as float64 (exact: |B| < 2^bits)."""
        return sp.csr_matrix(
            self.integer_matrix.astype(np.float64) * math.ldexp(1.0, -self.exponent)
        )


def quantise(
    strategy: AnyStrategy, bits: int = 16, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> QuantisedStrategy:
    """Round the strategy to integers with ``bits`` bits of resolution (see the module doc).

    A dense strategy (the eigen-design) is quantised only when its n×n matrix fits
    ``max_bytes``; above, InvalidParameterError (public: depends on n only)."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 24:
        raise InvalidParameterError("bits", bits, "an integer in [2, 24]")
    a = kron_matrix(strategy, max_bytes).tocsr()
    if not np.all(np.isfinite(a.data)):
        raise InvalidParameterError("strategy", strategy.name, "finite entries")
    top = float(np.max(np.abs(a.data))) if a.nnz else 0.0
    if top == 0.0:
        raise InvalidParameterError("strategy", strategy.name, "a non-zero matrix")
    exponent = bits - 1 - math.floor(math.log2(top))
    scaled = np.ldexp(a.data, exponent)
    # exact on a coarser grid implies exact on this one: one pass rules out real-valued strategies
    dyadic = bool(np.all(scaled == np.rint(scaled)))
    for smaller in range(min(0, exponent), exponent if dyadic else min(0, exponent)):
        # dyadic entries (0/±1 trees, Haar): the coarsest exact grid
        if np.all(np.ldexp(a.data, smaller) == np.rint(np.ldexp(a.data, smaller))):
            exponent = smaller  # the coarsest exact grid: same A, smaller integers
            break
    b = sp.csr_matrix(a, copy=True)
    b.data = np.rint(np.ldexp(b.data, exponent))
    b = sp.csr_matrix(b.astype(np.int64))
    b.eliminate_zeros()
    absb = abs(b)
    col_l1 = int(np.max(np.asarray(absb.sum(axis=0))))
    col_l2_sq = int(np.max(np.asarray(absb.multiply(absb).sum(axis=0))))
    row_l1 = int(np.max(np.asarray(absb.sum(axis=1))))
    if col_l1 == 0:
        raise InvalidParameterError("strategy", strategy.name, "non-zero after quantisation")
    cap = max(1, _MAX_EXACT // max(1, row_l1))
    return QuantisedStrategy(b, exponent, strategy.name, col_l1, col_l2_sq, cap)


@dataclass(frozen=True, slots=True, kw_only=True)
class MatrixMechanismInfo(MechanismInfo):
    """What :func:`make_strategy_measurement` states about its release (``measurement.info``)."""

    quantised: QuantisedStrategy
    """The strategy B on the integer grid: ``y_int = B·x + Z`` (maps the output back)."""
    lattice: LatticeNoise
    """The noise Z added to each row (discrete Laplace or discrete Gaussian, in grid steps)."""
    norm: Literal["l1", "l2"]
    """The sensitivity norm: ``"l1"`` (pure ε) or ``"l2"`` (zCDP)."""


def matrix_info(measurement: Measurement[Any]) -> MatrixMechanismInfo:
    """The :class:`MatrixMechanismInfo` of a strategy measurement; a clear error for any other."""
    info = measurement.info
    if not isinstance(info, MatrixMechanismInfo):
        raise InvalidParameterError(
            "measurement", measurement.name, "a measurement built by make_strategy_measurement"
        )
    return info


@dataclass(frozen=True, eq=False, init=False, kw_only=True)
class WorkloadRelease(Release[np.ndarray]):
    """Noisy answers to a workload, each with its variance (from the strategy, not the data): the
    :class:`dpkit.Release` of the matrix mechanism.

    ``answers`` (the ``value``) are W·x̂ with x̂ = A_q⁺·y (unbiased); ``variances[i]`` (the
    ``accuracy``) is Var(answers[i]). After :meth:`nonnegative` the answers are consistent and
    non-negative but biased: they carry ``variances=None`` and ``raw_answers`` keeps the unbiased
    ones. Nothing is charged here (``receipt`` is None): a Session's workload is charged by the
    Session and released as a :class:`~dpkit.analytics.TableRelease`.
    """

    accuracy: np.ndarray | None
    x_hat: np.ndarray
    strategy: str
    noise_variance: float
    measurements: np.ndarray
    raw_answers: np.ndarray | None
    info: dict[str, Any]

    def __init__(
        self,
        answers: np.ndarray,
        variances: np.ndarray | None,
        x_hat: np.ndarray,
        strategy: str,
        loss: PrivacyLoss,
        noise_variance: float,
        measurements: np.ndarray,
        raw_answers: np.ndarray | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        fields: dict[str, Any] = {"value": answers, "loss": loss, "accuracy": variances}
        fields |= {"receipt": None, "remaining": None, "x_hat": x_hat, "strategy": strategy}
        fields |= {"noise_variance": noise_variance, "measurements": measurements}
        fields |= {"raw_answers": raw_answers, "info": {} if info is None else info}
        for name, value in fields.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    @property
    def answers(self) -> np.ndarray:
        """W·x̂, one per query of the workload (the release's ``value``)."""
        return self.value

    @property
    def variances(self) -> np.ndarray | None:
        """Var(answers[i]) per answer (the release's ``accuracy``); None when biased or unknown."""
        return self.accuracy

    @property
    def total_variance(self) -> float | None:
        return None if self.variances is None else float(np.sum(self.variances))


def _calibrate(
    q: QuantisedStrategy,
    norm: str,
    contributions: int,
    epsilon: Number | None,
    delta: Number | None,
    rho: Number | None,
) -> tuple[LatticeNoise, str, Fraction | None, Fraction | None]:
    """The lattice noise (in units of 2^-k) and the measure; returns (noise, measure, ε, δ)."""
    c = contributions
    if norm == "l1":
        if rho is not None or delta is not None:
            raise InvalidParameterError(
                "norm", norm, "'l2' when rho or delta is given (Laplace is pure ε-DP)"
            )
        if epsilon is None:
            raise InvalidParameterError("epsilon", epsilon, "given for norm='l1'")
        eps = check_epsilon(epsilon)
        return DiscreteLaplace(Fraction(c * q.col_l1) / eps), "pure", eps, None
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise InvalidParameterError("rho", rho, "given alone, without epsilon and delta")
        r = check_rho(rho)
        return DiscreteGaussian(Fraction(c * c * q.col_l2_sq) / (2 * r)), "zcdp", None, None
    if epsilon is None or delta is None:
        raise InvalidParameterError(
            "delta", delta, "given with epsilon (or pass rho= for zCDP, or norm='l1')"
        )
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta, allow_zero=False)
    low, high = 0.0, float(eps)
    for _ in range(60):  # the largest ρ whose certified conversion stays within ε
        mid = (low + high) / 2
        if ZCDP(Fraction(mid)).to_approx(dlt).epsilon <= eps:
            low = mid
        else:
            high = mid
    r = Fraction(low) * Fraction(999999, 10**6)  # margin: the checks recompute ρ in floats
    if r <= 0:
        raise InvalidParameterError("epsilon", epsilon, "large enough for the given delta")
    return DiscreteGaussian(Fraction(c * c * q.col_l2_sq) / (2 * r)), "approx", eps, dlt


def make_strategy_measurement(
    strategy: AnyStrategy,
    *,
    norm: Literal["l1", "l2"] = "l2",
    epsilon: Number | None = None,
    delta: Number | None = None,
    rho: Number | None = None,
    contributions: int = 1,
    bits: int = 16,
    declared_sensitivity: Number | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Measurement[Any]:
    """The measurement x ↦ B·x + Z (in units of 2^-k): the matrix mechanism's only private step.

    Input: an integer histogram (length n); neighbouring histograms are at L1 distance <=
    ``contributions``. Output: the int64 vector y_int (``info.quantised`` maps it back).

    ``declared_sensitivity`` (testing only) replaces the computed max column norm of B (in
    integer units; squared for L2) in the calibration, so that tests can show the checks catch a
    strategy whose declared sensitivity is too small. The privacy *map* is always computed from
    B: a too-small declaration makes the map report the true, larger loss, and the claimed loss
    (the one the noise was calibrated for) is what the checks compare against.

    ``max_bytes`` bounds the dense matrix of a strategy without a sparse form (the column-
    normalised eigen-design): above it the measurement is refused before any data is read.
    """
    norm = _check_norm(norm)
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise InvalidParameterError("contributions", contributions, "an integer >= 1")
    q = quantise(strategy, bits, max_bytes=max_bytes)
    declared = q
    if declared_sensitivity is not None:
        value = int(declared_sensitivity)
        declared = QuantisedStrategy(q.integer_matrix, q.exponent, q.name, value, value, q.cap)
    lattice, measure, _eps, dlt = _calibrate(declared, norm, contributions, epsilon, delta, rho)

    def loss_at(d_in: Fraction, source: QuantisedStrategy) -> PrivacyLoss:
        if norm == "l1":
            assert isinstance(lattice, DiscreteLaplace)
            return PureDP(d_in * source.col_l1 / lattice.scale)
        assert isinstance(lattice, DiscreteGaussian)
        zcdp = ZCDP(d_in * d_in * source.col_l2_sq / (2 * lattice.sigma2))
        if measure == "approx":
            assert dlt is not None
            return zcdp.to_approx(dlt)
        return zcdp

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return loss_at(Fraction(d_in), declared)

    n = q.shape[1]
    b = q.integer_matrix

    def function(data: Any) -> np.ndarray:
        x = np.clip(integer_input(data, "histogram").reshape(-1), 0, q.cap)
        if x.size != n:  # the histogram's length is fixed by the declared domain
            raise InvalidDataError("histogram", f"length {x.size}, expected {n} cells")
        exact = np.asarray(b @ x, dtype=np.int64)
        return exact + lattice.sample(exact.size)

    return Measurement(
        input_domain=VectorDomain(AtomDomain("int")),
        input_metric=L1Distance(),
        output_measure=measure,  # type: ignore[arg-type]
        function=function,
        privacy_map=privacy_map,
        name=f"matrix_mechanism[{q.name}]",
        noise=None,
        d_in=Fraction(contributions),
        info=MatrixMechanismInfo(
            quantised=q, lattice=lattice, norm=norm, changed_coordinates=q.shape[0]
        ),
    )


# -------------------------------------------------------------------------- reconstruction
def _factor_pinv(mat: sp.csr_matrix) -> np.ndarray:
    dense = mat.toarray()
    return np.asarray(np.linalg.pinv(dense))


def _explicit_inverse_gram(a: sp.csr_matrix, max_bytes: int) -> np.ndarray:
    n = int(a.shape[1])
    check_dense_memory("(AᵀA)⁻¹ for the variances", n, n, max_bytes // 3)
    if a.nnz > 0.05 * a.shape[0] * n and 8 * a.shape[0] * n <= max_bytes // 3:
        dense = a.toarray()  # a dense strategy (the eigen-design): BLAS, not sparse×sparse
        ata = dense.T @ dense
    else:
        ata = (a.T @ a).toarray()
    return np.asarray(sla.cho_solve(sla.cho_factor(ata, lower=True), np.eye(n)))


def reconstruct(
    workload: Workload,
    strategy: AnyStrategy,
    measurement: Measurement[Any],
    y_int: np.ndarray,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> WorkloadRelease:
    """x̂ = A_q⁺·y by least squares (Cholesky for small n, Kronecker pinv per factor, else lsmr);
    answers W·x̂ with per-query variances v·diag(W (A_qᵀA_q)⁻¹ Wᵀ), v the exact noise variance."""
    info = matrix_info(measurement)
    q, lattice = info.quantised, info.lattice
    scale = math.ldexp(1.0, -q.exponent)
    y = np.asarray(y_int, dtype=np.float64) * scale
    noise_var = lattice.variance() * scale * scale
    n = q.shape[1]
    if workload.shape[1] != n:
        raise InvalidParameterError(
            "workload", f"{workload.name} over {workload.shape[1]} cells", f"{n} cells"
        )
    variances: np.ndarray | None
    if isinstance(strategy, KronStrategy):
        # quantising ⊗Aᵢ as a whole equals ⊗ of the quantised product; use the exact A_q
        a = q.matrix()
        if n * n * 8 * 3 <= max_bytes:
            cov = _explicit_inverse_gram(a, max_bytes)
            x_hat = cov @ (a.T @ y)
            variances = noise_var * query_variances(workload, cov)
        else:
            x_hat = np.asarray(lsmr(a, y, atol=1e-12, btol=1e-12, maxiter=10 * n)[0])
            variances = None
    else:
        a = q.matrix()
        if n * n * 8 * 3 <= max_bytes:
            cov = _explicit_inverse_gram(a, max_bytes)
            x_hat = cov @ (a.T @ y)
            variances = noise_var * query_variances(workload, cov)
        else:
            x_hat = np.asarray(lsmr(a, y, atol=1e-12, btol=1e-12, maxiter=10 * n)[0])
            variances = None
    answers = workload.matmat(x_hat)
    return WorkloadRelease(
        answers=answers,
        variances=variances,
        x_hat=x_hat,
        strategy=q.name,
        loss=measurement.map(),
        noise_variance=noise_var,
        measurements=y,
    )


def nonnegative(
    release: WorkloadRelease, workload: Workload, measurement: Measurement[Any]
) -> WorkloadRelease:
    """Consistent non-negative answers: x̃ = argmin_{x >= 0} ‖A_q x - y‖₂ (post-processing, so no
    extra privacy cost), answers W·x̃. Biased: ``variances`` becomes None; ``raw_answers`` keeps
    the unbiased least-squares answers."""
    q = matrix_info(measurement).quantised
    a: Any = q.matrix()
    if a.shape[0] * a.shape[1] <= 4_000_000:
        a = a.toarray()  # small: the dense trust-region solver is fast and exact
    fit = lsq_linear(a, release.measurements, bounds=(0.0, np.inf))
    x_tilde = np.clip(np.asarray(fit.x), 0.0, None)
    return WorkloadRelease(
        answers=workload.matmat(x_tilde),
        variances=None,
        x_hat=x_tilde,
        strategy=release.strategy,
        loss=release.loss,
        noise_variance=release.noise_variance,
        measurements=release.measurements,
        raw_answers=release.answers,
        info={"postprocessed": "non-negative least squares (biased; raw_answers unbiased)"},
    )
