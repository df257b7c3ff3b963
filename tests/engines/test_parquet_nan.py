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
