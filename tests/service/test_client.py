"""dpkit.client against the service: the officer's and the analyst's workflow end to end."""

from __future__ import annotations

import pytest

from conftest import OFFICER, Api
from dpkit.client import Client, ServiceError


def test_client_workflow(api: Api) -> None:
    officer = Client("http://testserver", OFFICER, http=api.client)
    officer.register_dataset(
        "people",
        "people.csv",
        "person",
        epsilon="1",
        schema={"age": "numeric", "dept": "text"},
        columns={"age": (0, 100)},
    )
    issued = officer.add_analyst("ana")
    officer.set_allowance("people", "ana", epsilon="0.3")
    ana = Client("http://testserver", issued["token"], http=api.client)
    answer = ana.query("people", "SELECT COUNT(*), AVG(age, 0, 100)", epsilon="0.1")
    assert {"count", "count_low", "count_high"} <= set(answer.table[0])
    assert answer.remaining["epsilon"] == pytest.approx(0.2)
    grouped = ana.query(
        "people",
        model={"aggregations": [{"op": "count"}], "group_by": ["dept"]},
        keys={"dept": ["a", "b"]},
        epsilon=0.1,
    )
    assert len(grouped.to_pandas()) == 2
    assert [r["receipt"] for r in ana.receipts()] == [
        grouped.receipt["receipt"],
        answer.receipt["receipt"],
    ]
    with pytest.raises(ServiceError) as refused:
        ana.query("people", "SELECT COUNT(*)", epsilon="0.5")
    assert refused.value.status == 409 and refused.value.kind == "budget_exceeded"
    with pytest.raises(ServiceError) as denied:
        ana.audit()
    assert denied.value.status == 403
    officer.revoke_token(issued["token_id"])
    with pytest.raises(ServiceError) as revoked:
        ana.me()
    assert revoked.value.status == 401
    assert any(a["action"] == "query" for a in officer.audit())
