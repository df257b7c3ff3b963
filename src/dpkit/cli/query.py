"""``dpkit query``: answer one query over a CSV or Parquet file, with differential privacy.

Every query spends the budget of a dataset that already exists in the ledger (a privacy officer
creates it with ``dpkit budget create``); a query never creates a budget. The per-person bound is
a privacy decision the user makes (``--max-rows`` and/or ``--max-groups``) and is printed with
every answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dpkit._format import format_loss, human_number
from dpkit.cli._common import (
    DELTA_REFUSE,
    DELTA_WARN,
    EPSILON_CEILING,
    EPSILON_FLOOR,
    LEDGER_HELP,
    CLIError,
    check_key_columns,
    check_ledger_file,
    check_positive_flag,
    err_console,
    handles_errors,
    out_console,
    parse_keys,
    resolve_ledger,
    spinner,
)

if TYPE_CHECKING:
    from dpkit.analytics._querytext import ParsedQuery
    from dpkit.core._losses import PrivacyLoss

__all__ = ["QUERY_HELP", "query_command"]

QUERY_HELP = """Answer a query over DATA with differential privacy and print the result.

\b
Syntax (one SELECT; FROM is optional and may only name the input):
  SELECT key, ..., aggregate [AS name], ... [FROM input] [WHERE condition] [GROUP BY key, ...]
\b
Aggregates (numeric ones declare the bounds values are clamped to):
  COUNT(*)                      rows
  COUNT(DISTINCT <unit>)        people (privacy units)
  SUM(col, lower, upper)        AVG(col, lower, upper)       MEDIAN(col, lower, upper)
  VARIANCE(col, lower, upper)   STDDEV(col, lower, upper)
  QUANTILE(col, q, lower, upper)     named q90_col for q = 0.9
  HISTOGRAM(col, e0, e1, ..., eB)    counts in declared bins
\b
WHERE: = != < <= > >=, AND OR NOT, IN (...), BETWEEN, IS [NOT] NULL, + - * /,
  dates as DATE '2024-03-01' or TIMESTAMP '2024-03-01 12:00:00'.
GROUP BY: public keys from --keys col=v1,v2; without --keys the groups are found
  privately (needs --delta; groups with few people are suppressed).
\b
Columns of a CSV file are text until declared: --schema amount=float,day=date.
\b
Metadata registered once (a TOML file; flags and bounds in the query win):
  --metadata FILE: max_rows = 12, and per column (a TOML table columns.NAME)
  kind = "float", bounds = [0, 500] or keys = ["food", "rent"].
  Then AVG(amount) needs no bounds (docs/cli.md).
