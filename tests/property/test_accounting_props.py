"""Property tests: ledger totals are the exact composition, nothing ever exceeds a budget,
filters stop in time, and allocation never hands out more than the budget."""

from __future__ import annotations

import contextlib
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpkit.accounting import (
    AdvancedFilter,
    AllocationPool,
    BasicFilter,
    GeometricSchedule,
    PlannedQuery,
    ZCDPFilter,
    accuracy_allocation,
    equal_split,
    explicit_split,
    optimal_homogeneous_composition,
    weighted_split,
)
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, compose
from dpkit.errors import BudgetExceededError
from dpkit.ledger import BudgetMonitor, Ledger

QUIET = BudgetMonitor(log=False)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

small_fraction = st.fractions(min_value=0, max_value=Fraction(1, 2), max_denominator=1000)
epsilons = st.fractions(min_value=Fraction(1, 1000), max_value=1, max_denominator=1000)
deltas = st.fractions(min_value=0, max_value=Fraction(1, 10**5), max_denominator=10**7)

pure = epsilons.map(PureDP)
approx = st.builds(ApproxDP, epsilons, deltas)
zcdp = st.fractions(
    min_value=Fraction(1, 10**4), max_value=Fraction(1, 2), max_denominator=10**4
).map(ZCDP)


@SETTINGS
@given(st.lists(st.one_of(pure, approx), min_size=1, max_size=30))
def test_ledger_total_is_the_exact_sequential_composition(losses: list[PrivacyLoss]) -> None:
    ledger = Ledger.open("memory://", monitor=QUIET)
    ledger.create_budget("d", ApproxDP(10**6, Fraction(1, 2)))
    for loss in losses:
        ledger.commit(ledger.reserve("d", loss))
    assert ledger.spent("d") == compose(*losses).to_approx()  # type: ignore[union-attr]
    assert ledger.replay().ok


@SETTINGS
@given(st.lists(st.one_of(pure, zcdp), min_size=1, max_size=30))
def test_zcdp_budget_total_is_the_exact_zcdp_composition(losses: list[PrivacyLoss]) -> None:
    ledger = Ledger.open("memory://", monitor=QUIET)
    ledger.create_budget("d", ZCDP(10**6))
    for loss in losses:
        ledger.reserve("d", loss)
    expected = sum(
        (x.rho if isinstance(x, ZCDP) else x.epsilon**2 / 2 for x in losses),  # type: ignore[union-attr]
        Fraction(0),
    )
    assert ledger.spent("d") == ZCDP(expected)


@SETTINGS
@given(
    budget_eps=epsilons,
    budget_delta=deltas,
    losses=st.lists(st.one_of(pure, approx), min_size=1, max_size=40),
    analyst_share=st.fractions(min_value=0, max_value=1, max_denominator=100),
)
def test_ledger_never_exceeds_and_refuses_exactly_when_it_would(
    budget_eps: Fraction,
    budget_delta: Fraction,
    losses: list[PrivacyLoss],
    analyst_share: Fraction,
) -> None:
    budget = ApproxDP(budget_eps, budget_delta)
    analyst_budget = ApproxDP(budget_eps * analyst_share, budget_delta * analyst_share)
    ledger = Ledger.open("memory://", monitor=QUIET)
    ledger.create_budget("d", budget)
    ledger.create_budget("d", analyst_budget, analyst="a")
    granted: list[PrivacyLoss] = []
    granted_a: list[PrivacyLoss] = []
    for i, loss in enumerate(losses):
        analyst = "a" if i % 2 else None
        would = compose(*granted, loss).to_approx()  # type: ignore[union-attr]
        would_a = compose(*granted_a, loss).to_approx() if analyst else None  # type: ignore[union-attr]
        fits = would <= budget and (would_a is None or would_a <= analyst_budget)
        try:
            ledger.reserve("d", loss, analyst=analyst)
        except BudgetExceededError:
            assert not fits
            continue
        assert fits
        granted.append(loss)
        if analyst:
            granted_a.append(loss)
        assert ledger.spent("d") <= budget
        assert ledger.spent("d", "a") <= analyst_budget


@SETTINGS
@given(epsilons, st.lists(st.one_of(pure, approx), min_size=1, max_size=60), deltas)
def test_basic_filter_never_exceeds(
    total: Fraction, losses: list[PrivacyLoss], delta: Fraction
) -> None:
    f = BasicFilter(ApproxDP(total, delta))
    for loss in losses:
        admitted = f.admits(loss)
        try:
            f.spend(loss)
            assert admitted
        except BudgetExceededError:
            assert not admitted
        assert f.spent.epsilon <= total and f.spent.delta <= delta


