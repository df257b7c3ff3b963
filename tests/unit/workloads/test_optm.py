"""OPT_M (HDMM's marginals optimiser) with exact noise: the error formula against dense linear
algebra, its place between ResidualPlanner's optimum and dpkit's exact ResidualPlanner release,
exact privacy (passes; fails for a halved claim), GLS reconstruction, and the analytic
variance against 2,000 releases (a wrong formula fails the same check)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpkit.core._losses import ZCDP, PureDP
from dpkit.errors import InvalidParameterError
from dpkit.workloads import (
    Marginals,
    marginal_tables,
    optimize_marginals,
    plan_residuals,
    verify_marginals_exact,
)
from dpkit.workloads._residual import _subsets

DOM = (2, 3, 4)
SETS = list(itertools.combinations(range(3), 2))


def _dense_error(s, norm):
    w = Marginals(s.domain, s.workload).dense()
    a = np.vstack(
        [
            math.sqrt(u) * Marginals(s.domain, [b]).dense()
            for b, u in zip(s.support, s.u, strict=True)
            if u > 0
        ]
    )
    col = np.sqrt((a * a).sum(0).max()) if norm == "l2" else np.abs(a).sum(0).max()
    return col**2 * np.linalg.norm(w @ np.linalg.pinv(a)) ** 2


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_error_formula_matches_dense(norm):
    s = optimize_marginals(DOM, SETS, norm=norm, max_seconds=2)
    assert s.expected_error() == pytest.approx(_dense_error(s, norm), rel=1e-9)
    # the same comparison rejects a broken formula (uniform weights instead of the optimum)
    s.u = np.ones_like(s.u)
    broken = optimize_marginals(DOM, SETS, norm=norm, max_seconds=2).expected_error()
    assert broken != pytest.approx(_dense_error(s, norm), rel=1e-3)


def test_between_residual_planner_optimum_and_exact_release():
    dom = (2, 3, 5, 4)
    sets = [*itertools.combinations(range(4), 2), (0, 1, 2)]
    s = optimize_marginals(dom, sets, max_seconds=3)
    rho = 0.5  # σ = 1 per unit L2 sensitivity
    paper = plan_residuals(dom, sets, rho, cost_model="gaussian").expected_error()
    exact_rp = plan_residuals(dom, sets, rho, cost_model="lattice").expected_error()
    assert paper * (1 - 1e-9) <= s.expected_error() <= exact_rp * (1 + 1e-9)


def _noise_free(monkeypatch):
    import dpkit.noise._distributions as d

    monkeypatch.setattr(d.DiscreteGaussian, "sample", lambda self, n: np.zeros(n, np.int64))


def test_reconstruction_is_exact_without_noise(monkeypatch):
    s = optimize_marginals(DOM, SETS, max_seconds=2)
    x = np.arange(24) % 5
    tables = marginal_tables(x, DOM, s.support)
    _noise_free(monkeypatch)
    release = s.release(tables, rho=0.5)
    for b in SETS:
        assert np.allclose(release.tables[b], tables[b], atol=1e-9)


@pytest.mark.parametrize(("norm", "kw"), [("l2", {"rho": 0.5}), ("l1", {"epsilon": 1})])
def test_exact_privacy_check(norm, kw):
    s = optimize_marginals(DOM, SETS, norm=norm, max_seconds=2)
    noise, loss = s.noise(**kw, contributions=2)
    assert verify_marginals_exact(noise, loss, 2).passed
    assert (loss.rho if norm == "l2" else loss.epsilon) <= next(iter(kw.values()))
    # a claim half the true loss (as from a strategy whose declared sensitivity is too small)
    halved = ZCDP(loss.rho / 2) if norm == "l2" else PureDP(loss.epsilon / 2)
    assert not verify_marginals_exact(noise, halved, 2).passed


def _wrong_variance(s, b):  # drops the lower-order residuals: a plausible but wrong formula
    n = s.domain
    cells = math.prod(n[i] for i in b)
    pairs = zip(s.support, s.u, strict=True)
    k = sum(u / math.prod(n[i] for i in a) for a, u in pairs if set(b) <= set(a))
    return math.prod(n[i] - 1 for i in b) / (cells * cells * k) * s.info["sigma2"]


@pytest.mark.slow
def test_empirical_variance_matches_analytic():
    _variance_check(2000, 0.05)


def test_empirical_variance_matches_analytic_quick():
    _variance_check(400, 0.2)


def _variance_check(n_runs, rel):
    s = optimize_marginals(DOM, SETS, max_seconds=2)
    x = np.arange(24) % 5
    tables = marginal_tables(x, DOM, s.support)
    runs = [s.release(tables, rho=0.5) for _ in range(n_runs)]
    first = runs[0]
    s.info["sigma2"] = float(np.sum(s.u)) / (2 * 0.5)
    for b in SETS:
        est = np.stack([r.tables[b] for r in runs])
        empirical = float(est.var(axis=0, ddof=1).mean())
        assert empirical == pytest.approx(first.cell_variance[b], rel=rel)
        assert abs(first.cell_variance[b] / _wrong_variance(s, b) - 1) > 2 * rel
        se = math.sqrt(first.cell_variance[b] / len(runs))
        assert np.max(np.abs(est.mean(axis=0) - tables[b])) < 5 * se
    total = sum(first.cell_variance[b] * math.prod(DOM[i] for i in b) for b in SETS)
    assert total == pytest.approx(s.expected_error() * (1 + 1e-9), rel=2e-3)


def test_bad_input_before_data():
    with pytest.raises(InvalidParameterError, match="domain"):
        optimize_marginals((1, 3), [(0, 1)])
    with pytest.raises(InvalidParameterError, match="workload"):
        optimize_marginals((2, 3), [(0, 5)])
    s = optimize_marginals(DOM, SETS, max_seconds=1)
    with pytest.raises(InvalidParameterError, match="rho"):
        s.release({}, epsilon=1)
    with pytest.raises(InvalidParameterError, match="marginals"):
        s.release({}, rho=1)
    assert all(len(_subsets(b)) for b in s.support)


def test_choose_strategy_for_marginals_explains_the_choice():
    from dpkit.workloads import choose_strategy

    w = Marginals((2, 3, 4, 5), list(itertools.combinations(range(4), 2)))
    choice = choose_strategy(w, "l2", max_seconds=2)
    text = choice.explain()
    assert "OPT_M" in text and "ResidualPlanner optimum" in text
    assert choice.bound is not None
    assert choice.bound <= min(choice.errors.values()) * (1 + 1e-9)
    assert choice.errors[choice.chosen] == min(choice.errors.values())
