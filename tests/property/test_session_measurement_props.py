"""Issue 22: ``Session.compile(query, ...)`` is a Measurement whose ``map(1)`` is exactly the
loss the ledger is charged and the loss ``explain()`` shows, for generated queries (every
aggregate family, public and private keys, WHERE, bounds, pure, (ε, δ) and zCDP budgets);
``map(k)`` is the group-privacy loss of the per-unit loss, in the ledger's form."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_session_outcomes_props import _session, queries

import dpkit as dp
from dpkit.analytics._planner._measurement import QueryMeasurement
from dpkit.core import Measurement, Transformation, compose, group_privacy

FAST = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _check(data: Any, engine: str) -> str:
    session = _session(engine)
    query, loss = data.draw(queries(session))
    try:
        measurement = session.compile(query, **loss)
    except dp.DPError:
        return "refused"
    assert isinstance(measurement, QueryMeasurement) and isinstance(measurement, Measurement)
    assert isinstance(measurement.bounding, Transformation)
    charge = measurement.map(1)
    assert measurement.loss == charge == measurement.charge
    assert str(charge) in measurement.explain()
    per_unit = measurement.compiled.loss  # type: ignore[union-attr]
    # the explanation is data: each part's loss composes its mechanisms' losses, the parts'
    # losses are the split, the ledger's mechanisms are the parts' uses, and each part's text
    # is in explain()
    parts = measurement.parts
    assert parts and {p.name: p.loss for p in parts} == dict(measurement.split)
    for part in parts:
        assert part.loss == compose(*(use.loss for use in part.uses))
        assert part.text in measurement.explain()
    used = {use.mechanism for part in parts for use in part.uses}
    assert tuple(sorted(used)) == measurement.mechanisms
    asked_delta = Fraction(loss["delta"]) if loss.get("delta") else None
    if isinstance(per_unit, dp.ZCDP) and asked_delta:
        assert charge == per_unit.to_approx(asked_delta)
        assert "charged to the ledger" in measurement.explain()
    else:
        assert charge == per_unit
    # a pipeline from a table is calibrated for one unit; two units cost the group loss
    try:
        two = measurement.map(2)
    except dp.InvalidParameterError:
        two = None  # a vacuous (ε, δ) group guarantee is refused
    if two is not None:
        expected = group_privacy(per_unit, 2)
        if isinstance(per_unit, dp.ZCDP) and asked_delta:
            expected = expected.to_approx(asked_delta)  # type: ignore[union-attr]
        assert two == expected
        assert charge <= two
    entries = len(session.ledger.history())
    try:
        release = session.evaluate(query, **loss)
    except dp.DPError:
        return "refused at evaluate"
    new = [e for e in session.ledger.history()[entries:] if e.kind in ("reserve", "commit")]
    assert [e.kind for e in new] == ["reserve", "commit"]
    assert new[0].loss == charge, (new[0].loss, charge)
    assert release.loss == charge
    assert release.plan == measurement.explain()
    assert new[0].mechanism == ", ".join(measurement.mechanisms)[:500]
    return "released"


@FAST
@given(data=st.data(), engine=st.sampled_from(["pandas", "duckdb"]))
def test_compile_map_equals_the_charge_and_the_explanation(data: Any, engine: str) -> None:
    _check(data, engine)


def test_the_property_sees_releases() -> None:
    """The generator releases often enough for the property to mean something."""
    outcomes: list[str] = []

    # derandomized: the same 20 examples every run (a random draw of them released only twice
    # in one CI run, a failure of this check of the generator, not of the property)
    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(data=st.data())
    def run(data: Any) -> None:
        outcomes.append(_check(data, "duckdb"))

    run()
    assert outcomes.count("released") >= 3, outcomes


@pytest.mark.parametrize("budget", [{"epsilon": 1, "delta": 1e-6}, {"rho": 0.5}, {"epsilon": 1}])
def test_a_gaussian_query_asked_with_delta_is_charged_its_conversion(budget: Any) -> None:
    session = _session("duckdb")
    query = session.query().agg(dp.analytics.sum("x", (0, 10)))
    mechanism = "auto" if budget == {"epsilon": 1} else "gaussian"
    measurement = session.compile(query, mechanism=mechanism, **budget)
    per_unit = measurement.compiled.loss  # type: ignore[union-attr]
    if "delta" in budget:
        assert isinstance(per_unit, dp.ZCDP)
        assert measurement.map(1) == per_unit.to_approx(Fraction(1, 10**6))
        assert isinstance(measurement.map(1), dp.ApproxDP)
    else:
        assert measurement.map(1) == per_unit
