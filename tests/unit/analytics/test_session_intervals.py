"""Sums over a declared union of intervals: the neighbour set, the mechanism choice (geometric,
staircase or ladder), its report in explain() / the release / the ledger, and a privacy audit."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Query, Session, count
from dpkit.analytics import sum as dp_sum
from dpkit.analytics._engines import PandasEngine
from dpkit.analytics._engines._base import project_to_ranges
from dpkit.analytics._planner import compile_query
from dpkit.analytics._valueset import (
    MAX_FOLD,
    choose_noise,
    fold,
    grid_ranges,
    magnitudes,
    merge_ranges,
)
from dpkit.errors import InvalidParameterError
from dpkit.ledger import Ledger
from dpkit.mechanisms._ladder_mechanism import LadderLattice, check_ladder_privacy
from dpkit.testing import audit_samples

PAY = [(2_500, 3_000), (16_000, 17_500)]  # a polarised pay scale: two grades, nobody between


def payroll(n: int = 600, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    high = rng.random(n) < 0.2
    salary = np.where(high, rng.uniform(16_000, 17_500, n), rng.uniform(2_500, 3_000, n))
    return pd.DataFrame(
        {"person": np.arange(n), "dept": rng.choice(["a", "b"], n), "salary": salary}
    )


def _set(ranges: tuple[tuple[int, int], ...]) -> set[int]:
    return {x for lo, hi in ranges for x in range(lo, hi + 1)}


# ---------------------------------------------------------------------------------- the API
def test_values_api_and_its_errors() -> None:
    s = dp_sum("salary", values=[(12_000, 15_000), 0.5, (0, 5_000), (4_000, 6_000)])
    assert s.values == ((0, 6_000), (12_000, 15_000))  # 0.5 merged into [0, 6000]
    assert s.bounds == (0, 15_000)
    assert "values [0, 6000] ∪ [12000, 15000]" in Query().bound(max_rows=1).agg(s).render()
    for bad in ([], [(5, 1)], "0-5", [(0, 0)], [(0, float("nan"))], [(1, 2, 3)]):
        with pytest.raises(InvalidParameterError):
            dp_sum("salary", values=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="not given together"):
        dp_sum("salary", (0, 1), values=[(0, 1)])
    # without bounds nor values: the session's registered bounds of the column, looked up when
    # it plans the query (refused there when none: tests/unit/analytics/test_metadata.py)
    assert "sum(salary, registered bounds)" in Query().agg(dp_sum("salary")).render()


# ---------------------------------------------------------------------------------- neighbour set
def test_sumsets_and_magnitudes_match_brute_force() -> None:
    units = ((-3, -2), (0, 1), (7, 7), (12, 14))
    with_zero = merge_ranges([*units, (0, 0)])
    points = _set(with_zero)
    for c in (1, 2, 3):
        expected = {sum(t) for t in itertools.product(sorted(points), repeat=c)}
        got = fold(with_zero, c)
        assert got is not None and _set(got) == expected
        assert _set(magnitudes(got)) == {abs(x) for x in expected}
    assert fold(((0, 0), (10, 10), (1000, 1000)), 40, limit=50) is None  # too many ranges
    assert grid_ranges([(Fraction(3, 10), Fraction(7, 10))], -7) == ((38, 90),)  # outward


def test_engine_values_land_in_the_declared_set() -> None:
    """Every value the engines can produce lies in the widened set (the neighbour set's basis)."""
    ranges = grid_ranges([(Fraction(-2), Fraction(-1)), (Fraction(1, 3), Fraction(2)), (5, 5)], -4)
    rng = np.random.default_rng(1)
    raw = np.concatenate([rng.integers(-200, 200, 2000), [-24, 32, 33, 56]])
    out = project_to_ranges(raw, ranges)
    allowed = _set(ranges)
    assert set(out.tolist()) <= allowed
    # nearest point, ties to the lower one
    for x, y in zip(raw.tolist(), out.tolist(), strict=True):
        best = min(allowed, key=lambda a: (abs(a - x), a))
        assert y == best


# ---------------------------------------------------------------------------------- the choice
@pytest.mark.parametrize("epsilon", [2, 3, 4])
def test_polarised_pay_scale_chooses_the_ladder(epsilon: int) -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("table", dp.PureDP(20), privacy_unit="person")
    session = Session(payroll(), "person", dp.PureDP(20), ledger=ledger, max_rows=1)
    query = session.query().agg(dp_sum("salary", values=PAY))
    compiled = session.compile(query, epsilon=epsilon)
    assert "ladder" in compiled.mechanisms
    assert "ladder noise" in compiled.explain()
    release = session.evaluate(query, epsilon=epsilon)
    accuracy = release.accuracy["sum_salary"]
    assert accuracy.mechanism == "ladder"
    assert "vs staircase" in accuracy.note and "geometric" in accuracy.note
    assert release.loss == dp.PureDP(epsilon)
    reserved = [e for e in ledger.history() if e.kind == "reserve"]
    assert "ladder" in reserved[-1].mechanism
    # the ladder's E|noise| beats the staircase's and Laplace's
    units = grid_ranges([(Fraction(lo), Fraction(hi)) for lo, hi in PAY], -8)
    choice = choose_noise(units, Fraction(epsilon), 1, 1, 1)
    assert choice.chosen == "ladder"
    assert choice.expected_abs["ladder"] < choice.expected_abs["staircase"]
    assert choice.expected_abs["ladder"] < choice.expected_abs["geometric"]


@pytest.mark.parametrize("epsilon", [0.5, 1, 3, 8])
@pytest.mark.parametrize("max_rows", [1, 3])
def test_an_interval_from_zero_never_chooses_the_ladder(epsilon: float, max_rows: int) -> None:
    """V = [0, Δ]: the ladder is the staircase, so geometric or staircase is chosen."""
    session = Session(payroll(), "person", dp.PureDP(20), max_rows=max_rows)
    compiled = session.compile(
        session.query().agg(dp_sum("salary", values=[(0, 17_500)])), epsilon=epsilon
    )
    assert compiled.mechanisms in (("staircase",), ("geometric",))
    assert "ladder noise" not in compiled.explain()


def test_many_rows_use_the_k_fold_sumset_and_are_private() -> None:
    """With max_rows = k a unit adds a sum of k values: the ladder is built for that sumset, and
    its exact verifier proves the level moves by at most one for every such shift."""
    units = grid_ranges([(Fraction(0), Fraction(1)), (Fraction(1000), Fraction(1001))], -4)
    choice = choose_noise(units, Fraction(12), rows_l1=3, rows_per_group=3, groups=1)
    assert choice.chosen == "ladder" and choice.fold == 3
    neighbor = choice.info.neighbor_set_units
    with_zero = merge_ranges([*units, (0, 0)])
    assert neighbor == magnitudes(fold(with_zero, 3) or ())
    lattice = choice.measurement.noise.lattice
    assert isinstance(lattice, LadderLattice)
    check = check_ladder_privacy(lattice, shifts=list(neighbor), claimed_epsilon=12)
    assert check.passed
    # a ladder built for one row would NOT be private for three rows: the verifier sees it
    single = choose_noise(units, Fraction(12), rows_l1=1, rows_per_group=1, groups=1)
    one_row = single.measurement.noise.lattice
    assert not check_ladder_privacy(one_row, shifts=list(neighbor), claimed_epsilon=12).passed


def test_grouped_sums_split_epsilon_over_groups_and_refuse_huge_folds() -> None:
    units = grid_ranges([(Fraction(0), Fraction(1)), (Fraction(1000), Fraction(1001))], -4)
    choice = choose_noise(units, Fraction(8), rows_l1=2, rows_per_group=1, groups=2)
    assert choice.measurement.loss == dp.PureDP(8)
    if choice.chosen != "geometric":
        assert choice.measurement.noise.lattice.rate == 4  # ε/m in each of the m groups
    big = choose_noise(units, Fraction(8), MAX_FOLD + 1, MAX_FOLD + 1, 1)
    assert "ladder" not in big.expected_abs and "not considered" in big.note
    forced = choose_noise(units, Fraction(8), 1, 1, 1, geometric_only=True)
    assert forced.chosen == "geometric"


def test_zcdp_and_forced_laplace_do_not_use_the_ladder() -> None:
    session = Session(payroll(), "person", dp.ZCDP(5), max_rows=1)
    query = session.query().agg(dp_sum("salary", values=PAY))
    assert session.compile(query, rho=1).mechanisms == ("discrete_gaussian",)
    pure = Session(payroll(), "person", dp.PureDP(5), max_rows=1)
    query = pure.query().agg(dp_sum("salary", values=PAY))
    forced = pure.compile(query, epsilon=3, mechanism="laplace")
    assert forced.mechanisms == ("geometric",)


def test_grouped_values_sum_releases_near_the_truth(seeded: None) -> None:
    df = payroll(seed=2)
    session = Session(df, "person", dp.PureDP(50), max_rows=1)
    query = (
        session.query().group_by("dept", keys=["a", "b"]).agg(count(), dp_sum("salary", values=PAY))
    )
    release = session.evaluate(query, epsilon=8)
    assert release.accuracy["sum_salary"].mechanism == "ladder"
    exact = df.groupby("dept")["salary"].sum()
    table = release.table
    for dept, value, high in zip(
        table["dept"], table["sum_salary"], table["sum_salary_high"], strict=True
    ):
        assert abs(value - exact[dept]) <= 4 * (high - value)


# ---------------------------------------------------------------------------------- audit
A = pd.DataFrame({"user": [1, 2, 3, 3, 4], "v": [10.0, 995.0, 5.0, 1000.0, -50.0]})
# one more unit, with many rows: at the top edge, beyond it, in the gap, at the gap's edge
HEAVY = pd.DataFrame({"user": [99] * 5, "v": [1000.0, 2e6, 600.0, 990.0, 1000.0]})
B = pd.concat([A, HEAVY], ignore_index=True)
GAPPY = [(0, 10), (990, 1000)]


def _ladder_samples(epsilon: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    query = Query().bound(max_rows=1).agg(dp_sum("v", values=GAPPY))
    engine_a, engine_b = PandasEngine(A), PandasEngine(B)
    compiled = compile_query(query, engine_a.schema(), "user", dp.PureDP(epsilon), salt=777)
    assert compiled.mechanisms == ("ladder",)
    out = []
    for engine in (engine_a, engine_b):
        exact = [engine.run(plan) for plan in compiled.plans]
        out.append(np.array([compiled.release(exact)[0]["main"]["sum_v"][0] for _ in range(n)]))
    return out[0], out[1]


def test_audit_of_the_ladder_sum_finds_no_violation(seeded: None) -> None:
    a, b = _ladder_samples(3.0, 1500)
    assert a.mean() != b.mean()
    audit_samples(a, b, claimed_epsilon=3.0).raise_if_failed()
    # negative control: the same releases do not pass for a much smaller claim
    assert not audit_samples(a, b, claimed_epsilon=0.3).passed
