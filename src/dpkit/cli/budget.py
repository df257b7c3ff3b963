"""``dpkit budget``: create, inspect and audit privacy budgets.

::

    dpkit budget create transactions --epsilon 3 --unit user_id     # a privacy officer's act
    dpkit budget status  [--dataset transactions] [--json]
    dpkit budget history [--dataset transactions] [--plot usage.png]

Every command uses the one default ledger (``--ledger``, else ``$DPKIT_LEDGER``, else
``~/.local/share/dpkit/ledger.sqlite``). ``status`` and ``history`` only read: they open the
ledger without refusing an inconsistent one, and report its integrity.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dpkit._format import format_loss, human_number
from dpkit.cli._common import (
    DELTA_REFUSE,
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

if TYPE_CHECKING:
    from dpkit.core._losses import PrivacyLoss
    from dpkit.ledger import Ledger

__all__ = ["budget_app", "write_consumption_plot"]

budget_app = typer.Typer(
    name="budget",
    help="Privacy budgets: create one per dataset, then see what was spent. " + LEDGER_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

LedgerOption = Annotated[str | None, typer.Option("--ledger", "-l", help=LEDGER_HELP)]
DatasetOption = Annotated[str | None, typer.Option("--dataset", "-d", help="Only this dataset.")]


def _open(ledger: str, *, verify: bool = False, must_exist: bool = True) -> Ledger:
    from dpkit.ledger import BudgetMonitor, Ledger

    check_ledger_file(ledger, must_exist=must_exist)
    if not must_exist:
        path = Path(ledger[len("sqlite:///") :] if ledger.startswith("sqlite:///") else ledger)
        if "://" not in ledger or ledger.startswith("sqlite:///"):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise CLIError(
                    f"cannot create the ledger's directory {str(path.parent)!r} "
                    f"({error.strerror or type(error).__name__})",
                    "Choose another place with --ledger PATH or DPKIT_LEDGER.",
                ) from None
    return Ledger.open(ledger, verify=verify, monitor=BudgetMonitor(log=False))


def _check_dataset(opened: Ledger, dataset: str | None, analyst: str | None = None) -> None:
    budgets = opened.budgets()
    known = sorted({s.dataset for s in budgets})
    if dataset is not None and dataset not in known:
        raise CLIError(
            f"dataset {dataset!r} does not exist in this ledger",
            "Known datasets: " + (", ".join(known) or "none yet") + ".",
        )
    analysts = sorted({s.analyst for s in budgets if s.analyst and dataset in (None, s.dataset)})
    if analyst is not None and analyst not in analysts:
        raise CLIError(
            f"analyst {analyst!r} has no budget"
            + (f" under dataset {dataset!r}" if dataset else " in this ledger"),
            "Known analysts: " + (", ".join(analysts) or "none") + ".",
        )


def _loss_json(loss: PrivacyLoss) -> dict[str, str]:
    return {k: str(v) for k, v in _loss_fields(loss).items()}


def _loss_fields(loss: PrivacyLoss) -> dict[str, Fraction]:
    fields = getattr(loss, "__slots__", ())
    return {name: getattr(loss, name) for name in fields}


@budget_app.command("create")
@handles_errors
def create(
    dataset: Annotated[str, typer.Argument(help="The dataset's name, e.g. transactions.")],
    unit: Annotated[
        str,
        typer.Option(
            "--unit",
            help="The privacy unit column (one person), e.g. user_id; for a dataset of several "
            "tables TABLE.COLUMN, e.g. customer.c_custkey.",
        ),
    ],
    epsilon: Annotated[float | None, typer.Option(help="The dataset's total ε.")] = None,
    delta: Annotated[float | None, typer.Option(help="The dataset's total δ (optional).")] = None,
    rho: Annotated[float | None, typer.Option(help="A zCDP budget ρ instead of ε.")] = None,
    analyst: Annotated[
        str | None, typer.Option(help="Create an analyst's budget under the dataset's.")
    ] = None,
    actor: Annotated[str, typer.Option(help="Who creates it (recorded).")] = "",
    ledger: LedgerOption = None,
) -> None:
    """Create DATASET's privacy budget (a privacy officer's act; queries never create one)."""
    from dpkit._exact import fraction_of
    from dpkit.core._losses import ZCDP, ApproxDP, PureDP

    if rho is not None and (epsilon is not None or delta is not None):
        raise CLIError("give either --rho or --epsilon [--delta], not both")
    if rho is None and epsilon is None:
        raise CLIError("give the budget: --epsilon E [--delta D] or --rho R")
    check_positive_flag("--epsilon", epsilon, floor=EPSILON_FLOOR)
    check_positive_flag("--rho", rho, floor=EPSILON_FLOOR)
    if delta is not None and not 0 <= delta < DELTA_REFUSE:
        raise CLIError(
            f"--delta must be in [0, {DELTA_REFUSE:g}) (got {human_number(delta)})",
            "δ is the chance the guarantee fails outright; keep it far below 1/n.",
        )
    total: Any
    if rho is not None:
        total = ZCDP(fraction_of("rho", rho))
    elif epsilon is not None and delta:
        total = ApproxDP(fraction_of("epsilon", epsilon), fraction_of("delta", delta))
    else:
        assert epsilon is not None
        total = PureDP(fraction_of("epsilon", epsilon))
    table, dot, column = unit.partition(".")
    if dot and (not table.strip() or not column.strip() or "." in column):
        raise CLIError(
            f"--unit {unit!r}: expected a column, or TABLE.COLUMN for a dataset of several tables",
            "e.g. --unit user_id, or --unit customer.c_custkey (dpkit query --table ...).",
        )
    where = resolve_ledger(ledger)
    opened = _open(where, verify=True, must_exist=False)
    try:
        if any(s.dataset == dataset and s.analyst == analyst for s in opened.budgets(dataset)):
            raise CLIError(
                f"dataset {dataset!r}"
                + (f" (analyst {analyst!r})" if analyst else "")
                + " already has a budget",
                "A budget is created once; see it with `dpkit budget status`.",
            )
        status = opened.create_budget(
            dataset, total, analyst=analyst, privacy_unit=unit, actor=actor
        )
    finally:
        opened.close()
    typer.echo(
        f"created the budget of dataset {dataset!r}"
        + (f", analyst {analyst!r}" if analyst else "")
        + f": {format_loss(status.total)} per {status.privacy_unit}, in ledger {where}"
    )


@budget_app.command("status")
@handles_errors
def status(
    ledger: LedgerOption = None,
    dataset: DatasetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show every budget: total, spent, remaining, share used, charges, integrity."""
    from rich.table import Table

    where = resolve_ledger(ledger)
    opened = _open(where)
    try:
        _check_dataset(opened, dataset)
        statuses = opened.budgets(dataset)
        with spinner("replaying the ledger's entries"):
            report = opened.replay()
    finally:
        opened.close()
    if as_json:
        payload = {
            "ledger": where,
            "budgets": [
                {
                    "dataset": s.dataset,
                    "analyst": s.analyst,
                    "privacy_unit": s.privacy_unit,
                    "kind": type(s.total).__name__,
                    "total": _loss_json(s.total),
                    "spent": _loss_json(s.spent),
                    "remaining": _loss_json(s.remaining),
                    "used": float(s.used),
                    "charges": s.charges,
                }
                for s in statuses
            ],
            "integrity": {"ok": report.ok, "mismatches": list(report.mismatches)},
            "pending_reservations": list(report.pending),
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    console = out_console()
    table = Table(title="privacy budgets")
    for column in ("dataset", "analyst", "unit", "total", "spent", "remaining", "used", "charges"):
        table.add_column(column, justify="right" if column in ("used", "charges") else "left")
    for s in statuses:
        used = float(s.used)
        colour = "red" if used >= 1 else "yellow" if used >= 0.8 else "green"
        table.add_row(
            s.dataset,
            s.analyst or "-",
            s.privacy_unit,
            format_loss(s.total),
            format_loss(s.spent),
            format_loss(s.remaining),
            f"[{colour}]{used:.1%}[/]",
            str(s.charges),
        )
    console.print(table)
    console.print(f"ledger: {where}", soft_wrap=True, markup=False)
    if not statuses:
        console.print("no budgets yet; create one with `dpkit budget create`")
    if report.pending:
        console.print(
            f"{len(report.pending)} reservation(s) never committed (still spent): "
            + ", ".join(str(p) for p in report.pending[:10])
        )
    if report.ok:
        console.print(f"integrity: ok ({report.entries} entries replayed)")
    else:
        console.print("integrity: FAILED - " + "; ".join(report.mismatches[:5]))
        raise typer.Exit(code=2)


@budget_app.command("history")
@handles_errors
def history(
    ledger: LedgerOption = None,
    dataset: DatasetOption = None,
    analyst: Annotated[
        str | None, typer.Option("--analyst", "-a", help="Only this analyst.")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", "-p", help="Write consumption over time to this PNG.")
    ] = None,
    limit: Annotated[int, typer.Option(help="Show the last N entries.")] = 50,
) -> None:
    """List the ledger's entries and plot budget consumption over time."""
    from rich.table import Table

    if plot is not None:
        _check_plot_path(plot)
    where = resolve_ledger(ledger)
    opened = _open(where)
    try:
        _check_dataset(opened, dataset, analyst)
        entries = opened.history(dataset, analyst)
        series = opened.consumption(dataset, analyst)
    finally:
        opened.close()
    shown = entries[-limit:] if limit > 0 else []
    from rich import box

    table = Table(
        title=f"ledger entries ({len(entries)} in all, last {len(shown)})",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    rows = []
    for e in shown:
        when = datetime.fromtimestamp(e.timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        note = e.receipt or e.detail or (e.query[:60] if e.query else "")
        if e.ref is not None:
            note = f"#{e.ref} {note}".strip()
        rows.append(
            {
                "id": str(e.id),
                "time (UTC)": when,
                "kind": e.kind,
                "dataset": e.dataset,
                "analyst": e.analyst or "-",
                "loss": format_loss(e.loss),
                "mechanism": e.mechanism,
                "note": note,
            }
        )
    columns = ["id", "time (UTC)", "kind", "dataset", "analyst", "loss", "mechanism", "note"]
    if not any(e.analyst for e in shown):
        columns.remove("analyst")
    caps = {"dataset": 16, "analyst": 12, "mechanism": 14, "loss": 24}
    widths = {
        c: min(max([len(c)] + [len(r[c]) for r in rows]), caps.get(c, 10**6)) for c in columns
    }
    console = out_console()

    def over() -> int:
        return sum(widths[c] for c in columns) + 3 * len(columns) - 1 - console.width

    for column, floor in (("note", 12), ("mechanism", 9)):
        if over() > 0 and column in columns:
            widths[column] = max(floor, widths[column] - over())
    if over() > 0 and "mechanism" in columns:
        columns.remove("mechanism")  # narrow terminal: the time and the loss matter more
        widths["note"] = max(12, widths["note"] - over())
    for column, floor in (("loss", 8), ("dataset", 8), ("analyst", 7), ("note", 6)):
        if over() > 0 and column in columns:
            widths[column] = max(floor, widths[column] - over())
    for c in columns:
        table.add_column(
            c,
            width=widths[c],
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if c == "id" else "left",
        )
    for r in rows:
        table.add_row(*(r[c] for c in columns))
    console.print(table)
    console.print(f"ledger: {where}", soft_wrap=True, markup=False)
    if plot is not None:
        write_consumption_plot(series, plot)
        console.print(f"wrote {plot}")


def _check_plot_path(plot: Path) -> None:
    if plot.suffix.lower() != ".png":
        raise CLIError(f"--plot {str(plot)!r} must end in .png", "e.g. --plot usage.png")
    if plot.is_dir():
        raise CLIError(f"--plot {str(plot)!r} is a directory", "Give a file name ending in .png.")
    parent = plot.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise CLIError(
            f"--plot {str(plot)!r}: {str(parent)!r} is not a directory", "Give a writable path."
        )
    import os

    if not os.access(parent, os.W_OK):
        raise CLIError(
            f"--plot {str(plot)!r}: cannot write in {str(parent)!r}", "Give a writable path."
        )


def write_consumption_plot(
    series: dict[tuple[str, str | None], list[tuple[float, Fraction, PrivacyLoss]]],
    path: Path,
) -> None:
    """A PNG of the share of each budget used over time (Agg canvas; no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from dpkit.ledger._alerts import DEFAULT_THRESHOLDS

    figure = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    start = min((p[0] for points in series.values() for p in points), default=0.0)
    span = max((p[0] for points in series.values() for p in points), default=start) - start
    unit, divisor = ("hours", 3600.0) if span >= 3 * 3600 else ("minutes", 60.0)
    if span < 180:
        unit, divisor = "seconds", 1.0
    ordered = sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
    for (dataset, analyst), points in ordered:
        if not points:
            continue
        times = [(t - start) / divisor for t, _, _ in points]
        used = [100 * float(u) for _, u, _ in points]
        label = dataset + (f" / {analyst}" if analyst else "")
        axes.step(times, used, where="post", label=label, marker=".")
    for level in DEFAULT_THRESHOLDS:
        axes.axhline(100 * float(level), color="grey", linewidth=0.8, linestyle="--")
    origin = datetime.fromtimestamp(start, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    axes.set_xlabel(f"{unit} since the first charge ({origin})")
    axes.set_ylim(0, 105)
    axes.set_ylabel("budget used (%)")
    axes.set_title("privacy budget consumption")
    if series:
        axes.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(str(path), format="png")
