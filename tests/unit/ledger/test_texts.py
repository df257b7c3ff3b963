"""Texts the stores cannot hold (a NUL character, a lone surrogate such as JSON "\\ud800") are
refused by the Ledger with an InvalidParameterError naming the parameter, before anything is
written; a failure's reason (which must be recorded) is made storable instead."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpkit.core._losses import PureDP
from dpkit.errors import InvalidParameterError
from dpkit.ledger import BudgetMonitor, Ledger

BAD = ["b\ud800c", "nul\x00here"]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: object) -> Ledger:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ledger.db"
    else:
        url = request.getfixturevalue("postgres_url")
    opened = Ledger.open(url, monitor=BudgetMonitor(log=False))
    opened.create_budget("d", PureDP(1))
    return opened


@pytest.mark.parametrize("text", BAD)
@pytest.mark.parametrize("field", ["query", "mechanism", "analyst", "dataset"])
def test_reserve_refuses_an_unstorable_text_before_writing(
    ledger: Ledger, field: str, text: str
) -> None:
    kwargs = {"query": "q", "mechanism": "m", "analyst": None, "dataset": "d", field: text}
    dataset = kwargs.pop("dataset")
    with pytest.raises(InvalidParameterError, match=field):
        ledger.reserve(dataset, PureDP(Fraction(1, 10)), **kwargs)  # type: ignore[arg-type]
    assert ledger.budget("d").charges == 0
    assert [e.kind for e in ledger.history("d")] == ["create"]


@pytest.mark.parametrize("text", BAD)
def test_receipt_actor_and_reason_are_checked_and_a_failure_reason_is_stored(
    ledger: Ledger, text: str
) -> None:
    reservation = ledger.reserve("d", PureDP(Fraction(1, 10)))
    with pytest.raises(InvalidParameterError, match="receipt"):
        ledger.commit(reservation, receipt=text)
    with pytest.raises(InvalidParameterError, match="actor"):
        ledger.adjust_budget("d", PureDP(2), actor=text)
    with pytest.raises(InvalidParameterError, match="reason"):
        ledger.adjust_budget("d", PureDP(2), reason=text)
    ledger.fail(reservation, reason=text)  # recorded, with the bad characters replaced
    failed = [e for e in ledger.history("d") if e.kind == "fail"]
    assert len(failed) == 1 and "\x00" not in failed[0].detail
    failed[0].detail.encode("utf-8")
    assert ledger.budget("d").charges == 1
    assert ledger.replay().ok
