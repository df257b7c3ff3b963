"""dpkit.local: local differential privacy — each client randomises its own value.

Frequency oracles (client randomizer + server aggregator + exact ε + analytic variance):
:class:`GeneralizedRR`, :class:`SymmetricUnaryEncoding`, :class:`OptimizedUnaryEncoding`,
:class:`OptimizedLocalHashing`, :class:`BinaryLocalHashing`, :class:`HadamardResponse`,
:class:`SubsetSelection`, Apple's :class:`CountMeanSketch` and
:class:`HadamardCountMeanSketch`, and :class:`Rappor`. See docs/local.md for the formula
table and how a deployment splits client and server.
"""

from dpkit.local._campaign import Campaign, shuffle_amplification
from dpkit.local._core import FrequencyEstimate, LinearHashFamily, Reports
from dpkit.local._heavy import HeavyHitters, PrefixExtension
from dpkit.local._numeric import DuchiMean, HybridMean, MeanEstimate, PiecewiseMean
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
from dpkit.local._rappor import Rappor
from dpkit.local._recommend import Recommendation, recommend_oracle
from dpkit.local._sketch import CountMeanSketch, HadamardCountMeanSketch
from dpkit.local._verify import check_exact_epsilon

__all__ = [
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
]
