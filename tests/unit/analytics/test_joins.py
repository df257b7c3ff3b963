"""Sessions over several tables (dpkit.analytics._joins): every catalogue and query that cannot
be planned is refused before anything is read or charged, naming what is wrong; joins that can
be planned answer what they say."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, col, count
from dpkit.analytics._joins import Catalog
from dpkit.errors import DPError, InvalidParameterError, UnsupportedQueryError

CUSTOMER = pd.DataFrame({"c_id": [1, 2, 3], "c_nation": [0, 1, 1], "who": ["a", "b", "c"]})
ORDERS = pd.DataFrame(
    {"o_id": [10, 11, 12, 13], "o_cust": [1, 1, 2, 3], "o_total": [5.0, 6.0, 7.0, 8.0]}
)
LINES = pd.DataFrame({"l_order": [10, 10, 11, 12, 13, 13], "l_qty": [1, 2, 3, 4, 5, 6]})
NATION = pd.DataFrame({"n_key": [0, 1], "n_name": ["X", "Y"]})
LINKS = {"orders.o_cust": "customer.c_id", "lines.l_order": "orders.o_id"}


def _session(**options: Any) -> Session:
    settings: dict[str, Any] = {
        "privacy_unit": "customer.c_id",
        "links": LINKS,
        "public": {"nation": NATION},
        "budget": dp.PureDP(10),
        "engine": "pandas",
        "max_rows": 5,
    }
    settings.update(options)
    return Session({"customer": CUSTOMER, "orders": ORDERS, "lines": LINES}, **settings)


KINDS: dict[str, dict[str, Any]] = {
    "customer": {"c_id": "numeric", "c_nation": "numeric"},
    "orders": {"o_id": "numeric", "o_cust": "numeric", "o_day": "temporal"},
    "lines": {"l_order": "numeric"},
    "nation": {"n_key": "numeric"},
}


@pytest.mark.parametrize(
    ("unit", "links", "public", "parameter", "said"),
    [
        ("c_id", LINKS, {"nation"}, "privacy_unit", "table.column"),
        ("nope.c_id", LINKS, {"nation"}, "privacy_unit", "private table"),
        ("nation.n_key", LINKS, {"nation"}, "privacy_unit", "private table"),
        ("customer.nope", LINKS, {"nation"}, "privacy_unit", "a column of table"),
        ("customer.c_id", {"orders.o_cust": "customer.c_id"}, {"nation"}, "links", "lines"),
        ("customer.c_id", {**LINKS, "orders.o_cust": "nation.n_key"}, {"nation"}, "links", "public"),  # noqa: E501
        ("customer.c_id", {**LINKS, "lines.nope": "orders.o_id"}, {"nation"}, "links", "a column"),
        ("customer.c_id", {**LINKS, "customer.c_nation": "orders.o_id"}, {"nation"}, "links", "holds"),  # noqa: E501
        (
            "customer.c_id",
            [("orders.o_cust", "customer.c_id"), ("orders.o_id", "lines.l_order"),
             ("lines.l_order", "orders.o_id")],
            {"nation"},
            "links",
            "one link per table",
        ),
        ("customer.c_id", {**LINKS, "orders.o_day": "customer.c_id"}, {"nation"}, "links", "one link"),  # noqa: E501
        ("customer.c_id", {"orders.o_day": "customer.c_id", "lines.l_order": "orders.o_id"},
         {"nation"}, "links", "same kind"),
        ("customer.c_id", {"orders.o_id": "lines.l_order", "lines.l_order": "orders.o_id"},
         {"nation"}, "links", "cycle"),
    ],
)  # fmt: skip
def test_a_catalogue_that_cannot_be_planned_is_refused(
    unit: str, links: Any, public: set[str], parameter: str, said: str
) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        Catalog.build(KINDS, public, unit, links)
    assert caught.value.parameter == parameter
    assert said in str(caught.value)


def test_the_session_refuses_a_bad_catalogue_before_reading() -> None:
    with pytest.raises(InvalidParameterError, match="links"):
        _session(links={"orders.o_cust": "customer.c_id"})  # lines has no path
    with pytest.raises(InvalidParameterError, match="public"):
        Session(
            {"customer": CUSTOMER}, "customer.c_id", dp.PureDP(1), public={"customer": CUSTOMER}
        )


REFUSED_SQL = [
    ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.o_total = b.o_total", "same person"),
    ("SELECT COUNT(*) FROM nation", "public tables only"),
    ("SELECT COUNT(*) FROM orders JOIN lines ON o_id < l_order", "non-equi"),
    ("SELECT COUNT(*) FROM orders RIGHT JOIN lines ON o_id = l_order", "RIGHT JOIN"),
    ("SELECT COUNT(*) FROM orders FULL OUTER JOIN lines ON o_id = l_order", "JOIN"),
    ("SELECT COUNT(*) FROM orders, lines", "ON or USING"),
    ("SELECT COUNT(*) FROM orders CROSS JOIN lines", "CROSS"),
    ("SELECT COUNT(*) FROM orders JOIN lines ON o_id = nope", "nope"),
    ("SELECT COUNT(*) FROM orders JOIN nope ON o_id = x", "nope"),
    ("SELECT COUNT(*) FROM orders JOIN orders ON o_cust = o_cust", "alias"),
    ("SELECT COUNT(*) FROM (SELECT o_id, COUNT(*) AS n FROM orders GROUP BY o_id) s", "privacy unit"),  # noqa: E501
    ("SELECT COUNT(*) FROM orders JOIN nation ON o_id = n_key WHERE o_total LIKE 'x%'", "string values"),  # noqa: E501
    ("SELECT COUNT(*) FROM orders WHERE o_id IN (SELECT l_order FROM lines)", "subquery"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT 1 FROM lines)", ""),
    ("SELECT COUNT(*) FROM customer LEFT JOIN orders ON c_id = o_cust AND who = 'a'", "right side"),
    ("SELECT COUNT(*) FROM customer a JOIN customer b ON a.c_nation = b.c_nation", "same person"),
    ("WITH RECURSIVE r AS (SELECT * FROM orders) SELECT COUNT(*) FROM r", "RECURSIVE"),
    ("SELECT COUNT(*) FROM orders, LATERAL (SELECT 1)", ""),
    ("SELECT COUNT(*) FROM orders JOIN customer ON customer.c_id = o_cust WHERE c_nation = 'x'", ""),  # noqa: E501
    ("SELECT COUNT(*)", "FROM"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "said"), REFUSED_SQL)
def test_unsupported_sql_is_refused_before_anything_is_charged(text: str, said: str) -> None:
    session = _session()
    try:
        with pytest.raises(DPError) as caught:
            session.evaluate_sql(text, epsilon=1)
        assert said.lower() in str(caught.value).lower()
        assert session.spent == dp.PureDP(0)
        assert [e.kind for e in session.ledger.history(session.dataset)] == ["create"]
    finally:
        session.close()


def test_builder_refusals_charge_nothing() -> None:
    session = _session()
    try:
        for build in (
            lambda: session.query().agg(count()),  # several tables: name one
            lambda: session.query("orders").join("orders", on="o_cust").agg(count()),
            lambda: session.query("orders").per_unit("o_id", n="count").agg(count()),
            lambda: session.query("orders").join("lines", on=("o_total", "l_qty")).agg(count()),
        ):
            with pytest.raises(DPError):
                session.evaluate(build(), epsilon=1)
        assert session.spent == dp.PureDP(0)
    finally:
        session.close()


def test_one_table_sessions_refuse_joins_by_name() -> None:
    session = Session(ORDERS, "o_cust", dp.PureDP(1), engine="pandas", max_rows=5)
    try:
        with pytest.raises(UnsupportedQueryError, match="JOIN"):
            session.evaluate_sql("SELECT COUNT(*) FROM t JOIN u ON a = b", epsilon=1)
        with pytest.raises(UnsupportedQueryError, match="several tables"):
            session.evaluate(session.query("other").agg(count()), epsilon=1)
        assert session.spent == dp.PureDP(0)
    finally:
        session.close()


def _exact_count(session: Session, text: str) -> int:
    """The exact count a query releases (its bounded plan's row count, before noise)."""
    measurement = session.compile(session.sql(text), epsilon=1)
    engine = session._resolve(session.sql(text))[4]
    table = measurement.bounding(engine)[0].to_pandas()  # type: ignore[misc]
    return int(table["__dpkit_o0"].sum())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT COUNT(*) FROM lines", 6),
        ("SELECT COUNT(*) FROM lines JOIN orders ON l_order = o_id", 6),
        ("SELECT COUNT(*) FROM orders o JOIN lines l ON l.l_order = o.o_id WHERE o.o_total > 5", 4),
        ("SELECT COUNT(*) FROM customer LEFT JOIN orders ON c_id = o_cust AND o_total > 6", 3),
        ("SELECT COUNT(*) FROM orders JOIN customer ON o_cust = c_id AND o_total > who", None),
        ("SELECT COUNT(*) FROM orders JOIN customer ON o_cust = c_id AND o_total > 6", 2),
        ("SELECT COUNT(*) FROM customer JOIN nation ON c_nation = n_key WHERE n_name = 'Y'", 2),
        ("SELECT COUNT(*) FROM nation JOIN customer ON n_key = c_nation", 3),
        ("SELECT COUNT(*) FROM nation LEFT JOIN customer ON n_key = c_nation", None),
        ("WITH big AS (SELECT * FROM orders WHERE o_total >= 7) SELECT COUNT(*) FROM big", 2),
        (
            "SELECT COUNT(*) FROM (SELECT o_cust, SUM(l_qty) AS q FROM orders JOIN lines ON "
            "o_id = l_order GROUP BY o_cust HAVING SUM(l_qty) > 6) AS heavy",
            1,  # customer 1 has 1 + 2 + 3, customer 2 has 4, customer 3 has 5 + 6
        ),
        ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.o_cust = b.o_cust", 6),
    ],
)
def test_joins_answer_what_they_say(text: str, expected: int | None) -> None:
    session = _session()
    try:
        if expected is None:
            with pytest.raises(UnsupportedQueryError):
                _exact_count(session, text)
        else:
            assert _exact_count(session, text) == expected
    finally:
        session.close()


