"""The column-normalised eigen-design and the closed-form tree/Haar errors (dpkit.workloads._eigen):
closed-form spectra against numpy eigh, the O(n log² n) error against the dense formula, the
chooser picking it, and the release refused (before any data) above the memory limit."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.workloads import (
    AllRange,
    EigenDesign,
    Explicit,
    Prefix,
    choose_strategy,
    eigen_design,
    expected_error,
    hierarchical,
    make_strategy_measurement,
    optimize_tree_weights,
    quantise,
    svd_bound,
    wavelet,
)
from dpkit.workloads._eigen import (
    _lower_hankel,
    _upper_convolution,
    closed_form_spectrum,
    eigen_ratio_without_normalisation,
    tree_unit_error,
)
from dpkit.workloads._strategies import _unit_error_explicit


def _dense_eigen_error(g: np.ndarray) -> tuple[float, np.ndarray]:
    """Σ_k λ_k^{-1/2}‖W D⁻¹ v_k‖² with numpy's eigh (the reference), and diag(S)."""
    lam, v = np.linalg.eigh(g)
    s_diag = (v * v) @ np.sqrt(lam)
    u = np.sqrt(s_diag)[:, None] * v
    return float(np.sum(np.sum(u * (g @ u), axis=0) / np.sqrt(lam))), s_diag


@pytest.mark.parametrize("cls", [Prefix, AllRange])
@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_closed_form_spectrum_matches_eigh(cls, n):
    w = cls(n)
    spec = closed_form_spectrum(w)
    assert spec is not None
    g = w.gram_dense()
    vecs = spec.vectors()
    # orthonormal eigenvectors with the closed-form eigenvalues: G v_k = λ_k v_k
    np.testing.assert_allclose(vecs @ vecs.T, np.eye(n), atol=1e-12)
    np.testing.assert_allclose(g @ vecs.T, vecs.T * spec.eigenvalues[None, :], atol=1e-9 * n * n)
    np.testing.assert_allclose(
        np.sort(spec.eigenvalues), np.linalg.eigvalsh(g), rtol=1e-10, atol=1e-10
    )
    # the Toeplitz-plus-Hankel identity for a weighted sum of v_k v_kᵀ (here S = G^{1/2})
    w_root = np.sqrt(spec.eigenvalues)
    s_dense = (vecs.T * w_root) @ vecs
    np.testing.assert_allclose(spec.weighted_diag(w_root), np.diag(s_dense), rtol=1e-11)


def test_wrong_eigenvector_type_is_caught():
    """The check above fails for a plausible wrong transform (DCT-II instead of DCT-VIII)."""
    n = 16
    j, k = np.meshgrid(np.arange(n), np.arange(n))
    wrong = np.cos((2 * j + 1) * k * np.pi / (2 * n))  # DCT-II
    wrong /= np.linalg.norm(wrong, axis=1, keepdims=True)
    g = Prefix(n).gram_dense()
    rayleigh = np.sum(wrong * (wrong @ g), axis=1)
    assert not np.allclose(g @ wrong.T, wrong.T * rayleigh[None, :], atol=1e-6)


