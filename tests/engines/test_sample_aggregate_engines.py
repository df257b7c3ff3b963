"""Session.sample_and_aggregate on Spark (applyInPandas), beside DuckDB and pandas: the same
partition property (each unit in one block) and the same public default for failing blocks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.testing import add_one_unit, check_failure_behaviour

ENGINES = ["pandas", "duckdb", "spark"]


def _session(df: pd.DataFrame, engine_name: str, request: pytest.FixtureRequest) -> Session:
    spark = request.getfixturevalue("spark") if engine_name == "spark" else None
    return Session(df, privacy_unit="user", budget=dp.PureDP(100), engine=engine_name, spark=spark)


@pytest.mark.parametrize("engine_name", ENGINES)
def test_each_unit_in_one_block(
    engine_name: str, request: pytest.FixtureRequest, seeded: None
) -> None:
    df = pd.DataFrame({"user": np.repeat(np.arange(30), 2), "x": np.arange(60.0)})

    def units(rows: pd.DataFrame) -> np.ndarray:
        # per block: how many units, and whether every unit has both its rows here
        ids = rows["user"].to_numpy()
        counts = np.bincount(ids.astype(np.int64), minlength=30)
        return np.array([len(set(ids.tolist())), float(np.all(counts[counts > 0] == 2))])

    session = _session(df, engine_name, request)
    release = session.sample_and_aggregate(
        units,
        columns=["user"],
        output_shape=2,
        output_range=(0, 30),
        n_range=(30, 30),
        m=3,
        epsilon=100,
        aggregator="inverse_median",
        names=["units", "whole"],
    )
    assert release.table["whole"][0] > 0.5  # every block holds whole units
    assert 3 <= release.table["units"][0] <= 20


@pytest.mark.parametrize(
    "engine_name", ["pandas", "duckdb", pytest.param("spark", marks=pytest.mark.slow)]
)
def test_failing_unit_does_not_change_the_outcome(
    engine_name: str, request: pytest.FixtureRequest
) -> None:
    base = pd.DataFrame({"user": np.arange(12), "x": np.ones(12)})
    pairs = [add_one_unit(base, "user", [{"x": v}]) for v in (-1.0, float("nan"), 1e308)]

    def fragile(rows: pd.DataFrame) -> Any:
        x = rows["x"].to_numpy()
        if (x < 0).any():
            raise ValueError("marked")
        if (x > 1e300).any():
            return np.zeros(3)  # wrong shape
        return float(np.mean(x)) if len(x) else 0.0

    def run(df: pd.DataFrame) -> Any:
        session = _session(df, engine_name, request)
        try:
            return session.sample_and_aggregate(
                fragile, columns=["x"], output_range=(0, 2), n_range=(12, 13), m=3, epsilon=1
            )
        finally:
            session.close()

    result = check_failure_behaviour(run, pairs)
    assert result.passed and result.released_pairs == len(pairs)
