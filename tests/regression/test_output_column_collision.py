"""Regression (review finding 2): a group-by column named like an internal output column
(``o0``, ``o1``..., ``bin``) was confused with the engine's exact aggregates.

Engines returned ``keys..., [bin], o0, o1, ...`` under the keys' own names; CompiledQuery.release
read keys by position but outputs by the name pattern ``o<digits>``, and ``pa.Table.to_pydict``
keeps only one column per name. With private keys the released *group label* became the exact
(noise-free) count of distinct units of the group. Fixed: engines return every result column
under a reserved name (``__dpkit_k0``, ``__dpkit_bin``, ``__dpkit_o0``...;
BoundedPlan.result_columns), release() reads them by those names and checks the engine returned
exactly them, and user columns with the reserved prefix are refused. Released tables whose
columns would clash (a key called ``count_low`` next to ``count()``, a histogram named ``main``)
are refused when the query is built.
"""

from __future__ import annotations

import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, col, count, histogram, mean
from dpkit.errors import InvalidParameterError


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_private_keys_named_o1_release_exact_counts_as_labels(engine: str) -> None:
    df = pd.DataFrame({"u": range(937), "o1": [5] * 500 + [7] * 437})
    session = Session(df, privacy_unit="u", budget=dp.ApproxDP(10, 1e-3), max_rows=1, engine=engine)
    release = session.evaluate(session.query().group_by("o1").agg(count()), epsilon=1, delta=1e-6)
    labels = set(release.table["o1"].tolist())
    assert labels <= {5, 7}, (
        f"released group labels {sorted(labels)} are not key values; 500 and 437 are the exact "
        "distinct-unit counts of the two groups"
    )


def test_public_key_named_bin_silently_zeroes_a_histogram() -> None:
    df = pd.DataFrame(
        {
            "u": range(400),
            "bin": ["x"] * 200 + ["y"] * 200,
            "v": [1.0] * 100 + [7.0] * 100 + [1.0] * 100 + [7.0] * 100,
        }
    )
    session = Session(df, privacy_unit="u", budget=dp.PureDP(100), max_rows=1)
    release = session.evaluate(
        session.query().group_by("bin", keys=["x", "y"]).agg(histogram("v", [0, 5, 10])),
        epsilon=20,
    )
    counts = release["hist_v"]["count"].tolist()
    assert all(abs(c - 100) <= 5 for c in counts), f"each cell holds 100 rows; released {counts}"


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_every_internal_name_as_a_key(engine: str) -> None:
    names = ["o0", "o1", "bin", "__o0", "__k0", "__u", "__n", "__b"]
    df = pd.DataFrame({"u": range(300), **{n: [1, 2, 3] * 100 for n in names}})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(100), max_rows=1, engine=engine)
    query = session.query().group_by(*names, keys=[tuple([k] * len(names)) for k in (1, 2, 3)])
    release = session.evaluate(query.agg(count()), epsilon=50)
    for name in names:
        assert release.table[name].tolist() == [1, 2, 3]
    assert all(abs(c - 100) <= 3 for c in release.table["count"])


def test_reserved_prefix_is_refused_before_anything_is_charged() -> None:
    df = pd.DataFrame({"u": range(10), "__dpkit_o0": [1] * 10, "v": [1.0] * 10})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(1), max_rows=1)
    for query in (
        session.query().group_by("__dpkit_o0", keys=[1]).agg(count()),
        session.query().with_column("__dpkit_k0", col("v")).agg(count()),
        session.query().filter(col("__dpkit_o0") > 0).agg(count()),
    ):
        with pytest.raises(InvalidParameterError, match="reserved"):
            session.evaluate(query, epsilon=0.5)
    assert session.spent == dp.PureDP(0)


def test_clashing_released_columns_are_refused() -> None:
    df = pd.DataFrame({"u": range(10), "count_low": ["a", "b"] * 5, "v": [1.0] * 10})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(1), max_rows=1)
    grouped = session.query().group_by("count_low", keys=["a", "b"])
    with pytest.raises(InvalidParameterError, match="count_low"):
        grouped.agg(count())
    with pytest.raises(InvalidParameterError, match="count_low"):
        grouped.agg(histogram("v", [0, 1, 2]))
    with pytest.raises(InvalidParameterError, match="main"):
        session.query().agg(histogram("v", [0, 1, 2], name="main"))
    with pytest.raises(InvalidParameterError, match="mean_v_low"):
        session.query().agg(mean("v", (0, 1)), count(name="mean_v_low"))
