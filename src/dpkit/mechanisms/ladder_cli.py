"""``dpkit ladder``: the neighbour-set (ladder) mechanism's command line.

The lead mounts :data:`ladder_app` on the main app as ``dpkit ladder``; ``reproduce`` writes the
reproduction of Wu, He & Xia (2017), Section 6 (heat maps, densities, table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["ladder_app"]

ladder_app = typer.Typer(
    name="ladder",
    help="The neighbour-set (ladder) mechanism of Wu, He & Xia (2017).",
    no_args_is_help=True,
    add_completion=False,
)


@ladder_app.callback()
def _ladder() -> None:
    """The neighbour-set (ladder) mechanism of Wu, He & Xia (2017)."""


@ladder_app.command()
def reproduce(
    out: Annotated[
        Path, typer.Option("--out", help="Directory to write the figures and tables to.")
    ],
    quick: Annotated[bool, typer.Option("--quick", help="Coarser grids (a few seconds).")] = False,
    sets: Annotated[
        str, typer.Option("--sets", help="Comma-separated subset of V1..V7 (default: all).")
    ] = "V1,V2,V3,V4,V5,V6,V7",
) -> None:
    """Reproduce the paper's Figs. 1-3 and a table of rate, δ*, n and N for V1-V7."""
    from dpkit.mechanisms._ladder._reproduce import PAPER_SETS
    from dpkit.mechanisms._ladder._reproduce import reproduce as run

    names = tuple(name.strip().upper() for name in sets.split(",") if name.strip())
    unknown = [name for name in names if name not in PAPER_SETS]
    if unknown or not names:
        raise typer.BadParameter(
            f"unknown set(s) {', '.join(unknown) or '(none given)'}; choose from "
            + ", ".join(PAPER_SETS),
            param_hint="--sets",
        )
    result = run(out, quick=quick, names=names)
    for path in [*result["figures"], *result["table"]]:
        typer.echo(f"wrote {path}")
    typer.echo(f"done in {result['seconds']:.1f} s")
