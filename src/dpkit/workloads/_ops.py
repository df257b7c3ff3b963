"""Workloads of linear queries as implicit operators (a small algebra; no dense n×n for large n).

A :class:`Workload` W (m queries over a histogram of n cells) exposes ``matmat`` (W·X),
``rmatmat`` (Wᵀ·Y), ``gram_matmat`` (WᵀW·V), the diagonal of the Gram matrix WᵀW (the squared
column norms), ``gram_eigenvalues`` (closed forms for Prefix and AllRange) and, for small n
only, ``dense()`` / ``gram_dense()``. Every dense materialisation first estimates its memory and
refuses with :class:`~dpkit.errors.InvalidParameterError` above ``max_bytes`` (public: it depends
on the declared domain only).

Closed forms used (0-indexed cells):

* Prefix (W = lower-triangular ones): (WᵀW)_{ab} = n - max(a, b); eigenvalues
  1 / (4 sin²((2k-1)π / (4n+2))), k = 1..n.
* AllRange (every interval [i, j]): (WᵀW)_{ab} = (min(a, b) + 1)(n - max(a, b)) = (n+1)·T⁻¹ with
  T = tridiag(-1, 2, -1); eigenvalues (n+1) / (4 sin²(kπ / (2n+2))).
* Kronecker products: (⊗Wᵢ)ᵀ(⊗Wᵢ) = ⊗WᵢᵀWᵢ, eigenvalues are products.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import combinations
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator

from dpkit.errors import InvalidParameterError

__all__ = [
    "AllRange",
    "Explicit",
    "Identity",
    "Kron",
    "Marginals",
    "Prefix",
    "Total",
    "VStack",
    "WidthRange",
    "Workload",
    "check_dense_memory",
    "query_variances",
]

DEFAULT_MAX_BYTES = 2 * 2**30  # 2 GiB for any single dense array built here


def check_dense_memory(what: str, rows: int, cols: int, max_bytes: int) -> None:
    """Refuse (before any data is read) a dense float64 array that would exceed ``max_bytes``."""
    need = 8 * rows * cols
    if need > max_bytes:
        raise InvalidParameterError(
            "domain",
            f"{rows}×{cols}",
            f"small enough that {what} fits in max_bytes={max_bytes:,} (needs {need:,} bytes)",
            "Use an implicit strategy (Kronecker products, marginals / ResidualPlanner, or the "
            "closed-form baselines) or raise max_bytes.",
        )


def _as_2d(x: np.ndarray) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        return x[:, None], True
    return x, False


class Workload:
    """m linear queries over n histogram cells; subclasses implement ``_matmat``/``_rmatmat``."""

    shape: tuple[int, int]
    name: str = "workload"

    # -- products ---------------------------------------------------------------------------
    def matmat(self, x: np.ndarray) -> np.ndarray:
        """W·X for X of shape (n,) or (n, k)."""
        x2, vec = _as_2d(x)
        if x2.shape[0] != self.shape[1]:
            raise InvalidParameterError("x", f"shape {np.shape(x)}", f"{self.shape[1]} rows")
        out = self._matmat(x2)
        return out[:, 0] if vec else out

    def rmatmat(self, y: np.ndarray) -> np.ndarray:
        """Wᵀ·Y for Y of shape (m,) or (m, k)."""
        y2, vec = _as_2d(y)
        if y2.shape[0] != self.shape[0]:
            raise InvalidParameterError("y", f"shape {np.shape(y)}", f"{self.shape[0]} rows")
        out = self._rmatmat(y2)
        return out[:, 0] if vec else out

    def gram_matmat(self, v: np.ndarray) -> np.ndarray:
        """WᵀW·V without forming WᵀW."""
        return self.rmatmat(self.matmat(v))

    def gram_diag(self) -> np.ndarray:
        """diag(WᵀW): the squared L2 norm of each column."""
        n = self.shape[1]
        out = np.empty(n)
        block = max(1, min(n, 2**22 // max(1, self.shape[0])))
        for start in range(0, n, block):
            stop = min(n, start + block)
            e = np.zeros((n, stop - start))
            e[np.arange(start, stop), np.arange(stop - start)] = 1.0
            out[start:stop] = np.sum(self.matmat(e) ** 2, axis=0)
        return out

    def gram_trace(self) -> float:
        """tr(WᵀW) = ‖W‖_F² (the identity strategy's error at unit noise)."""
        return float(np.sum(self.gram_diag()))

    def dense(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        m, n = self.shape
        check_dense_memory(f"the workload {self.name}", m, n, max_bytes)
        return self.matmat(np.eye(n))

    def gram_dense(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        n = self.shape[1]
        check_dense_memory(f"the Gram matrix of {self.name}", n, n, max_bytes)
        return self.gram_matmat(np.eye(n))

    def gram_eigenvalues(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        """Eigenvalues of WᵀW (closed form where known; dense eigvalsh otherwise)."""
        g = self.gram_dense(max_bytes)
        return np.clip(np.linalg.eigvalsh(g), 0.0, None)

    def as_linear_operator(self) -> LinearOperator:
        m, n = self.shape
        return LinearOperator(
            (m, n),
            matvec=lambda v: self.matmat(np.ravel(v)),
            rmatvec=lambda v: self.rmatmat(np.ravel(v)),
            matmat=self.matmat,
            rmatmat=self.rmatmat,
            dtype=np.float64,
        )

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}[{self.shape[0]}×{self.shape[1]}]"


def _check_n(n: Any, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(name, n, "an integer >= 1")
    return int(n)


class Identity(Workload):
    """Every cell once."""

    def __init__(self, n: int) -> None:
        self.n = _check_n(n)
        self.shape = (self.n, self.n)
        self.name = f"Identity({self.n})"

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        return x.copy()

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        return y.copy()

    def gram_diag(self) -> np.ndarray:
        return np.ones(self.n)

    def gram_eigenvalues(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        return np.ones(self.n)


class Total(Workload):
    """The sum of all cells."""

    def __init__(self, n: int) -> None:
        self.n = _check_n(n)
        self.shape = (1, self.n)
        self.name = f"Total({self.n})"

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        return np.sum(x, axis=0, keepdims=True)

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        return np.repeat(y, self.n, axis=0)

    def gram_diag(self) -> np.ndarray:
        return np.ones(self.n)

    def gram_eigenvalues(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        out = np.zeros(self.n)
        out[-1] = self.n
        return out


class Prefix(Workload):
    """The n prefix sums x_0 + … + x_i (an empirical CDF)."""

    def __init__(self, n: int) -> None:
        self.n = _check_n(n)
        self.shape = (self.n, self.n)
        self.name = f"Prefix({self.n})"

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        return np.cumsum(x, axis=0)

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        return np.cumsum(y[::-1], axis=0)[::-1]

    def gram_diag(self) -> np.ndarray:
        return (self.n - np.arange(self.n)).astype(np.float64)

    def gram_eigenvalues(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        k = np.arange(1, self.n + 1)
        return np.asarray(1.0 / (4 * np.sin((2 * k - 1) * np.pi / (4 * self.n + 2)) ** 2))


class AllRange(Workload):
    """Every interval sum x_i + … + x_j, 0 <= i <= j < n (n(n+1)/2 queries, never listed)."""

    def __init__(self, n: int) -> None:
        self.n = _check_n(n)
        self.shape = (self.n * (self.n + 1) // 2, self.n)
        self.name = f"AllRange({self.n})"

    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        i, j = np.triu_indices(self.n)
        return i, j

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        check_dense_memory("the all-range answers", self.shape[0], x.shape[1], DEFAULT_MAX_BYTES)
        c = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
        i, j = self._pairs()
        return np.asarray(c[j + 1] - c[i])

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        i, j = self._pairs()
        # Wᵀy at cell a = Σ_{i <= a <= j} y_ij: difference array on (i, j+1)
        diff = np.zeros((self.n + 1, y.shape[1]))
        np.add.at(diff, i, y)
        np.add.at(diff, j + 1, -y)
        return np.asarray(np.cumsum(diff, axis=0)[: self.n])

    def gram_matmat(self, v: np.ndarray) -> np.ndarray:
        v2, vec = _as_2d(v)
        n = self.n
        a = np.arange(n, dtype=np.float64)[:, None]
        # G_ab = (min+1)(n-max): Σ_{b<=a} (b+1)(n-a) v_b + Σ_{b>a} (a+1)(n-b) v_b
        low = np.cumsum((a + 1) * v2, axis=0) * (n - a)
        high_terms = (n - a) * v2
        suffix = np.cumsum(high_terms[::-1], axis=0)[::-1]
        high = np.vstack([suffix[1:], np.zeros((1, v2.shape[1]))]) * (a + 1)
        out = low + high
        return out[:, 0] if vec else out

    def gram_diag(self) -> np.ndarray:
        a = np.arange(self.n, dtype=np.float64)
        return (a + 1) * (self.n - a)

    def gram_eigenvalues(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        k = np.arange(1, self.n + 1)
        return np.asarray((self.n + 1) / (4 * np.sin(k * np.pi / (2 * self.n + 2)) ** 2))


class WidthRange(Workload):
    """All intervals of width exactly w: x_i + … + x_{i+w-1}, i = 0..n-w."""

    def __init__(self, n: int, w: int) -> None:
        self.n = _check_n(n)
        self.w = _check_n(w, "w")
        if self.w > self.n:
            raise InvalidParameterError("w", w, f"<= n = {self.n}")
        self.shape = (self.n - self.w + 1, self.n)
        self.name = f"WidthRange({self.n}, w={self.w})"

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        c = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
        return np.asarray(c[self.w :] - c[: -self.w])

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        diff = np.zeros((self.n + 1, y.shape[1]))
        diff[: self.shape[0]] += y
        diff[self.w : self.w + self.shape[0]] -= y
        return np.asarray(np.cumsum(diff, axis=0)[: self.n])


class Explicit(Workload):
    """A workload given as an explicit (dense or scipy.sparse) matrix of real numbers."""

    def __init__(self, matrix: Any, name: str = "Explicit") -> None:
        import scipy.sparse as sp

        if sp.issparse(matrix):
            mat: Any = sp.csr_matrix(matrix, dtype=np.float64)
            data = mat.data
        else:
            raw = np.asarray(matrix)
            if raw.dtype == bool or raw.dtype.kind not in "iuf":
                raise InvalidParameterError(
                    "matrix", f"dtype {raw.dtype}", "a numeric (int or float) matrix"
                )
            mat = raw.astype(np.float64)
            data = mat
        if mat.ndim != 2 or 0 in mat.shape:
            raise InvalidParameterError("matrix", f"shape {mat.shape}", "a non-empty 2-D matrix")
        if not np.all(np.isfinite(data)):
            raise InvalidParameterError("matrix", "NaN or inf entries", "finite numbers only")
        self.matrix = mat
        self.shape = (int(mat.shape[0]), int(mat.shape[1]))
        self.name = name

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.matrix @ x)

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(self.matrix.T @ y)


@dataclass(eq=False)
class Kron(Workload):
    """W₁ ⊗ W₂ ⊗ … over a multi-attribute domain (cells in C order: last attribute fastest)."""

    factors: Sequence[Workload]
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.factors:
            raise InvalidParameterError("factors", self.factors, "at least one workload")
        self.shape = (
            math.prod(f.shape[0] for f in self.factors),
            math.prod(f.shape[1] for f in self.factors),
        )
        if not self.name:
            self.name = " ⊗ ".join(f.name for f in self.factors)

    def _apply(self, x: np.ndarray, transpose: bool) -> np.ndarray:
        k = x.shape[1]
        dims_in = [f.shape[0] if transpose else f.shape[1] for f in self.factors]
        t = x.T.reshape([k, *dims_in])
        for axis, f in enumerate(self.factors):
            moved = np.moveaxis(t, axis + 1, -1)
            lead = moved.shape[:-1]
            flat = moved.reshape(-1, moved.shape[-1]).T
            res = f.rmatmat(flat) if transpose else f.matmat(flat)
            t = np.moveaxis(res.T.reshape([*lead, res.shape[0]]), -1, axis + 1)
        return np.asarray(t.reshape(k, -1).T)

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        return self._apply(x, transpose=False)

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        return self._apply(y, transpose=True)

    def gram_diag(self) -> np.ndarray:
        return reduce(np.kron, [f.gram_diag() for f in self.factors])

    def gram_eigenvalues(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        return reduce(np.kron, [f.gram_eigenvalues(max_bytes) for f in self.factors])


class VStack(Workload):
    """A union of workloads over the same cells, optionally weighted (rows stacked)."""

    def __init__(self, parts: Sequence[Workload], weights: Sequence[float] | None = None) -> None:
        if not parts:
            raise InvalidParameterError("parts", parts, "at least one workload")
        n = parts[0].shape[1]
        for p in parts:
            if p.shape[1] != n:
                raise InvalidParameterError(
                    "parts", f"{p.name} with {p.shape[1]} cells", f"{n} cells like the first part"
                )
        w = [1.0] * len(parts) if weights is None else [float(v) for v in weights]
        if len(w) != len(parts) or not all(math.isfinite(v) and v > 0 for v in w):
            raise InvalidParameterError("weights", weights, "one positive weight per part")
        self.parts = list(parts)
        self.weights = w
        self.shape = (sum(p.shape[0] for p in parts), n)
        self.name = " ∪ ".join(p.name for p in parts)

    def _matmat(self, x: np.ndarray) -> np.ndarray:
        return np.vstack([w * p.matmat(x) for p, w in zip(self.parts, self.weights, strict=True)])

    def _rmatmat(self, y: np.ndarray) -> np.ndarray:
        out = np.zeros((self.shape[1], y.shape[1]))
        start = 0
        for p, w in zip(self.parts, self.weights, strict=True):
            stop = start + p.shape[0]
            out += w * p.rmatmat(y[start:stop])
            start = stop
        return out

    def gram_matmat(self, v: np.ndarray) -> np.ndarray:
        return sum(  # type: ignore[return-value]
            (w * w * p.gram_matmat(v) for p, w in zip(self.parts, self.weights, strict=True)),
        )

    def gram_diag(self) -> np.ndarray:
        return np.asarray(
            sum(w * w * p.gram_diag() for p, w in zip(self.parts, self.weights, strict=True))
        )


class Marginals(VStack):
    """Marginal tables over a multi-attribute domain: one Kron(Identity/Total) per attribute set.

    Args:
        domain: the number of values of each attribute (declared, public).
        attribute_sets: tuples of attribute indices; or use :meth:`all_kway`.
        weights: optional positive weight per marginal.
    """

    def __init__(
        self,
        domain: Sequence[int],
        attribute_sets: Sequence[Sequence[int]],
        weights: Sequence[float] | None = None,
    ) -> None:
        self.domain = tuple(_check_n(d, "domain") for d in domain)
        sets: list[tuple[int, ...]] = []
        for s in attribute_sets:
            t = tuple(sorted({int(a) for a in s}))
            if any(a < 0 or a >= len(self.domain) for a in t):
                raise InvalidParameterError(
                    "attribute_sets", s, f"indices in 0..{len(self.domain) - 1}"
                )
            sets.append(t)
        if not sets:
            raise InvalidParameterError("attribute_sets", attribute_sets, "at least one set")
        self.attribute_sets = sets
        self._marginal_weights = [1.0] * len(sets) if weights is None else list(weights)
        super().__init__(
            [
                Kron([Identity(d) if i in s else Total(d) for i, d in enumerate(self.domain)])
                for s in sets
            ],
            self._marginal_weights,
        )
        self.name = f"Marginals({len(sets)} over {len(self.domain)} attributes)"

    @classmethod
    def all_kway(cls, domain: Sequence[int], k: int) -> Marginals:
        """Every k-way marginal of the domain."""
        return cls(domain, list(combinations(range(len(domain)), k)))


def query_variances(workload: Workload, cov: np.ndarray, block: int = 4096) -> np.ndarray:
    """diag(W·C·Wᵀ) for a dense n×n C, in blocks of queries (closed form for AllRange)."""
    if isinstance(workload, AllRange):
        s = np.zeros((cov.shape[0] + 1, cov.shape[1] + 1))
        s[1:, 1:] = np.cumsum(np.cumsum(cov, axis=0), axis=1)
        i, j = np.triu_indices(workload.n)
        return np.asarray(s[j + 1, j + 1] - s[i, j + 1] - s[j + 1, i] + s[i, i])
    m = workload.shape[0]
    out = np.empty(m)
    for start in range(0, m, block):
        stop = min(m, start + block)
        e = np.zeros((m, stop - start))
        e[np.arange(start, stop), np.arange(stop - start)] = 1.0
        wt = workload.rmatmat(e)  # n × block: the queries as columns
        out[start:stop] = np.sum(wt * (cov @ wt), axis=0)
    return out
