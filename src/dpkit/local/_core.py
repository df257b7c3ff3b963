"""Shared pieces of the local model: validation, reports, estimates, the public hash family.

Nothing here draws randomness except through :mod:`dpkit.noise`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, check_epsilon
from dpkit.errors import DomainMismatchError, InvalidDataError, InvalidParameterError

__all__ = [
    "FrequencyEstimate",
    "LinearHashFamily",
    "Reports",
    "check_domain_size",
    "client_values",
    "float_probabilities",
]

MAX_DOMAIN = 1 << 40


def check_domain_size(d: Any, name: str = "d", *, maximum: int = MAX_DOMAIN) -> int:
    """The domain size: an integer in [2, maximum] (public: checked before any data is read)."""
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or not 2 <= int(d) <= maximum:
        raise InvalidParameterError(
            name,
            d,
            f"an integer in [2, {maximum}]",
            "A domain of one value has nothing to protect; values are indices 0..d-1.",
        )
    return int(d)


def check_local_epsilon(epsilon: Number) -> Fraction:
    """ε > 0 as an exact fraction; ε above 50 is refused (it is no privacy, and e^ε overflows)."""
    eps = check_epsilon(epsilon)
    if eps > 50:
        raise InvalidParameterError(
            "epsilon", epsilon, "in (0, 50]", "Local ε above ~10 gives essentially no privacy."
        )
    return eps


def client_values(data: Any, d: int, name: str = "values") -> np.ndarray:
    """A client's values as a flat int64 array of indices in [0, d), or a clear error.

    Raised *before* any randomisation: a value outside the declared domain, NaN/inf, a
    non-integer or a non-numeric array is a bug in the caller's encoding, not private data
    (in the local model each client validates its own value before it randomises it).
    """
    try:
        array = np.asarray(data)
    except (ValueError, TypeError) as error:
        raise InvalidDataError(name, f"cannot be read as an array ({error})") from None
    if array.dtype == bool or array.dtype.kind not in "iuf":
        raise InvalidDataError(
            name,
            f"expected integer indices in [0, {d}), got dtype {array.dtype}",
            "Encode each value as its index in the declared domain first.",
        )
    flat = array.reshape(-1)
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(flat)):
            raise InvalidDataError(name, "contains NaN or infinite values")
        if not np.all(flat == np.floor(flat)):
            raise InvalidDataError(name, "contains non-integer values")
    if flat.size and (float(flat.min()) < 0 or float(flat.max()) >= d):
        raise InvalidDataError(
            name,
            f"a value is outside the declared domain [0, {d})",
            "Each value must be the index of one of the d domain elements.",
        )
    return flat.astype(np.int64)


def float_probabilities(epsilon: Fraction) -> tuple[float, float]:
    """(e^ε, e^{-ε}) as floats, for estimators (never for sampling)."""
    e = float(epsilon)
    return math.exp(e), math.exp(-e)


@dataclass(frozen=True, slots=True, eq=False)
class Reports:
    """Randomised reports of one oracle with fixed public parameters.

    Attributes:
        signature: the oracle's name and public parameters (ε, d, hash sizes, ...). The server
            refuses reports whose signature differs from its own.
        arrays: the report columns (e.g. ``{"seed": ..., "value": ...}``), one row per client.
        n: the number of reports.
    """

    signature: tuple[Any, ...]
    arrays: dict[str, np.ndarray]
    n: int

    def __len__(self) -> int:
        return self.n

    def concat(self, other: Reports) -> Reports:
        """Reports of two batches of the same oracle, pooled."""
        if other.signature != self.signature:
            raise DomainMismatchError(
                f"cannot pool reports of {other.signature} with reports of {self.signature}"
            )
        arrays = {k: np.concatenate([v, other.arrays[k]]) for k, v in self.arrays.items()}
        return Reports(self.signature, arrays, self.n + other.n)


def check_reports(reports: Any, signature: tuple[Any, ...]) -> Reports:
    """The reports, if they come from an oracle with exactly this signature; else raise."""
    if not isinstance(reports, Reports):
        raise InvalidDataError(
            "reports",
            f"expected dpkit.local.Reports, got {type(reports).__name__}",
            "Pass what the oracle's randomize() returned (or Reports(...) with its signature).",
        )
    if reports.signature != signature:
        raise DomainMismatchError(
            f"these reports come from {reports.signature}, but this server aggregates "
            f"{signature}: the oracle, ε or parameters differ, so the estimate would be wrong"
        )
    if reports.n < 1:
        raise InvalidDataError("reports", "is empty", "An estimate needs at least one report.")
    for key, column in reports.arrays.items():
        if not isinstance(column, np.ndarray) or len(column) != reports.n:
            raise InvalidDataError("reports", f"column {key!r} is not an array of n rows")
        if column.dtype.kind not in "biu":
            raise InvalidDataError(
                "reports", f"column {key!r} has dtype {column.dtype}, expected integers or bools"
            )
    return reports


@dataclass(frozen=True, slots=True, eq=False)
class FrequencyEstimate:
    """Frequency estimates from a local-DP frequency oracle.

    Attributes:
        values: the raw unbiased estimates f̂_v (they can be negative or exceed 1: that is the
            price of unbiasedness, not an error).
        variances: the analytic variance of each raw f̂_v in ``values``, evaluated at the
            clipped estimate (plug-in: the exact variance needs the unknown true frequency).
            It is not the variance of ``consistent``, which is biased and has none claimed.
        n: the number of reports.
        oracle: the oracle's name.
        epsilon: the per-report ε.
        consistent: the post-processed frequencies (non-negative, summing to 1) if
            ``postprocess`` was asked for, else None.
        postprocess: the post-processing method applied (None if none).
        candidates: the domain values the estimates refer to (None: 0..d-1).
    """

    values: np.ndarray
    variances: np.ndarray
    n: int
    oracle: str
    epsilon: Fraction
    consistent: np.ndarray | None = None
    postprocess: str | None = None
    candidates: np.ndarray | None = field(default=None)

    @property
    def standard_errors(self) -> np.ndarray:
        """sqrt of :attr:`variances`."""
        return np.sqrt(self.variances)

    @property
    def counts(self) -> np.ndarray:
        """Raw unbiased count estimates n·f̂_v (may be negative: raw)."""
        return self.values * self.n

    def best(self) -> np.ndarray:
        """The consistent frequencies if post-processed, else the raw estimates."""
        return self.values if self.consistent is None else self.consistent


# ----------------------------------------------------------------------------- hash family
def is_prime(x: int) -> bool:
    if x < 2:
        return False
    if x < 4:
        return True
    if x % 2 == 0:
        return False
    return all(x % f for f in range(3, math.isqrt(x) + 1, 2))


def next_prime(x: int) -> int:
    while not is_prime(x):
        x += 1
    return x


def digits(values: np.ndarray, base: int, length: int) -> np.ndarray:
    """Base-``base`` digits of non-negative int64 values, least significant first: (n, length)."""
    v = np.asarray(values, dtype=np.int64).copy()
    out = np.empty((v.size, length), dtype=np.int64)
    for j in range(length):  # loop over digits, not over values
        out[:, j] = v % base
        v //= base
    return out


def prime_power(q: int) -> tuple[int, int] | None:
    """(p, k) with q = p^k for a prime p, or None."""
    if q < 2:
        return None
    for p in range(2, math.isqrt(q) + 1):
        if q % p == 0:
            k, rest = 0, q
            while rest % p == 0:
                rest //= p
                k += 1
            return (p, k) if rest == 1 else None
    return (q, 1)


def _poly_mod(poly: list[int], modulus: list[int], p: int) -> list[int]:
    """poly mod modulus over GF(p); coefficients low degree first, modulus monic."""
    out = [c % p for c in poly]
    k = len(modulus) - 1
    for top in range(len(out) - 1, k - 1, -1):
        c = out[top]
        if c:
            for i in range(k + 1):
                out[top - k + i] = (out[top - k + i] - c * modulus[i]) % p
    return (out + [0] * k)[:k]


def _poly_of(x: int, p: int, k: int) -> list[int]:
    return [(x // p**i) % p for i in range(k)]


def _irreducible(p: int, k: int) -> list[int]:
    """The first monic irreducible polynomial of degree k over GF(p) (trial division)."""
    for tail in range(p**k):
        cand = [*_poly_of(tail, p, k), 1]
        if all(
            any(_poly_mod(cand, [*_poly_of(t, p, deg), 1], p))
            for deg in range(1, k // 2 + 1)
            for t in range(p**deg)
        ):
            return cand
    raise AssertionError("no irreducible polynomial")  # pragma: no cover - always exists


def field_tables(q: int) -> tuple[np.ndarray, np.ndarray]:
    """Addition and multiplication tables of GF(q), q = p^k (elements as base-p digit codes)."""
    pk = prime_power(q)
    if pk is None:
        raise InvalidParameterError("g", q, "a prime power")
    p, k = pk
    elements = np.arange(q)
    coeffs = digits(elements, p, k)
    add = ((coeffs[:, None, :] + coeffs[None, :, :]) % p) @ (p ** np.arange(k))
    modulus = _irreducible(p, k) if k > 1 else [0, 1]
    mul = np.zeros((q, q), dtype=np.int64)
    for x in range(q):  # q ≤ 256: a one-off table, not a loop over data
        px = _poly_of(x, p, k)
        for y in range(q):
            py = _poly_of(y, p, k)
            prod = [0] * (2 * k - 1)
            for i, a in enumerate(px):
                for j, b in enumerate(py):
                    prod[i + j] += a * b
            reduced = _poly_mod(prod, modulus, p) if k > 1 else [prod[0] % p]
            mul[x, y] = sum(c * p**i for i, c in enumerate(reduced))
    return np.asarray(add, dtype=np.int64), mul


_TABLES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _tables(q: int) -> tuple[np.ndarray, np.ndarray]:
    if q not in _TABLES:
        _TABLES[q] = field_tables(q)
    return _TABLES[q]


@dataclass(frozen=True, slots=True)
class LinearHashFamily:
    """The public family {h_a(v) = <a, digits_g(v)> over GF(g) : a ∈ GF(g)^L}, g^L >= d, g a
    prime (arithmetic mod g) or a prime power <= 256 (GF(p^k) by addition/multiplication tables).

    It has exactly S = g^L members (bounded). For any two different values u ≠ v their digit
    vectors differ, so for a uniform seed a, <a, u - v> is uniform on GF(g): the collision
    probability P_a(h_a(u) = h_a(v)) is **exactly** 1/g for every pair. This is all the
    local-hashing estimators need to be unbiased with the textbook variance, so the finite
    family costs nothing in accuracy (see docs/local.md). The family is public and
    deterministic: the only randomness is the client's uniform seed, drawn with
    :func:`dpkit.noise.uniform_integers`.

    The server sums any table T[a, y] over the family along h, F(v) = Σ_a T[a, h_a(v)], for all
    v at once with one (L+1)-dimensional FFT of size g^{L+1} (:meth:`family_sum`; for prime
    powers, whose additive characters are not those of Z_g, by gathering over the S × d hash
    table in chunks), or per report for a list of candidates (:meth:`evaluate_outer`).
    """

    g: int
    length: int

    @classmethod
    def for_domain(cls, d: int, g: int) -> LinearHashFamily:
        if not is_prime(g) and (prime_power(g) is None or g > 256):
            raise InvalidParameterError(
                "g", g, "a prime, or a prime power <= 256 (the hash range is the field GF(g))"
            )
        length = 1
        while g**length < d:
            length += 1
        if g**length >= 2**62:
            raise InvalidParameterError("d", d, "small enough that g^L < 2^62")
        return cls(g, length)

    @property
    def size(self) -> int:
        return int(self.g**self.length)

    @property
    def prime(self) -> bool:
        return is_prime(self.g)

    def evaluate(self, seeds: np.ndarray, values: np.ndarray) -> np.ndarray:
        """h_{seed_i}(value_i), elementwise."""
        a = digits(seeds, self.g, self.length)
        v = digits(values, self.g, self.length)
        if self.prime:
            return np.asarray((a * v).sum(axis=1) % self.g, dtype=np.int64)
        add, mul = _tables(self.g)
        acc = np.zeros(a.shape[0], dtype=np.int64)
        for j in range(self.length):  # loop over digits, not over values
            acc = add[acc, mul[a[:, j], v[:, j]]]
        return acc

    def evaluate_outer(self, seeds: np.ndarray, values: np.ndarray) -> np.ndarray:
        """h_{seed_i}(value_j) for every pair: (len(seeds), len(values)). Exact float matmul
        (prime g) or field-table lookups (prime powers)."""
        a = digits(seeds, self.g, self.length)
        v = digits(values, self.g, self.length)
        if self.prime:
            product = a.astype(np.float64) @ v.astype(np.float64).T
            return np.asarray(np.rint(product), dtype=np.int64) % self.g
        add, mul = _tables(self.g)
        acc = np.zeros((a.shape[0], v.shape[0]), dtype=np.int64)
        for j in range(self.length):  # loop over digits, not over values
            acc = add[acc, mul[a[:, j, None], v[None, :, j]]]
        return acc

    def table_fits(self, limit: int = 1 << 25, d: int | None = None) -> bool:
        if self.prime:
            return self.size * self.g <= limit
        return self.size * (d or self.size) * self.length <= (1 << 28)

    def family_sum(self, table: np.ndarray, values: np.ndarray) -> np.ndarray:
        """F(v) = Σ_a table[a, h_a(v)] for each v, by one FFT over GF(g)^{L+1}.

        With ω = e^{2πi/g}: 1{z ≡ 0} = (1/g)Σ_t ω^{tz}, so
        F(v) = (1/g) Σ_t Σ_{a,y} T[a,y] ω^{t(<a,v> - y)} = (1/g) Σ_t X[-t·v, t], where X is the
        (L+1)-dimensional DFT of T (numpy's sign convention, hence -t·v). Cost O(g^{L+1} log)
        plus O(d·g), independent of the number of reports.
        """
        g, length = self.g, self.length
        if not self.prime:
            return self._gather_sum(table, values)
        # T[a, y]: C-order reshape puts a's most significant digit first; reverse the digit
        # axes so that axis j holds digit a_j.
        cube = np.asarray(table, dtype=np.float64).reshape((g,) * (length + 1))
        cube = np.transpose(cube, (*range(length - 1, -1, -1), length))
        spectrum = np.fft.fftn(cube)
        v = digits(values, g, length)
        total = np.zeros(v.shape[0], dtype=np.complex128)
        for t in range(g):  # loop over the g field elements, not over reports
            index = (*(-t * v[:, j] % g for j in range(length)), np.full(v.shape[0], t))
            total += spectrum[index]
        return np.asarray(total.real / g)

    def hash_table(self, values: np.ndarray) -> np.ndarray:
        """H[a, j] = h_a(values[j]) for every seed a, as uint8 (prime powers <= 256), built digit
        by digit: with M_i[x, j] = x·v_{j,i} in GF(g), the rows for seeds of digits 0..i are
        add(M_i[a_i], rows for digits 0..i-1): about S·d table lookups in all."""
        add, mul = _tables(self.g)
        add8 = add.astype(np.uint8)
        v = digits(values, self.g, self.length)
        field = np.arange(self.g)
        out = mul[field[:, None], v[None, :, 0]].astype(np.uint8)  # (g, d): seeds of digit 0
        for i in range(1, self.length):  # loop over digits, not over values
            m = mul[field[:, None], v[None, :, i]].astype(np.uint8)  # (g, d)
            out = add8[m[:, None, :], out[None, :, :]].reshape(-1, v.shape[0])
        return out

    def _gather_sum(self, table: np.ndarray, values: np.ndarray) -> np.ndarray:
        """F(v) = Σ_a T[a, h_a(v)] from the S × d hash table (:meth:`hash_table`)."""
        t = np.asarray(table, dtype=np.float64)
        hashed = self.hash_table(np.asarray(values, dtype=np.int64))
        total = np.zeros(hashed.shape[1])
        chunk = max(1, (1 << 22) // max(hashed.shape[1], 1))
        for start in range(0, self.size, chunk):  # chunks of seeds, not reports
            rows = hashed[start : start + chunk]
            total += np.take_along_axis(t[start : start + chunk], rows.astype(np.intp), 1).sum(0)
        return total
