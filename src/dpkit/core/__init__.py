"""The programming framework: privacy losses, spaces, transformations and measurements."""

from dpkit.core.framework import (
    Measurement,
    MechanismInfo,
    Transformation,
    make_chain,
    make_parallel_composition,
    make_postprocess,
    make_sequential_composition,
)
from dpkit.core.losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, compose, parallel
from dpkit.core.spaces import (
    AbsoluteDistance,
    AtomDomain,
    ChangeOneDistance,
    L1Distance,
    L2Distance,
    SymmetricDistance,
    VectorDomain,
)

__all__ = [
    "ZCDP",
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
    "SymmetricDistance",
    "Transformation",
    "VectorDomain",
    "compose",
    "make_chain",
    "make_parallel_composition",
    "make_postprocess",
    "make_sequential_composition",
    "parallel",
]
