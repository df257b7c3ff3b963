"""A compiled Session query is a Measurement whose function reads its input (an engine over the
table): it never reads the compiling Session's data behind the caller's back, and anything else
is refused before a reservation."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest

import dpkit as dp
from dpkit.accounting import Accountant
from dpkit.analytics import DuckDBEngine, Session, count
from dpkit.errors import DomainMismatchError
from dpkit.ledger import Ledger


def _session(n: int, ledger: Ledger, dataset: str) -> Session:
    ledger.create_budget(dataset, dp.PureDP(10), privacy_unit="u")
    frame = pd.DataFrame({"u": range(n)})
    return Session(frame, "u", ledger=ledger, dataset=dataset, max_rows=1)


def test_the_measurement_runs_on_the_engine_it_is_given() -> None:
    ledger = Ledger.open(":memory:")
    big = _session(1000, ledger, "hr")
    measurement = big.compile(big.query().agg(count()), epsilon=100)
    small = DuckDBEngine(pd.DataFrame({"u": range(3)}))
    released = measurement(small)[0]["main"]["count"].iloc[0]
    assert abs(released - 3) < 5  # ε = 100: the small table's count, not 1000
    own = measurement(big.engine)[0]["main"]["count"].iloc[0]
    assert abs(own - 1000) < 5


@pytest.mark.parametrize("data", [None, pd.DataFrame({"u": [1, 2, 3]})])
def test_an_accountant_release_on_anything_but_an_engine_is_refused_uncharged(data: object) -> None:
    ledger = Ledger.open(":memory:")
    hr = _session(1000, ledger, "hr")
    ledger.create_budget("other", dp.PureDP(200), privacy_unit="u")
    measurement = hr.compile(hr.query().agg(count()), epsilon=100)
    with pytest.raises(DomainMismatchError, match="engine"):
        Accountant(ledger, "other").release(measurement, data)
    assert ledger.spent("other") == dp.PureDP(0) and ledger.spent("hr") == dp.PureDP(0)


def test_zero_units_apart_cost_nothing_even_in_the_ledgers_form() -> None:
    ledger = Ledger.open(":memory:")
    session = _session(10, ledger, "d")
    measurement = session.compile(
        session.query().agg(dp.analytics.sum("u", (0, 10))),
        epsilon=1,
        delta=Fraction(1, 10**6),
        mechanism="gaussian",
    )
    assert isinstance(measurement.map(1), dp.ApproxDP)
    assert measurement.map(0) == dp.ApproxDP(0, 0)


def test_loss_with_a_second_delta_is_refused() -> None:
    """With loss=ApproxDP(1, 1e-6) and delta=1e-3 a Gaussian query was charged δ = 1e-3, 1000x
    the loss it was asked for (the charge's conversion used the second δ)."""
    ledger = Ledger.open(":memory:")
    session = _session(10, ledger, "d")
    query = session.query().agg(dp.analytics.sum("u", (0, 10)))
    with pytest.raises(dp.InvalidParameterError, match="delta"):
        session.compile(
            query, loss=dp.ApproxDP(1, Fraction(1, 10**6)), delta=1e-3, mechanism="gaussian"
        )
    charged = session.compile(query, loss=dp.ApproxDP(1, Fraction(1, 10**6)), mechanism="gaussian")
    assert charged.map(1) <= dp.ApproxDP(1, Fraction(1, 10**6))