def test_using_keeps_one_key_column() -> None:
    people = pd.DataFrame({"pid": [1, 2], "age": [30, 40]})
    visits = pd.DataFrame({"pid": [1, 1, 2], "cost": [1.0, 2.0, 3.0]})
    session = Session(
        {"people": people, "visits": visits},
        "people.pid",
        dp.PureDP(1),
        links={"visits.pid": "people.pid"},
        engine="pandas",
        max_rows=5,
    )
    try:
        query = session.query("people").join("visits", on="pid").filter(col("age") > 35)
        measurement = session.compile(query.agg(count()), epsilon=1)
        engine = session._resolve(query.agg(count()))[4]
        assert int(measurement.bounding(engine)[0].to_pandas()["__dpkit_o0"].sum()) == 1  # type: ignore[misc]
        assert "customer" not in session.explain(query.agg(count()), epsilon=1)
        assert "people.pid" in session.explain(query.agg(count()), epsilon=1)
    finally:
        session.close()


# ---------------------------------------------------------------- the review's findings
CHAIN_LINKS = {
    "orders.o_custkey": "customer.c_custkey",
    "lineitem.l_orderkey": "orders.o_orderkey",
    "ship.s_linekey": "lineitem.l_linekey",
}


def _chain(with_two: bool) -> dict[str, pd.DataFrame]:
    """Order 10 belongs to customers 1 and 2; line 500 is under order 10 and under order 20
    (customer 1); a shipment of line 500 reaches both customers (three links deep)."""
    customer = pd.DataFrame({"c_custkey": [1, 2]})
    orders = pd.DataFrame({"o_orderkey": [10, 10, 20, 30], "o_custkey": [1, 2, 1, 2]})
    lineitem = pd.DataFrame({"l_linekey": [500, 500, 600], "l_orderkey": [10, 20, 30]})
    ship = pd.DataFrame({"s_linekey": [500, 600], "s_val": [7.0, 8.0]})
    if not with_two:  # customer 2 with every row reachable from it
        customer = customer[customer.c_custkey != 2]
        orders = orders[orders.o_custkey != 2]
        lineitem = lineitem[~lineitem.l_orderkey.isin([10, 30])]
        ship = ship[~ship.s_linekey.isin([500, 600])]
    return {"customer": customer, "orders": orders, "lineitem": lineitem, "ship": ship}


