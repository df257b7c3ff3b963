"""A dataset over several tables in the service (issue 23): registered with private tables,
public ones, the unit as ``table.column``, links and a per-table schema; answered over SQL
with joins, a per-person subquery and a LEFT JOIN, twice, from two analysts; refusals charge
nothing; analysts see the tables' names and links, never their paths."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from conftest import OFFICER, Api

EXACT = {"epsilon": "1000000"}  # a count's noise is 0 at ε = 10^6 (QUERY_LOSS_CEILING)


def _write(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "c_custkey": [1, 2, 3, 4, 5, 6],
            "c_segment": ["AUTO", "AUTO", "BUILD", "BUILD", "MACH", "MACH"],
            "c_nationkey": [0, 1, 1, 2, 7, 0],
        }
    ).to_parquet(root / "customer.parquet")
    pd.DataFrame(
        {
            "o_orderkey": [10, 11, 12, 13, 14, 15, 16],
            "o_custkey": [1, 1, 2, 3, 3, 3, 5],
            "o_totalprice": [100.0, 250.5, 80.0, 10.0, 20.0, 30.0, 999.0],
        }
    ).to_csv(root / "orders.csv", index=False)
    pd.DataFrame(
        {
            "l_orderkey": [10, 10, 11, 12, 13, 13, 13, 14, 16, 16],
            "l_extendedprice": [100.0, 200, 300, 400, 500, 600, 700, 800, 900, 1000],
        }
    ).to_parquet(root / "lineitem.parquet")
    pd.DataFrame({"n_nationkey": [0, 1, 2], "n_name": ["FRANCE", "PERU", "KENYA"]}).to_parquet(
        root / "nation.parquet"
    )


def _body(**change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "tpch",
        "tables": {
            "customer": "tpch/customer.parquet",
            "orders": "tpch/orders.csv",
            "lineitem": "tpch/lineitem.parquet",
        },
        "public": {"nation": "tpch/nation.parquet"},
        "privacy_unit": "customer.c_custkey",
        "links": {
            "orders.o_custkey": "customer.c_custkey",
            "lineitem.l_orderkey": "orders.o_orderkey",
        },
        "schema": {
            "orders.o_custkey": "numeric",
            "orders.o_orderkey": "numeric",
            "orders.o_totalprice": "numeric",
        },
        "bounds": {"max_rows": 20},
        "budget": {"epsilon": "100000000"},
    }
    body.update(change)
    return body


@pytest.fixture
def tpch(api: Api, data_root: Path) -> Api:
    _write(data_root / "tpch")
    r = api.post("/api/v1/datasets", OFFICER, json=_body())
    assert r.status_code == 201, r.text
    return api


def _spent(api: Api) -> dict[str | None, float]:
    me = api.get("/api/v1/me", OFFICER).json()
    return {
        b["analyst"]: float(b["spent"]["epsilon"]) for b in me["budgets"] if b["dataset"] == "tpch"
    }


def _ask(api: Api, token: str, sql: str, **more: Any) -> Any:
    r = api.post(
        "/api/v1/query", token, json={"dataset": "tpch", "sql": sql, "loss": EXACT, **more}
    )
    assert r.status_code == 200, r.text
    return r.json()["tables"]["main"]


QUERIES = [
    (
        "SELECT c_segment, COUNT(*) AS n FROM customer JOIN orders ON c_custkey = o_custkey "
        "JOIN lineitem ON l_orderkey = o_orderkey GROUP BY c_segment",
        {"keys": {"c_segment": ["AUTO", "BUILD", "MACH"]}},
        "c_segment",
        {"AUTO": 4, "BUILD": 4, "MACH": 2},
    ),
    (
        "SELECT COUNT(*) AS buyers FROM (SELECT o_custkey, COUNT(*) AS n FROM orders "
        "GROUP BY o_custkey) AS t",
        {},
        None,
        {None: 4},
    ),
    (
        "SELECT n_name, COUNT(*) AS n FROM customer LEFT JOIN nation "
        "ON c_nationkey = n_nationkey GROUP BY n_name ORDER BY n DESC",
        {"keys": {"n_name": ["FRANCE", "PERU", "KENYA"]}},
        "n_name",
        {"FRANCE": 2, "PERU": 2, "KENYA": 1},
    ),
]


def test_joined_queries_twice_from_two_analysts(tpch: Api) -> None:
    ana, bob = tpch.analyst("ana", "tpch", "10000000"), tpch.analyst("bob", "tpch", "10000000")
    for sql, more, key, truth in QUERIES:
        for token in (ana, bob, ana, bob):  # every shape twice, from two analysts
            rows = _ask(tpch, token, sql, **more)
            got = {row[key] if key else None: row[next(c for c in row if c != key)] for row in rows}
            assert {k: round(v) for k, v in got.items()} == truth, (sql, rows)
    assert _spent(tpch) == {None: 12e6, "ana": 6e6, "bob": 6e6}


def test_analysts_see_tables_and_links_never_paths(tpch: Api) -> None:
    ana = tpch.analyst("ana", "tpch")
    (shown,) = tpch.get("/api/v1/datasets", ana).json()
    assert shown["privacy_unit"] == "customer.c_custkey"
    assert shown["tables"] == {
        "private": ["customer", "lineitem", "orders"],
        "public": ["nation"],
        "links": {
            "orders.o_custkey": "customer.c_custkey",
            "lineitem.l_orderkey": "orders.o_orderkey",
        },
    }
    assert shown["source"] is None and "parquet" not in tpch.get("/api/v1/datasets", ana).text
    (officer_view,) = tpch.get("/api/v1/datasets", OFFICER).json()
    assert officer_view["tables"]["private"]["orders"] == "tpch/orders.csv"


def test_a_changed_file_is_read_again(tpch: Api, data_root: Path) -> None:
    ana = tpch.analyst("ana", "tpch", "10000000")
    sql = "SELECT COUNT(*) AS n FROM customer"
    assert _ask(tpch, ana, sql)[0]["n"] == 6
    frame = pd.read_parquet(data_root / "tpch" / "customer.parquet")
    pd.concat([frame, frame.assign(c_custkey=frame.c_custkey + 100)]).to_parquet(
        data_root / "tpch" / "customer.parquet"
    )
    st = os.stat(data_root / "tpch" / "customer.parquet")
    os.utime(data_root / "tpch" / "customer.parquet", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert _ask(tpch, ana, sql)[0]["n"] == 12


BAD_DATASETS = [
    {"links": {"orders.o_custkey": "customer.c_custkey"}},  # lineitem has no path to the unit
    {"links": {"ordrs.o_custkey": "customer.c_custkey"}},
    {"privacy_unit": "c_custkey"},
    {"privacy_unit": "nation.n_nationkey"},
    {"schema": {"o_totalprice": "numeric"}},
    {"schema": {"orders.nope": "numeric"}},
    {"source": "tpch/orders.csv"},
    {"tables": {"customer": "../secret.csv"}},
    {"public": {"nation": "/etc/passwd"}},
]


@pytest.mark.parametrize("change", BAD_DATASETS)
def test_bad_registrations_are_refused(api: Api, data_root: Path, change: dict[str, Any]) -> None:
    _write(data_root / "tpch")
    r = api.post("/api/v1/datasets", OFFICER, json=_body(**change))
    assert 400 <= r.status_code < 500, r.text
    assert api.get("/api/v1/datasets", OFFICER).json() == []


def test_refused_queries_charge_nothing(tpch: Api) -> None:
    ana = tpch.analyst("ana", "tpch", "10000000")
    bad = [
        {"sql": "SELECT COUNT(*) FROM orders JOIN customer ON o_custkey < c_custkey"},
        {"sql": "SELECT COUNT(*) FROM orders JOIN customer ON o_nope = c_custkey"},
        {"sql": "SELECT COUNT(*) FROM read_csv('/etc/passwd')"},
        {"sql": "SELECT COUNT(*) FROM 'tpch/orders.csv'"},
        {"sql": "SELECT COUNT(*) FROM shops"},
        {"sql": "SELECT c_segment, COUNT(*) FROM customer GROUP BY c_segment"},  # no keys, no δ
        {"sql": "SELECT COUNT(*) FROM customer", "keys": {"c_segment": ["AUTO"]}},
        {"query": {"aggregations": [{"op": "count"}]}},  # the JSON model reads one table
    ]
    for body in bad:
        r = tpch.post(
            "/api/v1/query", ana, json={"dataset": "tpch", "loss": {"epsilon": "1"}, **body}
        )
        assert 400 <= r.status_code < 500, (body, r.text)
    assert _spent(tpch) == {None: 0.0, "ana": 0.0}


def test_dpkit_query_server_answers_a_join(tpch: Api, capsys: pytest.CaptureFixture[str]) -> None:
    from fractions import Fraction

    from dpkit.cli.remote import query_remote
    from dpkit.core._losses import PureDP

    ana = tpch.analyst("ana", "tpch", "10000000")
    for _ in range(2):
        query_remote(
            server="http://testserver",
            token=ana,
            name="tpch",
            query=QUERIES[0][0],
            query_loss=PureDP(Fraction(10**6)),
            keys=["c_segment=AUTO,BUILD,MACH"],
            alpha=0.05,
            http=tpch.client,
        )
        out = capsys.readouterr().out
        assert "after the joins" in out
        for segment, n in QUERIES[0][3].items():
            assert re.search(rf"{segment}\s*│\s*{n}\b", out), out
    assert _spent(tpch) == {None: 2e6, "ana": 2e6}


def test_a_truncated_join_needs_the_officer_s_max_per_key(api: Api, data_root: Path) -> None:
    """Customers of the same nation pair rows of different people: refused (nothing charged)
    unless the officer registered bounds.max_per_key; then each side keeps one row per key
    (max_rows 1): the four nation keys give four pairs."""
    _write(data_root / "tpch")
    sql = "SELECT COUNT(*) AS n FROM customer a JOIN customer b ON a.c_nationkey = b.c_nationkey"
    r = api.post("/api/v1/datasets", OFFICER, json=_body(bounds={"max_rows": 1}))
    assert r.status_code == 201, r.text
    ana = api.analyst("ana", "tpch", "10000000")
    r = api.post("/api/v1/query", ana, json={"dataset": "tpch", "sql": sql, "loss": EXACT})
    assert r.status_code == 400 and "max_per_key" in r.text, r.text
    assert _spent(api) == {None: 0.0, "ana": 0.0}
    body = _body(name="tpch2", bounds={"max_rows": 1, "max_per_key": 1})
    r = api.post("/api/v1/datasets", OFFICER, json=body)
    assert r.status_code == 201, r.text
    bob = api.analyst("bob", "tpch2", "10000000")
    for _ in range(2):
        r = api.post("/api/v1/query", bob, json={"dataset": "tpch2", "sql": sql, "loss": EXACT})
        assert r.status_code == 200, r.text
        assert round(r.json()["tables"]["main"][0]["n"]) == 4
    r = api.post("/api/v1/datasets", OFFICER, json=_body(name="t3", bounds={"max_per_key": 0}))
    assert r.status_code in (400, 422), r.text
