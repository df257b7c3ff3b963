"""The local-DP demo: an emoji-frequency collection from a million phones (Apple-style).

``run_local_demo(console)`` simulates n users, each with one favourite emoji, reporting with
OLH, HCMS and RAPPOR at ε = 2, and shows true against estimated frequencies as a table and a
bar chart in the terminal, optionally also as a PNG.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from dpkit.local import Campaign, HadamardCountMeanSketch, OptimizedLocalHashing, Rappor

__all__ = ["EMOJI", "emoji_population", "run_local_demo"]

EMOJI: tuple[tuple[str, str], ...] = (
    ("😂", "tears of joy"),
    ("❤️", "red heart"),
    ("🤣", "rolling laughing"),
    ("👍", "thumbs up"),
    ("😭", "crying"),
    ("🙏", "folded hands"),
    ("😘", "kiss"),
    ("🥰", "hearts face"),
    ("😍", "heart eyes"),
    ("😊", "smiling"),
    ("🎉", "party popper"),
    ("😁", "grinning"),
    ("💕", "two hearts"),
    ("🥺", "pleading"),
    ("😅", "sweat smile"),
    ("🔥", "fire"),
)


def emoji_population(n_users: int) -> np.ndarray:
    """n users' favourite emoji indices, deterministic, Zipf-like (frequency ∝ 1/rank)."""
    weights = 1.0 / np.arange(1, len(EMOJI) + 1)
    counts = np.floor(weights / weights.sum() * n_users).astype(np.int64)
    counts[0] += n_users - int(counts.sum())
    return np.repeat(np.arange(len(EMOJI)), counts)


def _bar(value: float, scale: float, width: int = 24) -> str:
    cells = max(0.0, value) / scale * width
    full = int(cells)
    return "█" * full + ("▌" if cells - full >= 0.5 else "")


def run_local_demo(
    console: Console,
    n_users: int = 1_000_000,
    epsilon: float = 2,
    png: str | Path | None = "auto",
) -> dict[str, Any]:
    """Simulate the collection and print true vs estimated frequencies; returns the figures.

    ``png``: where to write the bar chart (true against estimated shares) as a PNG; ``"auto"``
    (the default, used by ``dpkit demo``) writes ``dpkit-local-emoji.png`` in the system's
    temporary directory and says where; None writes none.

    Each user's phone randomises its own emoji (client side) before anything leaves it; the
    server only sees reports and turns them into unbiased estimates (raw) and consistent ones
    (Norm-Sub: non-negative, summing to 1), which the table and bars show.
    """
    d = len(EMOJI)
    values = emoji_population(n_users)
    truth = np.bincount(values, minlength=d) / values.size
    oracles: list[tuple[str, Any]] = [
        ("OLH", OptimizedLocalHashing(d, epsilon)),
        ("HCMS", HadamardCountMeanSketch(d, epsilon)),
        ("RAPPOR", Rappor.for_epsilon(d, epsilon, m=32, hashes=2, cohorts=8)),
    ]
    console.rule(f"[bold]Local DP: favourite emoji of {n_users:,} users")
    results: dict[str, Any] = {"truth": truth}
    summaries = []
    for label, oracle in oracles:
        campaign = Campaign(oracle, label)
        campaign.add(oracle.randomize(values))  # on a real deployment: one call per phone
        if isinstance(oracle, Rappor):
            est = oracle.aggregate(campaign.reports(), np.arange(d), method="nnls")
            shown = est.consistent / est.consistent.sum()  # type: ignore[union-attr]
        else:
            est = oracle.aggregate(campaign.reports(), postprocess="norm_sub")
            shown = est.consistent
        results[label] = {"raw": est.values, "shown": shown, "se": est.standard_errors}
        summaries.append((label, campaign.summary()))

    table = Table(show_header=True, header_style="bold", title="true vs estimated share")
    table.add_column("emoji")
    table.add_column("true", justify="right")
    for label, _ in oracles:
        table.add_column(label, justify="right")
    table.add_column("true ▕ OLH ▕ HCMS ▕ RAPPOR")
    scale = float(truth.max())
    for i, (glyph, name) in enumerate(EMOJI):
        cells = [f"{glyph} {name}", f"{truth[i]:.2%}"]
        cells += [f"{results[label]['shown'][i]:.2%}" for label, _ in oracles]
        bars = "\n".join(
            [f"[white]{_bar(truth[i], scale)}[/]"]
            + [
                f"[{colour}]{_bar(results[label]['shown'][i], scale)}[/]"
                for (label, _), colour in zip(oracles, ("cyan", "magenta", "yellow"), strict=True)
            ]
        )
        cells.append(bars)
        table.add_row(*cells)
    console.print(table)
    accounting = Table(show_header=True, header_style="bold", title="privacy per user")
    for col in ("oracle", "reports", "ε per report (local)", "shuffled reading (ε, δ)", "RMSE"):
        accounting.add_column(col, justify="right")
    for label, summary in summaries:
        shuffle = summary["shuffle_epsilon_delta"]
        rmse = float(np.sqrt(np.mean((results[label]["shown"] - truth) ** 2)))
        accounting.add_row(
            label,
            f"{summary['reports']:,}",
            f"{summary['per_report_epsilon']:.4g}",
            "n/a" if shuffle is None else f"({shuffle[0]:.3g}, {shuffle[1]:.0e})",
            f"{rmse:.2e}",
        )
    console.print(accounting)
    console.print(
        "Shares shown are Norm-Sub consistent estimates (RAPPOR: non-negative least squares); the"
        " raw unbiased estimates can be slightly negative for rare emoji. RAPPOR runs as"
        " one-time RAPPOR (permanent response only) with f set so that ε∞ <= ε; the shuffled"
        " reading assumes an"
        " anonymising shuffler (Feldman, McMillan & Talwar 2021).\n"
    )
    if png is not None:
        if png == "auto":
            png = Path(tempfile.gettempdir()) / "dpkit-local-emoji.png"
        _png(Path(png), truth, results, [label for label, _ in oracles])
        console.print(f"chart written to {png}")
    return results


def _png(path: Path, truth: np.ndarray, results: dict[str, Any], labels: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(truth.size)
    width = 0.2
    fig, ax = plt.subplots(figsize=(12, 4.5))
    ax.bar(x - 1.5 * width, truth, width, label="true", color="black")
    for j, label in enumerate(labels):
        ax.bar(x + (j - 0.5) * width, results[label]["shown"], width, label=label)
    ax.set_xticks(x, [name for _, name in EMOJI], rotation=45, ha="right")
    ax.set_ylabel("share of users")
    ax.set_title("Local DP emoji frequencies: true vs estimated (consistent)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
