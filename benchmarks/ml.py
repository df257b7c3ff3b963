"""Private k-means and linear regression: dpkit.ml beside diffprivlib, in one run.

    python benchmarks/ml.py                 # n = 10^4 mixtures, the target cell, real data sets
    python benchmarks/ml.py --large         # adds n = 10^6 mixtures (slow)
    python benchmarks/ml.py --runs 5 --quick
    python benchmarks/ml.py --large-only --large-runs 3   # only the n = 10^6 rows + fit time
    python benchmarks/ml.py --target-only                 # only the target cell
    python benchmarks/ml.py --session-time 100000 50 20 duckdb   # fit_kmeans on a Session
    python benchmarks/ml.py --dims 50 --mixtures-only --delta 1e-6  # adds dpkit with (ε, δ)

Metric (k-means): the k-means objective of the private centres on the data divided by that of
non-private k-means++ (scikit-learn, 3 restarts), median over ``--runs`` fits (>= 20 by
default) at ε ∈ {0.1, 0.5, 1, 2}. Both libraries get the same data and the same declared bounds
[-1, 1]^d. Regression: mean squared error relative to OLS, same protocol.

Data: Gaussian mixtures (centres uniform in [-0.7, 0.7]^d, per-coordinate σ = 0.05, clipped to
the bounds; "separated" for the target cell means centres at least 0.5 apart), and the data sets
scikit-learn ships offline (digits, wine, breast_cancer; min-max scaled to [-1, 1]). The
benchmark's data are drawn with numpy's generator: they are inputs, not privacy noise.

diffprivlib is optional (``pip install dpkit[bench]``). diffprivlib 0.6 imports
``sklearn.tree._tree.DOUBLE/DTYPE`` which scikit-learn 1.9 removed; the shim below defines them
only so that the import succeeds (its tree models, which use them, are not run here).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_wine
from sklearn.linear_model import LinearRegression as OLS
from sklearn.preprocessing import MinMaxScaler

from dpkit.ml import KMeans, LinearRegression
from dpkit.ml._kmeans import objective

EPSILONS = (0.1, 0.5, 1.0, 2.0)


def _diffprivlib() -> Any:
    try:
        import sklearn.tree._tree as tree

        for name, value in (("DOUBLE", np.float64), ("DTYPE", np.float32)):
            if not hasattr(tree, name):
                setattr(tree, name, value)
        import diffprivlib.models as models
    except ImportError:
        return None
    return _FastPeer(models)


class _FastPeer:
    """diffprivlib's models, with its k-means made fast enough for 20 fits at n = 10^6 and
    **bit-identical** to diffprivlib 0.6's own (checked on every start by :func:`_check_peer`).

    diffprivlib's ``KMeans`` spends almost all of a large fit in two places that change no
    number: ``_distances_labels`` builds an (n, d) temporary per cluster (400 MB at n = 10^6,
    d = 50), and ``_update_centers`` counts a cluster with Python's built-in ``sum`` over a
    10^6-element array. The subclass computes the same ``((X - c) ** 2).sum(axis=1)`` in blocks
    of rows (each row's sum is the same reduction over the same d numbers, so the distances are
    bit-identical) and counts with ``np.count_nonzero``; the noise calls are diffprivlib's own, in
    the same order, from the same ``random_state``.
    """

    def __init__(self, models: Any) -> None:
        self.LinearRegression = models.LinearRegression
        self.original_kmeans = models.KMeans
        self.KMeans = _fast_kmeans(models)


def _fast_kmeans(models: Any) -> Any:
    from diffprivlib.mechanisms import GeometricFolded, LaplaceBoundedDomain

    class FastKMeans(models.KMeans):  # type: ignore[misc, name-defined]
        def _distances_labels(self, X: np.ndarray, centers: np.ndarray) -> Any:
            distances = np.empty((X.shape[0], self.n_clusters))
            for start in range(0, X.shape[0], 8192):
                block = X[start : start + 8192]
                for cluster in range(self.n_clusters):
                    distances[start : start + 8192, cluster] = (
                        (block - centers[cluster, :]) ** 2
                    ).sum(axis=1)
            return distances, np.argmin(distances, axis=1)

        def _update_centers(  # diffprivlib 0.6's, with count_nonzero for sum(labels == c)
            self,
            X: np.ndarray,
            centers: np.ndarray,
            labels: np.ndarray,
            dims: int,
            total_iters: int,
            random_state: Any,
        ) -> np.ndarray:
            epsilon_0, epsilon_i = self._split_epsilon(dims, total_iters)
            geometric_mech = GeometricFolded(
                epsilon=epsilon_0,
                sensitivity=1,
                lower=0.5,
                upper=float("inf"),
                random_state=random_state,
            )
            present = np.bincount(labels, minlength=self.n_clusters)
            for cluster in range(self.n_clusters):
                if present[cluster] == 0:
                    continue
                mask = labels == cluster
                noisy_count = geometric_mech.randomise(int(present[cluster]))
                cluster_sum = np.sum(X[mask], axis=0)
                noisy_sum = np.zeros_like(cluster_sum)
                for i in range(dims):
                    laplace_mech = LaplaceBoundedDomain(
                        epsilon=epsilon_i,
                        sensitivity=self.bounds[1][i] - self.bounds[0][i],
                        lower=noisy_count * self.bounds[0][i],
                        upper=noisy_count * self.bounds[1][i],
                        random_state=random_state,
                    )
                    noisy_sum[i] = laplace_mech.randomise(cluster_sum[i])
                centers[cluster, :] = noisy_sum / noisy_count
            return centers

    return FastKMeans


def _check_peer(dpl: Any) -> None:
    """The fast peer gives diffprivlib's own centres, bit for bit, for fixed seeds."""
    rng = np.random.default_rng(7)
    for n, d, k in ((3000, 2, 5), (20_000, 7, 4), (9000, 50, 20)):
        x = mixture(n, d, k, rng)
        bounds = (-np.ones(d), np.ones(d))
        for seed in (1, 2):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a = dpl.original_kmeans(k, epsilon=1, bounds=bounds, random_state=seed).fit(x)
                b = dpl.KMeans(k, epsilon=1, bounds=bounds, random_state=seed).fit(x)
            if not np.array_equal(a.cluster_centers_, b.cluster_centers_):
                raise SystemExit("the fast diffprivlib k-means differs from diffprivlib's own")
    print("diffprivlib k-means: the fast subclass gives diffprivlib's own centres (checked)")


