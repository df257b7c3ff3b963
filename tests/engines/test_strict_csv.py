"""Issue 21: a CSV file is read strictly and identically on every engine (DuckDB, the pandas
reference engine, Spark): the whole file, or an UnreadableDataError after the reservation —
charged, quoting nothing — never a partial read.

Before the fix, one unbalanced quote at row 500 of 2,000 made DuckDB and pandas read 499 rows
and answer with exit 0, a stray quote inside a field made the engines disagree (2,000 vs 1,999
rows), and Spark silently swallowed or kept every malformation whatever its mode.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dpkit as dp
from dpkit.analytics import Session, count
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._engines._csv import check_csv

ROWS = 2000
SECRET = "SECRET-4711"


def _lines() -> list[str]:
    return ["u,city,x"] + [f"{i},{'Paris' if i % 3 else 'Lyon'},{i % 50}" for i in range(ROWS)]


def _write(path: Path, lines: list[str], ending: str = "\n") -> Path:
    path.write_text(ending.join(lines) + ending, encoding="utf-8")
    return path


# each malformation at data row 500 (line 502), holding a secret the error must not quote
MALFORMED: dict[str, tuple[str, bytes | None]] = {
    "unbalanced quote": (f'500,"{SECRET},1', None),
    "stray quote": (f'500,Par"is{SECRET},1', None),
    "stray quote pair": (f'500,Pa"ri"s{SECRET},1', None),
    "text after the closing quote": (f'500,"Paris"{SECRET},1', None),
    "ragged, too many fields": (f"500,Paris,1,{SECRET}", None),
    "ragged, too few fields": (f"500,{SECRET}", None),
    "bad encoding": ("", b"500,\xff\xfe" + SECRET.encode() + b",1"),
    "embedded NUL": ("", b"500,Pa\x00" + SECRET.encode() + b",1"),
    "lone CR": ("", b"500,Paris,1\r501,Lyon,2"),
}


def _malformed(tmp_path: Path, name: str) -> Path:
    line, raw = MALFORMED[name]
    lines = _lines()
    path = tmp_path / "people.csv"
    if raw is None:
        lines[501] = line
        return _write(path, lines)
    head = ("\n".join(lines[:501]) + "\n").encode()
    tail = ("\n".join(lines[502:]) + "\n").encode()
    path.write_bytes(head + raw + b"\n" + tail)
    return path


def _session(path: Path, engine: str, request: pytest.FixtureRequest) -> Session:
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    return Session(
        str(path),
        "u",
        dp.PureDP(10),
        engine=engine,
        max_rows=1,
        schema={"x": "numeric"},
        spark=spark,
    )


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_file_fails_whole_and_charged(
    tmp_path: Path, engine_name: str, name: str, request: pytest.FixtureRequest
) -> None:
    path = _malformed(tmp_path, name)
    session = _session(path, engine_name, request)
    query = session.query().agg(count(), dp_sum("x", (0, 50)))
    with pytest.raises(dp.UnreadableDataError) as info:
        session.evaluate(query, epsilon=1)
    message = str(info.value)
    assert info.value.charged
    assert session.spent == dp.PureDP(1)  # the reservation stays: the file is private
    assert SECRET not in message and not re.search(r"line \d", message)
    assert "check_csv" in message
    failed = [e for e in session.ledger.history() if e.kind == "fail"]
    assert len(failed) == 1
    with pytest.raises(dp.UnreadableDataError):  # the same file fails the same way again
        session.evaluate(query, epsilon=1)
    assert session.spent == dp.PureDP(2)
    # the data owner finds the line locally (it names the line, never its contents)
    with pytest.raises(dp.UnreadableDataError, match=r"line 50[23]") as local:
        check_csv(path)
    assert SECRET not in str(local.value)


TRICKY = [
    "u,city,x",
    '1,"Paris, France",3',
    '2,"He said ""hi""",4',
    '3,"two\nlines",5',
    "4,,6",
    '5,"",7',
    "6, spaced ,8",
    "7,Zürich 😀,9",
    "",
    "8,#hash,1",
    "9,\\backslash,2",
    "10,null,3",
    "11,NaN,4",
]


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_well_formed_file_reads_identically_everywhere(
    tmp_path: Path, ending: str, request: pytest.FixtureRequest
) -> None:
    lines = [line.replace("\n", ending) if '"two' in line else line for line in TRICKY]
    if ending == "\r\n":
        lines[3] = '3,"two lines",5'  # a CR inside quotes is refused (Spark rewrites CRLF)
    path = _write(tmp_path / "tricky.csv", lines, ending)
    check_csv(path)
    results = {}
    for engine in ("pandas", "duckdb", "spark"):
        session = _session(path, engine, request)
        keys = [
            "Paris, France",
            'He said "hi"',
            "two\nlines" if ending == "\n" else "two lines",
            " spaced ",
            "Zürich 😀",
            "#hash",
            "\\backslash",
            "null",
            "NaN",
        ]
        query = session.query().group_by("city", keys=keys).agg(count(), dp_sum("x", (0, 10)))
        compiled = session.compile(query, epsilon=1)
        plan = compiled.plans[0]
        table = session.engine.run(plan).to_pydict()
        got = {
            table[plan.group_columns[0]][i]: tuple(int(table[c][i]) for c in plan.output_columns)
            for i in range(len(table[plan.group_columns[0]]))
        }
        results[engine] = got
        session.close()
    assert results["pandas"] == results["duckdb"] == results["spark"]
    assert len(results["pandas"]) == 9  # every key found once; empty and "" are NULL


def test_the_issue_file_no_longer_reads_499_rows(tmp_path: Path) -> None:
    """The issue's file: an unbalanced quote at row 500 of 2,000. DuckDB and pandas used to read
    499 rows and release a count of about 470 with exit 0."""
    path = _malformed(tmp_path, "unbalanced quote")
    for engine in ("duckdb", "pandas"):
        session = Session(str(path), "u", dp.PureDP(10), engine=engine, max_rows=1)
        plan = session.compile(session.query().agg(count()), epsilon=1).plans[0]
        with pytest.raises(dp.UnreadableDataError):
            session.engine.run(plan)


def test_a_file_repaired_between_queries_is_checked_again(tmp_path: Path) -> None:
    path = _malformed(tmp_path, "stray quote")
    session = Session(str(path), "u", dp.PureDP(10), max_rows=1)
    with pytest.raises(dp.UnreadableDataError):
        session.evaluate(session.query().agg(count()), epsilon=1)
    _write(path, _lines())
    release = session.evaluate(session.query().agg(count()), epsilon=1)
    assert abs(int(release.table["count"].iloc[0]) - ROWS) < 60


def test_a_header_that_is_not_utf8_is_refused_before_anything(tmp_path: Path) -> None:
    """The header is public metadata (the column names): refused when the session opens."""
    path = tmp_path / "bad_header.csv"
    path.write_bytes(b"u,\xffcity\n1,a\n")
    with pytest.raises(dp.InvalidDataError, match="UTF-8"):
        Session(str(path), "u", dp.PureDP(1), max_rows=1)
