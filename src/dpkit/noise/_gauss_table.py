"""The discrete Gaussian by rejection from a bucketed envelope with an exact alias table.

CKS's sampler (:func:`dpkit.noise.discrete_gaussian`) proposes from a discrete Laplace: about
1.3 proposals per output, each with a ``log`` (the geometric) and an ``exp`` (the acceptance)
and two 64-bit words. This sampler targets the same law, P(Z = z) ∝ p(z) = e^{-z²/(2σ²)} on the
integers, exactly, with about 1.02 proposals per output, one word per proposal, integer
operations only for ~97 % of proposals and an ``exp`` (and a second word) for the rest:

* **Envelope.** The magnitudes are cut into K buckets of w = 2^j integers (w ≈ σ/16–σ/32,
  R = K·w ≈ 12.5σ) on each side: outcome b < K is z ∈ [b·w, (b+1)·w), outcome K + b is
  z ∈ [-(b+1)·w, -b·w - 1]. Each gets an integer height H >= C·p(its smallest |z|) (float64
  exp with a relative margin of 2⁻³⁰, rounded up), with C an integer scale. The tails z >= R
  and z <= -(R + 1) get a weight H_T >= C·p(R)/(w·(1 - r)) each, r = e^{-R/σ²}; what is left
  of 2^32 is a "reject" outcome. A proposal picks one of these 2K + 3 outcomes with
  probability weight/2^32 **exactly**, by Walker's alias method in integers (1024 columns of
  2^22 units each, built in exact integer arithmetic: each outcome's units sum to its weight,
  which a test checks).
* **Proposal.** In a bucket, z = base + (j uniform bits): q(z) = H/(2^32·w). In a tail,
  z = R + D or z = -(R + 1 + D) with D geometric, P(D >= k) = r^k (exact,
  :func:`dpkit.noise.geometric_exp`): q(z) = H_T·(1 - r)·r^D/2^32.
* **Acceptance.** Accept with probability α(z) = C·p(z)/(2^32·w·q(z)): C·p(z)/H in a bucket
  (<= 1 as p(z) <= p(smallest |z| of the bucket)), and C·e^{-(z² - 2RD)/(2σ²)}/(w·H_T·(1 - r))
  in a tail (<= 1: z² - 2RD >= R² + D², so this is at most C·p(R)/(w·H_T·(1 - r))). The
  accepted z has probability ∝ q(z)·α(z) = C·p(z)/(2^32·w): exactly the discrete Gaussian, and
  the z's of different proposals are independent, so keeping the first ``size`` accepted is too.
* **Deciding U < α exactly** (U uniform: its first b = 32 - j bits from the proposal's word,
  the next 52 from a fresh word when needed, then lazy extra words, as in
  :mod:`dpkit.noise._exact`). In a bucket, p(z) >= p(largest |z|), so when U's b-bit cell lies
  below the precomputed lower bound L = C·p(largest |z|)/H the proposal is accepted with one
  integer comparison of the word's low 32 bits with ⌊L·2^b⌋·2^j (the squeeze: all but ~3 % of
  proposals). The others compute θ = (C/H)·exp(-z²/(2σ²)) in float64 with a certified relative
  margin of 2⁻³⁶ (its error is below 2⁻⁴¹, see :func:`_accept_block`) and compare U with it
  (:func:`_decide_buckets`); the rare U within the margin are finished exactly on the same U by
  interval arithmetic (:func:`dpkit.noise._exact._exact_below`). Tail draws (2⁻³¹ of the
  proposals) are decided exactly in Python.

The word of a proposal gives the column (top 10 bits), the alias coin (next 22 bits), U's first
32 - j bits and the position in the bucket (the low j <= 32 bits). All randomness comes from
:mod:`dpkit.noise._rng`. See docs/noise.md, "The table sampler".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from dpkit.noise import _exact
from dpkit.noise._exact import _CELL, _exact_below, geometric_exp
from dpkit.noise._rng import random_words

__all__ = ["GaussianTable", "build_table", "sample_table"]

_COLUMN_BITS = 10
_ALIAS_BITS = 22
_TOTAL_BITS = _COLUMN_BITS + _ALIAS_BITS  # outcome weights sum to 2^32
_MAX_WIDTH_BITS = 64 - _TOTAL_BITS  # the low 32 bits: U's first 32 - j bits, then the position
_MARGIN = 2.0**-36  # certified relative margin on θ (the float error is below 2^-41)
_MAX_GAMMA = 512  # e^{-γ} stays a normal float64 with room to spare
_CHUNK = 1 << 16  # proposals per block: fewer numpy calls per value; ~2 MB of buffers
_ONE_BITS = np.uint64(0x3FF0000000000000)


def _exp_bounds(gamma: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """Fractions lo <= e^{-γ} <= hi (exactly 1 at γ = 0)."""
    if gamma == 0:
        return Fraction(1), Fraction(1)
    with localcontext() as ctx:
        ctx.prec = digits
        value = Fraction((-(Decimal(gamma.numerator) / Decimal(gamma.denominator))).exp())
    # as in dpkit.noise._exact._exp_neg_bounds: rounding γ and the correctly rounded exp
    rel = Fraction(4) * (gamma + 1) / Fraction(10) ** (digits - 1)
    return value * (1 - rel), value * (1 + rel)


@dataclass(frozen=True, eq=False)
class GaussianTable:
    """The envelope and alias table of :func:`sample_table` for one σ² (see the module doc).

    Outcome o: a bucket for o < 2K (``base[o]`` its first z), the positive tail (2K), the
    negative tail (2K + 1), reject (2K + 2). Per entry e = 2·column + [coin >= threshold] of the
    alias table (``*2`` arrays): its outcome, base, and squeeze word."""

    sigma2: Fraction
    width_bits: int  # w = 2^width_bits
    buckets: int  # K per side
    scale: int  # C
    weights: tuple[int, ...]  # per outcome, summing to 2^32
    key_threshold: np.ndarray  # per column: (column << 22) + threshold (uint64)
    outcome2: np.ndarray  # per entry: the outcome (int64)
    base2: np.ndarray  # per entry: the outcome's first z (int64; 0 for tails and reject)
    squeeze2: np.ndarray  # per entry: low 32 bits of the word below which U accepts (uint64)
    ratio: np.ndarray  # per outcome: float(C/H) (0 for tails and reject)

    @property
    def width(self) -> int:
        return 1 << self.width_bits

    @property
    def radius(self) -> int:
        return self.buckets * self.width


def _alias_table(weights: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Walker's alias table in exact integers: 2^_COLUMN_BITS columns of 2^_ALIAS_BITS units.

    Column i yields ``primary[i]`` for an alias coin v < ``threshold[i]`` and ``alias[i]``
    otherwise; outcome j's units over all columns sum to ``weights[j]`` exactly (the weights
    must sum to 2^_TOTAL_BITS)."""
    columns, unit = 1 << _COLUMN_BITS, 1 << _ALIAS_BITS
    if len(weights) > columns or sum(weights) != columns * unit or min(weights) < 0:
        raise ValueError("weights must be at most 1024 nonnegative integers summing to 2^32")
    left = list(weights) + [0] * (columns - len(weights))
    primary = list(range(columns))
    alias = list(range(columns))
    threshold = [unit] * columns
    small = [i for i in range(columns) if left[i] < unit]
    large = [i for i in range(columns) if left[i] >= unit]
    while small and large:
        s, g = small.pop(), large.pop()
        threshold[s], alias[s] = left[s], g  # column s: left[s] units of s, the rest of g
        left[g] -= unit - left[s]
        (small if left[g] < unit else large).append(g)
    # what is left holds exactly one column's worth each (integer arithmetic: no drift)
    for i in small + large:
        if left[i] != unit:
            raise AssertionError("alias table construction lost units")  # cannot happen
    return primary, alias, threshold


