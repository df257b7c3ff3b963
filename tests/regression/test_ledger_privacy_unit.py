"""Regression (review finding 3): a Session must not charge a budget of another privacy unit.

The ledger records each dataset's privacy unit and ``Ledger.reserve(privacy_unit=...)`` refuses
a mismatch, but Session neither checks the unit when it opens an existing budget nor passes it
to ``reserve``. An analyst can open the ``employee_id`` budget with ``privacy_unit="payslip_id"``:
every charge is then ε per payslip, recorded as ε per employee (an employee with 12 payslips
loses up to 12ε per charge). Fixed: Session checks the unit on open and passes it to every reserve.
"""

from __future__ import annotations

import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, count
from dpkit.ledger import Ledger


def test_session_refuses_a_budget_of_another_privacy_unit() -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("payroll", dp.PureDP(1), privacy_unit="employee_id")
    df = pd.DataFrame({"employee_id": [1, 1, 1, 2], "payslip_id": [10, 11, 12, 13]})
    with pytest.raises(dp.DPError):
        session = Session(
            df, privacy_unit="payslip_id", ledger=ledger, dataset="payroll", max_rows=1
        )
        session.evaluate(session.query().agg(count()), epsilon=0.5)
    assert ledger.spent("payroll") == dp.PureDP(0), "a per-payslip release was charged"
