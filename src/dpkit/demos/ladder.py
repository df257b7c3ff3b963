"""Reproduce the experiments of Wu, He & Xia (2017), Section 6: Figs. 1-3 and a table.

rate(δ, ε) = E|X| · (e^ε - 1) / (Δ·e^{ε/2}), the ladder's expected absolute noise relative to
the optimal staircase's (Geng & Viswanath 2016), for the paper's neighbour sets V1-V7, computed
from the exact continuous density (ladder.md §5). See docs/ladder.md for what the reproduction
confirms and where we depart from the paper.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PAPER_SETS", "Case", "heatmap", "paper_cases", "reproduce"]

PAPER_SETS: dict[str, tuple[tuple[int, int], ...]] = {
    "V1": ((0, 1), (1000, 1001)),
    "V2": ((0, 100), (1000, 1001)),
    "V3": ((0, 500), (1000, 1001)),
    "V4": ((0, 1001),),
    "V5": ((0, 1), (100, 101)),
    "V6": ((0, 1), (1000, 1001)),
    "V7": ((0, 1), (2000, 2001)),
}
"""The paper's neighbour sets: V1-V4 share Δ = 1001 with growing μ(V) (Fig. 1); V5-V7 share
μ(V) = 2 with growing Δ (Fig. 2). V6 = V1."""

TABLE_EPSILONS = (0.1, 0.5, 1.0, 2.0, 4.0)


def _staircase(sensitivity: float, eps: np.ndarray) -> np.ndarray:
    return sensitivity * np.exp(eps / 2.0) / np.expm1(eps)


def _profile(name: str) -> tuple[Any, Any]:
    """The δ-free continuous construction of a paper set, to convergence (unit 1)."""
    from dpkit.mechanisms._ladder_mechanism import (
        _continuous_profile,
        _unit_of,
        normalize_neighbor_set,
    )

    intervals = normalize_neighbor_set(PAPER_SETS[name])
    unit = _unit_of(intervals, None)
    return _continuous_profile(intervals, unit, 1_000_000), unit


def heatmap(name: str, deltas: np.ndarray, epsilons: np.ndarray, profile: Any = None) -> np.ndarray:
    """rate[i, j] at (deltas[i], epsilons[j]) for the paper's set ``name`` (continuous ladder)."""
    from dpkit.mechanisms._ladder_mechanism import _continuous_expected_abs

    prof, unit = _profile(name) if profile is None else profile
    sensitivity = float(max(b for _, b in PAPER_SETS[name]))
    mean_abs = _continuous_expected_abs(prof, unit, epsilons, deltas)
    return np.asarray(mean_abs / _staircase(sensitivity, np.asarray(epsilons))[None, :])


@dataclass(frozen=True, slots=True)
class Case:
    """One row of the table: V, ε and what the ladder achieves there."""

    name: str
    intervals: tuple[tuple[int, int], ...]
    sensitivity: int
    measure: int
    epsilon: float
    rate_delta0: float
    rate_grid: float
    delta_star: float
    rate_star: float
    n: int | None
    pieces: int
    ladder_abs: float
    staircase_abs: float
    laplace_abs: float

    def row(self) -> dict[str, Any]:
        """The CSV / Markdown row."""
        return {
            "set": self.name,
            "V": " ∪ ".join(f"[{a}, {b}]" for a, b in self.intervals),
            "Δ": self.sensitivity,
            "μ(V)": self.measure,
            "Δ/μ(V)": round(self.sensitivity / self.measure, 3),
            "ε": self.epsilon,
            "rate (δ=0)": round(self.rate_delta0, 4),
            "rate (grid min)": round(self.rate_grid, 4),
            "δ*": round(self.delta_star, 4),
            "rate at δ*": round(self.rate_star, 4),
            "n": "" if self.n is None else self.n,
            "N": self.pieces,
            "E|X| ladder": round(self.ladder_abs, 3),
            "E|X| staircase": round(self.staircase_abs, 3),
            "E|X| Laplace": round(self.laplace_abs, 3),
        }