def test_upper_convolution_brute_force():
    p = np.sin(np.arange(37) * 0.7) + 1.5
    q = np.cos(np.arange(37) * 1.3) + 2.0
    want = np.zeros(2 * 37 - 1)
    for a in range(37):
        for b in range(a + 1, 37):
            want[a + b] += p[a] * q[b]
    np.testing.assert_allclose(_upper_convolution(p, q), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", [Prefix, AllRange])
@pytest.mark.parametrize("n", [5, 64, 256, 1024])
def test_error_matches_dense_formula(cls, n):
    w = cls(n)
    d = eigen_design(w)
    ref, s_diag = _dense_eigen_error(w.gram_dense())
    np.testing.assert_allclose(d.column_scale**2, s_diag, rtol=1e-9)
    assert d.unit_error(w) == pytest.approx(ref, rel=1e-9)
    assert expected_error(w, d) == pytest.approx(ref, rel=1e-9)
    assert svd_bound(w) <= ref


def test_error_of_the_actual_matrix_and_unit_columns():
    """The dense A = Λ^{1/4}VᵀD has unit L2 columns and tr(G (AᵀA)⁻¹) equals the fast formula,
    also for a design evaluated on the other workload (Prefix design on AllRange)."""
    n = 48
    d = eigen_design(Prefix(n))
    a = d.dense()
    np.testing.assert_allclose(np.sum(a * a, axis=0), 1.0, rtol=1e-12)
    for w in (Prefix(n), AllRange(n)):
        g = w.gram_dense()
        direct = float(np.trace(np.linalg.solve(a.T @ a, g)))
        assert d.unit_error(w) == pytest.approx(direct, rel=1e-9)


def test_ratios_to_the_svd_bound_and_why_d_matters():
    for cls, limit, uniform in ((Prefix, 1.05, 1.8), (AllRange, 1.02, 1.07)):
        w = cls(4096)
        assert expected_error(w, eigen_design(w)) / svd_bound(w) < limit
        assert eigen_ratio_without_normalisation(w) > uniform  # A ∝ Λ^{1/4}Vᵀ without D
    # at n = 65,536 (closed forms only; no dense matrix)
    for cls, limit in ((Prefix, 1.02), (AllRange, 1.01)):
        w = cls(65536)
        assert 1 <= expected_error(w, eigen_design(w)) / svd_bound(w) < limit


def test_generic_workload_uses_dense_eigh():
    n = 32
    dense = eigen_design(Explicit(Prefix(n).dense()))
    closed = eigen_design(Prefix(n))
    assert dense.spectrum is None and closed.spectrum is not None
    w = Prefix(n)
    assert dense.unit_error(Explicit(w.dense())) == pytest.approx(closed.unit_error(w), rel=1e-9)
    # a rank-deficient workload still gives a full-rank, unit-column strategy
    low = Explicit(np.vstack([np.ones(n), np.arange(n, dtype=float)]))
    design = eigen_design(low)
    assert design.info["floored"] == n - 2
    a = design.dense()
    np.testing.assert_allclose(np.sum(a * a, axis=0), 1.0, rtol=1e-12)
    assert np.isfinite(expected_error(low, design))
    with pytest.raises(InvalidParameterError, match="max_dense_n"):
        eigen_design(Explicit(np.eye(40)), max_dense_n=32)


@pytest.mark.parametrize("cls", [Prefix, AllRange])
def test_tree_closed_forms_match_dense(cls):
    for n, kind, b in [(16, "hierarchical", 2), (64, "hierarchical", 4), (64, "wavelet", 2)]:
        w = cls(n)
        s = wavelet(n) if kind == "wavelet" else hierarchical(n, b)
        a = s.matrix.toarray()
        direct = float(np.trace(np.linalg.solve(a.T @ a, w.gram_dense())))
        got = tree_unit_error(w, kind, n, b)
        assert got == pytest.approx(direct, rel=1e-12)
        assert _unit_error_explicit(w, s, 2**30) == pytest.approx(direct, rel=1e-12)
    assert tree_unit_error(cls(24), "hierarchical", 24, 2) is None  # not a power of b
    assert tree_unit_error(cls(64), "wavelet", 64, 4) is None


def test_chooser_picks_the_eigen_design():
    choice = choose_strategy(Prefix(1024), "l2", optimise=False)
    assert isinstance(choice.strategy, EigenDesign)
    assert "column-normalised eigen-design" in choice.explain()
    assert choice.errors[choice.strategy.name] / choice.bound < 1.05
    # at n = 65,536: every candidate has a closed form; the note names the releasable best
    big = choose_strategy(AllRange(65536), "l2", optimise=False)
    assert isinstance(big.strategy, EigenDesign)
    assert big.errors[big.strategy.name] / big.bound < 1.01
    assert any("make_strategy_measurement refuses" in n for n in big.notes)
    assert "hierarchical(65536, b=16)" in big.errors
    # under L1 it is not a candidate; the best tree is chosen at n = 65,536
    l1 = choose_strategy(Prefix(65536), "l1", optimise=False)
    assert not isinstance(l1.strategy, EigenDesign)
    assert "hierarchical(65536" in l1.strategy.name
    # generic workloads get it through a dense eigh
    explicit = choose_strategy(Explicit(AllRange(64).dense()), "l2", optimise=False)
    assert isinstance(explicit.strategy, EigenDesign)


def test_release_refused_above_the_memory_limit_before_data():
    big = eigen_design(Prefix(65536))
    with pytest.raises(InvalidParameterError, match="eigen-design has no sparse form"):
        make_strategy_measurement(big, rho=1)
    small = eigen_design(Prefix(64))
    with pytest.raises(InvalidParameterError, match="max_bytes=1,000"):
        make_strategy_measurement(small, rho=1, max_bytes=1000)
    with pytest.raises(InvalidParameterError, match="sparse strategy"):
        quantise(small, max_bytes=1000)
    make_strategy_measurement(small, rho=1)  # fits: released like any dense strategy
    with pytest.raises(InvalidParameterError, match="Δ₁"):
        expected_error(Prefix(65536), big, "l1")
    assert expected_error(Prefix(64), small, "l1") > expected_error(Prefix(64), small, "l2")


def test_quantised_release_keeps_the_analytic_error():
    """The released strategy is A_q = round(A·2^k)·2^-k: its error (dense) stays within 0.1 %
    of the closed form, so the stated error is the released one."""
    w = AllRange(64)
    d = eigen_design(w)
    m = make_strategy_measurement(d, rho=1)
    q = m.info.quantised
    a = q.matrix().toarray()
    col2 = float(np.max(np.sum(a * a, axis=0)))
    err_q = col2 * float(np.trace(np.linalg.solve(a.T @ a, w.gram_dense())))
    assert err_q == pytest.approx(d.unit_error(w), rel=1e-3)


def test_prefix_query_variances_closed_form():
    """Per-query variances diag(W X⁻¹ Wᵀ) in O(n log² n) for Prefix equal the dense ones, and
    sum to the total error; AllRange (dense path) likewise."""
    e = np.sin(np.arange(37) * 0.3) + 2
    c = np.cos(np.arange(200) * 0.11)
    want = np.array([sum(e[a] * c[a + i + 1] for a in range(i)) for i in range(37)])
    np.testing.assert_allclose(_lower_hankel(e, c, 1), want, atol=1e-12)
    for w in (Prefix(7), Prefix(300), AllRange(40)):
        d = eigen_design(w)
        a = d.dense()
        cov = np.linalg.inv(a.T @ a)
        dense_w = w.dense()
        ref = np.sum((dense_w @ cov) * dense_w, axis=1)
        got = d.query_variances(w)
        np.testing.assert_allclose(got, ref, rtol=1e-9)
        assert float(np.sum(got)) == pytest.approx(d.unit_error(w), rel=1e-9)


@pytest.mark.parametrize("cls", [Prefix, AllRange])
def test_weighted_tree_closed_form_and_optimiser(cls):
    n = 64
    w = cls(n)
    weights = np.array([0.3, 1.0, 0.5, 0.8])  # b = 4: 4 levels
    s = hierarchical(n, 4, weights)
    a = s.matrix.toarray()
    direct = float(np.trace(np.linalg.solve(a.T @ a, w.gram_dense())))
    assert tree_unit_error(w, "hierarchical", n, 4, weights) == pytest.approx(direct, rel=1e-12)
    for norm in ("l1", "l2"):
        dense = _unit_error_explicit(w, s, 2**30) * s.sensitivity(norm) ** 2
        assert expected_error(w, s, norm) == pytest.approx(dense, rel=1e-12)
        best = optimize_tree_weights(w, norm, 2)
        assert best is not None and "weighted" in best.name
        err = expected_error(w, best, norm)
        assert err < expected_error(w, hierarchical(n, 2), norm)
        assert err == pytest.approx(best.info["objective"], rel=1e-9)
    assert optimize_tree_weights(cls(48), "l2", 2) is None  # closed form needs n = b^L
    with pytest.raises(InvalidParameterError, match="weights"):
        hierarchical(n, 4, [1.0, 0.0, 1.0, 1.0])


def test_chooser_uses_weighted_trees_under_l1_at_scale():
    choice = choose_strategy(AllRange(65536), "l1", optimise=False)
    assert choice.strategy.name.startswith("weighted hierarchical(65536")
    assert choice.errors[choice.strategy.name] < 0.8 * choice.errors["hierarchical(65536, b=16)"]


@pytest.mark.slow
@pytest.mark.parametrize("cls", [Prefix, AllRange])
def test_error_matches_blocked_sum_at_scale(cls):
    """At n = 8192 (no dense eigh): the O(n log² n) error against the O(n²) sum
    Σ_k λ_k^{-1/2}‖W D⁻¹ v_k‖² over the closed-form eigenvectors, in blocks of k."""
    n = 8192
    w = cls(n)
    d = eigen_design(w)
    spec = d.spectrum
    assert spec is not None
    j = np.arange(n, dtype=np.float64)[:, None]
    total = 0.0
    for start in range(0, n, 512):
        k = spec.freq[start : start + 512].astype(np.float64)[None, :]
        if spec.sign > 0:
            v = np.cos((2 * j + 1) * k * (np.pi / (2 * spec.period))) * (2 / np.sqrt(2 * n + 1))
        else:
            v = np.sin((j + 1) * k * (np.pi / spec.period)) * np.sqrt(2 / (n + 1))
        u = d.column_scale[:, None] * v
        mu = 1 / np.sqrt(spec.eigenvalues[start : start + 512])
        total += float(np.sum(mu * np.sum(u * w.gram_matmat(u), axis=0)))
    assert d.unit_error(w) == pytest.approx(total, rel=1e-9)
