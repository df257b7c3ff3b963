"""The DP TPC-H queries of benchmarks/tpch.py through dpkit's two front ends: the command line
(``dpkit query QUERY --table ... --public ... --unit ... --link ...``, a whole process per query,
as a user runs it) and the service (``POST /api/v1/query`` on a multi-table dataset registered
with ``tables``/``public``/``links``), each beside DuckDB's time for the same query without
privacy, measured in the same run.

The CLI time is the whole process (Python start, imports, opening the ledger and the Parquet
files, planning, the join and the release); the service time is a request to an in-process
server (FastAPI's TestClient: routing, JSON, auth, the ledger) after one first, untimed request,
which opens the analyst's session over the tables and computes the links' key maps (a real
server keeps them across requests). "API s" is the warm ``Session.evaluate_sql`` of
benchmarks/tpch.py in the same run, "API 1st" a new session's first query (in process: what
the CLI does but for starting Python, importing dpkit and writing its ledger file).

``--check`` first runs each query once through the Python API, the CLI (in process) and the
service with the planner's salt fixed, and fails unless the three give the same exact (bounded,
pre-noise) engine outputs and group keys.

    python benchmarks/tpch_frontends.py --dir /work/tpch/sf1 --runs 3 --check
    python benchmarks/tpch_frontends.py --dir /work/tpch/sf1 --queries Q3 Q13
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OFFICER = "officer-token-for-the-tpch-benchmark-0123456789"


def _load(name: str, path: Path) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def tpch() -> Any:
    """benchmarks/tpch.py as a module (QUERIES, PRIVATE, PUBLIC, LINKS, UNIT, _plain)."""
    return _load("dpkit_bench_tpch", ROOT / "benchmarks" / "tpch.py")


def write_tiny(directory: Path) -> Path:
    """The tiny TPC-H database of the tests (tests/engines/_tpch_tiny.py) as Parquet files in
    ``directory``, for fast tests of the front ends."""
    tiny = _load("dpkit_tests_tpch_tiny", ROOT / "tests" / "engines" / "_tpch_tiny.py")
    directory.mkdir(parents=True, exist_ok=True)
    for table, frame in tiny.tables().items():
        frame.to_parquet(directory / f"{table}.parquet")
    return directory


def python_api(directory: Path, name: str, epsilon: float = 1.0) -> Any:
    """Query ``name`` through ``Session.evaluate_sql`` over ``directory``'s files (a session
    of its own)."""
    bench = tpch()
    query = bench.QUERIES[name]
    session = bench._session(directory, "duckdb", epsilon)
    try:
        return session.evaluate_sql(
            query.dp, keys=query.keys or None, max_rows=query.max_rows, epsilon=epsilon
        )
    finally:
        session.close()


def keys_flags(keys: dict[str, list[Any]]) -> list[str]:
    """A query's public group keys as ``--keys col=v1,v2`` flags."""
    return [f"--keys={column}=" + ",".join(map(str, values)) for column, values in keys.items()]


def cli_args(
    name: str, directory: Path, dataset: str, ledger: str, epsilon: float = 1.0
) -> list[str]:
    """The arguments of ``dpkit query`` for TPC-H query ``name`` over ``directory``'s files."""
    bench = tpch()
    query = bench.QUERIES[name]
    args = ["query", query.dp]
    args += [f"--table={t}={directory / t}.parquet" for t in bench.PRIVATE]
    args += [f"--public={t}={directory / t}.parquet" for t in bench.PUBLIC]
    args += [f"--link={child}={parent}" for child, parent in bench.LINKS.items()]
    args += [f"--unit={bench.UNIT}", f"--dataset={dataset}", f"--ledger={ledger}"]
    args += [f"--epsilon={epsilon}", f"--max-rows={query.max_rows}"]
    return args + keys_flags(query.keys)


def dataset_name(max_rows: int) -> str:
    """The service's datasets carry their bound (the officer's): one per distinct max_rows."""
    return f"tpch_rows{max_rows}"


