"""The DP TPC-H queries of benchmarks/tpch.py through the service: the TPC-H tables registered
as datasets over several tables (``tables``/``public``/``links``, one dataset per per-customer
bound, as benchmarks/tpch_frontends.py registers them), asked over SQL with public keys, on a
tiny generated TPC-H database: each answered twice, from the same exact (bounded, pre-noise)
engine outputs and with the same group keys as the Python API's ``Session.evaluate_sql`` (the
planner's salt fixed, so rows beyond a bound are dropped alike)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from conftest import OFFICER, Api

sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))
import tpch_frontends

QUERIES = tpch_frontends.tpch().QUERIES


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_service_answers_as_the_python_api(api: Api, data_root: Path, name: str) -> None:
    directory = tpch_frontends.write_tiny(data_root / "tpch")
    token = tpch_frontends.register(api.client, [name], prefix="tpch/", officer=OFFICER)
    with tpch_frontends.exact_outputs() as seen:
        tpch_frontends.python_api(directory, name)
        answers = [tpch_frontends.ask(api.client, token, name) for _ in range(2)]
    python, *served = seen
    assert python[0], "the tiny database gives no rows"
    assert served == [python, python]
    groups = math.prod(len(values) for values in QUERIES[name].keys.values())
    for answer in answers:
        assert len(answer["tables"]["main"]) == groups
