"""Local, distance-k and smooth sensitivity: exact algorithms against brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpkit.errors import DPError, InvalidParameterError
from dpkit.sensitivity import distance_k_sensitivity, local_sensitivity, smooth_sensitivity

GRID = (0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0)
CASES = [
    ("median", {}),
    ("quantile", {"q": 0.3}),
    ("quantile", {"q": 0.9}),
    ("max", {}),
    ("min", {}),
    ("mean", {}),
    ("sum", {}),
    ("trimmed_mean", {"trim": 0.2}),
    ("range", {}),
    ("variance", {}),
    ("distinct", {}),
    ("count", {}),
]
EXACT = {
    "median",
    "quantile",
    "max",
    "min",
    "mean",
    "sum",
    "distinct",
    "count",
    "range",
    "trimmed_mean",
}


def _f(name: str, x: list[float], q: float = 0.5, trim: float = 0.0) -> float:
    s = np.sort(np.asarray(x, dtype=float))
    n = s.size
    if name in ("median", "quantile", "max", "min"):
        level = {"median": 0.5, "max": 1.0, "min": 0.0}.get(name, q)
        return float(s[min(n, max(1, math.ceil(level * n))) - 1])
    if name == "mean":
        return float(s.mean())
    if name == "sum":
        return float(s.sum())
    if name == "trimmed_mean":
        t = math.floor(trim * n)
        return float(s[t : n - t].mean())
    if name == "range":
        return float(s[-1] - s[0])
    if name == "variance":
        return float(s.var())
    if name == "distinct":
        return float(len(set(s.tolist())))
    return float(np.count_nonzero(s))


def _ls(name: str, x: tuple[float, ...], kw: dict[str, float]) -> float:
    base = _f(name, list(x), **kw)
    best = 0.0
    for i, v in itertools.product(range(len(x)), GRID):
        y = list(x)
        y[i] = v
        best = max(best, abs(_f(name, y, **kw) - base))
    return best


@pytest.mark.parametrize(("name", "kw"), CASES)
def test_distance_k_matches_brute_force(name: str, kw: dict[str, float]) -> None:
    rng = np.random.default_rng(7)
    for _ in range(6):
        n = int(rng.integers(1, 6))
        x = tuple(float(v) for v in rng.choice(GRID, n))
        reach = {tuple(sorted(x))}
        brute = []
        for _k in range(3):
            brute.append(max(_ls(name, y, kw) for y in reach))
            reach |= {
                tuple(sorted((*y[:i], v, *y[i + 1 :])))
                for y in reach
                for i in range(n)
                for v in GRID
            }
        for k in range(3):
            mine = distance_k_sensitivity(x, name, k, lower=0, upper=10, **kw)
            assert mine >= brute[k] - 1e-9, (name, x, k)  # never an under-estimate
            if name in EXACT:
                assert mine == pytest.approx(brute[k], abs=1e-9), (name, x, k)


@pytest.mark.parametrize(("name", "kw"), CASES)
def test_smooth_matches_definition(name: str, kw: dict[str, float]) -> None:
    rng = np.random.default_rng(3)
    for _ in range(10):
        n = int(rng.integers(1, 9))
        x = rng.choice(GRID, n)
        for beta in (0.05, 0.5, 2.0):
            direct = max(
                math.exp(-k * beta) * distance_k_sensitivity(x, name, k, lower=0, upper=10, **kw)
                for k in range(n + 3)
            )
            smooth = smooth_sensitivity(x, name, beta, lower=0, upper=10, **kw)
            assert direct <= smooth <= direct * (1 + 1e-8) + 1e-12  # exact for every statistic


def test_median_smooth_large_n_matches_quadratic() -> None:
    x = np.random.default_rng(1).lognormal(size=801)
    beta = 0.01
    s = np.sort(x)
    xp = np.concatenate([[0.0], s, [1000.0]])
    r = 401
    direct = 0.0
    for k in range(x.size + 1):
        t = np.arange(k + 2)
        a_k = np.max(xp[np.clip(r + t, 0, 802)] - xp[np.clip(r + t - k - 1, 0, 802)])
        direct = max(direct, math.exp(-k * beta) * a_k)
    assert smooth_sensitivity(x, "median", beta, lower=0, upper=1000) == pytest.approx(direct)


def test_docs_examples() -> None:
    assert local_sensitivity([1, 2, 3, 4, 100], "median", lower=0, upper=1000) == 1.0
    assert local_sensitivity([0, 0, 1, 1, 100], "median", lower=0, upper=100) == 1.0
    assert local_sensitivity([0, 1, 1, 1, 100], "median", lower=0, upper=100) == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e300, -1e300])
def test_extreme_values_are_clamped_not_raised(bad: float) -> None:
    x = [1.0, 2.0, bad, 4.0]
    for name in ("median", "mean", "range", "variance", "trimmed_mean"):
        kw = {"trim": 0.25} if name == "trimmed_mean" else {}
        assert math.isfinite(smooth_sensitivity(x, name, 0.1, lower=0, upper=10, **kw))


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"beta": 0}, "beta"),
        ({"beta": -1}, "beta"),
        ({"beta": float("nan")}, "beta"),
        ({"lower": 5, "upper": 5}, "upper"),
        ({"lower": 0, "upper": float("inf")}, "upper"),
        ({"statistic": "mode"}, "statistic"),
        ({"statistic": "quantile"}, "q"),
        ({"statistic": "quantile", "q": 1.5}, "q"),
        ({"statistic": "trimmed_mean", "trim": 0.5}, "trim"),
    ],
)
def test_bad_parameters_raise_before_data(kwargs: dict[str, object], parameter: str) -> None:
    args: dict[str, object] = {"statistic": "median", "beta": 0.1, "lower": 0, "upper": 10}
    args.update(kwargs)

    class Poison:
        def __array__(self, *a: object, **k: object) -> np.ndarray:
            raise AssertionError("data was read")

    statistic = args.pop("statistic")
    beta = args.pop("beta")
    with pytest.raises(InvalidParameterError) as info:
        smooth_sensitivity(Poison(), statistic, beta, **args)  # type: ignore[arg-type]
    assert info.value.parameter == parameter
    assert isinstance(info.value, DPError)
