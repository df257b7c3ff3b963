"""The SQL expression compiler (DuckDB and Spark) for the nodes of issue 23: LIKE keeps
dpkit's meaning in each dialect (Spark's default escape character is neutralised), CASE
branches are DOUBLE when numeric, and YEAR / MONTH / DAY are numbers."""

from __future__ import annotations

import duckdb

from dpkit.analytics import col, when
from dpkit.analytics._engines._sql import _ExprCompiler

SCHEMA = {"s": "string", "x": "numeric", "d": "temporal"}


def _sql(expr: object, dialect: str) -> str:
    compiler = _ExprCompiler(SCHEMA, set(), dialect)  # type: ignore[arg-type]
    return compiler.compile(expr).sql(dialect=dialect)  # type: ignore[arg-type]


def test_like_in_spark_doubles_backslashes_and_duckdb_keeps_them() -> None:
    assert "LIKE 'a\\b%'" in _sql(col("s").like("a\\b%"), "duckdb")
    spark = _sql(col("s").like("a\\b%"), "spark")
    assert "LIKE" in spark and "a\\\\\\\\b%" in spark  # '\\\\' in Spark text: two backslashes


def test_duckdb_like_has_no_escape_character() -> None:
    text = _sql(col("s").like("a\\%"), "duckdb")
    con = duckdb.connect()
    got = con.execute(f"SELECT {text} FROM (VALUES ('a\\x'), ('a%')) t(s)").fetchall()
    assert got == [(True,), (False,)]


def test_case_and_parts_compile_to_doubles() -> None:
    text = _sql(when(col("s").like("P%"), 1).otherwise(col("x")), "duckdb")
    assert text.startswith("CASE WHEN") and text.count("AS DOUBLE") >= 2
    assert _sql(col("d").year(), "duckdb") == 'CAST(YEAR("d") AS DOUBLE)'
    assert "MONTH" in _sql(col("d").month(), "spark")


def test_a_key_set_of_every_combination_is_filtered_per_column() -> None:
    """Issue 23 (TPC-H Q1): a key set that is every combination of its columns' values is read
    as one IN filter per column (no join); any other set keeps the join."""
    from dpkit.analytics._engines._sql import _product_columns

    assert _product_columns([("A", "F"), ("A", "O"), ("N", "F"), ("N", "O")]) == [
        ["A", "N"],
        ["F", "O"],
    ]
    assert _product_columns([("A", "F"), ("A", "O"), ("N", "F")]) is None  # one missing
    assert _product_columns([(1, "F"), (1.0, "O")]) is None  # 1 and 1.0 told apart
    assert _product_columns([(float("nan"), "F")]) is None
    assert _product_columns([]) is None
