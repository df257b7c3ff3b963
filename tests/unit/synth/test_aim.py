"""AIM's accounting (a filter that never passes its charge), selection and refusals."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.core._losses import ZCDP, compose
from dpkit.errors import InvalidParameterError
from dpkit.ledger import BudgetMonitor, Ledger
from dpkit.mechanisms import make_exponential
from dpkit.synth import _aim, fit
from dpkit.synth._model import Measurement, estimate
from dpkit.testing import check_finite_zcdp


class _Spy:
    def __init__(self, inner: Any, calls: list[Any], kind: str, args: tuple[Any, ...]) -> None:
        self.inner, self.calls, self.kind, self.args = inner, calls, kind, args

    def __call__(self, data: Any) -> Any:
        self.calls.append((self.kind, self.args, self.inner))
        return self.inner(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _tables(shape: list[int], n: int, seed: int = 1) -> dict[tuple[int, ...], Any]:
    rng = np.random.default_rng(seed)
    data = np.stack([rng.integers(0, k, n) for k in shape], axis=1)
    data[:, 1] = (data[:, 0] + data[:, 1]) % shape[1]  # a dependence worth measuring
    out: dict[tuple[int, ...], Any] = {}
    for k in range(1, len(shape) + 1):
        for s in itertools.combinations(range(len(shape)), k):
            dims = [shape[a] for a in s]
            flat = np.ravel_multi_index(tuple(data[:, a] for a in s), dims)
            out[s] = np.bincount(flat, minlength=int(np.prod(dims))).reshape(dims)
    return out


def test_candidates_are_the_workloads_subsets_with_aims_weights() -> None:
    got = _aim.candidates([(0, 1, 2), (1, 2, 3)])
    assert set(got) == {
        (0,), (1,), (2,), (3,), (0, 1), (0, 2), (1, 2), (1, 3), (2, 3), (0, 1, 2), (1, 2, 3)
    }  # fmt: skip
    assert got[(1, 2)] == 4 and got[(0,)] == 1 and got[(1,)] == 2 and got[(0, 1, 2)] == 5


def _spied(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    gaussian, exponential = _aim.make_discrete_gaussian, _aim.make_exponential

    def spy_gaussian(sensitivity: Any, *, rho: Any) -> Any:
        return _Spy(gaussian(sensitivity, rho=rho), calls, "gaussian", (sensitivity, rho))

    def spy_exponential(epsilon: Any, sensitivity: Any) -> Any:
        return _Spy(exponential(epsilon, sensitivity), calls, "em", (epsilon, sensitivity))

    monkeypatch.setattr(_aim, "make_discrete_gaussian", spy_gaussian)
    monkeypatch.setattr(_aim, "make_exponential", spy_exponential)
    return calls


@pytest.mark.parametrize(("rho", "c", "rounds"), [(Fraction(1, 2), 1, None), (Fraction(3), 2, 9)])
def test_the_rounds_compose_to_at_most_the_charge_and_spend_it(
    monkeypatch: pytest.MonkeyPatch, rho: Fraction, c: int, rounds: int | None
) -> None:
    """Every mechanism the run invokes is recorded by a spy; their losses, from the
    mechanisms' own maps (Gaussian) and ε²/8 (each EM draw, bounded range), compose to at most
    the charge, and to all of it but the rounding of ε. A run that forgot to book one round's
    selection would spend more than ρ in its last round: caught here."""
    calls = _spied(monkeypatch)
    shape = [3, 4, 2, 3]
    workload = tuple(itertools.combinations(range(4), 3))
    plan = _aim.AIMPlan(tuple(shape), rho, workload, c, rounds=rounds)
    run = _aim.run_aim(plan, lambda: _tables(shape, 600), iterations=5, round_iterations=2)
    losses = []
    for kind, args, inner in calls:
        assert args[-1 if kind == "em" else 0] == (plan.select_sensitivity if kind == "em" else c)
        losses.append(inner.map(c) if kind == "gaussian" else ZCDP(Fraction(args[0]) ** 2 / 8))
    total = compose(*losses)
    assert isinstance(total, ZCDP)
    assert total.rho <= plan.charge().rho == rho  # type: ignore[attr-defined]
    assert total.rho >= rho * (1 - Fraction(1, 10**6))
    assert total == compose(*(loss for _, loss in run.steps)) == ZCDP(run.spent)
    kinds = [k for k, *_ in calls]
    assert kinds[: len(shape)] == ["gaussian"] * len(shape)  # the 1-way round
    assert kinds[len(shape) :] == ["em", "gaussian"] * len(run.selected)
    # annealing: each measurement's ρ stays or grows 4x, until the last round's remainder
    rhos = [Fraction(args[1]) for kind, args, _ in calls if kind == "gaussian"]
    assert all(b in (a, 4 * a) for a, b in itertools.pairwise(rhos[len(shape) : -1]))
    assert rhos[: len(shape)] == [plan.one_way_rho] * len(shape)


def test_the_one_way_round_gets_a_boosted_budget_capped_at_half_of_rho() -> None:
    """The initial 1-way measurements get ONE_WAY_BOOST times a round's ρ (they are not
    measured again unless selected), but never more than ρ/(2d) together with few rounds."""
    workload = tuple(itertools.combinations(range(4), 3))
    plan = _aim.AIMPlan((3, 4, 2, 3), Fraction(1), workload)
    assert _aim.ONE_WAY_BOOST > 1
    assert plan.one_way_rho == _aim.ONE_WAY_BOOST * plan.initial[0]
    few = _aim.AIMPlan((3, 4, 2, 3), Fraction(1), workload, rounds=5)
    assert few.one_way_rho == Fraction(1, 8) < _aim.ONE_WAY_BOOST * few.initial[0]


def test_a_run_that_forgets_a_selection_cost_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: one round's selection is not booked. The filter then lets the last round
    spend that cost again, and the composed loss of what ran exceeds the charge."""
    calls = _spied(monkeypatch)
    shape = [3, 4, 2, 3]
    workload = tuple(itertools.combinations(range(4), 3))
    plan = _aim.AIMPlan(tuple(shape), Fraction(1), workload, 1, rounds=8)
    # mutate: the first selection books zero loss (the bug); its mechanism still runs at ε
    booked: list[Any] = []
    real = _aim.selection_loss

    def forgetful(epsilon: Fraction) -> ZCDP:
        booked.append(epsilon)
        return ZCDP(0) if len(booked) == 1 else real(epsilon)

    monkeypatch.setattr(_aim, "selection_loss", forgetful)
    _aim.run_aim(plan, lambda: _tables(shape, 600), iterations=3, round_iterations=1)
    losses = [
        inner.map(1) if kind == "gaussian" else ZCDP(Fraction(args[0]) ** 2 / 8)
        for kind, args, inner in calls
    ]
    total = compose(*losses)
    assert isinstance(total, ZCDP) and total.rho > plan.rho  # the check above would fail


