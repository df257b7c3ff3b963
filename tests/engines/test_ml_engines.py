"""dpkit.ml on every engine (pandas, DuckDB, Spark): k-means and linear regression fitted on a
Session's columns, every read an aggregate query the engine runs, through the Session's ledger.

Uses the one shared local SparkSession of tests/engines/conftest.py. Sizes are tiny: these
tests check that each engine runs the same queries (assignment to the nearest centre, LSH cells,
lattice cells, sufficient statistics) and gives the same exact aggregates; accuracy is tested on
the pandas engine in tests/unit/ml/test_session.py.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Engine, Session
from dpkit.ml import fit_kmeans, fit_linear_regression

pytestmark = pytest.mark.usefixtures("seeded")


def table() -> pd.DataFrame:
    rng = np.random.default_rng(3)  # test data only
    n = 400
    centres = np.array([[-3.0, -3.0], [3.0, 3.0]])
    points = centres[np.arange(n) % 2] + rng.normal(0, 0.2, (n, 2))
    df = pd.DataFrame({"u": np.arange(n) // 2, "a": points[:, 0], "b": points[:, 1]})
    df["y"] = 1.0 + 0.5 * df["a"] - 0.25 * df["b"]
    # edge values the engines must clamp or map identically (one unit, a handful of rows)
    df.loc[0, "a"] = np.inf
    df.loc[1, "b"] = np.nan
    df.loc[2, "a"] = -1e308
    return df


METHODS = {
    "lloyd": {"max_iter": 1},
    "lsh": {"max_iter": 1, "grid_size": 8},
    "grid_em": {"n_candidates": 64},
}


def fit_on(engine: Engine, method: str) -> None:
    df = table()
    session = Session(df, "u", dp.PureDP(20), engine=engine, max_rows=2)
    model = fit_kmeans(
        session, ["a", "b"], 2, bounds=(-5, 5), epsilon=10, method=method, **METHODS[method]
    )
    found = np.sort(model.cluster_centers_[:, 0])
    tolerance = 0.7 if method == "grid_em" else 0.5  # the lattice's spacing is 1.25
    assert np.allclose(found, [-3, 3], atol=tolerance), model.cluster_centers_
    assert model.privacy_loss_ == dp.PureDP(10)
    assert session.remaining == dp.PureDP(10)
    kinds = [e.kind for e in session.ledger.history(session.dataset) if e.kind != "alert"]
    assert kinds == ["create", "reserve", "commit"]


@pytest.mark.parametrize(
    ("engine_name", "method"),
    [
        (e, m)
        for e in ("pandas", "duckdb", "spark")
        for m in METHODS
        if e != "spark" or m == "lloyd"
    ],
)
def test_kmeans_on_every_engine(make: Callable[..., Engine], engine_name: str, method: str) -> None:
    """Spark's lsh and grid_em fits run in test_kmeans_every_method_on_spark (slow)."""
    fit_on(make(table()), method)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lsh", "grid_em"])
def test_kmeans_every_method_on_spark(spark: Any, method: str) -> None:
    from dpkit.analytics._engines._spark import SparkEngine

    fit_on(SparkEngine(table(), spark=spark), method)