def dataset_body(max_rows: int, prefix: str = "") -> dict[str, Any]:
    """The registration of the TPC-H tables (under ``prefix`` in the data root) as a service
    dataset over several tables with ``max_rows`` per customer."""
    bench = tpch()
    return {
        "name": dataset_name(max_rows),
        "tables": {t: f"{prefix}{t}.parquet" for t in bench.PRIVATE},
        "public": {t: f"{prefix}{t}.parquet" for t in bench.PUBLIC},
        "privacy_unit": bench.UNIT,
        "links": dict(bench.LINKS),
        "schema": {},
        "bounds": {"max_rows": max_rows},
        "budget": {"epsilon": "1000000"},
    }


def query_body(name: str, epsilon: float = 1.0) -> dict[str, Any]:
    query = tpch().QUERIES[name]
    body: dict[str, Any] = {
        "dataset": dataset_name(query.max_rows),
        "sql": query.dp,
        "loss": {"epsilon": str(epsilon)},
    }
    if query.keys:
        body["keys"] = query.keys
    return body


def register(client: Any, names: list[str], prefix: str = "", officer: str = OFFICER) -> str:
    """Register a dataset per distinct bound of ``names`` (the files under ``prefix`` in the
    data root) and an analyst allowed on each; returns the analyst's token."""
    auth = {"Authorization": f"Bearer {officer}"}
    bounds = sorted({tpch().QUERIES[n].max_rows for n in names})
    for max_rows in bounds:
        r = client.post("/api/v1/datasets", headers=auth, json=dataset_body(max_rows, prefix))
        r.raise_for_status()
    r = client.post("/api/v1/principals", headers=auth, json={"name": "ana", "role": "analyst"})
    r.raise_for_status()
    token = str(r.json()["token"])
    for max_rows in bounds:
        r = client.put(
            f"/api/v1/datasets/{dataset_name(max_rows)}/allowances/ana",
            headers=auth,
            json={"total": {"epsilon": "1000000"}},
        )
        r.raise_for_status()
    return token


@contextlib.contextmanager
def service(data_root: Path, state: Path) -> Iterator[Any]:
    """An in-process service (TestClient) over ``data_root``, its state under ``state``."""
    from fastapi.testclient import TestClient

    from dpkit.service import ServiceConfig
    from dpkit.service._app import create_app

    app = create_app(
        ServiceConfig(
            database=f"sqlite:///{state}/service.db",
            data_root=data_root,
            bootstrap_token=OFFICER,
        )
    )
    with TestClient(app) as client:
        yield client


def ask(client: Any, token: str, name: str, epsilon: float = 1.0) -> dict[str, Any]:
    r = client.post(
        "/api/v1/query",
        headers={"Authorization": f"Bearer {token}"},
        json=query_body(name, epsilon),
    )
    if r.status_code != 200:
        raise RuntimeError(f"the service refused {name}: {r.status_code} {r.text[:2000]}")
    return dict(r.json())


def create_budget(ledger: str, dataset: str = "tpch") -> None:
    import dpkit as dp
    from dpkit.ledger import BudgetMonitor, Ledger

    opened = Ledger.open(ledger, monitor=BudgetMonitor(log=False))
    try:
        opened.create_budget(dataset, dp.PureDP(1_000_000), privacy_unit=tpch().UNIT)
    finally:
        opened.close()


@contextlib.contextmanager
def exact_outputs(fixed_salt: bool = True) -> Iterator[list[list[Any]]]:
    """Record the exact engine outputs every release in this process is computed from (one
    entry per release: each plan's rows, sorted, and the released group keys), with the
    planner's salt fixed so that rows beyond a bound are dropped alike in every front end."""
    from unittest import mock

    from dpkit.analytics._planner import _compile
    from dpkit.analytics._planner._compiled import CompiledQuery

    seen: list[list[Any]] = []
    original = CompiledQuery.release

    def release(self: Any, results: Any, alpha: float = 0.05) -> Any:
        tables, accuracy = original(self, results, alpha)
        if any(table.num_rows for table in results):  # not the CLI's rehearsal on no rows
            exact = [sorted(map(repr, table.to_pylist())) for table in results]
            labels = tables["main"][list(self.keys)].to_dict("records")
            seen.append([*exact, repr(labels)])  # the group keys as released, with their types
        return tables, accuracy

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(CompiledQuery, "release", release))
        if fixed_salt:
            words = _compile.random_words
            stack.enter_context(
                mock.patch.object(_compile, "random_words", lambda n: words(n) * 0 + 12345)
            )
        yield seen


