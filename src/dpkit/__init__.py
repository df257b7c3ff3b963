"""dpkit: differential privacy with exact books.

>>> import dpkit as dp
>>> m = dp.make_laplace(sensitivity=1, epsilon=0.5)
>>> m.loss
PureDP(epsilon=Fraction(1, 2))
"""

import importlib
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpkit.errors import (
    BudgetExceededError,
    DomainMismatchError,
    DPError,
    InternalError,
    InvalidDataError,
    InvalidParameterError,
    PrivacyCheckError,
    UnreadableDataError,
    UnsupportedQueryError,
)

__version__ = "0.1.0"

# Every layer loads on first use (PEP 562): the analytics and ledger layers pull in pandas,
# DuckDB, pyarrow and sqlglot, and even the mechanisms pull in numpy and scipy, so that
# `import dpkit` (and `dpkit --help`, `dpkit --version`) stays fast.
_LAZY = {
    "ZCDP": "dpkit.core",
    "AbsoluteDistance": "dpkit.core",
    "ApproxDP": "dpkit.core",
    "AtomDomain": "dpkit.core",
    "ChangeOneDistance": "dpkit.core",
    "L1Distance": "dpkit.core",
    "L2Distance": "dpkit.core",
    "Measurement": "dpkit.core",
    "PrivacyLoss": "dpkit.core",
    "PureDP": "dpkit.core",
    "Release": "dpkit.core",
    "SymmetricDistance": "dpkit.core",
    "Transformation": "dpkit.core",
    "VectorDomain": "dpkit.core",
    "compose": "dpkit.core",
    "make_chain": "dpkit.core",
    "make_parallel_composition": "dpkit.core",
    "make_postprocess": "dpkit.core",
    "make_sequential_composition": "dpkit.core",
    "parallel": "dpkit.core",
    "check_ladder_privacy": "dpkit.mechanisms",
    "estimate_frequencies": "dpkit.mechanisms",
    "estimate_proportion": "dpkit.mechanisms",
    "make_discrete_gaussian": "dpkit.mechanisms",
    "make_discrete_ladder": "dpkit.mechanisms",
    "make_exponential": "dpkit.mechanisms",
    "make_gaussian": "dpkit.mechanisms",
    "make_generalized_randomized_response": "dpkit.mechanisms",
    "make_geometric": "dpkit.mechanisms",
    "make_ladder": "dpkit.mechanisms",
    "make_ladder_vector": "dpkit.mechanisms",
    "make_laplace": "dpkit.mechanisms",
    "make_permute_and_flip": "dpkit.mechanisms",
    "make_randomized_response": "dpkit.mechanisms",
    "make_randomized_response_epsilon": "dpkit.mechanisms",
    "make_report_noisy_max": "dpkit.mechanisms",
    "make_staircase": "dpkit.mechanisms",
    "make_sum_in_intervals": "dpkit.mechanisms",
    "Accountant": "dpkit.accounting",
    "Bounding": "dpkit.analytics",
    "KeySet": "dpkit.analytics",
    "Query": "dpkit.analytics",
    "Session": "dpkit.analytics",
    "col": "dpkit.analytics",
    "lit": "dpkit.analytics",
    "Ledger": "dpkit.ledger",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpkit' has no attribute {name!r}")


if TYPE_CHECKING:
    from dpkit.accounting import Accountant
    from dpkit.analytics import Bounding, KeySet, Query, Session, col, lit
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
        Release,
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
    from dpkit.ledger import Ledger
    from dpkit.mechanisms import (
        check_ladder_privacy,
        estimate_frequencies,
        estimate_proportion,
        make_discrete_gaussian,
        make_discrete_ladder,
        make_exponential,
        make_gaussian,
        make_generalized_randomized_response,
        make_geometric,
        make_ladder,
        make_ladder_vector,
        make_laplace,
        make_permute_and_flip,
        make_randomized_response,
        make_randomized_response_epsilon,
        make_report_noisy_max,
        make_staircase,
        make_sum_in_intervals,
    )

__all__ = [
    "ZCDP",
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
]
