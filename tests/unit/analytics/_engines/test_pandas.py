"""The reference engine's evaluation of LIKE, CASE and YEAR / MONTH / DAY (issue 23): SQL's
meaning, with NULLs, and no character of a LIKE pattern read as a regular expression."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from dpkit.analytics import col, when
from dpkit.analytics._engines._pandas import evaluate, like_regex

TEXTS = ["a.b", "axb", "a*b", "aab", "[ab]", "a", "(ab)", "a\\b", "a%b", "", None, "a\nb", "^$"]


def _values(result: object) -> list[object]:
    return [None if v is pd.NA else v for v in pd.array(result, dtype="object")]


@pytest.mark.parametrize(
    ("pattern", "matching"),
    [
        ("a.b", {"a.b"}),
        ("a*b", {"a*b"}),
        ("[ab]", {"[ab]"}),
        ("(ab)", {"(ab)"}),
        ("a\\b", {"a\\b"}),
        ("^$", {"^$"}),
        ("a_b", {"a.b", "axb", "a*b", "aab", "a\\b", "a%b", "a\nb"}),
        ("a%", {"a.b", "axb", "a*b", "aab", "a", "a\\b", "a%b", "a\nb"}),
        ("", {""}),
        ("%", {t for t in TEXTS if t is not None}),
        ("a\\%", {"a\\b"}),  # no escape character: a backslash is itself
    ],
)
def test_like_matches_as_sql(pattern: str, matching: set[str]) -> None:
    df = pd.DataFrame({"s": pd.array(TEXTS, dtype="string")})
    got = _values(evaluate(col("s").like(pattern), df))
    assert got == [None if t is None else t in matching for t in TEXTS]
    negated = _values(evaluate(~col("s").like(pattern), df))
    assert negated == [None if t is None else t not in matching for t in TEXTS]


def test_like_regex_escapes_every_metacharacter() -> None:
    special = ".*+?[](){}^$|\\"
    assert re.fullmatch(like_regex(special), special, re.DOTALL)
    assert not re.fullmatch(like_regex(special), "x" * len(special), re.DOTALL)


def test_case_is_the_first_true_branch_and_null_without_else() -> None:
    df = pd.DataFrame({"x": [np.nan, 0.0, 1.0, 2.0, 3.0]})
    case = when(col("x") >= 2, col("x") * 10).when(col("x") >= 1, -1)
    assert _values(evaluate(case, df)) == [None, None, -1.0, 20.0, 30.0]
    assert _values(evaluate(case.otherwise(7), df)) == [7.0, 7.0, -1.0, 20.0, 30.0]
    text = when(col("x") > 0, "pos").otherwise(None)
    assert _values(evaluate(text, df)) == [None, None, "pos", "pos", "pos"]


def test_year_month_day_of_dates_with_nulls() -> None:
    df = pd.DataFrame(
        {"d": pd.to_datetime(["2024-02-29", None, "1999-12-31 23:59"], format="ISO8601")}
    )
    assert _values(evaluate(col("d").year(), df)) == [2024.0, None, 1999.0]
    assert _values(evaluate(col("d").month(), df)) == [2.0, None, 12.0]
    assert _values(evaluate(col("d").day(), df)) == [29.0, None, 31.0]