def mixture(
    n: int, d: int, k: int, rng: np.random.Generator, separation: float = 0.0
) -> np.ndarray:
    centres = rng.uniform(-0.7, 0.7, size=(k, d))
    if separation > 0:  # resample until every pair is at least `separation` apart
        for _ in range(1000):
            gaps = np.linalg.norm(centres[:, None] - centres[None], axis=2) + np.eye(k) * 9
            if gaps.min() >= separation:
                break
            centres = rng.uniform(-0.7, 0.7, size=(k, d))
    labels = rng.integers(0, k, size=n)
    return np.clip(centres[labels] + rng.normal(0, 0.05, size=(n, d)), -1, 1)


def real(name: str) -> tuple[np.ndarray, int]:
    loader, k = {"digits": (load_digits, 10), "wine": (load_wine, 3)}.get(
        name, (load_breast_cancer, 2)
    )
    x = loader().data.astype(np.float64)
    return MinMaxScaler(feature_range=(-1, 1)).fit_transform(x), k


def median_ratio(fit: Callable[[], np.ndarray], x: np.ndarray, base: float, runs: int) -> float:
    return float(np.median([objective(x, fit()) / base for _ in range(runs)]))


DELTA: float | None = None  # --delta: also fit dpkit with an (ε, δ) budget (Gaussian noise)


def kmeans_cell(x: np.ndarray, k: int, runs: int, dpl: Any) -> list[str]:
    d = x.shape[1]
    base = objective(x, SkKMeans(k, n_init=3, random_state=0).fit(x).cluster_centers_)
    row = []
    for eps in EPSILONS:

        def ours(eps: float = eps) -> np.ndarray:
            model = KMeans(k, epsilon=eps, bounds=(-1, 1)).fit(x)
            return np.asarray(model.cluster_centers_)

        mine = median_ratio(ours, x, base, runs)
        approx = ""
        if DELTA is not None:

            def ours_approx(eps: float = eps) -> np.ndarray:
                model = KMeans(k, epsilon=eps, delta=DELTA, bounds=(-1, 1)).fit(x)
                return np.asarray(model.cluster_centers_)

            approx = f" [(ε, δ): {median_ratio(ours_approx, x, base, runs):.3g}]"
        if dpl is not None:

            def theirs(eps: float = eps) -> np.ndarray:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = dpl.KMeans(k, epsilon=eps, bounds=(-np.ones(d), np.ones(d))).fit(x)
                return np.asarray(model.cluster_centers_)

            other = median_ratio(theirs, x, base, runs)
            mark = "✓" if mine < other else "✗"
            row.append(f"{mine:.3g} / {other:.3g} {mark}{approx}")
        else:
            row.append(f"{mine:.3g} / -{approx}")
    return row


