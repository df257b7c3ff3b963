"""Regression (edges review, issue 8 §1): Session queries fail alike on neighbouring tables, on
every engine, with extreme values, nanosecond times, NaN and off-grid floats."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpkit as dp
from dpkit.analytics import Session, col, count, mean, quantile
from dpkit.analytics import sum as dp_sum
from dpkit.testing import add_one_unit, check_failure_behaviour, check_session_failures

BASE = pd.Timestamp("2024-01-01 00:00:00")


def ns_times(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"u": range(n), "t": pd.Series([BASE] * n, dtype="datetime64[ns]"), "x": 1.0}
    )


def engine_session_pairs(
    pairs: list[tuple[Any, Any]], build: Any, engine: str, **evaluate: Any
) -> Any:
    return check_session_failures(
        pairs,
        build,
        privacy_unit="u",
        budget=dp.ApproxDP(100, 0.5),
        session_options={"max_rows": 1, "engine": engine},
        **evaluate,
    )


@pytest.mark.parametrize("engine", ["duckdb", "pandas", "spark"])
def test_private_group_by_on_nanosecond_keys(engine: str, request: pytest.FixtureRequest) -> None:
    """A unit whose only row was 1 ns from an existing key made DuckDB return two groups that
    the release saw as one: PrivacyCheckError on one table, a release on its neighbour."""
    if engine == "spark":
        request.getfixturevalue("spark")
    base = ns_times(300)
    pair = add_one_unit(base, "u", [{"t": BASE + pd.Timedelta(1, "ns"), "x": 1.0}])
    result = engine_session_pairs(
        [pair], lambda s: s.query().group_by("t").agg(count()), engine, epsilon=1, delta=1e-3
    )
    result.raise_if_failed()
    assert result.released_pairs == 1


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
@pytest.mark.parametrize(
    # (a time64 key is refused now, alike on every engine: test_kinds.py::
    # test_times_of_day_and_durations_are_refused_as_keys_on_every_engine)
    "arrow_type",
    [pa.timestamp("ns"), pa.timestamp("ns", tz="Europe/Paris")],
)
def test_arrow_nanosecond_keys(engine: str, arrow_type: Any) -> None:
    n = 300
    small = pa.table({"u": pa.array(range(n)), "t": pa.array([0] * n, arrow_type)})
    big = pa.table({"u": pa.array(range(n + 1)), "t": pa.array([0] * n + [1], arrow_type)})
    result = engine_session_pairs(
        [(small, big)],
        lambda s: s.query().group_by("t").agg(count()),
        engine,
        epsilon=1,
        delta=1e-3,
    )
    result.raise_if_failed()
    assert result.released_pairs == 1


@pytest.mark.parametrize("engine", ["duckdb", "pandas", "spark"])
def test_numeric_aggregates_with_one_extreme_unit(
    engine: str, request: pytest.FixtureRequest
) -> None:
    if engine == "spark":
        request.getfixturevalue("spark")
    base = pd.DataFrame({"u": range(40), "x": np.linspace(0, 10, 40)})
    extremes = [math.nan, math.inf, -math.inf, 1e308, -1e308, 2.0**62, 3.3, -0.0]
    pairs = [add_one_unit(base, "u", [{"x": value}]) for value in extremes]
    queries = [
        lambda s: s.query().agg(count(), dp_sum("x", (0, 10)), mean("x", (0, 10))),
        lambda s: s.query().agg(quantile("x", 0.5, (0, 10))),
    ]
    for build in queries:
        result = engine_session_pairs(pairs, build, engine, epsilon=1)
        result.raise_if_failed()
        assert result.released_pairs == len(pairs)


def test_the_session_check_flags_a_data_dependent_failure() -> None:
    """The check can fail: a wrapper that refuses tables with a value above 100 is flagged."""
    base = pd.DataFrame({"u": range(10), "x": 1.0})
    pair = add_one_unit(base, "u", [{"x": 1e6}])

    def fragile(frame: pd.DataFrame) -> Any:
        if (frame["x"] > 100).any():
            raise dp.DPError("a value is too large")
        session = Session(frame, "u", dp.PureDP(1), max_rows=1)
        return session.evaluate(session.query().agg(count()), epsilon=1)

    assert not check_failure_behaviour(fragile, [pair]).passed


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_parquet_nanosecond_keys_are_floored_like_every_other_source(
    engine: str, tmp_path: Any
) -> None:
    """Parquet sources reach DuckDB through a view that floors nanosecond values (DuckDB's own
    cast rounds). Neighbours 1 ns apart release alike, and a value 999 ns after a microsecond
    belongs to that microsecond in every engine: rounding would move it to the next one."""
    import datetime as dt

    import pyarrow.parquet as pq

    n = 300
    base = pa.table({"u": pa.array(range(n)), "t": pa.array([999] * n, pa.timestamp("ns"))})
    bigger = pa.table(
        {"u": pa.array(range(n + 1)), "t": pa.array([999] * n + [1000], pa.timestamp("ns"))}
    )
    paths = []
    for name, table in (("small", base), ("big", bigger)):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    result = engine_session_pairs(
        [(paths[0], paths[1])],
        lambda s: s.query().group_by("t").agg(count()),
        engine,
        epsilon=1,
        delta=1e-3,
    )
    result.raise_if_failed()
    assert result.released_pairs == 1
    session = Session(paths[0], "u", dp.PureDP(100), max_rows=1, engine=engine)
    one_microsecond = dt.datetime(1970, 1, 1, 0, 0, 0, 1)
    release = session.evaluate(
        session.query().filter(col("t") < one_microsecond).agg(count()), epsilon=20
    )
    assert abs(release.table["count"][0] - n) <= 5  # floored to 0 µs, so all are < 1 µs


def test_arrow_and_pandas_floor_nanoseconds_alike_before_1970() -> None:
    """Arrow sources and pandas sources floor (toward −∞, not toward 0), so a pre-1970 key is
    the same microsecond whichever source carried it."""
    from dpkit.analytics._engines._columns import floor_arrow_temporal, prepare_pandas

    ns = [-1001, -1000, -999, -1, 0, 1, 999, 1000]
    arrow = floor_arrow_temporal(pa.table({"t": pa.array(ns, pa.timestamp("ns"))}))
    frame = prepare_pandas(
        pd.DataFrame({"t": pd.Series(pd.to_datetime(ns, unit="ns"), dtype="datetime64[ns]")}),
        {"t": "temporal"},
    )
    expected = [-2, -1, -1, -1, 0, 0, 0, 1]  # floor(ns / 1000)
    assert arrow["t"].cast(pa.int64()).to_pylist() == expected
    assert frame["t"].astype("int64").tolist() == expected
