"""The seed's 0.5 / 0.3 / 0.2 example with private cluster centres."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from dpkit.core._losses import PureDP
from dpkit.demos.ml import run_ml_demo

pytestmark = pytest.mark.usefixtures("seeded")


def test_ml_demo_spends_exactly_the_budget_and_plots(tmp_path: Path) -> None:
    out = io.StringIO()
    png = tmp_path / "centres.png"
    result = run_ml_demo(Console(file=out, width=120), total_epsilon=1, png=png)
    assert result["spent"] == PureDP(1)
    centres = np.asarray(result["centres"])
    assert centres.shape == (5, 2) and np.all(np.abs(centres) <= 4)
    text = out.getvalue()
    assert "cluster centres" in text and "0.5 + 0.3 + 0.2 = 1" in text
    assert png.stat().st_size > 1000
