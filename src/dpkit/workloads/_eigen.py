"""The column-normalised eigen-design, with closed-form spectra and an O(n log² n) exact error.

**The strategy** (the eigen-design of Li & Miklau, "An adaptive mechanism for accurate query
answering under differential privacy", PVLDB 2012, and Li, Miklau, Hay, McGregor & Rastogi,
"The matrix mechanism", VLDB J. 2015, §6): with G = WᵀW = VΛVᵀ and S = G^{1/2} = VΛ^{1/2}Vᵀ,
measure

    A = Λ^{1/4} Vᵀ D,   D = diag(S_jj)^{-1/2},

so AᵀA = X = D S D and every column of A has L2 norm exactly 1 (‖A e_j‖² = d_j² S_jj): Δ₂(A) = 1.
Without D (A = Λ^{1/4}Vᵀ scaled uniformly) AᵀA ∝ S attains the SVD bound only when all S_jj are
equal; the column normalisation trades a little of the spectrum's shape for equal column norms
(Prefix: 1.74–1.81× the bound without D, 1.017–1.047× with it). Its expected total squared error
per unit noise variance is

    tr(G X⁻¹) = tr(G D⁻¹ S⁻¹ D⁻¹) = Σ_k λ_k^{-1/2} ‖W D⁻¹ v_k‖² = Σ_{a,b} e_a e_b G_ab (S⁻¹)_ab,

with e = diag(D⁻¹) = diag(S)^{1/2}.

**Closed-form spectra.** AllRange: G = (n+1)·T⁻¹ with T = tridiag(-1, 2, -1), whose eigenvectors
are the DST-I sinusoids v_k(j) = √(2/(n+1)) sin((j+1)kπ/(n+1)), λ_k = (n+1)/(2 - 2cos(kπ/(n+1))).
Prefix: G = LᵀL (L lower-triangular ones), G⁻¹ = L⁻¹L⁻ᵀ = tridiag(-1, 2, -1) with a 1 in the top
corner, whose eigenvectors are the DCT-VIII sinusoids v_k(j) = (2/√(2n+1)) cos((2j+1)φ_k),
φ_k = (2k-1)π/(4n+2), λ_k = 1/(4 sin²φ_k), k = 1..n (checked against numpy ``eigh`` in the tests;
scipy.fft has no DCT-VIII, so the sums below use one complex FFT of length 4n+2).

For any weights w_k the matrix Σ_k w_k v_k v_kᵀ is then Toeplitz-plus-Hankel:
AllRange c(a-b) - c(a+b+2), c(m) = (1/(n+1)) Σ_k w_k cos(mkπ/(n+1)); Prefix c(a-b) + c(a+b+1),
c(m) = (2/(2n+1)) Σ_k w_k cos(m(2k-1)π/(2n+1)). Every c(m), m = 0..2n, is one FFT of the
weights placed at their integer frequencies. With w = λ^{1/2} this gives diag(S) in O(n log n);
with w = λ^{-1/2} it gives S⁻¹.

**The exact error in O(n log² n).** Both Grams are semiseparable: G_ab = f_min(a,b)·h_max(a,b)
(Prefix f = 1, h_b = n - b; AllRange f_a = a + 1, h_b = n - b). With p = e∘f, q = e∘h,

    Σ_{a,b} e_a e_b G_ab M_ab = Σ_a e_a² G_aa M_aa + 2Σ_{d>=1} c(d)·Σ_a p_a q_{a+d}
                                 ± 2Σ_s c(s+o)·Σ_{a<b, a+b=s} p_a q_b

for M = S⁻¹ = Toeplitz c(a-b) ± Hankel c(a+b+o). The Toeplitz part is one FFT cross-correlation;
the Hankel part is a convolution restricted to a < b, computed level by level (left half of each
dyadic block against its right half, all blocks of a level in one batched FFT, log₂n levels).
At n = 65,536 this takes about 0.1 s; it agrees with the dense eigendecomposition formula to
~1e-13 relative at n <= 1024 (tested to 1e-9).

**Release.** The eigen-design has no sparse form: its exact release quantises the dense n×n A
(B = round(A·2^k), :func:`dpkit.workloads.quantise`) like any real-valued strategy, so it is
released only when that dense matrix fits ``max_bytes``; above, :meth:`EigenDesign.dense` refuses
with :class:`~dpkit.errors.InvalidParameterError` (public: it depends on n only). The analytic
error and the choice do not need the dense matrix.

Other workloads: a dense ``eigh`` of WᵀW when it fits (eigenvalues floored at 1e-8·λ_max so that
a rank-deficient W still gives a full-rank strategy), and the error from the same formula densely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.fft as sfft

from dpkit.errors import InvalidParameterError
from dpkit.workloads._ops import (
    DEFAULT_MAX_BYTES,
    AllRange,
    Prefix,
    Workload,
    check_dense_memory,
    query_variances,
)

__all__ = [
    "EigenDesign",
    "closed_form_spectrum",
    "eigen_design",
    "tree_level_traces",
    "tree_unit_error",
]

_FLOOR = 1e-8  # relative eigenvalue floor for rank-deficient workloads (dense path)


@dataclass(frozen=True)
class CosineSpectrum:
    """Closed-form eigen-structure of WᵀW: v_k(a)v_k(b) summed with weights is
    scale·(C(a-b) + sign·C(a+b+offset)), C(m) = Σ_k w_k cos(π·m·freq_k/period)."""

    eigenvalues: np.ndarray  # λ_k, k = 1..n (the order of ``freq``)
    freq: np.ndarray  # integer l_k
    period: int  # M: angle π·l_k/M
    scale: float
    offset: int
    sign: float

    @property
    def n(self) -> int:
        return int(self.eigenvalues.size)

    def cosine_sums(self, weights: np.ndarray) -> np.ndarray:
        """scale·Σ_k w_k cos(π m l_k / M) for m = 0..2M-1 (one FFT of length 2M)."""
        z = np.zeros(2 * self.period, dtype=np.complex128)
        z[self.freq] = weights
        return np.asarray(self.scale * np.real(sfft.fft(z)))

    def weighted_diag(self, weights: np.ndarray) -> np.ndarray:
        """diag(Σ_k w_k v_k v_kᵀ)."""
        c = self.cosine_sums(weights)
        j = np.arange(self.n)
        return np.asarray(c[0] + self.sign * c[2 * j + self.offset])

    def vectors(self) -> np.ndarray:
        """The orthonormal eigenvectors as rows (n×n; dense, small n only)."""
        j = np.arange(self.n, dtype=np.float64)[None, :]
        k = self.freq.astype(np.float64)[:, None]
        if self.sign > 0:  # Prefix: cos((2j+1)·l_k·π/(2M)), l_k = 2k-1, M = 2n+1
            vecs = np.cos((2 * j + 1) * k * (np.pi / (2 * self.period)))
        else:  # AllRange: sin((j+1)·k·π/(n+1))
            vecs = np.sin((j + 1) * k * (np.pi / self.period))
        return np.asarray(vecs / np.linalg.norm(vecs, axis=1, keepdims=True))


def closed_form_spectrum(workload: Workload) -> CosineSpectrum | None:
    """The closed-form spectrum of Prefix and AllRange (see the module doc), else ``None``."""
    n = workload.shape[1]
    k = np.arange(1, n + 1, dtype=np.int64)
    if isinstance(workload, Prefix):
        lam = 1.0 / (4 * np.sin((2 * k - 1) * np.pi / (4 * n + 2)) ** 2)
        return CosineSpectrum(lam, 2 * k - 1, 2 * n + 1, 2.0 / (2 * n + 1), 1, 1.0)
    if isinstance(workload, AllRange):
        lam = (n + 1) / (4 * np.sin(k * np.pi / (2 * n + 2)) ** 2)
        return CosineSpectrum(lam, k, n + 1, 1.0 / (n + 1), 2, -1.0)
    return None


def semiseparable(workload: Workload) -> tuple[np.ndarray, np.ndarray] | None:
    """(f, h) with (WᵀW)_ab = f_min(a,b)·h_max(a,b) for Prefix and AllRange, else ``None``."""
    n = workload.shape[1]
    a = np.arange(n, dtype=np.float64)
    if isinstance(workload, Prefix):
        return np.ones(n), n - a
    if isinstance(workload, AllRange):
        return a + 1, n - a
    return None


def _upper_convolution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """C[s] = Σ_{a<b, a+b=s} p_a q_b for s = 0..2n-2, in O(n log² n).

    Every pair a < b is split by exactly one dyadic block (of the padded length N = 2^L) whose
    left half holds a and right half holds b. Level by level, all blocks' left halves of p are
    convolved with their right halves of q in one batched FFT; block r of half-size h starts at
    r·2h, so its sums a + b land at 4rh + h + t, t = 0..2h-2, disjoint across blocks.
    """
    n = p.size
    size = 1 << max(1, (n - 1).bit_length())
    pp = np.zeros(size)
    qq = np.zeros(size)
    pp[:n] = p
    qq[:n] = q
    out = np.zeros(2 * size)
    half = size // 2
    while half >= 1:
        rows = size // (2 * half)
        left = pp.reshape(rows, 2 * half)[:, :half]
        right = qq.reshape(rows, 2 * half)[:, half:]
        length = 4 * half
        conv = sfft.irfft(
            sfft.rfft(left, length, axis=1) * sfft.rfft(right, length, axis=1), length, axis=1
        )
        block = np.zeros((rows, 4 * half))
        block[:, half : 3 * half - 1] = conv[:, : 2 * half - 1]
        out += block.reshape(-1)
        half //= 2
    return out[: 2 * n - 1]


def _lower_hankel(e: np.ndarray, c: np.ndarray, shift: int) -> np.ndarray:
    """r_i = Σ_{a<i} e_a c(a + i + shift) for i = 0..n-1, in O(n log² n) (``c`` long enough).

    As in :func:`_upper_convolution`, each pair a < i is split by one dyadic block: a in its
    left half (a = a0 + α), i in its right half (i = a0 + h + β), so the block adds
    Σ_α e_{a0+α} c(2a0 + h + shift + α + β) — a correlation of e's left half with a window of c,
    all blocks of a level in one batched FFT.
    """
    n = e.size
    size = 1 << max(1, (n - 1).bit_length())
    ee = np.zeros(size)
    ee[:n] = e
    cc = np.zeros(2 * size + shift + 1)
    cc[: min(c.size, cc.size)] = c[: cc.size]
    out = np.zeros(size)
    half = size // 2
    while half >= 1:
        rows = size // (2 * half)
        left = ee.reshape(rows, 2 * half)[:, :half]
        base = 2 * (np.arange(rows) * 2 * half) + half + shift
        windows = cc[base[:, None] + np.arange(2 * half - 1)[None, :]]
        length = 4 * half
        corr = sfft.irfft(
            sfft.rfft(left[:, ::-1], length, axis=1) * sfft.rfft(windows, length, axis=1),
            length,
            axis=1,
        )[:, half - 1 : 2 * half - 1]
        out.reshape(rows, 2 * half)[:, half:] += corr
        half //= 2
    return out[:n]


def _prefix_variances(e: np.ndarray, spectrum: CosineSpectrum, weights: np.ndarray) -> np.ndarray:
    """wᵢᵀ E M E wᵢ for the prefix queries wᵢ = 1_{[0, i]}, M = Σ_k w_k v_k v_kᵀ = Toeplitz c(a-b)
    + sign·Hankel c(a+b+o): V(i) = V(i-1) + e_i²M_ii + 2e_i·Σ_{a<i} e_a M_ai, the Toeplitz part
    of the inner sum a causal FFT convolution, the Hankel part :func:`_lower_hankel`."""
    n = e.size
    c = spectrum.cosine_sums(weights)
    j = np.arange(n)
    m_diag = c[0] + spectrum.sign * c[2 * j + spectrum.offset]
    length = sfft.next_fast_len(2 * n)
    causal = sfft.irfft(sfft.rfft(e, length) * sfft.rfft(c[:n], length), length)[:n]
    inner = causal - e * c[0] + spectrum.sign * _lower_hankel(e, c, spectrum.offset)
    return np.asarray(np.cumsum(e * e * m_diag + 2.0 * e * inner))


def _semiseparable_error(
    f: np.ndarray, h: np.ndarray, e: np.ndarray, spectrum: CosineSpectrum, weights: np.ndarray
) -> float:
    """Σ_{a,b} e_a e_b G_ab M_ab for G_ab = f_min h_max and M = Σ_k w_k v_k v_kᵀ (module doc)."""
    n = f.size
    c = spectrum.cosine_sums(weights)
    j = np.arange(n)
    m_diag = c[0] + spectrum.sign * c[2 * j + spectrum.offset]
    p = e * f
    q = e * h
    total = float(np.sum(e * e * f * h * m_diag))
    # Toeplitz part: R(d) = Σ_a p_a q_{a+d} (cross-correlation by FFT)
    length = sfft.next_fast_len(2 * n)
    corr = sfft.irfft(np.conj(sfft.rfft(p, length)) * sfft.rfft(q, length), length)[:n]
    total += 2.0 * float(np.sum(c[1:n] * corr[1:n]))
    upper = _upper_convolution(p, q)
    s = np.arange(2 * n - 1)
    total += 2.0 * spectrum.sign * float(np.sum(c[s + spectrum.offset] * upper))
    return total


@dataclass(eq=False)
class EigenDesign:
    """The column-normalised eigen-design A = Λ^{1/4}VᵀD (module doc); Δ₂(A) = 1.

    ``column_scale`` holds e_j = S_jj^{1/2} (D = diag(1/e)). The dense matrix is built only by
    :meth:`dense` (for the exact release), under a memory check.
    """

    n: int
    eigenvalues: np.ndarray
    column_scale: np.ndarray
    name: str
    spectrum: CosineSpectrum | None = None
    vectors: np.ndarray | None = None  # rows: orthonormal eigenvectors (dense path)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def factors(self) -> list[EigenDesign]:
        return [self]

    @property
    def release_bytes(self) -> int:
        """The memory estimate of the exact release: the dense A and two sparse copies."""
        return 4 * 8 * self.n * self.n

    def dense(self, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        """A = Λ^{1/4}VᵀD as a dense n×n array; refused above ``max_bytes`` (the estimate counts
        the dense array and the two sparse copies the quantised release makes of it)."""
        need = self.release_bytes
        if need > max_bytes:
            raise InvalidParameterError(
                "strategy",
                self.name,
                f"a domain small enough to release: the column-normalised eigen-design has no "
                f"sparse form, and its exact release quantises the dense {self.n}×{self.n} "
                f"matrix A (B = round(A·2^k)), which needs about {need:,} bytes > "
                f"max_bytes={max_bytes:,}",
                "Its analytic error and the strategy choice remain valid; release with a sparse "
                "strategy (hierarchical, wavelet, OPT_0 p-identity) or raise max_bytes.",
            )
        vecs = self.vectors if self.vectors is not None else self._closed_vectors()
        return np.asarray(
            (self.eigenvalues**0.25)[:, None] * vecs / self.column_scale[None, :],
        )

    def _closed_vectors(self) -> np.ndarray:
        assert self.spectrum is not None
        return self.spectrum.vectors()

    def sensitivity(self, norm: str) -> float:
        """Δ₂ = 1 by construction (up to float rounding; the release recomputes it exactly from
        the quantised integers). Δ₁ (the largest column L1 norm) needs the dense matrix."""
        if norm == "l2":
            return 1.0
        if norm != "l1":
            raise InvalidParameterError("norm", norm, "'l1' or 'l2'")
        if self.release_bytes > DEFAULT_MAX_BYTES:
            raise InvalidParameterError(
                "norm",
                norm,
                f"'l2' for {self.name}: its Δ₁ (largest column L1 norm) needs the dense "
                f"{self.n}×{self.n} matrix, too large here (an L2 strategy; see docs/workloads.md)",
            )
        return float(np.max(np.sum(np.abs(self.dense()), axis=0)))

    def query_variances(self, workload: Workload, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
        """Per-query variances per unit noise variance, diag(W X⁻¹ Wᵀ) with X⁻¹ = D⁻¹S⁻¹D⁻¹:
        O(n log² n) for Prefix with a closed-form design; otherwise dense (small n)."""
        if workload.shape[1] != self.n:
            raise InvalidParameterError(
                "strategy", f"{self.name} over {self.n} cells", f"{workload.shape[1]} cells"
            )
        inv_root = 1.0 / np.sqrt(self.eigenvalues)
        if isinstance(workload, Prefix) and self.spectrum is not None:
            return _prefix_variances(self.column_scale, self.spectrum, inv_root)
        check_dense_memory(f"the covariance of {self.name}", 2 * self.n, self.n, max_bytes)
        vecs = self.vectors if self.vectors is not None else self._closed_vectors()
        e = self.column_scale
        cov = ((vecs.T * inv_root[None, :]) @ vecs) * e[:, None] * e[None, :]
        return query_variances(workload, cov)

    def unit_error(self, workload: Workload, max_bytes: int = DEFAULT_MAX_BYTES) -> float:
        """tr(WᵀW (AᵀA)⁻¹) = Σ_{a,b} e_a e_b G_ab (S⁻¹)_ab (module doc): O(n log² n) for a
        Prefix or AllRange workload with a closed-form design, a dense formula otherwise."""
        if workload.shape[1] != self.n:
            raise InvalidParameterError(
                "strategy", f"{self.name} over {self.n} cells", f"{workload.shape[1]} cells"
            )
        inv_root = 1.0 / np.sqrt(self.eigenvalues)
        parts = semiseparable(workload)
        if parts is not None and self.spectrum is not None:
            return _semiseparable_error(
                parts[0], parts[1], self.column_scale, self.spectrum, inv_root
            )
        check_dense_memory(f"the error of {self.name}", 3 * self.n, self.n, max_bytes)
        vecs = self.vectors if self.vectors is not None else self._closed_vectors()
        e = self.column_scale
        m = (vecs.T * inv_root[None, :]) @ vecs  # S⁻¹
        g = workload.gram_dense(max_bytes)
        return float(np.einsum("ab,ab->", g * e[:, None] * e[None, :], m))


def eigen_design(
    workload: Workload,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_dense_n: int = 4096,
) -> EigenDesign:
    """The column-normalised eigen-design for ``workload`` (module doc).

    Prefix and AllRange: closed-form spectrum, diag(S) in O(n log n), any n. Other workloads: a
    dense eigendecomposition of WᵀW, refused (InvalidParameterError, before any data) when
    n > ``max_dense_n`` or the dense work does not fit ``max_bytes``.
    """
    n = workload.shape[1]
    spectrum = closed_form_spectrum(workload)
    if spectrum is not None:
        lam = spectrum.eigenvalues
        sdiag = spectrum.weighted_diag(np.sqrt(lam))
        vecs = None
        floored = 0
    else:
        if n > max_dense_n:
            raise InvalidParameterError(
                "workload",
                workload.name,
                f"at most max_dense_n={max_dense_n:,} cells for a dense eigen-design "
                "(closed forms exist for Prefix and AllRange only)",
            )
        check_dense_memory(
            f"the eigendecomposition of WᵀW for {workload.name}", 3 * n, n, max_bytes
        )
        raw, v = np.linalg.eigh(workload.gram_dense(max_bytes))
        top = float(np.max(raw)) if raw.size else 0.0
        if not top > 0:
            raise InvalidParameterError("workload", workload.name, "a non-zero workload")
        floored = int(np.sum(raw < _FLOOR * top))
        lam = np.maximum(raw, _FLOOR * top)
        vecs = np.asarray(v.T)
        sdiag = np.sum((np.sqrt(lam)[:, None]) * vecs * vecs, axis=0)
    if not np.all(np.isfinite(sdiag)) or np.any(sdiag <= 0):
        raise InvalidParameterError(
            "workload", workload.name, "a Gram matrix with positive diag(S)"
        )
    design = EigenDesign(
        n=n,
        eigenvalues=np.asarray(lam),
        column_scale=np.sqrt(sdiag),
        name=f"column-normalised eigen-design({workload.name})",
        spectrum=spectrum,
        vectors=vecs,
        info={"closed_form": spectrum is not None, "floored": floored},
    )
    return design


def eigen_ratio_without_normalisation(workload: Workload) -> float:
    """(Diagnostics) the uniform-scaling design A ∝ Λ^{1/4}Vᵀ: Δ₂² = max_j S_jj, error
    max_j S_jj·tr(S), over the SVD bound (tr S)²/n — why D matters (Prefix ≈ 1.74–1.81×)."""
    spectrum = closed_form_spectrum(workload)
    if spectrum is None:
        raise InvalidParameterError("workload", workload.name, "Prefix or AllRange")
    root = np.sqrt(spectrum.eigenvalues)
    sdiag = spectrum.weighted_diag(root)
    tr = float(np.sum(root))
    return float(np.max(sdiag) * tr / (tr * tr / spectrum.n))


def _is_power(n: int, b: int) -> int | None:
    levels = 0
    m = n
    while m > 1 and m % b == 0:
        m //= b
        levels += 1
    return levels if m == 1 else None


def tree_level_traces(
    workload: Workload, n: int, branching: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """(s_l, tr(WᵀW P_m)) for the levels of a b-ary tree on n = b^L cells (see
    :func:`tree_unit_error`), for Prefix and AllRange; ``None`` when it does not apply."""
    parts = semiseparable(workload)
    if parts is None or workload.shape[1] != n:
        return None
    levels = _is_power(n, branching)
    if levels is None:
        return None
    f, h = parts
    sizes = [branching ** (levels - lv) for lv in range(levels + 1)]  # s_0 = n, …, s_L = 1
    tr_q: list[float] = []
    for s in sizes:
        fb = f.reshape(-1, s)
        hb = h.reshape(-1, s)
        before = np.cumsum(fb, axis=1) - fb  # Σ_{a<b in block} f_a, per b
        tr_q.append(float(np.sum(fb * hb) + 2.0 * np.sum(before * hb)) / s)
    traces = [tr_q[m] - (tr_q[m - 1] if m else 0.0) for m in range(len(sizes))]
    return np.asarray(sizes, dtype=np.float64), np.asarray(traces)


def tree_unit_error(
    workload: Workload,
    kind: str,
    n: int,
    branching: int = 2,
    weights: np.ndarray | None = None,
) -> float | None:
    """tr(WᵀW (AᵀA)⁻¹) for the b-ary tree (``kind="hierarchical"``, unweighted or with level
    weights w_l, root first) or the ±1 Haar basis (``kind="wavelet"``, b = 2) on n = b^L cells,
    for Prefix and AllRange, in O(n log n); ``None`` when it does not apply.

    With U_s the functions constant on the level's blocks of size s (s_l = b^{L-l}, l = 0..L,
    nested) and Q_s its orthogonal projection, the tree has AᵀA = Σ_l w_l² s_l·Q_{s_l} (a block
    of ones J_s is s·Q_s on its block); the Haar basis has AᵀA = n·Q_n + Σ_{l>=1} s_{l-1}·(Q_{s_l}
    - Q_{s_{l-1}}). Both are diagonal on R_0 = U_n and R_m = U_{s_m} ⊖ U_{s_{m-1}}, with
    eigenvalue κ_m = Σ_{l>=m} w_l² s_l (tree) or κ_0 = n, κ_m = s_{m-1} (Haar). So the error is
    Σ_m tr(G P_m)/κ_m with tr(G Q_s) = Σ_blocks 1_Bᵀ G 1_B / s, and each block sum costs O(s)
    for a semiseparable G (one cumulative sum per block, all blocks of a level at once).
    """
    if kind == "wavelet" and branching != 2:
        return None
    parts = tree_level_traces(workload, n, branching)
    if parts is None:
        return None
    sizes, traces = parts
    if kind == "wavelet":
        kappa = np.concatenate([[float(n)], sizes[:-1]])  # κ_0 = n, κ_m = s_{m-1}
    else:
        u = np.ones(sizes.size) if weights is None else np.asarray(weights, dtype=np.float64) ** 2
        if u.shape != sizes.shape:
            return None
        kappa = np.cumsum((u * sizes)[::-1])[::-1]  # Σ_{l>=m} w_l² s_l
    return float(np.sum(traces / kappa))
