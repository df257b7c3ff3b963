"""dpkit: differential privacy with exact books.

>>> import dpkit as dp
>>> m = dp.make_laplace(sensitivity=1, epsilon=0.5)
>>> m.loss
PureDP(epsilon=Fraction(1, 2))
"""

from fractions import Fraction

from dpkit.core import (
    ZCDP,
    AbsoluteDistance,
    ApproxDP,
    AtomDomain,
    ChangeOneDistance,
    L1Distance,
    L2Distance,
    Measurement,
    PrivacyLoss,
    PureDP,
    SymmetricDistance,
    Transformation,
    VectorDomain,
    compose,
    make_chain,
    make_parallel_composition,
    make_postprocess,
    make_sequential_composition,
    parallel,
)
from dpkit.errors import (
    BudgetExceededError,
    DomainMismatchError,
    DPError,
    InvalidDataError,
    InvalidParameterError,
    PrivacyCheckError,
    UnsupportedQueryError,
)
from dpkit.mechanisms import (
    estimate_frequencies,
    estimate_proportion,
    make_discrete_gaussian,
    make_exponential,
    make_gaussian,
    make_generalized_randomized_response,
    make_geometric,
    make_laplace,
    make_permute_and_flip,
    make_randomized_response,
    make_randomized_response_epsilon,
    make_report_noisy_max,
    make_staircase,
)

__version__ = "0.1.0"

__all__ = [
    "ZCDP",
    "AbsoluteDistance",
    "ApproxDP",
    "AtomDomain",
    "BudgetExceededError",
    "ChangeOneDistance",
    "DPError",
    "DomainMismatchError",
    "Fraction",
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
    "UnsupportedQueryError",
    "VectorDomain",
    "__version__",
    "compose",
    "estimate_frequencies",
    "estimate_proportion",
    "make_chain",
    "make_discrete_gaussian",
    "make_exponential",
    "make_gaussian",
    "make_generalized_randomized_response",
    "make_geometric",
    "make_laplace",
    "make_parallel_composition",
    "make_permute_and_flip",
    "make_postprocess",
    "make_randomized_response",
    "make_randomized_response_epsilon",
    "make_report_noisy_max",
    "make_sequential_composition",
    "make_staircase",
    "parallel",
]
