"""The DP TPC-H queries of benchmarks/tpch.py through ``dpkit query`` over several tables
(``--table``/``--public``/``--unit``/``--link``, the arguments benchmarks/tpch_frontends.py
gives), on a tiny generated TPC-H database: each answered, and from the same exact (bounded,
pre-noise) engine outputs and with the same group keys as the Python API's
``Session.evaluate_sql`` (the planner's salt fixed, so rows beyond a bound are dropped alike)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpkit.cli import app

sys.path.append(str(Path(__file__).resolve().parents[3] / "benchmarks"))
import tpch_frontends

QUERIES = tpch_frontends.tpch().QUERIES


@pytest.fixture(scope="module")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tpch_frontends.write_tiny(tmp_path_factory.mktemp("tpch"))


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_cli_answers_as_the_python_api(tpch_dir: Path, tmp_path: Path, name: str) -> None:
    ledger = str(tmp_path / "ledger.sqlite")
    tpch_frontends.create_budget(ledger)
    with tpch_frontends.exact_outputs() as seen:
        tpch_frontends.python_api(tpch_dir, name)
        args = tpch_frontends.cli_args(name, tpch_dir, "tpch", ledger)
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "after the joins" in result.output
    api, cli = seen
    assert api[0], "the tiny database gives no rows"
    assert cli == api
    for values in QUERIES[name].keys.values():
        assert str(values[-1]) in result.output  # every public key is printed
