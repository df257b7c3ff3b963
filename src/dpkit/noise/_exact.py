"""Exact samplers, vectorised.

Every sampler here produces *exactly* the distribution it names — not a floating-point
approximation of it — while doing nearly all of its work in vectorised numpy.

The one idea: a uniform U in [0, 1) is an infinite string of random bits, of which we draw 52 up
front (``U ∈ [w·2⁻⁵², (w+1)·2⁻⁵²)``) and more only if needed. Each sampler is a comparison of U
with a transcendental threshold (``U < e^{-γ}`` for Bernoulli(e^{-γ}); ``⌊-t·ln U⌋`` for the
geometric). numpy evaluates the threshold in float64; with a proven error margin (``_REL``, 2^-40
relative, far above the few-ulp error of exp/log) the comparison is *certain* for the whole
52-bit cell of U for all but ~1e-9 of draws. Those rare uncertain draws are finished exactly with
the *same* U, by interval arithmetic at increasing precision (Python's ``decimal``, whose exp and
ln are correctly rounded) and by drawing further bits of U until the comparison is decided. So the
map from the infinite bit string to the output is exactly the ideal inversion, and the output has
exactly the ideal distribution. Rational parameters (``Fraction``) are used throughout the exact
path. See docs/noise.md for the argument in full, and tests/statistical for checks that force the
exact path.

Algorithms:
* Bernoulli(e^{-γ}) for rational γ >= 0: U < e^{-γ}.
* Geometric with P(X >= k) = e^{-k/t}: X = ⌊-t·ln U⌋ (inversion).
* Discrete Laplace P(Z = z) ∝ e^{-|z|/t}: sign and geometric magnitude, rejecting (-, 0)
  (Canonne, Kamath & Steinke 2020, Alg. 2's final step).
* Discrete Gaussian P(Z = z) ∝ e^{-z²/(2σ²)}: discrete Laplace proposal with t = ⌊σ⌋ + 1, accepted
  with probability e^{-(|Y| - σ²/t)²/(2σ²)} (CKS 2020, Alg. 3).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from dpkit.noise._rng import discard_words, generator, random_bytes, random_words

__all__ = [
    "bernoulli",
    "bernoulli_exp",
    "bernoulli_exp_vector",
    "bernoulli_logistic",
    "bernoulli_logistic_bytes",
    "discrete_gaussian",
    "discrete_laplace",
    "geometric_exp",
    "uniform_integers",
]

_BITS = 52
_CELL = 2.0**-_BITS
_ONE_BITS = np.uint64(0x3FF0000000000000)
_REL = 2.0**-40  # certified relative margin for float64 exp/log (true error: a few ulps, 2^-50)
_SPLIT_STEP = 256.0
_SPLIT_GAMMA = 512.0  # above this, e^{-γ} is split (float64 exp underflows near 745)
_FORCE_EXACT = False  # tests set this to send every draw down the exact path


def _cell_floats(words: np.ndarray) -> np.ndarray:
    """The low ends u = w·2⁻⁵² of the cells of the top 52 bits of ``words``, as exact float64.

    Built by bit manipulation (exponent of 1.0, mantissa = the 52 bits, minus 1.0): no rounding.
    The low 12 bits of each word stay free for other uses (a sign bit). Modifies ``words``.
    """
    bits = words
    bits >>= np.uint64(64 - _BITS)
    bits |= _ONE_BITS
    u = bits.view(np.float64)
    u -= 1.0
    return u


def _cell_index(u: float) -> int:
    return int(u * 2.0**_BITS)


# ------------------------------------------------------------------------- exact slow paths
def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


def _exp_neg_bounds(gamma: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """Fractions lo <= e^{-γ} <= hi."""
    with localcontext() as ctx:
        ctx.prec = digits
        value = Fraction((-_dec(gamma)).exp())
    # Rounding γ to `digits` digits moves e^{-γ} by a factor e^{±γ·10^(1-digits)}; exp itself is
    # correctly rounded (half an ulp). 4·(γ+1)·10^(1-digits) bounds both with room to spare.
    rel = Fraction(4) * (gamma + 1) / Fraction(10) ** (digits - 1)
    return value * (1 - rel), value * (1 + rel)


def _exact_below(
    cell: int, bounds: Callable[[int], tuple[Fraction, Fraction]], bits: int = _BITS
) -> bool:
    """Exactly decide U < θ for U uniform in the ``bits``-bit cell ``cell`` (default 52), where
    ``bounds(digits)`` returns fractions lo <= θ <= hi that tighten as ``digits`` grows (θ
    irrational, or at least not a dyadic rational, so that the loop ends with probability 1)."""
    num, digits = cell, 30
    while True:
        lo_u = Fraction(num, 1 << bits)
        hi_u = Fraction(num + 1, 1 << bits)
        lo_t, hi_t = bounds(digits)
        if hi_u <= lo_t:
            return True
        if lo_u >= hi_t:
            return False
        num = (num << 64) | int(random_words(1)[0])
        bits += 64
        digits += 25


def _exact_below_exp(cell: int, gamma: Fraction) -> bool:
    """Exactly decide U < e^{-γ} for U uniform in the 52-bit cell ``cell``."""
    return _exact_below(cell, lambda digits: _exp_neg_bounds(gamma, digits))


@functools.cache
def _ln2(digits: int) -> Decimal:
    """ln 2 correctly rounded to ``digits`` digits (the value the exact path computed inline)."""
    with localcontext() as ctx:
        ctx.prec = digits
        return Decimal(2).ln()


def _exact_floor_neg_log(cell: int, t: Fraction) -> int:
    """Exactly compute ⌊-t·ln U⌋ for U uniform in the 52-bit cell ``cell``."""
    num, bits, digits = cell, _BITS, 30
    while True:
        if num > 0:
            with localcontext() as ctx:
                ctx.prec = digits
                scale = Decimal(bits) * _ln2(digits)
                t_dec = _dec(t)
                # -ln U ∈ (-ln hi, -ln lo] with lo = num/2^bits, hi = (num+1)/2^bits
                y_low = t_dec * (scale - Decimal(num + 1).ln())
                y_high = t_dec * (scale - Decimal(num).ln())
            slack = (abs(Fraction(y_high)) + 1) * Fraction(8 * (bits + 10), 10 ** (digits - 2))
            k_low = math.floor(Fraction(y_low) - slack)
            k_high = math.floor(Fraction(y_high) + slack)
            if k_low == k_high:
                return k_low
        num = (num << 64) | int(random_words(1)[0])
        bits += 64
        digits += 25


# ------------------------------------------------------------------------- public samplers
def uniform_integers(upper: int, size: int) -> np.ndarray:
    """Uniform integers in [0, upper), exactly (numpy's unbiased Lemire rejection)."""
    if upper < 1:
        raise ValueError("upper must be >= 1")
    if upper == 1:
        return np.zeros(size, dtype=np.int64)
    if upper <= 2**62:
        return generator(size).integers(0, upper, size=size, dtype=np.int64)
    out = np.empty(size, dtype=object)  # big ranges: rejection on whole 64-bit words
    nbits = (upper - 1).bit_length()
    for i in range(size):
        while True:
            words = random_words(-(-nbits // 64))
            value = 0
            for word in words:
                value = (value << 64) | int(word)
            value >>= len(words) * 64 - nbits
            if value < upper:
                out[i] = value
                break
    return out


def bernoulli(p: Fraction, size: int) -> np.ndarray:
    """Bernoulli(p) for a rational p in [0, 1], exactly: P[uniform{0..q-1} < n] = n/q."""
    if not 0 <= p <= 1:
        raise ValueError("p must be in [0, 1]")
    return np.asarray(uniform_integers(p.denominator, size) < p.numerator, dtype=bool)


def _below_exp_vector(
    gamma_float: np.ndarray, margin: np.ndarray, gamma_exact: Callable[[int], Fraction]
) -> np.ndarray:
    """U_i < e^{-γ_i} for fresh uniforms U_i, exactly.

    ``gamma_float`` approximates γ_i with |error| <= ``margin`` (absolute); ``gamma_exact(i)``
    returns γ_i exactly, and is only called for the rare undecided draws.
    """
    size = gamma_float.shape[0]
    big = gamma_float > _SPLIT_GAMMA
    if big.any():
        # e^{-γ} underflows past γ ≈ 745: split Bernoulli(e^{-γ}) into the AND of independent
        # Bernoulli(e^{-256}) and Bernoulli(e^{-(γ-256)}), exactly, recursing as needed.
        result = np.zeros(size, dtype=bool)
        small = np.flatnonzero(~big)
        if small.size:
            result[small] = _below_exp_vector(
                gamma_float[small], margin[small], lambda j: gamma_exact(int(small[j]))
            )
        index = np.flatnonzero(big)
        first = _below_exp_vector(
            np.full(index.size, _SPLIT_STEP), np.zeros(index.size), lambda _: Fraction(_SPLIT_STEP)
        )
        alive = index[first]
        if alive.size:
            rest = gamma_float[alive] - _SPLIT_STEP
            result[alive] = _below_exp_vector(
                rest,
                margin[alive] + np.abs(gamma_float[alive]) * 2.0**-52,
                lambda j: gamma_exact(int(alive[j])) - Fraction(_SPLIT_STEP),
            )
        return result
    low_u = _cell_floats(random_words(size))
    high_u = low_u + _CELL
    slack = margin + _REL * (1.0 + gamma_float)
    theta_low = np.exp(-gamma_float - slack)
    theta_high = np.exp(-gamma_float + slack)
    result = high_u <= theta_low
    undecided = ~result & (low_u < theta_high)
    if _FORCE_EXACT:
        undecided[:] = True
    for i in np.flatnonzero(undecided):
        result[i] = _exact_below_exp(_cell_index(low_u[i]), gamma_exact(int(i)))
    return result


def bernoulli_exp_vector(
    gamma_float: np.ndarray, gamma_exact: Callable[[int], Fraction], abs_error: np.ndarray | float
) -> np.ndarray:
    """Independent Bernoulli(e^{-γ_i}) draws, exactly, for a vector of rational γ_i >= 0.

    Args:
        gamma_float: float64 approximations of γ_i.
        gamma_exact: ``gamma_exact(i)`` returns γ_i exactly; called only for the rare draws the
            float comparison cannot decide.
        abs_error: a proven bound on |gamma_float[i] - γ_i| (scalar or per element). Be
            generous: a larger bound only sends more draws down the exact path.
    """
    gamma_float = np.asarray(gamma_float, dtype=np.float64)
    margin = np.broadcast_to(np.asarray(abs_error, dtype=np.float64), gamma_float.shape)
    return _below_exp_vector(gamma_float, np.array(margin), gamma_exact)


def bernoulli_logistic(ratio: Fraction, gamma: Fraction, size: int) -> np.ndarray:
    """Bernoulli(1 / (1 + r·e^{-γ})) for rational r >= 0 and γ >= 0, exactly.

    U < θ with θ = 1/(1 + r·e^{-γ}), certified in float64 (relative margin 2^-40) and decided
    exactly for the rare undecided cells from interval bounds on e^{-γ}. It picks between two
    groups of outcomes weighted 1 and r·e^{-γ} in one draw, where rejection sampling would need
    up to 1 + r·e^{-γ}... or 1 + e^{γ}/r proposals.
    """
    if ratio < 0 or gamma < 0:
        raise ValueError("ratio and gamma must be >= 0")
    if ratio == 0:
        return np.ones(size, dtype=bool)
    low_u = _cell_floats(random_words(size))
    high_u = low_u + _CELL
    theta = 1.0 / (1.0 + float(ratio) * math.exp(-float(gamma)))
    # float θ: exp within 4 ulps, three more roundings; |error| < 2^-48 relative. Margin 2^-40.
    theta_low, theta_high = theta * (1 - _REL), theta * (1 + _REL)
    result = high_u <= theta_low
    undecided = ~result & (low_u < theta_high)
    if _FORCE_EXACT:
        undecided[:] = True

    def bounds(digits: int) -> tuple[Fraction, Fraction]:
        lo_e, hi_e = _exp_neg_bounds(gamma, digits)
        return 1 / (1 + ratio * hi_e), 1 / (1 + ratio * lo_e)

    for i in np.flatnonzero(undecided):
        result[i] = _exact_below(_cell_index(low_u[i]), bounds)
    return result


_BYTE_CHUNK = 1 << 20  # coins per chunk: its bytes and bools stay in cache


def _logistic_float_bounds(ratio: Fraction, gamma: Fraction) -> tuple[float, float] | None:
    """Certified float bounds θ_low <= θ <= θ_high on θ = 1/(1 + r·e^{-γ}) (relative margin
    2^-40, as in :func:`bernoulli_logistic`), or None outside the range where that margin is
    proven: r in [2^-900, 2^900] (float(r) is within 2^-53 relative and θ >= 2^-901 is a
    normal float) and γ <= 4096 (float(γ)'s rounding moves e^{-γ} by at most γ·2^-53 < 2^-40;
    where exp underflows, r·e^{-γ} < 2^-120 and θ = 1 is within 2^-120)."""
    if not Fraction(1, 2**900) <= ratio <= 2**900 or gamma > 4096:
        return None
    theta = 1.0 / (1.0 + float(ratio) * math.exp(-float(gamma)))
    return theta * (1 - _REL), theta * (1 + _REL)


def _tail_bounds(theta_low: float, theta_high: float, b: int) -> tuple[float, float]:
    """Float bounds on θ' = 256·θ - b, the threshold for the rest U' of U = (b + U')/256.

    256·θ_low and 256·θ_high are exact (a power of 2); subtracting the integer b is exact too
    for the bytes that reach here (Sterbenz's lemma, or an exact difference of numbers with
    the same ulp), and each bound is moved one more ulp outwards anyway, which would cover
    the rounding of one subtraction."""
    lo = math.nextafter(256.0 * theta_low - b, -math.inf)
    hi = math.nextafter(256.0 * theta_high - b, math.inf)
    return lo, hi


def _finish_tail(
    count: int,
    b: int,
    theta_low: float,
    theta_high: float,
    bounds: Callable[[int], tuple[Fraction, Fraction]],
) -> np.ndarray:
    """Decide U < θ for ``count`` draws U = (b + U')/256 whose first byte b was undecided:
    U < θ ⇔ U' < 256θ - b.

    Each U' is read from a fresh word (its 52-bit cell) and compared with the mapped float
    bounds (:func:`_tail_bounds`); the rare draws that stay undecided are finished exactly by
    :func:`_exact_below` on the *same* U, whose first 60 bits are (b << 52) | cell, against the
    unmapped exact bounds on θ (so the exact path shares no code with the mapping)."""
    low_u = _cell_floats(random_words(count))
    lo, hi = _tail_bounds(theta_low, theta_high, b)
    result = (low_u + _CELL) <= lo
    undecided = ~result & (low_u < hi)
    if _FORCE_EXACT:
        undecided[:] = True
    for i in np.flatnonzero(undecided):
        cell = (b << _BITS) | _cell_index(float(low_u[i]))
        result[i] = _exact_below(cell, bounds, 8 + _BITS)
    return np.asarray(result, dtype=bool)


def bernoulli_logistic_bytes(
    ratio: Fraction,
    gamma: Fraction,
    size: int,
    *,
    complement: bool = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Bernoulli(θ), θ = 1/(1 + r·e^{-γ}) (or its complement), exactly, from about one random
    byte per coin instead of one 64-bit word: for bulk bit vectors (unary encoding, sketches).

    The same inversion as :func:`bernoulli_logistic` (the coin is [U < θ]), read a byte at a
    time: U's first 8 bits b decide the coin unless b/256 <= θ < (b+1)/256 up to the certified
    float margin (b < ⌊256·θ_low⌋: 1; b >= ⌈256·θ_high⌉: 0); the ~1/256 undecided draws go on
    with further bits of the same U (:func:`_finish_tail`). Expected cost ≈ 1 + 8/256 bytes per
    coin. ``complement=True`` returns [U >= θ], i.e. Bernoulli(1 - θ), in the same pass.
    ``out`` (a contiguous bool array of ``size``) is filled and returned instead of a new one.

    Rational θ (γ = 0 or r = 0) uses :func:`bernoulli` exactly; parameters outside the range of
    the float certificate (:func:`_logistic_float_bounds`) fall back to
    :func:`bernoulli_logistic`. See docs/noise.md, "Bulk coins".
    """
    if ratio < 0 or gamma < 0:
        raise ValueError("ratio and gamma must be >= 0")
    if out is None:
        out = np.empty(size, dtype=bool)
    elif out.dtype != bool or out.shape != (size,):
        raise ValueError("out must be a bool array of shape (size,)")
    float_bounds = None if ratio == 0 or gamma == 0 else _logistic_float_bounds(ratio, gamma)
    if float_bounds is None:
        if ratio == 0 or gamma == 0:
            draws = bernoulli(1 / (1 + Fraction(ratio)), size)
        else:
            draws = bernoulli_logistic(ratio, gamma, size)
        np.not_equal(draws, complement, out=out)
        return out
    theta_low, theta_high = float_bounds
    below = min(256, math.floor(256.0 * theta_low))  # b < below: U < (b+1)/256 <= θ_low
    above = min(256, math.ceil(256.0 * theta_high))  # b >= above: U >= b/256 >= θ_high

    def bounds(digits: int) -> tuple[Fraction, Fraction]:
        lo_e, hi_e = _exp_neg_bounds(gamma, digits)
        return 1 / (1 + ratio * hi_e), 1 / (1 + ratio * lo_e)

    equal = np.empty(min(size, _BYTE_CHUNK), dtype=bool)
    for start in range(0, size, _BYTE_CHUNK):  # chunks of coins, for the cache
        b = random_bytes(min(size, start + _BYTE_CHUNK) - start)
        part = out[start : start + b.size]
        if complement:
            np.greater_equal(b, below, out=part)
        else:
            np.less(b, below, out=part)
        if _FORCE_EXACT:  # re-decide the byte-decided coins exactly (8-bit cells)
            for i in np.flatnonzero((b < below) | (b >= above)):
                part[i] = _exact_below(int(b[i]), bounds, 8) != complement
        for value in range(below, above):  # the one or two undecided byte values
            mask = equal[: b.size]
            np.equal(b, value, out=mask)
            undecided = np.flatnonzero(mask)
            if undecided.size:
                tail = _finish_tail(undecided.size, value, theta_low, theta_high, bounds)
                part[undecided] = tail != complement
    return out


def bernoulli_exp(gamma: Fraction, size: int) -> np.ndarray:
    """Bernoulli(e^{-γ}) for rational γ >= 0, exactly."""
    if gamma < 0:
        raise ValueError("gamma must be >= 0")
    g = float(gamma)
    return _below_exp_vector(np.full(size, g), np.full(size, abs(g) * 2.0**-52), lambda _: gamma)


_GAUSS_SLACK = 2.0**-38  # absolute margin on θ = exp(-γ) in the Gaussian acceptance
_NEGATIVE_ZERO = np.uint64(1 << 63)  # the bits of -0.0
_CHUNK = 1 << 14  # elements per block of the fused kernels: their buffers stay in the L2 cache


def _signed_geometric(
    t: Fraction, signed: bool, size: int, words: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """X = ⌊-t·ln U⌋ with U read from the top 52 bits of each word (+ lazy extra bits), as int64;
    with ``signed``, -X where the word's lowest bit is 1 (independent of the 52 bits X reads).

    The same certificate as the reference inversion (docs/noise.md), fused and run over blocks
    of ``_CHUNK`` words so that every intermediate stays in cache. Over the cell
    [u, u + 2⁻⁵²) of U, -t·ln U lies in (y - w, y] with y = -t·ln u and w = t·ln(1 + 2⁻⁵²/u)
    <= t·2⁻⁵²/u; with the margin s = (y + 1)·2⁻⁴⁰ (which covers float64's few-ulp log, the
    rounding of t, and the handful of roundings below), hi = y·(1 + 2⁻⁴⁰) + 2⁻⁴⁰ bounds it from
    above and lo = y·(1 - 2⁻⁴⁰) - (w + 2⁻⁴⁰) from below. When lo >= ⌊hi⌋, every U in the cell
    has ⌊-t·ln U⌋ = ⌊hi⌋. The rest (about 2·(t·2⁻⁵²/u + s) of the draws, and u = 0, where lo is
    NaN) are finished exactly with the same U, in index order, after the vectorised pass.
    Without ``words``, the ``size`` words are drawn block by block as they are used (the same
    stream as one ``random_words(size)``, without a large temporary); ``words`` is not
    modified. Also returns, in increasing order, the indices of the draws
    (-, 0) (sign bit set and X = 0) that the discrete Laplace rejects (none unless ``signed``).
    """
    out = np.empty(size, dtype=np.int64)
    t_float = float(t)
    t_cell = t_float * _CELL
    up, down = 1.0 + _REL, 1.0 - _REL
    # u >= 2⁻⁵² when u > 0, so y <= t·52·ln 2 < 37·t: no decided value can reach 2^62 then
    check_max = not t_float * 37.0 < 2.0**62
    block = min(size, _CHUNK)
    bits = np.empty(block, dtype=np.uint64)
    sign = np.empty(block, dtype=np.uint64)
    y = np.empty(block, dtype=np.float64)
    hi = np.empty(block, dtype=np.float64)
    width = np.empty(block, dtype=np.float64)
    decided = np.empty(block, dtype=bool)
    flag = np.empty(block, dtype=bool)
    undecided_parts = []
    undecided_words = []
    zero_parts = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start in range(0, size, _CHUNK):
            stop = min(size, start + _CHUNK)
            m = stop - start
            b, yy, hh, ww, ok = bits[:m], y[:m], hi[:m], width[:m], decided[:m]
            wb = random_words(m) if words is None else words[start:stop]
            np.right_shift(wb, np.uint64(64 - _BITS), out=b)
            b |= _ONE_BITS
            u = b.view(np.float64)
            u -= 1.0  # exact: the cell's low end w·2⁻⁵²
            np.divide(t_cell, u, out=ww)  # w (inf at u = 0)
            ww += _REL
            np.log(u, out=yy)
            yy *= -t_float  # y
            np.multiply(yy, up, out=hh)
            hh += _REL
            np.floor(hh, out=hh)  # ⌊hi⌋
            yy *= down
            yy -= ww  # lo (NaN at u = 0)
            np.greater_equal(yy, hh, out=ok)
            if _FORCE_EXACT:
                ok[:] = False
            if check_max and float(np.max(hh, where=ok, initial=0.0)) >= 2.0**62:
                raise OverflowError("geometric sample does not fit in int64; use a coarser grid")
            if signed:  # the word's lowest bit becomes the sign bit of ⌊hi⌋ (-0.0 for (-, 0))
                s = sign[:m]
                np.bitwise_and(wb, np.uint64(1), out=s)
                s <<= np.uint64(63)
                hh.view(np.uint64)[...] |= s
                np.equal(hh.view(np.uint64), _NEGATIVE_ZERO, out=flag[:m])
                if flag[:m].any():
                    zero_parts.append(np.flatnonzero(flag[:m]) + start)
            np.copyto(out[start:stop], hh, casting="unsafe")  # undecided: overwritten below
            if not ok.all():
                np.logical_not(ok, out=ok)
                undecided = np.flatnonzero(ok)
                undecided_parts.append(undecided + start)
                undecided_words.append(wb[undecided])
    undecided = np.concatenate(undecided_parts) if undecided_parts else np.zeros(0, np.int64)
    held = np.concatenate(undecided_words) if undecided_words else np.zeros(0, np.uint64)
    for i, word in zip(undecided.tolist(), held.tolist(), strict=True):
        value = _exact_floor_neg_log(word >> (64 - _BITS), t)
        if value >= 2**62:
            raise OverflowError("geometric sample does not fit in int64; use a coarser grid")
        out[i] = -value if signed and word & 1 else value
    redo = np.concatenate(zero_parts) if zero_parts else np.zeros(0, np.int64)
    if signed and undecided.size:  # the undecided draws held placeholders: recheck them
        negative_zero = (out[undecided] == 0) & (held & np.uint64(1) == 1)
        redo = np.union1d(redo[~np.isin(redo, undecided)], undecided[negative_zero])
    return out, redo


def _gaussian_accept(
    y: np.ndarray, sigma2: Fraction, shift: Fraction, need: int | None = None
) -> np.ndarray:
    """Accept each proposal y_i with probability e^{-γ_i}, γ_i = (|y_i| - σ²/t)²/(2σ²), exactly:
    [U_i < e^{-γ_i}] for fresh uniforms U_i (one word each, drawn block by block: the same
    stream as one ``random_words(len(y))``), in blocks.

    With ``need``, stops after the first block by which ``need`` proposals are surely accepted
    and returns False for every later one: the caller keeps the first ``need`` accepted
    proposals only, and whether a proposal is kept never depends on a later one.

    The float certificate. γ is computed as in the reference (``(a - shift)² / (2σ²)`` with
    a = |y| in float64), whose error is below m = (A²/(2σ²) + γ + 1)·2⁻⁴⁴ with A = a + shift
    (docs/noise.md, a factor 4 to spare). As shift = σ²/t < σ (t = ⌊σ⌋ + 1),
    A² <= 2(a - shift)² + 8·shift² gives A²/(2σ²) <= 2γ + 4, so m <= (3γ + 5)·2⁻⁴⁴. With
    θ = exp(-γ) (float64 exp, within a few ulps: 2⁻⁵⁰ relative), the exact e^{-γ*} lies within
    θ·(2m + 2⁻⁴⁹) <= θ·(γ + 1)·2⁻⁴⁰ <= 2⁻⁴⁰ of θ, because (γ + 1)·e^{-γ} <= 1. So a draw is
    surely accepted when U's whole 52-bit cell lies at or below θ - 2⁻³⁸ and surely rejected
    when the cell starts at or above θ + 2⁻³⁸ (margins 4 times the bound, which also absorb the
    rounding of θ ± 2⁻³⁸); the rest (about 2⁻³⁶ of the draws) are finished exactly with the
    same U. Draws with γ > 512 (exp near underflow; |y| beyond 32σ) are all finished exactly.
    """
    size = y.shape[0]
    out = np.empty(size, dtype=bool)
    s_float, shift_float = float(sigma2), float(shift)
    block = min(size, _CHUNK)
    bits = np.empty(block, dtype=np.uint64)
    gamma = np.empty(block, dtype=np.float64)
    theta = np.empty(block, dtype=np.float64)
    flag = np.empty(block, dtype=bool)
    undecided_parts = []
    undecided_words = []
    accepted = 0
    for start in range(0, size, _CHUNK):
        if need is not None and accepted >= need:
            out[start:] = False
            discard_words(size - start)  # the stream continues as if all had been drawn
            break
        stop = min(size, start + _CHUNK)
        m = stop - start
        gg, th, fl = gamma[:m], theta[:m], flag[:m]
        accept = out[start:stop]
        np.abs(y[start:stop], out=gg, casting="unsafe")  # float(|y|), as in the reference
        gg -= shift_float
        gg *= gg
        gg /= -2.0 * s_float  # -γ (the reference's quotient, negated exactly)
        far = float(np.min(gg)) < -_SPLIT_GAMMA
        if far:  # astronomically rare: those draws go to the exact path
            far_mask = gg < -_SPLIT_GAMMA
            gg[far_mask] = 0.0
        np.exp(gg, out=th)  # θ
        wb = random_words(m)  # block by block: the same stream as one random_words(size)
        np.right_shift(wb, np.uint64(64 - _BITS), out=bits[:m])
        bits[:m] |= _ONE_BITS
        u = bits[:m].view(np.float64)
        u -= 1.0  # the cell's low end, exact
        np.add(th, _GAUSS_SLACK, out=gg)
        np.less(u, gg, out=fl)  # not surely rejected
        th -= _GAUSS_SLACK
        u += _CELL  # the cell's high end, exact
        np.less_equal(u, th, out=accept)  # surely accepted
        fl &= ~accept
        if far:
            fl |= far_mask
            accept[far_mask] = False
        accepted += int(np.count_nonzero(accept))
        if _FORCE_EXACT:
            fl[:] = True
        if fl.any():
            undecided = np.flatnonzero(fl)
            undecided_parts.append(undecided + start)
            undecided_words.append(wb[undecided])
    if undecided_parts:
        indices = np.concatenate(undecided_parts).tolist()
        held = np.concatenate(undecided_words).tolist()
        for i, word in zip(indices, held, strict=True):
            gamma_exact = (abs(int(y[i])) - shift) ** 2 / (2 * sigma2)
            out[i] = _exact_below_exp(word >> (64 - _BITS), gamma_exact)
    return out


def geometric_exp(t: Fraction, size: int) -> np.ndarray:
    """X >= 0 with P(X >= k) = e^{-k/t} (ratio e^{-1/t}), exactly, as int64."""
    if t <= 0:
        raise ValueError("t must be > 0")
    return _signed_geometric(t, False, size)[0]


def discrete_laplace(t: Fraction, size: int) -> np.ndarray:
    """Z with P(Z = z) ∝ e^{-|z|/t} on the integers, exactly, as int64.

    Z = ±X with X geometric and the sign from the lowest bit of the word that gave X (independent
    of the 52 bits that X reads); (-, 0) is rejected and redrawn, which makes 0 as likely as any
    other point of magnitude 0 should be.
    """
    if t <= 0:
        raise ValueError("t must be > 0")
    z, redo = _signed_geometric(t, True, size)
    while redo.size:
        fresh, again = _signed_geometric(t, True, redo.size)
        z[redo] = fresh
        redo = redo[again]
    return z


def _isqrt_floor_fraction(x: Fraction) -> int:
    """⌊sqrt(x)⌋ for a rational x >= 0, exactly."""
    n, d = x.numerator, x.denominator
    r = math.isqrt(n * d) // d
    while (r + 1) ** 2 * d <= n:
        r += 1
    while r * r * d > n:
        r -= 1
    return r


def discrete_gaussian(sigma2: Fraction, size: int) -> np.ndarray:
    """Z with P(Z = z) ∝ e^{-z²/(2σ²)} on the integers, exactly (CKS 2020, Alg. 3), as int64."""
    if sigma2 <= 0:
        raise ValueError("sigma2 must be > 0")
    t = _isqrt_floor_fraction(sigma2) + 1
    shift = sigma2 / t  # σ²/t, rational
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        draw = need + need // 2 + 16  # acceptance >= ~0.6 for every σ
        y = discrete_laplace(Fraction(t), draw)
        accept = _gaussian_accept(y, sigma2, shift, need)
        for start in range(0, draw, _CHUNK):  # the first `need` accepted, block by block
            accepted = y[start : start + _CHUNK][accept[start : start + _CHUNK]]
            take = min(accepted.size, size - filled)
            out[filled : filled + take] = accepted[:take]
            filled += take
            if filled == size:
                break
    return out
