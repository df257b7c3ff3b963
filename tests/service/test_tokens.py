"""Tokens expire, the last active officer token cannot be revoked, a restart issues an officer
token when none is active, and ``dpkit serve`` says where it listens (issue 21). Against a real
``dpkit serve`` on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hostile import OFFICER_HEADERS, assert_documented_error

from conftest import OFFICER, Server, database_url, start_serve, write_people


@pytest.fixture(params=["sqlite", "postgres"])
def fresh(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, Path, list[Server]]]:
    """A database and a data root of this test's own, and the servers it starts (stopped at
    the end): tests here revoke the officer's token or restart the server."""
    write_people(tmp_path / "data")
    started: list[Server] = []
    yield database_url(request.param, tmp_path, request), tmp_path / "data", started
    for server in started:
        server.stop()


def _start(fresh: tuple[str, Path, list[Server]], *args: str) -> Server:
    database, root, started = fresh
    server = start_serve(database, root, root.parent / f"log{len(started)}", *args)
    started.append(server)
    return server


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_expire_and_an_expired_token_is_refused_clearly(serve: Server) -> None:
    with httpx.Client(base_url=serve.url, timeout=60) as http:
        default = http.post("/api/v1/principals", headers=OFFICER_HEADERS, json={"name": "long"})
        assert default.status_code == 201
        lifetime = default.json()["expires_at"] - time.time()
        assert 89 * 86400 < lifetime <= 90 * 86400  # the default lifetime: 90 days
        brief = http.post(
            "/api/v1/principals",
            headers=OFFICER_HEADERS,
            json={"name": "brief", "expires_in_days": 3 / 86400},
        ).json()
        assert http.get("/api/v1/me", headers=_auth(brief["token"])).status_code == 200
        time.sleep(3.2)
        refused = http.get("/api/v1/me", headers=_auth(brief["token"]))
        assert refused.status_code == 401
        body = assert_documented_error(refused)
        assert body["error"] == "unauthenticated" and "expired" in body["detail"]
        assert http.get("/api/v1/me", headers=_auth(default.json()["token"])).status_code == 200
        again = http.post(
            "/api/v1/principals/brief/tokens",
            headers=OFFICER_HEADERS,
            json={"expires_in_days": 1},
        ).json()
        assert http.get("/api/v1/me", headers=_auth(again["token"])).status_code == 200
        listed = {
            t["token_id"]: t for t in http.get("/api/v1/tokens", headers=OFFICER_HEADERS).json()
        }
        assert listed[brief["token_id"]]["expires_at"] == pytest.approx(brief["expires_at"])
        for bad in (0, -1, 3651, "soon"):
            r = http.post(
                "/api/v1/principals/brief/tokens",
                headers=OFFICER_HEADERS,
                json={"expires_in_days": bad},
            )
            assert r.status_code == 422 and assert_documented_error(r)


def _officer_tokens(http: httpx.Client, token: str) -> list[str]:
    now = time.time()
    return [
        t["token_id"]
        for t in http.get("/api/v1/tokens", headers=_auth(token)).json()
        if t["principal"].startswith("officer")
        and t["revoked_at"] is None
        and (t["expires_at"] is None or t["expires_at"] > now)
    ]


