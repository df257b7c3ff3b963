"""Session.sample_and_aggregate: public refusals before any read, the ledger, blocks by unit on
every local engine, failures mapped to the public default (neighbouring tables fail alike), and
an audit on a unit whose move changes its block's output."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
import dpkit.analytics._sample_aggregate as sa_module
from dpkit.analytics import Session, col
from dpkit.errors import BudgetExceededError, DPError, InvalidParameterError
from dpkit.testing import add_one_unit, audit_samples, check_session_failures

ENGINES = ["duckdb", "pandas"]


def _table(units: int = 60, rows_per_unit: int = 2) -> pd.DataFrame:
    ids = np.repeat(np.arange(units), rows_per_unit)
    x = (ids % 7).astype(np.float64)
    return pd.DataFrame({"user": ids, "x": x, "y": 2.0 * x + 1.0})


def _mean_x(rows: pd.DataFrame) -> float:
    return float(rows["x"].mean()) if len(rows) else 3.0


def _session(df: pd.DataFrame, engine: str = "duckdb", budget: Any = None) -> Session:
    return Session(df, privacy_unit="user", budget=budget or dp.PureDP(10), engine=engine)


@pytest.fixture
def no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the data was read")

    monkeypatch.setattr(sa_module, "engine_blocks", fail)


@pytest.mark.parametrize(
    ("options", "parameter"),
    [
        ({"m": 1}, "m"),
        ({"m": 0}, "m"),
        ({"m": 61}, "m"),  # more blocks than the fewest declared units
        ({"m": None}, "m"),  # neither m nor an accuracy target
        ({"m": 4, "aggregator": "mean"}, "aggregator"),
        ({"m": 4, "output_range": (5, 5)}, "output_range"),
        ({"m": 4, "output_shape": (0,)}, "output_shape"),
        ({"m": 4, "default": 99}, "default"),
        ({"m": 4, "columns": ["nope"]}, "columns"),
        ({"m": 4, "columns": []}, "columns"),
        ({"m": 4, "n_range": (0, 10)}, "n_range"),
        ({"m": 4, "probe": pd.DataFrame({"x": []})}, "fn"),  # fn fails on the public probe
    ],
)
def test_refusals_come_before_any_read_and_charge(
    no_reads: None, options: dict[str, Any], parameter: str
) -> None:
    session = _session(_table())
    kwargs: dict[str, Any] = {
        "columns": ["x"],
        "output_range": (0, 10),
        "n_range": (60, 100),
        "epsilon": 1,
    }
    kwargs.update(options)

    def strict_mean(rows: pd.DataFrame) -> float:
        if rows.empty:
            raise ValueError("empty")
        return float(rows["x"].mean())

    with pytest.raises(InvalidParameterError) as info:
        session.sample_and_aggregate(strict_mean, **kwargs)
    assert info.value.parameter == parameter
    assert session.spent == dp.PureDP(0)


def test_over_budget_reads_nothing(no_reads: None) -> None:
    session = _session(_table(), budget=dp.PureDP(1))
    with pytest.raises(BudgetExceededError):
        session.sample_and_aggregate(
            _mean_x, columns=["x"], output_range=(0, 10), n_range=(60, 100), m=4, epsilon=2
        )
    assert session.spent == dp.PureDP(0)


def test_choose_m_picks_m_from_public_inputs() -> None:
    session = _session(_table(400))
    release = session.sample_and_aggregate(
        _mean_x,
        columns=["x"],
        output_range=(0, 10),
        n_range=(400, 1000),
        accuracy=0.5,
        epsilon=1,
    )
    expected = dp.sensitivity.choose_m((400, 1000), 0.5, epsilon=1, output_width=10)
    assert f"m={expected} chosen by choose_m" in release.plan
    assert release.loss == dp.PureDP(1)
    assert session.spent == dp.PureDP(1)


@pytest.mark.parametrize("engine", ENGINES)
def test_blocks_partition_units_not_rows(engine: str) -> None:
    df = _table(90, rows_per_unit=3)
    seen: list[set[int]] = []

    def record(rows: pd.DataFrame) -> float:
        seen.append(set(rows["user"].astype(int)))
        return 0.0

    session = _session(df, engine)
    session.sample_and_aggregate(
        record, columns=["user"], output_range=(-1, 1), n_range=(90, 90), m=6, epsilon=1
    )
    assert len(seen) == 6
    union = set().union(*seen)
    assert union == set(range(90))
    assert sum(len(s) for s in seen) == 90  # disjoint: each unit in one block
    assert sum(1 for s in seen if s) >= 4  # the hash spreads 90 units over the blocks


@pytest.mark.parametrize("engine", ENGINES)
def test_base_query_filters_and_derives_first(engine: str) -> None:
    df = _table(60)
    sizes: list[float] = []

    def record(rows: pd.DataFrame) -> float:
        sizes.append(float(rows["z"].max()) if len(rows) else -1.0)
        return 0.0

    base = session_base = _session(df, engine)
    query = base.query().filter(col("x") < 3).with_column("z", col("x") * 10)
    session_base.sample_and_aggregate(
        record,
        columns=["z"],
        base=query,
        output_range=(-1, 1),
        n_range=(20, 60),
        m=3,
        epsilon=1,
    )
    assert max(sizes) == 20.0  # x < 3 kept, z = 10·x


@pytest.mark.parametrize("engine", ENGINES)
def test_vector_output_and_accurate_mean(engine: str, seeded: None) -> None:
    rng = np.random.default_rng(3)
    units = 3000
    df = pd.DataFrame({"user": np.arange(units), "x": rng.normal(5, 1, units)})
    df["y"] = 3 * df["x"] + rng.normal(0, 0.1, units)
    session = _session(df, engine, dp.PureDP(100))

    def slope(rows: pd.DataFrame) -> np.ndarray:
        return np.polyfit(rows["x"], rows["y"], 1)

    release = session.sample_and_aggregate(
        slope,
        columns=["x", "y"],
        output_shape=2,
        output_range=(-10, 10),
        n_range=(3000, 3000),
        m=30,
        epsilon=20,
        names=["slope", "intercept"],
    )
    assert list(release.table.columns) == ["slope", "intercept"]
    assert abs(release.table["slope"][0] - 3) < 0.5
    assert release.accuracy["slope"].mechanism == "sample_and_aggregate:winsorized_mean"


def _fragile(rows: pd.DataFrame) -> Any:
    """Fails in every way on a block that holds a marked row."""
    x = rows["x"].to_numpy()
    if (x == -1).any():
        raise ZeroDivisionError("a block with the marked unit")
    if (x == -2).any():
        return np.array([1.0, 2.0])  # wrong shape
    if (x == -3).any():
        return math.nan
    if (x == -4).any():
        raise SystemExit(3)
    return float(x.mean()) if len(x) else 0.0


@pytest.mark.parametrize("engine", ENGINES)
def test_neighbours_that_break_the_function_fail_alike(engine: str) -> None:
    base = _table(40)
    pairs = [add_one_unit(base, "user", [{"x": v, "y": 0.0}]) for v in (-1.0, -2.0, -3.0, -4.0)]
    pairs.append(add_one_unit(base, "user", [{"x": math.inf, "y": 0.0}, {"x": 1e308, "y": 1.0}]))
    pairs.append(add_one_unit(base, "user", [{"x": math.nan, "y": math.nan}]))

    def build(session: Session) -> Any:
        return lambda: session.sample_and_aggregate(
            _fragile,
            columns=["x"],
            output_range=(0, 10),
            n_range=(40, 100),
            m=4,
            epsilon=1,
        )

    result = check_session_failures(
        pairs,
        build,
        privacy_unit="user",
        budget=dp.PureDP(1),
        session_options={"engine": engine},
    )
    assert result.passed, result
    assert result.released_pairs == len(pairs)


def test_failed_block_gets_the_public_default(seeded: None) -> None:
    """Every block fails: the inverse median of eight defaults is the default."""
    df = _table(40)
    df.loc[:, "x"] = -1.0  # every block raises
    session = _session(df, "pandas", dp.PureDP(100))
    release = session.sample_and_aggregate(
        _fragile,
        columns=["x"],
        output_range=(0, 10),
        n_range=(40, 40),
        m=8,
        epsilon=50,
        default=7,
        aggregator="inverse_median",
    )
    assert abs(release.table["value"][0] - 7) < 0.5


def test_engine_error_after_reservation_stays_charged(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("secret value 42")

    monkeypatch.setattr(sa_module, "engine_blocks", broken)
    session = _session(_table())
    with pytest.raises(DPError) as info:
        session.sample_and_aggregate(
            _mean_x, columns=["x"], output_range=(0, 10), n_range=(60, 60), m=4, epsilon=1
        )
    assert "42" not in str(info.value)
    assert session.spent == dp.PureDP(1)


def test_rho_budget_is_charged_as_zcdp() -> None:
    session = _session(_table(), budget=dp.ZCDP(1))
    release = session.sample_and_aggregate(
        _mean_x, columns=["x"], output_range=(0, 10), n_range=(60, 60), m=4, rho=0.5
    )
    assert isinstance(release.loss, dp.ZCDP)
    assert release.loss.rho <= 0.5


# ------------------------------------------------------------------------------ audit
# m = 160 blocks at ε = 1: the inverse-sensitivity median (2^40 candidates) then concentrates on
# the data (path length 81 beyond it: 2^40·e^{-40.5} ≈ 3e-6), so 60 releases per side give the
# audit the power to refute ε = 1 on the broken variant.
RELEASES = 60
M = 160


def _audit_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Neighbours: one more unit whose 1,000 rows drag its block's mean to the top of the range
    (and, hashed by row, reach every block)."""
    base = pd.DataFrame({"user": np.arange(M), "row": np.arange(M), "x": np.zeros(M)})
    rows = [{"x": 1e9, "row": 1000 + i} for i in range(1000)]
    return add_one_unit(base, "user", rows)


