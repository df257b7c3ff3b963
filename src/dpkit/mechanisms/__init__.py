"""Mechanisms: ``make_*`` constructors returning :class:`~dpkit.core._framework.Measurement`."""

from dpkit.mechanisms._exponential import (
    exponential_utility_bound,
    make_exponential,
    make_permute_and_flip,
    make_report_noisy_max,
)
from dpkit.mechanisms._gaussian import make_discrete_gaussian, make_gaussian
from dpkit.mechanisms._info import (
    AdditiveInfo,
    LadderInfo,
    LadderVectorInfo,
    RandomizedResponseInfo,
    SelectionInfo,
    StaircaseInfo,
    SumInIntervalsInfo,
)
from dpkit.mechanisms._ladder_mechanism import (
    check_ladder_privacy,
    make_discrete_ladder,
    make_ladder,
    make_ladder_vector,
    make_sum_in_intervals,
)
from dpkit.mechanisms._laplace import make_geometric, make_laplace
from dpkit.mechanisms._randomized_response import (
    CategoryFrequencies,
    Estimate,
    estimate_frequencies,
    estimate_proportion,
    frequency_variance,
    make_generalized_randomized_response,
    make_randomized_response,
    make_randomized_response_epsilon,
    proportion_variance,
)
from dpkit.mechanisms._staircase import (
    DiscreteStaircase,
    make_staircase,
    staircase_expected_abs,
    staircase_optimal_gamma,
    staircase_variance,
)

__all__ = [
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
]
