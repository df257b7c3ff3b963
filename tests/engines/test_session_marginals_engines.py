"""Session marginals(...) and ranges(...) on pandas, DuckDB and Spark: identical exact histograms.

The compiled query (one salt, so one choice of kept rows) runs its bounded plans on each engine;
the pre-noise data vector must be identical, and equal to a numpy reference computed from the
rows each unit keeps. Small tables: the Spark part stays in seconds on the shared session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

import dpkit as dp
from dpkit.analytics import Session, marginals, ranges
from dpkit.analytics._engines import Engine
from dpkit.analytics._planner import _rows_by_group
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner.families._marginals import plan_marginals, plan_ranges

DOMAINS = {"age": ["young", "mid", "old"], "sex": ["f", "m"], "n": [0, 1, 2, 3]}


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(7)  # test data only (never noise)
    rows = 400
    df = pd.DataFrame(
        {
            "uid": rng.integers(0, 60, rows),
            "age": rng.choice(["young", "mid", "old", "other"], rows),
            "sex": rng.choice(["f", "m"], rows),
            "n": rng.integers(0, 5, rows).astype(float),  # 4 is outside the domain
            "score": rng.integers(-2, 12, rows).astype(float),  # range domain is 0..9
        }
    )
    df.loc[::17, "sex"] = None
    df.loc[::23, "n"] = np.nan
    return df


def _reference(df: pd.DataFrame) -> np.ndarray:
    """The histogram without bounding (max_rows is large enough to keep every row)."""
    x = np.zeros((3, 2, 4), dtype=np.int64)
    for _, row in df.iterrows():
        try:
            i = DOMAINS["age"].index(row["age"])
            j = DOMAINS["sex"].index(row["sex"])
            k = DOMAINS["n"].index(row["n"])
        except ValueError:
            continue
        x[i, j, k] += 1
    return x.reshape(-1)


def _exact(engine: Engine, plans: Any, histogram: Callable[[Any], np.ndarray]) -> np.ndarray:
    table = engine.run(plans[1])
    return histogram(_rows_by_group(table, plans[1])[0])


@pytest.mark.parametrize("max_rows", [1000, 3])
def test_engines_give_identical_exact_histograms(
    make: Callable[..., Engine], engine_name: str, max_rows: int
) -> None:
    df = _table()
    session = Session(df, privacy_unit="uid", budget=dp.ZCDP(1), max_rows=max_rows)
    query = session.query().agg(marginals("all_2way", domains=DOMAINS, name="m"))
    compiled = session.compile(query, rho=0.5)
    agg = query.plan.aggregations[0]  # type: ignore[union-attr]
    plan = plan_marginals(agg, Share("zcdp", compiled.loss.rho), max_rows)  # type: ignore[union-attr]
    x_engine = _exact(make(df), compiled.plans, plan.histogram)
    x_duck = _exact(session.engine, compiled.plans, plan.histogram)
    assert np.array_equal(x_engine, x_duck)
    if max_rows == 1000:
        assert np.array_equal(x_engine, _reference(df))
    else:
        # bounded: every unit keeps at most 3 in-domain rows
        assert x_engine.sum() <= 3 * df["uid"].nunique()
        assert x_engine.sum() < _reference(df).sum()


def test_engines_give_identical_range_histograms(
    make: Callable[..., Engine], engine_name: str
) -> None:
    df = _table()
    session = Session(df, privacy_unit="uid", budget=dp.PureDP(1), max_rows=4)
    query = session.query().agg(ranges("score", (0, 9, 1), kind="all_range", name="r"))
    compiled = session.compile(query, epsilon=1)
    agg = query.plan.aggregations[0]  # type: ignore[union-attr]
    plan = plan_ranges(agg, Share("pure", compiled.loss.epsilon), 4)  # type: ignore[union-attr]
    x_engine = _exact(make(df), compiled.plans, plan.histogram)
    assert np.array_equal(x_engine, _exact(session.engine, compiled.plans, plan.histogram))
    assert 0 < x_engine.sum() <= 4 * df["uid"].nunique()


def test_release_on_every_engine(engine_name: str, request: pytest.FixtureRequest) -> None:
    df = _table()
    spark = request.getfixturevalue("spark") if engine_name == "spark" else None
    source: Any = spark.createDataFrame(df) if spark is not None else df
    session = Session(
        source, privacy_unit="uid", budget=dp.ZCDP(1), max_rows=5, engine=engine_name, spark=spark
    )
    query = session.query().agg(marginals([("age", "sex"), ("n",)], domains=DOMAINS, name="m"))
    release = session.evaluate(query, rho=0.5)
    table = release.tables["m"]
    assert len(table) == 3 * 2 + 4
    assert list(table.columns) == [
        "marginal",
        "age",
        "sex",
        "n",
        "value",
        "std_error",
        "low",
        "high",
    ]
    assert (table["low"] <= table["value"]).all() and (table["value"] <= table["high"]).all()
    spent = session.spent
    assert isinstance(spent, dp.ZCDP) and 0 < spent.rho <= 0.5


def test_temporal_and_bool_domains(make: Callable[..., Engine], engine_name: str) -> None:
    import datetime as dt

    days = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
    df = pd.DataFrame(
        {
            "uid": list(range(40)),
            "day": pd.to_datetime([days[i % 4] for i in range(40)]),  # 2024-01-04 undeclared
            "ok": [i % 3 == 0 for i in range(40)],
        }
    )
    domains = {
        "day": [dt.date(2024, 1, 1), "2024-01-02", dt.datetime(2024, 1, 3)],
        "ok": [True, False],
    }
    session = Session(df, privacy_unit="uid", budget=dp.ZCDP(1), max_rows=1)
    query = session.query().agg(marginals("all_2way", domains=domains, name="m"))
    compiled = session.compile(query, rho=0.5)
    from dpkit.analytics._planner._validate import validate

    # the domains normalised to the column kinds, as the compiled plan has them
    agg = validate(query, session.schema, "uid").aggregate.aggregations[0]
    plan = plan_marginals(agg, Share("zcdp", compiled.loss.rho), 1)  # type: ignore[arg-type,union-attr]
    x = _exact(make(df), compiled.plans, plan.histogram)
    expected = np.zeros((3, 2), dtype=np.int64)
    for i in range(40):
        if i % 4 < 3:
            expected[i % 4, 0 if i % 3 == 0 else 1] += 1
    assert np.array_equal(x, expected.reshape(-1))
