"""Heavy hitters over large domains by prefix extension (PEM; Wang, Li, Jha et al.,
"Locally differentially private heavy hitter identification", IEEE TDSC 2019)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.local._core import Reports, check_local_epsilon, check_reports
from dpkit.local._oracles import LocalHashing, optimal_prime_g
from dpkit.noise import uniform_integers

__all__ = ["HeavyHitters", "PrefixExtension"]


@dataclass(frozen=True, slots=True, eq=False)
class HeavyHitters:
    """The identified heavy hitters, most frequent first.

    Attributes:
        values: the values (full ``bits``-bit integers).
        frequencies: their raw unbiased frequency estimates (from the last group's reports).
        standard_errors: their analytic standard errors.
        n: the number of reports.
    """

    values: np.ndarray
    frequencies: np.ndarray
    standard_errors: np.ndarray
    n: int


class PrefixExtension:
    """PEM: find the k most frequent values of a 2^bits domain (e.g. 32-bit integers, or hashed
    strings) with OLH reports on prefixes.

    Clients are split into G groups by a public, data-independent uniform draw; group t
    reports its value's first l_t bits with OLH (:class:`~dpkit.local.LocalHashing`, the
    best prime g for ε, over the 2^{l_t} prefixes), l_0 = ⌈log2 k⌉ + η, then η more bits a
    group up to ``bits``. The server estimates all 2^{l_0} first prefixes, keeps the top k,
    extends each by every η-bit suffix (k·2^η candidates), estimates those from the next group,
    and so on; the survivors at the last level are the heavy hitters.

    ε: exactly ε per client: each client sends one OLH report (its group is chosen
    independently of its value). Variance of each final estimate: OLH's with n_G ≈ n/G clients.

    Cost: server work per group is n/G × (k·2^η) hash evaluations, done as exact float matmuls
    in chunks; no n × 2^bits table ever exists.
    """

    name = "pem"

    def __init__(self, epsilon: Number, *, bits: int = 32, k: int = 16, eta: int = 4) -> None:
        self.epsilon: Fraction = check_local_epsilon(epsilon)
        for name, value, low, high in (
            ("bits", bits, 2, 40),
            ("k", k, 1, 4096),
            ("eta", eta, 1, 12),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidParameterError(name, value, f"an integer in [{low}, {high}]")
        self.bits, self.k, self.eta = bits, k, eta
        start = min(bits, max(1, math.ceil(math.log2(k))) + eta)
        lengths = [start]
        while lengths[-1] < bits:
            lengths.append(min(bits, lengths[-1] + eta))
        self.lengths = lengths
        g = optimal_prime_g(self.epsilon)
        self.oracles = [LocalHashing(1 << max(length, 1), self.epsilon, g) for length in lengths]

    @property
    def loss(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def signature(self) -> tuple[Any, ...]:
        return (self.name, self.epsilon, self.bits, self.k, self.eta)

    def randomize(self, values: Any) -> Reports:
        """One report per client: (group, seed, hashed value)."""
        try:
            array = np.asarray(values)
        except (TypeError, ValueError):
            raise InvalidDataError("values", "cannot be read as an array") from None
        if array.dtype == bool or array.dtype.kind not in "iu":
            raise InvalidDataError("values", f"expected integers in [0, 2^{self.bits})")
        v = array.reshape(-1).astype(np.int64)
        if v.size and (int(v.min()) < 0 or int(v.max()) >= 1 << self.bits):
            raise InvalidDataError("values", f"a value is outside [0, 2^{self.bits})")
        groups = np.asarray(uniform_integers(len(self.lengths), v.size), dtype=np.int64)
        seeds = np.zeros(v.size, dtype=np.int64)
        hashed = np.zeros(v.size, dtype=np.int64)
        for t, (length, oracle) in enumerate(zip(self.lengths, self.oracles, strict=True)):
            rows = np.flatnonzero(groups == t)  # one vectorised call per group
            prefix = v[rows] >> (self.bits - length)
            part = oracle.randomize(prefix).arrays
            seeds[rows], hashed[rows] = part["seed"], part["value"]
        return Reports(self.signature, {"group": groups, "seed": seeds, "value": hashed}, v.size)

    def heavy_hitters(self, reports: Reports) -> HeavyHitters:
        """The top-k values, by prefix extension."""
        checked = check_reports(reports, self.signature)
        groups = checked.arrays["group"]
        candidates = np.arange(1 << self.lengths[0], dtype=np.int64)
        values = np.zeros(0)
        variances = np.zeros(0)
        for t, oracle in enumerate(self.oracles):
            rows = np.flatnonzero(groups == t)
            if rows.size == 0:
                raise InvalidDataError("reports", f"group {t} is empty: too few reports for PEM")
            part = Reports(
                oracle.signature,
                {"seed": checked.arrays["seed"][rows], "value": checked.arrays["value"][rows]},
                int(rows.size),
            )
            estimate = oracle.aggregate_candidates(part, candidates)
            top = np.argsort(-estimate.values, kind="stable")[: self.k]
            values, variances = estimate.values[top], estimate.variances[top]
            survivors = candidates[top]
            if t + 1 < len(self.oracles):
                step = self.lengths[t + 1] - self.lengths[t]
                suffix = np.arange(1 << step, dtype=np.int64)
                candidates = ((survivors[:, None] << step) | suffix[None, :]).reshape(-1)
            else:
                candidates = survivors
        return HeavyHitters(candidates, values, np.sqrt(variances), checked.n)
