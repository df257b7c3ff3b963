"""Choosing a frequency oracle from public parameters only (ε, d, n): never from the data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpkit._exact import Number
from dpkit.errors import InvalidParameterError
from dpkit.local._core import check_domain_size, check_local_epsilon
from dpkit.local._oracles import (
    BinaryLocalHashing,
    FrequencyOracle,
    GeneralizedRR,
    HadamardResponse,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    SubsetSelection,
    SymmetricUnaryEncoding,
)
from dpkit.local._sketch import CountMeanSketch, HadamardCountMeanSketch

__all__ = ["Recommendation", "recommend_oracle"]


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The lowest-variance oracle for (ε, d, n), with every candidate's figures.

    Attributes:
        name: the chosen oracle's short name (``"grr"``, ``"oue"``, ``"olh"``, ...).
        oracle: a ready-to-use instance of it.
        variance: its variance of one frequency estimate at f = 0 (the typical, rare value).
        table: name -> (variance at f = 0, report size in bits) for every candidate.
        reason: one sentence.
    """

    name: str
    oracle: FrequencyOracle
    variance: float
    table: dict[str, tuple[float, float]]
    reason: str


def _bits(oracle: FrequencyOracle) -> float:
    name = oracle.name
    d = oracle.d
    if name == "grr":
        return math.log2(d)
    if name in ("sue", "oue"):
        return float(d)
    if name in ("olh", "blh"):
        fam = oracle.family  # type: ignore[attr-defined]
        return math.log2(fam.size) + math.log2(oracle.g)  # type: ignore[attr-defined]
    if name == "hr":
        return math.log2(oracle.K)  # type: ignore[attr-defined]
    if name == "ss":
        return oracle.k * math.log2(d)  # type: ignore[attr-defined]
    if name == "cms":
        return math.log2(oracle.family.size) + oracle.m  # type: ignore[attr-defined]
    if name == "hcms":
        return math.log2(oracle.family.size) + math.log2(oracle.K) + 1  # type: ignore[attr-defined]
    return float("nan")


def recommend_oracle(epsilon: Number, d: int, n: int) -> Recommendation:
    """The frequency oracle with the smallest estimate variance for ε, domain size d and n
    clients — all public. Ties within 2 % go to the smaller report.

    Candidates: GRR, SUE, OUE, OLH, BLH, Hadamard response, subset selection, CMS, HCMS (RAPPOR
    is for longitudinal collection and is chosen by its own parameters). A sketch is only a
    candidate when its server table can estimate all d values (``table_fits``); beyond that it
    answers a candidate dictionary only (``aggregate_candidates``). The variances are the
    exact formulas at f = 0 (docs/local.md has the table); n only scales them (Var ∝ 1/n) and
    is used for the reported standard error.

    Example:
        >>> recommend_oracle(1, 4, 10_000).name
        'grr'
        >>> recommend_oracle(1, 1024, 10_000).name in ("olh", "oue", "ss")
        True
    """
    eps = check_local_epsilon(epsilon)
    size = check_domain_size(d)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "an integer >= 1 (the number of clients)")
    makers: list[Any] = [
        GeneralizedRR,
        SymmetricUnaryEncoding,
        OptimizedUnaryEncoding,
        OptimizedLocalHashing,
        BinaryLocalHashing,
        HadamardResponse,
        SubsetSelection,
        CountMeanSketch,
        HadamardCountMeanSketch,
    ]
    table: dict[str, tuple[float, float]] = {}
    built: dict[str, FrequencyOracle] = {}
    for make in makers:
        try:
            oracle = make(size, eps)
        except InvalidParameterError:  # e.g. a hash family too large for this d: skip it
            continue
        if not getattr(oracle, "table_fits", True):
            continue  # a sketch whose server table cannot estimate all d values
        built[oracle.name] = oracle
        table[oracle.name] = (float(oracle.variance(n, 0.0)), _bits(oracle))
    best_var = min(v for v, _ in table.values())
    near = [k for k, (v, _) in table.items() if v <= best_var * 1.02]
    name = min(near, key=lambda k: table[k][1])
    var = table[name][0]
    reason = (
        f"lowest variance at f = 0 ({var:.3g}, standard error {math.sqrt(var):.3g} for "
        f"n = {n}) among {len(table)} oracles; {len(near)} within 2 % of the best, of which "
        f"{name} sends the fewest bits ({table[name][1]:.0f})"
    )
    return Recommendation(name, built[name], var, table, reason)
