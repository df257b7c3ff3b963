"""The CLI prints what each quantile mechanism's rank bound guarantees (issue 21): the
exponential mechanism's rows below / at or below the released value, the inverse mechanism's
path length; never the old "its rank is within ±N rows of the target rank", which did not hold
on tied data and never described the inverse mechanism's bound."""

from __future__ import annotations

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
from rich.console import Console

import dpkit as dp
from dpkit.analytics import Session, median
from dpkit.analytics._render import render_release


@pytest.mark.parametrize(
    ("method", "said"),
    [
        ("exponential", "at most q·n + "),
        ("inverse", "rows (added or removed) away from being the group's q-quantile"),
    ],
)
def test_printed_note_is_the_mechanisms_own(method: str, said: str) -> None:
    df = pd.DataFrame({"u": np.arange(400), "x": np.arange(400) % 7})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(10), engine="pandas", max_rows=1)
    query = session.query().agg(median("x", (0, 6), method=method))
    release = session.evaluate(query, epsilon=1)
    console = Console(width=100, record=True, no_color=True, force_terminal=False)
    render_release(release, console, "t", aggregations=query)
    text = " ".join(console.export_text().split())
    note = release.accuracy["median_x"].note
    assert said in note
    assert f"note: median_x: {' '.join(note.split())}." in text
    assert "of the target rank" not in text
