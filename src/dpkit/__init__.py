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
    make_discrete_gaussian,
    make_gaussian,
    make_geometric,
    make_laplace,
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
    "make_chain",
    "make_discrete_gaussian",
    "make_gaussian",
    "make_geometric",
    "make_laplace",
    "make_parallel_composition",
    "make_postprocess",
    "make_sequential_composition",
    "parallel",
]