def test_engines_agree_on_the_exact_lloyd_aggregates(make: Callable[..., Engine]) -> None:
    """The engine-side assignment gives the reference engine's exact per-cluster counts."""
    from dpkit.ml._common import check_box
    from dpkit.ml._session import _assignment, _counts_and_sums, _row_map

    df = table()
    session = Session(df, "u", dp.PureDP(1), engine=make(df), max_rows=2)
    base, z = _row_map(session.query(), ["a", "b"], check_box((-5, 5), d=2))
    centres = np.array([[-0.6, -0.6], [0.6, 0.6], [0.9, -0.9]])
    query = _counts_and_sums(
        _assignment(base, z, centres, "__ml_label"), z, "__ml_label", 3, Fraction(1), Fraction(1)
    )
    plan = session.compile(query, epsilon=1).plans[0]
    exact = session.engine.run(plan).to_pydict()
    counts = dict(zip(exact[plan.group_columns[0]], exact[plan.output_columns[0]], strict=True))
    # the reference: the public row map and nearest centre in numpy (first index on ties)
    x = np.nan_to_num(df[["a", "b"]].to_numpy(), nan=0.0)
    scaled = np.clip(x, -5, 5) / 5
    labels = np.argmin(((scaled[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
    expected = np.bincount(labels, minlength=3)
    assert [int(counts.get(j, 0)) for j in range(3)] == expected.tolist()


def test_linear_regression_on_every_engine(make: Callable[..., Engine]) -> None:
    df = table().iloc[3:]
    session = Session(df, "u", dp.PureDP(40), engine=make(df), max_rows=2)
    plans: list[Any] = []
    run = session.engine.run

    def spy(plan: Any) -> Any:
        plans.append(plan)
        return run(plan)

    session.engine.run = spy  # type: ignore[method-assign]
    model = fit_linear_regression(
        session, ["a", "b"], "y", bounds_X=(-5, 5), bounds_y=(-5, 5), epsilon=20
    )
    assert len(plans) == 1  # the sufficient statistics: one engine pass
    # a ≈ b in this table (two clusters on the diagonal): check predictions, not coefficients
    x = np.clip(df[["a", "b"]].to_numpy(), -5, 5)
    assert np.sqrt(np.mean((model.predict(x) - df["y"].to_numpy()) ** 2)) < 0.3
    assert model.privacy_loss_ == dp.PureDP(20)


def _lloyd_aggregates(
    engine: Engine, df: pd.DataFrame, centres: np.ndarray
) -> dict[int, list[int]]:
    """The exact (pre-noise) per-cluster outputs of one Lloyd query, by cluster."""
    from dpkit.ml._common import check_box
    from dpkit.ml._session import _assignment, _counts_and_sums, _row_map

    k, d = centres.shape
    session = Session(df, "u", dp.PureDP(1), engine=engine, max_rows=1)
    names = [f"x{t}" for t in range(d)]
    base, z = _row_map(session.query(), names, check_box((-1, 1), d=d))
    query = _counts_and_sums(
        _assignment(base, z, centres, "__ml_label"),
        z,
        "__ml_label",
        k,
        Fraction(1),
        Fraction(1),
    )
    plan = session.compile(query, epsilon=1).plans[0]
    exact = session.engine.run(plan).to_pydict()
    keys, *outputs = (exact[c] for c in [*plan.group_columns, *plan.output_columns])
    return {int(float(str(key))): [int(str(o[i])) for o in outputs] for i, key in enumerate(keys)}


def _wide_table(n: int, d: int) -> pd.DataFrame:
    rng = np.random.default_rng(5)  # test data only
    df = pd.DataFrame(rng.uniform(-1.2, 1.2, (n, d)), columns=[f"x{t}" for t in range(d)])
    df.loc[0, "x0"], df.loc[1, "x1"], df.loc[2, "x0"] = np.inf, np.nan, -1e308
    df.loc[3, "x1"] = -np.inf
    df["u"] = np.arange(n)
    return df


@pytest.mark.parametrize(
    ("d", "k", "source"),
    [
        (4, 3, "parquet"),
        (50, 20, "parquet"),
        pytest.param(50, 20, "pandas", marks=pytest.mark.slow),
    ],
)
def test_spark_runs_wide_lloyd_queries_like_duckdb(
    spark: Any, tmp_path: Any, d: int, k: int, source: str
) -> None:
    """A Lloyd query from a Parquet file ran the Spark driver out of heap while optimising,
    already at d = 4, k = 3 (filter pushdown expanded the derived columns into a tree), and at
    d = 50, k = 20 from pandas took a minute at n = 10^4 and ran out of heap at 10^5. Now it
    runs and its exact per-cluster aggregates are DuckDB's (edge values included)."""
    from dpkit.analytics._engines._duckdb import DuckDBEngine
    from dpkit.analytics._engines._spark import SparkEngine
    from dpkit.ml._kmeans import _public_spread

    df = _wide_table(60, d)
    centres = _public_spread(k, d)  # public random centres: drawn once for both engines
    src: Any = df
    if source == "parquet":
        src = str(tmp_path / "wide.parquet")
        df.to_parquet(src)
    want = _lloyd_aggregates(DuckDBEngine(df), df, centres)
    assert sum(row[0] for row in want.values()) == len(df)
    assert _lloyd_aggregates(SparkEngine(src, spark=spark), df, centres) == want


def test_wide_plans_run_with_scoped_spark_settings(spark: Any) -> None:
    """The settings of a wide plan are set for its query only: the previous values (an
    excluded-rules list the user set, an unset key) are back afterwards."""
    from dpkit.analytics._engines._spark import _WIDE_SETTINGS, _scoped_conf

    user_rule = "org.apache.spark.sql.catalyst.optimizer.CombineFilters"
    spark.conf.set("spark.sql.optimizer.excludedRules", user_rule)
    try:
        with _scoped_conf(spark, _WIDE_SETTINGS):
            rules = spark.conf.get("spark.sql.optimizer.excludedRules").split(",")
            assert rules[0] == user_rule and "PushDownPredicates" in rules[1]
            assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"
        assert spark.conf.get("spark.sql.optimizer.excludedRules") == user_rule
    finally:
        spark.conf.unset("spark.sql.optimizer.excludedRules")
    with _scoped_conf(spark, _WIDE_SETTINGS):
        pass
    assert spark.conf.get("spark.sql.optimizer.excludedRules", None) is None
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"


def test_which_plans_are_wide() -> None:
    """A Lloyd query at d = 2, k = 2 keeps Spark's defaults; at d = 4, k = 3 it is wide."""
    from dpkit.analytics._engines._spark import _WIDE, inlined_size
    from dpkit.ml._common import check_box
    from dpkit.ml._kmeans import _public_spread
    from dpkit.ml._session import _assignment, _counts_and_sums, _row_map

    sizes = []
    for d, k in ((2, 2), (4, 3)):
        df = _wide_table(5, d)
        session = Session(df, "u", dp.PureDP(1), engine="duckdb", max_rows=1)
        base, z = _row_map(session.query(), list(df.columns[:d]), check_box((-1, 1), d=d))
        query = _counts_and_sums(
            _assignment(base, z, _public_spread(k, d), "l"), z, "l", k, Fraction(1), Fraction(1)
        )
        sizes.append(inlined_size(session.compile(query, epsilon=1).plans[0]))
    assert sizes[0] < _WIDE <= sizes[1]


def test_concurrent_scoped_settings_are_restored() -> None:
    """Two threads running wide queries at once cannot interleave their saves and restores (the
    second would save the first's settings and restore them afterwards, leaving pushdown off
    for good): scoped blocks run one at a time and the conf ends as it began."""
    import threading
    import time

    from dpkit.analytics._engines._spark import _WIDE_SETTINGS, _scoped_conf

    class Conf:
        def __init__(self) -> None:
            self.values: dict[str, str] = {}

        def get(self, key: str, default: str | None = None) -> str | None:
            return self.values.get(key, default)

        def set(self, key: str, value: str) -> None:
            self.values[key] = value

        def unset(self, key: str) -> None:
            self.values.pop(key, None)

    class FakeSpark:
        conf = Conf()

    spark = FakeSpark()
    inside = threading.Event()

    def first() -> None:
        with _scoped_conf(spark, _WIDE_SETTINGS):
            inside.set()
            time.sleep(0.2)

    def second() -> None:
        inside.wait()
        with _scoped_conf(spark, _WIDE_SETTINGS):
            time.sleep(0.4)  # outlasts the first: its restore would come last

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert spark.conf.values == {}
