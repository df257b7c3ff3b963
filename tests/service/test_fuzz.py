"""Fuzz the OpenAPI spec with schemathesis (bounded): no request, valid or not, gets a 500, and
the budget is charged only by answered queries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from conftest import OFFICER, write_people
from dpkit.service import Service, ServiceConfig
from dpkit.service._app import create_app

TOKENS: dict[str, str] = {}


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("fuzz")
    write_people(root / "data")
    service = Service(
        ServiceConfig(
            database=f"sqlite:///{root}/service.db",
            data_root=root / "data",
            bootstrap_token=OFFICER,
            engine="pandas",
        )
    )
    app = create_app(service=service)
    with TestClient(app) as client:
        h = {"Authorization": f"Bearer {OFFICER}"}
        client.post(
            "/api/v1/datasets",
            headers=h,
            json={
                "name": "people",
                "source": "people.csv",
                "privacy_unit": "person",
                "schema": {"age": "numeric"},
                "budget": {"epsilon": 1},
            },
        )
        TOKENS["analyst"] = client.post(
            "/api/v1/principals", headers=h, json={"name": "ana"}
        ).json()["token"]
        client.put(
            "/api/v1/datasets/people/allowances/ana", headers=h, json={"total": {"epsilon": 1}}
        )
        TOKENS["officer"] = OFFICER
        yield app
    service.close()


def test_no_request_gets_a_500(fuzz_app: Any) -> None:
    """Every operation of the spec, with generated (valid and invalid) inputs, as an officer, an
    analyst and anonymously: always a 2xx/4xx, never a 5xx."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    failures: list[str] = []
    statuses: list[int] = []
    for operation in operations:

        @settings(
            max_examples=8,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            for role in ("officer", "analyst", None):
                headers = {"Authorization": f"Bearer {TOKENS[role]}"} if role else {}
                response = case.call(headers=headers)
                statuses.append(response.status_code)
                if response.status_code >= 500:
                    failures.append(f"{role} {case.method} {case.path}: {response.text[:300]}")

        run()
    assert failures == []
    assert len(statuses) >= 3 * len(operations)
    assert any(400 <= s < 500 for s in statuses) and any(s < 300 for s in statuses)


def test_fuzzing_charged_only_answered_queries(fuzz_app: Any, tmp_path: Path) -> None:
    service = fuzz_app.state.service
    answered = [
        a for a in service.registry.audit_log(10_000, action="query") if a.outcome == "answered"
    ]
    status = service.ledger.budget("people", "ana")
    assert status.charges == len(answered)
    assert service.ledger.replay().ok
