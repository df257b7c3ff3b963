"""Frequency oracles of the pure-ε local model (Wang, Blocki, Li & Jha 2017 framework).

Each oracle has

* a **client** side, :meth:`FrequencyOracle.randomize`: one call randomises a whole array of
  values, one per client, independently (simulating 10^6 clients is one vectorised call); every
  coin comes from :mod:`dpkit.noise`, sampled exactly;
* a **server** side, :meth:`FrequencyOracle.aggregate`: unbiased frequency estimates with
  analytic variances, without a Python loop over reports;
* its exact per-report ε (:attr:`FrequencyOracle.epsilon`, a Fraction) and, for the exact
  checks, the full output distribution of one client (:meth:`output_pmf` over
  :meth:`outputs`, for small domains).

"Support" oracles (all but CMS/HCMS/RAPPOR) share one estimator: a report *supports* value v
with probability p* if the client's value is v and q* otherwise, so with c_v supporting reports
out of n, f̂_v = (c_v/n - q*)/(p* - q*) is unbiased, and for a fixed population with true
frequency f_v its variance is exactly

    Var f̂_v = ((1 - f_v)·q*(1 - q*) + f_v·p*(1 - p*)) / (n (p* - q*)²)      (Wang et al. 2017)

because reports of different clients are independent Bernoulli supports.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number
from dpkit.core._losses import PureDP
from dpkit.errors import InternalError, InvalidDataError, InvalidParameterError
from dpkit.local._core import (
    FrequencyEstimate,
    LinearHashFamily,
    Reports,
    check_domain_size,
    check_local_epsilon,
    check_reports,
    client_values,
    is_prime,
    prime_power,
)
from dpkit.local._postprocess import postprocess as _postprocess
from dpkit.mechanisms._info import RandomizedResponseInfo
from dpkit.mechanisms._randomized_response import (
    _k_ary_response,
    frequency_variance,
    make_generalized_randomized_response,
)
from dpkit.noise import bernoulli, bernoulli_logistic, bernoulli_logistic_bytes, uniform_integers

__all__ = [
    "BinaryLocalHashing",
    "FrequencyOracle",
    "GeneralizedRR",
    "HadamardResponse",
    "LocalHashing",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "SubsetSelection",
    "SymmetricUnaryEncoding",
    "UnaryEncoding",
]

_MAX_ENUMERATED = 1 << 16
_CHUNK_BITS = 1 << 20  # bits per chunk of a bulk client or server pass (cache-sized)


class FrequencyOracle(ABC):
    """A local-DP frequency oracle over the domain {0, ..., d-1}."""

    name: str = "oracle"

    def __init__(self, d: int, epsilon: Number) -> None:
        self.d = check_domain_size(d)
        self.epsilon: Fraction = check_local_epsilon(epsilon)

    # -- public parameters
    @property
    def loss(self) -> PureDP:
        """The per-report privacy loss: pure ε-DP for each client (local DP)."""
        return PureDP(self.epsilon)

    @property
    def signature(self) -> tuple[Any, ...]:
        """Name and public parameters; reports carry it and the server checks it."""
        return (self.name, self.d, self.epsilon, *self._parameters())

    def _parameters(self) -> tuple[Any, ...]:
        return ()

    def __repr__(self) -> str:
        params = ", ".join(str(p) for p in self._parameters())
        extra = f", {params}" if params else ""
        return f"{type(self).__name__}(d={self.d}, epsilon={self.epsilon}{extra})"

    # -- client
    def randomize(self, values: Any) -> Reports:
        """Randomise each client's value (indices in [0, d)); one report per value.

        Raises:
            InvalidDataError: a value outside [0, d), NaN, or not an integer — before any
                randomness is drawn or anything is released.
        """
        v = client_values(values, self.d)
        return Reports(self.signature, self._randomize(v), int(v.size))

    @abstractmethod
    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]: ...

    # -- server
    def aggregate(self, reports: Reports, *, postprocess: str | None = None) -> FrequencyEstimate:
        """Unbiased frequency estimates of every domain value from the reports.

        Args:
            reports: what :meth:`randomize` returned (possibly pooled with
                :meth:`Reports.concat`).
            postprocess: ``None`` (raw, unbiased), ``"norm_sub"`` or ``"simplex"``: also
                report consistent frequencies (non-negative, summing to 1) in ``.consistent``.

        Raises:
            DomainMismatchError: reports of another oracle, ε or parameters.
        """
        checked = check_reports(reports, self.signature)
        raw = self._estimate(checked)
        clipped = np.clip(raw, 0.0, 1.0)
        return FrequencyEstimate(
            values=raw,
            variances=np.asarray(self.variance(checked.n, clipped), dtype=np.float64),
            n=checked.n,
            oracle=self.name,
            epsilon=self.epsilon,
            consistent=_postprocess(raw, postprocess),
            postprocess=postprocess,
        )

    @abstractmethod
    def _estimate(self, reports: Reports) -> np.ndarray: ...

    @abstractmethod
    def variance(self, n: int, f: Any = 0.0) -> Any:
        """The exact variance of f̂_v for n clients of whom a fraction f hold v."""

    # -- exact distribution (for the privacy checks)
    @abstractmethod
    def outputs(self) -> list[Any]:
        """Every possible report of one client (small domains only)."""

    @abstractmethod
    def output_pmf(self, value: int) -> np.ndarray:
        """P(report = o | value) for each o in :meth:`outputs`, as floats."""

    def log_weights(self, value: int) -> list[Fraction]:
        """Exact exponents λ_o with P(o | value) = C·e^{λ_o} for a constant C that depends on
        neither o nor the value (for :func:`dpkit.local.check_exact_epsilon`)."""
        raise NotImplementedError(f"{self.name} declares no exact log-weights")

    def _check_enumerable(self, count: int) -> None:
        if count > _MAX_ENUMERATED:
            raise InvalidParameterError(
                "d", self.d, f"small enough that one client has <= {_MAX_ENUMERATED} outputs"
            )


class SupportOracle(FrequencyOracle):
    """An oracle whose reports support v with probability p* (own value) or q* (any other)."""

    @property
    @abstractmethod
    def p_star(self) -> float: ...

    @property
    @abstractmethod
    def q_star(self) -> float: ...

    @abstractmethod
    def _support(self, reports: Reports) -> np.ndarray: ...

    def _estimate(self, reports: Reports) -> np.ndarray:
        counts = self._support(reports).astype(np.float64)
        p, q = self.p_star, self.q_star
        return np.asarray((counts / reports.n - q) / (p - q))

    def variance(self, n: int, f: Any = 0.0) -> Any:
        """((1 - f)·q*(1 - q*) + f·p*(1 - p*)) / (n (p* - q*)²), exact for a fixed population."""
        p, q = self.p_star, self.q_star
        f_arr = np.asarray(f, dtype=np.float64)
        out = ((1 - f_arr) * q * (1 - q) + f_arr * p * (1 - p)) / (int(n) * (p - q) ** 2)
        return float(out) if out.ndim == 0 else out


# ----------------------------------------------------------------------------- GRR
class GeneralizedRR(SupportOracle):
    """Generalized (k-ary) randomized response, "direct encoding" (Kairouz, Oh & Viswanath 2014;
    Wang et al. 2017, USENIX Security, §4.1). Wraps
    :func:`dpkit.mechanisms.make_generalized_randomized_response`, whose exact rejection sampler
    draws every report.

    ε: exactly ε per report: P(y|v) is p = e^ε/(e^ε+d-1) if y = v and q = 1/(e^ε+d-1) otherwise,
    so every likelihood ratio is e^ε, 1 or e^{-ε}.

    Variance: p* = p, q* = q; Var f̂_v = ((1-f)q(1-q) + f p(1-p))/(n(p-q)²); at f = 0,
    (e^ε + d - 2)/(n(e^ε - 1)²). Best when d < 3e^ε + 2.
    """

    name = "grr"

    def __init__(self, d: int, epsilon: Number) -> None:
        super().__init__(d, epsilon)
        self._measurement = make_generalized_randomized_response(self.d, self.epsilon)

    def _info(self) -> RandomizedResponseInfo:
        info = self._measurement.info
        if not isinstance(info, RandomizedResponseInfo):  # pragma: no cover - internal
            raise InternalError("expected randomized response info", charged=False)
        return info

    @property
    def p_star(self) -> float:
        p = self._info().truth_probability
        if p is None:  # pragma: no cover - generalized RR always states it
            raise InternalError("generalized randomized response states no p", charged=False)
        return float(p)

    @property
    def q_star(self) -> float:
        q = self._info().other_probability
        if q is None:  # pragma: no cover - generalized RR always states it
            raise InternalError("generalized randomized response states no q", charged=False)
        return float(q)

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        return {"value": np.asarray(self._measurement(values), dtype=np.int64)}

    def _support(self, reports: Reports) -> np.ndarray:
        y = reports.arrays["value"]
        if y.size and (int(y.min()) < 0 or int(y.max()) >= self.d):
            raise InvalidDataError("reports", f"a GRR report is outside [0, {self.d})")
        return np.bincount(y, minlength=self.d)

    def variance(self, n: int, f: Any = 0.0) -> Any:
        f_arr = np.asarray(f, dtype=np.float64)
        if f_arr.ndim == 0:
            return frequency_variance(float(f_arr), int(n), self.d, self.epsilon)
        return super().variance(n, f_arr)

    def outputs(self) -> list[Any]:
        return list(range(self.d))

    def output_pmf(self, value: int) -> np.ndarray:
        pmf = self._info().output_pmf
        if pmf is None:  # pragma: no cover - generalized RR always states its probabilities
            raise InternalError(
                "generalized randomized response states no output_pmf", charged=False
            )
        return np.asarray(pmf(int(value)))

    def log_weights(self, value: int) -> list[Fraction]:
        """P(y | v) = e^{ε·[y = v]}/(e^ε + d - 1)."""
        return [self.epsilon if y == int(value) else Fraction(0) for y in range(self.d)]


# ----------------------------------------------------------------------------- unary encoding
class _Coin:
    """Bernoulli(1/(1 + r·e^{-γ})), or its complement; r, γ rational: drawn exactly with
    :func:`dpkit.noise.bernoulli_logistic_bytes` (about one random byte per coin, the same
    exact inversion as :func:`dpkit.noise.bernoulli_logistic`; docs/noise.md, "Bulk coins"), or
    :func:`dpkit.noise.bernoulli` for r = 1, γ = 0, i.e. 1/2."""

    def __init__(self, ratio: Fraction, gamma: Fraction, complement: bool = False) -> None:
        self.ratio, self.gamma, self.complement = ratio, gamma, complement

    @property
    def probability(self) -> float:
        p = 1.0 / (1.0 + float(self.ratio) * math.exp(-float(self.gamma)))
        return 1.0 - p if self.complement else p

    def log_weight(self, outcome: bool) -> Fraction:
        """P(outcome) = e^{λ}/(1 + e^{γ}) for ratio 1: λ = γ for the likelier outcome, else 0."""
        if self.ratio != 1:
            raise ValueError("exact log-weights need ratio 1")
        return self.gamma if outcome != self.complement else Fraction(0)

    def draw(self, size: int, out: np.ndarray | None = None) -> np.ndarray:
        """``size`` coins, written into ``out`` (a contiguous bool array) if given."""
        if self.ratio == 1 and self.gamma == 0:
            fair = np.asarray(bernoulli(Fraction(1, 2), size), dtype=bool)
            if out is None:
                out = np.empty(size, dtype=bool)
            return np.not_equal(fair, self.complement, out=out)
        return bernoulli_logistic_bytes(
            self.ratio, self.gamma, size, complement=self.complement, out=out
        )


class UnaryEncoding(SupportOracle):
    """Unary encoding (basic RAPPOR without a Bloom filter; Wang et al. 2017, §4.2): the client
    one-hot encodes v as d bits and reports each bit independently: a 1 stays 1 with
    probability p, a 0 becomes 1 with probability q.

    ε: exactly ln(p(1-q)/((1-p)q)) per report (two bits differ between any two values).
    Variance: p* = p, q* = q in the support formula.

    Use :class:`SymmetricUnaryEncoding` (SUE) or :class:`OptimizedUnaryEncoding` (OUE).
    Reports are n×d bits: O(n·d) work on both sides; each bit is one exact coin of about one
    random byte (:func:`dpkit.noise.bernoulli_logistic_bytes`).

    Args:
        packed: return each report's d bits packed into ⌈d/8⌉ bytes (``np.packbits``, little
            bit order) instead of d bools: 8× less memory, and the client works in
            cache-sized chunks. The server reads either layout (by dtype); the layout is not a
            privacy parameter, so it is not part of the signature.
    """

    name = "ue"

    def __init__(self, d: int, epsilon: Number, *, packed: bool = False) -> None:
        super().__init__(d, epsilon)
        if not isinstance(packed, bool):
            raise InvalidParameterError("packed", packed, "True or False")
        self.packed = packed
        self._one, self._zero = self._coins()

    def _coins(self) -> tuple[_Coin, _Coin]:
        raise NotImplementedError

    @property
    def p_star(self) -> float:
        return self._one.probability

    @property
    def q_star(self) -> float:
        return self._zero.probability

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        n, d = values.size, self.d
        ones = self._one.draw(n)
        if not self.packed:
            bits = self._zero.draw(n * d).reshape(n, d)
            bits[np.arange(n), values] = ones
            return {"bits": bits}
        out = np.empty((n, (d + 7) // 8), dtype=np.uint8)
        rows = max(1, _CHUNK_BITS // d)
        buffer = np.empty(min(n, rows) * d, dtype=bool)  # reused: stays in cache
        for start in range(0, n, rows):  # chunks of ~2^20 bits, not single reports
            stop = min(n, start + rows)
            size = (stop - start) * d
            bits = self._zero.draw(size, out=buffer[:size]).reshape(stop - start, d)
            bits[np.arange(stop - start), values[start:stop]] = ones[start:stop]
            out[start:stop] = np.packbits(bits, axis=1, bitorder="little")
        return {"bits": out}

    def _support(self, reports: Reports) -> np.ndarray:
        bits = reports.arrays["bits"]
        if bits.ndim == 2 and bits.dtype == bool and bits.shape[1] == self.d:
            return bits.sum(axis=0)
        width = (self.d + 7) // 8
        if bits.ndim != 2 or bits.dtype != np.uint8 or bits.shape[1] != width:
            raise InvalidDataError(
                "reports", f"unary reports must be n×{self.d} bools or n×{width} packed bytes"
            )
        total = np.zeros(self.d, dtype=np.int64)
        rows = max(1, _CHUNK_BITS // self.d)
        for start in range(0, bits.shape[0], rows):  # chunks of rows, not single reports
            chunk = np.unpackbits(bits[start : start + rows], axis=1, bitorder="little")
            total += chunk[:, : self.d].sum(axis=0, dtype=np.int64)
        return total

    def outputs(self) -> list[Any]:
        self._check_enumerable(1 << self.d)
        return list(range(1 << self.d))

    def output_pmf(self, value: int) -> np.ndarray:
        self._check_enumerable(1 << self.d)
        o = np.arange(1 << self.d)
        bits = (o[:, None] >> np.arange(self.d)) & 1
        p1 = np.full(self.d, self.q_star)
        p1[int(value)] = self.p_star
        return np.prod(np.where(bits == 1, p1, 1 - p1), axis=1)

    def log_weights(self, value: int) -> list[Fraction]:
        """Bits are independent: λ_o = Σ_i λ(bit_i) with the one-coin at v, zero-coins else."""
        self._check_enumerable(1 << self.d)
        out = []
        for o in range(1 << self.d):
            total = Fraction(0)
            for i in range(self.d):  # tiny enumeration for the exact check only
                coin = self._one if i == int(value) else self._zero
                total += coin.log_weight(bool((o >> i) & 1))
            out.append(total)
        return out


class SymmetricUnaryEncoding(UnaryEncoding):
    """SUE (basic one-time RAPPOR; Erlingsson et al. 2014, Wang et al. 2017 §4.2):
    p = e^{ε/2}/(e^{ε/2}+1), q = 1 - p.

    ε: exactly ε. Variance at f = 0: e^{ε/2}/(n(e^{ε/2}-1)²).
    """

    name = "sue"

    def _coins(self) -> tuple[_Coin, _Coin]:
        half = self.epsilon / 2
        return _Coin(Fraction(1), half), _Coin(Fraction(1), half, complement=True)


class OptimizedUnaryEncoding(UnaryEncoding):
    """OUE (Wang et al. 2017, §4.2): p = 1/2, q = 1/(e^ε+1); minimises the variance at f = 0.

    ε: exactly ε (ratio p(1-q)/((1-p)q) = e^ε). Variance at f = 0: 4e^ε/(n(e^ε-1)²), the same as
    OLH, independent of d; reports are d bits.
    """

    name = "oue"

    def _coins(self) -> tuple[_Coin, _Coin]:
        return _Coin(Fraction(1), Fraction(0)), _Coin(Fraction(1), self.epsilon, complement=True)


# ----------------------------------------------------------------------------- local hashing
class LocalHashing(SupportOracle):
    """Local hashing (Wang et al. 2017, §4.4; Bassily & Smith 2015 for g = 2): the client draws a
    public hash h_a from :class:`~dpkit.local._core.LinearHashFamily` (seed a uniform over its
    g^L members), and reports (a, y) where y is k-ary randomized response over [g] of h_a(v)
    (the exact sampler of :func:`dpkit.mechanisms.make_generalized_randomized_response`).

    ε: exactly ε per report, for every fixed seed and with the seed drawn as part of the report
    (the seed is independent of v, so P(a, y | v) = P(y | h_a(v))/g^L and the ratios are those of
    g-ary RR: e^ε, 1, e^{-ε}).

    Variance: a report supports v when y = h_a(v): p* = e^ε/(e^ε+g-1) for the client's own value;
    for any other value q* = 1/g *exactly*, because the family has collision probability exactly
    1/g (so the bounded family costs no accuracy):
    Var f̂_v = ((1-f)(1/g)(1-1/g) + f p*(1-p*)) / (n (p* - 1/g)²).
    At f = 0 and g = e^ε + 1 this is 4e^ε/(n(e^ε-1)²) (OLH); g must be prime here, so OLH uses the
    prime g with the smallest variance (a few percent at most above the real-valued optimum).

    Server: the reports are counted into a g^L × g table by (seed, y) with one ``np.bincount``,
    and the supports of all d values are read off with one FFT over GF(g)^{L+1}
    (:meth:`LinearHashFamily.family_sum`): O(n + g^{L+1} log g^{L+1} + d·g), no n×d table. For
    domains too large for the table, pass ``candidates`` to :meth:`aggregate_candidates`.
    """

    name = "lh"

    def __init__(self, d: int, epsilon: Number, g: int) -> None:
        super().__init__(d, epsilon)
        if isinstance(g, bool) or not isinstance(g, int | np.integer):
            raise InvalidParameterError("g", g, "a prime or prime power >= 2 (the hash range)")
        self.g = int(g)
        self.family = LinearHashFamily.for_domain(self.d, self.g)

    def _parameters(self) -> tuple[Any, ...]:
        return (self.g, self.family.length)

    @property
    def p_star(self) -> float:
        e = math.exp(float(self.epsilon))
        return e / (e + self.g - 1)

    @property
    def q_star(self) -> float:
        return 1.0 / self.g

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        seeds = np.asarray(uniform_integers(self.family.size, values.size), dtype=np.int64)
        hashed = self.family.evaluate(seeds, values)
        y = _k_ary_response(hashed, self.g, self.epsilon)
        return {"seed": seeds, "value": y}

    def _check_columns(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        seeds, y = reports.arrays["seed"], reports.arrays["value"]
        if (seeds.size and (int(seeds.min()) < 0 or int(seeds.max()) >= self.family.size)) or (
            y.size and (int(y.min()) < 0 or int(y.max()) >= self.g)
        ):
            raise InvalidDataError("reports", "a seed or hashed value is out of range")
        return seeds.astype(np.int64), y.astype(np.int64)

    def _support(self, reports: Reports) -> np.ndarray:
        seeds, y = self._check_columns(reports)
        if not self.family.table_fits(d=self.d):
            raise InvalidParameterError(
                "d",
                self.d,
                "small enough for the g^{L+1} table",
                "Use aggregate_candidates(reports, candidates) for very large domains.",
            )
        table = np.bincount(seeds * self.g + y, minlength=self.family.size * self.g)
        table = table.reshape(self.family.size, self.g)
        support = self.family.family_sum(table, np.arange(self.d))
        return np.rint(support)  # the supports are integers; the FFT's error is far below 1/2

    def candidate_support(self, reports: Reports, candidates: np.ndarray) -> np.ndarray:
        """Supports of the given candidate values, by chunked exact matmuls (no n×d table)."""
        seeds, y = self._check_columns(check_reports(reports, self.signature))
        cand = client_values(candidates, self.d, "candidates")
        out = np.zeros(cand.size, dtype=np.int64)
        chunk = max(1, (1 << 22) // max(cand.size, 1))
        for start in range(0, seeds.size, chunk):  # chunks of ~4M cells, not single reports
            hashed = self.family.evaluate_outer(seeds[start : start + chunk], cand)
            out += (hashed == y[start : start + chunk, None]).sum(axis=0)
        return out

    def aggregate_candidates(self, reports: Reports, candidates: Any) -> FrequencyEstimate:
        """Estimates for the given candidate values only (any domain size)."""
        checked = check_reports(reports, self.signature)
        cand = client_values(candidates, self.d, "candidates")
        counts = self.candidate_support(checked, cand).astype(np.float64)
        raw = (counts / checked.n - self.q_star) / (self.p_star - self.q_star)
        return FrequencyEstimate(
            values=raw,
            variances=np.asarray(self.variance(checked.n, np.clip(raw, 0, 1))),
            n=checked.n,
            oracle=self.name,
            epsilon=self.epsilon,
            candidates=cand,
        )

    def outputs(self) -> list[Any]:
        self._check_enumerable(self.family.size * self.g)
        return [(a, y) for a in range(self.family.size) for y in range(self.g)]

    def output_pmf(self, value: int) -> np.ndarray:
        """With the seed part of the report: P(a, y | v) = P_RR(y | h_a(v)) / g^L."""
        self._check_enumerable(self.family.size * self.g)
        seeds = np.arange(self.family.size)
        hashed = self.family.evaluate(seeds, np.full(seeds.size, int(value)))
        return (self.fixed_seed_pmf(hashed)).reshape(-1) / self.family.size

    def log_weights(self, value: int) -> list[Fraction]:
        """P(a, y | v) = e^{ε·[y = h_a(v)]}/(g^L(e^ε + g - 1))."""
        self._check_enumerable(self.family.size * self.g)
        seeds = np.arange(self.family.size)
        hashed = self.family.evaluate(seeds, np.full(seeds.size, int(value))).tolist()
        return [
            self.epsilon if y == hashed[a] else Fraction(0)
            for a in range(self.family.size)
            for y in range(self.g)
        ]

    def fixed_seed_pmf(self, hashed: np.ndarray) -> np.ndarray:
        """P(y | h_a(v) = hashed) for each row: g-ary RR over [g]."""
        e = math.exp(float(self.epsilon))
        out = np.full((np.size(hashed), self.g), 1.0 / (e + self.g - 1))
        out[np.arange(np.size(hashed)), np.asarray(hashed).reshape(-1)] = e / (e + self.g - 1)
        return out


def optimal_g(epsilon: Fraction, d: int) -> int:
    """The prime or prime power g (<= 256) minimising the local-hashing variance at f = 0 for
    which the server's table stays small, else :func:`optimal_prime_g`."""
    e = math.exp(float(epsilon))

    def var(g: int) -> float:
        p, q = e / (e + g - 1), 1.0 / g
        return q * (1 - q) / (p - q) ** 2

    candidates = [
        g
        for g in range(2, min(256, int(2 * (e + 1)) + 3) + 1)
        if is_prime(g)
        or (prime_power(g) is not None and LinearHashFamily.for_domain(d, g).table_fits(d=d))
    ]
    return min(candidates, key=var) if candidates else optimal_prime_g(epsilon)


