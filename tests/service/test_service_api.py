"""The service API: roles, isolation, allowances, the audit log; refusals never charge."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import OFFICER, Api

HOSTILE_SQL = [
    "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
    "SELECT COUNT(*) FROM '/etc/passwd'",
    "SELECT COUNT(*) FROM 'secret.csv'",
    "SELECT COUNT(*) FROM other_table",
    "SELECT COUNT(*) FROM main.people",
    "SELECT COUNT(*); DROP TABLE svc_audit",
    "SELECT COUNT(*) WHERE age > (SELECT MAX(age) FROM people)",
    "SELECT COUNT(*) WHERE read_text('/etc/passwd') = 'x'",
    "SELECT COUNT(*) WHERE getenv('HOME') = 'x'",
    "SELECT COUNT(*) UNION SELECT COUNT(*)",
    "SELECT age FROM people",
    "SELECT COUNT(*) FROM people JOIN people p2 ON TRUE",
    "COPY people TO '/tmp/x.csv'",
    "ATTACH '/tmp/x.db'",
    "",
]

HOSTILE_SOURCES = [
    "../secret.csv",
    "/etc/passwd",
    "sub/../../secret.csv",
    "file:///etc/passwd",
    "~/x.csv",
    "link.csv",  # a symlink pointing outside the data root
    "people.txt",
    "missing.csv",
    "people.csv\x00.txt",
    ".",  # the data root itself
    "sub",  # a directory that does not hold only Parquet files
]


def _spent(api: Api, analyst: str | None = None) -> float:
    me = api.get("/api/v1/me", OFFICER).json()
    for b in me["budgets"]:
        if b["dataset"] == "people" and b["analyst"] == analyst:
            return float(b["spent"]["epsilon"])
    raise AssertionError("no budget")


def test_missing_wrong_revoked_and_wrong_role_tokens_are_refused(api: Api) -> None:
    assert api.register().status_code == 201
    ana = api.analyst("ana")
    assert api.get("/api/v1/me").status_code == 401
    assert api.get("/api/v1/me", "not-a-token").status_code == 401
    assert api.client.get("/api/v1/me", headers={"Authorization": "Basic abc"}).status_code == 401
    assert api.count(ana).status_code == 200
    assert api.count(OFFICER).status_code == 403  # officers do not query
    assert api.register("other").status_code == 201
    assert api.post("/api/v1/principals", ana, json={"name": "mallory"}).status_code == 403
    assert api.get("/api/v1/audit", ana).status_code == 403
    tokens = api.get("/api/v1/tokens", OFFICER).json()
    ana_token = next(t for t in tokens if t["principal"] == "ana")
    assert "token" not in ana_token and "token_hash" not in ana_token
    assert api.delete(f"/api/v1/tokens/{ana_token['token_id']}", OFFICER).status_code == 204
    before = _spent(api, "ana")
    assert api.count(ana).status_code == 401
    assert _spent(api, "ana") == before


def test_tokens_are_stored_hashed(api: Api, tmp_path: Path) -> None:
    import sqlite3

    api.register()
    token = api.analyst("ana")
    conn = sqlite3.connect(tmp_path / "service.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    assert token not in dump and OFFICER not in dump


def test_analysts_see_only_their_own_receipts_and_never_the_source(api: Api) -> None:
    api.register()
    ana, bob = api.analyst("ana", epsilon="0.5"), api.analyst("bob", epsilon="0.5")
    r = api.count(ana)
    assert r.status_code == 200
    body = r.json()
    assert body["receipt"]["analyst"] == "ana" and body["tables"]["main"][0]["count_low"] <= 1e9
    assert api.count(bob).status_code == 200
    mine = api.get("/api/v1/receipts", ana).json()
    assert [x["analyst"] for x in mine] == ["ana"]
    assert api.get("/api/v1/receipts?analyst=bob", ana).status_code == 403
    assert len(api.get("/api/v1/receipts", OFFICER).json()) == 2
    datasets = api.get("/api/v1/datasets", ana).json()
    assert [d["name"] for d in datasets] == ["people"]
    assert all(d["source"] is None for d in datasets)
    assert "people.csv" not in api.get("/api/v1/datasets", ana).text
    assert api.get("/api/v1/me", ana).json()["budgets"][0]["analyst"] == "ana"
    # a dataset without an allowance is invisible (and cannot be queried)
    api.register("hidden")
    assert "hidden" not in api.get("/api/v1/datasets", ana).text
    assert api.count(ana, dataset="hidden").status_code == 404


def test_allowances_adjust_but_never_below_spend_and_are_audited(api: Api) -> None:
    api.register()
    ana = api.analyst("ana", epsilon="0.1")
    for _ in range(5):
        assert api.count(ana, "0.02").status_code == 200
    assert api.count(ana, "0.02").status_code == 409  # allowance spent
    lower = api.put(
        "/api/v1/datasets/people/allowances/ana", OFFICER, json={"total": {"epsilon": "0.05"}}
    )
    assert lower.status_code == 400 and "already spent" in lower.json()["detail"]
    raise_ = api.put(
        "/api/v1/datasets/people/allowances/ana", OFFICER, json={"total": {"epsilon": "0.2"}}
    )
    assert raise_.status_code == 200 and raise_.json()["spent"]["epsilon"] == pytest.approx(0.1)
    assert api.count(ana, "0.02").status_code == 200
    over = api.put(
        "/api/v1/datasets/people/allowances/ana", OFFICER, json={"total": {"epsilon": "2"}}
    )
    assert over.status_code == 400  # beyond the dataset's budget
    actions = [(a["action"], a["outcome"]) for a in api.get("/api/v1/audit", OFFICER).json()]
    assert ("query", "answered") in actions and ("query", "refused") in actions
    assert ("adjust_allowance", "ok") in actions and ("set_allowance", "refused") in actions
    assert ("register_dataset", "ok") in actions


def test_hostile_sql_is_refused_and_never_charges(api: Api) -> None:
    api.register()
    ana = api.analyst("ana")
    for sql in HOSTILE_SQL:
        r = api.post(
            "/api/v1/query", ana, json={"dataset": "people", "sql": sql, "loss": {"epsilon": "0.1"}}
        )
        assert 400 <= r.status_code < 500, (sql, r.status_code, r.text)
        assert "root:" not in r.text
    assert _spent(api, "ana") == 0
    assert _spent(api, None) == 0
    refused = [
        a for a in api.get("/api/v1/audit?limit=100", OFFICER).json() if a["outcome"] == "refused"
    ]
    assert len(refused) == len(HOSTILE_SQL)


def test_hostile_identifiers_are_refused(api: Api) -> None:
    api.register()
    ana = api.analyst("ana")
    for name in ("x'; DROP TABLE svc_audit; --", "../people", "a b", "é", "x" * 65):
        r = api.post(
            "/api/v1/query",
            ana,
            json={"dataset": name, "sql": "SELECT COUNT(*)", "loss": {"epsilon": "0.1"}},
        )
        assert 400 <= r.status_code < 500
        r = api.post("/api/v1/principals", OFFICER, json={"name": name})
        assert r.status_code == 422
    for column in ("age; DROP", '"age"', "age)"):
        model = {"aggregations": [{"op": "sum", "column": column, "lower": 0, "upper": 1}]}
        r = api.post(
            "/api/v1/query",
            ana,
            json={"dataset": "people", "query": model, "loss": {"epsilon": "0.1"}},
        )
        assert r.status_code == 400, r.text
    r = api.register("bad name")
    assert r.status_code == 422
    assert _spent(api, "ana") == 0


def test_paths_escaping_the_data_root_are_refused(api: Api, data_root: Path) -> None:
    (data_root / "sub").mkdir()
    (data_root / "sub" / "notes.txt").write_text("x")
    os.symlink(data_root.parent / "secret.csv", data_root / "link.csv")
    (data_root / "people.txt").write_text("x")
    for i, source in enumerate(HOSTILE_SOURCES):
        r = api.post(
            "/api/v1/datasets",
            OFFICER,
            json={
                "name": f"d{i}",
                "source": source,
                "privacy_unit": "person",
                "budget": {"epsilon": 1},
            },
        )
        assert 400 <= r.status_code < 500, (source, r.text)
        assert "salary" not in r.text
    assert api.get("/api/v1/datasets", OFFICER).json() == []


def test_json_query_model_with_declared_bounds_and_group_keys(api: Api) -> None:
    api.register()
    ana = api.analyst("ana")
    model = {
        "aggregations": [{"op": "count"}, {"op": "mean", "column": "age", "name": "avg_age"}],
        "where": "age >= 10",
        "group_by": ["dept"],
    }
    r = api.post(
        "/api/v1/query",
        ana,
        json={
            "dataset": "people",
            "query": model,
            "keys": {"dept": ["a", "b"]},
            "loss": {"epsilon": "0.5"},
        },
    )
    assert r.status_code == 200, r.text
    rows = r.json()["tables"]["main"]
    assert sorted(row["dept"] for row in rows) == ["a", "b"]
    assert {"count", "count_low", "count_high", "avg_age"} <= set(rows[0])
    assert r.json()["remaining"]["epsilon"] == pytest.approx(0.5)


def test_unknown_columns_and_bad_losses_are_refused_before_charging(api: Api) -> None:
    api.register()
    ana = api.analyst("ana")
    bad = [
        {"dataset": "people", "sql": "SELECT SUM(salary, 0, 1)", "loss": {"epsilon": "0.1"}},
        {"dataset": "people", "sql": "SELECT COUNT(*)", "loss": {"epsilon": "-1"}},
        {"dataset": "people", "sql": "SELECT COUNT(*)", "loss": {"epsilon": "nan"}},
        {"dataset": "people", "sql": "SELECT COUNT(*)", "loss": {}},
        {"dataset": "people", "sql": "SELECT COUNT(*)", "loss": {"epsilon": "5"}},
        {
            "dataset": "people",
            "sql": "SELECT dept, COUNT(*) GROUP BY dept",
            "loss": {"epsilon": "0.1"},
        },
    ]
    for body in bad:
        r = api.post("/api/v1/query", ana, json=body)
        assert 400 <= r.status_code < 500, (body, r.text)
    assert _spent(api, "ana") == 0


def test_an_audit_page_past_any_row_id_is_a_422_not_a_500(api: Api) -> None:
    """The fuzzer found ``before`` beyond 64 bits overflowing SQLite's integer (a 500)."""
    api.register()
    assert api.get(f"/api/v1/audit?before={2**63 - 1}", OFFICER).status_code == 200
    assert api.get(f"/api/v1/audit?before={2**63}", OFFICER).status_code == 422
    assert api.get(f"/api/v1/audit?before={10**40}", OFFICER).status_code == 422