def _rows_by_unit(tables: dict[str, pd.DataFrame], links: Any, table: str, engine: str) -> Any:
    session = Session(tables, "customer.c_custkey", dp.PureDP(1), links=links, engine=engine)
    try:
        relation = session._resolve(session.query(table).agg(count()))[4]
        if engine == "pandas":
            frame = relation._data()  # type: ignore[attr-defined]
        else:
            from sqlglot import exp

            relation._ensure_readable()  # type: ignore[attr-defined]
            text = exp.select("*").from_(relation._source_sql.copy()).sql("duckdb")  # type: ignore[attr-defined]
            frame = relation._con.sql(text).df()  # type: ignore[attr-defined]
    finally:
        session.close()
    return sorted(map(tuple, frame.astype(str).values.tolist()))


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_a_row_reaching_two_people_three_links_deep_belongs_to_nobody(engine: str) -> None:
    full = _rows_by_unit(_chain(True), CHAIN_LINKS, "ship", engine)
    without_two = _rows_by_unit(_chain(False), CHAIN_LINKS, "ship", engine)
    mine = [row for row in full if row[-1] == "1.0"]  # customer 1's shipments
    assert mine == [r for r in without_two if r[-1] == "1.0"]
    assert all(row[0] != "500" for row in full)  # line 500 reaches customers 1 and 2


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_integer_keys_beyond_2_53_never_put_a_row_in_two_people(engine: str) -> None:
    import numpy as np

    tables = {
        "customer": pd.DataFrame({"c_custkey": [1, 2]}),
        "orders": pd.DataFrame(
            {"o_orderkey": np.array([2**53, 2**53 + 1], dtype="int64"), "o_custkey": [1, 2]}
        ),
        "lineitem": pd.DataFrame({"l_orderkey": [float(2**53)], "l_id": [1]}),
    }
    links = {"orders.o_custkey": "customer.c_custkey", "lineitem.l_orderkey": "orders.o_orderkey"}
    assert _rows_by_unit(tables, links, "lineitem", engine) == []  # two people: nobody's


