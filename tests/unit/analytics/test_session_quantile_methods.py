"""Session medians and quantiles with method= (exponential, inverse, smooth, ptr, auto): accurate
on concentrated data with wide bounds, explain() names the mechanism and the rule that chose it,
public refusals before any charge, neighbouring tables fail alike, and a Session-level audit of
the inverse mechanism with a unit of several rows."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session, median, quantile
from dpkit.errors import InvalidParameterError, UnsupportedQueryError
from dpkit.testing import EXTREME_FLOATS, add_one_unit, audit_samples, check_session_failures

WIDE = (-1e6, 1e6)


def _table(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"user": np.arange(n), "g": np.arange(n) % 2, "x": rng.normal(100, 1, n)})


def _session(df: pd.DataFrame, engine: str = "duckdb", **options: Any) -> Session:
    options.setdefault("max_rows", 1)
    return Session(df, privacy_unit="user", budget=dp.ApproxDP(100, 1e-3), engine=engine, **options)


@pytest.mark.parametrize(
    ("method", "extra", "mechanism"),
    [
        ("inverse", {}, "inverse sensitivity mechanism"),
        ("smooth", {}, "smooth sensitivity mechanism"),
        ("ptr", {"ptr_bound": 0.2}, "propose-test-release mechanism"),
    ],
)
@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_data_dependent_medians_beat_the_coarse_grid(
    method: str, extra: dict[str, Any], mechanism: str, engine: str, seeded: None
) -> None:
    df = _table()
    session = _session(df, engine)
    query = (
        session.query().group_by("g", keys=[0, 1]).agg(median("x", WIDE, method=method, **extra))
    )
    text = session.explain(query, epsilon=1, delta=1e-6)
    assert mechanism in text and f"method={method!r} requested" in text
    release = session.evaluate(query, epsilon=1, delta=1e-6)
    truth = df.groupby("g")["x"].median().to_numpy()
    got = release.table["median_x"].to_numpy()
    # the coarse exponential grid has a step of ~1000 over these bounds
    assert np.all(np.abs(got - truth) < 3), (got, truth)
    # the ledger records the smooth method's noise family (its guarantee depends on it)
    names = {"inverse": "inverse_sensitivity", "smooth": "smooth_sensitivity(cauchy)"}
    assert (
        names.get(method, "propose_test_release")
        in session.compile(query, epsilon=1, delta=1e-6).mechanisms
    )


def test_the_ledger_records_the_smooth_zcdp_noise_family() -> None:
    session = Session(_table(), privacy_unit="user", budget=dp.ZCDP(10), max_rows=1)
    query = session.query().agg(median("x", WIDE, method="smooth", noise="student_t"))
    assert session.compile(query, rho=0.5).mechanisms == ("smooth_sensitivity(student_t)",)
    session.evaluate(query, rho=0.5)
    reserve = [e for e in session.ledger.history() if e.kind == "reserve"][-1]
    assert reserve.mechanism == "smooth_sensitivity(student_t)"


def test_auto_rule_uses_public_inputs_only() -> None:
    session = _session(_table())
    no_range = session.query().agg(median("x", WIDE))
    assert "auto: no n_range declared" in session.explain(no_range, epsilon=1)
    assert "exponential mechanism" in session.explain(no_range, epsilon=1)
    many = session.query().agg(median("x", WIDE, n_range=(2000, 10**6)))
    text = session.explain(many, epsilon=1)
    assert "inverse sensitivity mechanism" in text and "auto: the inverse" in text
    few = session.query().agg(quantile("x", 0.99, WIDE, n_range=(100, 200)))
    text = session.explain(few, epsilon=1)
    assert "exponential mechanism" in text and "too few rows" in text
    # the decision is the same on any table with the same schema (no rows are read)
    other = _session(_table(10, seed=3))
    assert other.explain(many, epsilon=1) == session.explain(many, epsilon=1)


def test_refusals_before_any_charge() -> None:
    session = Session(_table(), privacy_unit="user", budget=dp.PureDP(10), max_rows=1)
    with pytest.raises(InvalidParameterError):
        median("x", WIDE, method="magic")
    with pytest.raises(InvalidParameterError):
        median("x", WIDE, method="ptr")  # no proposed bound
    with pytest.raises(InvalidParameterError):
        median("x", WIDE, n_range=(5, 2))
    ptr = session.query().agg(median("x", WIDE, method="ptr", ptr_bound=1))
    with pytest.raises(UnsupportedQueryError):
        session.evaluate(ptr, epsilon=1)  # a pure budget has no δ for the test
    assert session.spent == dp.PureDP(0)


@pytest.mark.parametrize(
    ("method", "extra"),
    [("inverse", {}), ("smooth", {}), ("ptr", {"ptr_bound": 1}), ("exponential", {})],
)
def test_neighbours_fail_alike(method: str, extra: dict[str, Any]) -> None:
    base = pd.DataFrame({"user": [1, 2, 3, 4, 5], "g": [0, 0, 0, 0, 1], "x": [1.0, 2, 2, 2, 3]})
    pairs = [add_one_unit(base, "user", [{"g": 0, "x": v}]) for v in EXTREME_FLOATS[::4]]
    pairs.append(add_one_unit(base, "user", [{"g": 1, "x": 1e308}, {"g": 1, "x": math.nan}]))
    result = check_session_failures(
        pairs,
        lambda s: (
            s.query()
            .group_by("g", keys=[0, 1, 2])  # group 2 is empty on both sides
            .agg(median("x", (0, 10), method=method, **extra))
        ),
        privacy_unit="user",
        budget=dp.ApproxDP(10, 1e-3),
        session_options={"max_rows": 2, "engine": "pandas"},
        epsilon=1,
        delta=1e-6,
    )
    assert result.passed, result
    assert result.released_pairs == len(pairs)


def test_ptr_refusal_is_released_as_nan() -> None:
    # bimodal: the median sits between two far modes, so it is unstable and PTR refuses
    df = pd.DataFrame({"user": np.arange(400), "x": np.where(np.arange(400) % 2, 0.0, 900.0)})
    session = _session(df)
    query = session.query().agg(median("x", (0, 1000), method="ptr", ptr_bound=0.01))
    release = session.evaluate(query, epsilon=1, delta=1e-6)
    assert math.isnan(release.table["median_x"][0])
    assert "NaN means PTR refused" in release.accuracy["median_x"].note
    assert release.loss == dp.ApproxDP(1, 1e-6)


# ------------------------------------------------------------------------------ audit
def _audit_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ties and duplicates; the added unit's 3 rows (max_rows=3) all sit far above the median."""
    base = pd.DataFrame({"user": [1, 2, 3, 4], "x": [10.0] * 4})
    return add_one_unit(base, "user", [{"x": 100.0}] * 3)


