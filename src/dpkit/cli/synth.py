"""``dpkit synth``: a synthetic table from a private one, charged to the ledger as one release.

::

    dpkit budget create adult --epsilon 1 --delta 1e-9 --unit row
    dpkit synth adult.csv --dataset adult --epsilon 1 --delta 1e-9 \\
        --domain adult-domain.json --out adult-synth.parquet

The domain file (``{column: size}`` or ``{column: [values]}``) is public; rows with a value
outside it are dropped inside the engine. The dataset's privacy unit comes from the ledger:
``row`` (every row is a person) or a column of the data, with ``--max-rows``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dpkit._format import format_loss, human_number
from dpkit.cli._common import (
    EPSILON_CEILING,
    EPSILON_FLOOR,
    LEDGER_HELP,
    CLIError,
    check_ledger_file,
    check_positive_flag,
    handles_errors,
    out_console,
    resolve_ledger,
    spinner,
)

__all__ = ["synth_command"]


@handles_errors
def synth_command(
    data: Annotated[
        Path, typer.Argument(help="CSV or Parquet file.", metavar="DATA", show_default=False)
    ],
    dataset: Annotated[
        str,
        typer.Option(
            "--dataset", "-d", help="The dataset in the ledger whose budget the fit spends."
        ),
    ],
    domain: Annotated[
        Path,
        typer.Option(help="Public domain file: JSON {column: size} or {column: [values]}."),
    ],
    out: Annotated[Path, typer.Option(help="Where to write the synthetic table (.parquet/.csv).")],
    epsilon: Annotated[float | None, typer.Option(help="ε the fit may spend.")] = None,
    delta: Annotated[float | None, typer.Option(help="δ (required with --epsilon).")] = None,
    rho: Annotated[float | None, typer.Option(help="ρ (zCDP) instead of ε and δ.")] = None,
    method: Annotated[str, typer.Option(help="The mechanism: mst or aim.")] = "mst",
    workload: Annotated[
        list[str] | None,
        typer.Option(
            help="AIM: a marginal the table should keep, as comma-separated columns "
            "(repeat the option; default: every 3-way marginal)."
        ),
    ] = None,
    max_model_mb: Annotated[
        float | None,
        typer.Option(help="AIM: the model size limit in MB (default 80)."),
    ] = None,
    rows: Annotated[
        int | None, typer.Option(help="Rows to generate (default: the noisy row count).")
    ] = None,
    max_rows: Annotated[
        int | None,
        typer.Option(help="Rows one person may contribute (when the unit is a column)."),
    ] = None,
    max_cells: Annotated[
        int | None,
        typer.Option(
            help="The limit on the count tables' cells (default 10,000,000 for MST, "
            "50,000,000 for AIM)."
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Also write a PNG of measured vs synthetic marginals (post-processing, free)."
        ),
    ] = None,
    ledger: Annotated[str | None, typer.Option("--ledger", "-l", help=LEDGER_HELP)] = None,
) -> None:
    """Fit a synthetic-data model (MST or AIM) on DATA and write a synthetic table to --out."""
    check_positive_flag("--epsilon", epsilon, floor=EPSILON_FLOOR, ceiling=EPSILON_CEILING)
    check_positive_flag("--rho", rho, floor=EPSILON_FLOOR, ceiling=EPSILON_CEILING)
    if (epsilon is None) == (rho is None):
        raise CLIError("give --epsilon with --delta, or --rho", "e.g. --epsilon 1 --delta 1e-9")
    if epsilon is not None and delta is None:
        raise CLIError(
            "--delta is required with --epsilon: MST and AIM measure with Gaussian noise",
            "Pass a δ far below 1/n for n people, e.g. --delta 1e-9 (or use --rho).",
        )
    if rho is not None and delta is not None:
        raise CLIError("--rho and --delta were both given", "A zCDP fit takes --rho alone.")
    if delta is not None and not 0 < delta < 1e-3:
        raise CLIError(
            f"--delta must be in (0, 0.001) (got {human_number(delta)})",
            "δ is the chance the guarantee fails outright: keep it far below 1/n.",
        )
    if out.suffix.lower() not in (".parquet", ".csv"):
        raise CLIError(f"--out {str(out)!r} must end in .parquet or .csv")
    if not data.is_file():
        raise CLIError(f"no data file at {str(data)!r}")
    if plot is not None and plot.suffix.lower() != ".png":
        raise CLIError(f"--plot {str(plot)!r} must end in .png")
    if rows is not None and rows < 1:
        raise CLIError(f"--rows must be at least 1 (got {rows})")

    from dpkit.ledger import BudgetMonitor, Ledger
    from dpkit.synth import Domain, fit

    where = resolve_ledger(ledger)
    check_ledger_file(where)
    opened = Ledger.open(where, monitor=BudgetMonitor(log=False))
    budgets = {(s.dataset, s.analyst): s for s in opened.budgets()}
    if (dataset, None) not in budgets:
        raise CLIError(
            f"dataset {dataset!r} does not exist in the ledger {where}",
            f"A privacy officer creates it first: dpkit budget create {dataset} --epsilon E "
            "--delta D --unit row (or --unit COLUMN).",
        )
    unit: str | None = budgets[(dataset, None)].privacy_unit
    if unit == "row":
        unit = None
        if max_rows is not None:
            raise CLIError("--max-rows applies only when the dataset's unit is a column")
    elif max_rows is None:
        raise CLIError(
            f"give --max-rows: the rows one {unit} may contribute",
            f"The dataset's privacy unit is the column {unit!r}.",
        )
    parsed = Domain.load(domain)
    budget: dict[str, Any] = {"rho": rho} if rho is not None else {"epsilon": epsilon}
    if workload:
        budget["workload"] = [tuple(c.strip() for c in w.split(",")) for w in workload]
    if max_model_mb is not None:
        budget["max_model_mb"] = max_model_mb
    if delta is not None:
        budget["delta"] = delta
    with spinner(f"fitting {method} on {data.name}"):
        model = fit(
            str(data),
            parsed,
            method=method,
            privacy_unit=unit,
            max_rows=max_rows,
            ledger=opened,
            dataset=dataset,
            max_cells=max_cells,
            **budget,
        )
        table = model.sample(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".csv":
        table.to_csv(out, index=False)
    else:
        table.to_parquet(out, index=False)
    console = out_console()
    console.print(
        f"wrote {len(table):,} synthetic rows × {table.shape[1]} columns to {out} "
        f"({method}; charged {format_loss(model.loss)} to dataset {dataset!r})"
    )
    if model.selected:
        chosen = ", ".join("×".join(m) for m in model.selected)
        console.print(f"marginals AIM measured, by round: {chosen}")
    if model.tree:
        pairs = ", ".join(f"{a}–{b}" for a, b in model.tree)
        console.print(f"2-way marginals measured: {pairs}")
    if plot is not None:
        model.plot(plot)
        console.print(f"wrote the measured-vs-synthetic plot to {plot}")
    console.print(f"remaining budget: {format_loss(opened.remaining(dataset))}")
