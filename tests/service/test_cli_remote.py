"""``dpkit query --server URL --token T`` against a real service (uvicorn on 127.0.0.1, SQLite,
the DuckDB engine: the session's shared server, with a dataset and analysts of this module's
own): the same SQL subset, the same rendering as the local command, and refusals as one
readable line that never charges. (The console-script entry point itself is run in
subprocesses by tests/unit/cli/test_main.py; here the same ``dpkit.cli.app`` runs
in-process.)"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from conftest import OFFICER, Api, ThreadServer, write_people
from dpkit.cli import app

DS = "clipeople"


@dataclass
class Remote:
    server: ThreadServer
    ana: str
    bob: str


@pytest.fixture(scope="module")
def remote(shared_server: ThreadServer) -> Remote:
    with httpx.Client(base_url=shared_server.url, timeout=60) as http:
        api = Api(http, {})
        assert api.register(DS, epsilon="10").status_code == 201
        ana = api.analyst("cli_ana", dataset=DS, epsilon="5")
        bob = api.analyst("cli_bob", dataset=DS, epsilon="0.05")
    return Remote(shared_server, ana, bob)


def cli(remote: Remote, *args: str, token: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["query", *args, "--server", remote.server.url],
        env={
            "COLUMNS": "120",
            "NO_COLOR": "1",
            "DPKIT_TOKEN": remote.ana if token is None else token,
        },
    )
    return result.exit_code, result.output


def test_registered_bounds_apply_and_none_is_refused_before_sending(remote: Remote) -> None:
    """The dataset registers age bounds [0, 100]: AVG(age) needs none of its own (issue 25);
    SUM(person) has none anywhere and is refused locally, naming the column, nothing spent."""
    code, out = cli(remote, DS, "SELECT AVG(age)", "--epsilon", "0.1")
    assert code == 0, out
    assert re.search(r"mean_age\s*│\s*[\d.]+\s*│", out), out
    before = len(_receipts(remote))
    code, out = cli(remote, DS, "SELECT SUM(person)", "--epsilon", "0.1")
    flat = " ".join(out.split())
    assert code == 2 and "'person'" in flat and "privacy officer" in flat, out
    assert len(_receipts(remote)) == before


def _receipts(remote: Remote) -> list[str]:
    r = httpx.get(
        f"{remote.server.url}/api/v1/receipts?limit=10000",
        headers={"Authorization": f"Bearer {OFFICER}"},
    )
    return [x["receipt"] for x in r.json() if x["dataset"] == DS]


def test_count_and_mean_with_error_bars_and_receipt(remote: Remote) -> None:
    code, out = cli(remote, DS, "SELECT COUNT(*), AVG(age, 0, 100)", "--epsilon", "0.1")
    assert code == 0, out
    assert "query: SELECT COUNT(*), AVG(age, 0, 100)" in out
    assert f"dataset {DS} (dpkit service http://127.0.0.1:" in out
    assert "95% interval of the noise" in out
    assert re.search(r"count\s*│\s*[\d,]+\s*│\s*\[[\d,]+, [\d,]+\]", out), out
    assert re.search(r"mean_age\s*│\s*[\d.]+\s*│", out), out
    assert (
        "bound applied (registered with the dataset by its privacy officer): at most 1 row" in out
    )
    assert "Post-processed for display" in out
    match = re.search(
        r"privacy loss of this query: ε=0\.1; budget left: ε=([\d.]+); receipt (\S+)", out
    )
    assert match is not None, out
    assert match.group(2) in _receipts(remote)


def test_group_by_with_public_keys_and_from_the_dataset(remote: Remote) -> None:
    code, out = cli(
        remote,
        DS,
        f"SELECT dept, COUNT(*) FROM {DS} WHERE age >= 10 GROUP BY dept",
        "--epsilon",
        "0.1",
        "--keys",
        "dept=a,b",
    )
    assert code == 0, out
    assert "under each value: its 95% interval of the noise" in out
    assert re.search(r"│\s*a\s*│", out) and re.search(r"│\s*b\s*│", out), out


def test_token_from_the_option_and_exact_losses(remote: Remote) -> None:
    def run(*loss: str) -> tuple[int, str]:
        result = CliRunner().invoke(
            app,
            [
                "query",
                DS,
                "SELECT COUNT(*)",
                *loss,
                "--server",
                remote.server.url,
                "--token",
                remote.ana,
            ],
            env={"COLUMNS": "120", "NO_COLOR": "1", "DPKIT_TOKEN": ""},
        )
        return result.exit_code, result.output

    code, out = run("--epsilon", "0.3")
    assert code == 0, out
    assert "privacy loss of this query: ε=0.3;" in out  # 3/10 exactly, not 0.299999...
    code, out = run("--rho", "0.01")  # a pure ε budget refuses zCDP charges, before charging
    assert code == 2 and "is not allowed" in out, out


def test_refusals_are_one_line_and_never_charge(remote: Remote) -> None:
    before = len(_receipts(remote))
    code, out = cli(remote, DS, "SELECT COUNT(*)", "--epsilon", "1", token=remote.bob)
    assert code == 2 and "budget_exceeded" in out and "Nothing was charged" in out, out
    code, out = cli(remote, DS, "SELECT COUNT(*)", "--epsilon", "0.1", token="wrong")
    assert code == 2 and "refused the token" in out, out
    code, out = cli(remote, "other", "SELECT COUNT(*)", "--epsilon", "0.1")
    assert code == 2 and "no dataset 'other'" in out and DS in out, out
    code, out = cli(remote, DS, "SELECT COUNT(*) FROM 'secret.csv'", "--epsilon", "0.1")
    assert code == 2, out
    code, out = cli(remote, DS, "SELECT SUM(salary, 0, 1)", "--epsilon", "0.1")
    assert code == 2 and "400 invalid_request" in out, out
    code, out = cli(remote, DS, "SELECT dept, COUNT(*) GROUP BY dept", "--epsilon", "0.1")
    assert code == 2 and "needs δ > 0" in out, out
    code, out = cli(remote, DS, "SELECT COUNT(*)", "--epsilon", "0.1", "--max-rows", "3")
    assert code == 2 and "--max-rows cannot be used with --server" in out, out
    code, out = cli(remote, DS, "SELECT COUNT(*)", "--epsilon", "1e-9")
    assert code == 2 and "floor" in out, out
    assert len(_receipts(remote)) == before


def test_missing_token_and_unreachable_server(remote: Remote) -> None:
    code, out = cli(remote, DS, "SELECT COUNT(*)", "--epsilon", "0.1", token="")
    assert code == 2 and "give --token" in out, out
    result = CliRunner().invoke(
        app,
        [
            "query",
            DS,
            "SELECT COUNT(*)",
            "--epsilon",
            "0.1",
            "--token",
            "x",
            "--server",
            "http://127.0.0.1:9",
        ],
        env={"COLUMNS": "120", "NO_COLOR": "1"},
    )
    assert result.exit_code == 1 and "could not reach the dpkit service" in result.output


def test_rendering_is_the_local_renderers_on_the_same_release(tmp_path: Path) -> None:
    """The server-side Release and the one rebuilt from its JSON print the same text."""
    from dpkit.analytics._querytext import parse_query
    from dpkit.analytics._render import render_release
    from dpkit.cli.remote import release_from_answer
    from dpkit.client import Answer
    from dpkit.core._losses import ApproxDP, PureDP
    from dpkit.service import Service, ServiceConfig
    from dpkit.service._app import query_out

    write_people(tmp_path / "data")
    service = Service(
        ServiceConfig(
            database=f"sqlite:///{tmp_path}/s.db",
            data_root=tmp_path / "data",
            bootstrap_token=OFFICER,
        )
    )
    try:
        officer = service.authenticate(OFFICER)
        assert officer is not None
        service.register_dataset(
            officer, "people", "people.csv", "person", {"age": "numeric"}, {}, ApproxDP(10, 1e-5)
        )
        service.create_principal(officer, "ana", "analyst")
        service.set_allowance(officer, "people", "ana", ApproxDP(10, 1e-5))
        ana = service.registry.authenticate(service.registry.issue_token("ana")[1])
        assert ana is not None
        cases = [
            ("SELECT COUNT(*), AVG(age, 0, 100), MEDIAN(age, 0, 100)", None, PureDP(1)),
            ("SELECT dept, COUNT(*), SUM(age, 0, 100) GROUP BY dept", {"dept": ["a", "b"]}, None),
            ("SELECT HISTOGRAM(age, 0, 30, 60, 90)", None, None),
            ("SELECT dept, COUNT(*) GROUP BY dept", None, ApproxDP(1, 1e-6)),
        ]
        for sql, keys, loss in cases:
            release, remaining = service.query(
                ana, "people", loss or PureDP(Fraction(1, 2)), sql=sql, keys=keys
            )
            wire = json.loads(query_out(release, remaining).model_dump_json())
            answer = Answer(
                wire["tables"],
                wire["accuracy"],
                wire["loss"],
                wire["receipt"],
                wire["remaining"],
                wire["columns"],
            )
            parsed = parse_query(sql, "person")
            texts = []
            for shown in (release, release_from_answer(answer)):
                console = Console(record=True, width=120, no_color=True, file=io.StringIO())
                render_release(
                    shown, console, "t", aggregations=parsed.aggregations, keys=parsed.group_by
                )
                texts.append(console.export_text())
            assert texts[0] == texts[1], sql
    finally:
        service.close()