def check(directory: Path, names: list[str], state: Path) -> None:
    """Each query through the Python API, the CLI (in process) and the service, with the salt
    fixed: the same exact outputs, or an error naming the query."""
    from typer.testing import CliRunner

    from dpkit.cli import app

    ledger = str(state / "check.sqlite")
    create_budget(ledger)
    with exact_outputs() as seen, service(directory, state / "check") as client:
        token = register(client, names)
        for name in names:
            del seen[:]
            python_api(directory, name)
            result = CliRunner().invoke(app, cli_args(name, directory, "tpch", ledger))
            if result.exit_code != 0:
                raise RuntimeError(f"dpkit query refused {name}: {result.output[-2000:]}")
            ask(client, token, name)
            api, cli, served = seen
            if not api == cli == served:
                raise RuntimeError(f"{name}: the front ends' exact outputs differ")
            print(f"{name}: the Python API, the CLI and the service agree before noise")


def time_cli(directory: Path, name: str, ledger: str) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-m", "dpkit", *cli_args(name, directory, "tpch", ledger)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"dpkit query {name} failed: {(done.stdout + done.stderr)[-2000:]}")
    return elapsed


def main() -> None:
    bench = tpch()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="TPC-H Parquet files")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queries", nargs="*", default=list(bench.QUERIES))
    parser.add_argument("--check", action="store_true", help="first check the front ends agree")
    args = parser.parse_args()
    directory = args.dir.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        state = Path(scratch)
        if args.check:
            check(directory, args.queries, state)
        ledger = str(state / "cli.sqlite")
        create_budget(ledger)
        print(
            f"TPC-H from {directory}, ε = 1 per query, median of {args.runs} runs: dpkit query "
            "(whole process), the service (in process, warm), the Python API (warm "
            "Session.evaluate_sql; 1st: a new session's first query) and DuckDB without privacy; "
            f"load average {os.getloadavg()[0]:.1f} at the start"
        )
        head = (
            f"{'query':6} {'CLI s':>7} {'service s':>10} {'API s':>7} {'API 1st':>8} "
            f"{'DuckDB s':>9} {'CLI/DuckDB':>11} {'service/DuckDB':>15}"
        )
        print(head)
        print("-" * len(head))
        session = bench._session(directory, "duckdb", 1.0)
        with service(directory, state) as client:
            token = register(client, args.queries)
            for name in args.queries:
                query = bench.QUERIES[name]
                _, plain = bench._plain(directory, query.plain)
                python = statistics.median(bench.run_query(session, query, {}, args.runs, 1).times)
                cold = []
                for _ in range(args.runs):
                    start = time.perf_counter()
                    python_api(directory, name)
                    cold.append(time.perf_counter() - start)
                cli = statistics.median(time_cli(directory, name, ledger) for _ in range(args.runs))
                ask(client, token, name)  # opens the session, computes the key maps
                times = []
                for _ in range(args.runs):
                    start = time.perf_counter()
                    ask(client, token, name)
                    times.append(time.perf_counter() - start)
                served = statistics.median(times)
                print(
                    f"{name:6} {cli:>7.2f} {served:>10.3f} {python:>7.3f} "
                    f"{statistics.median(cold):>8.3f} {plain:>9.3f} {cli / plain:>10.1f}x "
                    f"{served / plain:>14.1f}x"
                )
        session.close()


if __name__ == "__main__":
    main()
