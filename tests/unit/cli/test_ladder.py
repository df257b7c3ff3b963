"""``dpkit ladder reproduce`` (the typer sub-app) and the facts the reproduction must show."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dpkit.cli.ladder import ladder_app
from dpkit.demos.ladder import PAPER_SETS, heatmap, paper_cases


def test_reproduce_writes_figures_and_tables(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        ladder_app, ["reproduce", "--out", str(tmp_path), "--quick", "--sets", "V4,V5"]
    )
    assert result.exit_code == 0, result.output
    for name in (
        "fig1_rate_V1-V4.png",
        "fig2_rate_V5-V7.png",
        "fig3_densities.png",
        "ladder_table.csv",
        "ladder_table.md",
        "README.md",
        "rate_grids.npz",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "fig1_rate_V1-V4.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (tmp_path / "ladder_table.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["set"] for r in rows} == {"V4", "V5"}
    assert {"rate at δ*", "δ*", "n", "N", "rate (grid min)"} <= set(rows[0])
    v4 = [r for r in rows if r["set"] == "V4"]
    assert all(float(r["rate at δ*"]) == pytest.approx(1.0, abs=1e-4) for r in v4)
    assert "| V5 |" in (tmp_path / "ladder_table.md").read_text(encoding="utf-8")


def test_reproduce_refuses_unknown_sets(tmp_path: Path) -> None:
    result = CliRunner().invoke(ladder_app, ["reproduce", "--out", str(tmp_path), "--sets", "V9"])
    assert result.exit_code != 0
    assert "V9" in result.output


def test_help_lists_reproduce() -> None:
    result = CliRunner().invoke(ladder_app, ["--help"])
    assert result.exit_code == 0 and "reproduce" in result.output


def test_paper_claims_that_hold() -> None:
    """At the optimal δ and ε = 4: rate falls as μ(V) shrinks (Fig. 1) and as Δ grows (Fig. 2);
    V4 = [0, Δ] is the staircase (rate 1)."""
    eps = np.array([4.0])
    best = {}
    for name in PAPER_SETS:
        sensitivity = max(b for _, b in PAPER_SETS[name])
        deltas = np.geomspace(sensitivity * 1e-3, sensitivity / 2, 40)
        best[name] = float(heatmap(name, deltas, eps).min())
    assert best["V1"] < best["V2"] < best["V3"] < best["V4"]
    assert best["V4"] == pytest.approx(1.0, abs=2e-3)
    assert best["V7"] < best["V6"] < best["V5"] < 1.0


def test_paper_claim_that_fails_rate_above_one_without_a_top_level() -> None:
    """With δ = 0 (no top level) the ladder is worse than the staircase for every paper set."""
    cases = paper_cases((1.0,), names=("V1", "V5"))
    assert all(c.rate_delta0 > 1.0 for c in cases)
    assert all(c.rate_star < 1.0 for c in cases)
    assert all(c.n is not None and c.pieces >= 2 for c in cases)