def test_one_selection_is_eps_squared_over_8_zcdp_exactly() -> None:
    """The exact checker over every neighbour (one person added, any values) of a tiny table:
    the selection's output distribution over the candidates meets ε²/8-zCDP."""
    shape = [2, 2, 2]
    workload = [(0, 1), (1, 2), (0, 2)]
    weights = _aim.candidates(workload)
    sens = max(weights.values())
    eps = Fraction(3, 2)
    em = make_exponential(eps, sens)
    one_way = [Measurement((a,), np.array([3.0, 3.0 + a]), np.asarray(1.0)) for a in range(3)]
    model = estimate(shape, one_way, iterations=50)
    order = list(weights)
    estimates = _aim._estimates(model, order)
    base = np.array([[0, 0, 0], [0, 1, 1], [1, 1, 0], [1, 0, 1], [1, 1, 1], [0, 0, 1]])

    def pmf(rows: tuple[tuple[int, ...], ...]) -> np.ndarray:
        data = np.array(rows)
        tables = {}
        for r in order:
            t = np.zeros([2] * len(r), dtype=np.int64)
            np.add.at(t, tuple(data[:, a] for a in r), 1)
            tables[r] = t
        utilities = _aim.scores(tables, estimates, weights, 1.0)
        p = em.info.output_pmf(utilities)
        w = np.exp(float(eps) * (utilities - utilities.max()) / (2 * sens))
        np.testing.assert_allclose(p, w / w.sum(), rtol=1e-12)
        return p

    x = tuple(map(tuple, base))
    pairs = [(x, (*x, extra)) for extra in itertools.product(range(2), repeat=3)]
    result = check_finite_zcdp(pmf, pairs, eps * eps / 8)
    assert result.passed, result
    assert not check_finite_zcdp(pmf, pairs, eps * eps / 80).passed  # the check has teeth


def _ledger() -> Ledger:
    ledger = Ledger.open(":memory:", monitor=BudgetMonitor(log=False))
    ledger.create_budget("t", ZCDP(10), privacy_unit="row")
    return ledger


