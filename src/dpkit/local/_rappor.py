"""RAPPOR (Erlingsson, Pihur & Korolova, CCS 2014): Bloom filter, permanent and instantaneous
randomized response, and decoding against a candidate dictionary."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.optimize import nnls

from dpkit._exact import Number, check_probability, log_upper
from dpkit.core.losses import PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.local._core import (
    FrequencyEstimate,
    Reports,
    check_domain_size,
    check_reports,
    client_values,
)
from dpkit.noise import bernoulli, uniform_integers

__all__ = ["Rappor"]

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fixed public bijection of 64-bit words (no randomness)."""
    z = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class Rappor:
    """RAPPOR with cohorts: each client (in a public cohort c) sets the h Bloom bits
    H_{c,1..h}(v) of an m-bit filter B, then

    1. permanent randomized response (memoised per value on the client): each bit becomes 1
       with probability f/2, 0 with probability f/2, and stays B_i otherwise, giving B';
    2. instantaneous randomized response (fresh for every report): report S_i = 1 with
       probability q if B'_i = 1 and p if B'_i = 0.

    ε (exact expressions, rounded up): one report is ε₁-DP with
    ε₁ = h·ln(q*(1-p*)/(p*(1-q*))), q* = (1-f/2)q + (f/2)p, p* = (f/2)q + (1-f/2)p, and any
    number of reports of the same value (same B') are ε∞-DP with ε∞ = 2h·ln((1-f/2)/(f/2))
    (Erlingsson et al. 2014, Thms. 1–2): two values differ in at most 2h Bloom bits. The
    :attr:`loss` is the one-report ε₁; :attr:`epsilon_longitudinal` is ε∞.

    Sampling: all probabilities are rational (f, p, q are Fractions): exact Bernoulli draws from
    :func:`dpkit.noise.bernoulli`. The Bloom hashes are a fixed public function (splitmix64
    of (cohort, j, v)); decoding does not rely on them being random.

    Decoding: per cohort c and bit i, Y_{c,i} = (t_{c,i} - p*·N_c)/(q* - p*) is an unbiased
    estimate of the number of clients of cohort c whose Bloom bit i is set; with X the 0/1
    design matrix of the candidates' Bloom bits, the least-squares solution of X·x ≈ Y is an
    unbiased estimate of the candidates' counts when every client's value is a candidate and X
    has full column rank (``method="ols"``); its variance is exact:
    Var x̂ = A·diag(Var Y)·Aᵀ with A = X⁺ and Var Y_{c,i} = (n1·q*(1-q*) + (N_c-n1)p*(1-p*))/
    (q*-p*)², n1 the true number of set bits (plug-in: the clipped estimate). Each cohort's share
    N_c/n weights its rows: exactly unbiased when every cohort has the population's distribution
    (cohorts assigned independently of values, as RAPPOR does, make this hold in expectation).
    ``method="nnls"``
    (scipy's non-negative least squares, as RAPPOR's analysis does with its regression) gives
    non-negative, biased counts.
    """

    name = "rappor"

    def __init__(
        self,
        d: int,
        *,
        m: int = 128,
        hashes: int = 2,
        cohorts: int = 8,
        f: Number = Fraction(1, 2),
        p: Number = Fraction(1, 2),
        q: Number = Fraction(3, 4),
    ) -> None:
        self.d = check_domain_size(d)
        for name, value, low, high in (("m", m, 2, 4096), ("hashes", hashes, 1, 64)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidParameterError(name, value, f"an integer in [{low}, {high}]")
        if isinstance(cohorts, bool) or not isinstance(cohorts, int) or not 1 <= cohorts <= 4096:
            raise InvalidParameterError("cohorts", cohorts, "an integer in [1, 4096]")
        self.m, self.h, self.cohorts = m, hashes, cohorts
        self.f = check_probability(f, "f", open_low=True, open_high=True)
        self.p = check_probability(p, "p")
        self.q = check_probability(q, "q")
        if self.q <= self.p:
            raise InvalidParameterError("q", q, f"> p = {self.p}")
        half = self.f / 2
        self.q_star = (1 - half) * self.q + half * self.p
        self.p_star = half * self.q + (1 - half) * self.p
        if self.p_star == 0 or self.q_star == 1:
            raise InvalidParameterError("p", p, "such that p* > 0 and q* < 1 (else ε is infinite)")
        ratio = self.q_star * (1 - self.p_star) / (self.p_star * (1 - self.q_star))
        self.epsilon: Fraction = self.h * log_upper(ratio)
        self.epsilon_longitudinal: Fraction = 2 * self.h * log_upper((1 - half) / half)

    @classmethod
    def for_epsilon(
        cls, d: int, epsilon: Number, *, m: int = 128, hashes: int = 2, cohorts: int = 8
    ) -> Rappor:
        """One-time RAPPOR at (at most) the given ε: the permanent response only (p = 0,
        q = 1), with f the smallest multiple of 2^-20 such that 2h·ln((1-f/2)/(f/2)) <= ε;
        then ε₁ = ε∞ <= ε."""
        from dpkit.local._core import check_local_epsilon

        eps = check_local_epsilon(epsilon)
        target = 1 / (1 + math.exp(float(eps) / (2 * hashes)))  # f/2 at exactly ε
        f = Fraction(math.ceil(2 * target * 2**20) + 1, 2**20)  # rounded up: less loss
        made = cls(
            d,
            m=m,
            hashes=hashes,
            cohorts=cohorts,
            f=min(f, Fraction(1, 1) - Fraction(1, 2**20)),
            p=0,
            q=1,
        )
        while made.epsilon > eps:  # guard the float step above (rounding of exp)
            f += Fraction(1, 2**20)
            made = cls(d, m=m, hashes=hashes, cohorts=cohorts, f=f, p=0, q=1)
        return made

    @property
    def loss(self) -> PureDP:
        """The one-report loss ε₁ (the permanent response caps all reports of a value at ε∞)."""
        return PureDP(self.epsilon)

    @property
    def signature(self) -> tuple[Any, ...]:
        return (self.name, self.d, self.m, self.h, self.cohorts, self.f, self.p, self.q)

    # -- hashing
    def bloom_positions(self, values: np.ndarray, cohorts: np.ndarray) -> np.ndarray:
        """The h Bloom positions of each (value, cohort): (n, h) int64."""
        v = np.asarray(values, dtype=np.uint64)[:, None]
        c = np.asarray(cohorts, dtype=np.uint64)[:, None]
        j = np.arange(self.h, dtype=np.uint64)[None, :]
        with np.errstate(over="ignore"):
            key = _mix(_mix(v) ^ (c * np.uint64(0x9E3779B97F4A7C15)) ^ (j << np.uint64(48)))
        return np.asarray(key % np.uint64(self.m), dtype=np.int64)

    def bloom(self, values: np.ndarray, cohorts: np.ndarray) -> np.ndarray:
        """The n×m Bloom filters (bool)."""
        n = np.size(values)
        out = np.zeros((n, self.m), dtype=bool)
        out[np.arange(n)[:, None], self.bloom_positions(values, cohorts)] = True
        return out

    # -- client
    def _cohorts(self, cohorts: Any, n: int) -> np.ndarray:
        if cohorts is None:
            return np.asarray(uniform_integers(self.cohorts, n), dtype=np.int64)
        c = client_values(cohorts, self.cohorts, "cohorts")
        if c.size != n:
            raise InvalidDataError("cohorts", "needs one cohort per value")
        return c

    def permanent(self, bloom: np.ndarray) -> np.ndarray:
        """Permanent randomized response of Bloom filters (memoise it per client and value)."""
        size = bloom.size
        randomise = np.asarray(bernoulli(self.f, size), dtype=bool)
        coin = np.asarray(bernoulli(Fraction(1, 2), size), dtype=bool)
        return np.where(randomise, coin, bloom.reshape(-1)).reshape(bloom.shape)

    def instantaneous(self, permanent: np.ndarray) -> np.ndarray:
        """Instantaneous randomized response of permanent responses (fresh per report)."""
        size = permanent.size
        ones = np.asarray(bernoulli(self.q, size), dtype=bool)
        zeros = np.asarray(bernoulli(self.p, size), dtype=bool)
        return np.where(permanent.reshape(-1), ones, zeros).reshape(permanent.shape)

    def randomize(self, values: Any, cohorts: Any = None) -> Reports:
        """One report per client: (cohort, m bits). ``cohorts`` (public) default to uniform."""
        v = client_values(values, self.d)
        c = self._cohorts(cohorts, v.size)
        bits = np.empty((v.size, self.m), dtype=bool)
        chunk = max(1, (1 << 22) // self.m)
        for start in range(0, v.size, chunk):  # chunks of ~4M bits bound the memory
            part = slice(start, start + chunk)
            bits[part] = self.instantaneous(self.permanent(self.bloom(v[part], c[part])))
        return Reports(self.signature, {"cohort": c, "bits": bits}, int(v.size))

    # -- server
    def design(self, candidates: np.ndarray) -> np.ndarray:
        """X[(c, i), k] = 1 if candidate k sets bit i in cohort c: (cohorts·m, len(candidates))."""
        k = candidates.size
        # one block per public cohort (a loop over cohorts, not reports)
        cols = [self.bloom(candidates, np.full(k, c)).T for c in range(self.cohorts)]
        return np.concatenate(cols, axis=0).astype(np.float64)

    def bit_estimates(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """(Y, N): unbiased set-bit counts per (cohort, bit) and the reports per cohort."""
        checked = check_reports(reports, self.signature)
        c = checked.arrays["cohort"].astype(np.int64)
        bits = checked.arrays["bits"]
        if bits.ndim != 2 or bits.shape[1] != self.m:
            raise InvalidDataError("reports", f"RAPPOR reports must have {self.m} bits")
        if c.size and (int(c.min()) < 0 or int(c.max()) >= self.cohorts):
            raise InvalidDataError("reports", "a cohort is out of range")
        order = np.argsort(c, kind="stable")
        counts = np.bincount(c, minlength=self.cohorts)
        totals = np.zeros((self.cohorts, self.m))
        present = np.flatnonzero(counts)
        starts = np.r_[0, np.cumsum(counts[present])[:-1]]
        totals[present] = np.add.reduceat(bits[order].astype(np.float64), starts, axis=0)
        ps, qs = float(self.p_star), float(self.q_star)
        estimates = (totals - ps * counts[:, None]) / (qs - ps)
        return estimates, counts

    def aggregate(
        self, reports: Reports, candidates: Any, *, method: str = "ols"
    ) -> FrequencyEstimate:
        """Frequencies of the candidate values (a dictionary of domain values)."""
        if method not in ("ols", "nnls"):
            raise InvalidParameterError("method", method, "'ols' or 'nnls'")
        cand = client_values(candidates, self.d, "candidates")
        Y, counts = self.bit_estimates(reports)
        n = int(counts.sum())
        # cohort c holds N_c/n of the clients: E[Y_{c,i}] = Σ_k X[(c,i), k]·(N_c/n)·count_k
        X = self.design(cand) * np.repeat(counts / n, self.m)[:, None]
        if np.linalg.matrix_rank(X) < cand.size:
            raise InvalidParameterError(
                "candidates", cand.size, "few enough that their Bloom bits are independent"
            )
        pinv = np.linalg.pinv(X)
        ols = pinv @ Y.reshape(-1)
        n1 = np.clip(Y, 0, counts[:, None]).reshape(-1)
        variance = self.ols_variance(pinv, n1, np.repeat(counts, self.m))
        raw = ols / n
        consistent = None
        if method == "nnls":
            consistent = nnls(X, Y.reshape(-1))[0] / n
        return FrequencyEstimate(
            values=raw,
            variances=variance / n**2,
            n=n,
            oracle=self.name,
            epsilon=self.epsilon,
            consistent=consistent,
            postprocess=None if method == "ols" else "nnls",
            candidates=cand,
        )

    def ols_variance(self, pinv: np.ndarray, n1: np.ndarray, per_bit_n: np.ndarray) -> np.ndarray:
        """Exact variance of the OLS counts given the true set-bit counts n1 per (cohort, bit)."""
        ps, qs = float(self.p_star), float(self.q_star)
        var_y = (n1 * qs * (1 - qs) + (per_bit_n - n1) * ps * (1 - ps)) / (qs - ps) ** 2
        return np.asarray((pinv**2) @ var_y)

    # -- exact distribution of one report (small m)
    def outputs(self) -> list[Any]:
        if self.m > 12:
            raise InvalidParameterError("m", self.m, "<= 12 to enumerate outputs")
        return [(c, b) for c in range(self.cohorts) for b in range(1 << self.m)]

    def output_pmf(self, value: int) -> np.ndarray:
        """P(cohort, S | v) with the cohort uniform and the permanent response marginalised."""
        self.outputs()
        o = np.arange(1 << self.m)
        bits = (o[:, None] >> np.arange(self.m)) & 1
        ps, qs = float(self.p_star), float(self.q_star)
        rows = []
        for c in range(self.cohorts):  # tiny enumeration for the exact check only
            b = self.bloom(np.array([int(value)]), np.array([c]))[0]
            p1 = np.where(b, qs, ps)
            rows.append(np.prod(np.where(bits == 1, p1, 1 - p1), axis=1))
        return np.concatenate(rows) / self.cohorts
