"""Printing a :class:`~dpkit.analytics.TableRelease` as a report people can read.

* Values are post-processed for display (:func:`~dpkit.analytics._results.post_process`): counts
  rounded and clipped at 0, means and quantiles clipped into their declared bounds; a footnote
  says so. The raw, unbiased values stay in the Python ``TableRelease``.
* One number style per column: fixed notation with thousands separators, the decimals chosen
  once per column from the noise (a value is not printed more precisely than its error bar).
* Each value is followed by its (1 - α) interval in brackets, clipped like the value.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dpkit._format import column_decimals, format_column, format_loss
from dpkit.analytics._families import family_of
from dpkit.analytics._query import Quantile
from dpkit.analytics._results import TableRelease, _aggregations_of, post_process

__all__ = ["column_decimals", "format_column", "key_text", "print_alerts", "render_release"]


def print_alerts(events: Iterable[Any], console: Console) -> None:
    """One line per budget threshold crossed (print them after the answer, on stderr)."""
    for event in events:
        scope = f"dataset {event.dataset!r}" + (
            f", analyst {event.analyst!r}" if event.analyst else ""
        )
        console.print(
            f"alert: {scope} crossed {float(event.threshold):.0%} of its budget "
            f"({float(event.used):.1%} used)",
            markup=False,
        )


def _value_columns(frame: pd.DataFrame) -> list[str]:
    columns = list(frame.columns)
    bars = {f"{c}_low" for c in columns} | {f"{c}_high" for c in columns}
    return [c for c in columns if c not in bars]


def _is_count(column: str, aggregations: Sequence[Any], frame: pd.DataFrame) -> bool:
    """Whether ``column`` of ``frame`` holds counts, as the aggregations' families declare
    (:attr:`dpkit.analytics._families.Family.counts`): of the main table, or of a family's own
    table (whose fixed columns ``frame`` then has)."""
    for agg in aggregations:
        family = family_of(agg)
        if family is None or family.counts is None or column not in family.counts(agg):
            continue
        if not family.table or set(family.table_columns) <= set(frame.columns):
            return True
    return False


def key_text(value: Any) -> str:
    """A group key as it is, never as a quantity: ``1976``, not ``1,976`` (a year, a code, an
    ID); an integer-valued float without its ``.0``; other floats in full (``repr``)."""
    if hasattr(value, "item"):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _formatted(
    frame: pd.DataFrame, aggregations: Sequence[Any], keys: Sequence[str] = ()
) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]], set[str]]:
    """Per shown column: the value texts and (where the noise gives one) the interval texts.
    Group keys are printed as they are (:func:`key_text`), never as quantities."""
    shown = _value_columns(frame)
    values_text: dict[str, list[str]] = {}
    bars_text: dict[str, list[str]] = {}
    numeric_columns: set[str] = set()
    for column in shown:
        series = frame[column]
        if column in keys:
            values_text[column] = [key_text(v) for v in series]
            continue
        has_bar = f"{column}_low" in frame.columns and f"{column}_high" in frame.columns
        numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
        if not numeric:
            values_text[column] = [_plain(v) for v in series]
            continue
        numeric_columns.add(column)
        if column in ("bin_low", "bin_high") and not has_bar:
            values_text[column] = format_column([float(v) for v in series], _edge_decimals(series))
            continue
        values = [float(v) for v in series]
        lows = [float(v) for v in frame[f"{column}_low"]] if has_bar else []
        highs = [float(v) for v in frame[f"{column}_high"]] if has_bar else []
        halves = [(h - lo) / 2 for lo, h in zip(lows, highs, strict=True)]
        integral = _is_count(column, aggregations, frame)
        if not has_bar:
            halves = _quantile_spacing(column, aggregations)
        decimals = column_decimals(values, halves, integral)
        values_text[column] = format_column(values, decimals)
        if has_bar:
            low_texts = format_column(lows, decimals)
            high_texts = format_column(highs, decimals)
            bars_text[column] = [
                f"[{lo}, {hi}]" for lo, hi in zip(low_texts, high_texts, strict=True)
            ]
    return shown, values_text, bars_text, numeric_columns


_ACTIVE = re.compile(r"\[[A-Za-z#/@]|[:\\]")
"""What rich may read as console markup (a tag ``[name``, an escape ``\\``) or an emoji code
(``:name:``) in a cell's text."""


def _cell(text: str) -> str | Text:
    """A table cell: a plain :class:`~rich.text.Text` when rich would print ``text`` as it is
    (no markup, no emoji code: numbers, error bars and most keys), which spares rich parsing it
    as markup each time the table is measured and drawn; else the string itself, printed as
    before."""
    return text if _ACTIVE.search(text) else Text(text)


_UNMEASURED = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters whose width rich works out otherwise than by lines of ``cell_len`` (tabs, other
line breaks, control characters)."""


def _fitted_widths(texts: dict[str, list[str]], room: int) -> dict[str, int]:
    """Each column's width as rich would measure it (its header's and cells' longest line),
    when every cell is printed as it is (:func:`_cell`) and the table fits in ``room`` (the
    console's width less the borders); else none, and rich measures. rich gives a table that
    fits each column's widest line: given here, it skips measuring every cell before drawing
    it, and draws the same table."""
    widths: dict[str, int] = {}
    for column, cells in texts.items():
        for text in (column, *cells):
            if _ACTIVE.search(text) or _UNMEASURED.search(text):
                return {}
        lines = (line for text in (column, *cells) for line in text.splitlines())
        widths[column] = max((cell_len(line) for line in lines), default=0)
    padding = 2  # rich's default cell padding: one space each side
    return widths if sum(w + padding for w in widths.values()) <= room else {}


def _render_table(
    frame: pd.DataFrame,
    aggregations: Sequence[Any],
    console: Console,
    title: str,
    alpha: float,
    keys: Sequence[str],
) -> None:
    shown, values, bars, numeric = _formatted(frame, aggregations, keys)
    level = f"{100 * (1 - alpha):g}%"
    if len(frame) == 1 and not keys:
        # one answer per aggregate: a row each (reads like a report, fits 80 columns)
        console.print(title, style="bold", markup=False)
        table = Table()
        table.add_column("aggregate")
        table.add_column("value", justify="right")
        table.add_column(f"{level} interval of the noise", justify="right")
        for column in shown:
            table.add_row(_cell(column), _cell(values[column][0]), _cell(bars.get(column, [""])[0]))
        console.print(table)
        return
    console.print(title, style="bold", markup=False)
    table = Table()
    texts = {
        column: [
            text + "\n" + bars[column][i] if column in bars else text
            for i, text in enumerate(values[column])
        ]
        for column in shown
    }
    widths = _fitted_widths(texts, console.width - len(shown) - 1)
    for column in shown:
        width = widths.get(column)
        if column in numeric:
            table.add_column(column, justify="right", width=width)
        else:
            table.add_column(column, justify="left", width=width)
    for i in range(len(frame)):
        table.add_row(*(_cell(texts[column][i]) for column in shown))
    console.print(table)
    if bars:
        console.print(f"under each value: its {level} interval of the noise", markup=False)


def _edge_decimals(series: pd.Series) -> int:
    values = [float(v) for v in series]
    return 0 if all(v == int(v) for v in values if math.isfinite(v)) else 2


def _quantile_spacing(column: str, aggregations: Sequence[Any]) -> list[float]:
    """For a quantile, the spacing of its candidate grid stands in for the error bar."""
    for agg in aggregations:
        if isinstance(agg, Quantile) and agg.name == column:
            if isinstance(agg.candidates, tuple):  # declared values: their smallest spacing
                return [min(float(b - a) for a, b in itertools.pairwise(agg.candidates))]
            return [float(agg.bounds[1] - agg.bounds[0]) / max(agg.candidates - 1, 1)]
    return []


def _plain(value: Any) -> str:
    if hasattr(value, "item"):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return str(value)


def render_release(
    release: TableRelease,
    console: Console,
    title: str = "Result",
    *,
    aggregations: Any = (),
    footnotes: Sequence[str] = (),
    ledger: str | None = None,
    keys: Sequence[str] = (),
) -> None:
    """Print a release's tables (post-processed for display), footnotes, loss and receipt.

    ``aggregations``: the evaluated query, or its aggregations (they say which columns are counts
    and which bounds were declared).
    """
    aggs = _aggregations_of(aggregations) if aggregations != () else ()
    alpha = next(iter(release.accuracy.values())).alpha if release.accuracy else 0.05
    for name, frame in release.tables.items():
        shown = post_process(frame, aggs)
        _render_table(shown, aggs, console, title if name == "main" else name, alpha, keys)
    for agg, accuracy in release.accuracy.items():
        if accuracy.kind == "rank":
            # the mechanism's own statement of what its bound guarantees (ties included); the
            # default is the exponential mechanism's (Accuracy's "rank" kind)
            half = f"{accuracy.halfwidth:,.0f}"
            level = f"{100 * (1 - accuracy.alpha):g}%"
            said = accuracy.note or (
                f"with probability {level}, in each group, at most q·n + {half} rows lie below "
                f"the released value and at least q·n - {half} rows lie at or below it, so rows "
                "tied at the value count on either side"
            )
            console.print(f"note: {agg}: {said}.", markup=False)
    notes = [
        *footnotes,
        "Post-processed for display (free under DP): counts rounded and clipped at 0, "
        "means and quantiles clipped into their declared bounds. The raw unbiased values are "
        "in the Python API (Release.table).",
    ]
    for note in notes:
        console.print(f"note: {note}", markup=False)
    receipt = getattr(release.receipt, "receipt", release.receipt)
    line = (
        f"privacy loss of this query: {format_loss(release.loss)}; "
        f"budget left: {format_loss(release.remaining)}; receipt {receipt}"
    )
    console.print(line, markup=False)
    if ledger:
        console.print(f"ledger: {ledger}", markup=False, soft_wrap=True)
