"""Registered table metadata (issue 25): the checks of :mod:`dpkit.analytics._metadata`, the
TOML file, and a Session's SQL reading the registered bounds and key sets."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.analytics._metadata import (
    TableMetadata,
    check_column_bounds,
    check_column_keys,
    read_metadata,
    registered_for,
)
from dpkit.errors import InvalidParameterError, UnsupportedQueryError
from dpkit.ledger import Ledger


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user": [1, 1, 2, 3, 4, 5],
            "dept": ["a", "b", "a", "a", "b", "a"],
            "wage": [100.0, 200.0, 2900.0, 50.0, 700.0, 1200.0],
        }
    )


def _session(frame: pd.DataFrame, **options: object) -> Session:
    return Session(frame, privacy_unit="user", budget=dp.PureDP(10), max_rows=2, **options)  # type: ignore[arg-type]


# ------------------------------------------------------------------ checks
def test_bounds_are_checked() -> None:
    assert check_column_bounds({"wage": [0, 3000]}) == {"wage": (0, 3000)}
    for bad in (
        {"wage": (3000, 0)},
        {"wage": (0,)},
        {"wage": "0,3000"},
        {"wage": (0, float("inf"))},
    ):
        with pytest.raises(InvalidParameterError, match="wage"):
            check_column_bounds(bad)
    with pytest.raises(InvalidParameterError):
        check_column_bounds([("wage", (0, 1))])


def test_keys_are_checked() -> None:
    assert check_column_keys({"dept": ["a", "b"]}) == {"dept": ("a", "b")}
    for bad in ({"dept": []}, {"dept": "ab"}, {"dept": ["a", "a"]}, {"dept": ["a", None]}):
        with pytest.raises(InvalidParameterError):
            check_column_keys(bad)


def test_registered_for_a_column_as_a_query_names_it() -> None:
    registered = {"wage": 1, "orders.price": 2, "a.x": 3, "b.x": 4}
    assert registered_for(registered, "wage") == 1
    assert registered_for(registered, "o.wage") == 1  # through an alias
    assert registered_for(registered, "price") == 2  # bare: the one table.column
    assert registered_for(registered, "o.price") == 2
    assert registered_for(registered, "x") is None  # two tables: ambiguous
    assert registered_for(registered, "a.x") == 3
    assert registered_for(registered, "other") is None


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "meta.toml"
    path.write_text(
        'max_rows = 5\nmax_groups = 2\n\n[columns.wage]\nkind = "int"\nbounds = [0, 3000]\n\n'
        '[columns.dept]\nkind = "text"\nkeys = ["a", "b"]\n'
    )
    meta = read_metadata(path)
    assert meta == TableMetadata(
        schema={"wage": "numeric", "dept": "text"},
        bounds={"wage": (0, 3000)},
        keys={"dept": ("a", "b")},
        max_rows=5,
        max_groups=2,
        integers=frozenset({"wage"}),
    )
    assert meta.options()["bounds"] == {"wage": (0, 3000)}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("max_rows = 0\n", "max_rows"),
        ("maxrows = 3\n", "maxrows"),
        ("[columns.wage]\nbound = [0, 1]\n", "bound"),
        ('[columns.wage]\nkind = "money"\n', "kind"),
        ("[columns.wage]\nbounds = [5, 1]\n", "wage"),
        ("[columns.wage\n", "TOML"),
    ],
)
def test_toml_file_refusals(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "meta.toml"
    path.write_text(text)
    with pytest.raises(InvalidParameterError, match=named):
        read_metadata(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="readable"):
        read_metadata(tmp_path / "nope.toml")


# ------------------------------------------------------------------ the Session
def test_sql_aggregate_uses_registered_bounds(frame: pd.DataFrame) -> None:
    session = _session(frame, bounds={"wage": (0, 3000)})
    query = session.sql("SELECT AVG(wage), SUM(wage), QUANTILE(wage, 0.9)")
    shown = session.explain(query, epsilon=1)
    assert "mean(wage, [0, 3000])" in shown
    assert "sum(wage, [0, 3000])" in shown
    release = session.evaluate_sql("SELECT AVG(wage), SUM(wage)", epsilon=1)
    assert list(release.table.columns[:1]) == ["mean_wage"]


def test_inline_bounds_win(frame: pd.DataFrame) -> None:
    session = _session(frame, bounds={"wage": (0, 3000)})
    shown = session.explain(session.sql("SELECT AVG(wage, 0, 10000), SUM(wage, 0, 50)"), epsilon=1)
    assert "mean(wage, [0, 10000])" in shown
    assert "sum(wage, [0, 50])" in shown


def test_no_bounds_is_refused_before_any_reservation(frame: pd.DataFrame) -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("pay", dp.PureDP(1), privacy_unit="user")
    session = Session(frame, "user", ledger=ledger, dataset="pay", max_rows=2)
    with pytest.raises(InvalidParameterError) as caught:
        session.evaluate_sql("SELECT COUNT(*), AVG(wage)", epsilon=0.5)
    error = caught.value
    assert error.parameter == "bounds"
    assert error.value == "AVG(wage)"
    assert "'wage'" in error.allowed
    assert error.hint is not None and "bounds={'wage': (lower, upper)}" in error.hint
    assert session.spent == dp.PureDP(0)
    assert [e.kind for e in ledger.history("pay")] == ["create"]
    assert ledger.pending() == []
    assert ledger.spent("pay") == dp.PureDP(0)


def test_other_column_bounds_do_not_apply(frame: pd.DataFrame) -> None:
    session = _session(frame.assign(bonus=1.0), bounds={"bonus": (0, 10)})
    with pytest.raises(InvalidParameterError, match="'wage'"):
        session.sql("SELECT SUM(wage)")


def test_an_expression_declares_its_bounds(frame: pd.DataFrame) -> None:
    session = _session(frame, bounds={"wage": (0, 3000)})
    with pytest.raises(UnsupportedQueryError, match="expression"):
        session.sql("SELECT SUM(wage * 2)")


def test_registered_keys_are_the_groups(frame: pd.DataFrame) -> None:
    session = _session(frame, keys={"dept": ["a", "b", "c"]})
    # pure DP: no δ for private group selection, the registered keys are public
    release = session.evaluate_sql("SELECT dept, COUNT(*) GROUP BY dept", epsilon=1)
    assert list(release.table["dept"]) == ["a", "b", "c"]
    # the query's own keys win
    release = session.evaluate_sql(
        "SELECT dept, COUNT(*) GROUP BY dept", keys={"dept": ["b"]}, epsilon=1
    )
    assert list(release.table["dept"]) == ["b"]


def test_registered_names_are_columns(frame: pd.DataFrame) -> None:
    with pytest.raises(InvalidParameterError, match="wages"):
        _session(frame, bounds={"wages": (0, 1)})
    with pytest.raises(InvalidParameterError, match="department"):
        _session(frame, keys={"department": ["a"]})


# ------------------------------------------------------------------ the Python builder
def test_builder_aggregates_use_registered_bounds(frame: pd.DataFrame) -> None:
    from dpkit.analytics import mean, median, quantile, std, sum, variance

    session = _session(frame, bounds={"wage": (0, 3000)})
    query = session.query().agg(
        mean("wage"), sum("wage"), variance("wage"), std("wage"), quantile("wage", 0.9)
    )
    assert "mean(wage, registered bounds) as mean_wage" in query.render()
    shown = session.explain(query, epsilon=1)
    for text in ("mean(wage, [0, 3000])", "sum(wage, [0, 3000])", "q90_wage"):
        assert text in shown
    assert "variance(wage, [0, 3000])" in shown and "std(wage, [0, 3000])" in shown
    # the same as SQL's AVG(wage)
    sql = session.explain(session.sql("SELECT AVG(wage)"), epsilon=1)
    assert sql == session.explain(session.query().agg(mean("wage")), epsilon=1)
    release = session.evaluate(session.query().agg(median("wage")), epsilon=1)
    assert list(release.table.columns[:1]) == ["median_wage"]
    assert 0 <= release.table["median_wage"][0] <= 3000


def test_builder_bounds_win(frame: pd.DataFrame) -> None:
    from dpkit.analytics import mean

    session = _session(frame, bounds={"wage": (0, 3000)})
    shown = session.explain(session.query().agg(mean("wage", (0, 50))), epsilon=1)
    assert "mean(wage, [0, 50])" in shown


def test_builder_without_bounds_is_refused_before_any_reservation(frame: pd.DataFrame) -> None:
    from dpkit.analytics import count, mean

    ledger = Ledger.open(":memory:")
    ledger.create_budget("pay", dp.PureDP(1), privacy_unit="user")
    session = Session(frame, "user", ledger=ledger, dataset="pay", max_rows=2)
    query = session.query().agg(count(), mean("wage"))
    for run in (
        lambda: session.evaluate(query, epsilon=0.5),
        lambda: session.explain(query, epsilon=0.5),
    ):
        with pytest.raises(InvalidParameterError) as caught:
            run()
        error = caught.value
        assert error.parameter == "bounds"
        assert error.value == "mean('wage')"
        assert "'wage'" in error.allowed and "mean('wage', (lower, upper))" in error.allowed
        assert error.hint is not None and "bounds={'wage': (lower, upper)}" in error.hint
    assert session.spent == dp.PureDP(0)
    assert [e.kind for e in ledger.history("pay")] == ["create"]
    assert ledger.pending() == []


def test_builder_checks_other_arguments_when_written() -> None:
    from dpkit.analytics import mean, quantile

    with pytest.raises(InvalidParameterError, match="q"):
        quantile("wage", 2)
    with pytest.raises(InvalidParameterError, match="weight"):
        mean("wage", weight=0)
    with pytest.raises(InvalidParameterError, match="method"):
        quantile("wage", 0.5, method="guess")


def test_builder_quantile_candidates_checked_against_registered_bounds(
    frame: pd.DataFrame,
) -> None:
    from dpkit.analytics import quantile

    session = _session(frame, bounds={"wage": (0, 3000)})
    inside = session.query().agg(quantile("wage", 0.5, candidates=[0, 1000, 2000, 3000]))
    assert "median_wage" in session.explain(inside, epsilon=1)
    outside = session.query().agg(quantile("wage", 0.5, candidates=[0, 5000]))
    with pytest.raises(InvalidParameterError, match="candidates"):
        session.explain(outside, epsilon=1)


def test_builder_group_by_uses_registered_keys(frame: pd.DataFrame) -> None:
    from dpkit.analytics import count, mean

    session = _session(frame, keys={"dept": ["a", "b", "c"]}, bounds={"wage": (0, 3000)})
    # pure DP: without the registered (public) keys, private group selection needs a δ
    release = session.evaluate(
        session.query().group_by("dept").agg(count(), mean("wage")), epsilon=1
    )
    assert list(release.table["dept"]) == ["a", "b", "c"]
    # keys given in the query win
    release = session.evaluate(session.query().group_by("dept", keys=["b"]).agg(count()), epsilon=1)
    assert list(release.table["dept"]) == ["b"]


def test_builder_group_by_without_registered_keys_is_private(frame: pd.DataFrame) -> None:
    from dpkit.analytics import count

    session = _session(frame.assign(site="x"), keys={"dept": ["a", "b"]})
    # only some grouping columns registered: the groups are chosen privately, as in SQL
    shown = session.explain(
        session.query().group_by("dept", "site").agg(count()), epsilon=1, delta=1e-6
    )
    assert "private keys" in shown or "selection" in shown


def test_builder_refusal_names_the_call_as_written(frame: pd.DataFrame) -> None:
    from dpkit.analytics import median, quantile

    session = _session(frame)
    for agg, call in (
        (median("wage"), "median('wage'"),
        (quantile("wage", 0.9), "quantile('wage', 0.9"),
    ):
        assert (
            session.query()
            .agg(agg)
            .render()
            .endswith(f"{call.replace(repr('wage'), 'wage')}, registered bounds) as {agg.name})")
        )
        with pytest.raises(InvalidParameterError) as caught:
            session.explain(session.query().agg(agg), epsilon=1)
        assert caught.value.value == call + ")"
        assert f"{call}, (lower, upper))" in caught.value.allowed


def test_builder_over_several_tables_uses_registered_metadata() -> None:
    from dpkit.analytics import count, mean

    customer = pd.DataFrame({"c_id": [1, 2, 3], "c_seg": ["x", "y", "x"]})
    orders = pd.DataFrame({"o_id": [10, 11, 12], "o_cust": [1, 2, 3], "o_total": [5.0, 6, 7]})
    session = Session(
        {"customer": customer, "orders": orders},
        privacy_unit="customer.c_id",
        links={"orders.o_cust": "customer.c_id"},
        budget=dp.PureDP(10),
        engine="pandas",
        max_rows=2,
        bounds={"orders.o_total": (0, 10)},
        keys={"c_seg": ["x", "y"]},
    )
    query = (
        session.query("orders")
        .join("customer", on=("o_cust", "c_id"))
        .group_by("c_seg")
        .agg(count(), mean("o_total"))
    )
    shown = session.explain(query, epsilon=1)
    assert "public 2 keys" in shown and "mean(o_total, [0, 10])" in shown, shown
    release = session.evaluate(query, epsilon=1)
    assert list(release.table["c_seg"]) == ["x", "y"]
