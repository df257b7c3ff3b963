"""The query text of issue 23: CASE, LIKE / NOT LIKE / ILIKE, EXTRACT / YEAR / MONTH / DAY,
expressions as aggregate arguments and GROUP BY keys (derived columns), and HAVING / ORDER BY /
LIMIT as post-processing of the released table (no data read, nothing charged)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, col, when
from dpkit.analytics._querytext import (
    MAX_EXPRESSION_DEPTH,
    MAX_EXPRESSION_NODES,
    check_released,
    parse_query,
    parse_where,
    post_process,
    query_schema,
)
from dpkit.errors import InvalidParameterError, UnsupportedQueryError

SCHEMA = {"u": "numeric", "k": "string", "s": "string", "x": "numeric", "y": "numeric"}
SCHEMA |= {"d": "temporal"}


def test_an_expression_aggregate_is_a_derived_column_named_as_its_output() -> None:
    parsed = parse_query(
        "SELECT SUM(l_extendedprice * (1 - l_discount), 0, 100000) AS revenue, AVG(a + b, 0, 9)"
    )
    revenue, mean = parsed.aggregations
    assert revenue.name == "revenue" and revenue.column == "revenue"  # type: ignore[union-attr]
    assert mean.name == "avg_2" and mean.column == "avg_2"  # type: ignore[union-attr]
    (n1, e1), (n2, e2) = parsed.derived
    assert (n1, n2) == ("revenue", "avg_2")
    assert e1.same_as(col("l_extendedprice") * (1 - col("l_discount")))
    assert e2.same_as(col("a") + col("b"))
    assert revenue.bounds == (0, 100000)  # type: ignore[union-attr]


def test_case_like_between_and_in_inside_an_aggregate() -> None:
    parsed = parse_query(
        "SELECT SUM(CASE WHEN p_type LIKE 'PROMO%' THEN x WHEN x BETWEEN 1 AND 2 THEN 1 "
        "WHEN k IN ('a', 'b') THEN 2 ELSE 0 END, 0, 100) AS promo"
    )
    want = (
        when(col("p_type").like("PROMO%"), col("x"))
        .when((col("x") >= 1) & (col("x") <= 2), 1)
        .when(col("k").is_in(["a", "b"]), 2)
        .otherwise(0)
    )
    assert parsed.derived[0][1].same_as(want)


def test_case_without_else_is_null_and_a_simple_case_compares() -> None:
    where = parse_where("CASE x WHEN 1 THEN TRUE WHEN 2 THEN FALSE END")
    assert where.same_as(when(col("x") == 1, True).when(col("x") == 2, False))


def test_like_not_like_ilike_and_date_parts_in_where() -> None:
    where = parse_where(
        "s LIKE 'a%' AND s NOT LIKE '_.*' AND s ILIKE 'AB%' AND YEAR(d) = 2020 "
        "AND EXTRACT(month FROM d) = 2 AND DAY(d) < 10 AND MONTH(d) > 1 AND EXTRACT(DAY FROM d) > 0"
    )
    rendered = where.render()
    for part in (
        "col('s').like('a%')",
        "~col('s').like('_.*')",
        "col('s').lower().like('ab%')",
        "col('d').year()",
        "col('d').month()",
        "col('d').day()",
    ):
        assert part in rendered


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("SELECT COUNT(*) WHERE s LIKE x", "text literal"),
        ("SELECT COUNT(*) WHERE s LIKE 'a!%' ESCAPE '!'", "ESCAPE"),
        ("SELECT COUNT(*) WHERE EXTRACT(HOUR FROM d) = 1", "YEAR, MONTH or DAY"),
        ("SELECT COUNT(*) WHERE EXTRACT(EPOCH FROM d) = 1", "EXTRACT"),
        ("SELECT x + 1, COUNT(*)", "aggregate or a GROUP BY key"),
        ("SELECT COUNT(*) HAVING SUM(x, 0, 1) > 3", "its own release and budget"),
        ("SELECT COUNT(*) AS n HAVING m > 3", "released columns only"),
        ("SELECT COUNT(*) AS n ORDER BY x", "released columns only"),
        ("SELECT COUNT(*) ORDER BY 1", "ORDER BY"),
        ("SELECT COUNT(*) LIMIT x", "LIMIT"),
        ("SELECT YEAR(x) AS x, COUNT(*) GROUP BY x", "may not take the name"),
        ("SELECT COUNT(*) GROUP BY 1", "not positions"),
        ("SELECT SUM(*, 0, 1)", "column or an expression"),
    ],
)
def test_unsupported_forms_are_refused_naming_them(text: str, said: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=said):
        parse_query(text)


def test_group_by_an_alias_or_an_expression_groups_on_a_derived_column() -> None:
    parsed = parse_query("SELECT EXTRACT(YEAR FROM d) AS yr, COUNT(*) GROUP BY yr")
    assert parsed.group_by == ("yr",) and parsed.derived[0][0] == "yr"
    assert parsed.derived[0][1].same_as(col("d").year())
    parsed = parse_query("SELECT k, YEAR(d), COUNT(*) GROUP BY k, YEAR(d)")
    assert parsed.group_by == ("k", "YEAR(d)") and len(parsed.aggregations) == 1
    parsed = parse_query("SELECT k AS k, COUNT(*) GROUP BY k")
    assert parsed.group_by == ("k",) and parsed.derived == ()


def test_a_derived_aggregate_column_never_hides_a_column_the_query_reads() -> None:
    parsed = parse_query("SELECT SUM(x * 2, 0, 1) AS x, SUM(y, 0, 1) AS s")
    ((name, _),) = parsed.derived
    assert name != "x" and parsed.aggregations[0].column == name  # type: ignore[union-attr]
    assert parsed.aggregations[0].name == "x"
    # nor the privacy unit's (the bounding reads it)
    parsed = parse_query("SELECT SUM(x * 2, 0, 1) AS person", "person")
    assert parsed.derived[0][0] != "person" and parsed.aggregations[0].name == "person"
    with pytest.raises(UnsupportedQueryError, match="may not take the name"):
        parse_query("SELECT YEAR(d) AS person, COUNT(*) GROUP BY person", "person")


def test_having_order_by_limit_read_released_columns() -> None:
    parsed = parse_query(
        "SELECT k, COUNT(*) AS n, SUM(x, 0, 10) AS s GROUP BY k "
        "HAVING COUNT(*) > 100 AND s <= 5 ORDER BY s DESC, k LIMIT 3"
    )
    assert parsed.having is not None
    assert parsed.having.same_as((col("n") > 100) & (col("s") <= 5))
    assert parsed.order_by == (("s", True), ("k", False)) and parsed.limit == 3
    assert parsed.post_processed


def test_expression_sizes_are_bounded() -> None:
    def balanced(depth: int) -> str:  # 2^(depth+1) - 1 nodes, depth levels
        return "x" if depth == 0 else f"({balanced(depth - 1)} + {balanced(depth - 1)})"

    one = balanced(6)  # 127 nodes
    count = MAX_EXPRESSION_NODES // 127 + 1
    sums = ", ".join(f"SUM({one}, 0, 1) AS s{i}" for i in range(count))
    with pytest.raises(UnsupportedQueryError, match="parts"):
        parse_query(f"SELECT {sums}")
    parse_query(f"SELECT {', '.join(f'SUM({one}, 0, 1) AS s{i}' for i in range(count - 1))}")
    chain = " + ".join(["x"] * (MAX_EXPRESSION_DEPTH + 2))
    with pytest.raises(UnsupportedQueryError, match="nested too deeply"):
        parse_query(f"SELECT SUM({chain}, 0, 1)")
    whens = " ".join(f"WHEN x = {i} THEN {i}" for i in range(MAX_EXPRESSION_DEPTH + 1))
    with pytest.raises(UnsupportedQueryError, match="nested too deeply"):
        parse_query(f"SELECT SUM(CASE {whens} END, 0, 1)")


def test_query_schema_and_check_released_refuse_before_anything_is_reserved() -> None:
    parsed = parse_query("SELECT YEAR(d) AS yr, SUM(x * y, 0, 1) AS s GROUP BY yr HAVING s > 1")
    kinds = query_schema(parsed, SCHEMA)  # type: ignore[arg-type]
    assert kinds["yr"] == "numeric" and kinds["s"] == "numeric"
    check_released(parsed, SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedQueryError, match="declare the column a date"):
        query_schema(parse_query("SELECT SUM(YEAR(s), 0, 1)"), SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedQueryError, match="not a condition"):
        check_released(parse_query("SELECT COUNT(*) AS n HAVING n + 1"), SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedQueryError, match="cannot compare"):
        check_released(
            parse_query("SELECT k, COUNT(*) AS n GROUP BY k HAVING k > 1"),
            SCHEMA,  # type: ignore[arg-type]
        )


@pytest.mark.usefixtures("seeded")
def test_post_processing_filters_sorts_and_cuts_the_released_table_without_a_charge() -> None:
    rng = np.random.default_rng(0)  # test data only
    n = 3000
    df = pd.DataFrame(
        {
            "u": np.arange(n),
            "k": rng.choice(["a", "b", "c", "d"], n, p=[0.5, 0.3, 0.15, 0.05]),
            "x": rng.uniform(0, 10, n),
            "p": rng.choice(["PROMO 1", "BASE"], n),
        }
    )
    text = (
        "SELECT k, COUNT(*) AS n, SUM(CASE WHEN p LIKE 'PROMO%' THEN x ELSE 0 END, 0, 10) AS s "
        "GROUP BY k HAVING n > 300 ORDER BY s DESC LIMIT 2"
    )
    parsed = parse_query(text, "u")
    session = Session(df, "u", dp.PureDP(10), max_rows=1)
    check_released(parsed, session.schema)
    query = parsed.rows(session.query()).group_by("k", keys=["a", "b", "c", "d"])
    release = session.evaluate(query.agg(*parsed.aggregations), epsilon=1)
    spent = session.spent
    shown = post_process(release, parsed)
    assert session.spent == spent and shown.loss == release.loss
    assert shown.receipt is release.receipt and shown.accuracy == release.accuracy
    full = release.table
    want = full[full["n"] > 300].sort_values("s", ascending=False).head(2)
    assert list(shown.table["k"]) == list(want["k"]) == ["a", "b"]
    assert shown.table["s"].tolist() == want["s"].tolist()
    assert list(release.table["k"]) == ["a", "b", "c", "d"]  # the release itself is unchanged
    assert post_process(release, parse_query("SELECT k, COUNT(*) GROUP BY k")) is release


def test_post_processing_keeps_rows_whose_having_is_true_only() -> None:
    from dpkit.analytics._results import TableRelease

    table = pd.DataFrame({"k": ["a", "b", "c"], "n": [5, np.nan, 7]})
    release = TableRelease({"main": table}, {}, dp.PureDP(1))
    parsed = parse_query("SELECT k, COUNT(*) AS n GROUP BY k HAVING n >= 5 ORDER BY n")
    assert post_process(release, parsed).table["k"].tolist() == ["a", "c"]
    parsed = parse_query("SELECT k, COUNT(*) AS n GROUP BY k ORDER BY n DESC")
    assert post_process(release, parsed).table["k"].tolist() == ["c", "a", "b"]  # NULL last


def test_a_builder_error_names_the_parameter() -> None:
    with pytest.raises(InvalidParameterError):
        col("s").ilike(None)  # type: ignore[arg-type]