def test_reserved_column_names_are_refused_in_every_table() -> None:
    bad = CUSTOMER.assign(__dpkit_unit=[1, 2, 3])
    with pytest.raises(InvalidParameterError, match="__dpkit_unit"):
        _session().close()
        Session({"customer": bad, "orders": ORDERS, "lines": LINES}, "customer.c_id",
                dp.PureDP(1), links=LINKS)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # after a LEFT JOIN, the right side's unit column may be NULL: not the person
        (
            "SELECT COUNT(*) FROM (SELECT o_cust, COUNT(*) AS n FROM customer LEFT JOIN "
            "orders ON c_id = o_cust GROUP BY o_cust) AS s",
            "privacy unit",
        ),
        # a bare name three tables have is ambiguous, as in SQL
        (
            "SELECT COUNT(*) FROM customer c JOIN orders o ON c.c_id = o.o_cust "
            "JOIN lines l ON l.l_order = o.o_id WHERE flag = 1",
            "ambiguous",
        ),
        # c_id here would be lines' own column: not the person
        ("SELECT COUNT(DISTINCT c_id) FROM lines", "person"),
    ],
)
def test_the_review_s_silent_answers_are_refused(text: str, said: str) -> None:
    flagged = {
        "customer": CUSTOMER.assign(flag=1),
        "orders": ORDERS.assign(flag=1),
        "lines": LINES.assign(flag=1, c_id=1),
    }
    session = Session(flagged, "customer.c_id", dp.PureDP(1), links=LINKS, engine="pandas")
    try:
        with pytest.raises(UnsupportedQueryError, match=said):
            session.evaluate_sql(text, max_rows=5, epsilon=1)
        assert session.spent == dp.PureDP(0)
    finally:
        session.close()


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_unit_ids_beyond_2_53_are_one_unit_wherever_they_meet(engine: str) -> None:
    """Customers 2^53 and 2^53 + 1 (int64) and an order of customer 2^53 written as a float:
    the join compares them as doubles, so the units must be doubles too, or the one order would
    be a row of two units."""
    import numpy as np

    tables = {
        "customer": pd.DataFrame({"c_custkey": np.array([2**53, 2**53 + 1], dtype="int64")}),
        "orders": pd.DataFrame({"o_orderkey": [10], "o_custkey": [float(2**53)]}),
    }
    links = {"orders.o_custkey": "customer.c_custkey"}
    session = Session(tables, "customer.c_custkey", dp.PureDP(1), links=links, engine=engine)
    try:
        query = session.query("customer").join("orders", on=("c_custkey", "o_custkey"))
        relation = session._resolve(query.agg(count()))[4]
        if engine == "pandas":
            frame = relation._data()  # type: ignore[attr-defined]
        else:
            from sqlglot import exp

            relation._ensure_readable()  # type: ignore[attr-defined]
            text = exp.select("*").from_(relation._source_sql.copy()).sql("duckdb")  # type: ignore[attr-defined]
            frame = relation._con.sql(text).df()  # type: ignore[attr-defined]
    finally:
        session.close()
    units_of_order = set(frame.loc[frame["o_orderkey"] == 10, "__dpkit_unit"].tolist())
    assert len(units_of_order) == 1, units_of_order


