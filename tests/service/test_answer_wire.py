"""The query endpoint sends its JSON directly (no response-model pass, no ``DataFrame.to_dict``):
the body must be exactly what the ``QueryOut`` model would have sent, for grouped, ungrouped,
histogram and mixed answers, and each released table's rows must be the DataFrame's rows."""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import OFFICER, Api
from dpkit.service import _schemas as w
from dpkit.service._app import _table_rows, query_dict, query_json

QUERIES: list[dict[str, Any]] = [
    {"sql": "SELECT COUNT(*)"},
    {"sql": "SELECT dept, COUNT(*), AVG(age, 0, 100) GROUP BY dept", "keys": {"dept": ["a", "b"]}},
    {
        "query": {
            "aggregations": [
                {"op": "count"},
                {"op": "sum", "column": "age", "lower": 0, "upper": 100},
                {"op": "histogram", "column": "age", "edges": [0, 30, 60, 90]},
            ]
        }
    },
]


@pytest.mark.parametrize("ask", QUERIES, ids=["count", "grouped", "histogram"])
def test_the_answer_body_is_what_the_response_model_sends(api: Api, ask: dict[str, Any]) -> None:
    api.register()
    ana = api.analyst("ana")
    r = api.post(
        "/api/v1/query", ana, json={"dataset": "people", "loss": {"epsilon": "0.1"}, **ask}
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    model = w.QueryOut.model_validate(body)
    assert json.loads(model.model_dump_json()) == body
    for name, rows in body["tables"].items():
        assert all(list(row) == body["columns"][name] for row in rows)


def _old_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """What the endpoint sent before (``to_dict(orient="records")`` and the same cleaning)."""

    def clean(value: Any) -> Any:
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, int | float | str | bool) or value is None:
            return value
        return str(value)

    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def test_table_rows_equal_the_records_of_the_frame() -> None:
    frame = pd.DataFrame(
        {
            "dept": ["a", "b", None],
            "count": np.array([3, -1, 0], dtype=np.int64),
            "mean": [1.5, float("nan"), float("inf")],
            "when": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"]),
            "flag": [True, False, True],
        }
    )
    assert _table_rows(frame) == _old_rows(frame)
    assert _table_rows(frame.iloc[:0]) == []
    assert _table_rows(pd.DataFrame(index=range(2))) == [{}, {}]


def test_query_json_is_strict_json(api: Api) -> None:
    """No NaN/inf tokens: non-finite values are sent as null, as before."""
    from dpkit.analytics import Session, count
    from dpkit.analytics._query import Query
    from dpkit.core._losses import PureDP
    from dpkit.ledger import BudgetMonitor, Ledger

    ledger = Ledger.open("memory://", monitor=BudgetMonitor(log=False))
    ledger.create_budget("d", PureDP(10), privacy_unit="person")
    root = api.client.app.state.service.data_root  # type: ignore[attr-defined]
    session = Session(
        str(root / "people.csv"), "person", None, ledger=ledger, dataset="d", max_rows=1
    )
    release = session.evaluate(Query().agg(count()), epsilon=1)
    body = query_json(release, release.remaining)
    assert json.loads(body) == query_dict(release, release.remaining)
    assert b"NaN" not in body and b"Infinity" not in body


def test_the_served_app_freezes_its_heap_at_startup(data_root: Path, tmp_path: Path) -> None:
    """``dpkit serve`` (``build_app``) freezes the heap, so full collections stay short; an app
    embedded with ``create_app`` leaves the host process's collector alone."""
    from fastapi.testclient import TestClient

    from dpkit.service import ServiceConfig
    from dpkit.service._app import create_app

    config = ServiceConfig(
        database=f"sqlite:///{tmp_path}/service.db", data_root=data_root, bootstrap_token=OFFICER
    )
    gc.unfreeze()
    try:
        with TestClient(create_app(config)):
            assert gc.get_freeze_count() == 0
        with TestClient(create_app(config, freeze_heap=True)) as client:
            assert gc.get_freeze_count() > 0
            assert client.get("/api/v1/health").status_code == 200
    finally:
        gc.unfreeze()
