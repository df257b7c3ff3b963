"""``dpkit serve`` answers ``/api/v1/health`` while the service loads (dpkit.service._boot): the
front app says "starting", every other request waits for the service and gets its answer, the
service's lifespan runs, and a service that cannot be built stops the command with status 1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from conftest import OFFICER, free_port
from dpkit.service._boot import BootApp


def _request(path: str) -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "GET", "headers": []}


async def _get(app: BootApp, path: str) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    await app(_request(path), receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_health_answers_while_the_service_loads_and_the_rest_waits() -> None:
    release = threading.Event()
    events: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                events.append(message["type"])
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    def build() -> Any:
        release.wait(10)
        return inner

    async def scenario() -> None:
        app = BootApp(build)
        lifespan_in: asyncio.Queue[Any] = asyncio.Queue()
        lifespan_out: asyncio.Queue[Any] = asyncio.Queue()
        lifespan = asyncio.ensure_future(
            app({"type": "lifespan"}, lifespan_in.get, lifespan_out.put)
        )
        await lifespan_in.put({"type": "lifespan.startup"})
        assert (await lifespan_out.get())["type"] == "lifespan.startup.complete"
        assert await _get(app, "/api/v1/health") == (200, b'{"status":"starting"}')
        waiting = asyncio.ensure_future(_get(app, "/api/v1/me"))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # waits for the service, is not refused
        release.set()
        assert await waiting == (200, b"/api/v1/me")
        assert events == ["lifespan.startup"]  # the service's own startup ran first
        assert await _get(app, "/api/v1/health") == (200, b"/api/v1/health")  # the service's
        await lifespan_in.put({"type": "lifespan.shutdown"})
        assert (await lifespan_out.get())["type"] == "lifespan.shutdown.complete"
        await lifespan
        assert events == ["lifespan.startup", "lifespan.shutdown"]

    asyncio.run(scenario())


def _serve(tmp_path: Path, database: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ, DPKIT_BOOTSTRAP_TOKEN=OFFICER)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    process = subprocess.Popen(
        [sys.executable, "-m", "dpkit", "serve", "--database", database, "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return process, f"http://127.0.0.1:{port}"


def test_dpkit_serve_listens_before_the_service_loads_then_serves_it(tmp_path: Path) -> None:
    process, url = _serve(tmp_path, f"sqlite:///{tmp_path / 'service.db'}")
    try:
        start, first = time.monotonic(), None
        while time.monotonic() - start < 60 and first is None:
            try:
                first = httpx.get(f"{url}/api/v1/health", timeout=1)
            except httpx.HTTPError:
                time.sleep(0.05)
        assert first is not None and first.status_code == 200
        assert json.loads(first.text)["status"] in ("starting", "ok")
        me = httpx.get(
            f"{url}/api/v1/me", headers={"Authorization": f"Bearer {OFFICER}"}, timeout=60
        )
        assert me.status_code == 200, me.text
        assert httpx.get(f"{url}/api/v1/health", timeout=5).json() == {"status": "ok"}
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)
    assert process.returncode == 0


def test_a_service_that_cannot_be_built_stops_dpkit_serve_with_status_1(tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()  # not a database file: the service cannot open it
    process, _ = _serve(tmp_path, f"sqlite:///{tmp_path / 'a-directory'}")
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 1, out.decode()
    assert b"could not start" in out