@functools.lru_cache(maxsize=64)
def build_table(
    sigma2: Fraction, width_bits: int | None = None, buckets: int | None = None
) -> GaussianTable | None:
    """The table for σ², or None where this sampler does not apply (σ < 1, or σ beyond 2^35,
    where CKS's sampler is used). ``width_bits`` and ``buckets`` (per side) override the
    defaults: tests use narrow envelopes to reach the tails and the exact paths often."""
    sigma = math.sqrt(float(sigma2))
    if width_bits is None:
        if not 1.0 <= sigma <= 2.0**35:
            return None
        width_bits = max(0, math.ceil(math.log2(sigma / 32.0)))
    width = 1 << width_bits
    if buckets is None:
        buckets = math.ceil(12.5 * sigma / width) + 1
    outcomes = 2 * buckets + 3
    if buckets < 1 or outcomes > 1 << _COLUMN_BITS or not 0 <= width_bits <= _MAX_WIDTH_BITS:
        raise ValueError("the table needs 1..510 buckets per side of at most 2^32 values")
    radius = buckets * width
    two_s2 = 2 * sigma2
    if Fraction(radius + 1) ** 2 / two_s2 > _MAX_GAMMA:
        raise ValueError("the envelope reaches too far into the tail for float64 exp")

    # Heights and squeezes from float64 exp with a relative margin of 2⁻³⁰ (γ <= 512 is within
    # 2⁻⁴² and exp within a few ulps, as in _accept_block): heights are upper bounds on
    # C·p(smallest |z|) and squeezes lower bounds on C·p(largest |z|)/H, each rounded outwards
    # once more; the exact bounds are checked against them in tests.
    up, down = 1.0 + 2.0**-30, 1.0 - 2.0**-30
    inv = 1.0 / float(two_s2)
    steps = np.arange(buckets, dtype=np.float64) * float(width)
    smallest = np.concatenate([steps, steps + 1.0])  # b·w (positive), b·w + 1 (negative)
    largest = np.concatenate([steps + (width - 1), steps + width])
    tops = np.exp(-(smallest * smallest) * inv) * up  # >= p(smallest |z|)
    lows = np.exp(-(largest * largest) * inv) * down  # <= p(largest |z|)
    rate = float(radius) / float(sigma2)
    tail_top = math.exp(-(float(radius) ** 2) * inv) * up / (width * -math.expm1(-rate) * down)
    total = 1 << _TOTAL_BITS
    scale = math.floor((total - outcomes) / ((float(np.sum(tops)) + 2 * tail_top) * up)) - 1
    heights = [math.ceil(h) for h in (tops * float(scale) * up).tolist()]  # >= 1 each
    tail_height = math.ceil(scale * tail_top * up)
    reject = total - sum(heights) - 2 * tail_height
    if reject < 0:
        raise AssertionError("envelope weights exceed 2^32")  # cannot happen: see `scale`
    weights = [*heights, tail_height, tail_height, reject]
    primary, alias, threshold = _alias_table(weights)
    height_array = np.array(heights, dtype=np.float64)  # exact: each below 2^33
    ratio = np.zeros(outcomes, dtype=np.float64)
    ratio[: 2 * buckets] = float(scale) / height_array
    low = lows * float(scale) / height_array * down  # <= C·p(z)/H for every z in the bucket
    # U's first 32 - j bits c sit above the j position bits in the word's low 32 bits:
    # (c + 1)/2^(32-j) <= L iff c < ⌊L·2^(32-j)⌋ iff low32 < ⌊L·2^(32-j)⌋·2^j
    squeeze = np.zeros(outcomes, dtype=np.uint64)
    prefix = np.floor(np.ldexp(low, 32 - width_bits)).astype(np.uint64)
    squeeze[: 2 * buckets] = prefix << np.uint64(width_bits)
    base = np.zeros(outcomes, dtype=np.int64)
    base[:buckets] = np.arange(buckets, dtype=np.int64) * width
    base[buckets : 2 * buckets] = -np.arange(1, buckets + 1, dtype=np.int64) * width
    columns = 1 << _COLUMN_BITS
    entry = np.array([o for c in range(columns) for o in (primary[c], alias[c])], np.int64)
    real = entry < outcomes  # columns past the outcomes have threshold 0: never their primary
    safe = np.where(real, entry, 0)
    return GaussianTable(
        sigma2=sigma2,
        width_bits=width_bits,
        buckets=buckets,
        scale=scale,
        weights=tuple(weights),
        key_threshold=np.array(
            [(c << _ALIAS_BITS) + threshold[c] for c in range(columns)], dtype=np.uint64
        ),
        outcome2=entry,
        base2=np.where(real, base[safe], 0),
        squeeze2=np.where(real, squeeze[safe], np.uint64(0)),
        ratio=ratio,
    )


