"""``dpkit query``: answer one query over a CSV or Parquet file, with differential privacy.

Mount it on the main app with ``app.command("query")(query_command)`` (or use ``query_app``)::

    dpkit query payroll.csv --unit employee_id --epsilon 0.5 --max-rows 1 \\
        --keys department=Engineering,Sales \\
        "SELECT department, COUNT(*), AVG(salary, 0, 300000) GROUP BY department"

The query syntax is described in :mod:`dpkit.analytics.querytext`. With ``--ledger FILE`` the
budget lives in a SQLite ledger and persists across runs (``--budget`` creates it the first
time); without it each run has a fresh budget of ``--budget`` (default: the query's ε).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dpkit._exact import fraction_of
from dpkit.analytics.expr import numeric_columns
from dpkit.analytics.query import KeySet, Query
from dpkit.analytics.querytext import ParsedQuery, parse_query
from dpkit.analytics.results import Release
from dpkit.analytics.session import Session
from dpkit.core.losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import DPError

__all__ = ["query_app", "query_command", "render_release"]


def _parse_keys(specs: list[str], schema: dict[str, str]) -> dict[str, list[Any]]:
    keys: dict[str, list[Any]] = {}
    for spec in specs:
        if "=" not in spec:
            raise typer.BadParameter(f"--keys {spec!r}: expected column=value1,value2,...")
        column, values = spec.split("=", 1)
        items = [v for v in values.split(",") if v != ""]
        if schema.get(column) == "numeric":
            try:
                parsed: list[Any] = [int(v) if v.lstrip("-").isdigit() else float(v) for v in items]
            except ValueError:
                raise typer.BadParameter(f"--keys {column}: {values!r} are not numbers") from None
        elif schema.get(column) == "bool":
            parsed = [v.lower() in ("true", "1", "yes") for v in items]
        else:
            parsed = items
        keys[column] = parsed
    return keys


def _declared_schema(
    specs: list[str], data: Path, parsed: ParsedQuery, unit: str
) -> dict[str, str]:
    """--schema col=kind,... plus, for a CSV file, the columns the query uses as numbers."""
    declared: dict[str, str] = {}
    if data.suffix.lower() not in (".parquet", ".pq"):
        wanted = {c for a in parsed.aggregations for c in _aggregated_columns(a)}
        if parsed.where is not None:
            wanted |= numeric_columns(parsed.where)
        declared = {c: "numeric" for c in sorted(wanted) if c != unit}
    for spec in specs:
        for item in spec.split(","):
            if "=" not in item:
                raise typer.BadParameter(f"--schema {spec!r}: expected column=kind,...")
            column, kind = item.split("=", 1)
            declared[column.strip()] = kind.strip()
    return declared


def _aggregated_columns(agg: Any) -> tuple[str, ...]:
    column = getattr(agg, "column", None)
    return (column,) if isinstance(column, str) else ()


def _budget(epsilon: float | None, delta: float | None, rho: float | None) -> PrivacyLoss:
    if rho is not None:
        return ZCDP(fraction_of("rho", rho))
    if epsilon is None:
        raise typer.BadParameter("give --epsilon (or --rho)")
    if delta:
        return ApproxDP(fraction_of("epsilon", epsilon), fraction_of("delta", delta))
    return PureDP(fraction_of("epsilon", epsilon))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if value == int(value) and abs(value) < 1e15:
            return f"{value:,.0f}"
        return f"{value:,.4g}" if abs(value) >= 1e6 else f"{value:,.3f}"
    return str(value)


def render_release(release: Release, console: Console, title: str = "Result") -> None:
    """Print a release's tables with error bars, its loss and the budget left."""
    for name, frame in release.tables.items():
        _render_table(frame, release, console, title if name == "main" else name)
    console.print(
        f"privacy loss of this query: [bold]{release.loss}[/bold]; "
        f"budget left: [bold]{release.remaining}[/bold]; receipt {release.receipt}"
    )
    for agg, accuracy in release.accuracy.items():
        if accuracy.kind == "rank":
            console.print(f"  {agg}: {accuracy.note}", style="dim")


def _render_table(frame: pd.DataFrame, release: Release, console: Console, title: str) -> None:
    alpha = next(iter(release.accuracy.values())).alpha if release.accuracy else 0.05
    table = Table(title=title, caption=f"± : {100 * (1 - alpha):g}% interval of the noise")
    columns = list(frame.columns)
    bars = {f"{c}_low" for c in columns} | {f"{c}_high" for c in columns}
    if "value" in columns:
        bars |= {"low", "high"}
    shown = [c for c in columns if c not in bars]
    for column in shown:
        table.add_column(column, justify="right")
    for _, row in frame.iterrows():
        cells = []
        for column in shown:
            value = row[column]
            low_name, high_name = (
                (f"{column}_low", f"{column}_high") if column != "value" else ("low", "high")
            )
            if low_name in frame.columns and isinstance(value, int | float):
                half = (float(row[high_name]) - float(row[low_name])) / 2
                cells.append(f"{_fmt(float(value))} ± {_fmt(half)}")
            else:
                cells.append(_fmt(value.item() if hasattr(value, "item") else value))
        table.add_row(*cells)
    console.print(table)


