"""``dpkit budget``: inspect privacy budgets and their consumption.

    dpkit budget status  --ledger sqlite:///ledger.db [--dataset visits] [--json]
    dpkit budget history --ledger sqlite:///ledger.db [--dataset visits] [--plot usage.png]

The ledger can also be named by the ``DPKIT_LEDGER`` environment variable. Both commands only
read; they open the ledger without refusing an inconsistent one, and report its integrity.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dpkit.core.losses import PrivacyLoss
from dpkit.errors import DPError
from dpkit.ledger._alerts import DEFAULT_THRESHOLDS, BudgetMonitor
from dpkit.ledger._ledger import Ledger

__all__ = ["budget_app", "write_consumption_plot"]

budget_app = typer.Typer(
    name="budget",
    help="Privacy budgets: what each dataset and analyst may spend, and has spent.",
    no_args_is_help=True,
    add_completion=False,
)

LedgerOption = Annotated[
    str,
    typer.Option(
        "--ledger",
        "-l",
        envvar="DPKIT_LEDGER",
        help="The ledger: a path or sqlite:///path.db (or set DPKIT_LEDGER).",
    ),
]
DatasetOption = Annotated[str | None, typer.Option("--dataset", "-d", help="Only this dataset.")]


def _open(ledger: str) -> Ledger:
    if ledger != ":memory:" and "://" not in ledger and not Path(ledger).exists():
        raise DPError(f"no ledger at {ledger!r}; give --ledger PATH or set DPKIT_LEDGER.")
    if ledger.startswith("sqlite:///"):
        path = ledger[len("sqlite:///") :]
        if path and path != ":memory:" and not Path(path).exists():
            raise DPError(f"no ledger at {path!r}; give --ledger PATH or set DPKIT_LEDGER.")
    return Ledger.open(ledger, verify=False, monitor=BudgetMonitor(log=False))


def _fail(console: Console, exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(code=1)


def _loss_json(loss: PrivacyLoss) -> dict[str, str]:
    return {k: str(v) for k, v in _loss_fields(loss).items()}


def _loss_fields(loss: PrivacyLoss) -> dict[str, Fraction]:
    fields = getattr(loss, "__slots__", ())
    return {name: getattr(loss, name) for name in fields}


@budget_app.command("status")
def status(
    ledger: LedgerOption = "dpkit-ledger.db",
    dataset: DatasetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show every budget: total, spent, remaining, share used, charges, integrity."""
    console = Console()
    try:
        opened = _open(ledger)
        try:
            statuses = opened.budgets(dataset)
            report = opened.replay()
        finally:
            opened.close()
    except DPError as exc:
        _fail(console, exc)
        return
    if as_json:
        payload = {
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
    table = Table(title=f"privacy budgets in {ledger}")
    for column in ("dataset", "analyst", "unit", "total", "spent", "remaining", "used", "charges"):
        table.add_column(column, justify="right" if column in ("used", "charges") else "left")
    for s in statuses:
        used = float(s.used)
        colour = "red" if used >= 1 else "yellow" if used >= 0.8 else "green"
        table.add_row(
            s.dataset,
            s.analyst or "-",
            s.privacy_unit,
            str(s.total),
            str(s.spent),
            str(s.remaining),
            f"[{colour}]{used:.1%}[/]",
            str(s.charges),
        )
    console.print(table)
    if not statuses:
        console.print("no budgets" + (f" for dataset {dataset!r}" if dataset else ""))
    if report.pending:
        console.print(
            f"{len(report.pending)} reservation(s) never committed (still spent): "
            + ", ".join(str(p) for p in report.pending[:10])
        )
    if report.ok:
        console.print(f"integrity: ok ({report.entries} entries replayed)")
    else:
        console.print("[bold red]integrity: FAILED[/] - " + "; ".join(report.mismatches[:5]))
        raise typer.Exit(code=2)


@budget_app.command("history")
def history(
    ledger: LedgerOption = "dpkit-ledger.db",
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
    console = Console()
    try:
        opened = _open(ledger)
        try:
            entries = opened.history(dataset, analyst)
            series = opened.consumption(dataset, analyst)
        finally:
            opened.close()
    except DPError as exc:
        _fail(console, exc)
        return
    table = Table(title=f"ledger entries ({len(entries)} in all, last {min(limit, len(entries))})")
    for column in ("id", "time (UTC)", "kind", "dataset", "analyst", "loss", "mechanism", "note"):
        table.add_column(column)
    for e in entries[-limit:] if limit > 0 else []:
        when = datetime.fromtimestamp(e.timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        note = e.receipt or e.detail or (e.query[:40] if e.query else "")
        if e.ref is not None:
            note = f"#{e.ref} {note}".strip()
        table.add_row(
            str(e.id),
            when,
            e.kind,
            e.dataset,
            e.analyst or "-",
            "" if e.loss is None else str(e.loss),
            e.mechanism,
            note,
        )
    console.print(table)
    if plot is not None:
        write_consumption_plot(series, plot)
        console.print(f"wrote {plot}")


def write_consumption_plot(
    series: dict[tuple[str, str | None], list[tuple[float, Fraction, PrivacyLoss]]],
    path: Path,
) -> None:
    """A PNG of the share of each budget used over time (Agg canvas; no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

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