_Bounds = Callable[[int], tuple[Fraction, Fraction]]


def _bucket_bounds(table: GaussianTable, outcome: int, z: int) -> _Bounds:
    """bounds(digits) on θ = C·e^{-z²/(2σ²)}/H, for :func:`_exact_below`."""
    gamma = Fraction(z * z) / (2 * table.sigma2)
    factor = Fraction(table.scale, table.weights[outcome])

    def bounds(digits: int) -> tuple[Fraction, Fraction]:
        lo, hi = _exp_bounds(gamma, digits)
        return factor * lo, factor * hi

    return bounds


def _tail_bounds(table: GaussianTable, z: int, d: int) -> _Bounds:
    """bounds(digits) on α = C·e^{-(z² - 2RD)/(2σ²)}/(w·H_T·(1 - e^{-R/σ²}))."""
    radius, sigma2 = table.radius, table.sigma2
    gamma = Fraction(z * z - 2 * radius * d) / (2 * sigma2)
    rate = Fraction(radius) / sigma2
    factor = Fraction(table.scale, table.width * table.weights[2 * table.buckets])

    def bounds(digits: int) -> tuple[Fraction, Fraction]:
        lo, hi = _exp_bounds(gamma, digits)
        r_lo, r_hi = _exp_bounds(rate, digits)
        upper = factor * hi / (1 - r_hi) if r_hi < 1 else Fraction(1)
        return factor * lo / (1 - r_lo), min(Fraction(1), upper)

    return bounds


