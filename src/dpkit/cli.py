"""The ``dpkit`` command line."""

from __future__ import annotations

import typer

from dpkit.analytics.cli import query_command
from dpkit.ledger.cli import budget_app
from dpkit.mechanisms.ladder_cli import ladder_app
from dpkit.service.cli import serve_command

app = typer.Typer(
    name="dpkit",
    help="dpkit: differential privacy with exact books.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(budget_app, name="budget", help="Privacy budgets: status, history and plots.")
app.command("query", help="Answer a query with differential privacy.")(query_command)
app.command("serve", help="Run the privacy-budget service and its dashboard.")(serve_command)
app.add_typer(ladder_app, name="ladder", help="The neighbor-set (ladder) mechanism: reproduce.")


@app.command()
def demo() -> None:
    """Run the seed material's worked examples end to end."""
    from dpkit.demo import run_demo

    run_demo()


@app.command()
def version() -> None:
    """Print dpkit's version."""
    from dpkit import __version__

    typer.echo(__version__)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
