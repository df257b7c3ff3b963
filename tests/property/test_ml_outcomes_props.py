"""Property test (issue 21): every dpkit.ml fit through a ledger has exactly three outcomes.

Hypothesis draws hostile fits — odd bounds forms (vector pairs, dicts, arrays, strings, NaN,
lo == hi, 1e200, subnormal widths, the wrong number of pairs), budgets from 1e-300 to 1e308
(NaN, negative, strings, fractions, both or neither of ε and ρ), extreme k, d, iteration
counts, methods and options, tables that are empty, tiny, NaN, ±inf or ±1e308 — for the four
entry points (KMeans.fit and LinearRegression.fit with a ledger, fit_kmeans and
fit_linear_regression on a Session), and compares the ledger before and after:

1. refused: a dpkit error (never a raw TypeError, ValueError, OverflowError ...), the ledger
   unchanged (no entry, nothing spent);
2. released: one reservation committed, the spend grown by exactly the reported
   ``privacy_loss_``, and finite numbers (an interval contains its estimate);
3. failed after the reservation: the reservation recorded as failed, its charge kept — and only
   when the test injected an I/O failure (the data's ``__array__`` or the engine's ``run``
   raising OSError). These inputs cannot fail otherwise: a failure after the reservation
   decided by public inputs is the bug the issue is about.

CI runs a few dozen examples (well under a minute); ``-m slow`` runs many more and DuckDB too.
"""

from __future__ import annotations

import sys
import warnings
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import dpkit as dp
from dpkit.analytics import Session
from dpkit.core._losses import ApproxDP, PrivacyLoss
from dpkit.errors import DPError
from dpkit.ledger import Ledger
from dpkit.ledger._model import charge_of
from dpkit.ml import KMeans, LinearRegression, fit_kmeans, fit_linear_regression
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed

NAN, INF = float("nan"), float("inf")

# ----------------------------------------------------------------------------- strategies
# Each parameter is sane most of the time and hostile otherwise, so that a fair share of the
# fits gets past every check and is released (or fails after reserving, when injected).


def sometimes(draw: Any, sane: Any, hostile: Any, rate: int = 8) -> Any:
    """A draw from ``hostile`` with probability about ``rate`` %, else from ``sane`` (a flat
    choice: hypothesis favours the ends of an integer range)."""
    return draw(hostile if draw(st.sampled_from([True] * rate + [False] * (100 - rate))) else sane)


HOSTILE_NUMBERS = st.sampled_from(
    [
        *(0, -1, 1e-300, 1e-100, 1e-30, 1e-15, 1e-7, 2e-6, 1e4, 1e9, 1e10, 1e308, NAN, INF),
        *("0.5", "1/3", "x", True, Fraction(2, 3), Decimal("0.7"), 10**400, None, [1]),
    ]
)
SANE_NUMBERS = st.one_of(st.sampled_from([0.5, 1, 3, 20]), st.floats(0.05, 30))
ENDS = st.sampled_from([0.0, -1.0, 3.0, -1e150, 1e150, 1e200, NAN, INF, -INF, 5e-324, 1e-300])
WIDTHS = st.sampled_from([0.0, 5e-324, 1e-300, 1e-12, 1.0, 8.0, 1e6, 1e10, 1e149, -1.0, NAN])


@st.composite
def pairs(draw: Any) -> Any:
    if draw(st.sampled_from([True] * 9 + [False])):
        lo = draw(st.sampled_from([-4.0, 0.0, -100.0, 1.0, -8]))
        return (lo, lo + draw(st.sampled_from([1.0, 8.0, 16, 200.0])))
    lo = draw(ENDS)
    return (lo, lo + draw(WIDTHS))


