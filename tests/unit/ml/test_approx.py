"""(ε, δ) budgets for dpkit.ml k-means: the conversion is exact and conservative, the loss the
ledger is charged is the loss the model reports, and bad combinations are refused before any
data is read (in memory and on a Session)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpkit.analytics import Session
from dpkit.core._losses import ZCDP, ApproxDP
from dpkit.errors import InvalidParameterError
from dpkit.ledger import Ledger
from dpkit.ml import KMeans, fit_kmeans
from dpkit.ml._common import check_budget, rho_within

pytestmark = pytest.mark.usefixtures("seeded")


class Untouchable:
    """Data that fails the test if anything reads it (shape is public schema)."""

    shape = (10, 2)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise AssertionError("data was read")


def points(n: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(3)  # test data only
    centres = np.array([[-0.5, -0.5], [0.5, 0.0], [0.0, 0.6]])
    return centres[rng.integers(0, 3, n)] + rng.normal(0, 0.05, (n, 2))


@pytest.mark.parametrize(("eps", "delta"), [(1, Fraction(1, 10**6)), (Fraction(1, 10), 1e-9)])
def test_rho_is_the_largest_that_converts_within_the_budget(eps: Any, delta: Any) -> None:
    budget = check_budget(eps, None, delta)
    assert budget.kind == "zcdp" and budget.delta == Fraction(str(delta))
    rho = budget.total
    assert rho == rho_within(Fraction(eps), Fraction(delta))
    # conservative: the certified conversion (rounded up) of ρ fits (ε, δ) exactly
    assert ZCDP(rho).to_approx(delta).epsilon <= Fraction(eps)
    # and the largest: a ρ larger by one part in 10^6 does not fit
    assert ZCDP(rho * Fraction(1_000_001, 1_000_000)).to_approx(delta).epsilon > Fraction(eps)


@pytest.mark.parametrize("method", ["lsh", "lloyd", "grid_em"])
def test_fit_reports_and_charges_the_exact_conversion(method: str) -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("pts", ApproxDP(2, Fraction(1, 10**5)))
    model = KMeans(3, epsilon=1, delta=1e-6, bounds=(-1, 1), method=method)
    model.fit(points(), ledger=ledger, dataset="pts")
    loss = model.privacy_loss_
    assert isinstance(loss, ApproxDP)
    assert loss.delta == Fraction(1, 10**6) and 0 < loss.epsilon <= 1
    # exactly the conversion of the zCDP loss the fit spent (ρ for lsh/lloyd; the k
    # exponential-mechanism selections' composed ρ <= the budget's for grid_em)
    rho = check_budget(1, None, 1e-6).total
    if method != "grid_em":
        assert loss == ZCDP(rho).to_approx(Fraction(1, 10**6))
    assert ledger.spent("pts") == loss
    assert np.all(np.abs(model.cluster_centers_) <= 1)


def test_approx_budget_fits_well() -> None:
    x = points(5000)
    model = KMeans(3, epsilon=1, delta=1e-6, bounds=(-1, 1)).fit(x)
    found = np.asarray(model.cluster_centers_)
    truth = np.array([[-0.5, -0.5], [0.5, 0.0], [0.0, 0.6]])
    assert max(np.min(np.linalg.norm(found - c, axis=1)) for c in truth) < 0.1


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"rho": 0.5, "delta": 1e-6}, "delta"),  # δ without ε
        ({"delta": 1e-6}, "epsilon"),  # no ε at all
        ({"epsilon": 1, "delta": 0}, "delta"),
        ({"epsilon": 1, "delta": -1e-6}, "delta"),
        ({"epsilon": 1, "delta": 1}, "delta"),
        ({"epsilon": 1, "delta": 1.5}, "delta"),
        ({"epsilon": 1, "delta": float("nan")}, "delta"),
        ({"epsilon": 1, "rho": 1, "delta": 1e-6}, "epsilon"),
    ],
)
def test_bad_combinations_are_refused_before_reading(
    kwargs: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        KMeans(3, bounds=(-1, 1), **kwargs).fit(Untouchable())
    assert info.value.parameter == parameter


def frame(n: int = 3000) -> pd.DataFrame:
    x = points(n)
    return pd.DataFrame({"u": np.arange(n), "a": x[:, 0], "b": x[:, 1]})


def test_session_fit_charges_the_conversion_once() -> None:
    ledger = Ledger.open(":memory:")
    budget = ApproxDP(3, Fraction(1, 10**5))
    ledger.create_budget("t", budget, privacy_unit="u")
    session = Session(frame(), "u", budget, engine="pandas", ledger=ledger, dataset="t", max_rows=1)
    model = fit_kmeans(
        session, ["a", "b"], 3, bounds=(-1, 1), epsilon=1, delta=1e-6, method="lloyd"
    )
    loss = model.privacy_loss_
    assert isinstance(loss, ApproxDP) and loss.delta == Fraction(1, 10**6) and loss.epsilon <= 1
    # the queries' zCDP losses sum to at most the budget's ρ; charged as their conversion
    assert loss.epsilon <= ZCDP(check_budget(1, None, 1e-6).total).to_approx(1e-6).epsilon
    assert ledger.spent("t") == loss
    assert [e.kind for e in ledger.history("t") if e.kind != "alert"] == [
        "create",
        "reserve",
        "commit",
    ]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"rho": 0.5, "delta": 1e-6}, "delta"),
        ({"epsilon": 1, "delta": 0}, "delta"),
        ({"epsilon": 1, "delta": 1}, "delta"),
    ],
)
def test_session_refuses_bad_combinations_before_reading(
    kwargs: dict[str, Any], parameter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(":memory:")
    budget = ApproxDP(3, Fraction(1, 10**5))
    ledger.create_budget("t", budget, privacy_unit="u")
    session = Session(
        frame(10), "u", budget, engine="pandas", ledger=ledger, dataset="t", max_rows=1
    )

    def fail(plan: Any) -> Any:
        raise AssertionError("data was read")

    monkeypatch.setattr(session.engine, "run", fail)
    with pytest.raises(InvalidParameterError) as info:
        fit_kmeans(session, ["a", "b"], 3, bounds=(-1, 1), method="lloyd", **kwargs)
    assert info.value.parameter == parameter
    assert session.remaining == budget
    assert [e.kind for e in ledger.history("t") if e.kind != "alert"] == ["create"]
