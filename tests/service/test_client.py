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
    preview = ana.preview("people", "SELECT COUNT(*), AVG(age)", epsilon="0.1")
    assert preview["fits"] and "mean(age, [0, 100])" in preview["plan"]
    assert preview["remaining"]["epsilon"] == pytest.approx(0.3)  # nothing spent
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


@pytest.mark.parametrize("token", ["", "   ", "two words", "line\nbreak"])
def test_a_missing_or_malformed_token_is_named_not_called_unreachable(token: str) -> None:
    """Issue 21: an empty token made httpx refuse the header, and the client reported the
    server as unreachable."""
    from dpkit.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError) as caught:
        Client("http://127.0.0.1:9", token)
    message = str(caught.value)
    assert "token" in message and "unreachable" not in message
    if token.strip():
        assert token not in message  # a token is a secret: named, never printed


def test_a_failed_after_reservation_error_keeps_its_fields(api: Api) -> None:
    """The 424 body's charge and reservation reach the caller (ServiceError.info)."""
    import httpx

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            424,
            json={
                "error": "failed_after_reservation",
                "detail": "the query failed after its loss was reserved; the charge stays",
                "charged": {"kind": "pure", "epsilon": 0.1},
                "reservation_id": 7,
            },
        )

    http = httpx.Client(base_url="http://service", transport=httpx.MockTransport(reply))
    with pytest.raises(ServiceError) as caught:
        Client("http://service", "t0ken", http=http).query("people", "SELECT COUNT(*)", epsilon=1)
    assert caught.value.status == 424 and caught.value.kind == "failed_after_reservation"
    assert caught.value.info == {"charged": {"kind": "pure", "epsilon": 0.1}, "reservation_id": 7}