class _Buffers:
    """Scratch arrays for one block of proposals, reused across blocks (no page faults)."""

    def __init__(self, size: int) -> None:
        self.key = np.empty(size, dtype=np.uint64)
        self.index = np.empty(size, dtype=np.uint64)
        self.gathered = np.empty(size, dtype=np.uint64)
        self.z = np.empty(size, dtype=np.int64)
        self.flag = np.empty(size, dtype=bool)


def _accept_block(table: GaussianTable, m: int, buffers: _Buffers) -> tuple[np.ndarray, np.ndarray]:
    """``m`` proposals; returns their values and which are accepted (views of ``buffers``).

    The float certificate for θ = (C/H)·e^{-γ}, γ = z²/(2σ²) <= (R + 1)²/(2σ²) <= 512: z² is
    exact or within 2⁻⁵³ relative, the float 1/(2σ²) within 2⁻⁵², their product within 2⁻⁵¹,
    so γ is within 512·2⁻⁵¹ = 2⁻⁴² absolute and e^{-γ} within 2⁻⁴¹·⁹ relative; exp adds a few
    ulps (2⁻⁵⁰), the float ratio C/H and the product one rounding each: under 2⁻⁴¹ in all, far
    inside the margin 2⁻³⁶ (the products θ·(1 ± 2⁻³⁶) round once more, also inside)."""
    first = random_words(m)
    key, index, gathered = buffers.key[:m], buffers.index[:m], buffers.gathered[:m]
    z, flag = buffers.z[:m], buffers.flag[:m]
    np.right_shift(first, np.uint64(32), out=key)  # column | alias coin
    np.right_shift(key, np.uint64(_ALIAS_BITS), out=index)  # column
    entry = index.view(np.int64)
    np.take(table.key_threshold, entry, out=gathered, mode="clip")
    np.greater_equal(key, gathered, out=flag)  # the alias coin is at or above the threshold
    entry <<= 1
    np.add(entry, flag, out=entry)  # entry = 2·column + flag
    np.take(table.base2, entry, out=z, mode="clip")
    np.bitwise_and(first, np.uint64(table.width - 1), out=key)  # the position in the bucket
    z += key.view(np.int64)
    np.bitwise_and(first, np.uint64(0xFFFFFFFF), out=key)  # U's first 32 - j bits, position
    np.take(table.squeeze2, entry, out=gathered, mode="clip")
    np.less(key, gathered, out=flag)  # U's whole cell lies below the squeeze L
    if _exact._FORCE_EXACT:
        flag[:] = False
    accept = flag
    rest = np.flatnonzero(~accept)
    if rest.size:
        outcome = table.outcome2[entry[rest]]
        prefix = key[rest] >> np.uint64(table.width_bits)  # U's first 32 - j bits
        buckets = 2 * table.buckets
        in_bucket = outcome < buckets
        _decide_buckets(table, rest[in_bucket], outcome[in_bucket], prefix[in_bucket], z, accept)
        tail = outcome >= buckets
        tail &= outcome < buckets + 2
        if tail.any():
            _decide_tails(table, rest[tail], outcome[tail], prefix[tail], z, accept)
    return z, accept


