"""Fixtures of the service tests: a data root with a small CSV, an in-process app (TestClient)
and real uvicorn servers on 127.0.0.1 (always stopped by the test): in their own processes
(``servers``: kill -9, several workers) or on a thread of the test process (``thread_server``;
``shared_server``, one for the whole session, where each test registers datasets and analysts
of its own names)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

OFFICER = "officer-token-for-tests-0123456789"
ROWS = 200


def write_people(root: Path, rows: int = ROWS) -> None:
    root.mkdir(parents=True, exist_ok=True)
    ids = np.arange(rows)
    pd.DataFrame({"person": ids, "age": ids % 90, "dept": np.where(ids % 2 == 0, "a", "b")}).to_csv(
        root / "people.csv", index=False
    )


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_people(root)
    (tmp_path / "secret.csv").write_text("person,salary\n1,100\n")
    return root


@dataclass
class Api:
    """A client with helpers for the usual set-up (dataset ``people``, analysts)."""

    client: httpx.Client
    officer: dict[str, str]

    def post(self, path: str, token: str | None = None, **kw: object) -> httpx.Response:
        return self.client.post(path, headers=_auth(token), **kw)

    def put(self, path: str, token: str | None = None, **kw: object) -> httpx.Response:
        return self.client.put(path, headers=_auth(token), **kw)

    def get(self, path: str, token: str | None = None, **kw: object) -> httpx.Response:
        return self.client.get(path, headers=_auth(token), **kw)

    def delete(self, path: str, token: str | None = None) -> httpx.Response:
        return self.client.delete(path, headers=_auth(token))

    def register(self, name: str = "people", epsilon: str = "1") -> httpx.Response:
        return self.post(
            "/api/v1/datasets",
            OFFICER,
            json={
                "name": name,
                "source": "people.csv",
                "privacy_unit": "person",
                "schema": {"age": "numeric", "dept": "text"},
                "bounds": {"max_rows": 1, "columns": {"age": [0, 100]}},
                "budget": {"epsilon": epsilon},
            },
        )

    def analyst(self, name: str, dataset: str = "people", epsilon: str = "1") -> str:
        r = self.post("/api/v1/principals", OFFICER, json={"name": name, "role": "analyst"})
        assert r.status_code == 201, r.text
        token = str(r.json()["token"])
        r = self.put(
            f"/api/v1/datasets/{dataset}/allowances/{name}",
            OFFICER,
            json={"total": {"epsilon": epsilon}},
        )
        assert r.status_code == 200, r.text
        return token

    def count(self, token: str, epsilon: str = "0.01", dataset: str = "people") -> httpx.Response:
        return self.post(
            "/api/v1/query",
            token,
            json={"dataset": dataset, "sql": "SELECT COUNT(*)", "loss": {"epsilon": epsilon}},
        )


def _auth(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api(data_root: Path, tmp_path: Path) -> Iterator[Api]:
    from fastapi.testclient import TestClient

    from dpkit.service import ServiceConfig
    from dpkit.service._app import create_app

    app = create_app(
        ServiceConfig(
            database=f"sqlite:///{tmp_path}/service.db",
            data_root=data_root,
            bootstrap_token=OFFICER,
        )
    )
    with TestClient(app) as client:
        yield Api(client, {"Authorization": f"Bearer {OFFICER}"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    database: str
    log: Path

    def kill(self) -> None:
        """SIGKILL the server and its workers (its own process group)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_server(
    database: str,
    data_root: Path,
    log: Path,
    workers: int = 1,
    engine: str = "duckdb",
    src: Path | None = None,
) -> Server:
    """A uvicorn server in its own process group, running dpkit from ``src`` (default: this
    checkout's ``src``)."""
    port = free_port()
    env = dict(os.environ)
    code = str(src or Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = code + os.pathsep + env.get("PYTHONPATH", "")
    env.update(
        DPKIT_DATABASE=database,
        DPKIT_DATA_ROOT=str(data_root),
        DPKIT_BOOTSTRAP_TOKEN=OFFICER,
        DPKIT_ENGINE=engine,
    )
    if workers > 1:  # create the schema and the officer once, before the workers race
        from dpkit.service import Service, ServiceConfig

        Service(
            ServiceConfig(database=database, data_root=data_root, bootstrap_token=OFFICER)
        ).close()
    handle = open(log, "ab")  # noqa: SIM115 - owned by the server's lifetime
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "dpkit.service._app:build_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Server(f"http://127.0.0.1:{port}", process, database, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/api/v1/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"the server did not start: {log.read_text()[-3000:]}")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(database: str, data_root: Path, workers: int = 1) -> Server:
        server = start_server(database, data_root, tmp_path / f"server-{len(started)}.log", workers)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@dataclass
class ThreadServer:
    """The app served by uvicorn on a thread of the test process (real HTTP on 127.0.0.1,
    without a new interpreter's start-up)."""

    url: str
    database: str
    server: object
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True  # type: ignore[attr-defined]
        self.thread.join(30)


def start_thread_server(database: str, data_root: Path, engine: str = "duckdb") -> ThreadServer:
    import uvicorn

    from dpkit.service import ServiceConfig
    from dpkit.service._app import create_app

    app = create_app(
        ServiceConfig(
            database=database, data_root=data_root, bootstrap_token=OFFICER, engine=engine
        )
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the in-process server did not start")
        time.sleep(0.01)
    return ThreadServer(f"http://127.0.0.1:{port}", database, server, thread)


@pytest.fixture
def thread_server(data_root: Path, tmp_path: Path) -> Iterator[ThreadServer]:
    server = start_thread_server(f"sqlite:///{tmp_path}/service.db", data_root)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """One SQLite service for the session (DuckDB engine); tests use their own names."""
    root = tmp_path_factory.mktemp("shared")
    write_people(root / "data")
    server = start_thread_server(f"sqlite:///{root}/service.db", root / "data")
    yield server
    server.stop()


# --- `dpkit serve` itself, as an operator runs it -----------------------------------------------


def start_serve(
    database: str,
    data_root: Path,
    log: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> Server:
    """``python -m dpkit.cli serve`` (the ``dpkit serve`` command) in its own process group,
    with the officer token :data:`OFFICER`, running dpkit from this checkout's ``src`` (or from
    ``$DPKIT_TEST_SERVE_SRC``, e.g. an older checkout, to see a test fail on its code)."""
    port = free_port()
    environ = dict(os.environ)
    code = os.environ.get("DPKIT_TEST_SERVE_SRC") or str(
        Path(__file__).resolve().parents[2] / "src"
    )
    environ["PYTHONPATH"] = code + os.pathsep + environ.get("PYTHONPATH", "")
    environ["DPKIT_BOOTSTRAP_TOKEN"] = OFFICER
    environ.update(env or {})
    handle = open(log, "ab")  # noqa: SIM115 - owned by the server's lifetime
    command = [sys.executable, "-m", "dpkit.cli", "serve", "--database", database]
    command += ["--data-root", str(data_root), "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [*command, *args],
        env=environ,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Server(f"http://127.0.0.1:{port}", process, database, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"dpkit serve exited: {log.read_text()[-3000:]}")
        try:
            health = httpx.get(f"{server.url}/api/v1/health", timeout=1)
            # "starting" while the service loads behind dpkit serve's front app: wait for "ok"
            if health.status_code == 200 and health.json() == {"status": "ok"}:
                return server
            time.sleep(0.1)
        except httpx.HTTPError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"dpkit serve did not start: {log.read_text()[-3000:]}")


def database_url(kind: str, root: Path, request: pytest.FixtureRequest) -> str:
    """A fresh ledger database: a SQLite file under ``root``, or a new schema on the session's
    PostgreSQL server."""
    if kind == "postgres":
        import secrets

        base = str(request.getfixturevalue("postgres_server_url"))
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}schema=t{secrets.token_hex(8)}"
    return f"sqlite:///{root}/service.db"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def serve(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One ``dpkit serve`` per module and ledger store (SQLite, then PostgreSQL); tests
    register datasets and analysts of their own names."""
    root = tmp_path_factory.mktemp(f"serve-{request.param}")
    write_people(root / "data")
    server = start_serve(
        database_url(request.param, root, request), root / "data", root / "server.log"
    )
    yield server
    server.stop()
