"""``dpkit ladder reproduce``: the neighbour-set (ladder) mechanism's reproduction.

Writes the reproduction of Wu, He & Xia (2017), Section 6 (heat maps, densities, table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpkit.cli._common import CLIError, handles_errors, spinner

__all__ = ["ladder_app"]

ladder_app = typer.Typer(
    name="ladder",
    help="The neighbour-set (ladder) mechanism of Wu, He & Xia (2017): reproduce the paper.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@ladder_app.callback()
def _ladder() -> None:
    """The neighbour-set (ladder) mechanism of Wu, He & Xia (2017)."""


_OUTPUTS = (
    "fig1_rate_V1-V4.png",
    "fig2_rate_V5-V7.png",
    "fig3_densities.png",
    "ladder_table.csv",
    "ladder_table.md",
    "README.md",
    "rate_grids.npz",
)


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise CLIError(
            f"--out {str(out)!r} is an existing file, not a directory",
            "Give a directory (it is created if missing).",
        )
    existing = [name for name in _OUTPUTS if (out / name).exists()]
    if existing and not force:
        raise CLIError(
            f"--out {str(out)!r} already holds {', '.join(existing[:3])}"
            + (" ..." if len(existing) > 3 else ""),
            "Pass --force to overwrite, or choose another directory.",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".dpkit-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise CLIError(
            f"cannot write to --out {str(out)!r} ({error.strerror or type(error).__name__})",
            "Choose a directory you can write to.",
        ) from None


@ladder_app.command()
@handles_errors
def reproduce(
    out: Annotated[
        Path, typer.Option("--out", help="Directory to write the figures and tables to.")
    ],
    quick: Annotated[bool, typer.Option("--quick", help="Coarser grids (a few seconds).")] = False,
    sets: Annotated[
        str, typer.Option("--sets", help="Comma-separated subset of V1..V7 (default: all).")
    ] = "V1,V2,V3,V4,V5,V6,V7",
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the files of an earlier run.")
    ] = False,
) -> None:
    """Reproduce the paper's Figs. 1-3 and a table of rate, δ*, n and N for V1-V7."""
    names = tuple(name.strip().upper() for name in sets.split(",") if name.strip())
    from dpkit.demos.ladder import PAPER_SETS

    unknown = [name for name in names if name not in PAPER_SETS]
    if unknown or not names:
        raise CLIError(
            f"--sets: unknown set(s) {', '.join(unknown) or '(none given)'}",
            "Choose from " + ", ".join(PAPER_SETS) + ".",
        )
    _check_out(out, force)
    from dpkit.demos.ladder import reproduce as run

    with spinner(f"reproducing {', '.join(names)} ({'quick' if quick else 'full'} grids)"):
        result = run(out, quick=quick, names=names)
    for path in [*result["figures"], *result["table"]]:
        typer.echo(f"wrote {path}")
    typer.echo(f"done in {result['seconds']:.1f} s")
