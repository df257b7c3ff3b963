"""docs/sensitivity.md's examples and the dpkit.sensitivity docstring examples run."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "sensitivity.md"
MODULES = [
    "dpkit.sensitivity._local",
    "dpkit.sensitivity._smooth",
    "dpkit.sensitivity._ptr",
    "dpkit.sensitivity._inverse",
    "dpkit.sensitivity._convexity",
]


def test_sensitivity_doc_runs() -> None:
    result = doctest.testfile(
        str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.attempted >= 6
    assert result.failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
