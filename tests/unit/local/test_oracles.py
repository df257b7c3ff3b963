"""dpkit.local frequency oracles: exact privacy checks over every pair of inputs, samplers that
match their declared distributions, broken variants that are flagged, and clear errors."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from dpkit import local
from dpkit.errors import (
    DomainMismatchError,
    InvalidDataError,
    InvalidParameterError,
    PrivacyCheckError,
)
from dpkit.local._oracles import _Coin
from dpkit.testing import check_finite_pure_dp

D = 4
EPS = Fraction(3, 2)


def oracles() -> list[tuple[str, Any]]:
    return [
        ("grr", local.GeneralizedRR(D, EPS)),
        ("sue", local.SymmetricUnaryEncoding(D, EPS)),
        ("oue", local.OptimizedUnaryEncoding(D, EPS)),
        ("olh", local.OptimizedLocalHashing(D, EPS)),
        ("blh", local.BinaryLocalHashing(D, EPS)),
        ("lh-g5", local.LocalHashing(D, EPS, 5)),
        ("lh-g4", local.LocalHashing(D, EPS, 4)),
        ("hr", local.HadamardResponse(D, EPS)),
        ("ss", local.SubsetSelection(D, EPS)),
        ("ss-k2", local.SubsetSelection(D, EPS, k=2)),
        ("cms", local.CountMeanSketch(3, EPS, m=3)),
        ("hcms", local.HadamardCountMeanSketch(D, EPS, m=5)),
        ("rappor", local.Rappor(D, m=6, hashes=2, cohorts=2)),
    ]


IDS = [name for name, _ in oracles()]


def all_pairs(d: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(d) for b in range(d) if a != b]


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_exact_check_over_every_pair(index: int) -> None:
    """The largest log-ratio of one client's report distribution over every pair of inputs is
    within the claimed ε, and attains it (tight) for the oracles whose ε is exact."""
    name, oracle = oracles()[index]
    result = check_finite_pure_dp(oracle.output_pmf, all_pairs(oracle.d), oracle.epsilon)
    result.raise_if_failed()
    if name != "rappor":  # RAPPOR's bound assumes 2h distinct Bloom bits, tight only then
        assert float(result.realised) == pytest.approx(float(oracle.epsilon), rel=1e-9)


@pytest.mark.parametrize("index", range(len(IDS) - 1), ids=IDS[:-1])
def test_exact_epsilon_with_fractions(index: int) -> None:
    """No floats in the verdict: P(o|v) = C·e^{λ_o(v)} with exact λ, so the realised ε is the
    Fraction max |λ_o(x) - λ_o(y)|, and it equals the claim exactly."""
    _, oracle = oracles()[index]
    result = local.check_exact_epsilon(oracle).raise_if_failed()
    assert result.realised == oracle.epsilon


def test_rappor_exact_with_fractions() -> None:
    """RAPPOR's probabilities are rational: the Fraction checker finds ln(max ratio) <= ε₁."""
    r = local.Rappor(3, m=4, hashes=2, cohorts=1)
    half = r.f / 2
    ps, qs = half * r.q + (1 - half) * r.p, (1 - half) * r.q + half * r.p

    def exact_pmf(v: int) -> list[Fraction]:
        bloom = r.bloom(np.array([v]), np.array([0]))[0]
        out = []
        for o in range(1 << r.m):
            prob = Fraction(1)
            for i in range(r.m):
                p1 = qs if bloom[i] else ps
                prob *= p1 if (o >> i) & 1 else 1 - p1
            out.append(prob)
        return out

    check_finite_pure_dp(exact_pmf, all_pairs(3), r.epsilon).raise_if_failed()


def test_exact_check_flags_wrong_epsilon_and_false_declarations() -> None:
    class Greedy(local.OptimizedUnaryEncoding):
        def _coins(self) -> tuple[_Coin, _Coin]:
            return _Coin(Fraction(1), Fraction(0)), _Coin(
                Fraction(1), 2 * self.epsilon, complement=True
            )

    result = local.check_exact_epsilon(Greedy(D, EPS))
    assert not result.passed and result.realised == 2 * EPS

    class Liar(local.HadamardResponse):
        def log_weights(self, value: int) -> list[Fraction]:
            return [w / 2 for w in super().log_weights(value)]  # claims half the exponent

    with pytest.raises(PrivacyCheckError):
        local.check_exact_epsilon(Liar(D, EPS))


@pytest.mark.parametrize("g", [2, 3, 4, 5])
def test_local_hashing_fixed_seed_is_exactly_epsilon(g: int) -> None:
    """For every fixed seed, y | v is g-ary RR of h_a(v): ratio at most e^ε between any v, v'."""
    oracle = local.LocalHashing(6, EPS, g)
    for seed in range(oracle.family.size):
        hashed = oracle.family.evaluate(np.full(6, seed), np.arange(6))
        pmf = oracle.fixed_seed_pmf(hashed)
        result = check_finite_pure_dp(lambda v, pmf=pmf: pmf[v], all_pairs(6), oracle.epsilon)
        result.raise_if_failed()


