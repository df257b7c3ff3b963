"""Registered table metadata in the service (issue 25): ``AVG(wage)`` clamps to the column
bounds the officer registered; an aggregate with neither is refused before any reservation;
the datasets list and a dataset's detail show every column's kind (from the files' metadata,
Parquet and CSV) and its bounds as people write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import OFFICER, Api


@pytest.fixture
def payroll(api: Api, data_root: Path) -> Api:
    ids = np.arange(400)
    pd.DataFrame(
        {
            "person": ids,
            "wage": (ids * 7 % 3000).astype(float),
            "dept": np.where(ids % 2 == 0, "a", "b"),
            "hired": pd.to_datetime("2020-01-01") + pd.to_timedelta(ids, unit="D"),
        }
    ).to_parquet(data_root / "payroll.parquet")
    r = api.post(
        "/api/v1/datasets",
        OFFICER,
        json={
            "name": "payroll",
            "source": "payroll.parquet",
            "privacy_unit": "person",
            "bounds": {"max_rows": 1, "columns": {"wage": [0, 3000]}},
            "budget": {"epsilon": "10"},
        },
    )
    assert r.status_code == 201, r.text
    return api


def _ask(api: Api, token: str, **body: Any) -> Any:
    return api.post(
        "/api/v1/query",
        token,
        json={"dataset": "payroll", "loss": {"epsilon": "1"}, **body},
    )


def test_sql_aggregate_uses_registered_bounds(payroll: Api) -> None:
    ana = payroll.analyst("ana", "payroll", "5")
    r = _ask(payroll, ana, sql="SELECT AVG(wage), SUM(wage), MEDIAN(wage)")
    assert r.status_code == 200, r.text
    body = r.json()
    row = body["tables"]["main"][0]
    assert 0 <= row["mean_wage_low"] <= row["mean_wage_high"] <= 3000


def test_aggregate_without_any_bounds_is_refused_before_reservation(payroll: Api) -> None:
    ana = payroll.analyst("ana", "payroll", "5")
    before = payroll.get("/api/v1/me", ana).json()["budgets"][0]
    for body in (
        {"sql": "SELECT COUNT(*), SUM(dept_code)"},
        {"query": {"aggregations": [{"op": "sum", "column": "dept_code"}]}},
    ):
        r = _ask(payroll, ana, **body)
        assert r.status_code == 400, r.text
        detail = r.json()["detail"]
        assert "dept_code" in detail and "bounds.columns" in detail, detail
    assert payroll.get("/api/v1/me", ana).json()["budgets"][0] == before
    assert payroll.get("/api/v1/receipts", ana).json() == []


def test_bounds_of_a_missing_column_are_refused_at_registration(api: Api) -> None:
    r = api.post(
        "/api/v1/datasets",
        OFFICER,
        json={
            "name": "people",
            "source": "people.csv",
            "privacy_unit": "person",
            "bounds": {"max_rows": 1, "columns": {"wages": [0, 1]}},
            "budget": {"epsilon": "1"},
        },
    )
    assert r.status_code == 400 and "wages" in r.json()["detail"], r.text


def test_datasets_show_parquet_kinds_and_bounds(payroll: Api) -> None:
    ana = payroll.analyst("ana", "payroll")
    for shown in (
        payroll.get("/api/v1/datasets", ana).json()[0],
        payroll.get("/api/v1/datasets/payroll", ana).json(),
        payroll.get("/api/v1/datasets/payroll", OFFICER).json(),
    ):
        assert shown["schema"] == {
            "person": "numeric",
            "wage": "numeric",
            "dept": "text",
            "hired": "temporal",
        }
        assert shown["columns"]["wage"] == {"kind": "numeric", "bounds": [0, 3000]}
        assert shown["columns"]["dept"] == {"kind": "text"}
        assert shown["bounds"]["columns"] == {"wage": [0, 3000]}
    text = payroll.get("/api/v1/datasets", ana).text
    assert "3000.0" not in text and "{'" not in text


def test_csv_kinds_are_text_until_declared(api: Api) -> None:
    api.register()  # people.csv: age declared numeric, dept text, bounds age [0, 100]
    ana = api.analyst("ana")
    shown = api.get("/api/v1/datasets/people", ana).json()
    assert shown["columns"] == {
        "person": {"kind": "text"},
        "age": {"kind": "numeric", "bounds": [0, 100]},
        "dept": {"kind": "text"},
    }
    # another analyst's dataset, or none: not found
    assert api.get("/api/v1/datasets/nope", ana).status_code == 404
    api.register("hidden")
    assert api.get("/api/v1/datasets/hidden", ana).status_code == 404
    r = api.post(
        "/api/v1/query",
        ana,
        json={"dataset": "people", "sql": "SELECT AVG(age)", "loss": {"epsilon": "0.5"}},
    )
    assert r.status_code == 200, r.text


@pytest.fixture
def keyed(payroll: Api) -> Api:
    r = payroll.post(
        "/api/v1/datasets",
        OFFICER,
        json={
            "name": "keyed",
            "source": "payroll.parquet",
            "privacy_unit": "person",
            "bounds": {
                "max_rows": 1,
                "columns": {"wage": [0, 3000]},
                "keys": {"dept": ["a", "b", "c"]},
            },
            "budget": {"epsilon": "10"},
        },
    )
    assert r.status_code == 201, r.text
    return payroll


def test_registered_key_sets_are_the_groups(keyed: Api) -> None:
    ana = keyed.analyst("ana", "keyed", "5")
    for body in (
        {"sql": "SELECT dept, COUNT(*), AVG(wage) FROM keyed GROUP BY dept"},
        {"query": {"group_by": ["dept"], "aggregations": [{"op": "count"}]}},
    ):
        # pure ε: without the registered (public) keys, choosing groups privately needs a δ
        r = keyed.post(
            "/api/v1/query", ana, json={"dataset": "keyed", "loss": {"epsilon": "1"}, **body}
        )
        assert r.status_code == 200, r.text
        assert [row["dept"] for row in r.json()["tables"]["main"]] == ["a", "b", "c"]
    # the request's own keys win
    r = keyed.post(
        "/api/v1/query",
        ana,
        json={
            "dataset": "keyed",
            "loss": {"epsilon": "1"},
            "sql": "SELECT dept, COUNT(*) GROUP BY dept",
            "keys": {"dept": ["b"]},
        },
    )
    assert r.status_code == 200, r.text
    assert [row["dept"] for row in r.json()["tables"]["main"]] == ["b"]


def test_datasets_show_registered_key_sets(keyed: Api) -> None:
    ana = keyed.analyst("ana", "keyed")
    for shown in (
        keyed.get("/api/v1/datasets/keyed", ana).json(),
        keyed.get("/api/v1/datasets/keyed", OFFICER).json(),
    ):
        assert shown["columns"]["dept"] == {"kind": "text", "keys": ["a", "b", "c"]}
        assert shown["columns"]["wage"] == {"kind": "numeric", "bounds": [0, 3000]}
        assert shown["bounds"]["keys"] == {"dept": ["a", "b", "c"]}


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"department": ["a"]}, "department"),
        ({"dept": ["a", "a"]}, "distinct"),
        ({"dept": []}, "dept"),
    ],
)
def test_bad_key_sets_are_refused_at_registration(
    payroll: Api, keys: dict[str, Any], named: str
) -> None:
    r = payroll.post(
        "/api/v1/datasets",
        OFFICER,
        json={
            "name": "bad",
            "source": "payroll.parquet",
            "privacy_unit": "person",
            "bounds": {"max_rows": 1, "keys": keys},
            "budget": {"epsilon": "1"},
        },
    )
    assert r.status_code == 400 and named in r.json()["detail"], r.text
    assert payroll.get("/api/v1/datasets/bad", OFFICER).status_code == 404
