"""Property test: the one rule for text read as a date/time (docs/analytics.md, "Declared
kinds"), checked against an independent reference parser written from the documented rule, in
Python (``text_timestamps``, every pandas conversion, run by Arrow's RE2) and in DuckDB's SQL
(``converted``, CSV files and Arrow text columns). Spark runs the same SQL tree in
tests/engines/test_kinds.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import numpy as np
import pandas as pd
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dpkit.analytics._engines._columns import text_timestamps
from dpkit.analytics._engines._sql import converted

PROPS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_ASCII_SPACE = " \t\n\x0b\x0c\r"


def _digits(text: str, n: int) -> int | None:
    if len(text) != n or not all("0" <= c <= "9" for c in text):
        return None
    return int(text)


def reference(text: str | None) -> dt.datetime | None:
    """The documented rule, by slicing (no regular expression)."""
    if text is None:
        return None
    s = text.strip(_ASCII_SPACE)
    if len(s) < 10 or s[4] != "-" or s[7] != "-":
        return None
    year, month, day = _digits(s[:4], 4), _digits(s[5:7], 2), _digits(s[8:10], 2)
    if year is None or month is None or day is None or year == 0:
        return None
    try:
        date = dt.datetime(year, month, day)
    except ValueError:
        return None
    rest = s[10:]
    if not rest:
        return date
    if rest[0] not in "T " or len(rest) < 6 or rest[3] != ":":
        return None
    hour, minute = _digits(rest[1:3], 2), _digits(rest[4:6], 2)
    if hour is None or minute is None or hour > 23 or minute > 59:
        return None
    rest = rest[6:]
    second = micro = 0
    if rest[:1] == ":":
        got = _digits(rest[1:3], 2)
        if got is None or got > 59:
            return None
        second, rest = got, rest[3:]
        if rest[:1] == ".":
            n = 0
            while n < len(rest) - 1 and "0" <= rest[1 + n] <= "9":
                n += 1
            if not 1 <= n <= 6:
                return None
            micro, rest = int(rest[1 : 1 + n].ljust(6, "0")), rest[1 + n :]
    offset = 0
    if rest == "Z":
        rest = ""
    elif rest[:1] in ("+", "-") and len(rest) == 6 and rest[3] == ":":
        oh, om = _digits(rest[1:3], 2), _digits(rest[4:6], 2)
        if oh is None or om is None or oh > 23 or om > 59:
            return None
        offset, rest = (oh * 60 + om) * (-1 if rest[0] == "-" else 1), ""
    if rest:
        return None
    local = date + dt.timedelta(hours=hour, minutes=minute, seconds=second, microseconds=micro)
    low, high = dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    # in microseconds, so that leaving years 1-9999 does not overflow datetime
    delta = (local - low) - dt.timedelta(minutes=offset)
    if delta < dt.timedelta(0) or delta > high - low:
        return None
    return low + delta


PIECES = [
    "2024",
    "0000",
    "0001",
    "9999",
    "1900",
    "2000",
    "-",
    "01",
    "02",
    "12",
    "13",
    "00",
    "29",
    "30",
    "31",
    "1",
    "T",
    " ",
    "t",
    ":",
    "23",
    "24",
    "59",
    "60",
    ".",
    "5",
    "123456",
    "1234567",
    "Z",
    "z",
    "+",
    "05:30",
    "02:00",
    "23:59",
    "24:00",
    "\t",
    "\n",
    "\x0b",
    "\u00a0",
    "٣",
    "２",
    "x",
    ",",
]
# (valid choices, invalid choices) of each part of a text, in order; a drawn text is valid but
# for at most one part (so that most texts are near the boundary of the rule)
PARTS: list[tuple[list[str], list[str]]] = [
    (["", " ", "\t", "\n "], ["\u00a0", "\u2028", "x"]),
    (["0001", "1900", "2000", "2023", "2024", "9999"], ["0000", "24", "20240", "２０２４", "٢٠٢٤"]),
    (["-"], ["/", "", "--"]),
    (["01", "02", "04", "12"], ["00", "13", "1", "1 "]),
    (["-"], ["/", ""]),
    (["01", "28", "29", "30", "31"], ["00", "32", "1", "3"]),
    (["", "T00:00", " 23:59", "T12:30"], ["T24:00", "T12:60", "t10:00", "T9:30", "T10", "  10:00"]),
    (["", ":00", ":59"], [":60", ":7", ":5 "]),
    (["", ".1", ".12", ".123", ".1234", ".12345", ".123456"], [".1234567", ".", ",5"]),
    (
        ["", "Z", "+05:30", "-02:00", "+23:59", "-23:59", "+00:00"],
        ["z", "+24:00", "+0200", "+2:00", "-12:60", "Z+01:00"],
    ),
    (["", " ", "\n", "\r\n", "\x0b\x0c"], ["\u00a0", "\u2028", "."]),
]


@st.composite
def near_valid(draw: Any) -> str:
    defect = draw(st.one_of(st.none(), st.integers(0, len(PARTS) - 1)))
    chosen = [
        draw(st.sampled_from(bad if i == defect else good)) for i, (good, bad) in enumerate(PARTS)
    ]
    if not chosen[6] and defect not in (7, 8, 9):  # no time: no seconds, fraction nor offset
        chosen[7] = chosen[8] = chosen[9] = ""
    if not chosen[7] and defect != 8:  # no seconds: no fraction
        chosen[8] = ""
    return "".join(chosen)


OTHER = st.one_of(
    st.none(), st.lists(st.sampled_from(PIECES), max_size=12).map("".join), st.text(max_size=30)
)


def _as_datetime(value: Any) -> dt.datetime | None:
    return None if np.isnat(value) else value.astype("datetime64[us]").astype(dt.datetime)


BOUNDARY = [  # where years 1-9999 end: the year, the offset and the range checks each decide
    "0000-12-31T23:30-01:00",
    "0000-01-01",
    "0001-01-01T00:30+01:00",
    "0001-01-01T00:30-01:00",
    "9999-12-31T23:30-01:00",
    "9999-12-31T23:30+01:00",
    "2024-01-01T24:00",
    "2024-01-01T10:00:00.1234567",
]


@PROPS
@example(BOUNDARY, [])
@given(st.lists(near_valid(), min_size=40, max_size=120), st.lists(OTHER, max_size=30))
def test_text_timestamps_follow_the_rule(near: list[str], other: list[str | None]) -> None:
    texts = near + other
    expected = [reference(t) for t in texts]
    python = [_as_datetime(v) for v in text_timestamps(pd.Series(texts, dtype=object))]
    assert python == expected
    con = duckdb.connect()
    frame = pd.DataFrame({"d": pd.array(texts, dtype="str")})
    con.register("t", frame)
    sql = "SELECT " + converted("d", "temporal", "duckdb").sql("duckdb") + " FROM t"
    duck = [row[0] for row in con.sql(sql).fetchall()]
    assert duck == expected
