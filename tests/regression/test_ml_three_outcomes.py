"""dpkit.ml fits have three outcomes (issue 21): refused before anything is reserved (ledger
unchanged), released and charged, or a failure after the reservation that does not come from
public inputs, recorded as failed and reported as what it is. Each case below was decided after
the reservation (or raised a raw Python error, or released a silently wrong number) before."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.errors import DPError, InvalidDataError, InvalidParameterError, UnreadableDataError
from dpkit.ledger import Ledger
from dpkit.ml import KMeans, LinearRegression, fit_kmeans, fit_linear_regression

pytestmark = pytest.mark.usefixtures("seeded")


def _ledger(budget: Any = None) -> Ledger:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("t", budget if budget is not None else dp.PureDP(10**9))
    return ledger


def _kinds(ledger: Ledger) -> list[str]:
    return [e.kind for e in ledger.history("t") if e.kind not in ("create", "alert")]


X = np.random.default_rng(0).uniform(0, 10, (200, 2))  # test data only
Y = X @ np.array([0.5, -1.0]) + 2


def _lr(**kwargs: Any) -> LinearRegression:
    return LinearRegression(**{"epsilon": 1, "bounds_X": (0, 10), "bounds_y": (-20, 20), **kwargs})


REFUSED: dict[str, tuple[Callable[[Ledger], Any], type[Exception], str]] = {
    # tiny budgets failed in the samplers after the charge (OverflowError)
    "regression epsilon=1e-300": (
        lambda led: _lr(epsilon=1e-300).fit(X, Y, ledger=led, dataset="t"),
        InvalidParameterError,
        "epsilon=1e-300",
    ),
    "regression rho=1e-300": (
        lambda led: _lr(epsilon=None, rho=1e-300).fit(X, Y, ledger=led, dataset="t"),
        InvalidParameterError,
        "rho=1e-300",
    ),
    "kmeans epsilon=1e-300": (
        lambda led: KMeans(1, epsilon=1e-300, bounds=(0, 10)).fit(X, ledger=led, dataset="t"),
        InvalidParameterError,
        "epsilon=1e-300",
    ),
    "lloyd epsilon=1e-4 over 100 steps": (
        lambda led: KMeans(1, epsilon=1e-4, bounds=(0, 10), method="lloyd", max_iter=100).fit(
            X, ledger=led, dataset="t"
        ),
        InvalidParameterError,
        "each Lloyd step",
    ),
    # a coreset share that rounds to 0 (to 1/1000) gave the coreset ε = 0 after the charge
    "coreset_share=1e-4": (
        lambda led: KMeans(2, epsilon=1, bounds=(0, 10), coreset_share=1e-4).fit(
            X, ledger=led, dataset="t"
        ),
        InvalidParameterError,
        "coreset_share",
    ),
    # grid_em's exponential mechanism refused ε / sensitivity > 2^900 after the charge
    "grid_em epsilon=1e300": (
        lambda led: KMeans(2, epsilon=1e300, bounds=(0, 10), method="grid_em").fit(
            X, ledger=led, dataset="t"
        ),
        InvalidParameterError,
        "epsilon",
    ),
    # a declared dtype is schema: refused before, not after the charge as a data error
    "string array": (
        lambda led: _lr().fit(X.astype(str), Y, ledger=led, dataset="t"),
        InvalidDataError,
        "dtype",
    ),
    "object target": (
        lambda led: _lr().fit(X, Y.astype(object), ledger=led, dataset="t"),
        InvalidDataError,
        "dtype",
    ),
    "kmeans string array": (
        lambda led: KMeans(2, epsilon=1, bounds=(0, 10)).fit(
            X.astype(str), ledger=led, dataset="t"
        ),
        InvalidDataError,
        "dtype",
    ),
    "rows of X and y differ": (
        lambda led: _lr().fit(X, Y[:5], ledger=led, dataset="t"),
        InvalidDataError,
        "different number of rows",
    ),
    # raw Python errors before: ValueError, OverflowError, TypeError
    "ragged list": (
        lambda led: _lr().fit([[1, 2], [3]], [1, 2], ledger=led, dataset="t"),
        InvalidDataError,
        "equal length",
    ),
    "no columns": (
        lambda led: KMeans(2, epsilon=1, bounds=(0, 10)).fit(
            np.zeros((5, 0)), ledger=led, dataset="t"
        ),
        InvalidDataError,
        "no columns",
    ),
    "epsilon=1e308": (
        lambda led: KMeans(2, epsilon=1e308, bounds=(0, 10)).fit(X, ledger=led, dataset="t"),
        InvalidParameterError,
        "at most 1e+09",
    ),
    "bounds_X=5": (
        lambda led: _lr(bounds_X=5).fit(X, Y, ledger=led, dataset="t"),
        InvalidParameterError,
        "(lo, hi)",
    ),
    # released ±inf coefficients before
    "tiny feature box, huge target box": (
        lambda led: _lr(bounds_X=(0, 1e-300), bounds_y=(-1e150, 1e150)).fit(
            X, Y, ledger=led, dataset="t"
        ),
        InvalidParameterError,
        "overflow",
    ),
    # released, after minutes, 5000 starting centres drawn from a pool of 4096
    "k = 5000": (
        lambda led: KMeans(5000, epsilon=1, bounds=(0, 10), method="lloyd").fit(
            X, ledger=led, dataset="t"
        ),
        InvalidParameterError,
        "at most 4096",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_public_inputs_are_refused_before_the_reservation(case: str) -> None:
    run, error, text = REFUSED[case]
    ledger = _ledger()
    with pytest.raises(error, match=None) as info:
        run(ledger)
    assert text in str(info.value)
    assert _kinds(ledger) == []


def test_nullable_pandas_columns_are_numbers() -> None:
    """A pandas Int64 frame is a numeric schema; np.asarray makes it an object array, which
    was refused after the charge as "expected numbers, got dtype object"."""
    ledger = _ledger()
    frame = pd.DataFrame({"a": pd.array([1, 5, None, 9], dtype="Int64"), "b": [1.0, 2, 3, 4]})
    model = KMeans(2, epsilon=1, bounds=(0, 10)).fit(frame, ledger=ledger, dataset="t")
    assert np.all(np.isfinite(model.cluster_centers_))
    assert _kinds(ledger) == ["reserve", "commit"]


@pytest.mark.parametrize("epsilon", [1e6, 1e8])
def test_large_epsilon_regression_is_the_exact_fit(epsilon: float) -> None:
    """Large ε is how users check a pipeline against the truth. The sums were clamped to 2^50
    grid steps of a grid that shrinks with the noise: at ε = 10^6 the statistics of 20,000 rows
    were clamped and the coefficient of 0.5 came back as 1.98."""
    rng = np.random.default_rng(1)  # test data only
    x = rng.uniform(0, 10, (20_000, 2))
    y = x @ np.array([0.5, -1.0]) + 2 + rng.normal(0, 1, 20_000)
    ols = np.linalg.lstsq(np.column_stack([x, np.ones(len(x))]), y, rcond=None)[0]
    model = LinearRegression(
        epsilon=epsilon, bounds_X=(0, 10), bounds_y=(-20, 20), method="sufficient_statistics"
    ).fit(x, y)
    assert np.allclose(model.coef_, ols[:2], atol=1e-3)
    assert abs(model.intercept_ - ols[2]) < 1e-2


def test_large_epsilon_kmeans_is_the_exact_mean() -> None:
    x = np.tile([7.5, 2.5], (50_000, 1))
    model = KMeans(1, epsilon=1e6, bounds=(0, 10), method="lloyd", max_iter=1).fit(x)
    assert np.allclose(model.cluster_centers_[0], [7.5, 2.5], atol=1e-3)


# ----------------------------------------------------------------------------- Session
def _session(ledger: Ledger, n: int = 300) -> Session:
    rng = np.random.default_rng(2)  # test data only
    df = pd.DataFrame({"u": np.arange(n), "a": rng.normal(size=n), "b": rng.normal(size=n)})
    df["y"] = df.a + df.b
    df["when"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(np.arange(n), unit="D")
    df["name"] = "x"
    ledger.create_budget("s", dp.PureDP(100), privacy_unit="u")
    return Session(df, "u", dp.PureDP(100), ledger=ledger, dataset="s", engine="pandas", max_rows=1)


def _session_kinds(ledger: Ledger) -> list[str]:
    return [e.kind for e in ledger.history("s") if e.kind not in ("create", "alert")]


SESSION_REFUSED: dict[str, tuple[Callable[[Session], Any], str]] = {
    # hung building k·(k - 1) comparisons (then ran out of memory), before
    "k = 10^6": (
        lambda s: fit_kmeans(s, ["a", "b"], 10**6, bounds=(-4, 4), epsilon=50),
        "n_clusters=1000000",
    ),
    "k = 200 on a Session": (
        lambda s: fit_kmeans(s, ["a", "b"], 200, bounds=(-4, 4), epsilon=50, method="lloyd"),
        "at most 180",
    ),
    # named epsilon=Fraction(1, 10000000), a per-step share the caller never wrote
    "epsilon=1e-4 over 100 steps": (
        lambda s: fit_kmeans(s, ["a"], 1, bounds=(-4, 4), epsilon=1e-4, max_iter=100),
        "epsilon=0.0001",
    ),
    # refused by the Session's compiler with its internal expression ("col('t').fill_null(0.5):
    # cannot compare temporal values with numeric values"); now by kind, naming the column
    "a temporal feature": (
        lambda s: fit_kmeans(s, ["a", "when"], 2, bounds=(-4, 4), epsilon=1),
        "'when' is a temporal column",
    ),
    "a text target": (
        lambda s: fit_linear_regression(
            s, ["a"], "name", bounds_X=(-4, 4), bounds_y=(-8, 8), epsilon=1
        ),
        "'name' is a string column",
    ),
    "duplicate regression features": (
        lambda s: fit_linear_regression(
            s, ["a", "a"], "y", bounds_X=(-4, 4), bounds_y=(-8, 8), epsilon=1
        ),
        "distinct",
    ),
}


@pytest.mark.parametrize("case", SESSION_REFUSED)
def test_session_fits_refuse_public_inputs_before_the_reservation(case: str) -> None:
    run, text = SESSION_REFUSED[case]
    ledger = Ledger.open(":memory:")
    session = _session(ledger)
    with pytest.raises(InvalidParameterError) as info:
        run(session)
    assert text in str(info.value)
    assert _session_kinds(ledger) == []
    assert session.remaining == dp.PureDP(100)


def test_an_internal_error_after_the_reservation_is_reported_as_internal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the post-processing used to be reported as "the query failed while reading
    the data", which sends the user to check a table that is fine."""
    import dpkit.ml._session as module

    def broken(*args: Any) -> np.ndarray:
        raise ZeroDivisionError("exact sum 12.5")

    monkeypatch.setattr(module, "lloyd_update", broken)
    ledger = Ledger.open(":memory:")
    with pytest.raises(DPError) as info:
        fit_kmeans(_session(ledger), ["a"], 2, bounds=(-4, 4), epsilon=1, method="lloyd")
    message = str(info.value)
    assert "internal error" in message and "ZeroDivisionError" in message
    assert "reading the data" not in message and "12.5" not in message
    assert _session_kinds(ledger) == ["reserve", "fail"]
    failed = [e for e in ledger.history("s") if e.kind == "fail"]
    assert "ZeroDivisionError" in str(failed[0])


