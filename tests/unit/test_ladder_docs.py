"""docs/ladder.md's examples run (doctests), and its reproduction table matches the code."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from dpkit.mechanisms._ladder_mechanism import ladder_optimal_delta

DOC = Path(__file__).resolve().parents[2] / "docs" / "ladder.md"


def test_ladder_page_examples_run() -> None:
    result = doctest.testfile(
        str(DOC),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    assert result.attempted >= 10
    assert result.failed == 0


@pytest.mark.parametrize(
    ("intervals", "epsilon", "rate"),
    [
        (((0, 1), (1000, 1001)), 1.0, 0.9098),
        (((0, 1), (1000, 1001)), 4.0, 0.3086),
        (((0, 100), (1000, 1001)), 4.0, 0.3711),
        (((0, 500), (1000, 1001)), 2.0, 0.9435),
        (((0, 1), (100, 101)), 0.5, 1.0003),
        (((0, 1), (2000, 2001)), 4.0, 0.2962),
    ],
)
def test_quoted_rates(intervals: tuple[tuple[int, int], ...], epsilon: float, rate: float) -> None:
    import math

    sensitivity = intervals[-1][1]
    _, value = ladder_optimal_delta(intervals, epsilon)
    staircase = sensitivity * math.exp(epsilon / 2) / math.expm1(epsilon)
    assert value / staircase == pytest.approx(rate, abs=1e-4)
