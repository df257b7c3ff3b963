"""A family registered in one module (planner/families/_mode.py) is offered by the service, in
SQL and in the JSON model, with no change to the service (docs/design.md, "The family
registry")."""

from __future__ import annotations

import pytest

from conftest import Api


@pytest.mark.parametrize(
    "query",
    [
        {"sql": "SELECT dept, MODE(age, 1, 2, 3) AS m GROUP BY dept"},
        {
            "query": {
                "aggregations": [{"op": "mode", "column": "age", "values": [1, 2, 3], "name": "m"}],
                "group_by": ["dept"],
            }
        },
    ],
)
def test_the_service_answers_a_registered_family(api: Api, query: dict[str, object]) -> None:
    api.register()
    ana = api.analyst("ana")
    r = api.post(
        "/api/v1/query",
        ana,
        json={
            "dataset": "people",
            **query,
            "keys": {"dept": ["a", "b"]},
            "loss": {"epsilon": "0.5"},
        },
    )
    assert r.status_code == 200, r.text
    rows = r.json()["tables"]["main"]
    assert sorted(row["dept"] for row in rows) == ["a", "b"]
    assert all(row["m"] in (1, 2, 3) for row in rows)
    assert r.json()["remaining"]["epsilon"] == pytest.approx(0.5)


def test_an_unknown_op_lists_the_registered_ones(api: Api) -> None:
    api.register()
    ana = api.analyst("ana")
    model = {"aggregations": [{"op": "top_k", "column": "age"}]}
    r = api.post(
        "/api/v1/query",
        ana,
        json={"dataset": "people", "query": model, "loss": {"epsilon": "0.1"}},
    )
    assert r.status_code == 400, r.text
    assert "mode" in r.text and "histogram" in r.text


@pytest.mark.parametrize(
    "aggregation",
    [
        {"op": "mode", "column": "age", "values": [1, 10**400]},
        {"op": "histogram", "column": "age", "edges": [1, 10**400]},
    ],
)
def test_a_number_beyond_float64_is_a_400_refusal(api: Api, aggregation: dict[str, object]) -> None:
    """The reviewer's 10**400 candidate gave a 503 internal error (float() overflowed)."""
    api.register()
    ana = api.analyst("ana")
    r = api.post(
        "/api/v1/query",
        ana,
        json={
            "dataset": "people",
            "query": {"aggregations": [aggregation]},
            "loss": {"epsilon": "0.1"},
        },
    )
    assert r.status_code == 400, r.text
