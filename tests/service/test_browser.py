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
