"""``dpkit demo`` and ``dpkit version``."""

from __future__ import annotations

import typer

from dpkit.cli._common import handles_errors, out_console

__all__ = ["demo_command", "version_command"]


@handles_errors
def demo_command() -> None:
    """Run the seed material's worked examples end to end."""
    from dpkit.demos import run_demo

    run_demo(out_console())


def version_command() -> None:
    """Print dpkit's version."""
    from dpkit.cli import _VERSION

    typer.echo(_VERSION)
