"""The command line: `dpkit demo` runs the seed's worked examples end to end; the version."""

from __future__ import annotations

from typer.testing import CliRunner

import dpkit
from dpkit.cli import _VERSION, COMMANDS, app


def test_demo_runs_every_section() -> None:
    result = CliRunner().invoke(app, ["demo"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    for text in (
        "Randomized response",
        "ln 3",
        "30 of 100",
        "Sum, mean and selection",
        "band chosen privately",
        "not a count",
        "Laplace versus staircase",
        "alert: dataset 'payroll' crossed 50% of its budget",
        "Synthetic data",
        "education × income",
    ):
        assert text in result.output, text
    # the budget is spent exactly: the last row leaves 0
    assert "│     1 │    0 │" in result.output or "1 │ 0" in result.output.replace("  ", " ")
    assert "privacy budget alert" not in result.output  # no log lines glued onto the report


def test_version() -> None:
    for args in (["version"], ["--version"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0
        assert result.output.strip() == dpkit.__version__ == _VERSION


def test_every_command_is_registered_once() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    for name in COMMANDS:
        assert name in result.output
