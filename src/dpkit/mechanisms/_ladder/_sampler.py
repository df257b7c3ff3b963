"""Exact sampling of the ladder's level: P(level = t) ∝ c_t·e^{-εt}, with a periodic tail.

The head levels 0..H-1 have integer point counts c_t and the tail levels H, H+1, ... all have
count c_H, so the categories are 0..H-1 (weights w_t = c_t·e^{-εt}) and "tail"
(w_H = c_H·e^{-εH}/(1 - e^{-ε})); a tail draw adds an exact geometric J with P(J >= j) = e^{-jε}
(:func:`dpkit.noise.geometric_exp`), giving level H + J with probability ∝ c_H·e^{-ε(H+J)}.

The category is chosen by *inversion of a lazily extended uniform* (the idea of
:mod:`dpkit.noise._exact`): U ∈ [0, 1) is an infinite string of random bits, of which the top 52
are read first, so U lies in a known cell [u, u + 2^-52). The category is the i with
F_{i-1} <= U < F_i (F the cumulative distribution). In float64, F is known to within a proven
margin η; if the whole cell lies between F_{i-1} + η and F_i - η the answer is certain. Otherwise
(a fraction about 2(H+1)η of draws, below 1e-6 in practice) the same U is refined with more
random bits and compared with exact interval bounds on F computed with :mod:`decimal` at
increasing precision, until the comparison is decided. The map from the bit string to the
category is therefore exactly the ideal inversion, and the category has exactly the ideal
distribution; nothing is approximated. Weights are rational multiples of e^{-εt} with rational
ε, so the exact bounds need only exp of rationals (correctly rounded in :mod:`decimal`).

Rejection samplers were considered and rejected: proposing t from a geometric and accepting with
probability c_t/max c accepts ~c_0/max_t c_t of draws (1e-3 for V1 at large ε), and proposing
uniformly among head points accepts with probability e^{-εt}, small for large heads.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from dpkit.noise import random_words

__all__ = ["LevelSampler"]

_BITS = 52
_CELL = 2.0**-_BITS
_ONE_BITS = np.uint64(0x3FF0000000000000)

FORCE_EXACT = False
"""Tests set this to send every draw down the exact path."""


def _cell_floats(words: np.ndarray) -> np.ndarray:
    """u = (top 52 bits of each word)·2^-52 as exact float64 (bit manipulation, no rounding)."""
    bits = words >> np.uint64(64 - _BITS)
    bits |= _ONE_BITS
    u: np.ndarray = bits.view(np.float64) - 1.0
    return u


class LevelSampler:
    """Draws levels t >= 0 with P(t) ∝ counts[min(t, H)]·e^{-rate·t}, exactly.

    Args:
        counts: integer counts c_0..c_H (all >= 1); level H repeats for ever.
        rate: ε > 0, a Fraction.
    """

    def __init__(self, counts: np.ndarray, rate: Fraction) -> None:
        self.counts = [int(c) for c in counts]
        if not self.counts or min(self.counts) < 1:
            raise ValueError("counts must be a non-empty list of integers >= 1")
        self.rate = Fraction(rate)
        self.head = len(self.counts) - 1
        eps = float(self.rate)
        self._rate_float = eps
        h = self.head
        c = np.asarray(self.counts, dtype=np.float64)
        t = np.arange(h + 1, dtype=np.float64)
        log_tail = math.log(-math.expm1(-eps))
        log_w = np.log(c) - eps * t
        log_w[h] -= log_tail
        top = float(np.max(log_w))
        w = np.exp(log_w - top)
        cum = np.cumsum(w)
        alpha = float(cum[-1])
        self._cdf = cum / alpha
        self._upper = self._cdf.copy()
        self._upper[-1] = 2.0  # F_H = 1 exactly: every U < 1 is below it
        # Error of w_i (relative): the exponent ln c - εt - top is computed with absolute error
        # at most (|ln c| + εt + |log_w| + |top| + |log_tail| + 8)·2^-51 (ε's own rounding,
        # the products and sums, each within 2^-53 relative); exp adds 2^-51. Doubled for room.
        arg = np.abs(np.log(c)) + eps * t + np.abs(log_w) + abs(top) + abs(log_tail) + 8.0
        rel = 2.0 * (arg * 2.0**-51 + 2.0**-51)
        eta_w = 1.01 * float(np.sum(rel * w)) / alpha
        # F_i = W_i/α: the errors of W_i and α (each <= η_w·α plus (H+2)·2^-53 of summation),
        # and the division; doubled again.
        self._eta = 2.0 * (2.02 * eta_w + (2 * h + 8) * 2.0**-52)
        self._bounds_cache: dict[int, tuple[list[int], list[int], int]] = {}
        # guide table: _guide[j] = the first category i with F_i > j/M (M a power of two), so a
        # uniform in [j/M, (j+1)/M) below F[_guide[j]] has category _guide[j]
        cells = 1 << max(12, int(8 * (h + 1)).bit_length())
        self._cells = float(cells)
        grid = np.arange(cells, dtype=np.float64) / cells
        self._guide = np.minimum(np.searchsorted(self._cdf, grid, side="right"), h)

    @property
    def margin(self) -> float:
        """η, the certified bound on the float cdf's error."""
        return self._eta

    # ------------------------------------------------------------------ exact bounds
    def _exact_bounds(self, digits: int) -> tuple[list[int], list[int], int]:
        """Integer bounds lo_i <= W_i·2^P <= hi_i on the cumulative weights, and P.

        e^{-εt} is computed by :mod:`decimal` at ``digits`` digits (correctly rounded); rounding ε
        to those digits moves it by a factor e^{±εt·10^(1-digits)}, so the relative error is
        below r_t = 4(εt + 1)·10^(1-digits).
        """
        cached = self._bounds_cache.get(digits)
        if cached is not None:
            return cached
        scale_bits = int(digits * 3.33) + 64
        scale = 1 << scale_bits
        h = self.head
        lows: list[Fraction] = []
        highs: list[Fraction] = []
        with localcontext() as ctx:
            ctx.prec = digits
            eps_dec = Decimal(self.rate.numerator) / Decimal(self.rate.denominator)
            for t in range(h + 1):
                value = Fraction((-eps_dec * t).exp())
                r = 4 * (self.rate * t + 1) / Fraction(10) ** (digits - 1)
                lows.append(value * (1 - r))
                highs.append(value * (1 + r))
            one = Fraction((-eps_dec).exp())
            r1 = 4 * (self.rate + 1) / Fraction(10) ** (digits - 1)
        one_lo, one_hi = one * (1 - r1), one * (1 + r1)
        lo_int: list[int] = []
        hi_int: list[int] = []
        acc_lo = acc_hi = 0
        for t in range(h + 1):
            w_lo = self.counts[t] * lows[t]
            w_hi = self.counts[t] * highs[t]
            if t == h:
                w_lo = w_lo / (1 - one_lo)
                w_hi = w_hi / (1 - one_hi)
            acc_lo += math.floor(w_lo * scale)
            acc_hi += math.ceil(w_hi * scale)
            lo_int.append(acc_lo)
            hi_int.append(acc_hi)
        result = (lo_int, hi_int, scale_bits)
        self._bounds_cache[digits] = result
        return result

    def _exact_category(self, cell: int) -> int:
        """The category of U in the 52-bit cell ``cell``, drawing more bits as needed."""
        num, bits, digits = cell, _BITS, 40
        h = self.head
        while True:
            lo, hi, _ = self._exact_bounds(digits)
            alpha_lo, alpha_hi = lo[h], hi[h]
            # U < F_i for sure: (num + 1)/2^bits <= lo_i/alpha_hi
            # U >= F_i for sure: num/2^bits >= hi_i/alpha_lo
            below = [(num + 1) * alpha_hi <= (lo[i] << bits) for i in range(h)] + [True]
            first = below.index(True)
            if first == 0 or num * alpha_lo >= (hi[first - 1] << bits):
                return first
            num = (num << 64) | int(random_words(1)[0])
            bits += 64
            digits += 25

    # ------------------------------------------------------------------ sampling
    def categories(self, size: int) -> np.ndarray:
        """Categories 0..H (H means "the tail") for ``size`` fresh uniforms, exactly."""
        words = random_words(size)
        u = _cell_floats(words)
        index = self._guide[(u * self._cells).astype(np.intp)]
        again = np.flatnonzero(u >= self._cdf[index])
        if again.size:
            index[again] = np.minimum(np.searchsorted(self._cdf, u[again], side="right"), self.head)
        eta = self._eta
        upper_ok = u + _CELL <= self._upper[index] - eta
        previous = self._cdf[np.maximum(index - 1, 0)]
        lower_ok = (index == 0) | (previous + eta <= u)
        undecided = ~(upper_ok & lower_ok)
        if FORCE_EXACT:
            undecided[:] = True
        for i in np.flatnonzero(undecided):
            index[i] = self._exact_category(int(u[i] * 2.0**_BITS))
        return index.astype(np.int64)