def optimal_prime_g(epsilon: Fraction) -> int:
    """The prime g minimising the local-hashing variance at f = 0, g in [2, ~2(e^ε + 1)]."""
    e = math.exp(float(epsilon))

    def var(g: int) -> float:
        p, q = e / (e + g - 1), 1.0 / g
        return q * (1 - q) / (p - q) ** 2

    candidates = [g for g in range(2, int(2 * (e + 1)) + 3) if is_prime(g)]
    return min(candidates, key=var)


class OptimizedLocalHashing(LocalHashing):
    """OLH (Wang et al. 2017, §4.4): local hashing with g ≈ e^ε + 1 (the best prime or prime
    power whose table fits; e.g. g = 8 = 2^3 at ε = 2, as in Wang et al.).

    ε: exactly ε. Variance at f = 0: q*(1-q*)/(n(p*-q*)²) with q* = 1/g, p* = e^ε/(e^ε+g-1);
    4e^ε/(n(e^ε-1)²) for g = e^ε + 1. Reports are (seed, y): O(log d + log g) bits.
    """

    name = "olh"

    def __init__(self, d: int, epsilon: Number) -> None:
        eps = check_local_epsilon(epsilon)
        size = check_domain_size(d)
        super().__init__(size, eps, optimal_g(eps, size))


