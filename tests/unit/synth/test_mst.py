"""MST's accounting and its selection and measurement steps, checked against first principles."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpkit.analytics._planner._noise import sqrt_down
from dpkit.core._losses import ZCDP, compose
from dpkit.mechanisms import make_exponential
from dpkit.synth import _mst
from dpkit.synth._model import GraphicalModel, Measurement, estimate
from dpkit.testing import check_finite_zcdp


class _Spy:
    """Wraps a measurement: counts its invocations, delegates everything else."""

    def __init__(self, inner: Any, calls: list[Any], kind: str, args: tuple[Any, ...]) -> None:
        self.inner, self.calls, self.kind, self.args = inner, calls, kind, args

    def __call__(self, data: Any) -> Any:
        self.calls.append((self.kind, self.args, self.inner, np.asarray(data).copy()))
        return self.inner(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _tables(rng: np.random.Generator, shape: list[int], n: int) -> dict[tuple[int, ...], Any]:
    data = np.stack([rng.integers(0, k, n) for k in shape], axis=1)
    out: dict[tuple[int, ...], Any] = {}
    for s in [(a,) for a in range(len(shape))] + list(itertools.combinations(range(len(shape)), 2)):
        dims = [shape[a] for a in s]
        flat = np.ravel_multi_index(tuple(data[:, a] for a in s), dims)
        out[s] = np.bincount(flat, minlength=int(np.prod(dims))).reshape(dims)
    return out


@pytest.mark.parametrize(("d", "c"), [(1, 1), (2, 1), (5, 1), (14, 3)])
def test_the_plan_charges_each_step_of_the_paper(d: int, c: int) -> None:
    rho = Fraction(1, 7)
    plan = _mst.MSTPlan(d, rho, c)
    if d == 1:
        assert plan.charge() == ZCDP(rho)
        return
    eps = sqrt_down(8 * (rho / 3) / (d - 1))
    expected = (rho / 3) + (d - 1) * eps * eps / 8 + (rho / 3)
    assert plan.charge() == ZCDP(expected)
    assert expected <= rho
    assert expected >= rho * (1 - Fraction(1, 10**9))


def test_the_charge_is_the_composition_of_the_steps_the_run_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every measurement the run makes is recorded by a spy; their losses, composed from the
    mechanisms' own privacy maps (Gaussian) and the bounded-range bound ε²/8 (each EM draw),
    must equal the plan's charge. A plan that forgets one step's cost fails here."""
    calls: list[Any] = []
    gaussian, exponential = _mst.make_discrete_gaussian, _mst.make_exponential

    def spy_gaussian(sensitivity: Any, *, rho: Any) -> Any:
        return _Spy(gaussian(sensitivity, rho=rho), calls, "gaussian", (sensitivity, rho))

    def spy_exponential(epsilon: Any, sensitivity: Any) -> Any:
        return _Spy(exponential(epsilon, sensitivity), calls, "em", (epsilon, sensitivity))

    monkeypatch.setattr(_mst, "make_discrete_gaussian", spy_gaussian)
    monkeypatch.setattr(_mst, "make_exponential", spy_exponential)
    shape = [3, 4, 2, 5]
    c = 2
    tables = _tables(np.random.default_rng(1), shape, 500)
    plan = _mst.MSTPlan(len(shape), Fraction(1, 2), c)
    run = _mst.run_mst(plan, lambda: tables, iterations=5)
    losses = []
    for kind, args, inner, _ in calls:
        if kind == "gaussian":
            assert args[0] == c  # the L2 sensitivity of a marginal: c rows of one unit
            losses.append(inner.map(c))
        else:
            eps = Fraction(args[0])
            assert args[1] == c
            losses.append(ZCDP(eps * eps / 8))
    assert compose(*losses) == plan.charge()
    assert compose(*(loss for _, loss in run.steps)) == plan.charge()
    assert [k for k, *_ in calls].count("em") == len(shape) - 1
    assert len(run.tree) == len(shape) - 1