def test_wrong_epsilon_is_flagged() -> None:
    """An OUE that samples at 2ε while claiming ε fails the exact check."""

    class Greedy(local.OptimizedUnaryEncoding):
        def _coins(self) -> tuple[_Coin, _Coin]:
            return _Coin(Fraction(1), Fraction(0)), _Coin(
                Fraction(1), 2 * self.epsilon, complement=True
            )

    broken = Greedy(D, EPS)
    result = check_finite_pure_dp(broken.output_pmf, all_pairs(D), broken.epsilon)
    assert not result.passed
    assert float(result.realised) == pytest.approx(2 * float(EPS))


class SwappedOUE(local.OptimizedUnaryEncoding):
    """OUE whose client swaps p and q (the bug the issue names) while the server is unchanged."""

    def _randomize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        n = values.size
        bits = self._one.draw(n * self.d).reshape(n, self.d)
        bits[np.arange(n), values] = self._zero.draw(n)
        return {"bits": bits}


def _empirical(oracle: Any, value: int, n: int) -> np.ndarray:
    """Counts of each enumerated output in n reports of ``value``."""
    reports = oracle.randomize(np.full(n, value))
    outputs = oracle.outputs()
    index = {o: i for i, o in enumerate(outputs)}
    arrays = reports.arrays
    if "bits" in arrays and "seed" not in arrays and "cohort" not in arrays:
        keys = (arrays["bits"].astype(np.int64) << np.arange(oracle.d)).sum(axis=1)
        return np.bincount(keys, minlength=len(outputs))
    if "seed" in arrays and "value" in arrays:
        keys = arrays["seed"] * oracle.g + arrays["value"]
        return np.bincount(keys, minlength=len(outputs))
    if "row" in arrays:
        keys = (arrays["seed"] * oracle.K + arrays["row"]) * 2 + (arrays["bit"] > 0)
        return np.bincount(keys, minlength=len(outputs))
    if "cohort" in arrays:
        bits = (arrays["bits"].astype(np.int64) << np.arange(oracle.m)).sum(axis=1)
        return np.bincount(arrays["cohort"] * (1 << oracle.m) + bits, minlength=len(outputs))
    if "seed" in arrays:
        bits = (arrays["bits"].astype(np.int64) << np.arange(oracle.m)).sum(axis=1)
        return np.bincount(arrays["seed"] * (1 << oracle.m) + bits, minlength=len(outputs))
    y = arrays["value"]
    if y.ndim == 2:
        keys = [index[tuple(int(x) for x in row)] for row in y[:2000]]  # few distinct sets
        return np.bincount(keys, minlength=len(outputs)) * (n / min(n, 2000))
    return np.bincount(y, minlength=len(outputs))


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_sampler_matches_declared_distribution(index: int) -> None:
    """The exact check reads output_pmf; this ties the client sampler to it (chi-square)."""
    _, oracle = oracles()[index]
    n = 2000 if isinstance(oracle, local.SubsetSelection) else 20_000
    counts = _empirical(oracle, 1, n)
    expected = oracle.output_pmf(1) * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0
    assert chisquare(counts[keep], expected[keep]).pvalue > 1e-4


@pytest.mark.usefixtures("seeded")
def test_swapped_oue_is_flagged() -> None:
    """OUE with p and q swapped: same |log-ratio| (so the privacy check cannot see it), but its
    sampler contradicts the declared distribution and its estimates are badly biased."""
    oracle = SwappedOUE(D, EPS)
    counts = _empirical(oracle, 1, 20_000)
    expected = oracle.output_pmf(1) * counts.sum()
    assert chisquare(counts, expected).pvalue < 1e-12
    values = np.repeat(np.arange(D), [5000, 3000, 2000, 0])
    estimate = oracle.aggregate(oracle.randomize(values))
    truth = np.array([0.5, 0.3, 0.2, 0.0])
    z = np.abs(estimate.values - truth) / np.sqrt(oracle.variance(values.size, truth))
    assert z.max() > 10


def test_family_sum_matches_brute_force() -> None:
    rng = np.random.default_rng(0)  # test data only, not privacy randomness
    for d, g in ((30, 5), (50, 2), (11, 11), (30, 4), (40, 8), (20, 9)):
        family = local.LinearHashFamily.for_domain(d, g)
        table = rng.integers(0, 10, (family.size, g)).astype(np.float64)
        values = np.arange(d)
        hashed = family.evaluate_outer(np.arange(family.size), values)
        brute = table[np.arange(family.size)[:, None], hashed].sum(axis=0)
        np.testing.assert_allclose(family.family_sum(table, values), brute, atol=1e-6)


@pytest.mark.parametrize("g", [2, 3, 4, 7, 8, 9, 16])
def test_family_collisions_are_exactly_one_over_g(g: int) -> None:
    """Prime fields and GF(p^k) by tables: every pair collides on exactly 1/g of the seeds."""
    family = local.LinearHashFamily.for_domain(20, g)
    hashed = family.evaluate_outer(np.arange(family.size), np.arange(20))
    for u, v in itertools.combinations(range(20), 2):
        assert (hashed[:, u] == hashed[:, v]).sum() * g == family.size
    if g in (4, 8, 9, 16):
        assert np.array_equal(family.hash_table(np.arange(20)), hashed)