\b
Several tables: give the query alone, the tables and the unit's links:
  --table NAME=PATH (private, repeat)   --public NAME=PATH (public lookup, repeat)
  --link CHILD.COLUMN=PARENT.COLUMN (repeat)   --unit TABLE.COLUMN (default: the dataset's)
  --schema TABLE.COLUMN=KIND; the query may JOIN ... ON/USING, LEFT JOIN, use subqueries in
  FROM and WITH; the bound applies per person after the joins (docs/joins.md).
\b
With --server URL --token TOKEN (or $DPKIT_TOKEN) the query goes to a dpkit
service (dpkit serve): DATA is the dataset's name there, and the bounds, unit and schema its
privacy officer registered apply (--max-rows, --schema, --ledger ... are refused).
\b
Examples:
  dpkit budget create transactions --epsilon 3 --unit user_id
  dpkit query transactions.csv "SELECT COUNT(*), SUM(amount, 0, 500)" \\
      --dataset transactions --epsilon 0.5 --max-rows 20 --schema amount=float
  dpkit query transactions.csv \\
      "SELECT category, AVG(amount, 0, 500) WHERE day >= DATE '2024-03-01' GROUP BY category" \\
      --dataset transactions --epsilon 0.5 --max-rows 20 --schema amount=float \\
      --keys category=food,travel,rent
  dpkit budget create tpch --epsilon 10 --unit customer.c_custkey
  dpkit query "SELECT COUNT(*) FROM orders JOIN customer ON o_custkey = c_custkey" \\
      --table customer=customer.parquet --table orders=orders.parquet \\
      --link orders.o_custkey=customer.c_custkey --dataset tpch --epsilon 1 --max-rows 50
  dpkit query transactions "SELECT COUNT(*)" --epsilon 0.1 \\
      --server http://dp.internal:8000 --token "$DPKIT_TOKEN"
"""


def _declared_schema(specs: list[str]) -> dict[str, str]:
    from dpkit.analytics._metadata import KIND_NAMES

    declared: dict[str, str] = {}
    for spec in specs:
        for item in spec.split(","):
            if not item.strip():
                continue
            column, sep, kind = item.partition("=")
            kind = kind.strip().lower()
            if not sep or kind not in KIND_NAMES:
                raise CLIError(
                    f"--schema {item.strip()!r}: expected column=kind",
                    "Kinds: int, float, bool, text, date, timestamp; e.g. --schema amount=float.",
                )
            declared[column.strip()] = KIND_NAMES[kind]
    return declared


def _on_integers(parsed: ParsedQuery, specs: list[str]) -> tuple[ParsedQuery, list[str]]:
    """Quantiles of columns declared ``int`` run over the integers in their bounds (a public
    declaration, so ``method="auto"`` may use it): the exponential mechanism over declared
    candidates counts rows tied at an integer exactly, and with far fewer candidates than the
    default grid its rank bound is smaller. Returns the query and a note per rewritten one."""
    import dataclasses
    import math

    from dpkit.analytics._query import Quantile, quantile
    from dpkit.errors import InvalidParameterError

    integers = set()
    for spec in specs:
        for item in spec.split(","):
            column, _, kind = item.partition("=")
            if kind.strip().lower() in ("int", "integer"):
                integers.add(column.strip())
    aggregations: list[Any] = []
    notes = []
    for agg in parsed.aggregations:
        if isinstance(agg, Quantile) and agg.column in integers and agg.method == "auto":
            low, high = math.ceil(agg.bounds[0]), math.floor(agg.bounds[1])
            try:
                agg = quantile(
                    agg.column, agg.q, agg.bounds, agg.name, candidates=range(low, high + 1)
                )
            except InvalidParameterError:  # fewer than 2 or more than 2^16 integers: the grid
                pass
            else:
                notes.append(
                    f"{agg.name}: --schema {agg.column}=int, so the exponential mechanism runs "
                    f"over the integers {low:,} to {high:,}."
                )
        aggregations.append(agg)
    return dataclasses.replace(parsed, aggregations=tuple(aggregations)), notes


def _query_loss(
    epsilon: float | None, delta: float | None, rho: float | None, allow_large_delta: bool
) -> PrivacyLoss:
    from dpkit._exact import fraction_of
    from dpkit.core._losses import ZCDP, ApproxDP, PureDP

    if rho is not None and epsilon is not None:
        raise CLIError(
            "--rho and --epsilon were both given", "Give one: --epsilon E [--delta D] or --rho R."
        )
    if rho is not None and delta is not None:
        raise CLIError("--rho and --delta were both given", "A zCDP query takes --rho alone.")
    if rho is None and epsilon is None:
        raise CLIError("give --epsilon (or --rho): how much of the budget this query may spend")
    check_positive_flag("--epsilon", epsilon, floor=EPSILON_FLOOR, ceiling=EPSILON_CEILING)
    check_positive_flag("--rho", rho, floor=EPSILON_FLOOR, ceiling=EPSILON_CEILING)
    if rho is not None:
        return ZCDP(fraction_of("rho", rho))
    assert epsilon is not None
    if delta is not None:
        if not 0 <= delta < 1:
            raise CLIError(f"--delta must be in [0, 1) (got {human_number(delta)})")
        if delta >= DELTA_REFUSE and not allow_large_delta:
            raise CLIError(
                f"--delta {human_number(delta)} is refused: with δ that large the query may "
                "publish some people's rows outright",
                f"δ should be far below 1/n for n people (e.g. 1e-7); pass --allow-large-delta "
                f"to use δ ≥ {DELTA_REFUSE:g} anyway.",
            )
        if delta > DELTA_WARN:
            err_console().print(
                f"warning: δ = {human_number(delta)} is large: δ is the chance the guarantee "
                "fails outright (e.g. one person's row published), and it must be far below "
                "1/n for a table of n people; 1e-7 or less is usual."
            )
        if delta > 0:
            return ApproxDP(fraction_of("epsilon", epsilon), fraction_of("delta", delta))
    return PureDP(fraction_of("epsilon", epsilon))


def _check_source(parsed: ParsedQuery, data: Path, dataset: str) -> None:
    if parsed.source is None:
        return
    allowed = {data.name, data.stem, dataset}
    if parsed.source not in allowed:
        raise CLIError(
            f"FROM {parsed.source}: the query may only read the input {data.name!r}",
            f"Leave FROM out, or write FROM {data.stem}.",
        )


def _check_columns(parsed: ParsedQuery, schema: Mapping[str, str], data: Path, unit: str) -> None:
    """Refuse unknown columns and non-numeric columns in numeric aggregates, up front."""
    from dpkit.analytics._querytext import check_released, query_schema

    known = ", ".join(schema)
    table_schema = schema
    for name, expr in parsed.derived:
        _check_expression(expr, f"the expression {name!r}", table_schema, data)
    schema = query_schema(parsed, table_schema)  # type: ignore[arg-type]  # kinds as str
    for agg in parsed.aggregations:
        column = getattr(agg, "column", None)
        if not isinstance(column, str):
            continue
        if column not in schema:
            raise CLIError(
                f"unknown column {column!r} in {type(agg).__name__.upper()}",
                f"The columns of {data.name} are: {known}.",
            )
        kind = schema[column]
        if kind in ("numeric", "bool"):  # a declared boolean counts as 0/1
            continue
        shown = "text" if kind == "string" else kind
        origin = " (a CSV file's columns are text until declared)" if shown == "text" else ""
        raise CLIError(
            f"column {column!r} is {shown}{origin}; {type(agg).__name__.upper()} needs numbers",
            f"If it holds numbers, declare it: --schema {column}=float. Values that do not "
            "parse as numbers then count as missing.",
        )
    if parsed.where is not None:
        _check_expression(parsed.where, "WHERE", table_schema, data)
    for key in parsed.group_by:
        if key not in schema:
            raise CLIError(
                f"unknown GROUP BY column {key!r}", f"The columns of {data.name} are: {known}."
            )
    check_released(parsed, schema)
    del unit


def _check_expression(expr: Any, where: str, schema: Mapping[str, str], data: Path) -> None:
    """Refuse unknown columns, and text columns used as numbers, in ``expr`` (``where`` says
    which part of the query it is)."""
    from dpkit.analytics._expr import columns_of, numeric_columns, text_number_orderings

    known = ", ".join(schema)
    for column in sorted(columns_of(expr)):
        if column not in schema:
            raise CLIError(
                f"unknown column {column!r} in {where}",
                f"The columns of {data.name} are: {known}.",
            )
    for side, literal in text_number_orderings(expr):
        column = getattr(side, "name", "")
        if isinstance(column, str) and schema.get(column) in ("string", "text"):
            raise CLIError(
                f"column {column!r} is text (a CSV file's columns are text until "
                f"declared), and {where} orders it against {literal!r}, which reads as a "
                "number: text compares character by character ('9' > '1000')",
                f"If it holds numbers, declare it (--schema {column}=float) and write the "
                f"number without quotes ({literal.strip()}). Nothing was charged.",
            )
    for column in sorted(numeric_columns(expr)):
        if column in schema and schema[column] not in ("numeric",):
            shown = "text" if schema[column] == "string" else schema[column]
            raise CLIError(
                f"column {column!r} is {shown} but {where} uses it as a number",
                f"Declare it: --schema {column}=float (or =int).",
            )


def _rehearse(
    session: Any,
    final: Any,
    query_loss: PrivacyLoss,
    alpha: float,
    parsed: ParsedQuery,
    label: str,
    ledger: str,
) -> None:
    """Release ``final`` on the empty table (no data, nothing reserved) and print it to nowhere:
    whatever printing the answer does with public inputs runs before the charge."""
    import io

    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env
    from rich.console import Console

    from dpkit.analytics._querytext import post_process
    from dpkit.analytics._render import render_release
    from dpkit.analytics._results import TableRelease
    from dpkit.errors import DPError, InternalError

    compiled = session.compile(final, loss=query_loss)
    empty = [
        pa.table({name: pa.array([], type=pa.int64()) for name in plan.result_columns})
        for plan in compiled.plans
    ]
    try:
        tables, accuracy = compiled.release(empty, alpha)
        release = TableRelease(
            tables, accuracy, compiled.loss, None, query_loss, compiled.description, compiled.split
        )
        release = post_process(release, parsed)
        render_release(
            release,
            Console(file=io.StringIO(), width=100),
            label,
            aggregations=parsed.aggregations,
            ledger=ledger,
            keys=parsed.group_by,
        )
    except DPError:
        raise
    except Exception as error:
        raise InternalError(
            f"internal error in dpkit while rehearsing how the answer is printed "
            f"({type(error).__name__}); nothing was reserved or charged. This is a dpkit bug, "
            "not a problem with the query or the data: please report it with the query.",
            charged=False,
        ) from None


def _unreadable_hint(data: Path) -> str:
    if data.suffix.lower() in (".csv", ".tsv"):
        return (
            "dpkit reads a CSV file whole and strictly (UTF-8; a header; every line with as many "
            'fields; quotes only around whole fields, "" for a quote inside), never skipping '
            'a line. Find the bad line locally: python -c "from dpkit.analytics import '
            f"check_csv; check_csv('{data}')\""
        )
    return (
        f'Check the file locally, without dpkit, e.g. duckdb -c "DESCRIBE SELECT * FROM '
        f"'{data}'\"; then match --schema to its columns."
    )


def _check_bounds(
    max_rows: int | None, max_groups: int | None, max_rows_per_group: int | None
) -> None:
    for flag, value in (
        ("--max-rows", max_rows),
        ("--max-groups", max_groups),
        ("--max-rows-per-group", max_rows_per_group),
    ):
        if value is not None and value < 1:
            raise CLIError(f"{flag} must be a positive whole number (got {value})")
    if max_rows is None and max_groups is None:
        raise CLIError(
            "give the per-person bound: --max-rows K (rows one person may contribute; for "
            "GROUP BY also --max-groups G with --max-rows-per-group R)",
            "This is a privacy decision: rows beyond the bound are dropped (totals undercount), "
            "and a larger bound adds more noise. Pick what most people stay within.",
        )


@dataclass(frozen=True)
class _Options:
    """The options of a query answered here (over one file or several tables), as given."""

    dataset: str | None
    epsilon: float | None
    delta: float | None
    rho: float | None
    max_rows: int | None
    max_groups: int | None
    max_rows_per_group: int | None
    unit: str | None
    keys: list[str]
    schema: list[str]
    ledger: str | None
    engine: str
    alpha: float
    allow_large_delta: bool
    explain: bool
    max_per_key: int | None = None
    bounds_of: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """The column bounds registered in the --metadata file."""
    keys_of: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    """The key sets registered in the --metadata file."""
    from_metadata: frozenset[str] = frozenset()
    """The contribution bounds taken from the --metadata file (no flag gave them)."""
    tune: float | None = None
    """--tune SHARE: the share of ε spent choosing the per-person bounds privately."""
    tuned: frozenset[str] = frozenset()
    """The contribution bounds --tune chose (for the answer's note)."""
    tuning_loss: str | None = None
    """What the --tune release charged, as printed (the answer's note adds it to the total)."""

    def registered_keys(self, group_by: tuple[str, ...]) -> dict[str, list[Any]] | None:
        """The registered key sets of every GROUP BY column, when there is no --keys."""
        from dpkit.analytics._metadata import registered_for

        found = {k: registered_for(self.keys_of, k) for k in group_by}
        if self.keys or not group_by or any(v is None for v in found.values()):
            return None
        return {k: list(v) for k, v in found.items()}

    @property
    def bounds(self) -> dict[str, Any]:
        """The per-person bound, as Session takes it."""
        return {
            "max_rows": self.max_rows,
            "max_groups": self.max_groups,
            "max_rows_per_group": self.max_rows_per_group,
        }


def _check_request(options: _Options, unit_form: str) -> tuple[str, PrivacyLoss]:
    """The public inputs every local query checks before anything else: the dataset, the loss,
    the bounds and alpha (``unit_form`` says how the unit is written in the hint). Returns the
    dataset and the query's loss."""
    o = options
    if not o.dataset:
        raise CLIError(
            "give --dataset NAME: the dataset whose budget this query spends",
            "A privacy officer creates it once: dpkit budget create NAME --epsilon E --unit "
            f"{unit_form}; `dpkit budget status` lists the datasets.",
        )
    query_loss = _query_loss(o.epsilon, o.delta, o.rho, o.allow_large_delta)
    if o.tune is not None:
        if not 0 < o.tune < 1:
            raise CLIError(
                f"--tune must be in (0, 1) (got {human_number(o.tune)})",
                "It is the share of --epsilon spent tuning, e.g. --tune 0.2.",
            )
        if o.rho is not None:
            raise CLIError("--tune needs --epsilon (tuning is ε-DP), not --rho")
        _check_bounds(o.max_rows, o.max_groups or 1, o.max_rows_per_group)
        return o.dataset, query_loss
    _check_bounds(o.max_rows, o.max_groups, o.max_rows_per_group)
    if not 0 < o.alpha < 1:
        raise CLIError(f"--alpha must be in (0, 1) (got {human_number(o.alpha)})")
    return o.dataset, query_loss


def _check_file(file: Path, shown: str, prefix: str = "") -> None:
    """A CSV or Parquet file that exists (``shown``: how the error names it; ``prefix``: the
    flag that gave it, if any)."""
    if not file.exists():
        raise CLIError(f"{prefix}no file {shown!r}", "Give a CSV or Parquet file.")
    if file.is_dir():
        raise CLIError(f"{prefix}{shown!r} is a directory", "Give a CSV or Parquet file.")
    if file.suffix.lower() not in (".csv", ".parquet", ".pq", ".tsv"):
        raise CLIError(
            f"{prefix}{file.name!r}: dpkit query reads .csv and .parquet files", "Convert it first."
        )


def _check_grouping(parsed: ParsedQuery, options: _Options) -> None:
    """The bound and the group keys the parsed query needs, checked before the ledger."""
    o = options
    if (
        o.tune is None
        and o.max_rows is None
        and (not parsed.group_by or o.max_rows_per_group is None)
    ):
        raise CLIError(
            "--max-groups alone does not bound a person's rows: add --max-rows K"
            + (" (or --max-rows-per-group R)" if parsed.group_by else ""),
            "Rows beyond the bound are dropped (totals undercount); pick what most people "
            "stay within.",
        )
    if (
        parsed.group_by
        and not o.keys
        and o.registered_keys(parsed.group_by) is None
        and o.delta in (None, 0)
        and o.rho is None
    ):
        raise CLIError(
            "GROUP BY without --keys finds the groups privately, which needs δ > 0",
            "Give the public keys (--keys col=a,b,c, or keys = [...] in the --metadata file) "
            "or a small --delta (e.g. 1e-7).",
        )
    check_key_columns(parsed.group_by, o.keys)


def _check_all_keys(group_by: tuple[str, ...], key_values: Mapping[str, Any]) -> None:
    missing = [k for k in group_by if k not in key_values]
    if missing:
        raise CLIError(
            f"--keys is missing {', '.join(missing)}",
            "Give --keys for every GROUP BY column, or none.",
        )


@contextmanager
def _open_ledger(where: str) -> Iterator[tuple[Any, list[Any]]]:
    """The ledger file, and the budget alerts its charges raise (printed after the answer)."""
    from dpkit.ledger import BudgetMonitor, Ledger

    alerts: list[Any] = []
    opened = Ledger.open(where, monitor=BudgetMonitor(log=False, callbacks=[alerts.append]))
    try:
        yield opened, alerts
    finally:
        opened.close()


def _dataset_unit(opened: Any, dataset: str, where: str, unit: str | None, unit_form: str) -> str:
    """The privacy unit of ``dataset`` in the ledger (which must exist), checked against
    ``--unit`` if given."""
    budgets = {(s.dataset, s.analyst): s for s in opened.budgets()}
    if (dataset, None) not in budgets:
        known = sorted({d for d, _ in budgets})
        raise CLIError(
            f"dataset {dataset!r} does not exist in the ledger {where}",
            "A privacy officer creates it first: dpkit budget create "
            f"{dataset} --epsilon E --unit {unit_form}. Known datasets: "
            + (", ".join(known) or "none")
            + ".",
        )
    dataset_unit: str = budgets[(dataset, None)].privacy_unit
    if unit is not None and unit != dataset_unit:
        raise CLIError(
            f"--unit {unit} does not match the privacy unit of dataset {dataset!r} "
            f"({dataset_unit})",
            f"Leave --unit out (the dataset's unit is used) or pass --unit {dataset_unit}.",
        )
    return dataset_unit


def _answer(
    session: Any,
    final: Any,
    query_loss: PrivacyLoss,
    options: _Options,
    parsed: ParsedQuery,
    label: str,
    where: str,
    progress: Any,
    busy: str,
    unreadable: tuple[str, str, str],
) -> Any:
    """Rehearse printing the answer, then reserve, evaluate and post-process it (HAVING,
    ORDER BY, LIMIT). ``busy``: what the spinner says once the budget is reserved;
    ``unreadable``: (what, which parts, hint) when a source cannot be read."""
    from dpkit.analytics._querytext import post_process
    from dpkit.errors import UnreadableDataError

    # the answer is printed after the commit: rehearse the printing on the empty table first,
    # so a failure there is a refusal, never an answer lost after the charge
    _rehearse(session, final, query_loss, options.alpha, parsed, label, where)
    progress.update(progress.task_ids[0], description=f"{busy} (budget reserved)", total=None)
    try:
        release = session.evaluate(final, loss=query_loss, alpha=options.alpha)
        return post_process(release, parsed)  # HAVING, ORDER BY, LIMIT
    except UnreadableDataError:
        what, parts, hint = unreadable
        raise CLIError(
            f"{what} could not be read; the query's budget stays spent (which {parts} is "
            "wrong is not shown: it could tell something about the data)",
            hint,
            code=1,
        ) from None


def _print_answer(
    release: Any,
    parsed: ParsedQuery,
    query: str,
    label: str,
    footnotes: list[str],
    where: str,
    alerts: list[Any],
    explained: tuple[str, str] | None,
) -> None:
    """Print the answer (after ``explained``: the plan and its note, with ``--explain``), then
    the alerts."""
    from dpkit.analytics._render import print_alerts, render_release

    console = out_console()
    if explained is not None:
        plan_text, note = explained
        console.print(plan_text, style="dim", markup=False)
        console.print(note)
    console.print(f"query: {query}", markup=False)
    render_release(
        release,
        console,
        label,
        aggregations=parsed.aggregations,
        footnotes=footnotes,
        ledger=where,
        keys=parsed.group_by,
    )
    print_alerts(alerts, err_console())


def _footnotes(
    parsed: ParsedQuery, options: _Options, private_keys: bool, joined: bool = False
) -> list[str]:
    max_rows, max_groups = options.max_rows, options.max_groups
    max_rows_per_group = options.max_rows_per_group
    bound = []

    def source(flag: str) -> str:
        key = flag.removeprefix("--").replace("-", "_")
        if key in options.tuned:
            return "chosen privately by --tune"
        return f"{key} in --metadata" if key in options.from_metadata else flag

    if max_rows is not None:
        bound.append(f"at most {max_rows} row(s) per person ({source('--max-rows')})")
    if max_groups is not None:
        bound.append(f"in at most {max_groups} group(s) ({source('--max-groups')})")
    if max_rows_per_group is not None:
        bound.append(
            f"at most {max_rows_per_group} row(s) per group ({source('--max-rows-per-group')})"
        )
    notes = [
        "bound applied: "
        + ", ".join(bound)
        + ". Rows beyond the bound were dropped, so counts and sums undercount for people "
        "with more rows."
    ]
    if joined:
        notes[0] += (
            " Over several tables the bound applies per person after the joins: a person's "
            "rows are the rows of the joined relation that reach them through the links "
            "(--link)."
        )
    if parsed.post_processed:
        notes.append(
            "HAVING / ORDER BY / LIMIT were applied to the released (noisy) table afterwards: "
            "post-processing, which reads no data and costs no budget; a group left out by "
            "HAVING may still exist."
        )
    if private_keys:
        notes.append(
            "groups were found privately: groups with few people are suppressed, so a group "
            "missing here may exist."
        )
    if options.tuning_loss is not None:
        notes.append(
            f"--tune spent {options.tuning_loss} before this answer, in a ledger entry of its "
            "own; the privacy loss below is the answer's, and this command spent both."
        )
    return notes


@handles_errors
def query_command(
    data: Annotated[
        str | None,
        typer.Argument(
            help="CSV or Parquet file (with --server: the dataset's name). Left out with "
            "--table: the query is then the only argument.",
            metavar="DATA",
            show_default=False,
        ),
    ] = None,
    query: Annotated[
        str | None,
        typer.Argument(
            help='The query, e.g. "SELECT COUNT(*), AVG(amount, 0, 500)".',
            metavar="QUERY",
            show_default=False,
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            "-d",
            help="Required: the dataset in the ledger whose budget this query spends (it must "
            "exist: dpkit budget create).",
        ),
    ] = None,
    epsilon: Annotated[float | None, typer.Option(help="ε this query may spend.")] = None,
    delta: Annotated[
        float | None, typer.Option(help="δ (needed for private group keys; keep it ≤ 1e-5).")
    ] = None,
    rho: Annotated[float | None, typer.Option(help="ρ (zCDP) instead of ε.")] = None,
    max_rows: Annotated[
        int | None, typer.Option(help="Rows one person may contribute (required, or --max-groups).")
    ] = None,
    max_groups: Annotated[int | None, typer.Option(help="Groups one person may touch.")] = None,
    max_rows_per_group: Annotated[
        int | None, typer.Option(help="Rows per person and group.")
    ] = None,
    max_per_key: Annotated[
        int | None,
        typer.Option(
            "--max-per-key",
            help="With --table: rows per join key on each side of a join of private tables on "
            "keys of different people (a truncated join; see docs/joins.md).",
        ),
    ] = None,
    unit: Annotated[
        str | None,
        typer.Option(
            "--unit",
            help="The privacy unit column (default: the dataset's); with --table, TABLE.COLUMN.",
        ),
    ] = None,
    table: Annotated[
        list[str] | None,
        typer.Option(
            "--table",
            help="A private table NAME=PATH (repeat per table); the query names the tables.",
        ),
    ] = None,
    public: Annotated[
        list[str] | None,
        typer.Option(
            "--public", help="A public table NAME=PATH (repeat): lookup data, not protected."
        ),
    ] = None,
    link: Annotated[
        list[str] | None,
        typer.Option(
            "--link",
            help="A foreign key CHILD.COLUMN=PARENT.COLUMN (repeat): how a private table's rows "
            "reach the privacy unit.",
        ),
    ] = None,
    keys: Annotated[
        list[str] | None,
        typer.Option("--keys", help="Public group keys: column=v1,v2,... (repeat per column)."),
    ] = None,
    schema: Annotated[
        list[str] | None,
        typer.Option(
            "--schema",
            help="Column types: col=int|float|bool|text|date|timestamp,... (a CSV file's "
            "columns are text until declared).",
        ),
    ] = None,
    metadata: Annotated[
        Path | None,
        typer.Option(
            "--metadata",
            help="A TOML file of the table's public metadata, declared once by the privacy "
            "officer: [columns.NAME] kind, bounds = [lower, upper], keys = [...]; max_rows, "
            "max_groups, max_rows_per_group. Flags given here win (docs/cli.md).",
            show_default=False,
        ),
    ] = None,
    ledger: Annotated[str | None, typer.Option("--ledger", "-l", help=LEDGER_HELP)] = None,
    engine: Annotated[str, typer.Option(help="duckdb, pandas or spark.")] = "duckdb",
    alpha: Annotated[float, typer.Option(help="1 - confidence of the error bars.")] = 0.05,
    allow_large_delta: Annotated[
        bool, typer.Option("--allow-large-delta", help="Accept δ ≥ 0.1 (almost never right).")
    ] = False,
    explain: Annotated[
        bool,
        typer.Option(
            help="Also print how the query is answered. With --tune: print the tuning report "
            "and the plan, and stop (only the tuning share is spent)."
        ),
    ] = False,
    tune: Annotated[
        float | None,
        typer.Option(
            "--tune",
            help="Spend this share of --epsilon choosing the per-person bounds privately "
            "(and print the expected error), the rest on the answer.",
            show_default=False,
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="Ask a dpkit service (dpkit serve) at this URL instead: DATA is then the "
            "dataset's name there, and its registered bounds apply.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="DPKIT_TOKEN",
            help="With --server: your analyst token (better: export DPKIT_TOKEN).",
            show_default=False,
        ),
    ] = None,
) -> None:
    several = bool(table or public or link)
    if several and server is not None:
        given = [f for f, v in (("--table", table), ("--public", public), ("--link", link)) if v]
        raise CLIError(
            f"{', '.join(given)} cannot be used with --server",
            "The service's privacy officer registers the tables of a dataset; ask it by name: "
            'dpkit query NAME "SELECT ..." --server URL.',
        )
    if several:
        if query is not None:
            raise CLIError(
                "with --table, give only the query: the tables are the --table and --public files",
                'e.g. dpkit query "SELECT COUNT(*) FROM orders" --table orders=orders.parquet '
                "--unit orders.o_custkey --dataset NAME --epsilon 1 --max-rows 10",
            )
        data, query = None, data
    if query is None:
        raise CLIError(
            "give the data and the query: dpkit query DATA QUERY (or, over several tables, "
            "dpkit query QUERY --table NAME=PATH ...)",
            'e.g. dpkit query data.csv "SELECT COUNT(*)" --dataset NAME --epsilon 1 --max-rows 1',
        )
    if server is not None:
        assert data is not None
        _query_server(
            server,
            token,
            Path(data),
            query,
            dataset,
            epsilon,
            delta,
            rho,
            alpha,
            allow_large_delta,
            keys or [],
            {
                "--max-rows": max_rows,
                "--max-groups": max_groups,
                "--max-per-key": max_per_key,
                "--max-rows-per-group": max_rows_per_group,
                "--unit": unit,
                "--schema": schema or None,
                "--metadata": metadata,
                "--ledger": ledger,
                "--explain": explain or None,
                "--tune": tune,
            },
        )
        return
    meta = _read_metadata(metadata)
    options = _Options(
        dataset,
        epsilon,
        delta,
        rho,
        max_rows if max_rows is not None else meta.max_rows,
        max_groups if max_groups is not None else meta.max_groups,
        max_rows_per_group if max_rows_per_group is not None else meta.max_rows_per_group,
        unit,
        keys or [],
        [*_metadata_specs(meta), *(schema or [])],  # --schema wins
        ledger,
        engine,
        alpha,
        allow_large_delta,
        explain,
        max_per_key,
        dict(meta.bounds),
        dict(meta.keys),
        frozenset(
            name
            for name, flag in (
                ("max_rows", max_rows),
                ("max_groups", max_groups),
                ("max_rows_per_group", max_rows_per_group),
            )
            if flag is None and getattr(meta, name) is not None
        ),
        tune,
    )
    if max_per_key is not None and not several:
        raise CLIError(
            "--max-per-key is for joins over several tables (--table)",
            "A query over one file has no join to truncate.",
        )
    if several and tune is not None:
        raise CLIError(
            "--tune is for a query over one file",
            "Over several tables, give --max-rows and --max-per-key.",
        )
    if several:
        _query_tables(query, table or [], public or [], link or [], options)
        return
    assert data is not None
    _query_file(Path(data), query, options)


def _read_metadata(path: Path | None) -> Any:
    """The --metadata file (:mod:`dpkit.analytics._metadata`), or empty metadata."""
    from dpkit.analytics._metadata import TableMetadata, read_metadata
    from dpkit.errors import InvalidParameterError

    if path is None:
        return TableMetadata()
    try:
        return read_metadata(path)
    except InvalidParameterError as error:
        raise CLIError(
            f"--metadata {path}: {error}",
            'e.g. [columns.wage] kind = "float", bounds = [0, 3000]; see docs/cli.md.',
        ) from None


def _metadata_specs(meta: Any) -> list[str]:
    """The kinds of a --metadata file as --schema items (``int`` kept, for quantiles)."""
    return [
        f"{column}={'int' if column in meta.integers else kind}"
        for column, kind in meta.schema.items()
    ]


def _query_file(data_path: Path, query: str, options: _Options) -> None:
    """``dpkit query DATA QUERY``: a query over one CSV or Parquet file. Every input is checked,
    and the session built, before anything is reserved."""
    o = options
    # ---- everything public is checked before the ledger or the data is touched
    dataset, query_loss = _check_request(o, "COLUMN")
    _check_file(data_path, str(data_path))
    declared = _declared_schema(o.schema)

    from dpkit.analytics._querytext import parse_query

    parsed = parse_query(query, o.unit, bounds=o.bounds_of)
    _check_grouping(parsed, o)
    where = resolve_ledger(o.ledger)
    check_ledger_file(where, must_exist=True)

    from dpkit.analytics._query import KeySet, Query
    from dpkit.analytics._querytext import query_schema
    from dpkit.analytics._session import Session

    label = f"{data_path.name} (dataset {dataset})"
    with _open_ledger(where) as (opened, alerts):
        unit = _dataset_unit(opened, dataset, where, o.unit, "COLUMN")
        parsed = parse_query(query, unit, bounds=o.bounds_of)  # DISTINCT must name this unit
        _check_source(parsed, data_path, dataset)
        parsed, integer_notes = _on_integers(parsed, o.schema)

        with spinner(f"opening {data_path.name}") as progress:
            session = Session(
                str(data_path),
                unit,
                engine=o.engine,
                ledger=opened,
                dataset=dataset,
                schema=declared,
                bounds=o.bounds_of,
                keys=o.keys_of,
                **o.bounds,
            )
            try:
                table_schema = dict(session.schema)
                _check_columns(parsed, table_schema, data_path, unit)
                built = parsed.rows(Query())
                private_keys = False
                if parsed.group_by:
                    key_values = parse_keys(o.keys, query_schema(parsed, table_schema))
                    key_values = key_values or o.registered_keys(parsed.group_by) or {}
                    key_set = None
                    if key_values:
                        _check_all_keys(parsed.group_by, key_values)
                        key_set = KeySet.from_dict({k: key_values[k] for k in parsed.group_by})
                    else:
                        private_keys = True
                    final = built.group_by(*parsed.group_by, keys=key_set).agg(*parsed.aggregations)
                else:
                    final = built.agg(*parsed.aggregations)
                if o.tune is not None:
                    final, query_loss, report = _tune(session, final, query_loss, o)
                    o = replace(
                        o,
                        max_rows=report.max_rows,
                        max_groups=report.max_groups,
                        tuned=frozenset(report.chosen),
                        tuning_loss=format_loss(report.loss),
                    )
                    if o.explain:
                        out_console().print(session.explain(final, loss=query_loss), markup=False)
                        return
                plan_text = session.explain(final, loss=query_loss) if o.explain else ""
                release = _answer(
                    session,
                    final,
                    query_loss,
                    o,
                    parsed,
                    label,
                    where,
                    progress,
                    f"scanning {data_path.name}",
                    (data_path.name, "line or value", _unreadable_hint(data_path)),
                )
            finally:
                session.close()

    footnotes = _footnotes(parsed, o, private_keys)
    footnotes += integer_notes
    explained = (
        plan_text,
        "explain: rows beyond the per-person bound are dropped before aggregating, so "
        "totals undercount when people have more rows than the bound.",
    )
    _print_answer(
        release,
        parsed,
        query,
        label,
        footnotes,
        where,
        alerts,
        explained if o.explain else None,
    )


def _tune(session: Any, final: Any, query_loss: PrivacyLoss, o: _Options) -> tuple[Any, Any, Any]:
    """--tune SHARE: spend SHARE·ε choosing the per-person bounds (one release, charged now),
    print the report, and return the tuned query with the loss left for the answer,
    (1 − SHARE)·ε (and the whole δ)."""
    from fractions import Fraction

    from dpkit.core._losses import ApproxDP, PureDP

    share = Fraction(o.tune).limit_denominator(10**6) if o.tune is not None else Fraction(0)
    if not isinstance(query_loss, PureDP | ApproxDP):  # pragma: no cover - refused earlier
        raise CLIError("--tune needs --epsilon (tuning is ε-DP), not --rho")
    epsilon = query_loss.epsilon
    rest = epsilon * (1 - share)
    left: PrivacyLoss = (
        ApproxDP(rest, query_loss.delta) if isinstance(query_loss, ApproxDP) else PureDP(rest)
    )
    tuned, report = session.tune(final, epsilon=epsilon * share, spend=left, alpha=o.alpha)
    console = out_console()
    console.print(report.text(), markup=False)
    if o.explain:
        console.print(
            f"--explain: only the tuning share ({report.loss}) was spent; nothing was answered.",
        )
    return tuned, left, report


def _query_server(
    server: str,
    token: str | None,
    data: Path,
    query: str,
    dataset: str | None,
    epsilon: float | None,
    delta: float | None,
    rho: float | None,
    alpha: float,
    allow_large_delta: bool,
    keys: list[str],
    local_only: Mapping[str, Any],
) -> None:
    """``dpkit query DATASET "SELECT ..." --server URL --token T``: checks the same public
    inputs as the local command, then asks the service (:mod:`dpkit.cli.remote`)."""
    given = [flag for flag, value in local_only.items() if value is not None]
    if given:
        raise CLIError(
            f"{', '.join(given)} cannot be used with --server",
            "The service applies the bounds, unit and schema its privacy officer registered "
            "with the dataset (they are printed with the answer), and keeps its own ledger.",
        )
    name = str(data)
    if dataset is not None and dataset != name:
        raise CLIError(
            f"--dataset {dataset} and DATA {name} differ",
            'With --server, DATA is the dataset\'s name: dpkit query NAME "SELECT ..." '
            "--server URL.",
        )
    query_loss = _query_loss(epsilon, delta, rho, allow_large_delta)
    if not 0 < alpha < 1:
        raise CLIError(f"--alpha must be in (0, 1) (got {human_number(alpha)})")
    from dpkit.cli.remote import query_remote

    query_remote(
        server=server,
        token=token,
        name=name,
        query=query,
        query_loss=query_loss,
        keys=keys,
        alpha=alpha,
    )


query_command.__doc__ = QUERY_HELP


def _dotted(text: str, flag: str, example: str) -> tuple[str, str]:
    table, dot, column = text.strip().partition(".")
    if not dot or not table or not column:
        raise CLIError(f"{flag} {text!r}: expected TABLE.COLUMN", f"e.g. {flag} {example}.")
    return table, column


def _table_files(specs: list[str], flag: str, seen: dict[str, str]) -> dict[str, str]:
    """``--table NAME=PATH`` / ``--public NAME=PATH`` as {name: path}, every file checked."""
    found: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        name = name.strip()
        if not sep or not name or not path or "." in name:
            raise CLIError(
                f"{flag} {spec!r}: expected NAME=PATH",
                f"e.g. {flag} orders=orders.parquet (a table name has no '.').",
            )
        if name in seen:
            raise CLIError(
                f"{flag} {name}: table {name!r} was already given ({seen[name]})",
                "Give each table once, either private (--table) or public (--public).",
            )
        _check_file(Path(path), path, f"{flag} {name}: ")
        seen[name] = flag
        found[name] = path
    return found


def _table_schemas(specs: list[str], tables: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``--schema TABLE.COLUMN=KIND,...`` as {table: {column: kind}}."""
    from dpkit.analytics._metadata import KIND_NAMES

    declared: dict[str, dict[str, str]] = {}
    for spec in specs:
        for item in spec.split(","):
            if not item.strip():
                continue
            target, sep, kind = item.partition("=")
            kind = kind.strip().lower()
            if not sep or kind not in KIND_NAMES or "." not in target:
                raise CLIError(
                    f"--schema {item.strip()!r}: expected TABLE.COLUMN=kind over several tables",
                    "Kinds: int, float, bool, text, date, timestamp; e.g. --schema "
                    "orders.o_totalprice=float.",
                )
            name, column = _dotted(target, "--schema", "orders.o_totalprice=float")
            if name not in tables:
                raise CLIError(
                    f"--schema {item.strip()!r}: no table {name!r}",
                    f"The tables are: {', '.join(tables)}.",
                )
            declared.setdefault(name, {})[column.strip()] = KIND_NAMES[kind]
    return declared


def _integer_specs(specs: list[str]) -> list[str]:
    """``--schema`` items ``TABLE.COLUMN=int`` also as ``COLUMN=int`` (a query may name the
    column bare), for :func:`_on_integers`."""
    items = []
    for spec in specs:
        for item in spec.split(","):
            target, _, kind = item.partition("=")
            items.append(item)
            if "." in target:
                items.append(f"{target.partition('.')[2]}={kind}")
    return items


def _query_tables(
    query: str, tables: list[str], public: list[str], links: list[str], options: _Options
) -> None:
    """``dpkit query QUERY --table NAME=PATH ... [--public NAME=PATH] --link C.COL=P.COL``: a
    query over several tables (a :class:`~dpkit.analytics.Session` over several tables). Every
    input is checked, and the session built, before anything is reserved."""
    if not tables:
        raise CLIError(
            "--public and --link need the private tables: --table NAME=PATH (repeat)",
            "The privacy unit lives in a private table, e.g. --table customer=customer.parquet "
            "--unit customer.c_custkey.",
        )
    o, unit = options, options.unit
    dataset, query_loss = _check_request(o, "TABLE.COLUMN")
    seen: dict[str, str] = {}
    private_files = _table_files(tables, "--table", seen)
    public_files = _table_files(public, "--public", seen)
    if unit is not None:
        unit_table, _ = _dotted(unit, "--unit", "customer.c_custkey")
        if unit_table not in private_files:
            raise CLIError(
                f"--unit {unit}: {unit_table!r} is not a private table (--table)",
                f"The private tables are: {', '.join(private_files)}.",
            )
    link_map: dict[str, str] = {}
    for spec in links:
        child, sep, parent = spec.partition("=")
        if not sep:
            raise CLIError(
                f"--link {spec!r}: expected CHILD.COLUMN=PARENT.COLUMN",
                "e.g. --link orders.o_custkey=customer.c_custkey.",
            )
        for side in (child, parent):
            name, _ = _dotted(side, "--link", "orders.o_custkey=customer.c_custkey")
            if name not in seen:
                raise CLIError(
                    f"--link {spec}: no table {name!r}",
                    f"The tables are: {', '.join(seen)} (give each with --table or --public).",
                )
        child, parent = child.strip(), parent.strip()
        if child in link_map:
            raise CLIError(
                f"--link {child} was given twice",
                "A row reaches the privacy unit by one path: one link per child column.",
            )
        link_map[child] = parent
    declared = _table_schemas(o.schema, seen)

    from dpkit.analytics._querytext import parse_query

    # the syntax is checked before the ledger is opened (the unit's column is checked again
    # below, once the dataset's unit is known)
    parsed = parse_query(
        query, (unit or ".").partition(".")[2] or None, relations=True, bounds=o.bounds_of
    )
    _check_grouping(parsed, o)
    where = resolve_ledger(o.ledger)
    check_ledger_file(where, must_exist=True)

    from dpkit.analytics._querytext import check_released
    from dpkit.analytics._session import Session

    names = ", ".join(private_files) + "".join(f", {n} (public)" for n in public_files)
    label = f"tables {names} (dataset {dataset})"
    given_unit = None if unit is None else unit.strip()
    with _open_ledger(where) as (opened, alerts):
        dataset_unit = _dataset_unit(opened, dataset, where, given_unit, "TABLE.COLUMN")
        unit_table, dot, _ = dataset_unit.partition(".")
        if not dot:
            raise CLIError(
                f"dataset {dataset!r} protects the unit {dataset_unit!r}, a column of one "
                "table: a query over several tables needs a unit TABLE.COLUMN",
                "A privacy officer creates such a dataset with dpkit budget create NAME "
                "--epsilon E --unit TABLE.COLUMN.",
            )
        if unit_table not in private_files:
            raise CLIError(
                f"the privacy unit of dataset {dataset!r} is {dataset_unit}, but "
                f"{unit_table!r} is not a private table (--table)",
                f"The private tables are: {', '.join(private_files)}.",
            )
        with spinner(f"opening {len(seen)} tables") as progress:
            session = Session(
                private_files,
                dataset_unit,
                engine=o.engine,
                ledger=opened,
                dataset=dataset,
                schema=declared,
                public=public_files or None,
                links=link_map,
                bounds=o.bounds_of,
                keys=o.keys_of,
                **o.bounds,
            )
            try:
                parsed = session._parse_sql(query)  # COUNT(DISTINCT col) must name the unit
                parsed, integer_notes = _on_integers(parsed, _integer_specs(o.schema))
                private_keys = bool(parsed.group_by) and not o.keys
                private_keys &= o.registered_keys(parsed.group_by) is None
                key_values: dict[str, list[Any]] | None = None
                if parsed.group_by and o.keys:
                    # the joined relation's kinds read the key values (numbers as numbers)
                    relation = session._resolve(session._sql_query(parsed, None))[1]
                    key_values = parse_keys(o.keys, relation)
                    _check_all_keys(parsed.group_by, key_values)
                final = session._sql_query(parsed, key_values, None, o.max_per_key)
                check_released(parsed, session._resolve(final)[1])
                plan_text = session.explain(final, loss=query_loss) if o.explain else ""
                release = _answer(
                    session,
                    final,
                    query_loss,
                    o,
                    parsed,
                    label,
                    where,
                    progress,
                    "joining",
                    (
                        "a table",
                        "file, line or value",
                        'Check each file locally, without dpkit (e.g. duckdb -c "DESCRIBE '
                        "SELECT * FROM 'orders.parquet'\"), and match --schema to its columns.",
                    ),
                )
            finally:
                session.close()

    footnotes = _footnotes(parsed, o, private_keys, joined=True)
    footnotes += integer_notes
    explained = (
        plan_text,
        "explain: the tables are joined first; then rows beyond the per-person bound are "
        "dropped before aggregating, so totals undercount when people have more joined "
        "rows than the bound.",
    )
    _print_answer(
        release,
        parsed,
        query,
        label,
        footnotes,
        where,
        alerts,
        explained if o.explain else None,
    )
