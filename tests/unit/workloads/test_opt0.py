"""OPT_0 under L2: closed-form eigenvectors, the Woodbury value, the spectral start and the
≤ 1.05× SVD-bound target; each check is shown to fail on a broken variant."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.workloads import (
    AllRange,
    Explicit,
    Prefix,
    expected_error,
    optimize_p_identity,
    p_identity,
    svd_bound,
)
from dpkit.workloads._strategies import (
    _p_identity_objective,
    _p_identity_value,
    _spectral_start,
    _top_eigenpairs,
    _tree_start,
    default_p,
)


def _dense_unit_error(w, theta, norm):
    a = p_identity(theta, norm).matrix.toarray()
    g = w.gram_dense()
    return float(np.trace(g @ np.linalg.inv(a.T @ a)))


def _eigen_residual(w, lam, vecs):
    g = w.gram_dense()
    return float(np.max(np.abs(vecs @ g - lam[:, None] * vecs)))


@pytest.mark.parametrize("cls", [Prefix, AllRange])
def test_closed_form_eigenvectors(cls):
    w = cls(40)
    lam, vecs = _top_eigenpairs(w, 10, 2**30)
    assert _eigen_residual(w, lam, vecs) < 1e-9 * lam[0]
    assert np.allclose(vecs @ vecs.T, np.eye(10), atol=1e-12)
    assert np.all(np.diff(lam) < 0)  # descending: the top p


def test_eigen_check_fails_on_a_wrong_formula():
    w = Prefix(40)
    lam, vecs = _top_eigenpairs(AllRange(40), 10, 2**30)  # AllRange's sines are not Prefix's
    assert _eigen_residual(w, lam * 0 + _top_eigenpairs(w, 10, 2**30)[0], vecs) > 1e-3


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_woodbury_value_matches_dense(norm):
    w = AllRange(30)
    rng_free = np.sin(np.arange(5 * 30) * 0.37).reshape(5, 30)  # deterministic
    theta = np.abs(rng_free) if norm == "l1" else rng_free  # L2: any sign
    dense = _dense_unit_error(w, theta, norm)
    assert _p_identity_value(theta, w, norm) == pytest.approx(dense, rel=1e-9)
    f, _ = _p_identity_objective(theta.ravel(), w, 5, norm, w.gram_diag())
    assert f == pytest.approx(dense, rel=1e-9)
    # a broken value (dropping the Woodbury correction) is caught by the same comparison
    d2 = 1.0 + (theta * theta).sum(0) if norm == "l2" else (1.0 + theta.sum(0)) ** 2
    assert float(np.sum(w.gram_diag() * d2)) != pytest.approx(dense, rel=1e-3)


def test_l2_gradient_with_negative_entries():
    w = Prefix(20)
    theta = np.sin(np.arange(4 * 20) * 1.1)
    f, g = _p_identity_objective(theta, w, 4, "l2", w.gram_diag())
    h = 1e-6
    for i in (0, 33, 79):
        e = np.zeros_like(theta)
        e[i] = h
        f2, _ = _p_identity_objective(theta + e, w, 4, "l2", w.gram_diag())
        assert (f2 - f) / h == pytest.approx(g[i], rel=1e-3, abs=1e-4)


@pytest.mark.parametrize("cls", [Prefix, AllRange])
def test_opt0_l2_within_five_percent_of_svd_bound(cls):
    w = cls(256)
    s = optimize_p_identity(w, "l2", max_seconds=2)
    ratio = expected_error(w, s, "l2") / svd_bound(w)
    assert 1.0 <= ratio <= 1.05
    assert s.info["start"] == "spectral"
    # exactness of the analytic error for the released (explicit) matrix
    a = s.matrix.toarray()
    dense = np.sqrt((a * a).sum(0).max()) ** 2 * np.trace(w.gram_dense() @ np.linalg.inv(a.T @ a))
    assert expected_error(w, s, "l2") == pytest.approx(dense, rel=1e-7)


def test_five_percent_check_fails_for_hdmm_default_p():
    # broken variant: HDMM's p = n/16 p-Identity cannot reach 1.05× under L2 (≈ 1.2–1.3×)
    w = Prefix(256)
    s = optimize_p_identity(w, "l2", p=16, max_seconds=2)
    assert expected_error(w, s, "l2") / svd_bound(w) > 1.05


def test_generic_workload_uses_dense_eigenvectors():
    rows = np.tril(np.ones((24, 24)))[::3]
    w = Explicit(rows)
    theta = _spectral_start(w, 6, 2**30)
    assert theta is not None and theta.shape == (6, 24)
    s = optimize_p_identity(w, "l2", p=6, max_seconds=2)
    assert expected_error(w, s) <= _p_identity_value(theta, w, "l2") * (1 + 1e-9)


def test_l1_keeps_theta_nonnegative_and_tree_start():
    w = Prefix(64)
    s = optimize_p_identity(w, "l1", max_seconds=2)
    assert np.all(s.info["theta"] >= 0)
    assert s.sensitivity("l1") == pytest.approx(1.0)
    t = _tree_start(4, 16)
    assert t.sum(axis=1).tolist() == [8.0, 8.0, 16.0, 0.0]
    with pytest.raises(InvalidParameterError, match="theta"):
        p_identity(-np.ones((2, 8)), "l1")
    with pytest.raises(InvalidParameterError, match="max_seconds"):
        optimize_p_identity(w, "l2", max_seconds=0)


def test_default_p():
    assert default_p(256, "l2") == 128
    assert default_p(4096, "l2") == 1024
    assert default_p(65536, "l2") == 256
    assert default_p(1024, "l1") == 64
    assert default_p(4096, "l1") == 32


@pytest.mark.parametrize("cls", [Prefix, AllRange])
def test_spectral_rows_are_orthogonal(cls):
    w = cls(64)
    theta = _spectral_start(w, 16, 2**30)
    fast = _p_identity_value(theta, w, "l2", orthogonal_rows=True)
    assert fast == pytest.approx(_p_identity_value(theta, w, "l2"), rel=1e-10)
    # the shortcut is wrong for rows that are not orthogonal (the tree start)
    tree = _tree_start(16, 64)
    assert _p_identity_value(tree, w, "l2", orthogonal_rows=True) != pytest.approx(
        _p_identity_value(tree, w, "l2"), rel=1e-3
    )