@SETTINGS
@given(
    st.fractions(min_value=Fraction(1, 100), max_value=2, max_denominator=100),
    st.lists(st.one_of(pure, zcdp), min_size=1, max_size=60),
)
def test_zcdp_filter_never_exceeds(rho: Fraction, losses: list[PrivacyLoss]) -> None:
    f = ZCDPFilter(rho)
    for loss in losses:
        with contextlib.suppress(BudgetExceededError):
            f.spend(loss)
        assert f.spent.rho <= rho


@SETTINGS
@given(
    epsilons,
    st.lists(
        st.fractions(min_value=Fraction(1, 1000), max_value=Fraction(1, 5), max_denominator=1000),
        min_size=1,
        max_size=80,
    ),
)
def test_advanced_filter_never_exceeds(total: Fraction, eps: list[Fraction]) -> None:
    f = AdvancedFilter(total, Fraction(1, 10**6))
    for e in eps:
        with contextlib.suppress(BudgetExceededError):
            f.spend(PureDP(e))
        assert f.spent.epsilon <= total


@SETTINGS
@given(
    st.one_of(pure, approx, zcdp),
    st.lists(st.fractions(min_value=0, max_value=1, max_denominator=100), min_size=1, max_size=10),
)
def test_splits_never_hand_out_more_than_the_budget(
    total: PrivacyLoss, raw: list[Fraction]
) -> None:
    whole = sum(raw, Fraction(0))
    shares = [x / whole for x in raw] if whole > 1 else raw
    for parts in (
        explicit_split(total, shares),
        equal_split(total, len(raw)),
        weighted_split(total, [x + Fraction(1, 100) for x in raw]),
    ):
        composed = compose(*parts.values())
        assert composed <= total
    schedule = GeometricSchedule(total, Fraction(2, 3))
    assert compose(*schedule.first(len(raw) * 3)) <= total


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.fractions(min_value=Fraction(1, 10), max_value=100, max_denominator=10),
            st.fractions(min_value=Fraction(1, 10), max_value=100, max_denominator=10),
        ),
        min_size=1,
        max_size=8,
    ),
    epsilons,
)
def test_accuracy_allocation_fits_the_total_exactly(
    specs: list[tuple[Fraction, Fraction]], total: Fraction
) -> None:
    queries = [PlannedQuery(f"q{i}", s, e) for i, (s, e) in enumerate(specs)]
    plan = accuracy_allocation(queries, total=PureDP(total))
    assert compose(*plan.as_dict().values()) == PureDP(total)
    ratios = [s.relative_error for s in plan.shares]
    assert max(ratios) <= min(ratios) * (1 + 1e-9)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["allocate", "settle", "cancel", "raise"]),
            st.integers(0, 5),
            small_fraction,
        ),
        max_size=40,
    )
)
def test_allocation_pool_never_overcommits(ops: list[tuple[str, int, Fraction]]) -> None:
    pool = AllocationPool(PureDP(1))
    total = Fraction(1)
    for op, slot, amount in ops:
        name = f"s{slot}"
        try:
            if op == "allocate":
                pool.allocate(name, PureDP(amount))
            elif op == "settle":
                allocated = pool.allocations().get(name)
                if allocated is not None:
                    pool.settle(name, PureDP(min(amount, allocated.epsilon)))  # type: ignore[union-attr]
            elif op == "cancel":
                if name in pool.allocations():
                    pool.cancel(name)
            else:
                total += amount
                pool.raise_total(PureDP(total), actor="admin")
        except (BudgetExceededError, ValueError):
            pass
        available = pool.available
        assert isinstance(available, PureDP) and available.epsilon >= 0
        committed = sum((x.epsilon for x in pool.allocations().values()), Fraction(0))  # type: ignore[union-attr]
        spent = pool.spent
        assert isinstance(spent, PureDP)
        assert committed + spent.epsilon + available.epsilon == total


@settings(max_examples=15, deadline=None)
@given(
    st.fractions(min_value=Fraction(1, 100), max_value=1, max_denominator=100),
    st.integers(min_value=1, max_value=60),
)
def test_optimal_composition_never_worse_than_basic(eps: Fraction, k: int) -> None:
    result = optimal_homogeneous_composition(PureDP(eps), k, delta=Fraction(1, 10**6))
    assert result.epsilon <= k * eps
