"""The dense pre-count of units that may exceed a bound (issue 15 §1, engines._heavy).

The engines check bounds exactly only for the candidate units; the result must be identical to
the reference engine's whatever the candidates are, as long as they include every unit that
exceeds a bound. A broken candidate set (one heavy unit left out) must change the result: the
last test shows that the equivalence tests can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from _engine_oracle import result_dict

from dpkit.analytics import col
from dpkit.analytics._engines import (
    BoundedPlan,
    DuckDBEngine,
    Engine,
    Output,
    PandasEngine,
    Step,
    ValueSpec,
    _heavy,
)
from dpkit.analytics._engines._heavy import MAX_RANGE, candidate_threshold, heavy_candidates
from dpkit.analytics._query import KeySet

Make = Callable[[Any], Engine]

OUTPUTS = (Output("rows"), Output("units"), Output("sum", 0), Output("sumsq", 0))


def exact_heavy(values: np.ndarray, threshold: int) -> np.ndarray:
    ids, counts = np.unique(values, return_counts=True)
    return ids[counts > threshold]


@pytest.mark.parametrize("offset", [0, 7, -(10**12), 10**15])
def test_candidates_are_the_units_with_more_rows(offset: int) -> None:
    rng = np.random.default_rng(offset % 1000)
    values = rng.integers(0, 5000, 40_000) + offset
    chunks = np.array_split(values, 7)
    got = heavy_candidates(chunks, int(values.min()), int(values.max()), 12)
    assert got is not None
    np.testing.assert_array_equal(got, exact_heavy(values, 12))


def test_candidates_edge_cases() -> None:
    assert heavy_candidates([], 0, 0, 3) is not None
    assert heavy_candidates([], 0, 0, 3).size == 0  # type: ignore[union-attr]
    assert heavy_candidates([np.array([5])], 0, MAX_RANGE, 1) is None  # too wide to count
    one = heavy_candidates([np.array([9, 9, 9])], 9, 9, 2)
    assert one is not None and one.tolist() == [9]


def test_threshold_is_the_smallest_bound() -> None:
    plan = plan_of(max_rows=9, max_groups=4, max_rows_per_group=6)
    assert candidate_threshold(plan) == 4
    assert candidate_threshold(plan_of(max_rows_per_group=2, max_groups=3)) == 2


def table(heavy_units: int, seed: int = 0, offset: int = 10**12) -> pd.DataFrame:
    """Units with 1-3 rows each, plus ``heavy_units`` units with 4-12 rows."""
    rng = np.random.default_rng(seed)
    light = np.repeat(np.arange(300), rng.integers(1, 4, 300))
    heavy = np.repeat(np.arange(300, 300 + heavy_units), rng.integers(4, 13, heavy_units))
    user = np.concatenate([light, heavy]) * 3 - offset  # sparse, negative, far from 0
    n = user.size
    return pd.DataFrame(
        {
            "user": rng.permutation(user),
            "dept": rng.integers(0, 4, n),
            "salary": rng.normal(50.0, 30.0, n),
        }
    )


def plan_of(**kw: Any) -> BoundedPlan:
    base: dict[str, Any] = dict(
        steps=(),
        unit="user",
        keys=("dept",),
        key_set=KeySet.from_values("dept", [0, 1, 2]),
        max_rows=None,
        max_groups=None,
        max_rows_per_group=None,
        salt=123456789,
        values=(ValueSpec("salary", 0.0, 100.0, -6),),
        outputs=OUTPUTS,
        bins=None,
    )
    base.update(kw)
    return BoundedPlan(**base)


BOUNDS = [
    {"max_rows": 3},
    {"max_groups": 1, "max_rows_per_group": 2},
    {"max_rows": 4, "max_groups": 2, "max_rows_per_group": 3},
]


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])  # pandas is the reference
@pytest.mark.parametrize("heavy_units", [0, 5, 400])  # no candidate, an IN list, a joined table
@pytest.mark.parametrize("bounds", BOUNDS)
def test_candidates_give_the_reference_result(
    make: Make, engine_name: str, heavy_units: int, bounds: dict[str, int]
) -> None:
    df = table(heavy_units)
    plan = plan_of(**bounds)
    engine = make(df)
    candidates = engine._candidates(plan)  # type: ignore[attr-defined]
    assert candidates is not None  # the pre-count applies to this integer unit
    heavy = exact_heavy(df["user"].to_numpy(), candidate_threshold(plan) or 0)
    assert set(heavy.tolist()) <= set(candidates.tolist())
    expected = result_dict(PandasEngine(df).run(plan), plan)
    assert result_dict(engine.run(plan), plan) == expected
    if engine_name == "duckdb":
        assert unrestricted(engine, plan) == expected


def unrestricted(engine: Any, plan: BoundedPlan) -> dict[tuple[Any, ...], list[int]]:
    """The engine's result with the exact per-unit check over every unit (no pre-count)."""
    original = type(engine)._candidates
    try:
        type(engine)._candidates = lambda self, plan: None
        return result_dict(engine.run(plan), plan)
    finally:
        type(engine)._candidates = original


def test_candidates_with_steps_nulls_and_arrow_source() -> None:
    """Filters only remove rows, so counts before them bound the counts after them; NULL
    units are skipped; an Arrow source is counted without DuckDB reading it, a pandas one
    through DuckDB. Same result as the unrestricted query of the same engine."""
    df = table(40, seed=3)
    user = pd.array(df["user"], dtype="Int64")
    user[::9] = pd.NA
    arrow = pa.Table.from_pandas(df.assign(user=user), preserve_index=False)
    steps = (Step("filter", expr=col("salary") > 20), Step("derive", expr=col("dept"), name="d2"))
    for bounds in BOUNDS:
        plan = plan_of(steps=steps, **bounds)
        for source in (arrow, df):
            engine = DuckDBEngine(source)
            assert engine._candidates(plan) is not None
            assert result_dict(engine.run(plan), plan) == unrestricted(engine, plan)


def test_no_candidate_means_no_per_unit_work() -> None:
    df = table(0)
    engine = DuckDBEngine(pa.Table.from_pandas(df, preserve_index=False))
    plan = plan_of(max_rows=3)
    candidates = engine._candidates(plan)
    assert candidates is not None and candidates.size == 0
    from sqlglot import exp

    sql = engine.sql(plan, exp.false())
    assert "ROW_NUMBER" not in sql.upper() and "MD5" not in sql.upper()


def test_a_derived_unit_or_a_text_unit_is_not_precounted() -> None:
    df = table(5)
    derived = plan_of(max_rows=3, steps=(Step("derive", expr=col("user") + 1, name="user"),))
    assert DuckDBEngine(df)._candidates(derived) is None
    text = df.assign(user=df["user"].astype(str))
    assert DuckDBEngine(text)._candidates(plan_of(max_rows=3)) is None


@pytest.mark.parametrize("bounds", BOUNDS)
def test_a_candidate_set_missing_a_heavy_unit_fails(
    monkeypatch: pytest.MonkeyPatch, bounds: dict[str, int]
) -> None:
    """Mutant: leave one heavy unit out of the candidates; the result must then differ from
    the reference (so the equivalence tests above would catch a wrong candidate set)."""
    df = table(5)
    plan = plan_of(**bounds)
    expected = result_dict(PandasEngine(df).run(plan), plan)
    real = _heavy.heavy_candidates

    def broken(*args: Any) -> Any:
        return real(*args)[:0]  # no candidate at all

    monkeypatch.setattr("dpkit.analytics._engines._duckdb.heavy_candidates", broken)
    assert result_dict(DuckDBEngine(df).run(plan), plan) != expected