class BinaryLocalHashing(LocalHashing):
    """BLH (Bassily & Smith 2015; Wang et al. 2017 §4.4): local hashing with g = 2.

    ε: exactly ε. Variance at f = 0: (e^ε+1)²/(n(e^ε-1)²).
    """

    name = "blh"

    def __init__(self, d: int, epsilon: Number) -> None:
        super().__init__(d, epsilon, 2)


# ----------------------------------------------------------------------------- Hadamard response
def fwht(x: np.ndarray) -> np.ndarray:
    """Fast Walsh–Hadamard transform along the last axis (length a power of 2), unnormalised:
    out[..., i] = Σ_j (-1)^{popcount(i & j)} x[..., j]."""
    a = np.array(x, dtype=np.float64)
    k = a.shape[-1]
    lead = a.shape[:-1]
    h = 1
    while h < k:  # log2(k) butterfly rounds
        a = a.reshape(*lead, k // (2 * h), 2, h)
        top, bottom = a[..., 0, :], a[..., 1, :]
        a = np.stack([top + bottom, top - bottom], axis=-2).reshape(*lead, k)
        h *= 2
    return a


class HadamardResponse(SupportOracle):
    """Hadamard response (Acharya, Sun & Zhang 2019, AISTATS), the one-bit-per-block variant:
    with K the smallest power of 2 above d, value v owns the half C_v = {j ∈ [K] :
    popcount((v+1) & j) even} of the K columns of the Hadamard matrix (row v+1 skips the
    all-ones row). The client reports j ∈ [K]: uniform on C_v with probability e^ε/(e^ε+1),
    uniform on its complement otherwise.

    ε: exactly ε: P(j | v) is 2e^ε/(K(e^ε+1)) on C_v and 2/(K(e^ε+1)) off it.

    Variance: any two sets C_u, C_v (u ≠ v) meet in exactly K/4 columns, so q* = 1/2 exactly
    and p* = e^ε/(e^ε+1): Var f̂_v = ((1-f)/4 + f p*(1-p*))/(n (p* - 1/2)²); at f = 0,
    (e^ε+1)²/(n(e^ε-1)²), like BLH, with log2 K bits per report and no hashing.

    Server: counts per column (``np.bincount``) and one fast Walsh–Hadamard transform:
    |C_v ∩ reports| = (n + (H c)_{v+1})/2, O(n + K log K).
    """

    name = "hr"

    def __init__(self, d: int, epsilon: Number) -> None:
        super().__init__(d, epsilon)
        self.K = 1 << int(self.d).bit_length()  # K > d, so rows 1..d exist

    def _parameters(self) -> tuple[Any, ...]:
        return (self.K,)

    @property
    def p_star(self) -> float:
        return 1.0 / (1.0 + math.exp(-float(self.epsilon)))

    @property
    def q_star(self) -> float:
        return 0.5

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        n = values.size
        inside = np.asarray(bernoulli_logistic(Fraction(1), self.epsilon, n), dtype=bool)
        j = np.asarray(uniform_integers(self.K, n), dtype=np.int64)
        row = values + 1
        parity = np.bitwise_count(row & j).astype(np.int64) & 1
        want = np.where(inside, 0, 1)
        low_bit = row & -row
        # flipping the lowest set bit of the row toggles the parity: a bijection between the
        # two halves, so the result is uniform on the wanted half
        j = np.where(parity != want, j ^ low_bit, j)
        return {"value": j}

    def _support(self, reports: Reports) -> np.ndarray:
        j = reports.arrays["value"]
        if j.size and (int(j.min()) < 0 or int(j.max()) >= self.K):
            raise InvalidDataError("reports", f"a Hadamard report is outside [0, {self.K})")
        counts = np.bincount(j, minlength=self.K).astype(np.float64)
        transformed = fwht(counts)
        return np.rint((reports.n + transformed[1 : self.d + 1]) / 2)

    def outputs(self) -> list[Any]:
        return list(range(self.K))

    def output_pmf(self, value: int) -> np.ndarray:
        e = math.exp(float(self.epsilon))
        j = np.arange(self.K)
        inside = (np.bitwise_count((int(value) + 1) & j) & 1) == 0
        return np.where(inside, 2 * e / (self.K * (e + 1)), 2 / (self.K * (e + 1)))

    def log_weights(self, value: int) -> list[Fraction]:
        """P(j | v) = 2e^{ε·[j ∈ C_v]}/(K(e^ε + 1))."""
        j = np.arange(self.K)
        inside = ((np.bitwise_count((int(value) + 1) & j) & 1) == 0).tolist()
        return [self.epsilon if x else Fraction(0) for x in inside]


# ----------------------------------------------------------------------------- subset selection
def subset_size(d: int, epsilon: Fraction) -> int:
    """k = round(d/(e^ε+1)), at least 1 and at most d - 1 (Wang et al. 2016; Ye & Barg 2018)."""
    return int(min(d - 1, max(1, round(d / (math.exp(float(epsilon)) + 1)))))


class SubsetSelection(SupportOracle):
    """k-subset selection (Wang et al. 2016, "Mutual information optimally local private
    discrete distribution estimation"; Ye & Barg 2018): the client reports a set Y of k values,
    P(Y | v) ∝ e^ε if v ∈ Y and ∝ 1 otherwise, k = round(d/(e^ε+1)).

    Sampling (exact): v is in Y with probability p* = k e^ε/(k e^ε + d - k) (one
    :func:`dpkit.noise.bernoulli_logistic` draw, ratio (d-k)/k); the other k-1 (or k) members
    are a uniform subset of the other d-1 values, drawn by Floyd's algorithm vectorised over
    clients (k rounds of exact uniform integers).

    ε: exactly ε: all sets containing v are equally likely, all others too, with ratio e^ε.

    Variance: p* above; q* = p*(k-1)/(d-1) + (1-p*)k/(d-1); support formula. Reports are k
    values: O(n k) client work (Floyd with a membership bitmap for k > 16), O(n k) server
    work (``np.bincount``).
    """

    name = "ss"

    def __init__(self, d: int, epsilon: Number, k: int | None = None) -> None:
        super().__init__(d, epsilon)
        self.k = subset_size(self.d, self.epsilon) if k is None else int(k)
        if not 1 <= self.k < self.d:
            raise InvalidParameterError("k", k, f"an integer in [1, {self.d - 1}]")

    def _parameters(self) -> tuple[Any, ...]:
        return (self.k,)

    @property
    def p_star(self) -> float:
        e = math.exp(float(self.epsilon))
        return self.k * e / (self.k * e + self.d - self.k)

    @property
    def q_star(self) -> float:
        p = self.p_star
        return p * (self.k - 1) / (self.d - 1) + (1 - p) * self.k / (self.d - 1)

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        n, k, d = values.size, self.k, self.d
        ratio = Fraction(d - k, k)
        inside = np.asarray(bernoulli_logistic(ratio, self.epsilon, n), dtype=bool)
        out = np.empty((n, k), dtype=np.int64)
        for flag, size in ((True, k - 1), (False, k)):
            rows = np.flatnonzero(inside == flag)
            others = _floyd(rows.size, d - 1, size)
            others += others >= values[rows, None]  # skip the client's own value
            if flag:
                out[rows] = np.concatenate([values[rows, None], others], axis=1)
            else:
                out[rows] = others
        out.sort(axis=1)
        return {"value": out}

    def _support(self, reports: Reports) -> np.ndarray:
        y = reports.arrays["value"]
        if y.ndim != 2 or y.shape[1] != self.k:
            raise InvalidDataError("reports", f"subset reports must be n×{self.k} values")
        if y.size and (int(y.min()) < 0 or int(y.max()) >= self.d):
            raise InvalidDataError("reports", "a reported value is outside the domain")
        return np.bincount(y.reshape(-1), minlength=self.d)

    def outputs(self) -> list[Any]:
        self._check_enumerable(math.comb(self.d, self.k))
        return list(itertools.combinations(range(self.d), self.k))

    def output_pmf(self, value: int) -> np.ndarray:
        e = math.exp(float(self.epsilon))
        sets = self.outputs()
        weights = np.array([e if value in s else 1.0 for s in sets])
        return weights / weights.sum()

    def log_weights(self, value: int) -> list[Fraction]:
        """P(Y | v) = e^{ε·[v ∈ Y]}/Z, Z the same for every v."""
        return [self.epsilon if value in s else Fraction(0) for s in self.outputs()]


def _floyd(rows: int, population: int, size: int, bitmap: bool | None = None) -> np.ndarray:
    """For each of ``rows`` clients, a uniform ``size``-subset of [0, population) (Floyd 1987):
    for j = population-size .. population-1, draw t uniform in [0, j]; add t unless already
    chosen, else add j. Vectorised over clients; ``size`` rounds. The membership test is a
    scan of the chosen columns for small subsets, a per-client bitmap over the population
    (chunks of clients, ~4M cells) for large ones: O(n·k) instead of O(n·k²)."""
    out = np.empty((rows, size), dtype=np.int64)
    if bitmap is None:
        bitmap = size > 16 and population <= 1 << 16
    if not bitmap:
        for i, j in enumerate(range(population - size, population)):
            t = np.asarray(uniform_integers(j + 1, rows), dtype=np.int64)
            taken = (out[:, :i] == t[:, None]).any(axis=1) if i else np.zeros(rows, dtype=bool)
            out[:, i] = np.where(taken, j, t)
        return out
    chunk = max(1, (1 << 22) // population)
    for start in range(0, rows, chunk):  # chunks of clients, not single clients
        stop = min(rows, start + chunk)
        index = np.arange(stop - start)
        member = np.zeros((stop - start, population), dtype=bool)
        for i, j in enumerate(range(population - size, population)):  # Floyd's rounds
            t = np.asarray(uniform_integers(j + 1, stop - start), dtype=np.int64)
            pick = np.where(member[index, t], j, t)
            member[index, pick] = True
            out[start:stop, i] = pick
    return out
