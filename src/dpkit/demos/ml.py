"""The seed's budget example with its clustering step done right.

The seed text (003) spends a total budget of ε = 1 on three queries: a sum (0.5), a mean (0.3)
and cluster centres (0.2). Its clustering sketch is not private: it reads the utility's
sensitivity from the data (2·max||x||) and draws candidate centres from a non-private k-means
run on the same data. Here the centres come from :class:`dpkit.ml.KMeans` with
``method="grid_em"``: the exponential mechanism over a *public* lattice of candidates, with a
sensitivity fixed by the declared bounds. All three releases go through one ledger budget.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.stats import norm

from dpkit.accounting import Accountant
from dpkit.core._framework import make_sequential_composition
from dpkit.core._losses import PureDP
from dpkit.ledger import Ledger
from dpkit.mechanisms._laplace import make_geometric, make_laplace
from dpkit.ml._kmeans import KMeans, objective
from dpkit.transformations import make_bounded_sum, make_clamp, make_count

__all__ = ["demo_points", "run_ml_demo"]

BOUNDS = (-4.0, 4.0)
CENTRES = np.array([[-2.5, -2.0], [-2.0, 2.0], [0.5, 0.0], [2.5, 2.5], [2.5, -2.2]])


def demo_points(n: int = 1000) -> np.ndarray:
    """n two-dimensional points around five centres, deterministic (normal quantiles of a
    golden-ratio sequence), so the demo needs no randomness outside dpkit.noise."""
    i = np.arange(n)
    golden = (np.sqrt(5.0) - 1.0) / 2.0
    u1 = (i * golden) % 1.0
    u2 = (i * golden * golden + 0.5 / n) % 1.0
    offsets = np.stack([norm.ppf(0.001 + 0.998 * u1), norm.ppf(0.001 + 0.998 * u2)], axis=1)
    return np.asarray(CENTRES[i % len(CENTRES)] + 0.6 * offsets)


def _nonprivate_centres(points: np.ndarray, k: int) -> np.ndarray:
    from sklearn.cluster import KMeans as SkKMeans

    model = SkKMeans(n_clusters=k, n_init=10, random_state=0).fit(points)
    return np.asarray(model.cluster_centers_)


def _match(private: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Order the private centres to sit beside their nearest non-private centre (display)."""
    from scipy.optimize import linear_sum_assignment

    cost = ((private[:, None, :] - reference[None, :, :]) ** 2).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    out = np.empty_like(private)
    out[cols] = private[rows]
    return out


def run_ml_demo(
    console: Console | None = None,
    total_epsilon: float = 1,
    png: str | Path | None = None,
) -> dict[str, object]:
    """Sum (ε·0.5), mean (ε·0.3) and five cluster centres (ε·0.2) over one ledger budget.

    Prints the releases beside the true values and the budget spent; with ``png`` also saves
    a scatter plot of the points, the private centres and the non-private ones. Returns the
    released values (for tests).
    """
    console = console or Console()
    eps = Fraction(repr(float(total_epsilon)))
    points = demo_points()
    x = points[:, 0]
    lo, hi = BOUNDS
    ledger = Ledger.open(":memory:")
    ledger.create_budget("demo_points", PureDP(eps))
    accountant = Accountant(ledger, "demo_points")

    console.rule(f"[bold]Sum, mean and cluster centres under one budget ε = {float(eps):g}")
    table = Table(show_header=True, header_style="bold")
    for col in ("query", "ε", "released", "true value", "spent", "left"):
        table.add_column(col, justify="right")

    def left() -> tuple[str, str]:
        spent = accountant.spent()
        remaining = accountant.remaining()
        assert isinstance(spent, PureDP) and isinstance(remaining, PureDP)
        return f"{float(spent.epsilon):.4g}", f"{float(remaining.epsilon):.4g}"

    sensitivity = max(abs(lo), abs(hi))
    total = make_clamp(BOUNDS) >> make_bounded_sum(BOUNDS) >> make_laplace(sensitivity, eps / 2)
    released_sum = accountant.release(total, x, query="sum of x").value
    table.add_row(
        "sum of x", f"{float(eps / 2):.4g}", f"{released_sum:,.1f}", f"{x.sum():,.1f}", *left()
    )

    share = eps * Fraction(3, 20)  # 0.15 each for the noisy sum and the noisy count
    noisy_sum = make_clamp(BOUNDS) >> make_bounded_sum(BOUNDS) >> make_laplace(sensitivity, share)
    noisy_count = make_count() >> make_geometric(1, share)
    s, c = accountant.release(
        make_sequential_composition([noisy_sum, noisy_count]), x, query="mean of x"
    ).value
    mean = float(s) / max(float(c), 1.0)
    table.add_row(
        "mean of x",
        f"{float(2 * share):.4g}",
        f"{mean:.3f}",
        f"{x.mean():.3f}",
        *left(),
    )

    k = len(CENTRES)
    model = KMeans(
        k, epsilon=eps / 5, bounds=BOUNDS, method="grid_em", n_candidates=1024, em_radius=0.2
    )
    model.fit(points, accountant=accountant)
    reference = _nonprivate_centres(points, k)
    private = _match(model.cluster_centers_, reference)
    ratio = objective(points, private) / objective(points, reference)
    table.add_row(
        "5 cluster centres",
        f"{float(eps / 5):.4g}",
        "see below",
        "see below",
        *left(),
    )
    console.print(table)

    centres = Table(show_header=True, header_style="bold", title="cluster centres")
    for col in ("private (exp. mechanism, public lattice)", "non-private k-means", "distance"):
        centres.add_column(col, justify="right")
    for p, r in zip(private, reference, strict=True):
        centres.add_row(
            f"({p[0]:+.2f}, {p[1]:+.2f})",
            f"({r[0]:+.2f}, {r[1]:+.2f})",
            f"{float(np.linalg.norm(p - r)):.2f}",
        )
    console.print(centres)
    console.print(
        f"k-means objective of the private centres: {ratio:.2f}× the non-private one. The"
        " candidates are a public 32×32 lattice over the declared bounds [-4, 4]² and the"
        " utility's sensitivity comes from those bounds, not from the data (the seed's sketch"
        " used 2·max||x|| and candidates from a k-means run on the data: not private)."
        f" Budget: {float(eps / 2):g} + {float(2 * share):g} + {float(eps / 5):g} ="
        f" {float(eps):g}, recorded in the ledger.\n"
    )
    if png is not None:
        _scatter(points, private, reference, Path(png))
        console.print(f"scatter plot written to {png}")
    return {
        "sum": released_sum,
        "mean": mean,
        "centres": private,
        "nonprivate_centres": reference,
        "objective_ratio": ratio,
        "spent": accountant.spent(),
    }


def _scatter(points: np.ndarray, private: np.ndarray, reference: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    ax.scatter(points[:, 0], points[:, 1], s=4, c="0.7", label="data")
    ax.scatter(reference[:, 0], reference[:, 1], marker="x", s=90, c="k", label="k-means")
    ax.scatter(
        private[:, 0],
        private[:, 1],
        marker="o",
        s=90,
        facecolors="none",
        edgecolors="C3",
        linewidths=2,
        label="private (ε = 0.2)",
    )
    ax.set_xlim(*BOUNDS)
    ax.set_ylim(*BOUNDS)
    ax.set_aspect("equal")
    ax.legend(loc="upper left")
    ax.set_title("dpkit.ml.KMeans(method='grid_em') beside non-private k-means")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
