"""One ``Release`` (issue 22, docs/design.md "Releases"): every release dpkit makes is a
:class:`dpkit.Release` with the same meaning for ``value``, ``loss``, ``receipt``, ``accuracy``
and ``remaining``; the specialised releases are subclasses with names of their own that keep the
attribute names their users read; and ``Workload`` names one thing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpkit
import dpkit.accounting
import dpkit.analytics
import dpkit.analytics._query
import dpkit.workloads
from dpkit.accounting import Accountant
from dpkit.analytics import Session, TableRelease, count
from dpkit.core import PureDP, Release
from dpkit.ledger import BudgetMonitor, Ledger
from dpkit.mechanisms import make_laplace
from dpkit.workloads import (
    MarginalRelease,
    Prefix,
    WorkloadRelease,
    hierarchical,
    make_strategy_measurement,
    nonnegative,
    plan_residuals,
    reconstruct,
)


def test_one_release_class_under_one_name() -> None:
    assert dpkit.Release is Release
    assert not hasattr(dpkit.accounting, "Release")
    assert not hasattr(dpkit.analytics, "Release")
    for kind in (TableRelease, WorkloadRelease, MarginalRelease):
        assert issubclass(kind, Release)


def test_accountant_release_carries_the_budget_left() -> None:
    ledger = Ledger.open(":memory:", monitor=BudgetMonitor(log=False))
    ledger.create_budget("visits", PureDP(1))
    release = Accountant(ledger, "visits").release(make_laplace(sensitivity=1, epsilon=0.25), 1.0)
    assert type(release) is Release
    assert release.loss == PureDP(0.25)
    assert release.receipt is not None and release.accuracy is None
    assert release.remaining == PureDP(0.75) == ledger.remaining("visits")


def test_session_release_is_a_release_of_its_tables() -> None:
    frame = pd.DataFrame({"user": range(20)})
    session = Session(frame, privacy_unit="user", budget=PureDP(1), max_rows=1)
    release = session.evaluate(session.query().agg(count()), epsilon=0.5)
    assert isinstance(release, TableRelease) and isinstance(release, Release)
    assert release.value is release.tables and release.table is release.tables["main"]
    assert release.loss == PureDP(0.5) and release.remaining == PureDP(0.5)
    assert release.receipt is not None and set(release.accuracy) == {"count"}
    assert repr(release).startswith("TableRelease(tables=[main]")


def test_workload_and_marginal_releases_keep_their_names() -> None:
    m = make_strategy_measurement(hierarchical(8), rho=0.05)
    x = np.array([0, 0, 3, 0, 0, 1, 0, 0])
    release = reconstruct(Prefix(8), hierarchical(8), m, m(x))
    assert isinstance(release, Release) and release.receipt is None
    assert release.answers is release.value and release.variances is release.accuracy
    assert release.answers.shape == (8,) and release.variances is not None
    fixed = nonnegative(release, Prefix(8), m)
    assert fixed.variances is None and fixed.accuracy is None and fixed.loss == release.loss
    plan = plan_residuals((2, 3), [(0, 1)], 1.0)
    tables = {(): 6, (0,): np.array([2, 4]), (1,): np.array([1, 2, 3]), (0, 1): np.ones((2, 3))}
    marginals = plan.release(tables)
    assert isinstance(marginals, MarginalRelease) and isinstance(marginals, Release)
    assert marginals.tables is marginals.value and marginals.cell_variance is marginals.accuracy
    assert marginals.loss == plan.loss() and marginals.tables[(0, 1)].shape == (2, 3)


def test_releases_are_frozen() -> None:
    release = Release(1.0, PureDP(1))
    with pytest.raises(AttributeError):
        release.value = 2.0  # type: ignore[misc]
    table = TableRelease({"main": pd.DataFrame({"a": [1]})}, {}, PureDP(1))
    with pytest.raises(AttributeError):
        table.plan = "x"  # type: ignore[misc]


def test_workload_names_one_thing() -> None:
    """``dpkit.workloads.Workload`` is the matrix mechanism's workload; the analytics
    aggregation that :func:`dpkit.analytics.workload` builds is ``LinearQueries``."""
    assert not hasattr(dpkit.analytics._query, "Workload")
    assert "Workload" not in dpkit.analytics._query.__all__
    agg = dpkit.analytics.workload([[1, 1]], name="w")
    assert type(agg) is dpkit.analytics._query.LinearQueries
    assert not isinstance(agg, dpkit.workloads.Workload)
