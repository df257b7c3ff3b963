"""The session-level Accountant: reserve -> run -> commit, failures keep the charge."""

from __future__ import annotations

from typing import Any

import pytest

from dpkit.accounting import Accountant
from dpkit.core import Release
from dpkit.core._losses import PureDP
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.ledger import BudgetMonitor, Ledger, UnknownBudgetError
from dpkit.mechanisms import make_laplace


@pytest.fixture
def ledger() -> Ledger:
    ledger = Ledger.open(":memory:", monitor=BudgetMonitor(log=False))
    ledger.create_budget("visits", PureDP(1))
    ledger.create_budget("visits", PureDP(0.5), analyst="ana")
    return ledger


def test_release_reserves_runs_and_commits(ledger: Ledger) -> None:
    accountant = Accountant(ledger, "visits", analyst="ana")
    release = accountant.release(make_laplace(sensitivity=1, epsilon=0.25), 10.0, query="q1")
    assert isinstance(release, Release)
    assert isinstance(release.value, float)
    assert release.loss == PureDP(0.25)
    assert accountant.spent() == PureDP(0.25)
    assert ledger.spent("visits") == PureDP(0.25)
    kinds = [e.kind for e in ledger.history("visits", "ana", kinds=["reserve", "commit"])]
    assert kinds[-2:] == ["reserve", "commit"]
    commit = ledger.history("visits", kinds=["commit"])[-1]
    assert commit.receipt == release.receipt.id
    with pytest.raises(AttributeError):
        release.value = 3  # type: ignore[misc]


def test_refusal_happens_before_the_data_is_read(ledger: Ledger) -> None:
    accountant = Accountant(ledger, "visits", analyst="ana")
    touched: list[Any] = []

    class Spy:
        def __float__(self) -> float:
            touched.append(1)
            return 1.0

    with pytest.raises(BudgetExceededError):
        accountant.release(make_laplace(sensitivity=1, epsilon=0.75), Spy())
    assert touched == []
    assert accountant.spent() == PureDP(0)


def test_failure_after_reserve_keeps_charge_and_reraises(ledger: Ledger) -> None:
    accountant = Accountant(ledger, "visits")
    measurement = make_laplace(sensitivity=1, epsilon=0.125)
    with pytest.raises(Exception):  # noqa: B017 - any failure of the mechanism on bad data
        accountant.release(measurement, object())
    assert ledger.spent("visits") == PureDP(0.125)
    fail = ledger.history("visits", kinds=["fail"])
    assert len(fail) == 1
    assert ledger.pending() == []


def test_d_in_is_passed_to_the_privacy_map(ledger: Ledger) -> None:
    accountant = Accountant(ledger, "visits")
    release = accountant.release(make_laplace(sensitivity=1, epsilon=0.125), 3.0, d_in=2)
    assert release.loss == PureDP(0.25)


def test_unknown_scope_and_bad_arguments(ledger: Ledger) -> None:
    with pytest.raises(UnknownBudgetError):
        Accountant(ledger, "nope")
    with pytest.raises(UnknownBudgetError):
        Accountant(ledger, "visits", analyst="zed")
    with pytest.raises(InvalidParameterError):
        Accountant("ledger", "visits")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        Accountant(ledger, "visits").release(lambda x: x, 1)  # type: ignore[arg-type]
