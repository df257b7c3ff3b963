"""Exact privacy checks of the Session marginals(...) / ranges(...) releases on neighbouring tables.

For a compiled query (one salt), the bounded plan runs on a small table and on each of its
neighbours (one unit removed, including a heavy unit with more rows than the bound). The
released values are post-processing of the measurements y = M·x + Z (M: the measured marginals,
or the integer strategy matrix B), Z independent lattice noise per coordinate, so the exact loss
of the pair is the sum over coordinates of the lattice's loss at that coordinate's integer shift:
computed from the noise pmf by :mod:`dpkit.testing._exact` (exact Fractions for ε, Rényi
divergences summed over coordinates for ρ). It must not exceed the claimed loss — and the same
check must FAIL when the engine keeps one row more per unit than the noise was calibrated for
(the contribution bound under-declared by one). A statistical audit on the same neighbours
(releases projected on the cell the heavy unit moves) passes, and fails for a bound declared
8× too small.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

import dpkit as dp
from dpkit.analytics import Session, marginals, ranges
from dpkit.analytics._engines import DuckDBEngine, PandasEngine
from dpkit.analytics._planner import _rows_by_group
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner.families._marginals import plan_marginals, plan_ranges
from dpkit.core._losses import ZCDP, PureDP
from dpkit.testing import DEFAULT_ALPHAS, check_tiered_pure_dp
from dpkit.testing._exact import _radius, _renyi
from dpkit.workloads import verify_marginals_exact

_CONFIRMED: set[Fraction] = set()
DOMAINS = {"age": ["young", "old"], "sex": ["f", "m"], "n": [0, 1, 2]}
K = 2  # max_rows


def _table() -> pd.DataFrame:
    rows = [
        (0, "young", "f", 0, 1.0),
        (0, "old", "m", 2, 5.0),
        (1, "young", "m", 1, 2.0),
        (1, "young", "m", 1, 2.0),
        (1, "old", "f", 0, 7.0),
        (2, "old", "f", 2, 0.0),
        (3, "zzz", "f", 2, 99.0),  # outside the domains
        (4, None, "m", 1, None),
    ]
    # the heavy unit: 5 identical rows, all in one cell (worst case for L2)
    rows += [(9, "young", "f", 0, 3.0)] * 5
    return pd.DataFrame(rows, columns=["uid", "age", "sex", "n", "v"])


def _neighbours(df: pd.DataFrame) -> list[pd.DataFrame]:
    return [df[df["uid"] != u].reset_index(drop=True) for u in sorted(df["uid"].unique())]


def _realised(noises: list[Any], shifts: np.ndarray, claim: PureDP | ZCDP) -> float:
    """The exact loss of y = exact + Z (independent lattice noise per coordinate) between two
    inputs whose exact outputs differ by ``shifts``."""
    pairs = [(z, int(abs(s))) for z, s in zip(noises, shifts.tolist(), strict=True) if s != 0]
    if isinstance(claim, PureDP):
        total = Fraction(0)
        for z, s in pairs:
            total += Fraction(check_tiered_pure_dp(z, s, claim.epsilon).realised)
        return float(total)
    alphas = np.asarray([float(a) for a in DEFAULT_ALPHAS])
    distinct: dict[tuple[int, int], tuple[Any, int, int]] = {}
    for z, s in pairs:
        _, _, count = distinct.get((id(z), s), (z, s, 0))
        distinct[(id(z), s)] = (z, s, count + 1)
    sums = np.zeros(alphas.size)
    wide = any(float(getattr(z, "sigma2", 0)) > 1e6 for z, _, _ in distinct.values())
    if not wide:
        for z, s, count in distinct.values():
            radius, _ = _radius(z, 1e-30)
            sums += count * np.asarray(_renyi(z, s, list(alphas), radius))
    else:
        # a wide discrete Gaussian (a quantised strategy B: shifts up to ~2^17, σ alike; each
        # numerical divergence takes seconds): the numerical divergence at the largest shift
        # (once per lattice) confirms D_α = α·s²/(2σ²) (exact for integer shifts, Canonne,
        # Kamath & Steinke 2020), and the sum over coordinates uses it
        largest: dict[int, tuple[Any, int]] = {}
        for z, s, _ in distinct.values():
            if s > largest.get(id(z), (z, 0))[1]:
                largest[id(z)] = (z, s)
        for z, s in largest.values():
            if z.sigma2 in _CONFIRMED:
                continue
            _CONFIRMED.add(z.sigma2)
            radius, _ = _radius(z, 1e-30)
            orders = [1.5, 2.0, 4.0, 8.0]
            numeric = np.asarray(_renyi(z, s, orders, radius))
            closed = np.asarray(orders) * s * s / (2 * float(z.sigma2))
            assert np.allclose(numeric, closed, rtol=1e-6)
        for z, s, count in distinct.values():
            sums += count * alphas * s * s / (2 * float(z.sigma2))
    return float(np.max(sums / alphas)) if pairs else 0.0


def _claimed(loss: Any) -> float:
    return float(loss.epsilon) if isinstance(loss, PureDP) else float(loss.rho)


def _worst(
    session_budget: Any, agg: Any, kind: str, broken: bool, engine: type
) -> tuple[float, float]:
    df = _table()
    session = Session(df, privacy_unit="uid", budget=session_budget, max_rows=K)
    query = session.query().agg(agg)
    budget = {"epsilon": 1} if isinstance(session_budget, PureDP) else {"rho": Fraction(1, 2)}
    compiled = session.compile(query, **budget)
    validated = query.plan.aggregations[0]  # type: ignore[union-attr]
    share = Share("pure", Fraction(1)) if "epsilon" in budget else Share("zcdp", Fraction(1, 2))
    plan: Any = (plan_marginals if kind == "marginals" else plan_ranges)(validated, share, K)
    assert _claimed(plan.loss) <= _claimed(compiled.loss) * (1 + 1e-12)
    bounded = compiled.plans[1]
    if broken:  # the engine keeps K + 1 rows per unit; the noise stays calibrated for K
        bounded = replace(bounded, max_rows=K + 1)

    def measured(table: pd.DataFrame) -> tuple[list[Any], np.ndarray]:
        x = plan.histogram(_rows_by_group(engine(table).run(bounded), bounded)[0])
        if kind == "marginals":
            tables = plan.measured_tables(x)
            noises = [plan.noise[a] for a in tables for _ in range(tables[a].size)]
            return noises, np.concatenate([t.reshape(-1) for t in tables.values()])
        b = plan.quantised.integer_matrix
        y = np.asarray(b @ np.clip(x, 0, plan.quantised.cap), dtype=np.int64)
        return [plan.lattice] * y.size, y

    noises, y = measured(df)
    worst = 0.0
    for other in _neighbours(df):
        _, y2 = measured(other)
        worst = max(worst, _realised(noises, y - y2, plan.loss))
    return worst, _claimed(plan.loss)


CASES = [
    (dp.PureDP(1), marginals("all_2way", DOMAINS, "m"), "marginals"),
    (dp.ZCDP(Fraction(1, 2)), marginals("all_2way", DOMAINS, "m"), "marginals"),
    (dp.PureDP(1), ranges("v", (0, 7, 1), kind="prefix", name="r"), "ranges"),
    (dp.ZCDP(Fraction(1, 2)), ranges("v", (0, 7, 1), kind="all_range", name="r"), "ranges"),
]


@pytest.mark.parametrize(("budget", "agg", "kind"), CASES)
def test_release_is_exactly_private_on_neighbouring_tables(
    budget: Any, agg: Any, kind: str
) -> None:
    worst, claimed = _worst(budget, agg, kind, broken=False, engine=DuckDBEngine)
    assert worst > 0  # some neighbour changes the output
    assert worst <= claimed * (1 + 1e-9)


@pytest.mark.parametrize(("budget", "agg", "kind"), CASES)
def test_under_declared_bound_fails_the_same_check(budget: Any, agg: Any, kind: str) -> None:
    worst, claimed = _worst(budget, agg, kind, broken=True, engine=PandasEngine)
    assert worst > claimed * (1 + 1e-6)


def test_marginal_noise_verifies_and_fails_one_row_over() -> None:
    agg = marginals("all_2way", DOMAINS, "m")
    for share in (Share("pure", Fraction(1)), Share("zcdp", Fraction(1, 2))):
        plan = plan_marginals(agg, share, K)
        assert verify_marginals_exact(plan.noise, plan.loss, K).passed
        assert not verify_marginals_exact(plan.noise, plan.loss, K + 1).passed


# ----------------------------------------------------------------- statistical audit
def _audit_samples(
    kind: str, share: Share, engine_rows: int, runs: int
) -> tuple[np.ndarray, np.ndarray, Any]:
    """Released values of the cell (or query) the heavy unit moves, on the table with and
    without the heavy unit; the noise is calibrated for k = 1, the engine keeps
    ``engine_rows`` rows per unit."""
    heavy = pd.DataFrame([(9, "young", "f", 0, 3.0)] * 8, columns=["uid", "age", "sex", "n", "v"])
    df = pd.concat([_table()[lambda t: t["uid"] != 9], heavy], ignore_index=True)
    session = Session(df, privacy_unit="uid", budget=dp.PureDP(10), max_rows=1)
    agg = (
        marginals([("age", "sex")], DOMAINS, "m")
        if kind == "marginals"
        else ranges("v", (0, 7, 1), kind="prefix", name="r")
    )
    query = session.query().agg(agg)
    compiled = session.compile(query, epsilon=1)
    validated = query.plan.aggregations[0]  # type: ignore[union-attr]
    plan: Any = (plan_marginals if kind == "marginals" else plan_ranges)(validated, share, 1)
    bounded = replace(compiled.plans[1], max_rows=engine_rows)
    out = []
    for table in (df, df[df["uid"] != 9]):
        x = plan.histogram(_rows_by_group(PandasEngine(table).run(bounded), bounded)[0])
        released, _ = plan.release_arrays(x, runs=runs)
        # marginals: the (young, f) cell; ranges: the prefix count up to 3 (v = 3 moves it)
        out.append(released[0][:, 0, 0] if kind == "marginals" else released[:, 3])
    return out[0], out[1], plan.loss


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("kind", ["marginals", "ranges"])
@pytest.mark.parametrize("family", ["pure", "zcdp"])
def test_audit_on_neighbouring_tables(kind: str, family: str) -> None:
    from dpkit.testing import audit_samples, audit_samples_zcdp

    share = Share(family, Fraction(1) if family == "pure" else Fraction(1, 8))  # type: ignore[arg-type]

    def audit(a: np.ndarray, b: np.ndarray, loss: Any) -> Any:
        if family == "pure":
            return audit_samples(a, b, loss.epsilon, events="real")
        return audit_samples_zcdp(a, b, loss.rho, events="real")

    a, b, loss = _audit_samples(kind, share, 1, 20_000)
    assert audit(a, b, loss).passed
    # broken: the engine keeps all 8 rows of the heavy unit, the noise is for one row
    a, b, loss = _audit_samples(kind, share, 8, 20_000)
    assert not audit(a, b, loss).passed
