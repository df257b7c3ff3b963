"""One engine suite, run identically on pandas (the reference), DuckDB and Spark.

Before noise, every engine's aggregates equal a plain pandas computation on the bounded data
(when no unit exceeds a bound), and equal the reference engine's exactly when bounding drops rows.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from _engine_oracle import plain, result_dict

import dpkit as dp
from dpkit.analytics import Session, col, count, count_distinct_units, histogram, mean, median
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._engines import (
    BinSpec,
    BoundedPlan,
    Engine,
    Output,
    PandasEngine,
    Step,
    ValueSpec,
)
from dpkit.analytics._query import KeySet
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed

Make = Callable[[Any], Engine]

ALL_OUTPUTS = (
    Output("rows"),
    Output("units"),
    Output("nonnull", 0),
    Output("sum", 0),
    Output("sumsq", 0),
)


def table(n: int = 300, units: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "user": rng.integers(0, units, n),
            "dept": rng.choice(["R&D", "Sales", "O'Brien \\ co"], n),
            "level": rng.integers(1, 4, n),
            "salary": rng.normal(50.0, 30.0, n),
        }
    )
    df.loc[::17, "salary"] = np.nan
    return df


def plan_of(**kw: Any) -> BoundedPlan:
    base: dict[str, Any] = dict(
        steps=(),
        unit="user",
        keys=("dept",),
        key_set=None,
        max_rows=None,
        max_groups=None,
        max_rows_per_group=None,
        salt=987654321,
        values=(ValueSpec("salary", 0.0, 100.0, -6),),
        outputs=ALL_OUTPUTS,
        bins=None,
    )
    base.update(kw)
    return BoundedPlan(**base)


def test_no_truncation_equals_plain_pandas(make: Make) -> None:
    df = table()
    plan = plan_of(max_rows=10_000)
    got = result_dict(make(df).run(plan), plan)
    assert got == plain(df, plan)


@pytest.mark.parametrize("lower", [0.0, -1.0])
def test_values_on_half_grid_points_round_half_up(make: Make, lower: float) -> None:
    """Each value's grid integer is its scaled value rounded half up, on every engine. With the
    grid 1/4, 0.125 and 0.625 scale to 0.5 and 2.5: half up gives 1 and 3, half to even (a
    DuckDB cast) 0 and 2; the largest double below a half must go down, and a bin of the grid
    holds the same integers. A bound that is not negative takes DuckDB's ROUND, a negative one
    the FLOOR form: both are checked."""
    below_half = 0.49999999999999994 / 4
    values = [0.125, 0.375, 0.625, 0.875, below_half, 2.5 - 1 / 8, 1e-300, -0.0, 7.125, 10.0]
    df = pd.DataFrame({"user": range(len(values)), "dept": "a", "salary": values})
    plan = plan_of(
        keys=(),
        max_rows=10_000,
        values=(ValueSpec("salary", lower, 10.0, -2),),
        outputs=(Output("sum", 0), Output("sumsq", 0)),
    )
    got = result_dict(make(df).run(plan), plan)
    assert got == plain(df, plan)
    scaled = [round_half_up(v * 4) for v in values]
    assert got == {(): [sum(scaled), sum(i * i for i in scaled)]}
    binned = plan_of(
        keys=(),
        max_rows=10_000,
        values=(ValueSpec("salary", lower, 10.0, -2),),
        outputs=(Output("rows"),),
        bins=BinSpec("grid", value=0),
    )
    bins = result_dict(make(df).run(binned), binned)
    assert bins == {(b,): [scaled.count(b)] for b in set(scaled)}


def round_half_up(x: float) -> int:
    return math.floor(x) + (1 if x - math.floor(x) >= 0.5 else 0)


def test_public_keys_drop_other_keys(make: Make) -> None:
    df = table()
    plan = plan_of(max_rows=10_000, key_set=KeySet.from_values("dept", ["Sales", "nope"]))
    got = result_dict(make(df).run(plan), plan)
    assert set(got) == {("Sales",)}
    assert got == plain(df, plan)


@pytest.mark.parametrize("column", ["level", "grade"])
def test_consecutive_integer_keys(make: Make, column: str) -> None:
    """A run of integer keys compiles to a range test; fractional values must still miss."""
    df = table()
    df["grade"] = np.where(np.arange(len(df)) % 3 == 0, df["level"] + 0.5, df["level"] * 1.0)
    df.loc[::13, "grade"] = np.nan
    plan = plan_of(keys=(column,), key_set=KeySet.from_values(column, [1, 2, 3]), max_rows=10_000)
    got = result_dict(make(df).run(plan), plan)
    assert got == plain(df, plan)
    assert set(got) == {(1,), (2,), (3,)}


def test_multi_column_public_keys(make: Make) -> None:
    df = table()
    keys = KeySet.from_dict({"dept": ["R&D", "Sales"], "level": [1, 3]})
    plan = plan_of(keys=("dept", "level"), key_set=keys, max_rows=10_000)
    got = result_dict(make(df).run(plan), plan)
    assert got == plain(df, plan)


@pytest.mark.parametrize("max_rows", [10_000, 2])
def test_multi_column_key_tuples(make: Make, max_rows: int) -> None:
    """Declared tuples that are no product of per-column values: the rows of other tuples
    (("R&D", 3), ("Sales", 1), ...) are left out, whether no unit exceeds a bound (the set is
    then applied to the groups) or some do (then to the rows, before the cut)."""
    df = table()
    keys = KeySet.from_tuples(("dept", "level"), [("R&D", 1), ("Sales", 3), ("Sales", 9)])
    plan = plan_of(keys=("dept", "level"), key_set=keys, max_rows=max_rows)
    got = result_dict(make(df).run(plan), plan)
    assert set(got) == {("R&D", 1), ("Sales", 3)}
    assert got == result_dict(PandasEngine(df).run(plan), plan)
    if max_rows > 100:
        assert got == plain(df, plan)


@pytest.mark.parametrize(
    "bounds",
    [
        {"max_rows": 3},
        {"max_groups": 1, "max_rows_per_group": 2},
        {"max_rows": 4, "max_groups": 2, "max_rows_per_group": 3},
    ],
)
def test_truncation_equals_reference(make: Make, bounds: dict[str, int]) -> None:
    df = table()
    plan = plan_of(**bounds)
    expected = result_dict(PandasEngine(df).run(plan), plan)
    got = result_dict(make(df).run(plan), plan)
    assert got == expected
    rows = sum(v[0] for v in got.values())
    assert rows <= 40 * bounds.get("max_rows", 10**9)
    if "max_groups" in bounds and "max_rows" not in bounds:
        assert rows <= 40 * bounds["max_groups"] * bounds["max_rows_per_group"]


def test_global_aggregate_and_empty_table(make: Make) -> None:
    df = table()
    plan = plan_of(keys=(), max_rows=2)
    got = result_dict(make(df).run(plan), plan)
    assert got == result_dict(PandasEngine(df).run(plan), plan)
    empty = df.iloc[:0]
    got_empty = result_dict(make(empty).run(plan), plan)
    assert got_empty in ({(): [0, 0, 0, 0, 0]}, {})


def test_steps_with_null_semantics(make: Make) -> None:
    df = table()
    df["bonus"] = np.where(np.arange(len(df)) % 5 == 0, np.nan, np.arange(len(df)) % 7)
    steps = (
        Step("derive", expr=col("salary") / col("bonus"), name="ratio"),
        Step("derive", expr=(col("bonus") * 2 - 1).abs().fill_null(-3.5), name="b2"),
        Step("filter", expr=(col("bonus") != 3) | col("dept").is_in(["Sales", None])),
        Step("filter", expr=~(col("ratio") > 40) & col("b2").between(-4, 12)),
        Step("derive", expr=col("dept").lower(), name="dept"),
    )
    plan = plan_of(
        steps=steps,
        max_rows=5,
        values=(ValueSpec("ratio", -10.0, 60.0, -3), ValueSpec("b2", -4.0, 12.0, 0)),
        outputs=(*ALL_OUTPUTS, Output("sum", 1)),
    )
    assert result_dict(make(df).run(plan), plan) == result_dict(PandasEngine(df).run(plan), plan)


def test_values_moved_to_declared_ranges(make: Make) -> None:
    """ValueSpec.allowed: each grid integer goes to the nearest declared one (ties down)."""
    df = table()
    # exact ties between ranges (20 is halfway between 10 and 30; -0.5 between -1 and 0)
    df.loc[:5, "salary"] = [20.0, -0.5, 45.0, 10.0 + 2**-7, 200.0, -7.0]
    allowed = ((-64, -64), (0, 640), (1920, 2560), (3200, 6400))  # units of 2^-6
    values = (ValueSpec("salary", -1.0, 100.0, -6, allowed),)
    plan = plan_of(max_rows=10_000, values=values)
    got = result_dict(make(df).run(plan), plan)
    assert got == plain(df, plan)
    bounded = plan_of(max_rows=2, values=values)
    expected = result_dict(PandasEngine(df).run(bounded), bounded)
    assert result_dict(make(df).run(bounded), bounded) == expected


def test_bins(make: Make) -> None:
    df = table()
    grid = plan_of(max_rows=3, outputs=(Output("rows"),), bins=BinSpec("grid", value=0))
    edges = plan_of(
        max_rows=3,
        values=(),
        outputs=(Output("rows"),),
        bins=BinSpec("edges", column="salary", edges=(0.0, 25.0, 50.0, 100.0)),
    )
    for plan in (grid, edges):
        got = result_dict(make(df).run(plan), plan)
        assert got == result_dict(PandasEngine(df).run(plan), plan)
    assert {key[1] for key in result_dict(make(df).run(edges), edges)} <= {0, 1, 2}


def test_private_keys_with_null_keys_and_units(make: Make) -> None:
    df = table()
    df["dept"] = df["dept"].astype(object)
    df.loc[::7, "dept"] = None
    df["user"] = df["user"].astype("float64")
    df.loc[::11, "user"] = np.nan  # NULL units are dropped
    plan = plan_of(max_groups=2, max_rows_per_group=2)
    got = result_dict(make(df).run(plan), plan)
    assert (None,) in got
    assert got == result_dict(PandasEngine(df).run(plan), plan)


def test_hostile_identifiers_and_values(make: Make) -> None:
    hostile = '"; DROP TABLE x; --'
    tick = "`); DROP TABLE y; --"
    df = pd.DataFrame(
        {
            hostile: [1, 1, 2, 3, 3, 3],
            tick: ["it's", "a\\'b", "it's", '"q"', "it's", "a\\'b"],
            "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        }
    )
    plan = plan_of(
        unit=hostile,
        keys=(tick,),
        key_set=KeySet.from_values(tick, ["it's", "a\\'b", '"q"', "'; DROP TABLE z; --"]),
        max_rows=2,
        values=(ValueSpec("v", 0.0, 10.0, 0),),
    )
    engine = make(df)
    got = result_dict(engine.run(plan), plan)
    assert got == result_dict(PandasEngine(df).run(plan), plan)
    assert set(got) <= {("it's",), ("a\\'b",), ('"q"',)}
    assert engine.run(plan).num_rows == len(got)  # the source is still there


def test_session_release_identical_across_engines(engine_name: str, request: Any) -> None:
    """With the same (insecure, test-only) seed, every engine releases the same numbers."""
    df = table(seed=3)
    spark = request.getfixturevalue("spark") if engine_name == "spark" else None
    query_parts = [
        count(),
        count_distinct_units(),
        dp_sum("salary", (0, 100)),
        mean("salary", (0, 100)),
        median("salary", (0, 100), candidates=64),
        histogram("salary", [0, 50, 100]),
    ]
    releases = []
    for name in ("pandas", engine_name):
        session = Session(
            df, "user", dp.PureDP(10), engine=name, spark=spark if name == "spark" else None
        )
        query = session.query().group_by("dept", keys=["R&D", "Sales"]).bound(max_rows=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureRandomnessWarning)
            with insecure_deterministic_seed(7):
                releases.append(session.evaluate(query.agg(*query_parts), epsilon=2))
        session.close()
    a, b = releases
    pd.testing.assert_frame_equal(a.table, b.table)
    pd.testing.assert_frame_equal(a["hist_salary"], b["hist_salary"])
    assert all(math.isfinite(v) for v in a.table["mean_salary"])
