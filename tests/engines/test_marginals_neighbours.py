"""Adversarial review (rev) of Session marginals(...) / ranges(...) on every engine.

With ONE compiled query (one salt), the bounded plan runs on a table and on each neighbour (one
unit removed): the exact histogram must move by at most k in L1. The tables hold a heavy unit
with rows in many cells (and rows outside the domain), NULL unit ids, NaN / ±inf / -0.0 values,
values that equal a declared value only after a cast (1 vs 1.0, big ints next to 2^53) and text
that differs by case or a space.

FINDING (fixed): a marginal over a datetime64 column (dates are an allowed marginal kind) raised
AttributeError in the pandas engine's IS IN, after the ledger reservation: the budget was spent
and nothing released. Both engines now release it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

import dpkit as dp
from dpkit.analytics import Session, marginals, ranges
from dpkit.analytics._engines import Engine
from dpkit.analytics._planner import _rows_by_group
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner.families._marginals import plan_marginals, plan_ranges


def _table() -> pd.DataFrame:
    rows: list[tuple[Any, ...]] = [
        (0, "a", 1.0, 0.5),
        (1, "b", 2.0, 1.0),
        (1, "a ", 1.0, 2.0),  # "a " is not "a"
        (2, "A", np.nan, np.nan),
        (3, "b", np.inf, -np.inf),
        (4, "a", -0.0, -0.0),
        (None, "a", 1.0, 1.0),  # NULL unit: dropped
        (None, "b", 2.0, 2.0),
    ]
    # the heavy unit: 3 rows in each of 6 cells, plus rows outside the domain
    rows += [(9, c, float(v), float(v)) for c in "ab" for v in (0, 1, 2) for _ in range(3)]
    rows += [(9, "zzz", 7.0, 9.0)] * 4
    return pd.DataFrame(rows, columns=["uid", "c", "v", "w"])


CASES = [
    ("m", marginals([("c", "v")], {"c": ["a", "b"], "v": [0, 1, 2]}, "m")),
    ("m", marginals("all_1way", {"c": ["a", "b"], "v": [0.0, 1.0, 2.0]}, "m")),
    ("r", ranges("w", [0, 0.5, 1, 2], kind="all_range", name="r")),
]


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize(("kind", "agg"), CASES)
def test_histogram_moves_by_at_most_k(
    make: Callable[..., Engine], engine_name: str, kind: str, agg: Any, k: int
) -> None:
    df = _table()
    session = Session(df, privacy_unit="uid", budget=dp.ZCDP(1), max_rows=k)
    query = session.query().agg(agg)
    compiled = session.compile(query, rho=Fraction(1, 2))
    validated: Any = query.plan.aggregations[0]  # type: ignore[union-attr]
    share = Share("zcdp", Fraction(1, 2))
    plan: Any = (plan_marginals if kind == "m" else plan_ranges)(validated, share, k)
    bounded = compiled.plans[1]

    def hist(table: pd.DataFrame) -> np.ndarray:
        return np.asarray(plan.histogram(_rows_by_group(make(table).run(bounded), bounded)[0]))

    x = hist(df)
    assert x.sum() <= k * df["uid"].nunique()
    changes = [
        int(np.abs(x - hist(df[df["uid"] != u].reset_index(drop=True))).sum())
        for u in df["uid"].dropna().unique()
    ]
    assert max(changes) <= k
    assert max(changes) == k  # the heavy unit uses its whole bound


def test_big_ints_next_to_2_53(make: Callable[..., Engine], engine_name: str) -> None:
    df = pd.DataFrame({"uid": [1, 2, 3], "v": np.array([2**53, 2**53 + 1, 5], dtype=np.int64)})
    session = Session(df, privacy_unit="uid", budget=dp.ZCDP(1), max_rows=1)
    agg = marginals([("v",)], {"v": [2**53, 2**53 + 1]}, "m")
    query = session.query().agg(agg)
    compiled = session.compile(query, rho=Fraction(1, 2))
    plan = plan_marginals(query.plan.aggregations[0], Share("zcdp", Fraction(1, 2)), 1)  # type: ignore[union-attr,arg-type]
    bounded = compiled.plans[1]
    x = plan.histogram(_rows_by_group(make(df).run(bounded), bounded)[0])
    assert x.tolist() == [1, 1]


def _temporal_table() -> pd.DataFrame:
    days = pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-02"])
    return pd.DataFrame({"uid": [1, 2, 3], "d": days})


@pytest.mark.parametrize(
    "engine",
    [
        "pandas",
        "duckdb",
    ],
)
def test_temporal_marginal_releases(engine: str) -> None:
    session = Session(
        _temporal_table(), privacy_unit="uid", budget=dp.ZCDP(1), max_rows=1, engine=engine
    )
    agg = marginals([("d",)], {"d": ["2024-01-01", dt.date(2024, 1, 2)]}, "m")
    release = session.evaluate(session.query().agg(agg), rho=0.25)
    assert len(release.tables["m"]) == 2
