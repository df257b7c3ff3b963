"""The local-DP demo runs end to end (small n) and writes its PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from dpkit.demos.local import EMOJI, run_local_demo
from dpkit.local import Rappor


@pytest.mark.usefixtures("seeded")
def test_demo_runs_and_writes_png(tmp_path: Path) -> None:
    console = Console(record=True, width=140)
    png = tmp_path / "emoji.png"
    results = run_local_demo(console, n_users=20_000, epsilon=2, png=png)
    text = console.export_text()
    assert "tears of joy" in text and "RAPPOR" in text and "HCMS" in text
    assert png.exists() and png.stat().st_size > 10_000
    for label in ("OLH", "HCMS", "RAPPOR"):
        shown = results[label]["shown"]
        assert shown.shape == (len(EMOJI),) and shown.min() >= 0
        assert shown.sum() == pytest.approx(1.0)
        assert np.abs(shown - results["truth"]).max() < 0.05


def test_rappor_for_epsilon() -> None:
    r = Rappor.for_epsilon(16, 2)
    assert r.epsilon <= 2 and float(r.epsilon) > 1.999
    assert r.epsilon == r.epsilon_longitudinal or r.epsilon < r.epsilon_longitudinal