def _releases(df: pd.DataFrame) -> np.ndarray:
    session = Session(df, privacy_unit="user", budget=dp.PureDP(10**6), engine="pandas")
    out = []
    for _ in range(RELEASES):
        release = session.sample_and_aggregate(
            lambda rows: float(rows["x"].to_numpy().mean()) if len(rows) else 0.0,
            columns=["x"],
            output_range=(0, 10),
            n_range=(M, M + 1),
            m=M,
            epsilon=1,
            aggregator="inverse_median",
        )
        out.append(float(release.table["value"][0]))
    return np.array(out)


def test_session_sample_and_aggregate_passes_audit(seeded: None) -> None:
    a_table, b_table = _audit_tables()
    a, b = _releases(a_table), _releases(b_table)
    for first, second in ((a, b), (b, a)):
        assert audit_samples(first, second, 1).passed


def test_blocks_by_row_are_flagged(monkeypatch: pytest.MonkeyPatch, seeded: None) -> None:
    """Broken variant: rows (not units) hashed into blocks. The added unit's rows then land in
    every block, all m outputs jump, and the audit refutes ε = 1."""
    real = sa_module.engine_blocks

    def by_row(engine: Any, steps: Any, unit: str, *rest: Any) -> Any:
        return real(engine, steps, "row", *rest)

    monkeypatch.setattr(sa_module, "engine_blocks", by_row)
    a_table, b_table = _audit_tables()
    a, b = _releases(a_table), _releases(b_table)
    assert not (audit_samples(a, b, 1).passed and audit_samples(b, a, 1).passed)


def test_an_engine_without_blocks_is_refused_before_the_reservation(no_reads: None) -> None:
    class WithoutBlocks:  # a third-party engine: runs plans, computes no blocks
        name = "custom"

        def __init__(self, engine: Any) -> None:
            self._inner = engine

        def __getattr__(self, attr: str) -> Any:
            if attr in ("blocks", "check_blocks"):
                raise AttributeError(attr)
            return getattr(self._inner, attr)

    session = _session(_table())
    session.engine = WithoutBlocks(session.engine)  # type: ignore[assignment]
    with pytest.raises(InvalidParameterError) as info:
        session.sample_and_aggregate(
            _mean_x, columns=["x"], output_range=(0, 10), n_range=(60, 60), m=4, epsilon=1
        )
    assert info.value.parameter == "engine"
    assert session.spent == dp.PureDP(0)
