"""The command line: `dpkit demo` runs the seed's worked examples end to end."""

from __future__ import annotations

from typer.testing import CliRunner

from dpkit.cli import app


def test_demo_runs_every_section() -> None:
    result = CliRunner().invoke(app, ["demo"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    for text in (
        "Randomized response",
        "ln 3",
        "30 of 100",
        "Sum, mean and selection",
        "most common band",
        "Laplace versus staircase",
    ):
        assert text in result.output
    # the budget is spent exactly: the last row leaves 0
    assert "│     1 │    0 │" in result.output or "1 │ 0" in result.output.replace("  ", " ")


def test_version() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.strip() == "0.1.0"