def regression_cell(
    x: np.ndarray, y: np.ndarray, runs: int, dpl: Any, bounds_y: tuple[float, float]
) -> list[str]:
    base = float(np.mean((OLS().fit(x, y).predict(x) - y) ** 2))
    d = x.shape[1]
    row = []
    for eps in EPSILONS:
        mine = np.median(
            [
                np.mean(
                    (
                        LinearRegression(epsilon=eps, bounds_X=(-1, 1), bounds_y=bounds_y)
                        .fit(x, y)
                        .predict(x)
                        - y
                    )
                    ** 2
                )
                / base
                for _ in range(runs)
            ]
        )
        if dpl is None:
            row.append(f"{mine:.3g} / -")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            other = np.median(
                [
                    np.mean(
                        (
                            dpl.LinearRegression(
                                epsilon=eps,
                                bounds_X=(-np.ones(d), np.ones(d)),
                                bounds_y=bounds_y,
                            )
                            .fit(x, y)
                            .predict(x)
                            - y
                        )
                        ** 2
                    )
                    / base
                    for _ in range(runs)
                ]
            )
        row.append(f"{mine:.3g} / {other:.3g} {'✓' if mine < other else '✗'}")
    return row


def table(title: str, rows: list[tuple[str, list[str]]]) -> None:
    print(f"\n{title}  (dpkit / diffprivlib; ✓ = dpkit lower)")
    head = "| data | " + " | ".join(f"ε = {e:g}" for e in EPSILONS) + " |"
    print(head)
    print("|" + "---|" * (len(EPSILONS) + 1))
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(cells) + " |")


def fit_time(rng: np.random.Generator, dpl: Any, repeats: int = 3) -> None:
    """Wall-clock time of one fit on 10^6 points, d = 10, k = 10, ε = 1 (median of repeats)."""
    big = mixture(1_000_000, 10, 10, rng, separation=0.5)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        KMeans(10, epsilon=1, bounds=(-1, 1)).fit(big)
        times.append(time.perf_counter() - start)
    line = (
        f"\nfit time, n = 10^6, d = 10, k = 10, ε = 1: dpkit {np.median(times):.2f} s "
        f"(median of {repeats}; min {min(times):.2f} s)"
    )
    if dpl is not None:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # diffprivlib's own class (not the benchmark's faster, bit-identical subclass)
            getattr(dpl, "original_kmeans", dpl.KMeans)(
                10, epsilon=1, bounds=(-np.ones(10), np.ones(10))
            ).fit(big)
        line += f", diffprivlib {time.perf_counter() - start:.2f} s (one fit, its own class)"
    print(line, flush=True)


