"""benchmarks/tpch_tumult.py's dpkit path on the tiny TPC-H database: without Tumult's side
environment it says how to make one and runs dpkit alone (the default suite never needs
Tumult)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "benchmarks"))
import tpch_frontends  # noqa: E402
import tpch_tumult  # noqa: E402


def test_without_tumult_it_runs_dpkit_alone(tmp_path: Path) -> None:
    directory = tpch_frontends.write_tiny(tmp_path / "tpch")
    command = [sys.executable, str(ROOT / "benchmarks/tpch_tumult.py"), "--dir", str(directory)]
    command += ["--runs", "1", "--queries", "Q3", "Q6"]
    command += ["--tumult-python", str(tmp_path / "missing/bin/python")]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "pip install tmlt.analytics" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("Q")]
    rows = [row for row in rows if not row[0].endswith(":")]  # not the notes at the end
    assert [row[:2] for row in rows] == [["Q3", "dpkit"], ["Q6", "dpkit"]]
    for row in rows:
        assert row[2].endswith("%") and float(row[5]) > 0  # an error and a warm time


def test_every_query_says_what_tumult_needed() -> None:
    queries = tpch_tumult._tpch().QUERIES
    assert {"Q1", "Q3", "Q6", "Q10"} <= set(tpch_tumult.TUMULT) <= set(queries)
