"""End-to-end statistical privacy audit on tiny neighbouring tables.

Table b is table a plus one privacy unit with many rows at and beyond the clamp edge. Each query
is compiled once with a fixed bounding salt (privacy must hold for every salt, since the rows
kept depend only on the unit's own rows), both tables are aggregated exactly by the reference
engine, and the released value is sampled many times; the auditor from dpkit.testing looks for
an event whose probabilities violate the declared ε.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Query, count, mean
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._engines import PandasEngine
from dpkit.analytics._planner import compile_query
from dpkit.testing import audit_samples

A = pd.DataFrame(
    {
        "user": [1, 1, 2, 3, 3, 3, 4],
        "g": ["x", "y", "x", "y", "y", "x", "y"],
        "v": [10.0, 20.0, 30.0, 95.0, 5.0, 50.0, 0.0],
    }
)
HEAVY = pd.DataFrame({"user": [99] * 6, "g": ["x"] * 6, "v": [100.0, 1e6, 1e9, 100.0, 99.0, 1e6]})
B = pd.concat([A, HEAVY], ignore_index=True)


def _samples(
    query: Query, extract: Callable[[Any], float], n: int, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    out = []
    engine_a, engine_b = PandasEngine(A), PandasEngine(B)
    schema = engine_a.schema()
    compiled = compile_query(query, schema, "user", dp.PureDP(epsilon), salt=12345)
    assert compiled.loss == dp.PureDP(epsilon)
    for engine in (engine_a, engine_b):
        exact = [engine.run(plan) for plan in compiled.plans]
        out.append(np.array([extract(compiled.release(exact)[0]) for _ in range(n)]))
    return out[0], out[1]


CASES = {
    "count": (Query().bound(max_rows=3).agg(count()), lambda t: t["main"]["count"][0]),
    "sum": (Query().bound(max_rows=3).agg(dp_sum("v", (0, 100))), lambda t: t["main"]["sum_v"][0]),
    "mean": (Query().bound(max_rows=3).agg(mean("v", (0, 100))), lambda t: t["main"]["mean_v"][0]),
    "grouped": (
        Query().group_by("g", keys=["x", "y"]).bound(max_rows=3).agg(count()),
        lambda t: t["main"]["count"][0],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_audit_finds_no_violation(name: str) -> None:
    query, extract = CASES[name]
    a, b = _samples(query, extract, 1500, epsilon=1.0)
    audit_samples(a, b, claimed_epsilon=1.0).raise_if_failed()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_audit_finds_no_violation_large(name: str) -> None:
    query, extract = CASES[name]
    a, b = _samples(query, extract, 40_000, epsilon=1.0)
    audit_samples(a, b, claimed_epsilon=1.0).raise_if_failed()


def test_audit_catches_unbounded_contributions() -> None:
    """Negative control: claiming ε/4 for the same release must fail (the audit has power)."""
    query, extract = CASES["count"]
    a, b = _samples(query, extract, 1500, epsilon=4.0)
    assert not audit_samples(a, b, claimed_epsilon=1.0).passed
