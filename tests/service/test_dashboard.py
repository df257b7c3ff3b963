"""The dashboard's workbench forms without a browser (issue 25): the officer's forms take
(ε, δ) and ρ budgets, column bounds and key sets as a metadata file writes them; the analyst's
page lists each column's kind, bounds and keys as people write them and answers SQL with its
intervals, cost and receipt. (tests/service/test_browser.py drives the same page in
Chromium.)"""

from __future__ import annotations

import re

import pytest

from conftest import OFFICER, Api
from dpkit.service._dashboard import COOKIE


def _as(api: Api, token: str) -> None:
    api.client.cookies.set(COOKIE, token)


def _register(api: Api, **fields: str) -> str:
    _as(api, OFFICER)
    form = {
        "name": "people",
        "source": "people.csv",
        "privacy_unit": "person",
        "schema": "age=numeric,dept=text",
        "epsilon": "2",
        "delta": "1e-5",
        "column_bounds": "age = [0, 100]",
        "column_keys": 'dept = ["a", "b"]',
        **fields,
    }
    r = api.client.post("/dashboard/datasets", data=form)
    assert r.status_code == 200, r.text  # redirected to the page with the message
    return r.text


def test_officer_registers_bounds_keys_and_an_approximate_budget(api: Api) -> None:
    page = _register(api)
    assert "Registered dataset people" in page
    shown = api.get("/api/v1/datasets/people", OFFICER).json()
    assert shown["columns"]["age"] == {"kind": "numeric", "bounds": [0, 100]}
    assert shown["columns"]["dept"] == {"kind": "text", "keys": ["a", "b"]}
    assert shown["budget"]["total"]["kind"] == "approx"
    assert "[0, 100]" in page and "[&quot;a&quot;, &quot;b&quot;]" in page
    assert "{&#x27;" not in page and "100.0" not in page and "max_rows = 1" in page


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"column_bounds": "age = [100, 0]"}, "age"),
        ({"column_bounds": "age = 0..100"}, "one line per column"),
        ({"column_keys": 'dept = ["a", "a"]'}, "distinct"),
        ({"rho": "0.1"}, "either ε (with an optional δ) or ρ"),
    ],
)
def test_bad_registrations_are_refused_with_a_message(
    api: Api, fields: dict[str, str], said: str
) -> None:
    page = _register(api, **fields)
    assert "Refused" in page and said in page, page[:3000]
    assert api.get("/api/v1/datasets/people", OFFICER).status_code == 404


def test_rho_budgets_and_allowances(api: Api) -> None:
    page = _register(api, epsilon="", delta="", rho="0.5")
    assert "Registered dataset people" in page
    api.post("/api/v1/principals", OFFICER, json={"name": "ana", "role": "analyst"})
    r = api.client.post(
        "/dashboard/allowance", data={"dataset": "people", "analyst": "ana", "rho": "0.1"}
    )
    assert "Allowance of ana on people set to ρ=0.1" in r.text, r.text[:2000]
    r = api.client.post("/dashboard/budget", data={"dataset": "people", "rho": "0.75"})
    assert "Budget of people set to ρ=0.75" in r.text


def test_analyst_asks_sql_and_reads_intervals_cost_and_receipt(api: Api) -> None:
    _register(api)
    token = api.analyst("ana", "people", "1")
    _as(api, token)
    page = api.client.get("/").text
    assert 'id="columns-people"' in page and "[0, 100]" in page
    assert "people.csv" not in page
    r = api.client.post(
        "/dashboard/query",
        data={
            "dataset": "people",
            "sql": "SELECT dept, COUNT(*), AVG(age) FROM people GROUP BY dept",
            "epsilon": "0.5",
        },
    )
    assert r.status_code == 200
    assert 'id="answer"' in r.text, r.text[:3000]
    assert r.text.count('<td class="interval">[') == 4  # count and mean, groups a and b
    # numbers as the command line prints them: as many decimals as the error bars need (a mean
    # of ages with an error bar of several years has one), counts as whole numbers
    cells = re.findall(r'<td class="(?:value|interval)">([^<]*)</td>', r.text)
    assert cells and not [c for c in cells if re.search(r"\.\d{2,}", c)], cells
    assert not re.search(r"±\d+\.\d{2,}", r.text)  # error bars to two significant digits
    assert re.search(r"Cost <b>ε=0.5</b> · receipt <code>rcpt-", r.text)
    assert api.get("/api/v1/receipts", token).json()[0]["loss"]["text"] == "ε=0.5"
    # the query's text and budget stay in the form
    assert "GROUP BY dept</textarea>" in r.text and 'value="0.5"' in r.text


