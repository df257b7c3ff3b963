"""Allocation strategies and the dynamic allocation pool."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpkit.accounting import (
    AllocationPool,
    GeometricSchedule,
    PlannedQuery,
    accuracy_allocation,
    equal_split,
    explicit_split,
    weighted_split,
)
from dpkit.core._losses import ZCDP, ApproxDP, PureDP, compose
from dpkit.errors import BudgetExceededError, InvalidParameterError


def test_seed_split_is_exact() -> None:
    parts = explicit_split(PureDP(1), {"sum": 0.5, "mean": 0.3, "cluster": 0.2})
    assert parts == {"sum": PureDP(0.5), "mean": PureDP(0.3), "cluster": PureDP(0.2)}
    assert compose(*parts.values()) == PureDP(1)


def test_explicit_split_refuses_more_than_the_budget() -> None:
    with pytest.raises(InvalidParameterError, match="at most 1"):
        explicit_split(PureDP(1), [0.5, 0.3, 0.3])
    with pytest.raises(InvalidParameterError):
        explicit_split(PureDP(1), [0.5, -0.1])
    with pytest.raises(InvalidParameterError):
        explicit_split(PureDP(1), [])


def test_weights_and_equal_split_add_up_exactly() -> None:
    parts = weighted_split(ApproxDP(1, 1e-6), {"a": 1, "b": 2, "c": 3})
    assert compose(*parts.values()) == ApproxDP(1, 1e-6)
    assert parts["a"] == ApproxDP(Fraction(1, 6), Fraction(1, 6 * 10**6))
    thirds = equal_split(PureDP(1), 3)
    assert list(thirds) == ["q1", "q2", "q3"]
    assert compose(*thirds.values()) == PureDP(1)
    assert equal_split(ZCDP(1), 2, names=["x", "y"]) == {"x": ZCDP(0.5), "y": ZCDP(0.5)}
    with pytest.raises(InvalidParameterError):
        equal_split(PureDP(1), 0)
    with pytest.raises(InvalidParameterError):
        weighted_split(PureDP(1), [1, 0])


def test_geometric_schedule_never_reaches_the_total() -> None:
    schedule = GeometricSchedule(PureDP(1), Fraction(1, 2))
    first = schedule.first(50)
    assert first[0] == PureDP(0.5) and first[1] == PureDP(0.25)
    total = compose(*first)
    assert isinstance(total, PureDP) and total.epsilon == 1 - Fraction(1, 2**50)
    assert schedule.next() == PureDP(0.5)
    assert schedule.next() == PureDP(0.25)
    it = iter(GeometricSchedule(ZCDP(1), Fraction(9, 10)))
    assert next(it) == ZCDP(Fraction(1, 10))
    with pytest.raises(InvalidParameterError):
        GeometricSchedule(PureDP(1), Fraction(1))


def test_accuracy_allocation_minimal_total() -> None:
    plan = accuracy_allocation(
        [PlannedQuery("count", 1, 10), PlannedQuery("sum", 100, 50), PlannedQuery("max", 5, 1)]
    )
    assert plan.as_dict() == {"count": PureDP(0.1), "sum": PureDP(2), "max": PureDP(5)}
    assert plan.total == PureDP(Fraction(71, 10))
    assert plan.worst_relative_error == pytest.approx(1.0)
    assert "count" in str(plan)


def test_accuracy_allocation_fixed_total_equalises_relative_error() -> None:
    queries = [PlannedQuery("count", 1, 10), PlannedQuery("sum", 100, 50)]
    plan = accuracy_allocation(queries, total=PureDP(1))
    assert compose(*plan.as_dict().values()) == PureDP(1)
    ratios = [s.relative_error for s in plan.shares]
    assert ratios[0] == pytest.approx(ratios[1])
    assert plan.worst_relative_error == pytest.approx(2.1)  # needs 2.1 for every target


def test_accuracy_allocation_gaussian() -> None:
    plan = accuracy_allocation(
        [PlannedQuery("a", 1, 1, "gaussian"), PlannedQuery("b", 2, 1, "gaussian")]
    )
    assert all(isinstance(s.loss, ZCDP) for s in plan.shares)
    assert all(s.expected_error <= s.target_error for s in plan.shares)
    fixed = accuracy_allocation(
        [PlannedQuery("a", 1, 1, "gaussian"), PlannedQuery("b", 2, 1, "gaussian")],
        total=ZCDP(1),
    )
    assert compose(*fixed.as_dict().values()) == ZCDP(1)
    with pytest.raises(InvalidParameterError):
        accuracy_allocation([PlannedQuery("a", 1, 1), PlannedQuery("b", 1, 1, "gaussian")])
    with pytest.raises(InvalidParameterError):
        accuracy_allocation([PlannedQuery("a", 1, 1)], total=ZCDP(1))
    with pytest.raises(InvalidParameterError):
        accuracy_allocation([PlannedQuery("a", 0, 1)])


def test_pool_unspent_flows_back_and_never_overallocates() -> None:
    pool = AllocationPool(PureDP(1))
    pool.allocate_split(explicit_split(PureDP(1), {"sum": 0.5, "mean": 0.3, "cluster": 0.2}))
    assert pool.available == PureDP(0)
    with pytest.raises(BudgetExceededError):
        pool.allocate("extra", PureDP(0.01))
    back = pool.settle("sum", PureDP(0.4))
    assert back == PureDP(0.1)
    assert pool.available == PureDP(0.1)
    assert pool.cancel("cluster") == PureDP(0.2)
    assert pool.available == PureDP(0.3)
    pool.allocate("extra", PureDP(0.3))
    assert pool.available == PureDP(0)
    with pytest.raises(BudgetExceededError):
        pool.settle("mean", PureDP(0.31))
    assert pool.spent == PureDP(0.4)
    assert set(pool.allocations()) == {"mean", "extra"}


def test_pool_raise_is_recorded_and_lowering_refused() -> None:
    pool = AllocationPool(ApproxDP(1, 1e-6))
    pool.allocate("a", PureDP(1))  # pure counts as (ε, 0)
    pool.raise_total(ApproxDP(2, 1e-6), actor="admin")
    assert pool.events[-1] == ("raise", "admin", ApproxDP(2, 1e-6))
    assert pool.available == ApproxDP(1, 1e-6)
    with pytest.raises(InvalidParameterError):
        pool.raise_total(ApproxDP(1.5, 1e-6), actor="admin")
    with pytest.raises(InvalidParameterError):
        pool.allocate("a", PureDP(0.1))
    with pytest.raises(InvalidParameterError):
        pool.allocate("z", ZCDP(0.1))
