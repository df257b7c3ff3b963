"""The service's warm DuckDB engine changes how fast plans run, never what they compute: the same
SQL text and the same exact results as the plain DuckDB engine for every salt; a fresh salt and
fresh noise per query; exact results reused only for salt-free plans; a changed source is
re-read; nothing is read before the reservation; webhooks never delay a request."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from conftest import OFFICER
from dpkit.analytics import Session, count
from dpkit.analytics._engines._duckdb import DuckDBEngine
from dpkit.analytics._expr import col
from dpkit.analytics._query import KeySet, Query, count_distinct_units, histogram, mean
from dpkit.analytics._query import sum as dp_sum
from dpkit.core._losses import PureDP
from dpkit.errors import BudgetExceededError
from dpkit.service import Service, ServiceConfig
from dpkit.service._core import loss_from_parts
from dpkit.service._engine import (
    _SENTINELS,
    LARGE_PLAN,
    SqlBuilder,
    WarmDuckDBEngine,
    plan_size,
    salt_free,
)

SCHEMA = {"age": "numeric"}


def _write(path: Path, seed: int = 0) -> None:
    """People with 1 to 4 rows each (so bounding to 2 rows drops rows of heavy people)."""
    rng = np.random.default_rng(seed)  # test data only, never noise
    people = np.repeat(np.arange(60), rng.integers(1, 5, size=60))
    pd.DataFrame(
        {
            "person": people,
            "age": rng.integers(0, 90, size=people.size),
            "dept": np.where(rng.integers(0, 2, size=people.size) == 1, "a", "b"),
        }
    ).to_csv(path, index=False)


QUERIES = {
    "count": Query().agg(count()),
    "count+units": Query().filter(col("age") >= 10).agg(count(), count_distinct_units()),
    "sum": Query().agg(dp_sum("age", (0, 100))),
    "grouped": Query().group_by("dept", keys=KeySet.from_dict({"dept": ["a", "b"]})).agg(count()),
    "mean": Query().agg(mean("age", (0, 100))),
    "histogram": Query().agg(histogram("age", [0, 30, 60, 90])),
    # a user literal that holds a sentinel salt: the text cannot be cached, and is built as usual
    "sentinel literal": Query().filter(col("age") != _SENTINELS[0]).agg(dp_sum("age", (0, 100))),
}


@pytest.fixture
def csv(tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    _write(path)
    return path


@pytest.fixture
def engines(csv: Path) -> Iterator[tuple[WarmDuckDBEngine, DuckDBEngine, Session]]:
    warm = WarmDuckDBEngine(csv, schema=SCHEMA)
    plain = DuckDBEngine(str(csv), schema=SCHEMA)
    session = Session(str(csv), "person", PureDP(100), engine=warm, max_rows=2)
    yield warm, plain, session
    warm.close()
    plain.close()


def _sorted(table: object) -> list[tuple[object, ...]]:
    rows = table.to_pylist()  # type: ignore[attr-defined]
    return sorted(tuple(row.values()) for row in rows)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_same_sql_and_results_as_the_plain_engine_for_every_salt(
    name: str, engines: tuple[WarmDuckDBEngine, DuckDBEngine, Session]
) -> None:
    warm, plain, session = engines
    assert warm.warm
    compiled = session.compile(QUERIES[name], epsilon=1)
    for salt in (7, 2**62 - 1, _SENTINELS[0]):
        for plan in compiled.plans:
            salted = replace(plan, salt=salt)
            # the cached text is the text the base engine builds over the same (warm) source
            assert warm.sql(salted) == DuckDBEngine.sql(warm, salted)
            assert _sorted(warm.run(salted)) == _sorted(plain.run(salted)), (name, salt)


def _fresh(name: str) -> Query:
    """The query ``name`` built again from scratch: equal to QUERIES[name], but with new
    expression objects (as every request to the service builds them)."""
    where = col("age") >= 10
    rebuilt = {
        "count+units": Query().filter(where).agg(count(), count_distinct_units()),
        "sentinel literal": Query()
        .filter(col("age") != _SENTINELS[0])
        .agg(dp_sum("age", (0, 100))),
        "where grouped": Query()
        .filter((col("age") >= 10) & col("dept").is_in(["a", "b"]))
        .group_by("dept", keys=KeySet.from_dict({"dept": ["a", "b"]}))
        .agg(count(), mean("age", (0, 100))),
    }
    return rebuilt.get(name, QUERIES.get(name, Query()))


@pytest.mark.parametrize("name", ["count+units", "sentinel literal", "where grouped"])
def test_a_query_shape_with_a_where_is_answered_again_from_new_objects(
    name: str, engines: tuple[WarmDuckDBEngine, DuckDBEngine, Session]
) -> None:
    """Issue 21: the SQL templates and exact results were keyed by plans whose ``==`` compared
    expressions, so the second query of a WHERE shape failed (after its reservation) with "an
    expression has no truth value"."""
    warm, plain, session = engines
    shapes = []
    for _ in range(3):
        for plan in session.compile(_fresh(name), epsilon=1).plans:
            assert warm.sql(plan) == DuckDBEngine.sql(warm, plan)
            assert _sorted(warm.run(plan)) == _sorted(plain.run(plan))
        session.evaluate(_fresh(name), epsilon="0.01")
        shapes.append(len(warm._templates))
    # each shape was cached once and found again (none for the sentinel literal)
    assert shapes[0] == shapes[-1] == (0 if name == "sentinel literal" else shapes[0] or 1)