# ------------------------------------------------------------------------- truncated joins
TRUNCATED_SQL = "SELECT COUNT(*) AS n FROM customer a JOIN customer b ON a.c_nation = b.c_nation"


@pytest.mark.parametrize("bad", [0, -1, 10**6 + 1, 1.5, True, "2", (1, 2, 3), (1, 0), None])
def test_max_per_key_is_checked_before_anything_is_read(bad: Any) -> None:
    session = _session()
    try:
        if bad is None:  # not given: the join pairs rows of different people, refused
            with pytest.raises(UnsupportedQueryError, match="max_per_key"):
                session.evaluate_sql(TRUNCATED_SQL, epsilon=1)
        else:
            with pytest.raises(InvalidParameterError) as caught:
                session.evaluate_sql(TRUNCATED_SQL, epsilon=1, max_per_key=bad)
            assert caught.value.parameter == "max_per_key"
            with pytest.raises(InvalidParameterError):
                session.query("orders").join("lines", on=("o_total", "l_qty"), max_per_key=bad)
        assert session.spent == dp.PureDP(0)
    finally:
        session.close()


def test_truncated_join_refusals_charge_nothing() -> None:
    session = _session(max_rows=None)
    try:
        truncated = session.query("orders").join("lines", on=("o_total", "l_qty"), max_per_key=2)
        for build in (
            lambda: truncated.agg(count()),  # no max_rows: the rows each person brings
            lambda: (
                truncated.bound(max_rows=2).join("nation", on=("o_total", "n_key")).agg(count())
            ),
            lambda: truncated.per_unit("o_cust", n="count").bound(max_rows=2).agg(count()),
        ):
            with pytest.raises(UnsupportedQueryError):
                session.evaluate(build(), epsilon=1)
        with pytest.raises(InvalidParameterError, match="JOIN"):
            session.evaluate_sql("SELECT COUNT(*) FROM orders", epsilon=1, max_per_key=2)
        assert session.spent == dp.PureDP(0)
    finally:
        session.close()