@st.composite
def bounds(draw: Any, d: int) -> Any:
    kind = draw(
        st.sampled_from(
            ["pair"] * 4 + ["per-feature"] * 4 + ["dict", "array", "vectors", "count", "odd"]
        )
    )
    if kind == "pair":
        return draw(pairs())
    if kind == "per-feature":
        return [draw(pairs()) for _ in range(d)]
    if kind == "dict":
        items = [draw(pairs()) for _ in range(d)]
        return {"lower": [lo for lo, _ in items], "upper": [hi for _, hi in items]}
    if kind == "array":
        return np.array([draw(pairs()) for _ in range(d)], dtype=np.float64)
    if kind == "vectors":  # the old (lower, upper) form: refused, never guessed
        items = [draw(pairs()) for _ in range(d)]
        return ([lo for lo, _ in items], [hi for _, hi in items])
    if kind == "count":
        return [draw(pairs()) for _ in range(draw(st.sampled_from([0, 1, d + 1, 2 * d + 1])))]
    return draw(
        st.sampled_from(
            [None, 5, "0,1", ("0", "1"), (True, False), (0, 1, 2), [(0, 1), (2,)], [], {"lo": 0}]
        )
    )


def budget_kwargs(draw: Any, kind: str, delta: bool = False) -> dict[str, Any]:
    """ε or ρ as ``kind`` says (sometimes both, or neither), sane or hostile values."""
    kind = sometimes(draw, st.just(kind), st.sampled_from(["both", "neither", "epsilon", "rho"]))
    out: dict[str, Any] = {}
    if kind in ("epsilon", "both"):
        out["epsilon"] = sometimes(draw, SANE_NUMBERS, HOSTILE_NUMBERS, rate=20)
    if kind in ("rho", "both"):
        out["rho"] = sometimes(draw, SANE_NUMBERS, HOSTILE_NUMBERS, rate=20)
    if delta and kind == "epsilon" and draw(st.integers(0, 4)) == 0:
        out["delta"] = draw(st.sampled_from([1e-6, 1e-6, 1e-300, 0.5, 0, 1, -1e-6, NAN]))
    return out


def kmeans_kwargs(draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "n_clusters": sometimes(
            draw,
            st.sampled_from([1, 2, 3, 5, np.int64(3)]),
            st.sampled_from([0, 200, 5000, 10**6, -1, 2.5, True, "3"]),
        ),
        "method": sometimes(draw, st.sampled_from(["lsh", "lloyd", "grid_em"]), st.just("km++")),
        "max_iter": sometimes(draw, st.sampled_from([None, 1, 2]), st.sampled_from([0, 101, -1])),
    }
    if draw(st.booleans()):
        out["coreset_share"] = sometimes(
            draw, st.sampled_from([0.2, 0.4, 0.9]), st.sampled_from([1e-4, 0.9996, 1, 0, 1.5, NAN])
        )
    if draw(st.booleans()):
        out["grid_size"] = sometimes(
            draw, st.sampled_from([None, 2, 64, 512]), st.sampled_from([1, 4096, 5000, True])
        )
    if draw(st.booleans()):
        out["n_candidates"] = sometimes(
            draw, st.sampled_from([16, 256, 2048]), st.sampled_from([1, 2, 8192, 10**5])
        )
    if draw(st.booleans()):
        out["em_radius"] = sometimes(
            draw, st.sampled_from([0.1, 0.5, 1.0]), st.sampled_from([0.0, 1e-9, 2.0, NAN])
        )
    return out