def test_salt_free_plans_are_exactly_the_ones_whose_results_ignore_the_salt(
    engines: tuple[WarmDuckDBEngine, DuckDBEngine, Session],
) -> None:
    """The claim behind reusing exact results: for salt-free plans every salt gives the same
    result on data with people over the bound; the other plans here do depend on the salt."""
    _, plain, session = engines
    free = {"count", "count+units"}
    for name, query in QUERIES.items():
        plans = session.compile(query, epsilon=1).plans
        assert all(salt_free(p) for p in plans) == (name in free), name
        results = {
            tuple(tuple(_sorted(plain.run(replace(p, salt=s)))) for p in plans) for s in range(6)
        }
        if name in free:
            assert len(results) == 1, name
        elif name in ("sum", "mean", "histogram", "sentinel literal"):
            assert len(results) > 1, name  # which rows a heavy person keeps matters


def test_exact_results_are_reused_only_for_salt_free_plans(
    engines: tuple[WarmDuckDBEngine, DuckDBEngine, Session],
) -> None:
    warm, _, session = engines
    counted = session.compile(QUERIES["count"], epsilon=1).plans[0]
    summed = session.compile(QUERIES["sum"], epsilon=1).plans[0]
    runs: list[int] = []
    original = warm._execute
    warm._execute = lambda plan: (runs.append(plan.salt), original(plan))[1]  # type: ignore[method-assign]
    for salt in (1, 2, 3):
        warm.run(replace(counted, salt=salt))
        warm.run(replace(summed, salt=salt))
    assert runs == [1, 1, 2, 3]  # the count ran once; the sum ran for every salt


def test_every_query_gets_a_fresh_salt_and_fresh_noise(
    engines: tuple[WarmDuckDBEngine, DuckDBEngine, Session],
) -> None:
    warm, _, session = engines
    salts: list[int] = []
    original = warm.sql
    warm.sql = lambda plan: (salts.append(plan.salt), original(plan))[1]  # type: ignore[method-assign]
    values = [
        float(session.evaluate(QUERIES["count"], epsilon=0.01).table["count"][0]) for _ in range(6)
    ]
    assert len(set(salts)) == len(salts) == 1  # counts: one run (reused exact result)
    assert len(set(values)) > 1  # noise is drawn for every query, never cached
    for _ in range(2):
        session.evaluate(QUERIES["sum"], epsilon=0.01)
    assert len(set(salts)) == len(salts) == 3  # a fresh salt for every query that runs


