"""The ``dpkit`` command line: every command, in one place.

The command tree at a glance::

    dpkit query DATA "SELECT ..." --dataset D --epsilon E --max-rows K   (dpkit.cli.query)
    dpkit synth DATA --dataset D --epsilon E --delta D --domain F --out O  (dpkit.cli.synth)
    dpkit budget create DATASET --epsilon E --unit COLUMN               (dpkit.cli.budget)
    dpkit budget status | history                                        (dpkit.cli.budget)
    dpkit ladder reproduce --out DIR                                     (dpkit.cli.ladder)
    dpkit demo                                                           (dpkit.cli.demo)
    dpkit version   /   dpkit --version

Each command lives in its own module and is listed once in :data:`COMMANDS`; adding a command is
one line there. Command modules import only typer at import time (pandas, DuckDB, numpy load
inside the command), so ``dpkit --help`` and ``dpkit --version`` stay fast.
"""

from __future__ import annotations

import importlib
from typing import Annotated

from dpkit._extras import require

require("cli", by="dpkit.cli")

import typer

from dpkit.cli._common import default_ledger_path

__all__ = ["COMMANDS", "app", "main"]

COMMANDS: dict[str, str] = {
    # name: "module:attribute" — a function becomes a command, a typer.Typer a command group
    "query": "dpkit.cli.query:query_command",
    "synth": "dpkit.cli.synth:synth_command",
    "budget": "dpkit.cli.budget:budget_app",
    "ladder": "dpkit.cli.ladder:ladder_app",
    "demo": "dpkit.cli.demo:demo_command",
    "version": "dpkit.cli.demo:version_command",
    "serve": "dpkit.cli.serve:serve_command",
}

_VERSION = "0.1.0"  # kept equal to dpkit.__version__ by tests/unit/test_cli_startup.py

app = typer.Typer(
    name="dpkit",
    help=(
        "dpkit: differential privacy with exact books.\n\n"
        "Budgets live in one ledger for every command: --ledger PATH, else $DPKIT_LEDGER, else "
        f"{default_ledger_path()}. A privacy officer creates each dataset's budget "
        "(dpkit budget create); queries spend it (dpkit query)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(_VERSION)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """dpkit: differential privacy with exact books."""


def _register(target: typer.Typer, commands: dict[str, str]) -> None:
    for name, where in commands.items():
        module_name, attribute = where.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if isinstance(command, typer.Typer):
            target.add_typer(command, name=name)
        else:
            target.command(name)(command)


_register(app, COMMANDS)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="dpkit")


if __name__ == "__main__":
    main()
