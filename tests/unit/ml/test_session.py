"""dpkit.ml.fit_linear_regression: sufficient statistics from one Session query."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.errors import BudgetExceededError, InvalidParameterError, UnsupportedQueryError
from dpkit.ledger import Ledger
from dpkit.ml import fit_kmeans, fit_linear_regression

pytestmark = pytest.mark.usefixtures("seeded")


def frame(n: int = 20_000) -> pd.DataFrame:
    rng = np.random.default_rng(0)  # test data only
    df = pd.DataFrame({"u": np.arange(n), "x1": rng.uniform(0, 10, n), "x2": rng.uniform(-1, 1, n)})
    df["y"] = 2 + 0.5 * df.x1 - 1.0 * df.x2 + rng.normal(0, 0.2, n)
    return df


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_fits_through_one_session_query(engine: str) -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("t", dp.PureDP(2), privacy_unit="u")  # the privacy officer's act
    session = Session(
        frame(), "u", dp.PureDP(2), engine=engine, ledger=ledger, dataset="t", max_rows=1
    )
    model = fit_linear_regression(
        session, ["x1", "x2"], "y", bounds_X=[(0, 10), (-1, 1)], bounds_y=(-5, 10), epsilon=1
    )
    assert np.allclose(model.coef_, [0.5, -1.0], atol=0.05)
    assert abs(model.intercept_ - 2) < 0.2
    assert model.privacy_loss_ == dp.PureDP(1)
    assert session.remaining == dp.PureDP(1)
    assert model.coef_ci_ is not None
    assert [e.kind for e in ledger.history("t") if e.kind != "alert"] == [
        "create",
        "reserve",
        "commit",
    ]


def test_budget_and_parameters_checked_before_reading() -> None:
    session = Session(frame(100), "u", dp.PureDP(Fraction(1, 2)), max_rows=1)
    with pytest.raises(BudgetExceededError):
        fit_linear_regression(session, ["x1"], "y", bounds_X=(0, 10), bounds_y=(0, 1), epsilon=1)
    with pytest.raises(InvalidParameterError):
        fit_linear_regression(session, ["x1"], "y", bounds_X=None, bounds_y=(0, 1), epsilon=0.1)
    with pytest.raises(InvalidParameterError):
        fit_linear_regression(session, [], "y", bounds_X=(0, 1), bounds_y=(0, 1), epsilon=0.1)
    assert session.remaining == dp.PureDP(Fraction(1, 2))


# ----------------------------------------------------------------------------- k-means
def mixture(n: int = 6_000) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(1)  # test data only
    centres = np.array([[-3.0, -3.0], [3.0, -2.0], [0.0, 3.0]])
    points = centres[rng.integers(0, 3, n)] + rng.normal(0, 0.3, (n, 2))
    df = pd.DataFrame({"u": np.arange(n) // 2, "a": points[:, 0], "b": points[:, 1]})
    return df, centres


def _matched_error(found: np.ndarray, truth: np.ndarray) -> float:
    return float(max(np.min(np.linalg.norm(found - c, axis=1)) for c in truth))


@pytest.mark.parametrize(
    ("engine", "method"),
    [("pandas", "lloyd"), ("pandas", "lsh"), ("pandas", "grid_em"), ("duckdb", "lloyd")],
)
def test_kmeans_fits_through_the_session(engine: str, method: str) -> None:
    """(DuckDB and Spark run every method in tests/engines/test_ml_engines.py.)"""
    df, centres = mixture()
    session = Session(df, "u", dp.PureDP(4), engine=engine, max_rows=2)
    extra = {"max_iter": 3} if method == "lloyd" else {}
    model = fit_kmeans(session, ["a", "b"], 3, bounds=(-5, 5), epsilon=2, method=method, **extra)
    assert model.cluster_centers_.shape == (3, 2)
    assert _matched_error(model.cluster_centers_, centres) < (1.2 if method == "grid_em" else 0.6)
    assert model.privacy_loss_ == dp.PureDP(2)
    assert session.remaining == dp.PureDP(2)
    # one reservation for the whole fit, committed after the last query
    assert [e.kind for e in session.ledger.history(session.dataset) if e.kind != "alert"] == [
        "create",
        "reserve",
        "commit",
    ]
    assert sorted(model.predict(centres).tolist()) == [0, 1, 2]  # one centre per cluster


def test_kmeans_zcdp_through_the_session() -> None:
    df, centres = mixture()
    session = Session(df, "u", dp.ZCDP(1), max_rows=2, engine="pandas")
    model = fit_kmeans(session, ["a", "b"], 3, bounds=(-5, 5), rho=0.5, method="lsh")
    assert model.privacy_loss_ == dp.ZCDP(Fraction(1, 2))
    assert _matched_error(model.cluster_centers_, centres) < 0.6


def test_kmeans_assignment_runs_in_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Lloyd iteration is one aggregate query (one plan) whose grouping key is the
    engine-computed nearest centre; the engine returns one row per cluster, never the rows."""
    df, _ = mixture(2_000)
    session = Session(df, "u", dp.PureDP(4), max_rows=2, engine="pandas")
    seen: list[int] = []
    run = session.engine.run

    def spy(plan: Any) -> Any:
        table = run(plan)
        seen.append(table.num_rows)
        return table

    monkeypatch.setattr(session.engine, "run", spy)
    fit_kmeans(session, ["a", "b"], 3, bounds=(-5, 5), epsilon=1, method="lloyd", max_iter=4)
    assert len(seen) == 4 and all(rows <= 3 for rows in seen)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"features": ["nope"]}, InvalidParameterError),
        ({"features": ["name"]}, InvalidParameterError),  # a text column: refused by kind
        ({"n_clusters": 0}, InvalidParameterError),
        ({"bounds": None}, InvalidParameterError),
        ({"bounds": ([0, 0, 0], [1, 1, 1])}, InvalidParameterError),  # wrong shape
        ({"method": "kmeans++"}, InvalidParameterError),
        ({"epsilon": None}, InvalidParameterError),
        ({"epsilon": 5}, BudgetExceededError),
        ({"n_clusters": 10**6}, InvalidParameterError),  # more than the budget allows
        ({"max_rows": 0}, InvalidParameterError),
    ],
)
def test_kmeans_refusals_before_anything_is_read(kwargs: dict[str, Any], error: type) -> None:
    df, _ = mixture(100)
    df["name"] = "x"
    session = Session(df, "u", dp.PureDP(1), max_rows=2)

    def boom(plan: Any) -> Any:
        raise AssertionError("the engine was asked to read data")

    session.engine.run = boom  # type: ignore[method-assign]
    args: dict[str, Any] = {
        "features": ["a", "b"],
        "n_clusters": 2,
        "bounds": (-5, 5),
        "epsilon": 0.5,
    }
    args.update(kwargs)
    features = args.pop("features")
    k = args.pop("n_clusters")
    with pytest.raises(error):
        fit_kmeans(session, features, k, **args)
    assert session.remaining == dp.PureDP(1)
    assert [e.kind for e in session.ledger.history(session.dataset)] == ["create"]


def test_kmeans_without_contribution_bound_is_refused_before_reading() -> None:
    df, _ = mixture(100)
    session = Session(df, "u", dp.PureDP(1), engine="pandas")
    with pytest.raises(UnsupportedQueryError):
        fit_kmeans(session, ["a", "b"], 2, bounds=(-5, 5), epsilon=0.5)
    assert session.remaining == dp.PureDP(1)
    model = fit_kmeans(session, ["a", "b"], 2, bounds=(-5, 5), epsilon=0.5, max_rows=2)
    assert model.privacy_loss_ == dp.PureDP(Fraction(1, 2))


def test_regression_statistics_are_one_engine_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    session = Session(frame(2_000), "u", dp.PureDP(2), max_rows=1)
    plans: list[Any] = []
    run = session.engine.run

    def spy(plan: Any) -> Any:
        plans.append(plan)
        return run(plan)

    monkeypatch.setattr(session.engine, "run", spy)
    fit_linear_regression(
        session, ["x1", "x2"], "y", bounds_X=[(0, 10), (-1, 1)], bounds_y=(-5, 10), epsilon=1
    )
    assert len(plans) == 1
