"""Apple's count-mean sketch (CMS) and Hadamard count-mean sketch (HCMS).

Apple Differential Privacy Team, "Learning with Privacy at Scale", Apple Machine Learning
Journal, 2017. Apple draws one of k fixed hash functions per report; here the hash is drawn from
the bounded public family :class:`~dpkit.local._core.LinearHashFamily` (range m, m prime,
m^L members, collision probability exactly 1/m), which makes the estimates exactly unbiased and
their variances exact (Apple's fixed k hashes leave a small collision bias).

Large domains: the server's table has m^L × m cells (L = ⌈log_m d⌉), so the default width m is
the largest prime <= 1021 (and >= 31) whose table has at most 2^23 cells: m = next prime >= d
for d <= 1021 (L = 1), then e.g. m = 199 up to d = 199² (L = 2) and m = 53 up to 53³ (L = 3).
Beyond that (or with an explicit m whose table is too big) :meth:`aggregate` refuses, from the
public parameters alone, and :meth:`aggregate_candidates` estimates a dictionary of candidate
values with n × C hash evaluations in chunks (Apple's own use: a dictionary of emoji or words).
The width only enters the variance through the 1/m terms below.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.local._core import (
    FrequencyEstimate,
    LinearHashFamily,
    Reports,
    check_reports,
    client_values,
    is_prime,
    next_prime,
)
from dpkit.local._oracles import FrequencyOracle, _Coin, fwht
from dpkit.noise import bernoulli_logistic, uniform_integers

__all__ = ["CountMeanSketch", "HadamardCountMeanSketch"]


_SKETCH_CELLS = 1 << 23  # the largest m^L × m server table (float64: 64 MiB; FFT: 128 MiB)


def _table_cells(d: int, m: int) -> int:
    return int(LinearHashFamily.for_domain(d, m).size) * m


def _default_m(d: int) -> int:
    """The widest prime sketch in [31, 1021] whose server table fits (m >= d when it can)."""
    if d <= 1021:
        return next_prime(max(d, 31))
    best = 0
    for m in range(31, 1022):
        if is_prime(m) and _table_cells(d, m) <= _SKETCH_CELLS:
            best = m
    return best or 1021  # no table fits: candidates only (aggregate_candidates)


class _Sketch(FrequencyOracle):
    def __init__(self, d: int, epsilon: Number, m: int | None = None) -> None:
        super().__init__(d, epsilon)
        m_value = _default_m(self.d) if m is None else m
        if isinstance(m_value, bool) or not isinstance(m_value, int) or not is_prime(m_value):
            raise InvalidParameterError("m", m, "a prime >= 2 (the sketch width)")
        self.m = int(m_value)
        self.family = LinearHashFamily.for_domain(self.d, self.m)

    def _parameters(self) -> tuple[Any, ...]:
        return (self.m, self.family.length)

    def _finish(self, sums: np.ndarray, n: int) -> np.ndarray:
        m = self.m
        return np.asarray((m / (m - 1)) * (sums / n - 1.0 / m))

    @property
    def table_fits(self) -> bool:
        """Whether :meth:`aggregate` can estimate all d values (m^L × m <= 2^23 cells)."""
        return self.family.size * self.m <= _SKETCH_CELLS

    def _estimate(self, reports: Reports) -> np.ndarray:
        if not self.table_fits:
            raise InvalidParameterError(
                "d",
                self.d,
                f"small enough for the m^L × m sketch table (here {self.family.size} × {self.m})",
                "Use aggregate_candidates(reports, candidates) for a dictionary of values.",
            )
        table = self._table(reports)
        return self._finish(self.family.family_sum(table, np.arange(self.d)), reports.n)

    def _table(self, reports: Reports) -> np.ndarray:
        raise NotImplementedError

    def _candidate_sums(self, reports: Reports, candidates: np.ndarray) -> np.ndarray:
        """Σ_i x̂_i[h_{a_i}(c)] for each candidate c (x̂_i the de-biased sketch row of report i)."""
        raise NotImplementedError

    def aggregate_candidates(self, reports: Reports, candidates: Any) -> FrequencyEstimate:
        """Unbiased estimates for the given candidate values only, for any domain size.

        Each report's de-biased row is read at h_{a_i}(c) for every candidate: n × C exact hash
        evaluations (chunked matmuls), never an n × d or m^L × m table. Same estimator and
        variance as :meth:`aggregate` (which it equals on the candidates).
        """
        checked = check_reports(reports, self.signature)
        cand = client_values(candidates, self.d, "candidates")
        raw = self._finish(self._candidate_sums(checked, cand), checked.n)
        return FrequencyEstimate(
            values=raw,
            variances=np.asarray(self.variance(checked.n, np.clip(raw, 0.0, 1.0))),
            n=checked.n,
            oracle=self.name,
            epsilon=self.epsilon,
            candidates=cand,
        )

    def _check_seeds(self, reports: Reports) -> np.ndarray:
        seeds = reports.arrays["seed"].astype(np.int64)
        if seeds.size and (int(seeds.min()) < 0 or int(seeds.max()) >= self.family.size):
            raise InvalidDataError("reports", "a hash seed is out of range")
        return seeds


class CountMeanSketch(_Sketch):
    """Apple's count-mean sketch (CMS), private-CMS client.

    Client: draw a public hash h_a (seed a uniform over m^L family members), one-hot encode
    h_a(v) in m bits and flip each bit independently with probability r = 1/(1+e^{ε/2});
    report (a, bits).

    ε: exactly ε per report: for a fixed seed at most two bits differ, each with likelihood
    ratio (1-r)/r = e^{ε/2}.

    Server: debias each bit, x̂ = (b - r)/(1 - 2r), sum into an m^L × m sketch by seed, and
    read f̂_v = m/(m-1)·(Σ_a sketch[a, h_a(v)]/n - 1/m) with one FFT.

    Variance: with σ² = r(1-r)/(1-2r)² (the variance of one debiased bit),
    Var f̂_v = (m/(m-1))²·((1-f)(σ² + 1/m - 1/m²) + f σ²)/n.
    """

    name = "cms"

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        n, m = values.size, self.m
        seeds = np.asarray(uniform_integers(self.family.size, n), dtype=np.int64)
        hashed = self.family.evaluate(seeds, values)
        half = self.epsilon / 2
        bits = _Coin(Fraction(1), half, complement=True).draw(n * m).reshape(n, m)
        bits[np.arange(n), hashed] = _Coin(Fraction(1), half).draw(n)
        return {"seed": seeds, "bits": bits}

    @property
    def flip(self) -> float:
        return 1.0 / (1.0 + math.exp(float(self.epsilon) / 2))

    def _table(self, reports: Reports) -> np.ndarray:
        seeds, bits = self._check_seeds(reports), self._bits(reports)
        order = np.argsort(seeds, kind="stable")
        sorted_seeds = seeds[order]
        starts = np.flatnonzero(np.r_[True, sorted_seeds[1:] != sorted_seeds[:-1]])
        sums = np.add.reduceat(bits[order].astype(np.float64), starts, axis=0)
        counts = np.diff(np.r_[starts, seeds.size])
        r = self.flip
        table = np.zeros((self.family.size, self.m))
        table[sorted_seeds[starts]] = (sums - r * counts[:, None]) / (1 - 2 * r)
        return table

    def _bits(self, reports: Reports) -> np.ndarray:
        bits = reports.arrays["bits"]
        if bits.ndim != 2 or bits.shape[1] != self.m or bits.dtype != bool:
            raise InvalidDataError("reports", f"CMS reports must have {self.m} bits")
        return bits

    def _candidate_sums(self, reports: Reports, candidates: np.ndarray) -> np.ndarray:
        seeds, bits = self._check_seeds(reports), self._bits(reports)
        total = np.zeros(candidates.size)
        chunk = max(1, (1 << 22) // max(candidates.size, 1))
        for start in range(0, seeds.size, chunk):  # chunks of ~4M cells, not single reports
            hashed = self.family.evaluate_outer(seeds[start : start + chunk], candidates)
            total += np.take_along_axis(bits[start : start + chunk], hashed, axis=1).sum(axis=0)
        r = self.flip
        return np.asarray((total - r * seeds.size) / (1 - 2 * r))

    def variance(self, n: int, f: Any = 0.0) -> Any:
        r, m = self.flip, self.m
        s2 = r * (1 - r) / (1 - 2 * r) ** 2
        f_arr = np.asarray(f, dtype=np.float64)
        out = (m / (m - 1)) ** 2 * ((1 - f_arr) * (s2 + 1 / m - 1 / m**2) + f_arr * s2) / int(n)
        return float(out) if out.ndim == 0 else out

    def outputs(self) -> list[Any]:
        self._check_enumerable(self.family.size << self.m)
        return [(a, b) for a in range(self.family.size) for b in range(1 << self.m)]

    def output_pmf(self, value: int) -> np.ndarray:
        self._check_enumerable(self.family.size << self.m)
        r = self.flip
        o = np.arange(1 << self.m)
        bits = (o[:, None] >> np.arange(self.m)) & 1
        rows = []
        for a in range(self.family.size):  # tiny enumerations for the exact check only
            h = int(self.family.evaluate(np.array([a]), np.array([int(value)]))[0])
            p1 = np.full(self.m, r)
            p1[h] = 1 - r
            rows.append(np.prod(np.where(bits == 1, p1, 1 - p1), axis=1))
        return np.concatenate(rows) / self.family.size

    def log_weights(self, value: int) -> list[Fraction]:
        """Each bit keeps its one-hot value with probability e^{ε/2}/(1 + e^{ε/2}): λ = ε/2 for
        every bit that agrees with the one-hot encoding of h_a(v)."""
        self._check_enumerable(self.family.size << self.m)
        half = self.epsilon / 2
        out = []
        for a in range(self.family.size):  # tiny enumeration for the exact check only
            h = int(self.family.evaluate(np.array([a]), np.array([int(value)]))[0])
            onehot = 1 << h
            for b in range(1 << self.m):
                agree = self.m - int(bin(b ^ onehot).count("1"))
                out.append(half * agree)
        return out


class HadamardCountMeanSketch(_Sketch):
    """Apple's Hadamard count-mean sketch (HCMS): one bit per report.

    Client: draw a public hash h_a (as for CMS), a uniform row l of the K×K Hadamard matrix
    (K the power of 2 at or above m), and report (a, l, b) with b = H[l, h_a(v)] ∈ {±1} kept with
    probability e^ε/(e^ε+1) and negated otherwise.

    ε: exactly ε per report: for fixed (a, l) the bit is binary randomized response.

    Server: x̂(i) = c·b·H[l, i] with c = (e^ε+1)/(e^ε-1) is unbiased for the one-hot vector of
    h_a(v); summing c·b into an m^L × K table by (a, l) and applying one fast Walsh–Hadamard
    transform per row gives the sketch; f̂_v = m/(m-1)·(Σ_a sketch[a, h_a(v)]/n - 1/m).

    Variance: x̂(i)² = c² always, so
    Var f̂_v = (m/(m-1))²·((1-f)(c² - 1/m²) + f(c² - 1))/n.
    """

    name = "hcms"

    def __init__(self, d: int, epsilon: Number, m: int | None = None) -> None:
        super().__init__(d, epsilon, m)
        self.K = 1 << (self.m - 1).bit_length()

    @property
    def c(self) -> float:
        e = math.exp(float(self.epsilon))
        return (e + 1) / (e - 1)

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        n = values.size
        seeds = np.asarray(uniform_integers(self.family.size, n), dtype=np.int64)
        hashed = self.family.evaluate(seeds, values)
        rows = np.asarray(uniform_integers(self.K, n), dtype=np.int64)
        sign = 1 - 2 * (np.bitwise_count(rows & hashed).astype(np.int64) & 1)
        keep = np.asarray(bernoulli_logistic(Fraction(1), self.epsilon, n), dtype=bool)
        bit = np.where(keep, sign, -sign).astype(np.int8)
        return {"seed": seeds, "row": rows, "bit": bit}

    def _rows_bits(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        rows, bit = reports.arrays["row"].astype(np.int64), reports.arrays["bit"]
        if (rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self.K)) or not np.all(
            np.abs(bit) == 1
        ):
            raise InvalidDataError("reports", "an HCMS row is out of range or a bit is not ±1")
        return rows, bit

    def _candidate_sums(self, reports: Reports, candidates: np.ndarray) -> np.ndarray:
        seeds = self._check_seeds(reports)
        rows, bit = self._rows_bits(reports)
        total = np.zeros(candidates.size)
        chunk = max(1, (1 << 22) // max(candidates.size, 1))
        for start in range(0, seeds.size, chunk):  # chunks of ~4M cells, not single reports
            part = slice(start, start + chunk)
            hashed = self.family.evaluate_outer(seeds[part], candidates)
            parity = np.bitwise_count(rows[part, None] & hashed).astype(np.int64) & 1
            total += (bit[part, None].astype(np.int64) * (1 - 2 * parity)).sum(axis=0)
        return self.c * total

    def _table(self, reports: Reports) -> np.ndarray:
        seeds = self._check_seeds(reports)
        rows, bit = self._rows_bits(reports)
        weights = self.c * bit.astype(np.float64)
        table = np.bincount(
            seeds * self.K + rows, weights=weights, minlength=self.family.size * self.K
        ).reshape(self.family.size, self.K)
        return fwht(table)[:, : self.m]

    def variance(self, n: int, f: Any = 0.0) -> Any:
        c2, m = self.c**2, self.m
        f_arr = np.asarray(f, dtype=np.float64)
        out = (m / (m - 1)) ** 2 * ((1 - f_arr) * (c2 - 1 / m**2) + f_arr * (c2 - 1)) / int(n)
        return float(out) if out.ndim == 0 else out

    def outputs(self) -> list[Any]:
        self._check_enumerable(self.family.size * self.K * 2)
        size = range(self.family.size)
        return [(a, row, b) for a in size for row in range(self.K) for b in (-1, 1)]

    def output_pmf(self, value: int) -> np.ndarray:
        self._check_enumerable(self.family.size * self.K * 2)
        e = math.exp(float(self.epsilon))
        keep = e / (e + 1)
        seeds = np.arange(self.family.size)
        h = self.family.evaluate(seeds, np.full(seeds.size, int(value)))
        rows = np.arange(self.K)
        sign = 1 - 2 * (np.bitwise_count(rows[None, :] & h[:, None]) & 1)  # (S, K)
        p_plus = np.where(sign == 1, keep, 1 - keep)
        pmf = np.stack([1 - p_plus, p_plus], axis=-1)  # outputs b = -1, +1
        return pmf.reshape(-1) / (self.family.size * self.K)

    def log_weights(self, value: int) -> list[Fraction]:
        """P(a, l, b | v) = e^{ε·[b = H[l, h_a(v)]]}/(S·K·(e^ε + 1))."""
        self._check_enumerable(self.family.size * self.K * 2)
        seeds = np.arange(self.family.size)
        h = self.family.evaluate(seeds, np.full(seeds.size, int(value)))
        rows = np.arange(self.K)
        sign = (1 - 2 * (np.bitwise_count(rows[None, :] & h[:, None]) & 1)).reshape(-1).tolist()
        zero = Fraction(0)
        return [w for s in sign for w in ((zero, self.epsilon) if s == 1 else (self.epsilon, zero))]
