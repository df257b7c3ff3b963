"""Helpers of the tests that send hostile requests to a real ``dpkit serve`` (issue 21): set-up
over HTTP, the documented error shape, and the ledger read directly, before and after each
request, to check the three outcomes (refused: nothing changes; answered: charged exactly the
answer's loss; failed after the reservation: charged exactly the reserved loss)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import httpx

from conftest import OFFICER
from dpkit.core._losses import PrivacyLoss
from dpkit.ledger import BudgetMonitor, Ledger

OFFICER_HEADERS = {"Authorization": f"Bearer {OFFICER}"}

AGGREGATES = {
    "count": "COUNT(*)",
    "units": "COUNT(DISTINCT person)",
    "sum": "SUM(age, 0, 100)",
    "mean": "AVG(age, 0, 100)",
    "variance": "VARIANCE(age, 0, 100)",
    "std": "STDDEV(age, 0, 100)",
    "median": "MEDIAN(age, 0, 100)",
    "quantile": "QUANTILE(age, 0.9, 0, 100)",
    "histogram": "HISTOGRAM(age, 0, 30, 60, 90)",
}
WHERES = ("", " WHERE age >= 10 AND dept IN ('a', 'b') AND NOT (age BETWEEN 50 AND 52)")
GROUPINGS = ("none", "public", "private")


def shape_body(dataset: str, aggregate: str, where: str, grouping: str) -> dict[str, Any]:
    """A query of one shape: an aggregate family, with or without WHERE, ungrouped or grouped
    by public keys or by privately chosen keys (which needs a δ)."""
    grouped = grouping != "none"
    sql = f"SELECT {'dept, ' if grouped else ''}{AGGREGATES[aggregate]}{where}"
    sql += " GROUP BY dept" if grouped else ""
    body: dict[str, Any] = {"dataset": dataset, "sql": sql, "loss": {"epsilon": "0.25"}}
    if grouping == "public":
        body["keys"] = {"dept": ["a", "b"]}
    if grouping == "private":
        body["loss"]["delta"] = "1e-7"
    return body


def setup(
    http: httpx.Client, dataset: str, analysts: list[str], allowance: str = "10000"
) -> list[str]:
    """Register ``dataset`` (the people CSV, an (ε, δ) budget of 10^9 ε, the ceiling) and give
    each analyst an allowance of ``allowance`` ε; returns their tokens."""
    r = http.post(
        "/api/v1/datasets",
        headers=OFFICER_HEADERS,
        json={
            "name": dataset,
            "source": "people.csv",
            "privacy_unit": "person",
            "schema": {"age": "numeric", "dept": "text"},
            "bounds": {"max_rows": 1, "columns": {"age": [0, 100]}},
            "budget": {"epsilon": "1000000000", "delta": "0.5"},
        },
    )
    assert r.status_code == 201, r.text
    tokens = []
    for name in analysts:
        r = http.post("/api/v1/principals", headers=OFFICER_HEADERS, json={"name": name})
        assert r.status_code == 201, r.text
        tokens.append(str(r.json()["token"]))
        r = http.put(
            f"/api/v1/datasets/{dataset}/allowances/{name}",
            headers=OFFICER_HEADERS,
            json={"total": {"epsilon": allowance, "delta": "0.1"}},
        )
        assert r.status_code == 200, r.text
    return tokens


def post_raw(
    http: httpx.Client, path: str, token: str | None, body: Any, timeout: float = 120
) -> httpx.Response:
    """POST ``body`` (JSON-encoded with ASCII escapes, so lone surrogates travel as
    ``\\ud800``; bytes are sent as they are)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode("ascii")
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return http.post(path, content=content, headers=headers, timeout=timeout)


def assert_documented_error(response: httpx.Response) -> dict[str, Any]:
    """A 4xx (or 503/424) with the documented JSON shape ``{"error": kind, "detail": text}``."""
    assert response.status_code != 500, response.text[:500]
    assert 400 <= response.status_code < 500 or response.status_code == 503, response.status_code
    assert response.headers.get("content-type", "").startswith("application/json"), response.text
    body = response.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"], body
    assert isinstance(body.get("detail"), str) and body["detail"], body
    assert len(response.content) < 20_000
    assert "Traceback" not in body["detail"] and "command line" not in body["detail"]
    return body


def exact_loss(wire: dict[str, Any]) -> tuple[Fraction, Fraction]:
    """(ε, δ) or (ρ, 0) of a loss as the service sends it (its exact fraction strings)."""
    exact = wire["exact"]
    if "rho" in exact:
        return Fraction(exact["rho"]), Fraction(0)
    return Fraction(exact["epsilon"]), Fraction(exact.get("delta", "0"))


def parts(loss: PrivacyLoss | None) -> tuple[Fraction, Fraction]:
    if loss is None:
        return Fraction(0), Fraction(0)
    if hasattr(loss, "rho"):
        return Fraction(loss.rho), Fraction(0)
    return Fraction(loss.epsilon), Fraction(getattr(loss, "delta", 0))


@dataclass(frozen=True)
class Snapshot:
    entries: int
    spent: tuple[Fraction, Fraction]
    charges: int


class Books:
    """The ledger of a running service, read directly (not through the service)."""

    def __init__(self, database: str) -> None:
        self.ledger = Ledger.open(database, monitor=BudgetMonitor(log=False), verify=False)

    def close(self) -> None:
        self.ledger.close()

    def snapshot(self, dataset: str, analyst: str) -> Snapshot:
        status = self.ledger.budget(dataset, analyst)
        entries = len(self.ledger.history(dataset))
        return Snapshot(entries, parts(status.spent), status.charges)

    def check(self, before: Snapshot, after: Snapshot, response: httpx.Response) -> str:
        """Assert the three-outcome rule for one request; returns which outcome it was."""
        status = response.status_code
        assert status != 500, response.text[:500]
        if status == 200:
            charged = exact_loss(response.json()["loss"])
            assert after.charges == before.charges + 1
            assert after.spent == (before.spent[0] + charged[0], before.spent[1] + charged[1])
            assert after.entries == before.entries + 2  # reserve + commit
            return "answered"
        body = assert_documented_error(response)
        if status == 424:
            assert body["error"] == "failed_after_reservation", body
            charged = exact_loss(body["charged"])
            assert after.charges == before.charges + 1
            assert after.spent == (before.spent[0] + charged[0], before.spent[1] + charged[1])
            return "failed"
        assert after == before, (response.status_code, body)  # refused: nothing recorded
        return "refused"
