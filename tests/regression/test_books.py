"""Regression (edges review, issue 8 §2): books that cannot be minted or understated."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dpkit as dp
from dpkit.accounting import Accountant
from dpkit.analytics import Session, count
from dpkit.ledger import Ledger
from dpkit.mechanisms import make_laplace


def table() -> pd.DataFrame:
    return pd.DataFrame({"u": range(50), "x": [float(i % 7) for i in range(50)]})


def test_a_closed_session_refuses_before_reserving() -> None:
    """After close(), evaluate and estimate_bounds reserved budget, then failed reading."""
    ledger = Ledger.open(":memory:")
    ledger.create_budget("t", dp.PureDP(1), privacy_unit="u")
    session = Session(table(), "u", ledger=ledger, dataset="t", max_rows=1)
    session.close()
    with pytest.raises(dp.InvalidParameterError, match="closed"):
        session.evaluate(session.query().agg(count()), epsilon=0.5)
    with pytest.raises(dp.InvalidParameterError, match="closed"):
        session.estimate_bounds("x", epsilon=0.5)
    assert ledger.spent("t") == dp.PureDP(0)
    assert [e.kind for e in ledger.history("t")] == ["create"]


def test_a_session_never_mints_a_budget_in_a_shared_ledger(tmp_path: Path) -> None:
    """A new dataset name (or a copy of the file under a new name) got a fresh budget."""
    path = tmp_path / "ledger.db"
    ledger = Ledger.open(str(path))
    ledger.create_budget("people", dp.PureDP(1), privacy_unit="u")
    for name in ("people-copy", "other"):
        with pytest.raises(dp.InvalidParameterError, match="never by a query"):
            Session(table(), "u", dp.PureDP(1), ledger=ledger, dataset=name, max_rows=1)
    with pytest.raises(dp.InvalidParameterError, match="never by a query"):
        Session(table(), "u", ledger=ledger, dataset="people", analyst="eve", max_rows=1)
    with pytest.raises(dp.InvalidParameterError, match="cannot change a budget"):
        Session(table(), "u", dp.PureDP(5), ledger=ledger, dataset="people", max_rows=1)
    assert [b.dataset for b in ledger.budgets()] == ["people"]
    # the dataset the officer created works, with or without naming its budget again
    Session(table(), "u", dp.PureDP(1), ledger=ledger, dataset="people", max_rows=1)
    ok = Session(table(), "u", ledger=path, dataset="people", max_rows=1)
    ok.evaluate(ok.query().agg(count()), epsilon=0.5)
    assert ledger.spent("people") == dp.PureDP(0.5)


def test_the_accountant_never_charges_less_than_one_unit() -> None:
    """Accountant.release(m, x, d_in=0) recorded ε = 0."""
    ledger = Ledger.open(":memory:")
    ledger.create_budget("v", dp.PureDP(2))
    accountant = Accountant(ledger, "v")
    m = make_laplace(sensitivity=2, epsilon=0.25)
    for shrink in (0, 1, 1.5):
        with pytest.raises(dp.InvalidParameterError, match="d_in"):
            accountant.release(m, 3.0, d_in=shrink)
    assert ledger.spent("v") == dp.PureDP(0)
    assert accountant.release(m, 3.0).loss == dp.PureDP(0.25)
    assert accountant.release(m, 3.0, d_in=4).loss == dp.PureDP(0.5)  # group privacy: more
    grouped = Accountant(ledger, "v", unit_distance=6)  # one person moves the input by 6
    assert grouped.release(m, 3.0).loss == dp.PureDP(0.75)
    with pytest.raises(dp.InvalidParameterError, match="d_in"):
        grouped.release(m, 3.0, d_in=2)


def test_a_tiny_epsilon_is_a_parameter_error_before_anything_is_charged() -> None:
    """ε = 1e-300 failed 'while reading the data (OverflowError)' and was charged."""
    session = Session(table(), "u", dp.PureDP(1), max_rows=1)
    for kwargs in ({"epsilon": 1e-300}, {"rho": 1e-12}, {"loss": dp.PureDP(1e-9)}):
        with pytest.raises(dp.InvalidParameterError, match="smallest a query may spend"):
            session.evaluate(session.query().agg(count()), **kwargs)  # type: ignore[arg-type]
    assert session.spent == dp.PureDP(0)