def test_the_last_active_officer_token_cannot_be_revoked(
    fresh: tuple[str, Path, list[Server]],
) -> None:
    server = _start(fresh)
    with httpx.Client(base_url=server.url, timeout=60) as http:
        (only,) = _officer_tokens(http, OFFICER)
        refused = http.delete(f"/api/v1/tokens/{only}", headers=OFFICER_HEADERS)
        assert refused.status_code == 409
        assert assert_documented_error(refused)["error"] == "conflict"
        assert http.get("/api/v1/me", headers=OFFICER_HEADERS).status_code == 200
        # another officer first; then the first token may go
        second = http.post(
            "/api/v1/principals",
            headers=OFFICER_HEADERS,
            json={"name": "officer2", "role": "officer"},
        ).json()
        assert http.delete(f"/api/v1/tokens/{only}", headers=OFFICER_HEADERS).status_code == 204
        assert http.get("/api/v1/me", headers=OFFICER_HEADERS).status_code == 401
        token = second["token"]
        assert _officer_tokens(http, token) == [second["token_id"]]
        assert (
            http.delete(f"/api/v1/tokens/{second['token_id']}", headers=_auth(token)).status_code
            == 409
        )
        # two officers revoking each other's tokens at once: one of them keeps access
        for round_ in range(4):
            other = http.post(
                "/api/v1/principals",
                headers=_auth(token),
                json={"name": f"officer_r{round_}", "role": "officer"},
            ).json()
            ids = _officer_tokens(http, token)
            assert len(ids) == 2
            barrier = threading.Barrier(2)
            statuses: list[int] = []

            def revoke(
                by: str,
                victim: str,
                barrier: threading.Barrier = barrier,
                statuses: list[int] = statuses,
            ) -> None:
                with httpx.Client(base_url=server.url, timeout=60) as mine:
                    barrier.wait()
                    response = mine.delete(f"/api/v1/tokens/{victim}", headers=_auth(by))
                    statuses.append(response.status_code)

            threads = [
                threading.Thread(target=revoke, args=(token, other["token_id"])),
                threading.Thread(target=revoke, args=(other["token"], second["token_id"])),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert statuses.count(204) == 1, statuses
            survivors = [
                t
                for t in (token, other["token"])
                if http.get("/api/v1/me", headers=_auth(t)).status_code == 200
            ]
            assert len(survivors) == 1
            token = survivors[0]
            second = {"token_id": _officer_tokens(http, token)[0]}


def test_a_restart_issues_an_officer_token_when_none_is_active(
    fresh: tuple[str, Path, list[Server]],
) -> None:
    """Every officer token expired: recovery is a restart, which prints a new officer token
    once; no SQL needed. (Revoking down to a token that expires in seconds is refused, below;
    here the only officer token expires by itself.)"""
    server = _start(fresh, "--token-days", str(8 / 86400))
    with httpx.Client(base_url=server.url, timeout=60) as http:
        (first,) = http.get("/api/v1/tokens", headers=OFFICER_HEADERS).json()
        time.sleep(max(0.0, first["expires_at"] - time.time()) + 0.5)
        expired = http.get("/api/v1/me", headers=OFFICER_HEADERS)
        assert expired.status_code == 401 and "expired" in expired.json()["detail"]
    server.stop()
    again = _start(fresh)
    printed = re.findall(r"shown once: (\S+)", again.log.read_text())
    assert printed and printed[-1] != OFFICER  # a spent token is never brought back
    with httpx.Client(base_url=again.url, timeout=60) as http:
        me = http.get("/api/v1/me", headers=_auth(printed[-1]))
        assert me.status_code == 200 and me.json()["role"] == "officer"
        assert http.get("/api/v1/me", headers=OFFICER_HEADERS).status_code == 401


def test_revoking_down_to_an_officer_token_about_to_expire_is_refused(
    fresh: tuple[str, Path, list[Server]],
) -> None:
    """The last-officer check counted an active but nearly expired token: with officer2's
    2-second token active, revoking officer1's token was allowed, and 2 seconds later every
    officer was locked out. An officer token may be revoked only while another stays valid for
    at least OFFICER_MARGIN_DAYS (1 day)."""
    from dpkit.service._core import OFFICER_MARGIN_DAYS

    server = _start(fresh)
    with httpx.Client(base_url=server.url, timeout=60) as http:
        (first,) = _officer_tokens(http, OFFICER)
        brief = http.post(
            "/api/v1/principals",
            headers=OFFICER_HEADERS,
            json={"name": "officer_brief", "role": "officer", "expires_in_days": 2 / 86400},
        ).json()
        almost = http.post(
            "/api/v1/principals",
            headers=OFFICER_HEADERS,
            json={
                "name": "officer_day",
                "role": "officer",
                "expires_in_days": OFFICER_MARGIN_DAYS * 0.99,
            },
        ).json()
        for by in (OFFICER, brief["token"], almost["token"]):
            refused = http.delete(f"/api/v1/tokens/{first}", headers=_auth(by))
            assert refused.status_code == 409, refused.text
            body = assert_documented_error(refused)
            assert body["error"] == "conflict" and "1 day" in body["detail"]
        assert http.get("/api/v1/me", headers=OFFICER_HEADERS).status_code == 200
        # a durable second officer: now the first token may go
        durable = http.post(
            "/api/v1/principals",
            headers=OFFICER_HEADERS,
            json={"name": "officer_durable", "role": "officer", "expires_in_days": 2},
        ).json()
        assert http.delete(f"/api/v1/tokens/{first}", headers=OFFICER_HEADERS).status_code == 204
        assert http.get("/api/v1/me", headers=_auth(durable["token"])).status_code == 200


def test_the_default_lifetime_is_the_server_s(fresh: tuple[str, Path, list[Server]]) -> None:
    server = _start(fresh, "--token-days", "2.5")
    with httpx.Client(base_url=server.url, timeout=60) as http:
        issued = http.post("/api/v1/principals", headers=OFFICER_HEADERS, json={"name": "x"})
        assert issued.json()["expires_at"] - time.time() == pytest.approx(2.5 * 86400, abs=120)
        bootstrap = [
            t
            for t in http.get("/api/v1/tokens", headers=OFFICER_HEADERS).json()
            if t["principal"] == "officer"
        ]
        assert bootstrap[0]["expires_at"] - time.time() == pytest.approx(2.5 * 86400, abs=120)


def test_dpkit_serve_prints_its_url_on_start(serve: Server) -> None:
    log = serve.log.read_text()
    assert f"starting on {serve.url}" in log
    assert f"{serve.url}/docs" in log and f"{serve.url}/api/v1" in log
