"""Strategies: exact errors against dense formulas, the issue's reference figures, OPT_0/OPT_⊗,
ResidualPlanner's closed form, the DuckDB data vector, and bad input before data."""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pytest
from scipy.optimize import minimize

from dpkit.errors import DPError, InvalidParameterError
from dpkit.workloads import (
    AllRange,
    Kron,
    KronStrategy,
    Prefix,
    WidthRange,
    choose_strategy,
    expected_error,
    hierarchical,
    histogram_from_duckdb,
    identity,
    make_strategy_measurement,
    marginal_tables,
    nonnegative,
    optimize_kron,
    optimize_p_identity,
    plan_residuals,
    reconstruct,
    svd_bound,
    wavelet,
)
from dpkit.workloads._strategies import _p_identity_objective
from dpkit.workloads._table import marginal_tables_from_duckdb


def _dense_error(w, a, norm):
    d = w.dense()
    a = a.toarray()
    col = np.abs(a).sum(0).max() if norm == "l1" else np.sqrt((a * a).sum(0).max())
    return col**2 * np.linalg.norm(d @ np.linalg.pinv(a)) ** 2


@pytest.mark.parametrize("norm", ["l1", "l2"])
@pytest.mark.parametrize("strategy", [identity(12), hierarchical(12, 3), wavelet(12)])
def test_expected_error_matches_dense(strategy, norm):
    w = AllRange(12)
    got = expected_error(w, strategy, norm)
    assert got == pytest.approx(_dense_error(w, strategy.matrix, norm), rel=1e-9)


def test_reference_figures_of_the_issue():
    w = Prefix(1024)
    assert expected_error(w, identity(1024)) == pytest.approx(524_800)
    assert expected_error(w, hierarchical(1024)) == pytest.approx(13_914, rel=1e-3)


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_p_identity_gradient(norm):
    w = Prefix(24)
    theta = np.abs(np.sin(np.arange(3 * 24) * 1.3))
    f, g = _p_identity_objective(theta, w, 3, norm, w.gram_diag())
    h = 1e-6
    for i in (0, 17, 50):
        e = np.zeros_like(theta)
        e[i] = h
        f2, _ = _p_identity_objective(theta + e, w, 3, norm, w.gram_diag())
        assert (f2 - f) / h == pytest.approx(g[i], rel=1e-3, abs=1e-4)


def test_opt0_beats_baselines_and_respects_bound():
    w = Prefix(64)
    s = optimize_p_identity(w, "l2", p=8, max_seconds=2)
    err = expected_error(w, s)
    assert svd_bound(w) <= err < expected_error(w, hierarchical(64))
    assert err == pytest.approx(_dense_error(w, s.matrix, "l2"), rel=1e-6)
    choice = choose_strategy(w, "l2", p=8, max_seconds=1)
    assert "SVD lower bound" in choice.explain()
    assert choice.errors[choice.strategy.name] == min(choice.errors.values())


def test_kron_error_factorises():
    w = Kron([Prefix(6), AllRange(5)])
    s = KronStrategy([hierarchical(6), wavelet(5)])
    from scipy.sparse import kron

    a = kron(hierarchical(6).matrix, wavelet(5).matrix)
    assert expected_error(w, s) == pytest.approx(_dense_error(w, a, "l2"), rel=1e-9)
    opt = optimize_kron(w, "l2", p=[2, 2])
    assert expected_error(w, opt) < expected_error(w, KronStrategy([identity(6), identity(5)]))


def test_residual_planner_closed_form_is_optimal():
    dom = (2, 3, 4)
    sets = list(itertools.combinations(range(3), 2))
    for model in ("gaussian", "lattice"):
        plan = plan_residuals(dom, sets, 0.5, cost_model=model)
        assert plan.expected_error() == pytest.approx(plan.closed_form_error(), rel=1e-12)
        keys = list(plan.sigma2)
        v = np.array([plan.v[a] for a in keys])
        p = np.array([plan.p[a] for a in keys])

        def objective(log_s2, p=p, v=v):  # error at the budget: scale σ² so Σ p/(2σ²) = ρ
            s2 = np.exp(log_s2)
            scale = np.sum(p / (2 * s2)) / 0.5
            return float(np.sum(s2 * scale * v))

        best = minimize(objective, np.zeros(len(keys)), method="BFGS").fun
        assert plan.closed_form_error() <= best * (1 + 1e-6)
        assert best <= plan.closed_form_error() * (1 + 1e-4)
    assert plan.loss().rho <= 0.5