def query_command(
    data: Annotated[Path, typer.Argument(help="CSV or Parquet file.", exists=True, dir_okay=False)],
    query: Annotated[
        str,
        typer.Argument(
            help='The query, e.g. "SELECT dept, COUNT(*), AVG(salary, 0, 200000) GROUP BY dept".'
        ),
    ],
    unit: Annotated[str, typer.Option("--unit", help="The privacy unit column.")],
    epsilon: Annotated[float | None, typer.Option(help="ε this query may spend.")] = None,
    delta: Annotated[float | None, typer.Option(help="δ (needed for private group keys).")] = None,
    rho: Annotated[float | None, typer.Option(help="ρ (zCDP) instead of ε.")] = None,
    max_rows: Annotated[int, typer.Option(help="Rows one unit may contribute.")] = 1,
    max_groups: Annotated[int | None, typer.Option(help="Groups one unit may touch.")] = None,
    max_rows_per_group: Annotated[int | None, typer.Option(help="Rows per unit and group.")] = None,
    keys: Annotated[
        list[str] | None,
        typer.Option("--keys", help="Public group keys: column=v1,v2,... (repeat per column)."),
    ] = None,
    ledger: Annotated[
        Path | None, typer.Option(help="SQLite ledger file (persists the budget).")
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            help="Total ε of the dataset when the ledger has none yet (default: --epsilon)."
        ),
    ] = None,
    dataset: Annotated[str | None, typer.Option(help="Dataset name in the ledger.")] = None,
    engine: Annotated[str, typer.Option(help="duckdb, pandas or spark.")] = "duckdb",
    schema: Annotated[
        list[str] | None,
        typer.Option(
            "--schema",
            help="Declared column kinds: col=numeric|text|bool|temporal,... (a CSV file's "
            "columns are text, except those the query uses as numbers).",
        ),
    ] = None,
    alpha: Annotated[float, typer.Option(help="1 - confidence of the error bars.")] = 0.05,
    explain: Annotated[bool, typer.Option(help="Also print how the query is answered.")] = False,
) -> None:
    """Answer a query over DATA with differential privacy and print the result."""
    console = Console()
    try:
        query_loss = _budget(epsilon, delta, rho)
        if budget is not None:
            total: PrivacyLoss = (
                ApproxDP(fraction_of("budget", budget), query_loss.delta)
                if isinstance(query_loss, ApproxDP)
                else PureDP(fraction_of("budget", budget))
            )
        else:
            total = query_loss
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("opening the table", total=None)
            parsed = parse_query(query, unit)
            session = Session(
                str(data),
                unit,
                total if ledger is None or budget is not None else None,
                engine=engine,
                ledger=ledger,
                dataset=dataset,
                max_rows=max_rows,
                max_groups=max_groups,
                max_rows_per_group=max_rows_per_group,
                schema=_declared_schema(schema or [], data, parsed, unit),
            )
            built = Query()
            if parsed.where is not None:
                built = built.filter(parsed.where)
            if parsed.group_by:
                key_values = _parse_keys(keys or [], dict(session.schema))
                key_set = None
                if key_values:
                    missing = [k for k in parsed.group_by if k not in key_values]
                    if missing:
                        raise typer.BadParameter(f"--keys is missing {', '.join(missing)}")
                    key_set = KeySet.from_dict({k: key_values[k] for k in parsed.group_by})
                final = built.group_by(*parsed.group_by, keys=key_set).agg(*parsed.aggregations)
            else:
                final = built.agg(*parsed.aggregations)
            progress.update(task, description="scanning and aggregating (budget reserved)")
            release = session.evaluate(final, loss=query_loss, alpha=alpha)
            session.close()
        if explain:
            console.print(release.plan, style="dim")
        render_release(release, console, title=f"{data.name}: {query}")
    except DPError as error:
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(code=2) from None
    except (typer.Exit, typer.Abort, typer.BadParameter):
        raise
    except Exception as error:
        # not dpkit's own: its text may quote the data (a value, a line of the file)
        console.print(
            f"[red]error:[/red] the query failed ({type(error).__name__}); the message is "
            "withheld because it can quote the data. Check the file, the declared keys, "
            "bounds and column types."
        )
        raise typer.Exit(code=2) from None


query_app = typer.Typer(add_completion=False, help="Differentially private queries.")
query_app.command("query")(query_command)