def test_audit_log_is_append_only_in_sqlite(api: Api, tmp_path: Path) -> None:
    import sqlite3

    api.register()
    conn = sqlite3.connect(tmp_path / "service.db")
    try:
        for statement in ("UPDATE svc_audit SET outcome = 'x'", "DELETE FROM svc_audit"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                conn.execute(statement)
    finally:
        conn.close()


def test_audit_log_is_append_only_in_postgres(postgres_url: str, data_root: Path) -> None:
    import psycopg

    from dpkit.ledger._postgres import split_url
    from dpkit.service import Service, ServiceConfig

    service = Service(ServiceConfig(database=postgres_url, data_root=data_root))
    service.registry.audit("officer", "officer", "test", "", "ok")
    service.close()
    plain, schema = split_url(postgres_url)
    with psycopg.connect(plain, autocommit=True) as conn:
        for statement in ("UPDATE {s}.svc_audit SET outcome = 'x'", "TRUNCATE {s}.svc_audit"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(statement.replace("{s}", schema))
        row = conn.execute(f"SELECT count(*) FROM {schema}.svc_audit").fetchone()
        assert row == (1,)


@pytest.mark.parametrize("url", ["mysql://user:secret@host/db", "sqlite://rel.db", "x://y"])
def test_a_database_url_of_another_scheme_is_refused_not_made_a_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mysql://...`` used to become a SQLite file of that name: a ledger nobody meant."""
    from dpkit.errors import InvalidParameterError
    from dpkit.service import Service, ServiceConfig

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidParameterError, match="sqlite:///PATH") as raised:
        Service(ServiceConfig(database=url, data_root=tmp_path))
    assert "secret" not in str(raised.value)
    assert list(tmp_path.rglob("*")) == []  # no file was created


def test_sql_expressions_and_having_order_by_limit_through_the_service(api: Api) -> None:
    """Issue 23: CASE / LIKE / arithmetic in an aggregate, and HAVING / ORDER BY / LIMIT on the
    released table (post-processing: the charge is the query's ε)."""
    api.register()
    ana = api.analyst("ana")
    sql = (
        "SELECT dept, COUNT(*) AS n, SUM(CASE WHEN dept LIKE 'a%' THEN age * 2 ELSE 0 END, "
        "0, 200) AS s FROM people GROUP BY dept HAVING COUNT(*) > 10 ORDER BY s DESC LIMIT 1"
    )
    r = api.post(
        "/api/v1/query",
        ana,
        json={
            "dataset": "people",
            "sql": sql,
            "keys": {"dept": ["a", "b"]},
            "loss": {"epsilon": "0.5"},
        },
    )
    assert r.status_code == 200, r.text
    rows = r.json()["tables"]["main"]
    assert [row["dept"] for row in rows] == ["a"]
    assert _spent(api, "ana") == pytest.approx(0.5)
    for bad in (
        "SELECT COUNT(*) HAVING SUM(age, 0, 1) > 1",
        "SELECT COUNT(*) AS n HAVING n > 'a'",
        "SELECT SUM(YEAR(dept), 0, 1)",
    ):
        body = {"dataset": "people", "sql": bad, "loss": {"epsilon": "0.1"}}
        refused = api.post("/api/v1/query", ana, json=body)
        assert 400 <= refused.status_code < 500, (bad, refused.text)
    assert _spent(api, "ana") == pytest.approx(0.5)


def test_preview_shows_plan_and_cost_and_charges_nothing(api: Api) -> None:
    """POST /preview: the plan and the charge, free; what /query refuses before its
    reservation is refused the same way, and a charge beyond the allowance says so."""
    api.register()
    ana = api.analyst("ana")
    body = {
        "dataset": "people",
        "sql": "SELECT dept, COUNT(*), AVG(age, 0, 100) FROM people GROUP BY dept",
        "keys": {"dept": ["a", "b"]},
        "loss": {"epsilon": "0.5"},
    }
    for _ in range(2):  # twice: the second plan comes from the session's caches
        r = api.post("/api/v1/preview", ana, json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert "mean from 2 noisy sums" in out["plan"] and "count" in out["plan"]
        assert out["loss"]["epsilon"] == pytest.approx(0.5) and out["fits"] is True
        assert out["remaining"]["epsilon"] == pytest.approx(1)
    assert _spent(api, "ana") == 0
    assert api.get("/api/v1/receipts", ana).json() == []
    r = api.post("/api/v1/preview", ana, json={**body, "loss": {"epsilon": "5"}})
    assert r.status_code == 200 and r.json()["fits"] is False
    for bad in (
        {**body, "sql": "SELECT SUM(salary, 0, 1) FROM people"},
        {**body, "loss": {"epsilon": "-1"}},
        {**body, "dataset": "nope"},
    ):
        r = api.post("/api/v1/preview", ana, json=bad)
        assert 400 <= r.status_code < 500, (bad, r.text)
    assert api.post("/api/v1/preview", OFFICER, json=body).status_code == 403
    # the same request, run: charged what the preview said
    r = api.post("/api/v1/query", ana, json=body)
    assert r.status_code == 200 and r.json()["loss"]["epsilon"] == pytest.approx(0.5)
    assert _spent(api, "ana") == pytest.approx(0.5)


def test_preview_refuses_what_query_refuses_before_its_reservation(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /preview makes /query's checks before the reservation, not only the plan's: the
    rehearsal on an empty table (dry_run) and the ledger's refusal of a loss of another kind
    than the budget's (zCDP against pure ε). Neither is a budget too small (``fits=False``)."""
    from dpkit.analytics import _session
    from dpkit.errors import UnsupportedQueryError

    api.register()
    ana = api.analyst("ana")
    body = {"dataset": "people", "sql": "SELECT COUNT(*) FROM people", "loss": {"rho": "0.01"}}
    q = api.post("/api/v1/query", ana, json=body)
    p = api.post("/api/v1/preview", ana, json=body)
    assert q.status_code == 400, q.text
    assert (p.status_code, p.json().get("error")) == (400, q.json()["error"]), p.text

    def refuse(compiled: object, alpha: float) -> None:
        raise UnsupportedQueryError("refused by the rehearsal on an empty table")

    monkeypatch.setattr(_session, "dry_run", refuse)
    body = {**body, "loss": {"epsilon": "0.1"}}
    q = api.post("/api/v1/query", ana, json=body)
    p = api.post("/api/v1/preview", ana, json=body)
    assert q.status_code == 400 and "rehearsal" in q.text, q.text
    assert p.status_code == 400 and "rehearsal" in p.text, p.text
    assert _spent(api, "ana") == 0
