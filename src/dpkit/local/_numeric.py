"""Local-DP means of bounded numeric values: Duchi et al., the piecewise mechanism, the hybrid.

Values are declared to lie in [lower, upper] (public). Out-of-range values are clamped, NaN maps
to the midpoint (lower + upper)/2, ±inf clamp to the nearest end: the client never raises on its
value, so whether a report is produced never depends on the data. Inside, a value x becomes
t = (2x - lower - upper)/(upper - lower) ∈ [-1, 1], rounded to the nearest multiple of 2^-32
(a deterministic, public pre-processing: privacy holds for every t, and the rounding moves the
mean by at most 2^-33 of the half-range).

Every output is discrete and every coin exact (dpkit.noise): Duchi's output is ±1; the
piecewise mechanism releases one of M cells of [-1, 1] (a discretised PM, below), so the
"continuous" mechanism is sampled on a grid with exactly computed probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, fraction_of
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.local._core import Reports, check_local_epsilon, check_reports
from dpkit.noise import bernoulli, bernoulli_exp, bernoulli_logistic, random_words, uniform_integers

__all__ = ["DuchiMean", "HybridMean", "MeanEstimate", "PiecewiseMean"]

_SCALE = 1 << 32


@dataclass(frozen=True, slots=True)
class MeanEstimate:
    """An unbiased estimate of the mean of the clients' (clamped) values.

    Attributes:
        value: the estimate, in the values' units (raw: it can fall outside [lower, upper]).
        variance: the analytic variance at the worst case over values (t = 0 for Duchi and
            the hybrid, t = ±1 for the piecewise mechanism), in the values' units squared.
        n: the number of reports.
    """

    value: float
    variance: float
    n: int

    @property
    def standard_error(self) -> float:
        return math.sqrt(self.variance)


class _NumericMean:
    name = "numeric"

    def __init__(self, epsilon: Number, lower: Number, upper: Number) -> None:
        self.epsilon: Fraction = check_local_epsilon(epsilon)
        self.lower = fraction_of("lower", lower)
        self.upper = fraction_of("upper", upper)
        if not self.lower < self.upper:
            raise InvalidParameterError("upper", upper, f"> lower = {lower}")

    @property
    def loss(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def signature(self) -> tuple[Any, ...]:
        return (self.name, self.epsilon, self.lower, self.upper, *self._parameters())

    def _parameters(self) -> tuple[Any, ...]:
        return ()

    def unit(self, values: Any) -> np.ndarray:
        """Clamp/map values to t ∈ [-1, 1] on the 2^-32 grid, as int64 numerators k (t = k/2^32).

        NaN → the midpoint (t = 0); ±inf and out-of-range values → the nearest end. Never
        raises on the values themselves (only on a non-numeric array, a schema error).
        """
        try:
            x = np.asarray(values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise InvalidDataError("values", "must be numbers") from None
        lo, hi = float(self.lower), float(self.upper)
        x = np.where(np.isnan(x), (lo + hi) / 2, x)
        x = np.clip(x, lo, hi)
        t = (2 * x - lo - hi) / (hi - lo)
        return np.clip(np.rint(t * _SCALE), -_SCALE, _SCALE).astype(np.int64)

    def to_units(self, t: float) -> float:
        lo, hi = float(self.lower), float(self.upper)
        return lo + (t + 1) * (hi - lo) / 2

    def randomize(self, values: Any) -> Reports:
        k = self.unit(values)
        return Reports(self.signature, self._randomize(k), int(k.size))

    def _randomize(self, k: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _t_hat(self, reports: Reports) -> np.ndarray:
        raise NotImplementedError

    def unit_variance(self, t: Any) -> Any:
        raise NotImplementedError

    def estimate_mean(self, reports: Reports) -> MeanEstimate:
        """The unbiased mean (in the values' units) and its worst-case analytic variance."""
        checked = check_reports(reports, self.signature)
        t_hat = self._t_hat(checked)
        half = (float(self.upper) - float(self.lower)) / 2
        worst = float(np.max(self.unit_variance(np.array([-1.0, 0.0, 1.0]))))
        return MeanEstimate(
            self.to_units(float(t_hat.mean())), worst * half**2 / checked.n, checked.n
        )

    def variance(self, values: Any) -> float:
        """The exact variance of the mean estimate (values' units²) for this population."""
        k = self.unit(values)
        half = (float(self.upper) - float(self.lower)) / 2
        return float(np.sum(self.unit_variance(k / _SCALE))) * half**2 / k.size**2


def _bernoulli_dyadic(numerators: np.ndarray, bits: int = 32) -> np.ndarray:
    """Bernoulli(k/2^bits) for each k in [0, 2^bits], exactly: the top ``bits`` bits of a
    uniform 64-bit word (:func:`dpkit.noise.random_words`), read as an integer, are below k."""
    words = np.asarray(random_words(numerators.size), dtype=np.uint64) >> np.uint64(64 - bits)
    return words.astype(np.int64) < numerators


class DuchiMean(_NumericMean):
    """Duchi, Jordan & Wainwright (2018, JASA), one-dimensional: the client reports
    ±B with P(+B) = 1/2 + t(e^ε-1)/(2(e^ε+1)), B = (e^ε+1)/(e^ε-1) (the report is stored as ±1).

    Sampling (exact): with probability |t| report sign(t) by binary randomized response
    (kept with probability e^ε/(e^ε+1), :func:`dpkit.noise.bernoulli_logistic`), otherwise a
    fair ±1; this mixture has exactly the probabilities above.

    ε: exactly ε: P(+1|t)/P(+1|t') <= P(+1|1)/P(+1|-1) = e^ε.

    Variance of one de-biased report t̂ = B·(±1): B² - t² (≤ B² at t = 0).
    """

    name = "duchi"

    @property
    def B(self) -> float:
        e = math.exp(float(self.epsilon))
        return (e + 1) / (e - 1)

    def _randomize(self, k: np.ndarray) -> dict[str, np.ndarray]:
        n = k.size
        informative = _bernoulli_dyadic(np.abs(k))
        keep = np.asarray(bernoulli_logistic(Fraction(1), self.epsilon, n), dtype=bool)
        fair = np.asarray(bernoulli(Fraction(1, 2), n), dtype=bool)
        sign = np.where(k >= 0, 1, -1)
        out = np.where(informative, np.where(keep, sign, -sign), np.where(fair, 1, -1))
        return {"sign": out.astype(np.int8)}

    def _t_hat(self, reports: Reports) -> np.ndarray:
        s = reports.arrays["sign"]
        if not np.all(np.abs(s) == 1):
            raise InvalidDataError("reports", "Duchi reports must be ±1")
        return self.B * s.astype(np.float64)

    def unit_variance(self, t: Any) -> Any:
        return self.B**2 - np.asarray(t, dtype=np.float64) ** 2

    def outputs(self) -> list[int]:
        return [-1, 1]

    def output_pmf(self, t: float) -> np.ndarray:
        e = math.exp(float(self.epsilon))
        plus = 0.5 + t * (e - 1) / (2 * (e + 1))
        return np.array([1 - plus, plus])


class PiecewiseMean(_NumericMean):
    """The piecewise mechanism (Wang, Xiao, Yang, Zhao, Hui, Shin, Shin & Yu, ICDE 2019),
    discretised so that it is sampled exactly.

    [-1, 1] is cut into M equal cells (centres o_j). For input t the client picks a window of
    W consecutive cells starting at s, where s is σ(t) = (t+1)(M-W)/2 rounded randomly (up
    with probability frac(σ), an exact dyadic coin), and reports a cell: uniform in the window
    with probability P_in = W e^ε/(W e^ε + M - W) (one exact
    :func:`dpkit.noise.bernoulli_logistic` draw), uniform outside it otherwise. W ≈
    M(C-1)/(2C) with C = (e^{ε/2}+1)/(e^{ε/2}-1) mirrors the continuous PM (window C-1 out of
    2C, P_in → e^{ε/2}/(e^{ε/2}+1)).

    ε: exactly ε. For every window, a cell has probability P_in/W inside and
    (1-P_in)/(M-W) outside, ratio e^ε; the randomised start mixes two such distributions,
    which stays within the same bounds.

    Unbiasedness: E[o | s] = κ·m_in(s) with κ = P_in - (1-P_in)W/(M-W) and m_in the window's
    mean cell, and E[m_in(s)] = t(M-W)/M, so t̂ = o·M/(κ(M-W)) is unbiased.

    Variance: computed exactly from the cell probabilities (:meth:`unit_variance`); it is
    largest at |t| = 1 and about the continuous PM's (t²/(e^{ε/2}-1) + (e^{ε/2}+3)/(3(e^{ε/2}-1)²)).
    """

    name = "piecewise"

    def __init__(self, epsilon: Number, lower: Number, upper: Number, cells: int = 1024) -> None:
        super().__init__(epsilon, lower, upper)
        if isinstance(cells, bool) or not isinstance(cells, int) or not 4 <= cells <= 1 << 20:
            raise InvalidParameterError("cells", cells, "an integer in [4, 2^20]")
        self.M = cells
        half = math.exp(float(self.epsilon) / 2)
        c = (half + 1) / (half - 1)
        self.W = int(min(cells - 1, max(1, round(cells * (c - 1) / (2 * c)))))
        e = math.exp(float(self.epsilon))
        self.p_in = self.W * e / (self.W * e + cells - self.W)
        self.kappa = self.p_in - (1 - self.p_in) * self.W / (cells - self.W)
        self.centres = -1 + (2 * np.arange(cells) + 1) / cells

    def _parameters(self) -> tuple[Any, ...]:
        return (self.M, self.W)

    def _starts(self, k: np.ndarray) -> np.ndarray:
        """The randomised window start: σ = (t+1)(M-W)/2 = (k + 2^32)(M-W)/2^33, rounded up with
        probability frac(σ), exactly (σ·2^33 is an integer below 2^53)."""
        scaled = (k + _SCALE) * (self.M - self.W)
        base, rest = np.divmod(scaled, 2 * _SCALE)
        return np.asarray(base + _bernoulli_dyadic(rest, 33), dtype=np.int64)

    def _randomize(self, k: np.ndarray) -> dict[str, np.ndarray]:
        n = k.size
        s = self._starts(k)
        inside = np.asarray(
            bernoulli_logistic(Fraction(self.M - self.W, self.W), self.epsilon, n), dtype=bool
        )
        pos_in = np.asarray(uniform_integers(self.W, n), dtype=np.int64)
        pos_out = np.asarray(uniform_integers(self.M - self.W, n), dtype=np.int64)
        out_cell = np.where(pos_out < s, pos_out, pos_out + self.W)
        cell = np.where(inside, s + pos_in, out_cell)
        return {"cell": cell.astype(np.int32)}

    def _t_hat(self, reports: Reports) -> np.ndarray:
        cell = reports.arrays["cell"].astype(np.int64)
        if cell.size and (int(cell.min()) < 0 or int(cell.max()) >= self.M):
            raise InvalidDataError("reports", "a piecewise report is outside the cells")
        return self.centres[cell] * self.M / (self.kappa * (self.M - self.W))

    def _start_pmf(self, t: float) -> tuple[int, float]:
        sigma = (t + 1) * (self.M - self.W) / 2
        base = math.floor(sigma)
        return base, sigma - base

    def output_pmf(self, t: float) -> np.ndarray:
        base, frac = self._start_pmf(t)
        j = np.arange(self.M)
        out = np.zeros(self.M)
        for s, w in ((base, 1 - frac), (base + 1, frac)):
            if w == 0 or s > self.M - self.W:
                continue
            inside = (j >= s) & (j < s + self.W)
            out += w * np.where(inside, self.p_in / self.W, (1 - self.p_in) / (self.M - self.W))
        return out

    def outputs(self) -> list[int]:
        return list(range(self.M))

    def unit_variance(self, t: Any) -> Any:
        ts = np.atleast_1d(np.asarray(t, dtype=np.float64))
        scale = self.M / (self.kappa * (self.M - self.W))
        sq = np.r_[0.0, np.cumsum(self.centres**2)]
        total = sq[-1]
        sigma = (ts + 1) * (self.M - self.W) / 2
        base = np.floor(sigma)
        frac = sigma - base
        second = np.zeros_like(ts)
        for s, w in ((base, 1 - frac), (np.minimum(base + 1, self.M - self.W), frac)):
            si = s.astype(np.int64)
            inside = sq[si + self.W] - sq[si]
            second += w * (
                self.p_in * inside / self.W + (1 - self.p_in) * (total - inside) / (self.M - self.W)
            )
        out = scale**2 * second - ts**2
        return out if np.ndim(t) else float(out[0])


class HybridMean(_NumericMean):
    """The hybrid mechanism (Wang et al., ICDE 2019): for ε > 0.61, with probability
    α = 1 - e^{-ε/2} (an exact :func:`dpkit.noise.bernoulli_exp` coin, independent of the value)
    use the piecewise mechanism, otherwise Duchi's; for ε <= 0.61 always Duchi's.

    ε: exactly ε (a data-independent mixture of two ε-DP reports).
    Variance: α·Var_PM(t) + (1-α)·Var_Duchi(t) per report (both branches are unbiased).
    """

    name = "hybrid"

    def __init__(self, epsilon: Number, lower: Number, upper: Number, cells: int = 1024) -> None:
        super().__init__(epsilon, lower, upper)
        self.pm = PiecewiseMean(epsilon, lower, upper, cells)
        self.duchi = DuchiMean(epsilon, lower, upper)
        self.use_pm = self.epsilon > Fraction(61, 100)
        self.alpha = 1 - math.exp(-float(self.epsilon) / 2) if self.use_pm else 0.0

    def _parameters(self) -> tuple[Any, ...]:
        return (self.pm.M,)

    def _randomize(self, k: np.ndarray) -> dict[str, np.ndarray]:
        n = k.size
        if self.use_pm:
            duchi = np.asarray(bernoulli_exp(self.epsilon / 2, n), dtype=bool)
        else:
            duchi = np.ones(n, dtype=bool)
        value = np.zeros(n, dtype=np.int32)
        value[duchi] = self.duchi._randomize(k[duchi])["sign"]
        value[~duchi] = self.pm._randomize(k[~duchi])["cell"]
        return {"piecewise": ~duchi, "value": value}

    def _t_hat(self, reports: Reports) -> np.ndarray:
        pm = reports.arrays["piecewise"].astype(bool)
        value = reports.arrays["value"]
        out = np.empty(value.size)
        sub = {"sign": value[~pm].astype(np.int8)}
        out[~pm] = self.duchi._t_hat(Reports(self.duchi.signature, sub, int((~pm).sum())))
        cells = {"cell": value[pm]}
        out[pm] = self.pm._t_hat(Reports(self.pm.signature, cells, int(pm.sum())))
        return out

    def unit_variance(self, t: Any) -> Any:
        return self.alpha * np.asarray(self.pm.unit_variance(t)) + (1 - self.alpha) * np.asarray(
            self.duchi.unit_variance(t)
        )

    def outputs(self) -> list[tuple[str, int]]:
        return [("duchi", -1), ("duchi", 1)] + [("pm", j) for j in range(self.pm.M)]

    def output_pmf(self, t: float) -> np.ndarray:
        return np.concatenate(
            [(1 - self.alpha) * self.duchi.output_pmf(t), self.alpha * self.pm.output_pmf(t)]
        )
