"""The ``dpkit`` command line."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="dpkit",
    help="dpkit: differential privacy with exact books.",
    no_args_is_help=True,
    add_completion=False,
)


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
