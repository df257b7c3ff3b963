"""`dpkit synth` in-process: writes a synthetic table, charges the ledger once, refuses bad
flags before anything is charged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import dpkit as dp
from dpkit.cli.synth import synth_command
from dpkit.ledger import Ledger

app = typer.Typer()
app.command("synth")(synth_command)


@app.command()
def other() -> None:  # a second command keeps "synth" a sub-command, as in the main app
    """Unused."""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, 300)
    frame = pd.DataFrame({"a": a, "b": (a + rng.integers(0, 2, 300)) % 4, "c": a % 2})
    data = tmp_path / "t.csv"
    frame.to_csv(data, index=False)
    domain = tmp_path / "domain.json"
    domain.write_text(json.dumps({"a": 3, "b": 4, "c": 2}))
    ledger = tmp_path / "ledger.sqlite"
    book = Ledger.open(str(ledger))
    book.create_budget("t", dp.ApproxDP(2, 1e-6), privacy_unit="row")
    book.close()
    return data, domain, ledger


def test_synth_writes_a_table_and_charges_once(files: tuple[Path, Path, Path]) -> None:
    data, domain, ledger = files
    out = data.parent / "out.parquet"
    result = CliRunner().invoke(
        app,
        [
            "synth",
            str(data),
            "--dataset",
            "t",
            "--epsilon",
            "1",
            "--delta",
            "1e-9",
            "--domain",
            str(domain),
            "--out",
            str(out),
            "--ledger",
            str(ledger),
            "--rows",
            "123",
        ],
    )
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out)
    assert list(table.columns) == ["a", "b", "c"] and len(table) == 123
    book = Ledger.open(str(ledger))
    spent = book.spent("t")
    assert isinstance(spent, dp.ApproxDP) and 0.999 < spent.epsilon <= 1
    assert spent.delta == dp.Fraction(1, 10**9)
    assert [e.kind for e in book.history()].count("commit") == 1


def test_synth_with_aim_and_a_workload(files: tuple[Path, Path, Path]) -> None:
    data, domain, ledger = files
    out = data.parent / "out.csv"
    result = CliRunner().invoke(
        app,
        [
            "synth",
            str(data),
            "--dataset",
            "t",
            "--epsilon",
            "1",
            "--delta",
            "1e-9",
            "--domain",
            str(domain),
            "--out",
            str(out),
            "--ledger",
            str(ledger),
            "--method",
            "aim",
            "--workload",
            "a,b",
            "--workload",
            "c",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "AIM measured" in result.output
    assert "measured-vs-synthetic plot" not in result.output
    table = pd.read_csv(out)
    assert list(table.columns) == ["a", "b", "c"]
    spent = Ledger.open(str(ledger)).spent("t")
    assert isinstance(spent, dp.ApproxDP) and 0.999 < spent.epsilon <= 1


def test_synth_writes_the_measured_vs_synthetic_plot(files: tuple[Path, Path, Path]) -> None:
    data, domain, ledger = files
    plot = data.parent / "plot.png"
    args = ["synth", str(data), "-d", "t", "--epsilon", "1", "--delta", "1e-9", "--domain"]
    args += [str(domain)]
    args += ["--out", str(data.parent / "o.csv"), "--ledger", str(ledger), "--method", "aim"]
    result = CliRunner().invoke(app, [*args, "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert "measured-vs-synthetic plot" in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    refused = CliRunner().invoke(app, [*args, "--plot", str(data.parent / "p.pdf")])
    assert refused.exit_code != 0 and "must end in .png" in refused.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--epsilon", "1"], "--delta is required"),
        (["--epsilon", "1", "--delta", "0.5"], "--delta must be"),
        (["--rho", "1", "--delta", "1e-9"], "--rho and --delta"),
        (["--epsilon", "1", "--delta", "1e-9", "--max-rows", "2"], "--max-rows"),
        (["--epsilon", "1", "--delta", "1e-9", "--max-cells", "5"], "max_cells"),
        (["--rho", "1", "--method", "aim", "--workload", "a,zz"], "zz"),
        (["--rho", "1", "--method", "aim", "--max-model-mb", "1e-9"], "max_model_mb"),
    ],
)
def test_bad_flags_are_refused_with_nothing_charged(
    files: tuple[Path, Path, Path], flags: list[str], message: str
) -> None:
    data, domain, ledger = files
    out = data.parent / "out.parquet"
    result = CliRunner().invoke(
        app,
        [
            "synth",
            str(data),
            "--dataset",
            "t",
            "--domain",
            str(domain),
            "--out",
            str(out),
            "--ledger",
            str(ledger),
            *flags,
        ],
    )
    assert result.exit_code == 2, result.output
    assert message in result.output.replace("\n", " ")
    assert Ledger.open(str(ledger)).spent("t") == dp.ApproxDP(0, 0)
    assert not out.exists()
