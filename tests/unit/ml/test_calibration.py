"""Every noise mechanism dpkit.ml builds is calibrated for what the data can really do.

The estimators compose exactly verified mechanisms (Laplace / geometric / Gaussian / discrete
Gaussian on the grid, the exponential mechanism); their privacy rests on two facts per call that
only the estimator knows: the sensitivity it declares bounds how far one unit can move that
mechanism's input, and the budgets of the calls add up to no more than the loss it reports. The
audits in tests/statistical/test_ml_privacy.py test whole fits statistically, and a constant
factor in one calibration slips past them; these tests check the two facts exactly, on hard
neighbours (a unit at a far corner, added to a dataset), by recording every mechanism call:

* each call's declared sensitivity covers the realised change of its input between the
  neighbours (L1 for pure-DP noise, L2 for zCDP noise, the range of the utility change for the
  monotone exponential mechanism), with the same public state on both sides;
* the calls' ε (or ρ) add up to at most the loss the fit reports.

docs/verification.md §6 lists the mutants of the calibrations these tests kill.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.ml._common as common
import dpkit.ml._kmeans as km
from dpkit.ml import KMeans, LinearRegression
from dpkit.ml._common import Box, check_budget, map_rows


class _Recorder:
    """Wraps the mechanism constructors dpkit.ml uses; each call of a built mechanism is logged
    as (kind, declared sensitivity, ε or ρ, the input it was given)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Fraction, Fraction, np.ndarray]] = []

    def wrap(self, kind: str, make: Callable[..., Any], first_is_budget: bool = False) -> Any:
        def build(*args: Any, **kwargs: Any) -> Any:
            mechanism = make(*args, **kwargs)
            if first_is_budget:  # make_exponential(epsilon, sensitivity, ...)
                budget, sensitivity = Fraction(args[0]), Fraction(args[1])
            else:
                sensitivity = Fraction(args[0])
                budget = Fraction(kwargs.get("epsilon", kwargs.get("rho")))
            recorder = self

            class Logged:
                info = getattr(mechanism, "info", {})

                def __call__(self, value: Any) -> Any:
                    recorder.calls.append(
                        (kind, sensitivity, budget, np.array(value, dtype=np.float64))
                    )
                    return mechanism(value)

            return Logged()

        return build


@contextmanager
def _recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Recorder]:
    rec = _Recorder()
    with monkeypatch.context() as patch:
        patch.setattr(common, "make_laplace", rec.wrap("l1", common.make_laplace))
        patch.setattr(common, "make_geometric", rec.wrap("l1", common.make_geometric))
        patch.setattr(common, "make_gaussian", rec.wrap("l2", common.make_gaussian))
        patch.setattr(
            common, "make_discrete_gaussian", rec.wrap("l2", common.make_discrete_gaussian)
        )
        patch.setattr(km, "make_exponential", rec.wrap("em", km.make_exponential, True))
        yield rec


def _check_pair(
    a: list[tuple[str, Fraction, Fraction, np.ndarray]],
    b: list[tuple[str, Fraction, Fraction, np.ndarray]],
    claimed: Fraction,
) -> list[float]:
    """The calls on the two neighbours pair up with the same public parameters; each declared
    sensitivity covers the realised change; the budgets sum to at most ``claimed``. Returns the
    realised change of every call (so a test can also see that the neighbours are hard)."""
    assert len(a) == len(b) and a, "the neighbours must make the same (public) calls"
    realised = []
    for (kind, sens, budget, x), (kind_b, sens_b, budget_b, y) in zip(a, b, strict=True):
        assert (kind, sens, budget) == (kind_b, sens_b, budget_b)
        diff = (y - x).reshape(-1)
        if kind == "l1":
            change = float(np.abs(diff).sum())
        elif kind == "l2":
            change = float(np.sqrt((diff**2).sum()))
        else:  # monotone exponential mechanism: shift-invariant, one-sided change
            change = float(diff.max() - diff.min())
        assert change <= float(sens) * (1 + 1e-12), (kind, change, float(sens))
        realised.append(change)
    assert sum(c[2] for c in a) <= claimed
    return realised


