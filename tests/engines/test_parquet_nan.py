"""NaN in a Parquet file is NULL on DuckDB too. DuckDB's statistics propagation folded
``isnan(x)`` to false over a Parquet column (its statistics leave NaN out), so a NaN reached
the grid cast and failed the query after the reservation: an error that depended on the data
(dpkit turns the optimisation off on its connections)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpkit as dp
from dpkit.analytics import Session, count
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._planner import compile_query
from dpkit.analytics._query import Bounding


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_a_parquet_nan_is_skipped_not_an_error(engine: str, tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    values = pa.array([float("nan"), 5.0, 7.0, 1.0])
    pq.write_table(pa.table({"u": [1, 2, 3, 4], "x": values}), path)
    session = Session(str(path), "u", dp.PureDP(10), engine=engine, max_rows=1)
    try:
        query = session.query().agg(dp_sum("x", bounds=(0, 10)), count())
        compiled = compile_query(
            query, session.schema, "u", dp.PureDP(1), defaults=Bounding(max_rows=1), salt=1
        )
        rows, total = session.engine.run(compiled.plans[0]).to_pandas().values.tolist()[0]
        assert int(rows) == 4
        assert int(total) == 13 * 2 ** int(-compiled.plans[0].values[0].exponent)
        session.evaluate(query, epsilon=1)  # released, not a charged failure
    finally:
        session.close()


def _exact_sum_and_count(session: Session, query: object) -> tuple[int, int, int]:
    compiled = compile_query(
        query, session.schema, "u", dp.PureDP(1), defaults=Bounding(max_rows=1), salt=1
    )
    rows, total = session.engine.run(compiled.plans[0]).to_pandas().values.tolist()[0]
    return int(rows), int(total), int(-compiled.plans[0].values[0].exponent)


@pytest.mark.parametrize("engine", ["pandas", "duckdb", "spark"])
def test_a_nan_in_a_pandas_dictionary_of_floats_is_null(
    engine: str, request: pytest.FixtureRequest
) -> None:
    """A pandas column of Arrow dictionary<float> is no float dtype to pandas, but DuckDB reads
    its NaN: the NaN is NULL in a sum (not clamped to the upper bound) and fails a filter."""
    import pandas as pd

    if engine == "spark":
        request.getfixturevalue("spark")
    values = pa.array([1.0, float("nan"), 2.0, 3.0]).dictionary_encode()
    frame = pd.DataFrame(
        {"u": [1, 2, 3, 4], "x": pd.Series(pd.array(values, dtype=pd.ArrowDtype(values.type)))}
    )
    session = Session(frame, "u", dp.PureDP(10), engine=engine, max_rows=1)
    try:
        rows, total, exponent = _exact_sum_and_count(
            session, session.query().agg(count(), dp_sum("x", bounds=(0, 10)))
        )
        assert (rows, total) == (4, 6 * 2**exponent)
        filtered = session.query().filter(dp.analytics.col("x") > 0.5)
        rows, total, exponent = _exact_sum_and_count(
            session, filtered.agg(count(), dp_sum("x", bounds=(0, 10)))
        )
        assert (rows, total) == (3, 6 * 2**exponent)
    finally:
        session.close()


def test_a_file_whose_column_types_changed_is_refused(tmp_path: Path) -> None:
    """NaN tests are left out for columns stored as integers: a file rewritten with a float
    column in their place (a NaN in it) is refused, never read on the old types."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"u": [1, 2, 3, 4], "x": pa.array([1, 2, 3, 4], pa.int64())}), path)
    session = Session(str(path), "u", dp.PureDP(10), engine="duckdb", max_rows=1)
    try:
        query = session.query().agg(count(), dp_sum("x", bounds=(0, 10)))
        rows, total, exponent = _exact_sum_and_count(session, query)
        assert (rows, total) == (4, 10 * 2**exponent)
        pq.write_table(pa.table({"u": [1, 2, 3, 4], "x": [1.0, float("nan"), 2.0, 3.0]}), path)
        with pytest.raises(dp.errors.InvalidDataError, match="changed its columns"):
            _exact_sum_and_count(session, query)
        # rewritten with the session's types again: read as it is now
        pq.write_table(pa.table({"u": [1, 2, 3], "x": pa.array([5, 6, 7], pa.int64())}), path)
        rows, total, exponent = _exact_sum_and_count(session, query)
        assert (rows, total) == (3, 18 * 2**exponent)
    finally:
        session.close()


def test_a_file_within_its_bounds_is_counted_once_per_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once no unit of a Parquet file was found over a bound, later queries with that bound are
    answered in one pass without looking again, for that version of the file: a rewritten file
    with a unit over the bound is looked at again and bounded (a fresh session's answer)."""
    from dpkit.analytics._engines._duckdb import DuckDBEngine

    searched: list[int] = []
    original = DuckDBEngine._candidates_from_sql

    def spy(self: DuckDBEngine, unit: str, threshold: int) -> object:
        searched.append(threshold)
        return original(self, unit, threshold)

    monkeypatch.setattr(DuckDBEngine, "_candidates_from_sql", spy)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"u": [1, 1, 2, 3], "x": [1.0, 2.0, 3.0, 4.0]}), path)

    def exact(session: Session, bound: int = 2) -> tuple[int, int]:
        query = session.query().agg(count(), dp_sum("x", bounds=(0, 10)))
        compiled = compile_query(
            query, session.schema, "u", dp.PureDP(1), defaults=Bounding(max_rows=bound), salt=7
        )
        rows, total = session.engine.run(compiled.plans[0]).to_pandas().values.tolist()[0]
        return int(rows), int(total) // 2 ** int(-compiled.plans[0].values[0].exponent)

    session = Session(str(path), "u", dp.PureDP(10), engine="duckdb", max_rows=2)
    try:
        assert exact(session) == exact(session) == (4, 10)
        assert searched == [2]  # looked for once: no unit over 2 rows in this version
        assert exact(session, 1)[0] == 3  # a smaller bound is looked for, and unit 1 bounded
        assert searched == [2, 1]
        searched.clear()
        pq.write_table(pa.table({"u": [1, 1, 1, 1, 2], "x": [1.0, 2.0, 3.0, 4.0, 5.0]}), path)
        stale = exact(session)
        assert searched == [2]  # a new version: looked for again, and unit 1 is over it
    finally:
        session.close()
    fresh = Session(str(path), "u", dp.PureDP(10), engine="pandas", max_rows=2)
    try:
        assert stale == exact(fresh) and stale[0] == 3  # unit 1 keeps 2 of its 4 rows
    finally:
        fresh.close()
