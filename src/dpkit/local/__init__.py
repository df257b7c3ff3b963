"""dpkit.local: local differential privacy — each client randomises its own value.

Frequency oracles (client randomizer + server aggregator + exact ε + analytic variance):
:class:`GeneralizedRR`, :class:`SymmetricUnaryEncoding`, :class:`OptimizedUnaryEncoding`,
:class:`OptimizedLocalHashing`, :class:`BinaryLocalHashing`, :class:`HadamardResponse`,
:class:`SubsetSelection`. See docs/local.md for the formula table and how a deployment splits
client and server.
"""

from dpkit.local._core import FrequencyEstimate, LinearHashFamily, Reports
from dpkit.local._oracles import (
    BinaryLocalHashing,
    FrequencyOracle,
    GeneralizedRR,
    HadamardResponse,
    LocalHashing,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    SubsetSelection,
    SymmetricUnaryEncoding,
    UnaryEncoding,
)
from dpkit.local._postprocess import norm_sub, project_simplex

__all__ = [
    "BinaryLocalHashing",
    "FrequencyEstimate",
    "FrequencyOracle",
    "GeneralizedRR",
    "HadamardResponse",
    "LinearHashFamily",
    "LocalHashing",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "Reports",
    "SubsetSelection",
    "SymmetricUnaryEncoding",
    "UnaryEncoding",
    "norm_sub",
    "project_simplex",
]