def _decide_buckets(
    table: GaussianTable,
    rest: np.ndarray,
    outcome: np.ndarray,
    prefix: np.ndarray,
    z: np.ndarray,
    accept: np.ndarray,
) -> None:
    """Decide U < θ for the bucket proposals ``rest`` the squeeze did not accept.

    U = (c + V)/2^b with c the b = 32 - j bits of U already read (``prefix``) and V read from
    a fresh word (its 52-bit cell, then lazy words), so U < θ iff V < θ·2^b - c. With θ_lo and
    θ_hi bounds on α (the relative margin 2⁻³⁶), t = θ·2^b - c is one rounding away from exact
    (the scaling by 2^b is exact), and moving each bound one ulp outwards covers it: the cell of
    V accepts below t_lo and rejects from t_hi on. The rest are finished exactly on the same U,
    whose first b + 52 bits are (c << 52) | V's cell."""
    n = rest.size
    if n == 0:
        return
    cells = random_words(n) >> np.uint64(64 - 52)
    bits = cells | _ONE_BITS
    v = bits.view(np.float64)
    v -= 1.0  # V's cell's low end, exact
    zr = z[rest].astype(np.float64)
    gamma = zr * zr
    gamma *= -1.0 / (2.0 * float(table.sigma2))
    theta = np.exp(gamma)
    theta *= table.ratio[outcome]
    scale = float(2 ** (32 - table.width_bits))
    c = prefix.astype(np.float64)  # exact: below 2^32
    t_low = np.nextafter(theta * (1.0 - _MARGIN) * scale - c, -np.inf)
    t_high = np.nextafter(theta * (1.0 + _MARGIN) * scale - c, np.inf)
    sure = (v + _CELL) <= t_low
    undecided = ~sure & (v < t_high)
    if _exact._FORCE_EXACT:
        sure[:] = False
        undecided[:] = True
    accept[rest[sure]] = True
    width = 32 - table.width_bits + 52
    for j in np.flatnonzero(undecided).tolist():
        bounds = _bucket_bounds(table, int(outcome[j]), int(z[rest[j]]))
        cell = (int(prefix[j]) << 52) | int(cells[j])
        accept[rest[j]] = _exact_below(cell, bounds, width)


def _decide_tails(
    table: GaussianTable,
    rest: np.ndarray,
    outcome: np.ndarray,
    prefix: np.ndarray,
    z: np.ndarray,
    accept: np.ndarray,
) -> None:
    """Draw the tail proposals ``rest`` (z = R + D or -(R + 1 + D)) and decide them exactly,
    U's first 32 - j bits being ``prefix``."""
    depth = geometric_exp(Fraction(table.sigma2) / table.radius, rest.size)  # r = e^{-R/σ²}
    cells = random_words(rest.size) >> np.uint64(64 - 52)
    negative = outcome == 2 * table.buckets + 1
    width = 32 - table.width_bits + 52
    for k, i in enumerate(rest.tolist()):
        d = int(depth[k])
        value = -(table.radius + 1 + d) if negative[k] else table.radius + d
        if abs(value) >= 2**62:
            raise OverflowError("discrete Gaussian sample does not fit in int64")
        z[i] = value
        cell = (int(prefix[k]) << 52) | int(cells[k])
        accept[i] = _exact_below(cell, _tail_bounds(table, value, d), width)


def sample_table(table: GaussianTable, size: int) -> np.ndarray:
    """``size`` exact discrete Gaussian draws (int64) from the table's envelope."""
    out = np.empty(size, dtype=np.int64)
    buffers = _Buffers(min(_CHUNK, size + size // 16 + 16))
    filled = 0
    while filled < size:
        need = size - filled
        m = min(_CHUNK, need + need // 16 + 16)  # acceptance is about 0.98
        z, accept = _accept_block(table, m, buffers)
        values = z[accept]
        take = min(values.size, need)
        out[filled : filled + take] = values[:take]
        filled += take
    return out
