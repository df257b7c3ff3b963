"""Session marginals(...) / ranges(...): public validation before any data, explain(), edges."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

import dpkit as dp
from dpkit.analytics import Session, marginals, ranges
from dpkit.errors import DPError, InvalidParameterError, UnsupportedQueryError

DOMAINS = {"age": ["young", "old"], "sex": ["f", "m"], "n": [0, 1, 2]}


def _df(rows: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(3)  # test data only
    return pd.DataFrame(
        {
            "uid": rng.integers(0, 10, rows),
            "age": rng.choice(["young", "old"], rows),
            "sex": rng.choice(["f", "m"], rows),
            "n": rng.integers(0, 3, rows),
            "v": rng.integers(0, 8, rows).astype(float),
        }
    )


class _NoRead:
    """A stand-in engine run: any attempt to read data fails the test."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("data was read")


def _session(df: pd.DataFrame | None = None, **kw: Any) -> Session:
    session = Session(_df() if df is None else df, privacy_unit="uid", budget=dp.ZCDP(1), **kw)
    return session


# ----------------------------------------------------------------- builders (no schema)
@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda: marginals([("age", "zip")], DOMAINS), "cliques"),
        (lambda: marginals([("age", "age")], DOMAINS), "cliques"),
        (lambda: marginals([("age",), ("age",)], DOMAINS), "cliques"),
        (lambda: marginals([], DOMAINS), "cliques"),
        (lambda: marginals("all_9way", DOMAINS), "cliques"),
        (lambda: marginals("all_2way", {}), "domains"),
        (lambda: marginals("all_1way", {"age": []}), "domains"),
        (lambda: marginals("all_1way", {"age": ["a"]}), "domains"),
        (lambda: marginals("all_1way", {"age": ["a", "a"]}), "domains"),
        (lambda: marginals("all_1way", {"age": "ab"}), "domains"),
        (lambda: marginals("all_1way", {"age": [1.0, float("nan")]}), "domains"),
        (lambda: marginals("all_1way", {"age": [None, 1]}), "domains"),
        (lambda: ranges("v", [0, 1, 2], kind="median"), "kind"),
        (lambda: ranges("v", [0, 2, 1]), "domain"),
        (lambda: ranges("v", [0]), "domain"),
        (lambda: ranges("v", []), "domain"),
        (lambda: ranges("v", (5, 0, 1)), "domain"),
        (lambda: ranges("v", (0, 5, 0)), "domain"),
        (lambda: ranges("v", [True, False]), "domain"),
        (lambda: ranges("v", (0, 9, 1), kind="width"), "width"),
        (lambda: ranges("v", (0, 9, 1), kind="width", width=11), "width"),
        (lambda: ranges("v", (0, 9, 1), width=2), "width"),
    ],
)
def test_builders_refuse_bad_public_input(call: Any, parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.parameter == parameter
    assert info.value.allowed  # says what is allowed


def test_too_large_domains_are_refused_with_an_estimate() -> None:
    big = {f"c{i}": list(range(10)) for i in range(5)}  # 100,000 cells
    with pytest.raises(InvalidParameterError, match=r"100,000.*MB") as info:
        marginals("all_2way", big)
    assert info.value.parameter == "domains"
    with pytest.raises(InvalidParameterError, match=r"at most 2,048 cells.*MB"):
        ranges("v", (0, 5000, 1))
    with pytest.raises(InvalidParameterError, match=r"at most 2,048 cells"):
        ranges("v", list(range(3000)))


def test_all_kway_helpers_and_unused_columns() -> None:
    agg = marginals("all_2way", DOMAINS)
    assert agg.cliques == ((0, 1), (0, 2), (1, 2))
    agg = marginals([("sex",)], DOMAINS)  # only the columns a clique uses are grouped on
    assert agg.columns == ("sex",) and agg.cliques == ((0,),)
    r = ranges("v", (0, 10, 5), kind="width", width=2)
    assert r.domain == (0, 5, 10) and r.width == 2


# ----------------------------------------------------------------- against the schema
@pytest.mark.parametrize(
    ("agg", "parameter"),
    [
        (marginals("all_1way", {"zip": ["1", "2"]}), "domains"),  # unknown column
        (marginals("all_1way", {"age": [1, 2]}), "domains"),  # numbers for a text column
        (marginals("all_1way", {"n": ["a", "b"]}), "domains"),  # text for a numeric column
        (ranges("age", (0, 3, 1)), "column"),  # ranges need a numeric column
        (ranges("nope", (0, 3, 1)), "column"),
    ],
)
def test_schema_errors_come_before_any_data_or_charge(agg: Any, parameter: str) -> None:
    session = _session(max_rows=3)
    session.engine.run = _NoRead()  # type: ignore[method-assign]
    with pytest.raises(InvalidParameterError) as info:
        session.evaluate(session.query().agg(agg), rho=0.5)
    assert info.value.parameter == parameter
    assert session.spent == dp.ZCDP(0)


def test_grouped_queries_are_refused_before_data() -> None:
    session = _session(max_rows=3)
    session.engine.run = _NoRead()  # type: ignore[method-assign]
    query = session.query().group_by("sex", keys=["f", "m"]).agg(marginals("all_1way", DOMAINS))
    with pytest.raises(UnsupportedQueryError, match="without group_by"):
        session.evaluate(query, rho=0.5)
    assert session.spent == dp.ZCDP(0)


def test_explain_names_strategy_error_and_alternatives() -> None:
    session = _session(max_rows=3)
    text = session.explain(session.query().agg(marginals("all_2way", DOMAINS, "m")), rho=0.5)
    assert "strategy OPT_M" in text and "expected total squared error" in text
    assert "alternatives: " in text and "ResidualPlanner (exact lattice release)" in text
    assert "each marginal measured directly" in text
    assert "ResidualPlanner optimum" in text and "discrete_gaussian noise" in text
    text = session.explain(
        session.query().agg(ranges("v", (0, 7, 1), kind="prefix", name="r")), epsilon=1
    )
    assert "strategy" in text and "alternatives:" in text and "geometric noise" in text
    assert "identity(8)" in text


# ----------------------------------------------------------------- data edges
def _edge_tables() -> dict[str, pd.DataFrame]:
    base = _df()
    outside = base.assign(age="middle", v=100.0)
    empty = base.iloc[:0]
    nulls = base.assign(
        sex=[None if i % 2 else "f" for i in range(len(base))],
        v=[np.nan if i % 3 else 1.0 for i in range(len(base))],
    )
    heavy = pd.concat(
        [base, pd.DataFrame({"uid": [99] * 500, "age": "old", "sex": "m", "n": 2, "v": 3.0})],
        ignore_index=True,
    )
    return {"outside": outside, "empty": empty, "nulls": nulls, "heavy": heavy}


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
@pytest.mark.parametrize("case", ["outside", "empty", "nulls", "heavy"])
def test_edges_release_without_data_dependent_errors(engine: str, case: str) -> None:
    df = _edge_tables()[case]
    session = Session(df, privacy_unit="uid", budget=dp.PureDP(4), max_rows=2, engine=engine)
    query = session.query().agg(
        marginals("all_2way", DOMAINS, "m"), ranges("v", (0, 7, 1), kind="all_range", name="r")
    )
    release = session.evaluate(query, epsilon=2)
    m, r = release.tables["m"], release.tables["r"]
    assert len(m) == 4 + 6 + 6 and len(r) == 8 * 9 // 2
    for table in (m, r):
        assert np.isfinite(table[["value", "std_error", "low", "high"]].to_numpy()).all()
    assert "raw estimates" in release.accuracy["m"].note


def test_histogram_counts_only_declared_values_and_bounds_units() -> None:
    from dpkit.analytics._planner import _rows_by_group
    from dpkit.analytics._planner._noise import Share
    from dpkit.analytics._planner.families._marginals import plan_marginals

    df = _edge_tables()["heavy"]
    session = Session(df, privacy_unit="uid", budget=dp.ZCDP(1), max_rows=2)
    query = session.query().agg(marginals("all_2way", DOMAINS, "m"))
    compiled = session.compile(query, rho=1)
    agg = query.plan.aggregations[0]  # type: ignore[union-attr]
    plan = plan_marginals(agg, Share("zcdp", compiled.loss.rho), 2)  # type: ignore[union-attr]
    x = plan.histogram(_rows_by_group(session.engine.run(compiled.plans[1]), compiled.plans[1])[0])
    kept = df.groupby("uid").size().clip(upper=2).sum()
    assert x.sum() == kept  # every row is in the domain; unit 99 keeps 2 of its 500 rows


def test_dperror_root() -> None:
    with pytest.raises(DPError):
        marginals([("nope",)], DOMAINS)


def test_display_clips_and_rounds_counts() -> None:
    session = _session(max_rows=1)
    query = session.query().agg(marginals("all_1way", DOMAINS, "m"))
    release = session.evaluate(query, rho=Fraction(1, 1000))  # noisy: some cells go negative
    shown = release.display(query)["m"]
    for name in ("value", "low", "high"):
        assert (shown[name] >= 0).all() and (shown[name] == shown[name].round()).all()
    assert release.tables["m"]["low"].min() < 0  # the raw table is unchanged
