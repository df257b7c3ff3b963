"""One request must not freeze the server (issue 21): while hostile requests arrive (losses such
as "1e-8000000", deep nesting, long key lists and histograms, requests at every size limit, 4 MB
bodies, malformed JSON), ``/health`` on a real ``dpkit serve`` keeps a p99 latency under 100 ms
(measured from a process of its own), and no hostile request gets a 500."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hostile import post_raw, setup

from conftest import Server, database_url, start_serve, write_people
from dpkit.analytics._querytext import MAX_LIST
from dpkit.service._app import MAX_BODY
from dpkit.service._core import MAX_KEYS

SECONDS = 10
HOSTILE_CLIENTS = 4


def _where(n: int, conditions: int) -> str:
    return "SELECT COUNT(*) WHERE " + " AND ".join(f"age > {i + n}" for i in range(conditions))


def _query(dataset: str, **fields: object) -> dict[str, object]:
    return {"dataset": dataset, "loss": {"epsilon": "0.001"}, **fields}


def _histogram(edges: list[int]) -> dict[str, object]:
    return {"aggregations": [{"op": "histogram", "column": "age", "edges": edges}]}


GROUPED = "SELECT dept, COUNT(*) GROUP BY dept"


@functools.cache
def _big_keys(dataset: str) -> bytes:
    keys = {"dept": [f"k{i}" for i in range(200_000)]}
    return json.dumps(_query(dataset, sql=GROUPED, keys=keys)).encode()


@functools.cache
def _big_body(dataset: str) -> bytes:
    return json.dumps({"dataset": dataset, "pad": "x" * 4_000_000}).encode()


# request n (of kind n % len): hostile requests (refused at once) and requests at the size
# limits, new each time (n varies their literals, so that no SQL is reused from a cache)
KINDS: list[Callable[[str, int], object]] = [
    lambda d, n: {"dataset": d, "sql": "SELECT COUNT(*)", "loss": {"epsilon": "1e-8000000"}},
    lambda d, n: {"dataset": d, "sql": "SELECT COUNT(*)", "loss": {"rho": "9" * 90 + "e-400"}},
    lambda d, n: _query(d, sql="SELECT COUNT(*) WHERE " + "(" * 45 + "age > 1" + ")" * 45),
    lambda d, n: _query(d, sql=_where(n, 400)),  # over the WHERE size limit
    lambda d, n: _query(d, sql=_where(n, 150)),  # at the WHERE size limit
    lambda d, n: _query(d, sql=GROUPED, keys={"dept": [f"k{i + n}" for i in range(MAX_KEYS)]}),
    lambda d, n: _big_keys(d),
    lambda d, n: _query(d, sql=GROUPED, keys={"dept": ["a", "\ud800"]}),
    lambda d, n: _query(d, query=_histogram([i + n for i in range(MAX_LIST)])),
    lambda d, n: _query(d, query=_histogram(list(range(9999)))),
    lambda d, n: _query(d, query={"aggregations": [{"op": "count"}]}),
    lambda d, n: b'{"dataset": ' + b"[" * 200_000,
    lambda d, n: _big_body(d),
]


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    write_people(tmp_path / "data")
    started = start_serve(
        database_url(request.param, tmp_path, request), tmp_path / "data", tmp_path / "log"
    )
    yield started
    started.stop()


PROBE = """
import json, sys, time
import httpx
url, seconds = sys.argv[1], float(sys.argv[2])
out = []
with httpx.Client(base_url=url, timeout=30) as http:
    http.get("/api/v1/health")
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        assert http.get("/api/v1/health").status_code == 200
        out.append(time.perf_counter() - start)
        time.sleep(0.01)
print(json.dumps(out), flush=True)
"""


def _probe(url: str, seconds: float) -> subprocess.Popen[str]:
    """``/health`` timed from a process of its own (the senders' work in this process must not
    count as the server's latency); prints "ready", then the latencies as JSON."""
    process = subprocess.Popen(
        [sys.executable, "-c", PROBE, url, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def test_health_stays_fast_while_hostile_requests_arrive(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as http:
        (token,) = setup(http, "load", ["load_a"])
    statuses: list[int] = []
    stop = threading.Event()

    def hostile(offset: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            i = offset
            while not stop.is_set():
                body = KINDS[i % len(KINDS)]("load", i)
                try:
                    response = post_raw(http, "/api/v1/query", token, body)
                except httpx.TransportError:
                    # a body over the limit is refused before it is read, and the server may
                    # close the connection while the client still sends it
                    assert isinstance(body, bytes) and len(body) > MAX_BODY
                    statuses.append(413)
                else:
                    statuses.append(response.status_code)
                i += 1

    # a shared CI machine can get busy in the middle of one measurement: up to three attempts,
    # each with its own quiet baseline; a server frozen by one request (seconds to minutes, as
    # before issue 21) fails all three
    failures = []
    for _attempt in range(3):
        message = _attempt_once(server, statuses, hostile, stop)
        if message is None:
            return
        failures.append(message)
    raise AssertionError("; ".join(failures))


def _attempt_once(
    server: Server, statuses: list[int], hostile: Callable[[int], None], stop: threading.Event
) -> str | None:
    """One measurement: None when /health kept its p99 under the limit, else why not."""
    stop.clear()
    quiet, _ = _probe(server.url, 3).communicate(timeout=120)
    baseline = _p99(json.loads(quiet.strip().splitlines()[-1]))
    probe = _probe(server.url, SECONDS)
    senders = [threading.Thread(target=hostile, args=(k,)) for k in range(HOSTILE_CLIENTS)]
    for sender in senders:
        sender.start()
    out, _ = probe.communicate(timeout=SECONDS + 120)
    stop.set()
    for thread in senders:
        thread.join(120)
    latencies = json.loads(out.strip().splitlines()[-1])
    assert len(statuses) >= 2 * HOSTILE_CLIENTS, statuses
    assert 500 not in statuses, sorted(set(statuses))
    assert len(latencies) > 100
    p99 = _p99(latencies)
    # 100 ms; on a machine so busy that /health alone has a p99 above 25 ms, four times that
    limit = max(0.1, 4 * baseline)
    if p99 < limit:
        return None
    return (
        f"/health p99 {p99 * 1000:.0f} ms over {len(latencies)} requests "
        f"(without hostile requests: {baseline * 1000:.0f} ms)"
    )
