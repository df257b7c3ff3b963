"""Accuracy of the Session marginals(...) / ranges(...) releases against their analytic variances.

The release step (the same code the Session's finisher calls, vectorised over independent
runs) runs 40,000 times on a fixed histogram; each query's empirical variance must match the
stated variance (the std_error column squared) within 5 %, and a plausible wrong formula (10 %
too small) must fail the same check. Small domains keep it to seconds; the seed is fixed so the
outcome is reproducible.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpkit.analytics import marginals, ranges
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner.families._marginals import plan_marginals, plan_ranges

RUNS = 40_000  # relative standard error of one query's variance estimate: sqrt(2/RUNS) = 0.7 %


def _check(samples: np.ndarray, truth: np.ndarray, variances: np.ndarray, tol: float) -> bool:
    bias = np.abs(samples.mean(axis=0) - truth) <= 5 * np.sqrt(variances / samples.shape[0])
    empirical = samples.var(axis=0, ddof=1)
    return bool(bias.all() and np.all(np.abs(empirical / variances - 1) <= tol))


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("family", ["pure", "zcdp"])
def test_marginal_cells_match_the_analytic_variance(family: str) -> None:
    agg = marginals("all_2way", {"a": [0, 1], "b": ["x", "y", "z"], "c": [True, False]})
    plan = plan_marginals(agg, Share(family, Fraction(1, 2)), 2)  # type: ignore[arg-type]
    x = np.arange(12, dtype=np.int64) * 3
    cube = x.reshape(2, 3, 2)
    truth = np.concatenate(
        [cube.sum(axis=2).ravel(), cube.sum(axis=1).ravel(), cube.sum(axis=0).ravel()]
    )
    tables, cell_vars = plan.release_arrays(x, runs=RUNS)  # RUNS independent releases
    samples = np.concatenate([t.reshape(RUNS, -1) for t in tables], axis=1)
    variances = np.concatenate(
        [np.full(t[0].size, v) for t, v in zip(tables, cell_vars, strict=True)]
    )
    single, _ = plan.release_arrays(x)  # the Session's path: one release, same shapes
    assert [t.shape for t in single] == [t.shape[1:] for t in tables]
    assert _check(samples, truth, variances, 0.05)
    # the stated expected total error is the sum of the cell variances
    assert np.isclose(variances.sum(), plan.expected_error(), rtol=0.02)
    # a wrong formula (10 % too small) fails the same check
    assert not _check(samples, truth, variances * 0.9, 0.05)


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize(("kind", "family"), [("prefix", "pure"), ("all_range", "zcdp")])
def test_range_answers_match_the_analytic_variance(kind: str, family: str) -> None:
    plan = plan_ranges(ranges("v", (0, 11, 1), kind=kind), Share(family, Fraction(1)), 3)  # type: ignore[arg-type]
    x = np.array([5, 0, 3, 9, 1, 1, 0, 4, 7, 2, 2, 8], dtype=np.int64)
    first, last = plan.bounds()
    c = np.concatenate([[0], np.cumsum(x)])
    truth = (c[last + 1] - c[first]).astype(np.float64)
    samples, variances = plan.release_arrays(x, runs=RUNS)
    assert plan.release_arrays(x)[0].shape == truth.shape
    assert _check(samples, truth, variances, 0.05)
    assert not _check(samples, truth, variances * 0.9, 0.05)