def test_field_tables_are_fields() -> None:
    from dpkit.local._core import field_tables

    for q in (4, 8, 9, 16, 25, 27):
        add, mul = field_tables(q)
        assert all((mul[x] == 1).sum() == 1 for x in range(1, q))  # inverses
        x, y, z = np.meshgrid(np.arange(q), np.arange(q), np.arange(q), indexing="ij")
        assert np.array_equal(mul[x, add[y, z]], add[mul[x, y], mul[x, z]])  # distributive
    with pytest.raises(InvalidParameterError):
        local.LinearHashFamily.for_domain(10, 6)


@pytest.mark.usefixtures("seeded")
def test_candidate_path_agrees_with_table_path() -> None:
    oracle = local.OptimizedLocalHashing(64, 2)
    reports = oracle.randomize(np.arange(5000) % 64)
    full = oracle.aggregate(reports).values
    some = oracle.aggregate_candidates(reports, [0, 5, 63]).values
    np.testing.assert_allclose(some, full[[0, 5, 63]], atol=1e-12)


def test_postprocessing_methods_agree_and_are_consistent() -> None:
    raw = np.array([0.6, -0.1, 0.3, 0.25, -0.05])
    a, b = local.norm_sub(raw), local.project_simplex(raw)
    np.testing.assert_allclose(a, b, atol=1e-12)
    assert a.min() >= 0 and a.sum() == pytest.approx(1.0)


@pytest.mark.usefixtures("seeded")
def test_aggregate_reports_postprocessing() -> None:
    oracle = local.OptimizedUnaryEncoding(8, 1)
    est = oracle.aggregate(oracle.randomize(np.zeros(300, dtype=int)), postprocess="norm_sub")
    assert est.postprocess == "norm_sub" and est.consistent is not None
    assert est.consistent.min() >= 0 and est.consistent.sum() == pytest.approx(1.0)
    assert est.best() is est.consistent


@pytest.mark.parametrize(
    ("args", "parameter"),
    [((1, 1), "d"), ((4, 0), "epsilon"), ((4, -1), "epsilon"), ((4, "nan"), "epsilon")],
)
def test_bad_parameters(args: tuple[Any, Any], parameter: str) -> None:
    for cls in (local.GeneralizedRR, local.OptimizedLocalHashing, local.HadamardResponse):
        with pytest.raises(InvalidParameterError) as info:
            cls(*args)
        assert info.value.parameter == parameter


@pytest.mark.parametrize("values", [[0, 4], [-1], [0.5], [float("nan")], ["a"], [True]])
def test_bad_values_are_refused_before_randomising(values: list[Any]) -> None:
    for _, oracle in oracles():
        with pytest.raises(InvalidDataError):
            oracle.randomize(values)


@pytest.mark.usefixtures("seeded")
def test_reports_of_another_oracle_are_refused() -> None:
    olh = local.OptimizedLocalHashing(D, EPS)
    reports = olh.randomize([0, 1, 2])
    for other in (
        local.OptimizedLocalHashing(D, 1),
        local.OptimizedLocalHashing(D + 1, EPS),
        local.BinaryLocalHashing(D, EPS),
        local.GeneralizedRR(D, EPS),
    ):
        with pytest.raises(DomainMismatchError):
            other.aggregate(reports)
    with pytest.raises(InvalidDataError):
        olh.aggregate(np.array([1, 2]))  # type: ignore[arg-type]
    bad = dict(reports.arrays, value=reports.arrays["value"].astype(float))
    with pytest.raises(InvalidDataError):
        olh.aggregate(local.Reports(reports.signature, bad, reports.n))
    out_of_range = dict(reports.arrays, value=reports.arrays["value"] + 100)
    with pytest.raises(InvalidDataError):
        olh.aggregate(local.Reports(reports.signature, out_of_range, reports.n))
    with pytest.raises(InvalidDataError):
        olh.aggregate(local.Reports(reports.signature, reports.arrays, reports.n + 1))


def test_rappor_epsilons() -> None:
    r = local.Rappor(10, hashes=2, f=Fraction(1, 2), p=Fraction(1, 2), q=Fraction(3, 4))
    assert float(r.epsilon_longitudinal) == pytest.approx(4 * math.log(3))
    qs, ps = Fraction(11, 16), Fraction(9, 16)
    assert float(r.epsilon) == pytest.approx(2 * math.log(qs * (1 - ps) / (ps * (1 - qs))))
    assert r.epsilon >= 2 * math.log(qs * (1 - ps) / (ps * (1 - qs)))  # rounded up


def test_hadamard_sizes() -> None:
    assert local.HadamardResponse(4, 1).K == 8
    assert local.HadamardResponse(3, 1).K == 4