def _far_neighbours(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A clustered dataset and the same with one row at the far corner (+1, ..., +1) added."""
    rng = np.random.default_rng(seed)  # test data, not privacy noise
    x = np.clip(rng.normal(-0.5, 0.1, size=(n, d)), -1, 1)
    return x, np.vstack([x, np.ones((1, d))])


@pytest.mark.parametrize("kind", ["pure", "zcdp"])
@pytest.mark.parametrize("d", [1, 3, 8])
def test_lloyd_step_is_calibrated_for_one_far_row(
    monkeypatch: pytest.MonkeyPatch, kind: str, d: int
) -> None:
    box = Box(-np.ones(d), np.ones(d))
    x, y = _far_neighbours(200, d, d)
    budget = check_budget(Fraction(1), None) if kind == "pure" else check_budget(None, Fraction(1))
    share = Fraction(1, 3)
    centres = km._public_spread(4, d)
    runs = []
    for data in (x, y):
        fixed, scaled = map_rows(data, box)
        with _recording(monkeypatch) as rec:
            km._private_lloyd_step(fixed, scaled, centres, budget, share)
        runs.append(rec.calls)
    realised = _check_pair(runs[0], runs[1], share)
    # hard: the far row moves the count by 1 and the sums by the full declared sensitivity
    assert realised[0] == 1.0
    assert realised[1] == pytest.approx(d if kind == "pure" else np.sqrt(d))


@pytest.mark.parametrize("kind", ["pure", "zcdp"])
def test_coreset_histogram_is_calibrated_for_one_far_row(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    d = 5
    box = Box(-np.ones(d), np.ones(d))
    x, y = _far_neighbours(300, d, 11)
    budget = check_budget(Fraction(1), None) if kind == "pure" else check_budget(None, Fraction(1))
    hashed = km.lsh_hash(d, None)  # public randomness: the same hash on both sides
    monkeypatch.setattr(km, "lsh_hash", lambda *_: hashed)
    runs = []
    for data in (x, y):
        fixed, scaled = map_rows(data, box)
        with _recording(monkeypatch) as rec:
            km._coreset_release(fixed, scaled, budget, Fraction(1, 2), None)
        runs.append(rec.calls)
    realised = _check_pair(runs[0], runs[1], Fraction(1, 2))
    assert realised[0] == 1.0 and realised[1] == pytest.approx(d if kind == "pure" else d**0.5)


@pytest.mark.parametrize("rows_per_unit", [1, 3])
def test_grid_em_is_calibrated_for_a_unit_of_far_rows(
    monkeypatch: pytest.MonkeyPatch, rows_per_unit: int
) -> None:
    """The Session's grid_em: one unit may add ``rows_per_unit`` rows, all at the far corner."""
    d, g, k = 2, 6, 3
    h = np.zeros(g**d, dtype=np.int64)
    h[:4] = 50  # a cluster near the low corner
    far = h.copy()
    far[-1] += rows_per_unit
    runs = []
    for hist in (h, far):
        with _recording(monkeypatch) as rec:
            km.grid_em_select(hist, k, d, g, Fraction(1, 3), rows_per_unit=rows_per_unit)
        runs.append(rec.calls[:1])  # the first selection: the same (empty) prefix on both sides
    realised = _check_pair(runs[0], runs[1], Fraction(1, 3))
    assert realised[0] == pytest.approx(rows_per_unit * km._em_cap(d, g, 1.0))


@pytest.mark.parametrize(
    ("method", "budget"),
    [
        ("lloyd", {"epsilon": 1}),
        ("lloyd", {"rho": Fraction(1, 2)}),
        ("lsh", {"epsilon": 1}),
        ("lsh", {"rho": Fraction(1, 2)}),
        ("grid_em", {"epsilon": 1}),  # pure ε only (the exponential mechanism)
    ],
)
def test_kmeans_fit_spends_at_most_its_reported_loss(
    monkeypatch: pytest.MonkeyPatch, method: str, budget: dict[str, Any]
) -> None:
    x, _ = _far_neighbours(300, 2, 3)
    with _recording(monkeypatch) as rec:
        model = KMeans(3, bounds=(-1, 1), method=method, **budget).fit(x)
    spent = sum(c[2] for c in rec.calls)
    claimed = model.privacy_loss_.epsilon if "epsilon" in budget else model.privacy_loss_.rho
    assert rec.calls and spent <= Fraction(claimed)


@pytest.mark.parametrize("budget", [{"epsilon": 1}, {"rho": Fraction(1, 2)}])
@pytest.mark.parametrize("intercept", [True, False])
def test_regression_statistics_are_calibrated_for_one_extreme_row(
    monkeypatch: pytest.MonkeyPatch, budget: dict[str, Any], intercept: bool
) -> None:
    """AdaSSP's XᵀX, Xᵀy and yᵀy: one added row with every feature and the target at a bound
    moves each by its full declared sensitivity (counting the intercept column), not more."""
    rng = np.random.default_rng(5)  # test data, not privacy noise
    d = 4
    x = rng.uniform(-0.2, 0.2, size=(100, d))
    y = rng.uniform(-0.2, 0.2, size=100)
    x2, y2 = np.vstack([x, np.ones((1, d))]), np.append(y, 1.0)
    runs, losses = [], []
    for data, target in ((x, y), (x2, y2)):
        with _recording(monkeypatch) as rec:
            model = LinearRegression(
                bounds_X=(-1, 1), bounds_y=(-1, 1), fit_intercept=intercept, **budget
            ).fit(data, target)
        runs.append(rec.calls)
        losses.append(model.privacy_loss_)
    claimed = losses[0].epsilon if "epsilon" in budget else losses[0].rho
    realised = _check_pair(runs[0], runs[1], Fraction(claimed))
    p = d + 1 if intercept else d
    pure = "epsilon" in budget
    assert realised[0] == pytest.approx((p * p + p) / 2 if pure else ((p * p + p) / 2) ** 0.5)
    assert realised[1] == pytest.approx(p if pure else p**0.5)
