"""dpkit.workloads: the matrix mechanism at scale (docs/workloads.md).

* workloads as implicit operators: :class:`Identity`, :class:`Total`, :class:`Prefix`,
  :class:`AllRange`, :class:`WidthRange`, :class:`Explicit`, :class:`Kron`, :class:`VStack`,
  :class:`Marginals`;
* strategies: :func:`identity`, :func:`hierarchical`, :func:`wavelet`, HDMM's OPT_0
  (:func:`optimize_p_identity`) and OPT_⊗ (:func:`optimize_kron`), the column-normalised
  eigen-design (:func:`eigen_design`, Li & Miklau 2012); :func:`expected_error`,
  :func:`svd_bound`, :func:`choose_strategy` (with ``explain()``);
* ResidualPlanner for marginals: :func:`plan_residuals`; HDMM's OPT_M marginals optimiser
  (:func:`optimize_marginals`, exact release and :func:`verify_marginals_exact`);
* measurement with exact noise and reconstruction: :func:`make_strategy_measurement`,
  :func:`reconstruct`, :func:`nonnegative`, :func:`verify_exact`;
* the data vector from one engine GROUP BY: :func:`histogram_from_duckdb`,
  :func:`marginal_tables`.
"""

from dpkit.workloads._eigen import EigenDesign, eigen_design
from dpkit.workloads._marginals_opt import MarginalsStrategy, optimize_marginals
from dpkit.workloads._measure import (
    MatrixMechanismInfo,
    QuantisedStrategy,
    WorkloadRelease,
    make_strategy_measurement,
    nonnegative,
    quantise,
    reconstruct,
)
from dpkit.workloads._ops import (
    AllRange,
    Explicit,
    Identity,
    Kron,
    Marginals,
    Prefix,
    Total,
    VStack,
    WidthRange,
    Workload,
    query_variances,
)
from dpkit.workloads._residual import MarginalRelease, ResidualPlan, plan_residuals
from dpkit.workloads._select import Choice, choose_strategy
from dpkit.workloads._strategies import (
    KronStrategy,
    Strategy,
    expected_error,
    hierarchical,
    identity,
    optimize_kron,
    optimize_p_identity,
    optimize_tree_weights,
    p_identity,
    svd_bound,
    wavelet,
)
from dpkit.workloads._table import histogram_from_duckdb, marginal_tables
from dpkit.workloads._verify import verify_exact, verify_marginals_exact

__all__ = [
    "AllRange",
    "Choice",
    "EigenDesign",
    "Explicit",
    "Identity",
    "Kron",
    "KronStrategy",
    "MarginalRelease",
    "Marginals",
    "MarginalsStrategy",
    "MatrixMechanismInfo",
    "Prefix",
    "QuantisedStrategy",
    "ResidualPlan",
    "Strategy",
    "Total",
    "VStack",
    "WidthRange",
    "Workload",
    "WorkloadRelease",
    "choose_strategy",
    "eigen_design",
    "expected_error",
    "hierarchical",
    "histogram_from_duckdb",
    "identity",
    "make_strategy_measurement",
    "marginal_tables",
    "nonnegative",
    "optimize_kron",
    "optimize_marginals",
    "optimize_p_identity",
    "optimize_tree_weights",
    "p_identity",
    "plan_residuals",
    "quantise",
    "query_variances",
    "reconstruct",
    "svd_bound",
    "verify_exact",
    "verify_marginals_exact",
    "wavelet",
]
