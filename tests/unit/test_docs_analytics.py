"""docs/analytics.md is a tutorial whose examples run: this runs them as doctests."""

from __future__ import annotations

import doctest
import logging
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"


def test_analytics_tutorial_runs() -> None:
    logging.getLogger("dpkit").setLevel(logging.ERROR)
    result = doctest.testfile(
        str(DOC),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    assert result.attempted > 20
    assert result.failed == 0
