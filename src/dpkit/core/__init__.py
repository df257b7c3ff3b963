"""The programming framework: privacy losses, spaces, transformations and measurements."""

from dpkit.core._framework import (
    Measurement,
    MechanismInfo,
    Transformation,
    make_chain,
    make_parallel_composition,
    make_postprocess,
    make_sequential_composition,
)
from dpkit.core._losses import (
    ZCDP,
    ApproxDP,
    PrivacyLoss,
    PureDP,
    compose,
    group_privacy,
    parallel,
)
from dpkit.core._release import Release
from dpkit.core._spaces import (
    AbsoluteDistance,
    AtomDomain,
    ChangeOneDistance,
    L1Distance,
    L2Distance,
    SymmetricDistance,
    TableDomain,
    UnitDistance,
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
    "Release",
    "SymmetricDistance",
    "TableDomain",
    "Transformation",
    "UnitDistance",
    "VectorDomain",
    "compose",
    "group_privacy",
    "make_chain",
    "make_parallel_composition",
    "make_postprocess",
    "make_sequential_composition",
    "parallel",
]