def session_time(n: int, d: int, k: int, engine: str) -> None:
    """Wall-clock time of k-means through a Session (`fit_kmeans`): one Lloyd step, a
    `lloyd` fit (5 steps) and an `lsh` fit (coreset + 1 step), ε = 1, with the load average."""
    import os

    import pandas as pd

    import dpkit as dp
    from dpkit.analytics import Session
    from dpkit.ml import fit_kmeans

    x = mixture(n, d, k, np.random.default_rng(0))
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(d)])
    frame["u"] = np.arange(n)
    names = [f"x{i}" for i in range(d)]
    for label, kwargs in (
        ("one Lloyd step", {"method": "lloyd", "max_iter": 1}),
        ("lloyd fit (5 steps)", {"method": "lloyd"}),
        ("lsh fit (coreset + 1 step)", {"method": "lsh"}),
    ):
        session = Session(frame, "u", dp.PureDP(100), engine=engine, max_rows=1)
        start = time.perf_counter()
        fit_kmeans(session, names, k, bounds=(-1, 1), epsilon=1, **kwargs)
        took = time.perf_counter() - start
        print(
            f"{engine} n={n} d={d} k={k} {label}: {took:.2f} s "
            f"(load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--large", action="store_true", help="add n = 10^6 mixtures")
    parser.add_argument(
        "--large-only", action="store_true", help="only the n = 10^6 mixtures and the fit time"
    )
    parser.add_argument(
        "--large-runs", type=int, default=None, help="fits per n = 10^6 cell (default runs/4, >= 3)"
    )
    parser.add_argument("--target-only", action="store_true", help="only the target cell")
    parser.add_argument("--fit-time-only", action="store_true", help="only the 10^6-point fit time")
    parser.add_argument("--skip-fit-time", action="store_true", help="no 10^6-point fit time")
    parser.add_argument("--quick", action="store_true", help="skip d = 50 and real data")
    parser.add_argument("--dims", type=int, nargs="+", help="mixture dimensions (default 2 10 50)")
    parser.add_argument("--real-only", action="store_true", help="only the real data sets")
    parser.add_argument(
        "--mixtures-only", action="store_true", help="only the n = 10^4 (and --large) mixtures"
    )
    parser.add_argument(
        "--delta",
        type=float,
        help="also fit dpkit k-means with (ε, δ) (shown in brackets; diffprivlib is pure ε)",
    )
    parser.add_argument(
        "--dpkit-only", action="store_true", help="no peer (e.g. 20 dpkit fits at n = 10^6)"
    )
    parser.add_argument("--sizes", type=int, nargs="+", help="mixture sizes (default 10^4)")
    parser.add_argument(
        "--session-time",
        nargs=4,
        metavar=("N", "D", "K", "ENGINE"),
        help="only time fit_kmeans on a Session, e.g. 100000 50 20 duckdb",
    )
    args = parser.parse_args()
    if args.session_time:
        n, d, k, engine = args.session_time
        session_time(int(n), int(d), int(k), engine)
        return
    global DELTA
    DELTA = args.delta
    dpl = None if args.dpkit_only else _diffprivlib()
    if dpl is None and not args.dpkit_only:
        print("diffprivlib not installed: dpkit only (pip install dpkit[bench])")
    if dpl is not None:
        _check_peer(dpl)
    rng = np.random.default_rng(2024)
    if args.fit_time_only:
        fit_time(rng, dpl)
        return
    sizes = [10_000] + ([1_000_000] if args.large else [])
    if args.large_only:
        sizes = [1_000_000]
    if args.sizes:
        sizes = args.sizes
    dims = args.dims or ((2, 10) if args.quick else (2, 10, 50))

    rows = []
    if args.real_only or args.target_only:
        sizes, dims = [], ()
    for n in sizes:
        for d in dims:
            for k in (5, 20):
                x = mixture(n, d, k, rng)
                runs = args.runs if n <= 10**5 else (args.large_runs or max(3, args.runs // 4))
                rows.append((f"mixture n={n:.0e} d={d} k={k}", kmeans_cell(x, k, runs, dpl)))
                print(rows[-1], flush=True)
    if args.large_only:
        table("k-means objective / non-private k-means++ (median)", rows)
        if not args.skip_fit_time:
            fit_time(rng, dpl)
        return
    if args.mixtures_only:
        table("k-means objective / non-private k-means++ (median)", rows)
        return
    if not args.real_only:
        x = mixture(100_000, 10, 10, rng, separation=0.5)
        rows.append(("target: separated n=1e5 d=10 k=10", kmeans_cell(x, 10, args.runs, dpl)))
        print(rows[-1], flush=True)
    if args.target_only:
        table("k-means objective / non-private k-means++ (median)", rows)
        return
    if not args.quick:
        for name in ("digits", "wine", "breast_cancer"):
            xr, k = real(name)
            rows.append(
                (
                    f"{name} (n={xr.shape[0]}, d={xr.shape[1]}, k={k})",
                    kmeans_cell(xr, k, args.runs, dpl),
                )
            )
            print(rows[-1], flush=True)
    table("k-means objective / non-private k-means++ (median)", rows)
    if args.real_only:
        return

    fit_time(rng, dpl)

    reg_rows = []
    for n, d in ((10_000, 10), (100_000, 10)):
        xs = rng.uniform(-1, 1, size=(n, d))
        w = rng.normal(0, 0.3, size=d)
        ys = np.clip(xs @ w + rng.normal(0, 0.1, size=n), -2, 2)
        reg_rows.append(
            (f"linear n={n:.0e} d={d}", regression_cell(xs, ys, args.runs, dpl, (-2, 2)))
        )
        print(reg_rows[-1], flush=True)
    diabetes = load_diabetes()
    xd = MinMaxScaler(feature_range=(-1, 1)).fit_transform(diabetes.data)
    yd = MinMaxScaler(feature_range=(-1, 1)).fit_transform(diabetes.target[:, None])[:, 0]
    reg_rows.append(("diabetes (n=442, d=10)", regression_cell(xd, yd, args.runs, dpl, (-1, 1))))
    table("regression MSE / OLS MSE (median)", reg_rows)


if __name__ == "__main__":
    main()