def test_a_changed_source_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    pd.DataFrame({"person": [1, 2, 3], "age": [1, 2, 3]}).to_csv(path, index=False)
    warm = WarmDuckDBEngine(path, schema=SCHEMA)
    session = Session(str(path), "person", PureDP(10), engine=warm, max_rows=1)
    plan = session.compile(QUERIES["count"], epsilon=1).plans[0]
    assert warm.run(plan).column(0).to_pylist() == [3]
    pd.DataFrame({"person": [1, 2, 3, 4, 5], "age": [1, 2, 3, 4, 5]}).to_csv(path, index=False)
    assert warm.run(plan).column(0).to_pylist() == [5]
    warm.close()


def test_a_parquet_source_rewritten_with_other_types_is_refused(tmp_path: Path) -> None:
    """Queries are planned on the column types the engine saw (NaN tests are left out for
    integer columns): a Parquet file rewritten with a float column holding NaN in place of an
    integer one is refused, never summed on the old types."""
    from dpkit.errors import InvalidDataError

    path = tmp_path / "people.parquet"
    pd.DataFrame({"person": [1, 2, 3], "age": [1, 2, 3]}).to_parquet(path, index=False)
    warm = WarmDuckDBEngine(path)
    session = Session(str(path), "person", PureDP(10), engine=warm, max_rows=1)
    plan = session.compile(QUERIES["count"], epsilon=1).plans[0]
    assert warm.run(plan).column(0).to_pylist() == [3]
    frame = pd.DataFrame({"person": [1, 2, 3], "age": [1.0, float("nan"), 3.0]})
    frame.to_parquet(path, index=False)
    with pytest.raises(InvalidDataError, match="changed its columns"):
        warm.run(plan)
    warm.close()


def test_large_sources_are_read_in_place(csv: Path) -> None:
    warm = WarmDuckDBEngine(csv, schema=SCHEMA, max_bytes=10)
    plain = DuckDBEngine(str(csv), schema=SCHEMA)
    session = Session(str(csv), "person", PureDP(10), engine=warm, max_rows=2)
    assert not warm.warm
    plan = session.compile(QUERIES["sum"], epsilon=1).plans[0]
    assert _sorted(warm.run(plan)) == _sorted(plain.run(plan))
    warm.close()
    plain.close()


def test_threads_share_one_engine(engines: tuple[WarmDuckDBEngine, DuckDBEngine, Session]) -> None:
    warm, plain, session = engines
    plan = session.compile(QUERIES["sum"], epsilon=1).plans[0]
    expected = [_sorted(plain.run(replace(plan, salt=salt))) for salt in range(5)]
    got: list[object] = []

    def work() -> None:
        got.extend(
            _sorted(warm.run(replace(plan, salt=salt))) == expected[salt] for salt in range(5)
        )

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [True] * 40 and expected


def _service(tmp_path: Path, **kw: object) -> Service:
    (tmp_path / "data").mkdir(exist_ok=True)
    _write(tmp_path / "data" / "people.csv")
    service = Service(
        ServiceConfig(
            database=f"sqlite:///{tmp_path}/s.db",
            data_root=tmp_path / "data",
            bootstrap_token=OFFICER,
            **kw,  # type: ignore[arg-type]
        )
    )
    officer = service.authenticate(OFFICER)
    assert officer is not None
    service.register_dataset(
        officer, "people", "people.csv", "person", SCHEMA, {"max_rows": 2}, PureDP(1)
    )
    service.create_principal(officer, "ana", "analyst")
    service.set_allowance(officer, "people", "ana", PureDP(1))
    return service