def test_an_engine_error_is_reported_as_a_read_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger.open(":memory:")
    session = _session(ledger)

    def unreadable(plan: Any) -> Any:
        raise OSError("disk said: row 7 = 3.25")

    monkeypatch.setattr(session.engine, "run", unreadable)
    with pytest.raises(UnreadableDataError) as info:  # as the Session reports it: one door
        fit_kmeans(session, ["a"], 2, bounds=(-4, 4), epsilon=1, method="lloyd")
    assert "could not be read" in str(info.value) and "OSError" in str(info.value)
    assert "3.25" not in str(info.value)
    assert _session_kinds(ledger) == ["reserve", "fail"]


def test_regression_fit_on_a_session_spends_exactly_its_loss() -> None:
    ledger = Ledger.open(":memory:")
    session = _session(ledger)
    model = fit_linear_regression(
        session, ["a", "b"], "y", bounds_X=[(-4, 4), (-4, 4)], bounds_y=(-8, 8), epsilon=2
    )
    assert model.privacy_loss_ == dp.PureDP(2)
    assert session.remaining == dp.PureDP(Fraction(98))


def _fits() -> list[tuple[str, Callable[[Any, Ledger], Any]]]:
    return [
        (
            "kmeans",
            lambda x, led: KMeans(n_clusters=2, bounds=[(0, 10), (0, 10)], epsilon=1).fit(
                x, ledger=led, dataset="t"
            ),
        ),
        (
            "regression",
            lambda x, led: LinearRegression(
                bounds_X=[(0, 10), (0, 10)], bounds_y=(0, 10), epsilon=1
            ).fit(x, [1.0] * 50, ledger=led, dataset="t"),
        ),
    ]


@pytest.mark.parametrize("odd", [None, "a private text"])
@pytest.mark.parametrize(("kind", "fit"), _fits())
def test_one_odd_value_in_a_list_never_makes_a_fit_fail(kind: str, fit: Any, odd: Any) -> None:
    """Review of the door: with a Python list (no declared dtype) one person's None or text
    made the fit fail after the charge, so whether it released depended on that value. Values
    are now read one by one; a non-number is NaN, which the row map sends to the midpoint."""
    ledger = Ledger.open(":memory:")
    ledger.create_budget("t", dp.PureDP(10))
    rows: list[list[Any]] = X[:50].tolist()
    rows[7][0] = odd
    fit(rows, ledger)
    assert _kinds(ledger) == ["reserve", "commit"]


@pytest.mark.parametrize(("kind", "fit"), _fits())
def test_a_sparse_matrix_is_refused_before_the_reservation(kind: str, fit: Any) -> None:
    import scipy.sparse as sparse

    ledger = Ledger.open(":memory:")
    ledger.create_budget("t", dp.PureDP(10))
    with pytest.raises(InvalidDataError, match="sparse"):
        fit(sparse.csr_matrix(X[:50]), ledger)
    assert _kinds(ledger) == []