def _releases(df: pd.DataFrame, size: int) -> np.ndarray:
    session = Session(df, privacy_unit="user", budget=dp.PureDP(10**6), engine="pandas", max_rows=3)
    query = session.query().agg(median("x", (0, 127), method="inverse"))
    compiled = session.compile(query, epsilon=1)
    results = [session.engine.run(plan) for plan in compiled.plans]
    return np.array(
        [float(compiled.release(results)[0]["main"]["median_x"][0]) for _ in range(size)]
    )


def test_session_inverse_median_passes_audit_with_multi_row_units(seeded: None) -> None:
    a_table, b_table = _audit_tables()
    a, b = _releases(a_table, 1000), _releases(b_table, 1000)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1).passed


def _smooth_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The local sensitivity jumps: the median 0 sits next to a gap of 1000; one more unit at 0
    closes it."""
    base = pd.DataFrame({"user": np.arange(9), "x": [0.0] * 5 + [1000.0] * 4})
    return add_one_unit(base, "user", [{"x": 0.0}])


def _smooth_releases(df: pd.DataFrame, size: int) -> np.ndarray:
    session = Session(df, privacy_unit="user", budget=dp.PureDP(10**6), engine="pandas", max_rows=1)
    query = session.query().agg(median("x", (0, 1024), method="smooth"))
    compiled = session.compile(query, epsilon=1)
    results = [session.engine.run(plan) for plan in compiled.plans]
    return np.array(
        [float(compiled.release(results)[0]["main"]["median_x"][0]) for _ in range(size)]
    )


def test_session_smooth_median_passes_audit_where_local_sensitivity_jumps(seeded: None) -> None:
    a_table, b_table = _smooth_tables()
    a, b = _smooth_releases(a_table, 1000), _smooth_releases(b_table, 1000)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1).passed


def test_ptr_spends_its_weights_share_of_delta_and_needs_public_keys() -> None:
    from dpkit.analytics import count

    session = _session(_table())
    both = session.query().agg(count(), median("x", WIDE, method="ptr", ptr_bound=1))
    compiled = session.compile(both, epsilon=1, delta=1e-6, mechanism="laplace")
    assert compiled.split["median_x"] == dp.ApproxDP(Fraction(1, 2), Fraction(1, 2 * 10**6))
    assert compiled.loss <= dp.ApproxDP(1, 1e-6)
    private = session.query().group_by("g").agg(median("x", WIDE, method="ptr", ptr_bound=1))
    with pytest.raises(UnsupportedQueryError):
        session.compile(private, epsilon=1, delta=1e-6)
    assert session.spent == dp.ApproxDP(0, 0)