def paper_cases(
    epsilons: tuple[float, ...] = TABLE_EPSILONS,
    grid_deltas: dict[str, np.ndarray] | None = None,
    profiles: dict[str, Any] | None = None,
    names: tuple[str, ...] = tuple(PAPER_SETS),
) -> list[Case]:
    """Every (V, ε) case of the table, with δ* optimised and n, N from the exact construction."""
    from dpkit.mechanisms._ladder_mechanism import ladder_density, ladder_optimal_delta

    cases = []
    for name in names:
        intervals = PAPER_SETS[name]
        sensitivity = max(b for _, b in intervals)
        measure = sum(b - a for a, b in intervals)
        profile = profiles[name] if profiles is not None else _profile(name)
        deltas = (
            grid_deltas[name]
            if grid_deltas is not None
            else np.geomspace(sensitivity * 1e-4, sensitivity / 2, 64)
        )
        eps_arr = np.asarray(epsilons, dtype=np.float64)
        stair = _staircase(float(sensitivity), eps_arr)
        at_zero = heatmap(name, np.array([0.0]), eps_arr, profile)[0]
        on_grid = heatmap(name, deltas, eps_arr, profile).min(axis=0)
        for j, eps in enumerate(epsilons):
            delta_star, best = ladder_optimal_delta(intervals, eps)
            density = ladder_density(intervals, eps, delta_star)
            pieces = int(density.levels.pieces_per_level().max())
            cases.append(
                Case(
                    name=name,
                    intervals=intervals,
                    sensitivity=sensitivity,
                    measure=measure,
                    epsilon=eps,
                    rate_delta0=float(at_zero[j]),
                    rate_grid=float(on_grid[j]),
                    delta_star=delta_star,
                    rate_star=best / float(stair[j]),
                    n=density.levels.converged_at,
                    pieces=pieces,
                    ladder_abs=best,
                    staircase_abs=float(stair[j]),
                    laplace_abs=sensitivity / eps,
                )
            )
    return cases


def _write_table(cases: list[Case], out: Path) -> tuple[Path, Path]:
    rows = [c.row() for c in cases]
    csv_path = out / "ladder_table.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    md_path = out / "ladder_table.md"
    header = list(rows[0])
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(str(r[h]) for h in header) + " |" for r in rows]
    md_path.write_text(
        "# Ladder mechanism vs staircase and Laplace (Wu, He & Xia 2017, Section 6)\n\n"
        "rate = E|X|·(e^ε - 1)/(Δ·e^{ε/2}): the ladder's expected absolute noise over the optimal "
        "staircase's (< 1: the ladder is better). *rate (δ=0)*: no top level; *rate (grid "
        "min)*: the best δ on the heat map's grid; *δ\\**: the optimised δ; *n*: the level where "
        "the convergence certificate holds (the levels after n+1 are a periodic tail); *N*: the "
        "most intervals in one level R_t (whole line).\n\n" + "\n".join(lines) + "\n",
        encoding="utf-8",
    )
    return csv_path, md_path