def test_residual_release_and_duckdb_vector():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i % 7 AS u, i % 2 AS a, (i % 3)::VARCHAR AS b, i % 4 AS c, "
        "CASE WHEN i % 11 = 0 THEN 99 ELSE i % 4 END AS c2 FROM range(200) r(i)"
    )
    cols = {"a": [0, 1], "b": ["0", "1", "2"], "c": [0, 1, 2, 3]}
    hist, c = histogram_from_duckdb(con, "t", cols, privacy_unit="u", max_rows=12)
    assert c == 12 and hist.sum() == 7 * 12
    plain, one = histogram_from_duckdb(con, "t", {"a": [0, 1], "c2": [0, 1, 2, 3]})
    assert one == 1 and plain.sum() == 200 - 19  # 99 is outside the declared domain: dropped
    sets = [(0, 1), (1, 2)]
    closure = sorted({s for b in sets for k in range(3) for s in itertools.combinations(b, k)})
    tables, _ = marginal_tables_from_duckdb(con, "t", cols, closure, privacy_unit="u", max_rows=12)
    reference = marginal_tables(hist, (2, 3, 4), sets)
    assert all(np.array_equal(tables[k], reference[k]) for k in closure)
    plan = plan_residuals((2, 3, 4), sets, 1.0)
    release = plan.release(tables, contributions=c)
    assert release.tables[(0, 1)].shape == (2, 3)
    # noise scaled by c for sensitivity c: the loss is the plan's (it was reported c² too high)
    assert release.loss == plan.loss() and release.loss.rho <= 1


def test_nonnegative_postprocessing():
    w = Prefix(8)
    m = make_strategy_measurement(hierarchical(8), rho=0.05)
    x = np.array([0, 0, 3, 0, 0, 1, 0, 0])
    release = reconstruct(w, hierarchical(8), m, m(x))
    fixed = nonnegative(release, w, m)
    assert fixed.variances is None and np.all(np.diff(fixed.answers) >= -1e-9)
    assert fixed.raw_answers is not None


def test_bad_input_before_data():
    with pytest.raises(InvalidParameterError, match="max_bytes"):
        choose_strategy(WidthRange(100_000, 7))  # Prefix/AllRange have closed forms at any n
    with pytest.raises(DPError):
        make_strategy_measurement(identity(4), norm="l1", rho=1)
    with pytest.raises(DPError):
        make_strategy_measurement(identity(4), contributions=0, rho=1)
    with pytest.raises(DPError):
        plan_residuals([2, 3], [(0, 2)], 1.0)
    with pytest.raises(DPError):
        plan_residuals(
            [2] * 30, list(itertools.combinations(range(30), 5)), 1.0, max_residuals=1000
        )
    with pytest.raises(DPError):
        histogram_from_duckdb(duckdb.connect(), "t", {"a": [0, 0]})
    with pytest.raises(DPError):
        histogram_from_duckdb(duckdb.connect(), "t", {"a": [0]}, privacy_unit="u")
    m = make_strategy_measurement(identity(4), rho=1)
    with pytest.raises(DPError):
        m(np.array(["a", "b", "c", "d"]))
    with pytest.raises(DPError):
        reconstruct(Prefix(5), identity(4), m, m(np.zeros(4, dtype=int)))


def test_residual_release_loss_with_contributions_is_exact() -> None:
    """ResidualPlan.release(contributions=c) scales each residual's noise to c²σ_A²: its
    reported loss (the plan's) must pass the exact per-marginal check at shift c, and fail it at
    c + 1 (the check can fail); it used to report c² times the loss."""
    from dpkit.noise._distributions import DiscreteGaussian
    from dpkit.workloads import verify_marginals_exact

    c = 3
    plan = plan_residuals((2, 3), [(0, 1)], 0.5)
    tables = marginal_tables(np.arange(6), (2, 3), list(plan.sigma2))
    release = plan.release(tables, contributions=c)
    noise = {a: DiscreteGaussian(s2 * c * c) for a, s2 in plan.info["sigma2_exact"].items()}
    assert verify_marginals_exact(noise, release.loss, c).passed
    assert not verify_marginals_exact(noise, release.loss, c + 1).passed
