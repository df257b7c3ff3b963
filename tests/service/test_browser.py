"""The dashboard in a real browser (Playwright driving Debian's headless Chromium): log in,
register a dataset and set an allowance with the forms, run a query through the API, and see
the spend appear on the chart. The screenshot is kept as a test artefact
(``$DPKIT_TEST_ARTIFACTS/dashboard.png``, else in the test's tmp directory)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from conftest import OFFICER, ThreadServer

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def test_dashboard_login_register_query_and_chart(
    tmp_path: Path, thread_server: ThreadServer
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); browser test not run")
    sync_api = pytest.importorskip("playwright.sync_api")
    server = thread_server  # uvicorn on 127.0.0.1, on a thread of this process
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.post(
            "/api/v1/principals",
            headers={"Authorization": f"Bearer {OFFICER}"},
            json={"name": "ana", "role": "analyst"},
        )
        analyst_token = r.json()["token"]
    artefacts = Path(os.environ.get("DPKIT_TEST_ARTIFACTS", tmp_path))
    artefacts.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{server.url}/")
            assert page.url.endswith("/login")
            page.fill("input[name=token]", "wrong")
            page.click("#login button")
            assert "not valid" in page.content()
            page.fill("input[name=token]", OFFICER)
            page.click("#login button")
            assert "privacy officer" in page.title()
            assert "no spend yet" in (page.locator("#spend-chart").text_content() or "")
            form = page.locator("#register")
            form.locator("input[name=name]").fill("people")
            form.locator("input[name=source]").fill("people.csv")
            form.locator("input[name=privacy_unit]").fill("person")
            form.locator("input[name=schema]").fill("age=numeric,dept=text")
            form.locator("input[name=epsilon]").fill("1")
            form.locator("button").click()
            assert "Registered dataset people" in page.inner_text(".msg")
            assert "people.csv" in page.inner_text("#datasets")
            allowance = page.locator("#allowance")
            allowance.locator("input[name=dataset]").fill("people")
            allowance.locator("input[name=analyst]").fill("ana")
            allowance.locator("input[name=epsilon]").fill("0.5")
            allowance.locator("button").click()
            assert "Allowance of ana" in page.inner_text(".msg")
            with httpx.Client(base_url=server.url, timeout=30) as http:
                for _ in range(3):
                    r = http.post(
                        "/api/v1/query",
                        headers={"Authorization": f"Bearer {analyst_token}"},
                        json={
                            "dataset": "people",
                            "sql": "SELECT COUNT(*), AVG(age, 0, 100)",
                            "loss": {"epsilon": "0.1"},
                        },
                    )
                    assert r.status_code == 200, r.text
            page.goto(f"{server.url}/")
            lines = page.locator("#spend-chart polyline.series")
            labels = [lines.nth(i).get_attribute("data-budget") for i in range(lines.count())]
            assert sorted(labels) == ["people (dataset)", "people / ana"]
            chart = page.locator("#spend-chart").text_content() or ""
            assert "people / ana 60%" in chart and "people (dataset) 30%" in chart
            assert page.locator("#receipts tr").count() == 4  # header + 3 receipts
            assert "50%" in page.inner_text("#alerts")  # ana crossed half of her allowance
            page.screenshot(path=str(artefacts / "dashboard.png"), full_page=True)
            # the analyst's own view: their budget and receipts, no datasets' sources
            with page.expect_navigation():
                page.click("text=Log out")
            page.wait_for_selector("#login")
            page.fill("input[name=token]", analyst_token)
            with page.expect_navigation():
                page.click("#login button")
            page.wait_for_selector("#receipts")
            assert "analyst" in page.title()
            assert "people.csv" not in page.content()
            assert page.locator("#receipts tr").count() == 4
            page.screenshot(path=str(artefacts / "dashboard-analyst.png"), full_page=True)
        finally:
            browser.close()
    assert (artefacts / "dashboard.png").stat().st_size > 10_000


def _sign_in(page: object, url: str, token: str) -> None:
    page.goto(f"{url}/login")  # type: ignore[attr-defined]
    page.fill("input[name=token]", token)  # type: ignore[attr-defined]
    with page.expect_navigation():  # type: ignore[attr-defined]
        page.click("#login button")  # type: ignore[attr-defined]


def test_workbench_officer_sets_bounds_and_allowance_analyst_queries(
    tmp_path: Path, thread_server: ThreadServer
) -> None:
    """The workbench (issue 25): an officer registers a dataset with an (ε, δ) budget, column
    bounds and a key set and gives an analyst an (ε, δ) allowance with the forms; the analyst
    sees the columns (bounds as people write them), runs a SQL query with the form and reads
    the answer with its intervals, its cost and its receipt; a refused query costs nothing."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); browser test not run")
    sync_api = pytest.importorskip("playwright.sync_api")
    server = thread_server
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.post(
            "/api/v1/principals",
            headers={"Authorization": f"Bearer {OFFICER}"},
            json={"name": "ana", "role": "analyst"},
        )
        analyst_token = r.json()["token"]
    shots = Path(os.environ.get("DPKIT_TEST_ARTIFACTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            _sign_in(page, server.url, OFFICER)
            assert "privacy officer" in page.title()
            form = page.locator("#register")
            form.locator("input[name=name]").fill("people")
            form.locator("input[name=source]").fill("people.csv")
            form.locator("input[name=privacy_unit]").fill("person")
            form.locator("input[name=schema]").fill("age=numeric,dept=text")
            form.locator("input[name=epsilon]").fill("2")
            form.locator("input[name=delta]").fill("1e-5")
            form.locator("textarea[name=column_bounds]").fill("age = [0, 100]")
            form.locator("textarea[name=column_keys]").fill('dept = ["a", "b"]')
            form.locator("button").click()
            assert "Registered dataset people" in page.inner_text(".msg")
            columns = page.inner_text("#columns-people")
            assert "[0, 100]" in columns and '["a", "b"]' in columns
            budgets = page.inner_text("#budgets")
            assert "ε=2, δ=1e-05" in budgets or "ε=2, δ=1/100000" in budgets, budgets
            allowance = page.locator("#allowance")
            allowance.locator("input[name=dataset]").fill("people")
            allowance.locator("input[name=analyst]").fill("ana")
            allowance.locator("input[name=epsilon]").fill("1")
            allowance.locator("input[name=delta]").fill("1e-6")
            allowance.locator("button").click()
            message = page.inner_text(".msg")
            assert "Allowance of ana on people set to ε=1, δ=" in message, message
            # a bad budget is refused with a message, not an error page
            allowance = page.locator("#allowance")
            allowance.locator("input[name=dataset]").fill("people")
            allowance.locator("input[name=analyst]").fill("ana")
            allowance.locator("input[name=epsilon]").fill("1")
            allowance.locator("input[name=rho]").fill("0.1")
            allowance.locator("button").click()
            assert "Refused" in page.inner_text(".msg")
            assert "either ε (with an optional δ) or ρ" in page.inner_text(".msg")
            budget = page.locator("#budget")
            budget.locator("input[name=dataset]").fill("people")
            budget.locator("input[name=epsilon]").fill("3")
            budget.locator("input[name=delta]").fill("1e-5")
            budget.locator("button").click()
            assert "Budget of people set to ε=3, δ=" in page.inner_text(".msg")
            page.screenshot(path=str(shots / "workbench-officer.png"), full_page=True)
            content = page.content()
            assert "{'" not in content and "100.0" not in content

            _sign_in(page, server.url, analyst_token)
            assert "analyst" in page.title()
            assert "[0, 100]" in page.inner_text("#columns-people")
            assert "people.csv" not in page.content()
            query = page.locator("#query")
            query.locator("textarea[name=sql]").fill(
                "SELECT dept, COUNT(*), AVG(age) FROM people GROUP BY dept"
            )
            query.locator("input[name=epsilon]").fill("0.5")
            # first the free preview: the plan and the cost, nothing spent
            with page.expect_navigation():
                query.locator("button[value=preview]").click()
            preview = page.inner_text("#preview")
            assert "Running it would cost ε=0.5" in preview, preview
            assert "fits in your allowance" in preview and "[0, 100]" in preview, preview
            assert page.locator("#answer").count() == 0
            assert page.locator("#receipts tr").count() <= 1  # no receipt yet
            page.screenshot(path=str(shots / "workbench-preview.png"), full_page=True)
            query = page.locator("#query")  # the form keeps the query and its spend
            assert "GROUP BY dept" in page.input_value("#query textarea[name=sql]")
            with page.expect_navigation():
                query.locator("button[value=run]").click()
            answer = page.locator("#answer")
            assert answer.count() == 1, page.inner_text("body")[:2000]
            rows = page.locator("#result-main tr")
            assert rows.count() == 3  # header + the registered keys a and b
            head = page.inner_text("#result-main tr >> nth=0")
            assert "mean_age" in head and "95% interval" in head
            first = [c.strip() for c in page.inner_text("#result-main tr >> nth=1").split("\t")]
            assert first[0] == "a"
            low, high = (float(x) for x in first[-1].strip("[]").split(","))
            assert 0 <= low <= float(first[-2]) <= high <= 100
            cost = page.inner_text("#cost")
            assert "Cost ε=0.5" in cost and "rcpt-" in cost, cost
            assert "allowance left ε=0.5, δ=1e-06" in cost, cost
            assert page.locator("#receipts tr").count() == 2
            page.screenshot(path=str(shots / "workbench-analyst.png"), full_page=True)
            # no bounds registered for person: refused before anything is reserved
            query = page.locator("#query")
            query.locator("textarea[name=sql]").fill("SELECT AVG(person) FROM people")
            with page.expect_navigation():
                query.locator("button[value=run]").click()
            refused = page.inner_text(".msg")
            assert "Refused (nothing spent)" in refused and "person" in refused, refused
            assert page.locator("#answer").count() == 0
            assert page.locator("#receipts tr").count() == 2
            assert "AVG(person)" in page.input_value("#query textarea[name=sql]")
            page.screenshot(path=str(shots / "workbench-refused.png"), full_page=True)
        finally:
            browser.close()
    for name in ("workbench-officer.png", "workbench-preview.png", "workbench-analyst.png"):
        assert (shots / name).stat().st_size > 10_000