def test_preview_shows_the_plan_and_cost_and_spends_nothing(api: Api) -> None:
    _register(api)
    token = api.analyst("ana", "people", "1")
    _as(api, token)
    asked = {
        "dataset": "people",
        "sql": "SELECT dept, COUNT(*), AVG(age) FROM people GROUP BY dept",
        "epsilon": "0.5",
        "action": "preview",
    }
    r = api.client.post("/dashboard/query", data=asked)
    assert r.status_code == 200
    assert 'id="preview"' in r.text and 'id="answer"' not in r.text, r.text[:3000]
    # the registered bounds and keys, the mechanisms and the cost, before anything is spent
    assert "[0, 100]" in r.text and "public 2 keys" in r.text
    assert re.search(r"would cost <b>ε=0.5</b>, which fits in your allowance", r.text)
    assert "GROUP BY dept</textarea>" in r.text  # the form keeps the query
    assert api.get("/api/v1/receipts", token).json() == []
    r = api.client.post("/dashboard/query", data={**asked, "epsilon": "5"})
    assert "does <b>not</b> fit" in r.text and 'id="answer"' not in r.text
    r = api.client.post("/dashboard/query", data={**asked, "sql": "SELECT AVG(person) FROM people"})
    assert "Refused (nothing spent)" in r.text and "person" in r.text
    assert api.get("/api/v1/receipts", token).json() == []


def test_refused_queries_cost_nothing(api: Api) -> None:
    _register(api)
    token = api.analyst("ana", "people", "1")
    _as(api, token)
    for data, said in (
        ({"sql": "SELECT AVG(person) FROM people", "epsilon": "0.5"}, "person"),
        ({"sql": "SELECT COUNT(*) FROM people", "epsilon": "abc"}, "epsilon"),
        ({"sql": "SELECT COUNT(*) FROM people", "epsilon": "5"}, "Refused"),
    ):
        r = api.client.post("/dashboard/query", data={"dataset": "people", **data})
        assert "Refused (nothing spent)" in r.text and said in r.text, r.text[:3000]
        assert 'id="answer"' not in r.text
    assert api.get("/api/v1/receipts", token).json() == []


def test_officers_do_not_query_through_the_form(api: Api) -> None:
    _register(api)
    r = api.client.post(
        "/dashboard/query",
        data={"dataset": "people", "sql": "SELECT COUNT(*) FROM people", "epsilon": "0.5"},
    )
    assert "analysts" in r.text and 'id="answer"' not in r.text


def test_an_unknown_action_is_refused_not_run(api: Api) -> None:
    """Only ``action=run`` spends: a misspelt preview (``Preview``, ``preview ``) is refused
    with nothing charged, never answered as a run."""
    _register(api)
    token = api.analyst("ana", "people", "1")
    _as(api, token)
    asked = {"dataset": "people", "sql": "SELECT COUNT(*) FROM people", "epsilon": "0.5"}
    for action in ("Preview", "preview ", "x"):
        r = api.client.post("/dashboard/query", data={**asked, "action": action})
        assert r.status_code == 200 and 'id="answer"' not in r.text, (action, r.text[:2000])
        assert "Refused (nothing spent)" in r.text and "action" in r.text
    assert api.get("/api/v1/receipts", token).json() == []