@st.composite
def arrays(draw: Any, d: int) -> np.ndarray:
    n = draw(st.sampled_from([0, 1, 2, 7, 40, 40]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)  # test data only
    x = rng.normal(0, 3, (n, d))
    if n and draw(st.booleans()):  # hostile cells
        cells = rng.integers(0, n * d, max(1, n * d // 4))
        x.flat[cells] = rng.choice([NAN, INF, -INF, 1e308, -1e308, 0.0], cells.size)
    return x


class Unreadable:
    """An input whose schema is fine but whose read fails like a lost file (OSError)."""

    dtype = np.dtype(np.float64)

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise OSError("the disk went away")


LEDGER_BUDGETS = [
    dp.PureDP(10),
    dp.PureDP(10**9),  # BUDGET_CEILING
    dp.ZCDP(10),
    dp.ZCDP(10**9),
    ApproxDP(Fraction(10), Fraction(1, 1000)),
]


@st.composite
def in_memory_fits(draw: Any) -> dict[str, Any]:
    d = draw(st.sampled_from([1, 1, 2, 3, 4]))
    estimator = draw(st.sampled_from(["kmeans", "linear"]))
    budget = draw(st.sampled_from(LEDGER_BUDGETS))
    kind = "rho" if isinstance(budget, dp.ZCDP) else "epsilon"
    spec: dict[str, Any] = {"estimator": estimator, "budget": budget}
    if estimator == "kmeans":
        spec["params"] = {
            "bounds": draw(bounds(d)),
            **budget_kwargs(draw, kind, delta=isinstance(budget, ApproxDP)),
            **kmeans_kwargs(draw),
        }
    else:
        spec["params"] = {
            "bounds_X": draw(bounds(d)),
            "bounds_y": draw(bounds(1)),
            "method": sometimes(
                draw, st.sampled_from(["adassp", "sufficient_statistics"]), st.just("ols")
            ),
            "fit_intercept": sometimes(draw, st.sampled_from([True, True, False]), st.just(1)),
            "confidence": sometimes(
                draw, st.sampled_from([0.9, 0.95]), st.sampled_from([1e-300, 1.0, 1 - 1e-16])
            ),
            **budget_kwargs(draw, "epsilon" if isinstance(budget, ApproxDP) else kind),
        }
    shape = sometimes(draw, st.just("ok"), st.sampled_from(["1-d", "no-columns", "wide", "3-d"]))
    x = draw(arrays(d))
    if shape == "1-d":
        x = x[:, 0]
    elif shape == "no-columns":
        x = np.zeros((x.shape[0], 0))
    elif shape == "wide":
        x = np.zeros((x.shape[0], d + 1))
    elif shape == "3-d":
        x = x.reshape(x.shape[0], d, 1)
    spec["inject"] = draw(st.integers(0, 9)) == 0
    spec["X"] = Unreadable(x.shape) if spec["inject"] else x
    rows = x.shape[0]
    spec["y"] = sometimes(draw, st.just(np.linspace(-1, 1, rows)), arrays(1).map(lambda a: a[:, 0]))
    return spec


COLUMNS = ["a", "b", "c", "i", "s", "flag", "empty", "zz", "__ml_z0"]


def table(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    frame = pd.DataFrame(
        {
            "u": np.arange(n) // 2,
            "a": rng.normal(0, 2, n),
            "b": rng.choice([NAN, INF, -INF, 1e308, 0.5, -3.0], n),
            "c": rng.uniform(-1, 1, n),
            "i": rng.integers(-5, 5, n),
            "s": rng.choice(["x", "y", "\u00e9"], n),
            "flag": rng.integers(0, 2, n).astype(bool),
            "empty": np.full(n, NAN),
        }
    )
    return frame


@st.composite
def session_fits(draw: Any) -> dict[str, Any]:
    d = draw(st.sampled_from([1, 1, 2, 3]))
    features = sometimes(
        draw, st.just(["a", "c", "b"][:d]), st.lists(st.sampled_from(COLUMNS), max_size=3)
    )
    estimator = draw(st.sampled_from(["kmeans", "linear"]))
    budget = draw(st.sampled_from([dp.PureDP(100), dp.ZCDP(100)]))
    kind = "rho" if isinstance(budget, dp.ZCDP) else "epsilon"
    spec: dict[str, Any] = {"estimator": estimator, "budget": budget, "features": features}
    params = budget_kwargs(draw, kind)
    # large budgets on a Session wait for the analytics fix of issue 21's "large ε fails after
    # the charge" (noise/_distributions.py): test_session_large_epsilon below tracks it
    for key in ("epsilon", "rho"):
        value = params.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 30:
            params[key] = 30
    width = max(1, len(features) if isinstance(features, list) else 1)
    if estimator == "kmeans":
        spec["params"] = {
            "bounds": draw(bounds(width)),
            **params,
            **kmeans_kwargs(draw),
            "max_rows": sometimes(
                draw, st.sampled_from([None, 1, 3]), st.sampled_from([0, 2**31, 2**70, 1.5, True])
            ),
        }
    else:
        spec["target"] = sometimes(draw, st.just("c"), st.sampled_from(["a", "s", "zz", "", 3]))
        spec["params"] = {
            "bounds_X": draw(bounds(width)),
            "bounds_y": draw(bounds(1)),
            "method": sometimes(
                draw, st.sampled_from(["adassp", "sufficient_statistics"]), st.just("ols")
            ),
            **params,
        }
    spec["n"] = draw(st.sampled_from([0, 1, 3, 30, 30]))
    spec["seed"] = draw(st.integers(0, 2**16))
    spec["inject"] = draw(st.integers(0, 9)) == 0
    return spec


# ----------------------------------------------------------------------------- the check
def _state(ledger: Ledger, dataset: str) -> tuple[list[Any], Any]:
    entries = [e for e in ledger.history(dataset) if e.kind != "alert"]
    return entries, ledger.budget(dataset).spend


def _check(
    ledger: Ledger,
    dataset: str,
    before: tuple[list[Any], Any],
    total: PrivacyLoss,
    model: Any,
    error: BaseException | None,
    injected: bool,
) -> None:
    entries, spend = _state(ledger, dataset)
    new = entries[len(before[0]) :]
    kinds = [e.kind for e in new]
    event(
        "released"
        if error is None
        else f"failed after reserving ({type(error).__name__})"
        if kinds
        else f"refused ({type(error).__name__} {getattr(error, 'parameter', '')})"
    )
    if error is None:  # released and charged exactly its reported loss
        assert kinds == ["reserve", "commit"], kinds
        assert new[0].loss == model.privacy_loss_
        assert spend == before[1] + charge_of(model.privacy_loss_, total, dataset, before[1])
        numbers = getattr(model, "cluster_centers_", None)
        if numbers is None:
            numbers = np.append(model.coef_, model.intercept_)
            if model.coef_ci_ is not None:
                low, high = model.coef_ci_[:, 0], model.coef_ci_[:, 1]
                assert np.all(low <= model.coef_) and np.all(model.coef_ <= high)
        assert np.all(np.isfinite(numbers))
        return
    if not kinds:  # refused before anything was reserved: one clear dpkit error
        assert isinstance(error, DPError), repr(error)
        assert spend == before[1]
        return
    # failed after the reservation: recorded, charged, and only for an injected I/O failure
    assert injected, f"a failure after the reservation from public inputs: {error!r}"
    assert kinds == ["reserve", "fail"], kinds
    assert spend == before[1] + charge_of(new[0].loss, total, dataset, before[1])


def run_in_memory(spec: dict[str, Any]) -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("t", spec["budget"])
    before = _state(ledger, "t")
    model: Any = None
    error: BaseException | None = None
    try:
        if spec["estimator"] == "kmeans":
            model = KMeans(**spec["params"]).fit(spec["X"], ledger=ledger, dataset="t")
        else:
            model = LinearRegression(**spec["params"]).fit(
                spec["X"], spec["y"], ledger=ledger, dataset="t"
            )
    except Exception as exc:  # the outcome is what is checked
        error = exc
    _check(ledger, "t", before, spec["budget"], model, error, spec["inject"])
    if error is not None and spec["inject"] and not isinstance(error, DPError):
        assert isinstance(error, OSError)  # reported as what it is


def run_session(spec: dict[str, Any], engine: str) -> None:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("s", spec["budget"], privacy_unit="u")
    session = Session(
        table(spec["n"], spec["seed"]),
        "u",
        spec["budget"],
        ledger=ledger,
        dataset="s",
        engine=engine,
        max_rows=2,
    )
    if spec["inject"]:

        def lost(plan: Any) -> Any:
            raise OSError("the disk went away")

        session.engine.run = lost  # type: ignore[method-assign]
    before = _state(ledger, "s")
    model: Any = None
    error: BaseException | None = None
    try:
        if spec["estimator"] == "kmeans":
            params = dict(spec["params"])
            model = fit_kmeans(session, spec["features"], params.pop("n_clusters"), **params)
        else:
            model = fit_linear_regression(
                session, spec["features"], spec["target"], **spec["params"]
            )
    except Exception as exc:  # the outcome is what is checked
        error = exc
    _check(ledger, "s", before, spec["budget"], model, error, spec["inject"])
    if error is not None and spec["inject"] and _state(ledger, "s")[0][len(before[0]) :]:
        assert isinstance(error, DPError) and "OSError" in str(error) and "data" in str(error)


PROPS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)


def _spec(estimator: str, x: Any, **params: Any) -> dict[str, Any]:
    """An explicit in-memory case (the classes issue 21 found, pinned as examples)."""
    base: dict[str, Any] = (
        {"n_clusters": 1, "bounds": (-4, 4)}
        if estimator == "kmeans"
        else {"bounds_X": (-4, 4), "bounds_y": (-4, 4)}
    )
    budget = dp.ZCDP(10) if "rho" in params else dp.PureDP(10**9)
    rows = len(x)
    return {
        "estimator": estimator,
        "budget": budget,
        "params": {**base, **params},
        "X": x,
        "y": np.zeros(rows),
        "inject": False,
    }


POINTS = np.random.default_rng(0).normal(0, 2, (40, 2))  # test data only


@settings(PROPS, max_examples=400)
@given(in_memory_fits())
@example(_spec("linear", POINTS, epsilon=1e-300))  # failed in the samplers after the charge
@example(_spec("linear", POINTS, rho=1e-100))
@example(_spec("kmeans", POINTS, epsilon=1e-30))
@example(_spec("kmeans", POINTS, n_clusters=2, epsilon=1e300, method="grid_em"))
@example(_spec("kmeans", POINTS, n_clusters=2, epsilon=1, coreset_share=1e-4))
@example(_spec("kmeans", POINTS.astype(str), n_clusters=2, epsilon=1))  # a declared dtype
@example(_spec("linear", [[1.0, 2.0], [3.0]], epsilon=1))  # ragged: a raw ValueError
@example(_spec("linear", POINTS, epsilon=1, bounds_X=5))  # a raw TypeError
@example(_spec("linear", POINTS, epsilon=1, bounds_X=(0, 1e-300), bounds_y=(-1e150, 1e150)))
@example(_spec("kmeans", POINTS, n_clusters=2, epsilon=1e6, method="lloyd"))
def test_in_memory_fits_have_three_outcomes(spec: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_deterministic_seed(7):
            run_in_memory(spec)


@settings(PROPS, max_examples=60)
@given(session_fits())
def test_session_fits_have_three_outcomes(spec: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_deterministic_seed(7):
            run_session(spec, "pandas")


@pytest.mark.slow
@settings(PROPS, max_examples=1500)
@given(in_memory_fits())
def test_in_memory_fits_have_three_outcomes_many(spec: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_deterministic_seed(11):
            run_in_memory(spec)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
@settings(PROPS, max_examples=200)
@given(spec=session_fits())
def test_session_fits_have_three_outcomes_many(engine: str, spec: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_deterministic_seed(11):
            run_session(spec, engine)


@pytest.mark.parametrize("estimator", ["kmeans", "linear"])
def test_session_large_epsilon(estimator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Session query with ε above ~746 × its sensitivity failed after the charge in a tail
    bound (fixed in the analytics slice of issue 21); a large-ε fit now releases."""
    monkeypatch.setattr(sys.modules[__name__], "event", lambda *args, **kwargs: None)
    spec = {
        "estimator": estimator,
        "budget": dp.PureDP(10**9),
        "features": ["a", "c"],
        "target": "c",
        "n": 30,
        "seed": 1,
        "inject": False,
        "params": {"n_clusters": 2, "bounds": (-8, 8), "epsilon": 1e6, "method": "lloyd"}
        if estimator == "kmeans"
        else {"bounds_X": (-8, 8), "bounds_y": (-1, 1), "epsilon": 1e6},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomnessWarning)
        with insecure_deterministic_seed(7):
            run_session(spec, "pandas")