def test_nothing_is_read_before_the_reservation(tmp_path: Path) -> None:
    service = _service(tmp_path)
    try:
        ana = service.registry.authenticate(service.registry.issue_token("ana")[1])
        assert ana is not None
        loss = loss_from_parts("0.6", None, None, "loss")
        service.query(ana, "people", loss, sql="SELECT COUNT(*)")
        engine = service._engines["people"]
        runs: list[object] = []
        original = engine.run
        engine.run = lambda plan: (runs.append(plan), original(plan))[1]  # type: ignore[method-assign]
        with pytest.raises(BudgetExceededError):
            service.query(ana, "people", loss, sql="SELECT SUM(age, 0, 100)")
        assert runs == []
    finally:
        service.close()


class _SlowHook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        time.sleep(2)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _SlowHook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_webhooks_are_sent_in_the_background(tmp_path: Path) -> None:
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    service = _service(tmp_path, webhook_url=f"http://127.0.0.1:{hook.server_port}/alerts")
    try:
        ana = service.registry.authenticate(service.registry.issue_token("ana")[1])
        assert ana is not None
        started = time.perf_counter()
        service.query(ana, "people", loss_from_parts("0.6", None, None, "l"), sql="SELECT COUNT(*)")
        assert time.perf_counter() - started < 1.5  # the 2-second webhook did not delay it
        assert service.webhooks is not None and service.webhooks.flush(20)
        crossed = {(a["analyst"], a["threshold_exact"]) for a in _SlowHook.received}
        assert {("ana", "1/2"), (None, "1/2")} <= crossed, _SlowHook.received
    finally:
        service.close()
        hook.shutdown()


def test_registered_datasets_are_loaded_before_the_first_query(tmp_path: Path) -> None:
    service = _service(tmp_path)
    try:
        thread = service.prewarm()
        assert thread is not None
        thread.join(60)
        assert service._engines["people"].warm
    finally:
        service.close()
    (tmp_path / "p").mkdir()
    other = _service(tmp_path / "p", engine="pandas")
    assert other.prewarm() is None  # the pandas engine opens per analyst, on first query
    other.close()


def test_large_plans_are_built_in_the_builder_process_with_the_same_text(csv: Path) -> None:
    """The SQL of a large plan (a long WHERE, many keys or bins) is built in another process,
    by the same function on the same arguments: the texts are identical, and so are results."""
    builder = SqlBuilder()
    warm = WarmDuckDBEngine(csv, schema=SCHEMA, builder=builder)
    plain = DuckDBEngine(str(csv), schema=SCHEMA)
    session = Session(str(csv), "person", PureDP(100), engine=warm, max_rows=2)
    where = col("age") > 0
    for i in range(1, 40):
        where = where & (col("age") != i)
    queries = [
        Query().filter(where).agg(count(), mean("age", (0, 100))),
        Query().agg(histogram("age", list(range(0, 91, 1)))),
        Query()
        .group_by("dept", keys=KeySet.from_dict({"dept": [f"k{i}" for i in range(80)] + ["a"]}))
        .agg(count()),
    ]
    built: list[int] = []
    original = builder.build
    builder.build = lambda jobs: (built.append(len(jobs)), original(jobs))[1]  # type: ignore[method-assign]
    try:
        for query in queries:
            plans = session.compile(query, epsilon=1).plans
            assert max(plan_size(plan) for plan in plans) > LARGE_PLAN
            for plan in plans:
                for salt in (3, 2**62 - 5):
                    salted = replace(plan, salt=salt)
                    assert warm.sql(salted) == DuckDBEngine.sql(warm, salted)
                    assert _sorted(warm.run(salted)) == _sorted(plain.run(salted))
        # each large shape's two sentinel texts, in one call, once
        assert len(built) == len(queries) and all(n == 2 for n in built)
        small = session.compile(QUERIES["count"], epsilon=1).plans[0]
        assert plan_size(small) <= LARGE_PLAN
        calls = len(built)
        warm.sql(small)
        assert len(built) == calls  # small plans are built here
    finally:
        warm.close()
        plain.close()
        builder.close()
