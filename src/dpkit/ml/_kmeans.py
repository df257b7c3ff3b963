"""Private k-means with declared bounds: DPLloyd, a private LSH-grid coreset, and the seed's
exponential mechanism over a public candidate lattice.

Guarantee (every method): ``KMeans(epsilon=ε)`` is ε-DP and ``KMeans(rho=ρ)`` is ρ-zCDP for
datasets that differ by adding or removing one row; ``privacy_loss_`` is the exact loss. The proof
of each method is in its function's docstring and in docs/ml.md. Bounds are declared, never read
from the data; rows are mapped by the public row map of :mod:`dpkit.ml._common` (NaN → midpoint,
clamp, scale to [-1, 1]^d), so a row contributes at most 1 to one count, at most d (L1) / √d (L2)
to one vector of sums, and at most the lattice diameter² to every k-means utility.

Edges: every parameter (k, bounds, method, budget and the smallest share any release gets, the
number of features, the input's declared dtype) is checked before anything is reserved or read,
and then the fit always releases: an empty cluster keeps its previous centre, an empty dataset
gives centres from noise alone, all points in one cell are fine.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin

from dpkit.core._losses import PrivacyLoss, PureDP, compose
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._exponential import make_exponential
from dpkit.ml._common import (
    Budget,
    charged,
    check_box,
    check_budget,
    check_columns,
    check_shape,
    input_features,
    input_shape,
    int_seed,
    map_rows,
    sum_by_label,
)
from dpkit.noise import generator

__all__ = ["KMeans"]

_METHODS = ("lsh", "lloyd", "grid_em")
_CHUNK = 1 << 16
_MAX_CLUSTERS_PER_EPSILON = 10_000
MAX_CLUSTERS = 4096
"""The most clusters any fit may ask for (the size of the public pool of starting centres)."""
MAX_FEATURES = 4096
"""The most features a k-means fit may have (the public pool of starting centres holds 4096
points of d coordinates)."""
_EM_WORK = 1 << 30
"""grid_em's k greedy selections each score every candidate against every occupied lattice
point: about k · cells² operations, at most this many (a public bound on the fit's time)."""


def _chunk(k: int) -> int:
    """Rows per block of a distance computation: about 2^22 distances (32 MB) at a time."""
    return max(1, _CHUNK // max(1, k // 64))


def assign(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Index of the nearest centre for every row (chunked, vectorised)."""
    n = points.shape[0]
    labels = np.empty(n, dtype=np.int64)
    c2 = np.einsum("ij,ij->i", centres, centres)
    chunk = _chunk(centres.shape[0])
    for start in range(0, n, chunk):
        block = points[start : start + chunk]
        labels[start : start + chunk] = np.argmin(c2 - 2.0 * block @ centres.T, axis=1)
    return labels


def objective(points: np.ndarray, centres: np.ndarray) -> float:
    """The k-means objective Σ_x min_j ||x - c_j||² (non-private; for evaluation)."""
    total = 0.0
    p = np.asarray(points, dtype=np.float64)
    c = np.asarray(centres, dtype=np.float64)
    c2 = np.einsum("ij,ij->i", c, c)
    chunk = _chunk(c.shape[0])
    for start in range(0, p.shape[0], chunk):
        block = p[start : start + chunk]
        d2 = np.einsum("ij,ij->i", block, block)[:, None] + c2 - 2.0 * block @ c.T
        total += float(np.maximum(d2.min(axis=1), 0.0).sum())
    return total


# ----------------------------------------------------------------------------- building blocks
def _split(total: Fraction, parts: int) -> Fraction:
    return total / parts


def _count_sum_shares(share: Fraction, d: int) -> tuple[Fraction, Fraction]:
    """Split one step's budget between counts (sensitivity 1) and sums (sensitivity d or √d).

    The error of a noisy mean is about (b_sum + b_count)/n_j; with b ∝ Δ/ε the sum of the two is
    smallest when ε_sum/ε_count = sqrt(Δ_sum/Δ_count) ≈ d^{1/2} (pure) or d^{1/4} (zCDP, whose
    ρ shares scale with Δ²). A public, data-independent ratio, rounded to a fraction.
    """
    ratio = Fraction(math.sqrt(d)).limit_denominator(64)
    count = share / (1 + ratio)
    return count, share - count


def _private_lloyd_step(
    fixed: np.ndarray,
    scaled: np.ndarray,
    centres: np.ndarray,
    budget: Budget,
    share: Fraction,
) -> np.ndarray:
    """One DPLloyd iteration (Blum et al. 2005; Su et al. 2016): noisy counts and sums per
    cluster of the points nearest each current centre (a partition, so one row touches one
    cluster: parallel composition), new centre = noisy sum / noisy count. A cluster whose noisy
    count is below its noise level keeps its previous centre (post-processing)."""
    k, d = centres.shape
    count_share, sum_share = _count_sum_shares(share, d)
    labels = assign(scaled, centres)
    counts, sums = sum_by_label(fixed, labels, k)
    noisy_counts = budget.noisy_counts(counts, count_share)
    noisy_sums = budget.noisy_sums(sums, sum_share, d)
    return lloyd_update(centres, noisy_counts, noisy_sums, budget.count_noise_scale(count_share))


def lloyd_update(
    centres: np.ndarray, noisy_counts: np.ndarray, noisy_sums: np.ndarray, noise_level: float
) -> np.ndarray:
    """New centres from released per-cluster counts and sums (post-processing only): the noisy
    mean, clipped to [-1, 1]^d; a cluster whose noisy count is below max(1, 2·noise level),
    empty ones included, keeps its previous centre. Never raises."""
    floor = max(1.0, 2.0 * noise_level)
    counts = np.nan_to_num(np.asarray(noisy_counts, dtype=np.float64), nan=0.0)
    sums = np.nan_to_num(np.asarray(noisy_sums, dtype=np.float64), nan=0.0)
    ok = counts >= floor
    out = np.array(centres, dtype=np.float64)
    out[ok] = np.clip(sums[ok] / counts[ok, None], -1.0, 1.0)
    return out


def _public_spread(k: int, d: int) -> np.ndarray:
    """k data-independent starting centres spread over [-1/2, 1/2]^d (farthest-point traversal of
    a public random pool): the sphere-packing style initialisation of DPLloyd; costs nothing."""
    pool = generator(4096 * d).uniform(-0.5, 0.5, size=(4096, d))
    chosen = [0]
    dist = np.sum((pool - pool[0]) ** 2, axis=1)
    for _ in range(1, k):
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, np.sum((pool - pool[nxt]) ** 2, axis=1))
    return pool[chosen]


def _grid_geometry(d: int, grid_size: int | None) -> tuple[int, int]:
    """(projected dimension p, cells per dimension G) of the coreset grid."""
    p = min(d, 3)
    # fewer, fuller cells in high dimension, where each cell's sum carries noise ∝ d
    default = {1: 256, 2: 16, 3: 16 if d <= 16 else 8}[p]
    return p, grid_size if grid_size is not None else default


def lsh_hash(d: int, grid_size: int | None) -> tuple[np.ndarray, float, np.ndarray]:
    """A fresh public, data-independent LSH hash of [-1, 1]^d (drawn from dpkit.noise):
    (projection d×p with orthonormal columns, clipping radius, grid shift in [0, 1)^p)."""
    p, _ = _grid_geometry(d, grid_size)
    rng = generator(d * p + p)
    if p == d:
        projection = np.eye(d)
        radius = 1.0
    else:
        projection, _ = np.linalg.qr(rng.standard_normal((d, p)))
        radius = min(math.sqrt(d), 2.0)
    shift = rng.uniform(0.0, 1.0, size=p)
    return projection, radius, shift


def _coreset_release(
    fixed: np.ndarray,
    scaled: np.ndarray,
    budget: Budget,
    share: Fraction,
    grid_size: int | None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """The private part of the coreset method: a noisy histogram of LSH-grid cells.

    1. A public, data-independent hash: a random orthonormal projection to p = min(d, 3)
       dimensions (identity when d <= 3) and a randomly shifted grid of G^p cells (an LSH
       family; its randomness comes from dpkit.noise and does not look at the data).
    2. One private histogram: every cell's count and sum of (mapped) rows, with noise. The
       cells partition the rows, so the whole histogram costs ``share`` once (parallel
       composition over cells, sequential between counts and sums).

    Returns (noisy counts, noisy sums, the count noise level).
    """
    n_rows, d = scaled.shape
    p, g = _grid_geometry(d, grid_size)
    projection, radius, shift = lsh_hash(d, grid_size)
    z = scaled @ projection
    cell = np.floor((np.clip(z, -radius, radius) + radius) / (2 * radius) * (g - 1) + shift)
    idx = np.clip(cell, 0, g - 1).astype(np.int64)
    labels = np.ravel_multi_index(tuple(idx.T), (g,) * p) if n_rows else np.zeros(0, np.int64)
    count_share, sum_share = _count_sum_shares(share, d)
    counts, sums = sum_by_label(fixed, np.asarray(labels, dtype=np.int64), g**p)
    noisy_counts = budget.noisy_counts(counts, count_share)
    noisy_sums = budget.noisy_sums(sums, sum_share, d)
    return noisy_counts, noisy_sums, budget.count_noise_scale(count_share)


def _coreset_centres(
    fixed: np.ndarray,
    scaled: np.ndarray,
    k: int,
    budget: Budget,
    share: Fraction,
    grid_size: int | None,
) -> np.ndarray:
    """Private weighted coreset in the spirit of Chang, Ghazi, Kumar & Manurangsi 2021:
    :func:`_coreset_release`, then post-processing: cells whose noisy count clears the noise
    level (noise scale · ln(#cells)) become weighted coreset points (noisy mean, noisy count),
    and weighted k-means++ with Lloyd (scikit-learn) on the coreset gives k centres."""
    noisy_counts, noisy_sums, level = _coreset_release(fixed, scaled, budget, share, grid_size)
    return coreset_centres(noisy_counts, noisy_sums, level, k)


def coreset_centres(
    noisy_counts: np.ndarray, noisy_sums: np.ndarray, level: float, k: int
) -> np.ndarray:
    """Post-processing of a released cell histogram (counts and sums per cell): cells whose
    noisy count clears level·ln(#cells) become weighted points (noisy mean, noisy count), at
    least the k largest; weighted k-means++ and Lloyd on them give k centres. Never raises."""
    noisy_counts = np.nan_to_num(np.asarray(noisy_counts, dtype=np.float64), nan=0.0)
    noisy_sums = np.nan_to_num(np.asarray(noisy_sums, dtype=np.float64), nan=0.0)
    cells = noisy_counts.size
    keep = np.flatnonzero(noisy_counts > level * math.log(cells))
    if keep.size < k:
        keep = np.argsort(-noisy_counts, kind="stable")[:k]
    weights = np.maximum(noisy_counts[keep], 1.0)
    points = np.clip(noisy_sums[keep] / weights[:, None], -1.0, 1.0)
    return _weighted_kmeans(points, weights, k)


def _weighted_kmeans(points: np.ndarray, weights: np.ndarray, k: int) -> np.ndarray:
    """Non-private weighted k-means++ and Lloyd on released points (post-processing)."""
    from sklearn.cluster import KMeans as SkKMeans

    if k == 1:  # the weighted mean is the optimum
        total = max(float(weights.sum()), 1e-300)
        return np.asarray((weights[:, None] * points).sum(axis=0, keepdims=True) / total)
    unique = np.unique(points, axis=0)
    if unique.shape[0] <= k:
        out = np.zeros((k, points.shape[1]))
        out[: unique.shape[0]] = unique
        out[unique.shape[0] :] = unique[0]
        return out
    model = SkKMeans(n_clusters=k, n_init=5, random_state=int_seed())
    model.fit(points, sample_weight=weights)
    return np.asarray(model.cluster_centers_, dtype=np.float64)


def _lattice(d: int, n_candidates: int) -> int:
    """Points per dimension of the public candidate lattice (largest G with G^d <= budget)."""
    g = math.floor(n_candidates ** (1.0 / d) + 1e-9)
    while g**d > n_candidates:
        g -= 1
    while (g + 1) ** d <= n_candidates:
        g += 1
    return g


def _em_cap(d: int, g: int, radius: float) -> int:
    """The utility cap R² in squared lattice units: ⌈(radius · lattice diameter)²⌉ >= 1."""
    return max(1, math.ceil((radius**2) * d * (g - 1) ** 2))


def _grid_em(
    fixed: np.ndarray, k: int, d: int, g: int, step_epsilon: Fraction, radius: float = 1.0
) -> tuple[np.ndarray, int]:
    """The seed's exponential mechanism, made private (returns centres in [-1, 1]^d).

    Candidates: the public lattice of G^d cell centres of [-1, 1]^d (data-independent). Each row
    is represented by its nearest lattice point; h is the exact histogram of the rows over the
    lattice. Centres are chosen greedily, k times, each by the exponential mechanism with
    utility u_j(c) = -Σ_g h_g · min(D_g, ||g - c||²), D_g the squared distance from g to the
    centres chosen so far, in lattice units (integers, computed exactly).

    Sensitivity: adding or removing one row changes h by one at one lattice point g, so every
    u_j(c) changes by min(D_g, ||g - c||²) <= (diameter of the lattice)² = d·(G-1)², whatever
    the chosen prefix (which is itself a released output). The utility is *monotone* (adding a
    row lowers every score, removing one raises every score), so the exponential mechanism with
    coefficient ε/Δu is ε-DP (McSherry & Talwar 2007; Dwork & Roth 2014, Thm. 3.10 and the
    monotone remark). k selections compose to k·ε_step.
    """
    fixed_g = np.clip(np.floor((fixed / 2.0**20 + 1.0) / 2.0 * g), 0, g - 1).astype(np.int64)
    cells = g**d
    if fixed_g.shape[0]:
        flat = np.ravel_multi_index(tuple(fixed_g.T), (g,) * d)
        h = np.bincount(flat, minlength=cells).astype(np.int64)
    else:
        h = np.zeros(cells, dtype=np.int64)
    return grid_em_select(h, k, d, g, step_epsilon, radius), cells


def grid_em_select(
    h: np.ndarray,
    k: int,
    d: int,
    g: int,
    step_epsilon: Fraction,
    radius: float = 1.0,
    rows_per_unit: int = 1,
) -> np.ndarray:
    """The k greedy exponential-mechanism selections of :func:`_grid_em` from the exact lattice
    histogram ``h`` (length g^d, C order). When one privacy unit may hold ``rows_per_unit``
    rows, adding or removing it changes h by at most that many rows in total, so the utility's
    sensitivity is rows_per_unit · cap (still monotone: adding a unit only adds rows)."""
    cells = g**d
    h = np.asarray(h, dtype=np.int64)
    coords = np.stack(np.unravel_index(np.arange(cells), (g,) * d), axis=1).astype(np.int64)
    occupied = np.flatnonzero(h)
    weights = h[occupied]
    occ_coords = coords[occupied]
    # squared lattice distances from every occupied cell to every candidate, exact int64
    sq = np.zeros((occupied.size, cells), dtype=np.int64)
    for j in range(d):
        diff = occ_coords[:, j : j + 1] - coords[None, :, j]
        sq += diff * diff
    sensitivity = _em_cap(d, g, radius)
    mech = make_exponential(step_epsilon, sensitivity * rows_per_unit, monotonic=True)
    best = np.full(occupied.size, sensitivity, dtype=np.int64)
    chosen: list[int] = []
    for _ in range(k):
        cost = (weights[:, None] * np.minimum(best[:, None], sq)).sum(axis=0)
        gaps = cost - cost.min()  # the mechanism depends only on differences: same output law
        pick = int(mech(-gaps.astype(np.float64)))
        chosen.append(pick)
        best = np.minimum(best, sq[:, pick])
    return np.asarray((2.0 * coords[chosen] + 1.0) / g - 1.0, dtype=np.float64)


# ----------------------------------------------------------------------------- estimator
class KMeans(BaseEstimator, ClusterMixin, TransformerMixin):  # type: ignore[misc]
    """Differentially private k-means with declared bounds.

    Args:
        n_clusters: k >= 1 (public).
        epsilon: total ε (pure DP), or give ``rho`` (zCDP) instead.
        delta: with ``epsilon``, an (ε, δ)-DP budget (0 < δ < 1): spent as ρ-zCDP with the
            largest ρ whose certified conversion fits (ε, δ); ``privacy_loss_`` is then the
            (ε' <= ε, δ) conversion of the fit's exact zCDP loss.
        rho: total ρ (zCDP), with Gaussian noise for the sums and counts.
        bounds: declared bounds, public, never read from the data: one pair per feature
            ``[(lo_1, hi_1), ..., (lo_d, hi_d)]``, one pair ``(lo, hi)`` for every feature, or
            ``{"lower": [...], "upper": [...]}``. A pair of vectors ``(lower, upper)`` is
            refused (at d = 2 it reads as two per-feature pairs).
        method: "lsh" (default; private LSH-grid coreset, then private Lloyd refinement),
            "lloyd" (DPLloyd from a data-independent start) or "grid_em" (the exponential
            mechanism over a public lattice of candidate centres; the seed's idea made private).
        max_iter: private Lloyd iterations ("lloyd": default 5; "lsh": refinement steps after
            the coreset, default 1). Public; the budget is split evenly across them.
        coreset_share: fraction of the budget spent on the coreset histogram ("lsh"; default
            0.4, the rest goes to the Lloyd refinement).
        grid_size: cells per projected dimension for "lsh" (default 256 in 1-d, 16 up to
            16 features, 8 beyond).
        n_candidates: the most lattice points "grid_em" may use (default 2048).
        em_radius: "grid_em" truncates each row's k-means cost at (em_radius · diameter of
            the box)², which is the utility's sensitivity (default 0.1; 1 = no truncation).

    Attributes (after ``fit``):
        cluster_centers_: (k, d) private centres, in the original units.
        privacy_loss_: the exact privacy loss of the fit (a dpkit loss).
        n_features_in_: d.

    Guarantee: ε-DP (or ρ-zCDP) under adding/removing one row; see the module docstring and
    docs/ml.md. ``fit`` has no ``labels_``: labelling the training rows would release one value
    per row. Use ``predict`` on the data you choose to label.
    """

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        epsilon: Any = None,
        rho: Any = None,
        bounds: Any = None,
        method: str = "lsh",
        delta: Any = None,
        max_iter: int | None = None,
        coreset_share: float = 0.4,
        grid_size: int | None = None,
        n_candidates: int = 2048,
        em_radius: float = 0.1,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.rho = rho
        self.delta = delta
        self.bounds = bounds
        self.method = method
        self.max_iter = max_iter
        self.coreset_share = coreset_share
        self.grid_size = grid_size
        self.n_candidates = n_candidates
        self.em_radius = em_radius

    # -- validation (public information only) ----------------------------------------------
    def _validate(self) -> tuple[Budget, int, int]:
        """The parameters that do not depend on the number of features (public)."""
        k = self.n_clusters
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise InvalidParameterError("n_clusters", k, "an integer >= 1")
        k = int(k)
        if k > MAX_CLUSTERS:
            raise InvalidParameterError(
                "n_clusters",
                k,
                f"at most {MAX_CLUSTERS}",
                "The public starting centres are drawn from a pool of that size, and more "
                "clusters than that are noise at any budget a dataset can afford.",
            )
        if self.method not in _METHODS:
            raise InvalidParameterError("method", self.method, "one of " + ", ".join(_METHODS))
        budget = check_budget(self.epsilon, self.rho, self.delta)
        iters = self.max_iter
        default_iters = {"lloyd": 5, "lsh": 1, "grid_em": 0}[self.method]
        if iters is None:
            iters = default_iters
        if isinstance(iters, bool) or not isinstance(iters, int | np.integer) or iters < 0:
            raise InvalidParameterError("max_iter", self.max_iter, "an integer >= 0 or None")
        if self.method == "lloyd" and iters < 1:
            raise InvalidParameterError("max_iter", self.max_iter, ">= 1 for method='lloyd'")
        if iters > 100:
            raise InvalidParameterError(
                "max_iter", iters, "at most 100", "Each iteration gets 1/max_iter of the budget."
            )
        share = self.coreset_share
        if isinstance(share, bool) or not isinstance(share, float | int) or not 0 < share <= 1:
            raise InvalidParameterError("coreset_share", share, "a number in (0, 1]")
        if self.method == "lsh":
            core = self._core_fraction(int(iters))
            if core == 0 or (core == 1 and iters > 0):
                raise InvalidParameterError(
                    "coreset_share",
                    share,
                    "in [0.001, 0.999] when max_iter > 0 (the coreset and the refinement both "
                    "need budget; it is read to 1/1000)",
                )
        # at most 10^4 clusters per unit of ε (√(2ρ) for zCDP), computed exactly: k <= 10^4·ε
        eps_equiv_sq = budget.total**2 if budget.kind == "pure" else 2 * budget.total
        if k > 1 and k * k > eps_equiv_sq * _MAX_CLUSTERS_PER_EPSILON**2:
            limit = max(1, math.floor(math.sqrt(float(eps_equiv_sq)) * _MAX_CLUSTERS_PER_EPSILON))
            raise InvalidParameterError(
                "n_clusters",
                k,
                f"at most {limit} for this budget ({_MAX_CLUSTERS_PER_EPSILON} per unit of ε)",
                "k is too large for the budget: each cluster's noisy mean would be noise "
                "for any realistic dataset. Use fewer clusters or more budget.",
            )
        return budget, k, int(iters)

    def _core_fraction(self, iters: int) -> Fraction:
        """The share of the budget the "lsh" coreset gets (public; read to 1/1000)."""
        if iters == 0:
            return Fraction(1)
        return Fraction(self.coreset_share).limit_denominator(1000)

    def _check_shares(self, budget: Budget, d: int, k: int, iters: int, rows: int = 1) -> Any:
        """Refuse, before anything is reserved, a budget whose smallest release share is below
        the floor (:meth:`Budget.check_share`), and build the exponential mechanism of
        "grid_em" (its calibration is public: ε per selection and the utility's sensitivity,
        ``rows`` rows per unit times the cap), so that nothing about the parameters can fail
        after the reservation. Returns that mechanism (or None)."""
        total = budget.total
        if self.method == "lloyd":
            budget.check_share(_count_sum_shares(total / iters, d)[0], "each Lloyd step's counts")
        elif self.method == "lsh":
            core = total * self._core_fraction(iters)
            budget.check_share(_count_sum_shares(core, d)[0], "the coreset's counts")
            if iters:
                rest = (total - core) / iters
                budget.check_share(_count_sum_shares(rest, d)[0], "each refinement's counts")
        else:
            _, step = self._loss_and_steps(budget, k)
            per_selection = step if budget.kind == "pure" else step * step / 2
            budget.check_share(per_selection, f"each of the {k} selections")
            g = _lattice(d, int(self.n_candidates))
            sensitivity = _em_cap(d, g, float(self.em_radius)) * rows
            try:
                return make_exponential(step, sensitivity, monotonic=True)
            except InvalidParameterError:
                raise InvalidParameterError(
                    budget.parameter,
                    budget.given,
                    f"small enough for method='grid_em' with k = {k} (each selection's ε over "
                    f"the utility's sensitivity {sensitivity} at most 2^900)",
                ) from None
        return None

    def _check_method_geometry(self, d: int, k: int) -> None:
        if self.method == "lsh":
            if self.grid_size is not None and (
                isinstance(self.grid_size, bool)
                or not isinstance(self.grid_size, int | np.integer)
                or not 2 <= self.grid_size <= 4096
            ):
                raise InvalidParameterError("grid_size", self.grid_size, "an integer in [2, 4096]")
            p, g = _grid_geometry(d, self.grid_size)
            if g**p > 1 << 22:
                raise InvalidParameterError("grid_size", self.grid_size, f"with {g}^{p} <= 2^22")
            if k > g**p:
                raise InvalidParameterError(
                    "n_clusters", k, f"at most the number of coreset cells ({g**p})"
                )
        if self.method == "grid_em":
            m = self.n_candidates
            if isinstance(m, bool) or not isinstance(m, int | np.integer) or not 2 <= m <= 8192:
                raise InvalidParameterError("n_candidates", m, "an integer in [2, 8192]")
            g = _lattice(d, int(m))
            if g < 2:
                raise InvalidParameterError(
                    "method",
                    "grid_em",
                    f"used with at most log2(n_candidates) = {int(math.log2(m))} features",
                    "A lattice with 2 points per feature would need 2^d candidates; use "
                    "method='lsh' in high dimension.",
                )
            if k > g**d:
                raise InvalidParameterError("n_clusters", k, f"at most {g**d} (the candidates)")
            if k * g ** (2 * d) > _EM_WORK:
                raise InvalidParameterError(
                    "n_clusters",
                    k,
                    f"at most {max(1, _EM_WORK // g ** (2 * d))} with {g**d} candidates "
                    "(each selection scores every candidate against every lattice point)",
                    "Use fewer n_candidates or method='lsh'.",
                )
            r = self.em_radius
            if isinstance(r, bool) or not isinstance(r, float | int) or not 0 < r <= 1:
                raise InvalidParameterError("em_radius", r, "a number in (0, 1]")

    def _loss_and_steps(self, budget: Budget, k: int) -> tuple[PrivacyLoss, Fraction]:
        """grid_em: per-selection ε and the exact total loss (k pure selections)."""
        if budget.kind == "pure":
            step = budget.total / k
            return budget.loss(), step
        # ρ-zCDP: each ε-DP selection is ε²/2-zCDP; pick a rational ε_step <= sqrt(2ρ/k)
        step = Fraction(math.sqrt(2 * float(budget.total) / k)).limit_denominator(10**12)
        while step * step * k / 2 > budget.total:
            step *= Fraction(999_999, 1_000_000)
        return compose(*([PureDP(step).to_zcdp()] * k)), step

    # -- sklearn API ---------------------------------------------------------------------------
    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        ledger: Any = None,
        dataset: str | None = None,
        analyst: str | None = None,
        accountant: Any = None,
    ) -> KMeans:
        """Fit privately. With ``ledger`` and ``dataset`` (or ``accountant``) the loss is reserved
        in the ledger before any data is read (the budget must exist)."""
        budget, k, iters = self._validate()
        # the schema (shape, declared dtypes) is public; rows are not
        array_shape = input_shape(X)
        box = check_box(self.bounds, "bounds", d=input_features(array_shape), columns_of="X")
        d = box.d
        check_columns(array_shape, d)
        if d > MAX_FEATURES:
            raise InvalidDataError("X", f"has {d} features; k-means takes at most {MAX_FEATURES}")
        self._check_method_geometry(d, k)
        self._check_shares(budget, d, k, iters)
        if self.method == "grid_em":
            loss, step = self._loss_and_steps(budget, k)
        else:
            loss, step = budget.loss(), Fraction(0)
        loss = budget.reported(loss)  # (ε, δ) budgets: the conversion of the zCDP loss

        def measure() -> np.ndarray:
            fixed, scaled = map_rows(check_shape(X, d), box)
            if self.method == "grid_em":
                g = _lattice(d, int(self.n_candidates))
                centres, _ = _grid_em(fixed, k, d, g, step, float(self.em_radius))
            elif self.method == "lloyd":
                centres = _public_spread(k, d)
                for _ in range(iters):
                    centres = _private_lloyd_step(
                        fixed, scaled, centres, budget, budget.total / iters
                    )
            else:
                core_budget = budget.total * self._core_fraction(iters)
                centres = _coreset_centres(fixed, scaled, k, budget, core_budget, self.grid_size)
                for _ in range(iters):
                    centres = _private_lloyd_step(
                        fixed, scaled, centres, budget, (budget.total - core_budget) / iters
                    )
            return centres

        centres = charged(
            loss, ledger, dataset, analyst, accountant, f"KMeans({self.method})", measure
        )
        self.cluster_centers_ = box.unscale(centres)
        self.privacy_loss_ = loss
        self.n_features_in_ = d
        self.n_iter_ = iters
        return self

    def _centres(self) -> np.ndarray:
        if not hasattr(self, "cluster_centers_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("KMeans is not fitted yet: call fit first.")
        return np.asarray(self.cluster_centers_)

    def predict(self, X: Any) -> np.ndarray:
        """Nearest private centre for each row (post-processing of the released centres)."""
        c = self._centres()
        array = np.asarray(check_shape(X, c.shape[1]), dtype=np.float64)
        return assign(array, c)

    def fit_predict(self, X: Any, y: Any = None, **fit_params: Any) -> np.ndarray:
        return self.fit(X, **fit_params).predict(X)

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distance from each row to each private centre."""
        c = self._centres()
        array = np.asarray(check_shape(X, c.shape[1]), dtype=np.float64)
        d2 = (
            np.einsum("ij,ij->i", array, array)[:, None]
            + np.einsum("ij,ij->i", c, c)[None, :]
            - 2.0 * array @ c.T
        )
        return np.asarray(np.sqrt(np.maximum(d2, 0.0)))

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the k-means objective on X (NOT private: evaluate on public or held-out data)."""
        c = self._centres()
        return -objective(np.asarray(check_shape(X, c.shape[1]), dtype=np.float64), c)