def _frame(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, n)
    return pd.DataFrame({"a": a, "b": (a + rng.integers(0, 2, n)) % 4, "c": rng.integers(0, 2, n)})


DOMAIN = {"a": 3, "b": 4, "c": 2}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"workload": []}, "at least one"),
        ({"workload": [("a", "zz")]}, "zz"),
        ({"workload": [("a", "a")]}, "distinct"),
        ({"workload": "a"}, "list of marginals"),
        ({"max_model_mb": 1e-6}, "max_model_mb"),
        ({"rounds": 3}, "rounds"),
        ({"max_cells": 5}, "max_cells"),
        ({"method": "mst", "workload": [("a", "b")]}, "aim"),
    ],
)
def test_bad_input_is_refused_before_anything_is_charged(
    kwargs: dict[str, Any], match: str
) -> None:
    ledger = _ledger()
    args: dict[str, Any] = {"rho": 1, "method": "aim", **kwargs}
    with pytest.raises(InvalidParameterError, match=match):
        fit(_frame(), DOMAIN, ledger=ledger, dataset="t", **args)
    assert ledger.spent("t") == ZCDP(0)
    assert [e.kind for e in ledger.history()] == ["create"]


def test_the_model_size_refusal_says_how_to_raise_the_limit() -> None:
    with pytest.raises(InvalidParameterError, match=r"max_model_mb=.*--max-model-mb"):
        fit(_frame(), DOMAIN, rho=1, budget=ZCDP(1), method="aim", max_model_mb=1e-6)


def test_an_end_to_end_run_is_one_release_of_the_whole_budget() -> None:
    ledger = _ledger()
    model = fit(
        _frame(),
        DOMAIN,
        rho=Fraction(1, 2),
        method="aim",
        workload=[("a", "b"), ("c",)],
        ledger=ledger,
        dataset="t",
        iterations=30,
        round_iterations=5,
        rounds=8,
    )
    assert ledger.spent("t") == model.loss == ZCDP(Fraction(1, 2))
    steps = compose(*(loss for _, loss in model.steps))
    assert isinstance(steps, ZCDP) and steps.rho <= Fraction(1, 2)
    assert model.selected and all(set(s) <= {"a", "b", "c"} for s in model.selected)
    rows = model.sample(300)
    assert list(rows.columns) == ["a", "b", "c"] and len(rows) == 300
    assert rows["b"].between(0, 3).all()
    assert ledger.spent("t") == model.loss  # sampling is free


def test_an_epsilon_delta_request_is_charged_as_the_conversion_of_its_rho() -> None:
    from dpkit.analytics._planner._noise import rho_for

    model = fit(
        _frame(),
        DOMAIN,
        epsilon=1,
        delta=1e-9,
        method="aim",
        budget=dp.ApproxDP(1, 1e-9),
        iterations=10,
        round_iterations=3,
    )
    rho = rho_for(Fraction(1), Fraction(1, 10**9))
    assert model.loss == ZCDP(rho).to_approx(Fraction(1, 10**9))
    assert model.loss.epsilon <= 1


def test_the_error_report_brackets_the_models_true_error() -> None:
    frame = _frame(2000)
    model = fit(
        frame,
        DOMAIN,
        rho=1,
        budget=ZCDP(1),
        method="aim",
        workload=[("a", "b"), ("b", "c"), ("a", "b", "c")],
        iterations=50,
        round_iterations=5,
        rounds=8,
    )
    report = model.error_report(confidence=0.999)
    assert list(report["marginal"]) == [("a", "b"), ("b", "c"), ("a", "b", "c")]
    names = list(DOMAIN)
    checked = 0
    for _, row in report.iterrows():
        if row["measured"] is None:
            assert np.isnan(row["low"]) and np.isnan(row["high"])
            continue
        cols = list(row["marginal"])
        r = tuple(names.index(c) for c in cols)
        true = frame.groupby(cols).size()
        x = np.zeros([DOMAIN[c] for c in cols])
        for key, v in true.items():
            x[key if isinstance(key, tuple) else (key,)] = v
        error = float(np.abs(model.model.marginal(r) - x).sum()) / model.total
        assert row["low"] <= error <= row["high"]
        assert row["low"] <= row["estimate"] <= row["high"]
        checked += 1
    assert checked >= 1
    with pytest.raises(InvalidParameterError):
        model.error_report(confidence=1.5)
