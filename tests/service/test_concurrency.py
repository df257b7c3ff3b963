"""64 concurrent HTTP clients, each charging ε = 0.01 against a budget of 1.0, get exactly 100
grants — on SQLite and PostgreSQL, against a real uvicorn server on 127.0.0.1 (one worker and
four worker processes). An analyst racing their own allowance never exceeds it either."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from conftest import Api, Server, ThreadServer
from dpkit.core._losses import PureDP
from dpkit.ledger import BudgetMonitor, Ledger

CLIENTS = 64
PER_CLIENT = 2  # 128 attempts for 100 grants


def _race(
    url: str, token: str, clients: int, per_client: int, dataset: str = "people"
) -> tuple[int, int, list[str]]:
    granted = [0] * clients
    refused = [0] * clients
    errors: list[str] = []
    barrier = threading.Barrier(clients)

    def client(i: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            barrier.wait()
            for _ in range(per_client):
                r = http.post(
                    "/api/v1/query",
                    headers={"Authorization": f"Bearer {token}"},
                    json={
                        "dataset": dataset,
                        "sql": "SELECT COUNT(*)",
                        "loss": {"epsilon": "0.01"},
                    },
                )
                if r.status_code == 200:
                    granted[i] += 1
                elif r.status_code == 409 and r.json()["error"] == "budget_exceeded":
                    refused[i] += 1
                else:
                    errors.append(f"{r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(granted), sum(refused), errors


def _setup(url: str, allowance: str = "1", dataset: str = "people", analyst: str = "ana") -> str:
    with httpx.Client(base_url=url, timeout=60) as http:
        api = Api(http, {})
        assert api.register(dataset, epsilon="1").status_code == 201
        return api.analyst(analyst, dataset=dataset, epsilon=allowance)


def _ledger_has_exactly(
    database: str,
    dataset_total: int,
    analyst_total: int,
    dataset: str = "people",
    analyst: str = "ana",
) -> None:
    with Ledger.open(database, monitor=BudgetMonitor(log=False)) as ledger:
        assert ledger.budget(dataset).charges == dataset_total
        assert ledger.budget(dataset, analyst).charges == analyst_total
        assert len(ledger.history(dataset, kinds=["commit"])) == dataset_total
        assert ledger.replay().ok


def _database(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path}/service.db"


def test_64_clients_get_exactly_100_grants_from_one_process(shared_server: ThreadServer) -> None:
    """SQLite, one server process (the session's shared server; the dataset is this test's)."""
    token = _setup(shared_server.url, dataset="race64", analyst="ana_race64")
    granted, refused, errors = _race(shared_server.url, token, CLIENTS, PER_CLIENT, "race64")
    assert errors == []
    assert (granted, refused) == (100, CLIENTS * PER_CLIENT - 100)
    _ledger_has_exactly(shared_server.database, 100, 100, "race64", "ana_race64")
    with Ledger.open(shared_server.database, monitor=BudgetMonitor(log=False)) as ledger:
        assert ledger.spent("race64") == PureDP(1)


@pytest.mark.parametrize(
    ("kind", "workers"),
    [
        ("postgres", 4),
        pytest.param("sqlite", 4, marks=pytest.mark.slow),
        pytest.param("postgres", 1, marks=pytest.mark.slow),
    ],
)
def test_64_clients_get_exactly_100_grants(
    kind: str,
    workers: int,
    tmp_path: Path,
    data_root: Path,
    servers: Callable[..., Server],
    request: pytest.FixtureRequest,
) -> None:
    database = _database(kind, tmp_path, request)
    server = servers(database, data_root, workers=workers)
    token = _setup(server.url)
    granted, refused, errors = _race(server.url, token, CLIENTS, PER_CLIENT)
    assert errors == []
    assert (granted, refused) == (100, CLIENTS * PER_CLIENT - 100)
    server.stop()
    _ledger_has_exactly(database, 100, 100)
    with Ledger.open(database, monitor=BudgetMonitor(log=False)) as ledger:
        assert ledger.spent("people") == PureDP(1)


def test_an_analyst_racing_their_allowance_never_exceeds_it(shared_server: ThreadServer) -> None:
    """32 concurrent requests of ε = 0.01 against an allowance of 0.1 (the dataset has 1.0)."""
    token = _setup(shared_server.url, allowance="0.1", dataset="allow", analyst="ana_allow")
    granted, refused, errors = _race(shared_server.url, token, 32, 1, "allow")
    assert errors == []
    assert (granted, refused) == (10, 22)
    _ledger_has_exactly(shared_server.database, 10, 10, "allow", "ana_allow")
