"""RAPPOR (Erlingsson, Pihur & Korolova, CCS 2014): Bloom filter, permanent and instantaneous
randomized response, and decoding against a candidate dictionary."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.optimize import nnls

from dpkit._exact import Number, check_probability, log_upper
from dpkit.core._losses import PureDP
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
    design matrix of the candidates' Bloom bits, rows of cohort c weighted by its share N_c/n,
    the least-squares solution x̂ = X⁺Y (``method="ols"``) is an unbiased estimate of the
    candidates' counts when every client's value is a candidate, X has full column rank and
    cohorts are assigned independently of values (then E[x̂ | cohort sizes] = counts exactly).
    Its variance (:meth:`decoding_variance`) has two exact terms: the randomisation's,
    A·diag(Var Y)·Aᵀ, and the random allocation of values to cohorts'; both are evaluated at
    plug-in counts. ``method="nnls"`` (scipy's non-negative least squares, as RAPPOR's
    analysis does with its regression) adds non-negative, biased counts, without a variance.
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
        self._design_cache: tuple[bytes, np.ndarray] = (b"", np.zeros((0, 0)))

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

    def report(self, permanent: Any, cohorts: Any) -> Reports:
        """Reports from memoised permanent responses: a fresh instantaneous response of each
        client's stored ``permanent(bloom(value, cohort))`` (n × m bools). This is RAPPOR's
        longitudinal client: all reports of one unchanged value together cost ε∞ (declare it
        with ``Campaign(..., memoised_permanent=True)``), where :meth:`randomize`, which draws
        a fresh permanent response each time, costs ε₁ per report."""
        bits = np.asarray(permanent)
        if bits.ndim != 2 or bits.shape[1] != self.m or bits.dtype != bool:
            raise InvalidDataError("permanent", f"must be n×{self.m} bools (from permanent())")
        c = client_values(cohorts, self.cohorts, "cohorts")
        if c.size != bits.shape[0]:
            raise InvalidDataError("cohorts", "needs one cohort per permanent response")
        n = int(c.size)
        return Reports(self.signature, {"cohort": c, "bits": self.instantaneous(bits)}, n)

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
        """Frequencies of the candidate values (a dictionary of domain values).

        ``values`` are the OLS estimates (unbiased when every client's value is a candidate and
        cohorts are assigned independently of values) and ``variances`` are **their** variance
        (:meth:`decoding_variance`, evaluated at the plug-in counts max(x̂, 0) rescaled to n).
        ``method="nnls"`` adds scipy's non-negative least squares in ``consistent``: biased,
        non-negative, and with no variance claimed for it (``postprocess == "nnls"``).
        """
        if method not in ("ols", "nnls"):
            raise InvalidParameterError("method", method, "'ols' or 'nnls'")
        cand = client_values(candidates, self.d, "candidates")
        Y, counts = self.bit_estimates(reports)
        n = int(counts.sum())
        X0, X, pinv = self._solver(cand, counts)
        ols = pinv @ Y.reshape(-1)
        plug_in = np.clip(ols, 0.0, None)
        plug_in = (
            plug_in * (n / plug_in.sum())
            if plug_in.sum() > 0
            else np.full(cand.size, n / cand.size)
        )
        variance = self._variance(X0, pinv, counts.astype(np.float64), plug_in, True)
        consistent = None
        if method == "nnls":
            consistent = nnls(X, Y.reshape(-1))[0] / n
        return FrequencyEstimate(
            values=ols / n,
            variances=variance / n**2,
            n=n,
            oracle=self.name,
            epsilon=self.epsilon,
            consistent=consistent,
            postprocess=None if method == "ols" else "nnls",
            candidates=cand,
        )

    def _solver(self, candidates: np.ndarray, cohort_sizes: np.ndarray) -> tuple[Any, Any, Any]:
        """(X₀, X, A): the unweighted design, the design with cohort c's rows weighted by its
        share N_c/n (E[Y | sizes] = X·counts), and A = X⁺ — or a clear error if X does not have
        full column rank (the candidates' counts are then not identifiable)."""
        key = candidates.tobytes()
        if self._design_cache[0] != key:
            self._design_cache = (key, self.design(candidates))
        X0 = self._design_cache[1]
        n = float(cohort_sizes.sum())
        X = X0 * np.repeat(cohort_sizes / n, self.m)[:, None]
        u, sv, vt = np.linalg.svd(X, full_matrices=False)
        tol = sv.max(initial=0.0) * max(X.shape) * np.finfo(np.float64).eps
        if candidates.size > min(X.shape) or np.count_nonzero(sv > tol) < candidates.size:
            raise InvalidParameterError(
                "candidates",
                candidates.size,
                "few enough that their Bloom bits are independent (at most cohorts × m, and "
                "no two candidates with the same Bloom bits in every cohort)",
            )
        return X0, X, (vt.T / sv) @ u.T

    def decoding_variance(
        self,
        candidates: Any,
        cohort_sizes: Any,
        counts: Any,
        *,
        allocation: bool = True,
    ) -> np.ndarray:
        """The exact variance of the OLS candidate counts x̂ = X⁺Y for a population whose
        values are the candidates with these ``counts`` (summing to n), in cohorts of these
        sizes assigned independently of the values (uniformly at random given the sizes, as
        :meth:`randomize` does by default).

        Var x̂ = E[Var(x̂ | allocation)] + Var(E[x̂ | allocation]) (E[x̂ | sizes] = counts, so
        there is no third term):

        * randomisation: A·diag(Var Y)·Aᵀ with A = X⁺ and Var Y_{c,i} = (n1·q*(1-q*) +
          (N_c - n1)·p*(1-p*))/(q* - p*)², at the expected set-bit count n1 = N_c·(X₀c)_i/n
          (it is linear in n1);
        * allocation: the per-cohort counts n_{c,k} of a uniformly random allocation with
          fixed margins have Cov(n_{ck}, n_{c'k'}) = N_c(nδ_{cc'} - N_{c'})·c_k(nδ_{kk'} -
          c_{k'})/(n²(n-1)), mapped through B_c = A_c·X₀_c (A_c: cohort c's columns of A).

        ``allocation=False`` drops the second term: the variance when every cohort holds
        exactly the population's distribution (stratified cohorts).
        """
        cand = client_values(candidates, self.d, "candidates")
        sizes = np.asarray(cohort_sizes, dtype=np.float64).reshape(-1)
        mu = np.asarray(counts, dtype=np.float64).reshape(-1)
        if sizes.size != self.cohorts or mu.size != cand.size:
            raise InvalidParameterError("counts", mu.size, "one count per candidate")
        X0, _, A = self._solver(cand, sizes)
        return self._variance(X0, A, sizes, mu, allocation)

    def _variance(
        self, X0: np.ndarray, A: np.ndarray, sizes: np.ndarray, mu: np.ndarray, allocation: bool
    ) -> np.ndarray:
        n = float(sizes.sum())
        n1 = np.repeat(sizes / n, self.m) * (X0 @ mu)
        per_bit_n = np.repeat(sizes, self.m)
        ps, qs = float(self.p_star), float(self.q_star)
        var_y = (n1 * qs * (1 - qs) + (per_bit_n - n1) * ps * (1 - ps)) / (qs - ps) ** 2
        variance = (A**2) @ var_y
        if allocation and n > 1:
            k = mu.size
            B = np.einsum(
                "jcm,cmk->jck",
                A.reshape(k, self.cohorts, self.m),
                X0.reshape(self.cohorts, self.m, k),
            )
            R = n * np.diag(sizes) - np.outer(sizes, sizes)
            M = n * np.diag(mu) - np.outer(mu, mu)
            variance = variance + np.einsum("jck,cd,kl,jdl->j", B, R, M, B) / (n**2 * (n - 1))
        return np.asarray(variance)

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
