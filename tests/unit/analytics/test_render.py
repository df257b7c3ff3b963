"""Rendered answers: snapshots at 80 and 120 columns, number style, post-processing, messages."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]
import pytest
from rich.console import Console

from dpkit._format import format_loss, friendly, human_number
from dpkit.analytics import Session, count
from dpkit.analytics._querytext import parse_query
from dpkit.analytics._render import column_decimals, format_column, render_release
from dpkit.analytics._results import Accuracy, TableRelease, post_process
from dpkit.core._losses import ApproxDP, PureDP

SNAPSHOTS = Path(__file__).parent / "snapshots"

GROUPED = "SELECT category, COUNT(*), AVG(amount, 0, 500), QUANTILE(amount, 0.9, 0, 500) "
GROUPED += "GROUP BY category"
WHOLE = "SELECT COUNT(*), COUNT(DISTINCT user_id), SUM(amount, 0, 500), MEDIAN(amount, 0, 500)"


def _accuracy(kind: str = "exact", halfwidth: float = 1.0) -> Accuracy:
    return Accuracy(kind, halfwidth, 0.05, "geometric", PureDP(Fraction(1, 8)))  # type: ignore[arg-type]


def _grouped_release() -> TableRelease:
    frame = pd.DataFrame(
        {
            "category": ["food", "travel", "rent"],
            "count": [4013, -51, 120],
            "count_low": [3114.0, -950.0, -779.0],
            "count_high": [4912.0, 848.0, 1019.0],
            "mean_amount": [89.1234, -3.2, 520.5],
            "mean_amount_low": [70.5, -40.0, 480.0],
            "mean_amount_high": [107.7, 33.6, 561.0],
            "q90_amount": [173.75, 33.0, 32.75],
        }
    )
    accuracy = {
        "count": _accuracy(halfwidth=899),
        "mean_amount": _accuracy("approximate", 18.6),
        "q90_amount": _accuracy("rank", 2120),
    }
    return TableRelease(
        {"main": frame}, accuracy, PureDP(Fraction(1, 2)), "rcpt-1", PureDP(Fraction(3, 2))
    )


def _whole_release() -> TableRelease:
    frame = pd.DataFrame(
        {
            "count": [50123],
            "count_low": [49223.0],
            "count_high": [51023.0],
            "units": [5210],
            "units_low": [4310.0],
            "units_high": [6110.0],
            "sum_amount": [3349123.456],
            "sum_amount_low": [3326611.0],
            "sum_amount_high": [3371635.9],
            "median_amount": [33.0],
        }
    )
    accuracy = {"count": _accuracy(halfwidth=900), "median_amount": _accuracy("rank", 500)}
    return TableRelease(
        {"main": frame}, accuracy, ApproxDP(1, Fraction(1, 10**7)), "rcpt-2", PureDP(10**308)
    )


def _render(release: TableRelease, query: str, width: int, keys: tuple[str, ...]) -> str:
    console = Console(width=width, record=True, no_color=True, force_terminal=False)
    render_release(
        release,
        console,
        "tx.csv (dataset tx)",
        aggregations=parse_query(query, "user_id").aggregations,
        footnotes=["bound applied: at most 10 row(s) per person (--max-rows)."],
        ledger="/home/me/.local/share/dpkit/ledger.sqlite",
        keys=keys,
    )
    return console.export_text()


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", ["grouped", "whole"])
def test_rendered_tables_match_snapshots(name: str, width: int) -> None:
    if name == "grouped":
        text = _render(_grouped_release(), GROUPED, width, ("category",))
    else:
        text = _render(_whole_release(), WHOLE, width, ())
    assert max(len(line) for line in text.splitlines()) <= width
    path = SNAPSHOTS / f"render_{name}_{width}.txt"
    if os.environ.get("DPKIT_UPDATE_SNAPSHOTS"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_rendered_values_are_possible_and_in_one_style() -> None:
    text = _render(_grouped_release(), GROUPED, 120, ("category",))
    assert "-51" not in text and "-950" not in text and "-3.2" not in text  # clipped
    assert "520.5" not in text  # the mean is clipped into its bounds [0, 500]
    assert "32.75" in text and "33.00" in text  # one precision for the quantile column
    whole = _render(_whole_release(), WHOLE, 120, ())
    assert "3,349,123" in whole and "e+06" not in whole  # no scientific next to fixed
    assert "ε=1, δ=1e-07" in whole and "ε=1e+308" in whole  # numbers as people write them
    assert "Post-processed for display" in whole


def test_release_keeps_raw_values_and_displays_clipped() -> None:
    df = pd.DataFrame({"user": range(3)})
    session = Session(df, privacy_unit="user", budget=PureDP(1), max_rows=1)
    query = session.query().agg(count())
    # Each release's raw interval starts below 0 with probability ~97.5 % (a count of 3 with a
    # 95 % half-width of ~300): take the first of up to five releases where it does, so the
    # test is not flaky (all five miss with probability ~1e-8).
    for _ in range(5):
        release = session.evaluate(query, epsilon=Fraction(1, 100))
        shown = release.display(query)["main"]
        assert (shown["count"] >= 0).all() and (shown["count_low"] >= 0).all()
        assert str(shown["count"].dtype) == "int64"
        if release.table["count_low"].iloc[0] < 0:
            break
    raw = release.table
    assert raw["count_low"].iloc[0] < 0  # the raw interval is kept as released (unclipped)
    clipped = post_process(_grouped_release().table, parse_query(GROUPED).aggregations)
    assert clipped["count"].tolist() == [4013, 0, 120]
    assert clipped["mean_amount"].tolist() == [89.1234, 0.0, 500.0]
    assert _grouped_release().table["count"].tolist() == [4013, -51, 120]


def test_numbers_as_people_write_them() -> None:
    assert human_number(Fraction(-1, 1)) == "-1"
    assert human_number(Fraction(1, 4)) == "0.25"
    assert human_number(Fraction(1, 3)) == "1/3 ≈ 0.3333"
    assert human_number(Fraction(10**308)) == "1e+308"
    assert human_number(1e-300) == "1e-300"
    assert friendly("bounds=Fraction(-1, 1) is not allowed") == "bounds=-1 is not allowed"
    assert friendly("costs ε=" + "1" + "0" * 308) == "costs ε=1e+308"
    assert format_loss(ApproxDP(Fraction(1, 2), Fraction(1, 10**6))) == "ε=0.5, δ=1e-06"


def test_column_precision_follows_the_noise() -> None:
    assert column_decimals([4013.0], [899.0], integral=True) == 0
    assert column_decimals([89.12], [18.6], integral=False) == 0
    assert column_decimals([0.512], [0.04], integral=False) == 3
    assert column_decimals([12.5], [], integral=False) == 2
    assert format_column([3349123.456, 12.0], 0) == ["3,349,123", "12"]
    assert format_column([1e16, 1.0], 0) == ["1.000e+16", "1.000e+00"]


def test_colour_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dpkit.cli._common import err_console, out_console

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert not out_console().no_color and not err_console().no_color
    monkeypatch.setenv("NO_COLOR", "1")
    assert out_console().no_color and err_console().no_color
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert out_console().no_color


def test_scope_page_maps_every_seed_topic_to_real_modules() -> None:
    import importlib
    import re

    text = (Path(__file__).resolve().parents[3] / "docs" / "scope.md").read_text(encoding="utf-8")
    for seed in ("000", "001", "002", "003", "004"):
        assert f"## {seed}" in text
    for issue in (10, 11, 12, 13, 14):
        assert f"issue {issue}" in text
    assert "*planned*:" not in text  # issue 21: every topic it called planned exists
    modules = set(re.findall(r"`(dpkit(?:\.[a-z_]+)+)", text))
    assert len(modules) > 10
    for name in sorted(modules):
        parts = name.split(".")
        for cut in range(len(parts), 1, -1):  # a module, or an attribute of one
            try:
                module = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attribute in parts[cut:]:
                module = getattr(module, attribute)
            break
        else:
            pytest.fail(f"docs/scope.md names {name}, which does not exist")


def test_integer_group_keys_print_without_thousands_separators() -> None:
    """Issue 21: year keys printed as "1,976". A key is a label (a year, a code, an ID), never a
    quantity: integers as they are, integer-valued floats without ".0", others in full."""
    from dpkit.analytics._render import key_text

    frame = pd.DataFrame(
        {
            "year": [1976, 1977, 12345],
            "count": [10, 20, 30],
            "count_low": [1.0, 2.0, 3.0],
            "count_high": [19.0, 38.0, 57.0],
        }
    )
    release = TableRelease(
        {"main": frame}, {"count": _accuracy(halfwidth=9)}, PureDP(1), "rcpt-3", PureDP(1)
    )
    text = _render(release, "SELECT year, COUNT(*) GROUP BY year", 100, ("year",))
    assert "1976" in text and "12345" in text and "1,976" not in text and "12,345" not in text
    assert key_text(1976.0) == "1976" and key_text(2.5) == "2.5" and key_text(None) == "—"
    assert key_text(pd.Series([7], dtype="int64").iloc[0]) == "7"


def test_cells_print_as_the_strings_did() -> None:
    """Cells rich would print as they are go to rich as Text (no markup parse); cells it could
    read as markup or emoji stay strings: the table prints the same, byte for byte."""
    import io

    from rich.table import Table
    from rich.text import Text

    from dpkit.analytics._render import _cell

    samples = ["2000", "—", "1,234.5\n[1,200.1, 1,300.9]", "[-inf, inf]", " a b ", "日本", ""]
    active = ["[bold]x", "a:smile:b", "back\\slash", "[#ff0000]y"]
    assert all(isinstance(_cell(s), Text) for s in samples)
    assert all(isinstance(_cell(s), str) for s in [*active, "[/]", "[@click]z"])
    for colour in (False, True):
        printed = []
        for convert in (str, _cell):
            console = Console(
                file=io.StringIO(), width=60, force_terminal=colour, no_color=not colour
            )
            table = Table()
            table.add_column("key")
            table.add_column("value", justify="right")
            for text in samples + active:
                table.add_row(convert(text), convert(text[::-1]))
            console.print(table)
            printed.append(console.file.getvalue())
        assert printed[0] == printed[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fitted_widths_draw_the_table_rich_measures(seed: int) -> None:
    """Column widths given to rich (:func:`_fitted_widths`) draw the very table rich draws when
    it measures every cell: random tables, narrow and wide consoles, wide characters, tabs,
    markup and two-line cells (the widths are then given only when they cannot differ)."""
    import io
    import random

    from rich.table import Table

    from dpkit.analytics._render import _cell, _fitted_widths

    rng = random.Random(seed)
    words = ["1", "22", "-3.5", "[1, 2]", "日本", "x y", "", " ", "a\tb", "—", "[b]x", ":x:"]
    words.append("long text here " * 3)
    given = 0
    for trial in range(100):
        rows = rng.randint(0, 8)
        texts = {
            f"c{j}" + rng.choice(["", " name", "日"]): [
                rng.choice(words) + rng.choice(["", "\n" + rng.choice(words)]) for _ in range(rows)
            ]
            for j in range(rng.randint(1, 6))
        }
        width, justify = rng.choice([20, 40, 80, 120]), rng.choice(["left", "right"])
        printed = []
        for widths in ({}, _fitted_widths(texts, width - len(texts) - 1)):
            given += bool(widths)
            console = Console(file=io.StringIO(), width=width, force_terminal=bool(trial % 2))
            table = Table()
            for column in texts:
                table.add_column(column, justify=justify, width=widths.get(column))  # type: ignore[arg-type]
            for row in zip(*texts.values(), strict=True):
                table.add_row(*(_cell(text) for text in row))
            console.print(table)
            printed.append(console.file.getvalue())  # type: ignore[attr-defined]
        assert printed[0] == printed[1], texts
    assert given > 10  # the widths were given often enough to be tested
