"""The public surface is deliberate: pin dpkit.__all__ (a change here must be a decision)."""

from __future__ import annotations

import dpkit as dp

EXPECTED = {
    "ZCDP",
    "AbsoluteDistance",
    "ApproxDP",
    "AtomDomain",
    "BudgetExceededError",
    "ChangeOneDistance",
    "DPError",
    "DomainMismatchError",
    "Fraction",
    "InternalError",
    "InvalidDataError",
    "InvalidParameterError",
    "L1Distance",
    "L2Distance",
    "Measurement",
    "PrivacyCheckError",
    "PrivacyLoss",
    "PureDP",
    "SymmetricDistance",
    "Transformation",
    "UnreadableDataError",
    "UnsupportedQueryError",
    "VectorDomain",
    "__version__",
    "compose",
    "make_chain",
    "make_discrete_gaussian",
    "make_gaussian",
    "make_geometric",
    "make_laplace",
    "make_parallel_composition",
    "make_postprocess",
    "make_sequential_composition",
    "parallel",
    "make_exponential",
    "make_permute_and_flip",
    "make_report_noisy_max",
    "make_randomized_response",
    "make_randomized_response_epsilon",
    "make_generalized_randomized_response",
    "estimate_proportion",
    "estimate_frequencies",
    "make_staircase",
    "Accountant",
    "Release",
    "Bounding",
    "KeySet",
    "Query",
    "Session",
    "col",
    "lit",
    "Ledger",
    "check_ladder_privacy",
    "make_discrete_ladder",
    "make_ladder",
    "make_ladder_vector",
    "make_sum_in_intervals",
}


def test_public_names_are_pinned() -> None:
    assert set(dp.__all__) == EXPECTED


def test_every_public_name_exists() -> None:
    for name in dp.__all__:
        assert hasattr(dp, name), name


def test_errors_form_one_tree() -> None:
    for error in (
        dp.InvalidParameterError,
        dp.InvalidDataError,
        dp.DomainMismatchError,
        dp.BudgetExceededError,
        dp.UnsupportedQueryError,
        dp.PrivacyCheckError,
    ):
        assert issubclass(error, dp.DPError)
    assert issubclass(dp.InvalidParameterError, ValueError)
