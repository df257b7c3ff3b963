"""The moments family (planner/families/_moments.py): a neighbour check of the noisy sums' and
counts' calibration for means, variances and standard deviations, on hard neighbours (one unit
adds its ``max_rows`` rows at the bound farthest from the centre, in one group or in several),
on every embedded engine and both noise families. It fails on a mutant that halves a
sensitivity (checked when the mean's rows moved to the fine grid of a sum)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, mean, std, variance
from dpkit.analytics._planner import _compiled


def _captured(
    monkeypatch: pytest.MonkeyPatch, frame: pd.DataFrame, query: Any, engine: str, family: str
) -> dict[int, tuple[Any, list[int]]]:
    """Each noisy output's measurement and the exact integers the noise would be added to."""
    seen: dict[int, tuple[Any, list[int]]] = {}

    def exact(self: _compiled.Noisy, values: Any) -> np.ndarray:
        ints = [int(v) for v in np.asarray(values, dtype=object).reshape(-1)]
        seen[self.output] = (self.measurement, ints)
        return np.array([float(v) for v in ints])

    monkeypatch.setattr(_compiled.Noisy, "apply", exact)
    budget = dp.PureDP(10) if family == "pure" else dp.ZCDP(5)
    session = Session(frame, "u", budget, max_rows=3, engine=engine)
    loss = {"pure": {"epsilon": 1}, "zcdp": {"rho": 0.5}}[family]
    session.evaluate(query(session.query()), **loss)
    return seen


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
@pytest.mark.parametrize("family", ["pure", "zcdp"])
@pytest.mark.parametrize("aggregate", [mean, variance, std])
@pytest.mark.parametrize("bounds", [(0.0, 10.0), (-3.3, 0.7), (0.3, 1e6)])
def test_one_unit_moves_every_noisy_input_within_its_sensitivity(
    monkeypatch: pytest.MonkeyPatch, engine: str, family: str, aggregate: Any, bounds: Any
) -> None:
    rng = np.random.default_rng(3)
    lo, hi = bounds
    n = 60
    base = pd.DataFrame(
        {
            "u": np.arange(n) // 3,
            "g": np.where(np.arange(n) % 2 == 0, "a", "b"),
            "v": rng.uniform(lo, hi, n),
        }
    )

    def query(q: Any) -> Any:
        return q.group_by("g", keys=["a", "b"]).agg(aggregate("v", bounds))

    before = _captured(monkeypatch, base, query, engine, family)
    # the hard neighbours: one more unit with max_rows (3) rows at either end of the bounds,
    # all in one group, or spread over both
    for value in (lo, hi):
        for groups in (["a", "a", "a"], ["a", "b", "b"]):
            extra = pd.DataFrame({"u": [10_000] * 3, "g": groups, "v": [value] * 3})
            after = _captured(monkeypatch, pd.concat([base, extra]), query, engine, family)
            assert after.keys() == before.keys()
            for output, (measurement, ints) in after.items():
                moved = np.array(ints, dtype=object) - np.array(before[output][1], dtype=object)
                l1 = int(sum(abs(int(d)) for d in moved))
                l2sq = int(sum(int(d) * int(d) for d in moved))
                # the loss at the observed distance is within the loss the noise was set for
                observed = l1 if family == "pure" else l2sq**0.5
                assert measurement.map(observed) <= measurement.loss, (
                    measurement.name,
                    value,
                    groups,
                    observed,
                    measurement.d_in,
                )
                # and the bound is tight: the far end moves the sums by most of it
                if value == (lo if abs(lo - (lo + hi) / 2) >= abs(hi - (lo + hi) / 2) else hi):
                    assert observed > 0


@pytest.mark.parametrize("family", ["pure", "zcdp"])
@pytest.mark.parametrize(
    "bounds",
    [(-(2.0**62), 2.0**62), (1e270, 2.0**899), (1.5 * 2**-62, 1.0), (-1.0, -0.3)],
    ids=["2^62", "2^899", "tie-on-fine-grid", "negative"],
)
def test_mean_extreme_bounds_engines_agree_and_stay_within_sensitivity(
    monkeypatch: pytest.MonkeyPatch, family: str, bounds: Any
) -> None:
    """Bounds at the magnitude limits, a bound on a half step of the fine grid and negative
    bounds: pandas and DuckDB give the same exact integers, and a unit of 3 rows beyond either
    bound (clamped), in one group or two, moves them within the calibrated sensitivity."""
    lo, hi = bounds
    values = [lo, hi, lo / 2 + hi / 2, np.nextafter(lo, hi), np.nextafter(hi, lo), -1e308]
    base = pd.DataFrame({"u": np.arange(30) // 3, "g": ["a", "b"] * 15, "v": (values * 5)[:30]})

    def query(q: Any) -> Any:
        return q.group_by("g", keys=["a", "b"]).agg(mean("v", bounds))

    before = {e: _captured(monkeypatch, base, query, e, family) for e in ("pandas", "duckdb")}
    assert {o: v[1] for o, v in before["pandas"].items()} == {
        o: v[1] for o, v in before["duckdb"].items()
    }
    for value in (-1e308, 1e308):
        for groups in (["a", "a", "a"], ["a", "b", "b"]):
            extra = pd.DataFrame({"u": [10_000] * 3, "g": groups, "v": [value] * 3})
            after = _captured(monkeypatch, pd.concat([base, extra]), query, "pandas", family)
            for output, (measurement, ints) in after.items():
                moved = [a - b for a, b in zip(ints, before["pandas"][output][1], strict=True)]
                l1, l2sq = sum(abs(d) for d in moved), sum(d * d for d in moved)
                observed = l1 if family == "pure" else l2sq**0.5
                assert measurement.map(observed) <= measurement.loss, (value, groups, observed)