def _plot_heatmaps(
    names: list[str],
    data: dict[str, np.ndarray],
    deltas: dict[str, np.ndarray],
    epsilons: np.ndarray,
    path: Path,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    cols = 2 if len(names) == 4 else len(names)
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False, layout="constrained"
    )
    norm = TwoSlopeNorm(vmin=0.0, vcenter=1.0, vmax=2.0)
    mesh = None
    for ax, name in zip(axes.flat, names, strict=False):
        rate = np.clip(data[name], 0.0, 2.0)
        d = deltas[name]
        mesh = ax.pcolormesh(d, epsilons, rate.T, cmap="RdBu_r", norm=norm, shading="auto")
        ax.set_xscale("log")
        best = d[np.argmin(data[name], axis=0)]
        ax.plot(best, epsilons, "k.", markersize=2.5, label="best δ on the grid")
        ax.contour(d, epsilons, data[name].T, levels=[1.0], colors="k", linewidths=0.8)
        intervals = PAPER_SETS[name]
        ax.set_title(f"{name} = " + " ∪ ".join(f"[{a},{b}]" for a, b in intervals), fontsize=10)
        ax.set_xlabel("δ")
        ax.set_ylabel("ε")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    if mesh is not None:
        fig.colorbar(mesh, ax=axes, shrink=0.8, label="rate (ladder E|X| / staircase E|X|)")
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_densities(path: Path, epsilon: float = 1.0) -> dict[str, float]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpkit.mechanisms._ladder_mechanism import ladder_density, ladder_optimal_delta

    intervals = PAPER_SETS["V5"]
    sensitivity = 101.0
    delta_star, _ = ladder_optimal_delta(intervals, epsilon)
    density = ladder_density(intervals, epsilon, delta_star)
    x = np.linspace(-400.0, 400.0, 8001)
    b = sensitivity / epsilon
    laplace = np.exp(-np.abs(x) / b) / (2 * b)
    gamma = 1.0 / (1.0 + math.exp(epsilon / 2))
    rho = math.exp(-epsilon)
    a = (1 - rho) / (2 * sensitivity * (gamma + (1 - gamma) * rho))
    y = np.abs(x)
    level = np.floor(y / sensitivity) + ((y % sensitivity) >= gamma * sensitivity)
    staircase = a * rho**level
    ladder = density.pdf(x)
    fig, axes = plt.subplots(3, 1, figsize=(8, 8.5), sharex=True)
    for ax, values, label in zip(
        axes,
        (laplace, staircase, ladder),
        (
            f"(a) Laplace, b = Δ/ε = {b:g}",
            f"(b) staircase, γ* = {gamma:.3f}",
            f"(c) ladder for V5 = [0,1] ∪ [100,101], δ* = {delta_star:.3g}",
        ),
        strict=True,
    ):
        ax.plot(x, values, lw=1.0)
        ax.set_yscale("log")
        ax.set_ylim(1e-7, 1.0)
        ax.set_title(label, fontsize=10)
        ax.set_ylabel("density")
    axes[-1].set_xlabel(f"noise x   (Δ = {sensitivity:g}, ε = {epsilon:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"delta_star": delta_star, "expected_abs": density.expected_abs()}


def reproduce(
    out: Path, *, quick: bool = False, names: tuple[str, ...] = tuple(PAPER_SETS)
) -> dict[str, Any]:
    """Write Figs. 1-3 (PNG), the table (CSV and Markdown) and a README into ``out``.

    ``quick`` uses coarser grids and ε in {1, 4} for the table; ``names`` restricts the sets.
    """
    unknown = [n for n in names if n not in PAPER_SETS]
    if unknown or not names:
        raise ValueError(f"unknown sets {unknown}; choose from {', '.join(PAPER_SETS)}")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    n_delta, n_eps = (24, 20) if quick else (64, 50)
    epsilons = np.linspace(0.1, 5.0, n_eps)
    deltas: dict[str, np.ndarray] = {}
    data: dict[str, np.ndarray] = {}
    profiles: dict[str, Any] = {}
    for name in names:
        sensitivity = max(b for _, b in PAPER_SETS[name])
        deltas[name] = np.geomspace(sensitivity * 1e-4, sensitivity / 2, n_delta)
        profiles[name] = _profile(name)
        data[name] = heatmap(name, deltas[name], epsilons, profiles[name])
    fig1 = out / "fig1_rate_V1-V4.png"
    fig2 = out / "fig2_rate_V5-V7.png"
    fig3 = out / "fig3_densities.png"
    figures = []
    for path, group, title in (
        (fig1, ("V1", "V2", "V3", "V4"), "Fig. 1: same Δ = 1001, growing μ(V)"),
        (fig2, ("V5", "V6", "V7"), "Fig. 2: same μ(V) = 2, growing Δ"),
    ):
        chosen = [n for n in group if n in names]
        if chosen:
            _plot_heatmaps(chosen, data, deltas, epsilons, path, title)
            figures.append(path)
    heat_seconds = time.perf_counter() - started
    fig3_info = _plot_densities(fig3)
    table_eps = (1.0, 4.0) if quick else TABLE_EPSILONS
    cases = paper_cases(table_eps, deltas, profiles, names)
    csv_path, md_path = _write_table(cases, out)
    arrays: dict[str, Any] = {"epsilons": epsilons}
    arrays.update({f"{k}_deltas": v for k, v in deltas.items()})
    arrays.update({f"{k}_rate": v for k, v in data.items()})
    np.savez_compressed(out / "rate_grids.npz", **arrays)
    total = time.perf_counter() - started
    readme = out / "README.md"
    readme.write_text(
        "# Reproduction of Wu, He & Xia (2017), Section 6\n\n"
        f"Written by `dpkit ladder reproduce` in {total:.1f} s "
        f"(heat maps: {heat_seconds:.1f} s).\n\n"
        f"* `{fig1.name}`, `{fig2.name}`: rate over (δ, ε) like the paper's Figs. 1 and 2 "
        "(blue: the ladder beats the optimal staircase; black line: rate = 1; "
        "dots: best δ per ε).\n"
        f"* `{fig3.name}`: Laplace, staircase and ladder densities, like Fig. 3 "
        f"(ε = 1, δ* = {fig3_info['delta_star']:.4g}).\n"
        f"* `{csv_path.name}`, `{md_path.name}`: per (V, ε): rate, δ*, rate at δ*, n, N.\n"
        "* `rate_grids.npz`: the heat-map data.\n\n"
        "See docs/ladder.md for what this confirms and where the paper is ambiguous or wrong.\n",
        encoding="utf-8",
    )
    return {
        "figures": [*figures, fig3],
        "table": [csv_path, md_path],
        "seconds": total,
        "heatmap_seconds": heat_seconds,
        "cases": cases,
    }