@pytest.mark.parametrize(
    ("budget", "per_row"),
    [
        ({"epsilon": 1}, dp.PureDP(Fraction(1, 16))),
        ({"rho": Fraction(1, 2)}, dp.ZCDP(Fraction(1, 512))),
    ],
)
def test_a_truncated_join_is_calibrated_for_its_stability(budget: Any, per_row: Any) -> None:
    """max_rows 2, max_per_key (1, 3): one person changes at most 2·2·(1+3) = 16 joined rows.
    Each row is calibrated for budget/16 (ρ/16²) and the ledger is charged the group loss,
    exactly the budget: a planner that forgot the stability would charge 16 times too little."""
    session = _session(max_rows=2, budget=dp.PureDP(10) if "epsilon" in budget else dp.ZCDP(10))
    try:
        query = session.sql(TRUNCATED_SQL, max_per_key=(1, 3))
        measurement = session.compile(query, **budget)
        assert session._stability(query) == 16
        assert measurement.split["n"] == per_row
        expected = dp.PureDP(1) if "epsilon" in budget else dp.ZCDP(Fraction(1, 2))
        assert measurement.map(1) == expected
        assert "16 rows" in measurement.explain()
        session.evaluate(query, **budget)
        assert session.spent == expected
    finally:
        session.close()


def test_an_approx_budget_is_never_exceeded_by_a_truncated_join() -> None:
    session = _session(max_rows=3, budget=dp.ApproxDP(10, Fraction(1, 10**5)))
    try:
        query = session.sql(TRUNCATED_SQL, max_per_key=2)
        for mechanism in ("laplace", "gaussian"):
            budget = dp.ApproxDP(1, Fraction(1, 10**6))
            measurement = session.compile(query, loss=budget, mechanism=mechanism)
            assert measurement.map(1) <= budget
            assert measurement.map(1).epsilon > Fraction(1, 2)  # not shrunk needlessly
    finally:
        session.close()


def test_a_link_join_ignores_max_per_key() -> None:
    """max_per_key only matters where rows of different people pair up: a join along a
    declared link stays unit-local (stability 1, bounded per person after the join)."""
    session = _session()
    try:
        query = session.sql(
            "SELECT COUNT(*) FROM orders JOIN lines ON o_id = l_order", max_per_key=1
        )
        assert session._stability(query) == 1
        assert session.compile(query, epsilon=1).map(1) == dp.PureDP(1)
    finally:
        session.close()


def test_counting_people_after_a_truncated_join_is_refused() -> None:
    """Its rows pair different people's rows: COUNT(DISTINCT unit) would count joined rows
    (the review's silently wrong answer). Refused in SQL and the builder; nothing charged."""
    session = _session(max_rows=2)
    try:
        with pytest.raises(UnsupportedQueryError, match="truncated join"):
            session.evaluate_sql(
                "SELECT COUNT(DISTINCT c_id) FROM customer a JOIN customer b "
                "ON a.c_nation = b.c_nation",
                max_per_key=2,
                epsilon=1,
            )
        query = session.query("orders").join("lines", on=("o_total", "l_qty"), max_per_key=2)
        with pytest.raises(UnsupportedQueryError, match="truncated join"):
            session.evaluate(query.agg(dp.analytics.count_distinct_units()), epsilon=1)
        assert session.spent == dp.PureDP(0)
        text = session.explain(query.agg(count()), epsilon=1)
        assert "query budget" not in text and "one joined row" in text
    finally:
        session.close()