def test_each_gaussian_measurement_has_the_planned_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    gaussian = _mst.make_discrete_gaussian

    def spy(sensitivity: Any, *, rho: Any) -> Any:
        return _Spy(gaussian(sensitivity, rho=rho), calls, "gaussian", (sensitivity, rho))

    monkeypatch.setattr(_mst, "make_discrete_gaussian", spy)
    shape = [3, 3, 2]
    rho = Fraction(3, 5)
    plan = _mst.MSTPlan(3, rho, 1)
    _mst.run_mst(plan, lambda: _tables(np.random.default_rng(2), shape, 100), iterations=2)
    gauss = [(args, inner) for kind, args, inner, _ in calls]
    assert len(gauss) == 3 + 2
    for i, (args, inner) in enumerate(gauss):
        share = rho / 3 / 3 if i < 3 else rho / 3 / 2
        assert args == (1, share)
        # σ² = Δ²/(2ρ) exactly (the discrete Gaussian's variance parameter)
        assert inner.info.sigma**2 == pytest.approx(float(1 / (2 * share)), rel=1e-12)
        assert inner.map(1) == ZCDP(share)


def test_one_selection_step_is_eps_squared_over_8_zcdp_exactly() -> None:
    """The exact checker over every neighbour (one person added, any values) of a tiny table:
    the first EM step's output distribution over the pairs meets ε²/8-zCDP."""
    shape = [2, 2, 2]
    plan = _mst.MSTPlan(3, Fraction(8), 1)
    eps = plan.select_epsilon
    em = make_exponential(eps, 1)
    one_way = [Measurement((a,), np.array([3.0, 3.0 + a]), np.asarray(1.0)) for a in range(3)]
    independent = estimate(shape, one_way, iterations=50)
    base = np.array([[0, 0, 0], [0, 1, 1], [1, 1, 0], [1, 0, 1], [1, 1, 1], [0, 0, 1]])

    def pmf(rows: tuple[tuple[int, ...], ...]) -> np.ndarray:
        data = np.array(rows)
        tables = {}
        for a, b in itertools.combinations(range(3), 2):
            t = np.zeros((2, 2), dtype=np.int64)
            np.add.at(t, (data[:, a], data[:, b]), 1)
            tables[(a, b)] = t
        scores = _mst.pair_scores(tables, independent)
        utilities = np.array([scores[p] for p in sorted(scores)])
        p = em.info.output_pmf(utilities)
        # the EM's distribution, independently: ∝ exp(ε·u/(2Δ))
        w = np.exp(float(eps) * (utilities - utilities.max()) / 2)
        np.testing.assert_allclose(p, w / w.sum(), rtol=1e-12)
        return p

    x = tuple(map(tuple, base))
    pairs = [(x, (*x, extra)) for extra in itertools.product(range(2), repeat=3)]
    result = check_finite_zcdp(pmf, pairs, eps * eps / 8)
    assert result.passed, result
    assert not check_finite_zcdp(pmf, pairs, eps * eps / 80).passed  # the check has teeth


def test_compression_merges_the_cells_below_three_sigma() -> None:
    support, mapping, values, std = _mst.compress(np.array([100.0, 2.0, 50.0, -1.0, 0.0]), 10.0)
    assert support.tolist() == [True, False, True, False, False]
    assert mapping.tolist() == [0, 2, 1, 2, 2]
    assert values.tolist() == [100.0, 50.0, 1.0]
    assert std.tolist() == pytest.approx([10.0, 10.0, 10.0 * np.sqrt(3)])


def test_the_run_recovers_a_tree_at_a_large_budget() -> None:
    """With almost no noise the fitted model's 2-way marginals on the tree are the truth."""
    shape = [3, 4, 2]
    tables = _tables(np.random.default_rng(3), shape, 2000)
    run = _mst.run_mst(_mst.MSTPlan(3, Fraction(100), 1), lambda: tables, iterations=300)
    assert isinstance(run.model, GraphicalModel)
    for a, b in run.tree:
        np.testing.assert_allclose(run.model.marginal((a, b)), tables[(a, b)], atol=2.0)
