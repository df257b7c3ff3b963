"""dpkit.ml.fit_linear_regression: sufficient statistics from one Session query."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.ledger import Ledger
from dpkit.ml import fit_linear_regression

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
        session, ["x1", "x2"], "y", bounds_X=([0, -1], [10, 1]), bounds_y=(-5, 10), epsilon=1
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
