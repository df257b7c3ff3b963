"""The public surface, pinned: every public module's ``__all__`` as a literal list.

A change to the public surface (a name added, removed or renamed) must change this file; that is
the point. The rules (docs/design.md, "Public surface"):

* every name in a public module's ``__all__`` resolves;
* one import path per public name: no name is exported by two public subpackages (or modules);
  the top-level ``dpkit`` facade, which lazily re-exports the most used names (``import dpkit as
  dp; dp.make_laplace``), is the one exception, and each of its names is the very object its home
  subpackage exports;
* no new public-looking module (a ``.py`` file without a leading underscore) appears under
  ``src/dpkit`` unless it is listed here: implementation lives in ``_private`` modules and is
  exported by its package.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# which extra a module needs (skipped, not failed, when that extra is not installed)
NEEDS = {
    "dpkit.analytics": "duckdb",
    "dpkit.ml": "sklearn",
    "dpkit.service": "fastapi",
    "dpkit.client": "httpx",
    "dpkit.synth": "duckdb",
}

PINNED: dict[str, list[str]] = {
    "dpkit": [
        "AbsoluteDistance",
        "Accountant",
        "ApproxDP",
        "AtomDomain",
        "Bounding",
        "BudgetExceededError",
        "ChangeOneDistance",
        "DPError",
        "DomainMismatchError",
        "Fraction",
        "InternalError",
        "InvalidDataError",
        "InvalidParameterError",
        "KeySet",
        "L1Distance",
        "L2Distance",
        "Ledger",
        "Measurement",
        "PrivacyCheckError",
        "PrivacyLoss",
        "PureDP",
        "Query",
        "Release",
        "Session",
        "SymmetricDistance",
        "Transformation",
        "UnreadableDataError",
        "UnsupportedQueryError",
        "VectorDomain",
        "ZCDP",
        "__version__",
        "check_ladder_privacy",
        "col",
        "compose",
        "estimate_frequencies",
        "estimate_proportion",
        "lit",
        "make_chain",
        "make_discrete_gaussian",
        "make_discrete_ladder",
        "make_exponential",
        "make_gaussian",
        "make_generalized_randomized_response",
        "make_geometric",
        "make_ladder",
        "make_ladder_vector",
        "make_laplace",
        "make_parallel_composition",
        "make_permute_and_flip",
        "make_postprocess",
        "make_randomized_response",
        "make_randomized_response_epsilon",
        "make_report_noisy_max",
        "make_sequential_composition",
        "make_staircase",
        "make_sum_in_intervals",
        "parallel",
    ],
    "dpkit.accounting": [
        "Accountant",
        "AccountingResult",
        "AccuracyPlan",
        "AdvancedFilter",
        "AllocationPool",
        "BasicFilter",
        "CompositionBound",
        "GeometricSchedule",
        "OdometerReading",
        "PlannedQuery",
        "PlannedShare",
        "PrivacyFilter",
        "PrivacyOdometer",
        "ZCDPFilter",
        "accuracy_allocation",
        "advanced_composition",
        "basic_composition",
        "best_composition",
        "composed",
        "equal_split",
        "explicit_split",
        "gaussian_event",
        "gdp_epsilon",
        "gdp_mu",
        "laplace_event",
        "numerical_epsilon",
        "optimal_homogeneous_composition",
        "optimal_homogeneous_delta",
        "parallel_composition",
        "pld_epsilon",
        "poisson_subsampled",
        "postprocess",
        "pure_epsilon",
        "randomized_response_event",
        "rdp_epsilon",
        "scale_loss",
        "self_composed",
        "sequential_composition",
        "weighted_split",
        "zcdp_composition",
        "zcdp_epsilon",
    ],
    "dpkit.analytics": [
        "Accuracy",
        "Bounding",
        "BoundsEstimate",
        "CompiledQuery",
        "DuckDBEngine",
        "Engine",
        "Expr",
        "KeySet",
        "PandasEngine",
        "Query",
        "Session",
        "TableRelease",
        "Tuning",
        "TuningReport",
        "check_csv",
        "col",
        "count",
        "count_distinct_units",
        "histogram",
        "lit",
        "marginals",
        "mean",
        "median",
        "quantile",
        "ranges",
        "std",
        "sum",
        "variance",
        "when",
        "workload",
    ],
    "dpkit.client": [
        "Answer",
        "Client",
        "ServiceError",
    ],
    "dpkit.core": [
        "AbsoluteDistance",
        "ApproxDP",
        "AtomDomain",
        "ChangeOneDistance",
        "L1Distance",
        "L2Distance",
        "Measurement",
        "MechanismInfo",
        "PrivacyLoss",
        "PureDP",
        "Release",
        "SymmetricDistance",
        "TableDomain",
        "Transformation",
        "UnitDistance",
        "VectorDomain",
        "ZCDP",
        "compose",
        "group_privacy",
        "make_chain",
        "make_parallel_composition",
        "make_postprocess",
        "make_sequential_composition",
        "parallel",
    ],
    "dpkit.errors": [
        "BudgetExceededError",
        "DPError",
        "DomainMismatchError",
        "InternalError",
        "InvalidDataError",
        "InvalidParameterError",
        "PrivacyCheckError",
        "UnreadableDataError",
        "UnsupportedQueryError",
    ],
    "dpkit.ledger": [
        "AlertEvent",
        "BudgetMonitor",
        "BudgetRow",
        "BudgetStatus",
        "DEFAULT_THRESHOLDS",
        "Ledger",
        "LedgerCorruptError",
        "LedgerEntry",
        "LedgerError",
        "LedgerStore",
        "MemoryStore",
        "NewEntry",
        "Receipt",
        "ReplayReport",
        "Reservation",
        "ReservationStateError",
        "SQLiteStore",
        "Spend",
        "StoreTransaction",
        "UnknownBudgetError",
        "open_store",
    ],
    "dpkit.local": [
        "BinaryLocalHashing",
        "Campaign",
        "CountMeanSketch",
        "DuchiMean",
        "FrequencyEstimate",
        "FrequencyOracle",
        "GeneralizedRR",
        "HadamardCountMeanSketch",
        "HadamardResponse",
        "HeavyHitters",
        "HybridMean",
        "LinearHashFamily",
        "LocalHashing",
        "MeanEstimate",
        "OptimizedLocalHashing",
        "OptimizedUnaryEncoding",
        "PiecewiseMean",
        "PrefixExtension",
        "Rappor",
        "Recommendation",
        "Reports",
        "SubsetSelection",
        "SymmetricUnaryEncoding",
        "UnaryEncoding",
        "check_exact_epsilon",
        "norm_sub",
        "project_simplex",
        "recommend_oracle",
        "shuffle_amplification",
    ],
    "dpkit.mechanisms": [
        "AdditiveInfo",
        "CategoryFrequencies",
        "DiscreteStaircase",
        "Estimate",
        "LadderInfo",
        "LadderVectorInfo",
        "RandomizedResponseInfo",
        "SelectionInfo",
        "StaircaseInfo",
        "SumInIntervalsInfo",
        "check_ladder_privacy",
        "estimate_frequencies",
        "estimate_proportion",
        "exponential_utility_bound",
        "frequency_variance",
        "make_discrete_gaussian",
        "make_discrete_ladder",
        "make_exponential",
        "make_gaussian",
        "make_generalized_randomized_response",
        "make_geometric",
        "make_ladder",
        "make_ladder_vector",
        "make_laplace",
        "make_permute_and_flip",
        "make_randomized_response",
        "make_randomized_response_epsilon",
        "make_report_noisy_max",
        "make_staircase",
        "make_sum_in_intervals",
        "proportion_variance",
        "staircase_expected_abs",
        "staircase_optimal_gamma",
        "staircase_variance",
    ],
    "dpkit.ml": [
        "KMeans",
        "LinearRegression",
        "UnboundedIntervalWarning",
        "fit_kmeans",
        "fit_linear_regression",
    ],
    "dpkit.synth": [
        "Domain",
        "Synthesizer",
        "fit",
    ],
    "dpkit.noise": [
        "InsecureRandomnessWarning",
        "bernoulli",
        "bernoulli_exp",
        "bernoulli_exp_vector",
        "bernoulli_logistic",
        "bernoulli_logistic_bytes",
        "discrete_gaussian",
        "discrete_laplace",
        "generator",
        "geometric_exp",
        "insecure_deterministic_seed",
        "is_secure",
        "random_bytes",
        "random_words",
        "uniform_integers",
    ],
    "dpkit.sensitivity": [
        "PTRResult",
        "SampleAggregateInfo",
        "SensitivityInfo",
        "choose_m",
        "distance_k_sensitivity",
        "local_sensitivity",
        "make_convex_combination",
        "make_inverse_sensitivity",
        "make_propose_test_release",
        "make_sample_and_aggregate",
        "make_smooth_sensitivity",
        "smooth_sensitivity",
    ],
    "dpkit.service": [
        "Service",
        "ServiceConfig",
        "create_app",
    ],
    "dpkit.testing": [
        "AuditResult",
        "CHECKS",
        "CheckOutcome",
        "CheckResult",
        "ConformanceReport",
        "DEFAULT_ALPHAS",
        "EXTREME_FLOATS",
        "FailureCheckResult",
        "MechanismCheck",
        "OMIT",
        "add_one_unit",
        "audit_measurement",
        "audit_samples",
        "audit_samples_zcdp",
        "check_failure_behaviour",
        "check_finite_approx_dp",
        "check_finite_pure_dp",
        "check_finite_zcdp",
        "check_lattice_approx_dp",
        "check_lattice_zcdp",
        "check_measurement_exact",
        "check_mechanism",
        "check_session_failures",
        "check_tiered_pure_dp",
        "mechanism_checks",
        "parametrize_mechanism_checks",
    ],
    "dpkit.transformations": [
        "make_bounded_sum",
        "make_clamp",
        "make_count",
    ],
    "dpkit.workloads": [
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
    ],
}

# Names the facade exports that no subpackage does.
FACADE_OWN = {"Fraction", "__version__"}

# Applications, not APIs: their modules are not pinned.
APPLICATIONS = ("dpkit.cli", "dpkit.demos")

# Public modules besides the packages pinned above and the applications. Empty: every module that
# duplicated its package's exports is private (``foo.py`` -> ``_foo.py``; analytics' engines and
# planner packages are ``_engines`` and ``_planner``). Put new code in a private module and export
# its public names from its package.
OTHER_PUBLIC_MODULES: set[str] = set()


def _load(name: str) -> object:
    extra = NEEDS.get(name)
    if extra is not None and importlib.util.find_spec(extra) is None:
        pytest.skip(f"{name} needs {extra}")
    return importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_all_is_pinned(name: str) -> None:
    module = _load(name)
    exported = list(module.__all__)  # type: ignore[attr-defined]
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    assert sorted(exported) == PINNED[name], (
        f"the public surface of {name} changed: update PINNED in this test (and the docs) if "
        "that is intended"
    )


@pytest.mark.parametrize("name", sorted(PINNED))
def test_every_exported_name_resolves(name: str) -> None:
    module = _load(name)
    missing = [n for n in PINNED[name] if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


# Names two public packages export: none (keep it so).
KNOWN_DUPLICATES: dict[str, list[str]] = {}


def _public_packages() -> list[str]:
    """Every public package (an ``__init__.py`` with no private part) besides the applications,
    and the public top-level modules pinned above."""
    names = {m for m in _public_modules() if (SRC / m.replace(".", "/") / "__init__.py").is_file()}
    return sorted((names | set(PINNED)) - {"dpkit"})


def test_one_import_path_per_public_name() -> None:
    homes: dict[str, list[str]] = {}
    for name in _public_packages():
        extra = NEEDS.get(".".join(name.split(".")[:2]))
        if extra is not None and importlib.util.find_spec(extra) is None:
            continue
        for n in getattr(importlib.import_module(name), "__all__", []):
            homes.setdefault(n, []).append(name)
    twice = {n: ms for n, ms in homes.items() if len(ms) > 1}
    assert twice == KNOWN_DUPLICATES, (
        "one import path per public name: these are exported by two public packages: "
        f"{ {n: ms for n, ms in twice.items() if KNOWN_DUPLICATES.get(n) != ms} }"
    )


def test_the_facade_reexports_each_name_from_its_home() -> None:
    import dpkit

    homes = {n: m for m, names in PINNED.items() if m != "dpkit" for n in names}
    for n in PINNED["dpkit"]:
        if n in FACADE_OWN:
            continue
        assert n in homes, f"dpkit.{n} has no home subpackage that exports it"
        home = _load(homes[n])
        assert getattr(dpkit, n) is getattr(home, n), f"dpkit.{n} is not {homes[n]}.{n}"


def _public_modules() -> set[str]:
    found = set()
    for path in (SRC / "dpkit").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if any(p.startswith("_") for p in parts):
            continue
        if not any(name == app or name.startswith(app + ".") for app in APPLICATIONS):
            found.add(name)
    return found


def test_no_new_public_modules() -> None:
    new = _public_modules() - set(PINNED) - OTHER_PUBLIC_MODULES
    assert not new, (
        f"new public-looking modules {sorted(new)}: name them _private and export their public "
        "names from the package (or, if they are a new public package, pin them above)"
    )


def test_pins_name_real_modules() -> None:
    # a pinned module, or a module still to make private, that no longer exists is a stale entry:
    # remove it, so that the list of modules to make private only shrinks
    stale = (set(PINNED) | OTHER_PUBLIC_MODULES) - _public_modules()
    assert not stale, f"stale entries (no such public module): {sorted(stale)}"
