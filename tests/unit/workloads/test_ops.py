"""dpkit.workloads: implicit operators agree with dense matrices; closed forms; bad input."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.errors import DPError, InvalidParameterError
from dpkit.workloads import (
    AllRange,
    Explicit,
    Identity,
    Kron,
    Marginals,
    Prefix,
    Total,
    VStack,
    WidthRange,
    svd_bound,
)

SMALL = [Identity(5), Total(5), Prefix(5), AllRange(5), WidthRange(5, 2)]


@pytest.mark.parametrize("w", SMALL, ids=lambda w: w.name)
def test_operator_matches_dense(w):
    d = w.dense()
    v = np.arange(5, dtype=float) - 2
    assert np.allclose(w.matmat(v), d @ v)
    assert np.allclose(w.rmatmat(np.ones(w.shape[0])), d.T @ np.ones(w.shape[0]))
    assert np.allclose(w.gram_matmat(np.eye(5)), d.T @ d)
    assert np.allclose(w.gram_diag(), np.sum(d * d, axis=0))
    assert np.allclose(np.sort(w.gram_eigenvalues()), np.sort(np.linalg.eigvalsh(d.T @ d)))


def test_kron_vstack_marginals():
    k = Kron([Prefix(3), AllRange(4)])
    assert np.allclose(k.dense(), np.kron(Prefix(3).dense(), AllRange(4).dense()))
    u = VStack([Prefix(4), Identity(4)], weights=[2.0, 1.0])
    assert np.allclose(u.dense(), np.vstack([2 * Prefix(4).dense(), np.eye(4)]))
    m = Marginals.all_kway([2, 3, 4], 2)
    x = np.arange(24)
    cube = x.reshape(2, 3, 4)
    expect = np.concatenate([cube.sum(2).ravel(), cube.sum(1).ravel(), cube.sum(0).ravel()])
    assert np.allclose(m.matmat(x), expect)
    assert svd_bound(k) == pytest.approx(svd_bound(Prefix(3)) * svd_bound(AllRange(4)))


def test_closed_form_svd_bounds_match_the_issue():
    assert svd_bound(Prefix(1024)) == pytest.approx(8668.86, rel=1e-5)
    assert svd_bound(AllRange(1024)) == pytest.approx(6.4007e6, rel=1e-4)
    assert Prefix(1024).gram_trace() == 524_800


def test_large_domains_never_dense():
    w = AllRange(65536)  # 2.1e9 queries: fine as an operator
    assert w.gram_matmat(np.ones(65536)).shape == (65536,)
    with pytest.raises(InvalidParameterError, match="max_bytes"):
        w.gram_dense()


def test_bad_input_is_refused():
    with pytest.raises(DPError):
        Explicit(np.array([["a", "b"]]))
    with pytest.raises(DPError):
        Explicit(np.array([[1.0, np.nan]]))
    with pytest.raises(DPError, match="rows"):
        Prefix(4).matmat(np.ones(5))
    with pytest.raises(DPError):
        VStack([Prefix(4), Prefix(5)])
    with pytest.raises(DPError):
        Marginals([2, 3], [(0, 5)])
    with pytest.raises(DPError):
        Prefix(0)
