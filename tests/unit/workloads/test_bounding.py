"""The fast contribution bounding of the workload histograms keeps exactly the rows a single
ROW_NUMBER() window keeps, and a neighbouring table (one unit removed) moves the histogram by at
most max_rows in L1 (a broken bound, keeping one more row, fails that check)."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from dpkit.workloads import histogram_from_duckdb

COLS = {"a": [0, 1, 2], "b": ["x", "y"]}


def _table(con, name, skip_unit=None):
    where = "" if skip_unit is None else f"WHERE u IS DISTINCT FROM {skip_unit}"
    con.execute(
        f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM ("
        "SELECT CASE WHEN i % 17 = 0 THEN NULL ELSE (i * i) % 9 END AS u, i % 3 AS a, "
        "CASE WHEN i % 5 < 2 THEN 'x' ELSE 'y' END AS b FROM range(300) r(i)) "
        f"{where}"
    )


def _window_reference(con, name, k):
    rows = con.execute(
        "SELECT a, b, COUNT(*) FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY u ORDER BY "
        f"hash(__s)) AS rn FROM {name} AS __s) WHERE rn <= {k} GROUP BY ALL"
    ).fetchall()
    out = np.zeros(6, dtype=np.int64)
    for a, b, n in rows:
        out[a * 2 + ["x", "y"].index(b)] = n
    return out


@pytest.mark.parametrize("k", [1, 5, 40, 1000])
def test_matches_single_window(k):
    con = duckdb.connect()
    _table(con, "t")
    hist, c = histogram_from_duckdb(con, "t", COLS, privacy_unit="u", max_rows=k)
    assert c == k
    assert np.array_equal(hist, _window_reference(con, "t", k))


@pytest.mark.parametrize("unit", [0, 4, "NULL"])
def test_neighbour_moves_at_most_max_rows(unit):
    con = duckdb.connect()
    _table(con, "t")
    _table(con, "t2", skip_unit=unit)
    k = 5
    full, _ = histogram_from_duckdb(con, "t", COLS, privacy_unit="u", max_rows=k)
    less, _ = histogram_from_duckdb(con, "t2", COLS, privacy_unit="u", max_rows=k)
    assert 0 < np.abs(full - less).sum() <= k
    # broken bound: keeping k + 1 rows moves the histogram by more than the declared k
    more, _ = histogram_from_duckdb(con, "t", COLS, privacy_unit="u", max_rows=k + 1)
    more_less, _ = histogram_from_duckdb(con, "t2", COLS, privacy_unit="u", max_rows=k + 1)
    assert np.abs(more - more_less).sum() > k
