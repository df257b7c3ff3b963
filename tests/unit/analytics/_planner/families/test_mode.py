"""The mode family (planner/families/_mode.py): its spec, every front end, and its privacy
calibration (an exact check of the constant and a neighbour check that fail on a mutant)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.analytics._bounding import Contribution
from dpkit.analytics._families import family_of
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner._registry import compiler_for
from dpkit.analytics._planner.families import _mode as mode_module
from dpkit.analytics._planner.families._mode import Mode, mode, mode_edges, mode_measurement
from dpkit.analytics._querytext import parse_query
from dpkit.errors import InvalidParameterError


def _table(n: int = 600) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    ratings = rng.choice([1.0, 2.0, 3.0, 4.0], n, p=[0.1, 0.2, 0.6, 0.1])
    dept = np.where(np.arange(n) % 2 == 0, "a", "b")
    ratings[dept == "b"] = 4.0  # b: every rating is 4
    return pd.DataFrame({"u": np.arange(n), "dept": dept, "rating": ratings})


# ----------------------------------------------------------------------------------- the spec
def test_the_spec_declares_builder_sql_json_columns_and_render() -> None:
    agg = mode("rating", [3, 1, 2])
    family = family_of(agg)
    assert family is not None and family.kind is Mode
    assert compiler_for(agg) is mode_module.compile_mode
    (form,) = family.forms
    assert (form.builder, form.sql, form.op) == (mode, ("MODE",), "mode")
    assert form.sql_signature() == "MODE(col, values...)"
    assert family.columns(agg) == ("mode_rating",) and not family.table
    assert family.render(agg) == "mode(rating, 3 values in [1, 3]) as mode_rating"
    assert family.cells is not None and family.cells(agg) == 6


def test_the_builder_checks_the_declared_values() -> None:
    assert mode("x", [2, 1]).values == (Fraction(1), Fraction(2))
    for bad in ([1], [1, 1], "ab", [1, math.inf], list(range(300))):
        with pytest.raises(InvalidParameterError):
            mode("x", bad)  # type: ignore[arg-type]


def test_each_candidate_has_a_bin_of_its_own() -> None:
    edges, bins = mode_edges((Fraction(1), Fraction(2)))
    assert bins == (0, 2)
    assert edges[0] == 1.0 and edges[1] == math.nextafter(1.0, math.inf) and edges[2] == 2.0
    assert all(b > a for a, b in itertools.pairwise(edges))


# ------------------------------------------------------------------------------ the front ends
def test_every_front_end_accepts_it() -> None:
    import dpkit.analytics
    from dpkit.service._core import _parse_model
    from dpkit.service._registry import DatasetRecord

    expected = mode("rating", [1, 2, 3], "m")
    assert dpkit.analytics.mode is mode
    parsed = parse_query("SELECT dept, MODE(rating, 1, 2, 3) AS m GROUP BY dept", "u")
    assert parsed.aggregations == (expected,)
    record = DatasetRecord("p", "p.csv", "u", {}, {}, "", 0.0, "")
    model = {"aggregations": [{"op": "mode", "column": "rating", "values": [1, 2, 3], "name": "m"}]}
    assert _parse_model(model, record).aggregations == (expected,)


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_it_releases_the_most_frequent_value_on_both_engines(engine: str) -> None:
    session = Session(_table(), privacy_unit="u", budget=dp.PureDP(10), max_rows=1, engine=engine)
    q = (
        session.query()
        .group_by("dept", keys=["a", "b"])
        .agg(mode("rating", [1, 2, 3, 4]), dp.analytics.count())
    )
    release = session.evaluate(q, epsilon=4)
    assert release.table["mode_rating"].tolist() == [3.0, 4.0]
    assert release.accuracy["mode_rating"].mechanism == "exponential"
    assert release.loss == dp.PureDP(4)
    entries = [e for e in session.ledger.history(session.dataset) if e.kind == "reserve"]
    assert "exponential" in entries[-1].mechanism


# ------------------------------------------------------------------------------------- privacy
@pytest.mark.parametrize(
    ("contrib", "share"),
    [
        (Contribution(1, 1, 1), Share("pure", Fraction(1, 2))),
        (Contribution(6, 3, 2), Share("pure", Fraction(3))),
        (Contribution(10, 4, 3), Share("zcdp", Fraction(1, 8))),
    ],
)
def test_the_calibration_constant_is_exactly_share_over_rows_l1(
    contrib: Contribution, share: Share
) -> None:
    """The docstring's guarantee: coefficient ε/Δ with ε = share.epsilon() and Δ = rows_l1 (the
    most rows one unit has in all groups), monotone. Doubling or halving Δ fails here."""
    measurement = mode_measurement(share, contrib)
    epsilon = share.epsilon()
    assert measurement.info.epsilon == epsilon
    assert measurement.info.sensitivity == contrib.rows_l1
    assert measurement.info.monotonic is True
    assert measurement.info.coefficient == epsilon / contrib.rows_l1
    context = _Ctx(share, contrib)  # the compiler reads share, contrib and add_plan only
    _, uses, _ = mode_module.compile_mode(mode("x", [1, 2]), context)  # type: ignore[arg-type]
    assert [(u.mechanism, u.loss) for u in uses] == [("exponential", dp.PureDP(epsilon))]


class _Ctx:
    def __init__(self, share: Share, contrib: Contribution) -> None:
        self.share, self.contrib, self.extra_plans = share, contrib, []

    def add_plan(self, registry: object, bins: object = None) -> int:
        self.extra_plans.append((registry, bins))
        return len(self.extra_plans)


def test_neighbouring_tables_change_no_output_probability_by_more_than_e_to_the_epsilon() -> None:
    """Every neighbour of a small grouped table (one unit with up to rows_l1 rows added, spread
    over groups in every way the bounds allow): the product over groups of the exact output
    probabilities moves by at most e^ε. Halving the sensitivity fails here."""
    contrib = Contribution(rows_l1=2, rows_per_group=2, groups=2)
    epsilon = Fraction(1)
    measurement = mode_measurement(Share("pure", epsilon), contrib)
    pmf = measurement.info.output_pmf
    base = [np.array([5.0, 3.0, 0.0]), np.array([1.0, 1.0, 4.0])]
    worst = 0.0
    # a unit adds x_g rows to group g (x_1 + x_2 <= 2), all at one candidate or split
    additions = [
        (x1, c1, x2, c2)
        for x1 in range(3)
        for x2 in range(3 - x1)
        for c1 in range(3)
        for c2 in range(3)
    ]
    for x1, c1, x2, c2 in additions:
        after = [base[0].copy(), base[1].copy()]
        after[0][c1] += x1
        after[1][c2] += x2
        for r1 in range(3):
            for r2 in range(3):
                p = pmf(base[0])[r1] * pmf(base[1])[r2]
                q = pmf(after[0])[r1] * pmf(after[1])[r2]
                worst = max(worst, abs(math.log(q / p)))
    assert worst <= float(epsilon) + 1e-9
    assert worst > 0.5 * float(epsilon)  # the bound is nearly reached: not vacuous


def test_the_cli_answers_it(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from dpkit.cli.query import query_command
    from dpkit.ledger import BudgetMonitor, Ledger

    app = typer.Typer()
    app.command("query")(query_command)
    app.command("other")(lambda: None)  # keeps "query" a sub-command, as in the main app
    data = tmp_path / "ratings.csv"
    _table().to_csv(data, index=False)
    ledger = tmp_path / "ledger.sqlite"
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        opened.create_budget("ratings", dp.PureDP(10), privacy_unit="u")
    result = CliRunner().invoke(
        app,
        [
            "query",
            str(data),
            "SELECT dept, MODE(rating, 1, 2, 3, 4) AS top GROUP BY dept",
            "--keys",
            "dept=a,b",
            "--epsilon",
            "4",
            "--max-rows",
            "1",
            "--dataset",
            "ratings",
            "--schema",
            "rating=float",
        ],
        env={"COLUMNS": "160", "DPKIT_LEDGER": str(ledger)},
    )
    assert result.exit_code == 0, result.output
    assert "top" in result.output and "exponential mechanism over 4 declared values" in (
        " ".join(result.output.split())
    )


def test_builders_refuse_numbers_beyond_float64_before_converting() -> None:
    """10**400 raised a raw OverflowError from float() (a 503 in the service)."""
    from dpkit.analytics import histogram, mode
    from dpkit.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="values"):
        mode("r", [1, 10**400])
    with pytest.raises(InvalidParameterError, match=r"edges\[1\]"):
        histogram("r", [1, 10**400])


def test_a_mode_only_query_keeps_an_epsilon_delta_budget_pure() -> None:
    """mechanism="auto" compared Gaussian and Laplace noise with count sensitivities and gave a
    mode-only query a zCDP share, used as ε = √(2ρ): 0.22 of the ε = 1 asked (4.5x the noise)."""
    import pandas as pd

    import dpkit as dp
    from dpkit.analytics import Session, count, mode

    keys = list(range(50))
    frame = pd.DataFrame({"u": range(500), "g": [i % 50 for i in range(500)], "r": 1})
    session = Session(frame, "u", budget=dp.ApproxDP(10, 1e-3), max_rows=50)
    grouped = session.query().group_by("g", keys=keys).bound(max_groups=50, max_rows_per_group=1)
    only_mode = session.compile(grouped.agg(mode("r", [1, 2, 3])), epsilon=1, delta=1e-6)
    assert only_mode.map(1) == dp.PureDP(1)
    # with an aggregation that Gaussian noise serves, "auto" still compares the two
    both = session.compile(grouped.agg(mode("r", [1, 2, 3]), count()), epsilon=1, delta=1e-6)
    assert both.map(1) <= dp.ApproxDP(1, 1e-6)
