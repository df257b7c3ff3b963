"""dpkit.local, the rest of issue 12's checklist: bit-packed unary reports, sketches over large
domains, exact checks of the hashed sketches for every fixed seed (and RAPPOR for every fixed
cohort), and clear errors — before any randomness is drawn — for every oracle and mechanism."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from dpkit import local, noise
from dpkit.errors import DomainMismatchError, InvalidDataError, InvalidParameterError
from dpkit.local._core import Reports
from dpkit.testing import check_finite_pure_dp

EPS = Fraction(3, 2)


def pairs(d: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(d) for b in range(d) if a != b]


# ----------------------------------------------------------------------------- packed reports
@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("cls", [local.OptimizedUnaryEncoding, local.SymmetricUnaryEncoding])
def test_packed_unary_reports_match_the_declared_distribution(cls: Any) -> None:
    """For d <= 8 a packed report is one byte whose value is the output index Σ bit_i·2^i."""
    oracle = cls(4, EPS, packed=True)
    reports = oracle.randomize(np.full(20_000, 2))
    assert reports.arrays["bits"].dtype == np.uint8 and reports.arrays["bits"].shape == (20_000, 1)
    counts = np.bincount(reports.arrays["bits"][:, 0], minlength=16)
    expected = oracle.output_pmf(2) * counts.sum()
    assert chisquare(counts, expected).pvalue > 1e-4


@pytest.mark.usefixtures("seeded")
def test_packed_and_unpacked_reports_aggregate_alike() -> None:
    d = 37  # not a multiple of 8: the padding bits are ignored
    packed = local.OptimizedUnaryEncoding(d, 2, packed=True)
    plain = local.OptimizedUnaryEncoding(d, 2)
    assert packed.signature == plain.signature  # the layout is not a privacy parameter
    reports = packed.randomize(np.arange(3000) % d)
    bits = reports.arrays["bits"]
    assert bits.shape == (3000, 5)
    unpacked = np.unpackbits(bits, axis=1, bitorder="little")[:, :d].astype(bool)
    as_plain = Reports(reports.signature, {"bits": unpacked}, reports.n)
    np.testing.assert_array_equal(
        plain.aggregate(as_plain).values, packed.aggregate(reports).values
    )
    wrong = Reports(reports.signature, {"bits": bits[:, :4]}, reports.n)
    with pytest.raises(InvalidDataError):
        packed.aggregate(wrong)
    with pytest.raises(InvalidParameterError):
        local.OptimizedUnaryEncoding(d, 2, packed="yes")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- large domains
@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("cls", [local.CountMeanSketch, local.HadamardCountMeanSketch])
def test_sketches_aggregate_a_large_domain_and_candidates_agree(cls: Any) -> None:
    """d = 5000 > 1021: the default width keeps the server table small (m = 199, L = 2)."""
    oracle = cls(5000, 2)
    assert oracle.m == 199 and oracle.table_fits
    values = np.where(np.arange(4000) % 2 == 0, 4321, np.arange(4000) % 5000)
    reports = oracle.randomize(values)
    full = oracle.aggregate(reports)
    some = oracle.aggregate_candidates(reports, [0, 4321, 4999])
    np.testing.assert_allclose(some.values, full.values[[0, 4321, 4999]], atol=1e-9)
    np.testing.assert_allclose(some.variances, full.variances[[0, 4321, 4999]])
    assert abs(some.values[1] - 0.5) < 5 * some.standard_errors[1]


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("cls", [local.CountMeanSketch, local.HadamardCountMeanSketch])
def test_sketches_over_2_to_the_32_use_candidates(cls: Any) -> None:
    oracle = cls(2**32, 2)
    assert not oracle.table_fits
    heavy = 3_000_000_123
    values = np.where(np.arange(20_000) % 4 == 0, heavy, np.arange(20_000) * 7919)
    reports = oracle.randomize(values)
    with pytest.raises(InvalidParameterError, match="aggregate_candidates"):
        oracle.aggregate(reports)
    estimate = oracle.aggregate_candidates(reports, [heavy, 12345])
    assert abs(estimate.values[0] - 0.25) < 5 * estimate.standard_errors[0]
    assert abs(estimate.values[1]) < 5 * estimate.standard_errors[1]


# ----------------------------------------------------------------------------- fixed seeds
@pytest.mark.parametrize(
    "make",
    [
        lambda: local.CountMeanSketch(3, EPS, m=3),
        lambda: local.HadamardCountMeanSketch(4, EPS, m=5),
    ],
    ids=["cms", "hcms"],
)
def test_sketches_are_exactly_epsilon_for_every_fixed_seed(make: Callable[[], Any]) -> None:
    """Conditional on the public seed a, the rest of the report is ε-DP (and it is tight)."""
    oracle = make()
    size = oracle.family.size
    tables = {v: oracle.output_pmf(v).reshape(size, -1) * size for v in range(oracle.d)}
    worst = Fraction(0)
    for a in range(size):
        result = check_finite_pure_dp(lambda v, a=a: tables[v][a], pairs(oracle.d), oracle.epsilon)
        result.raise_if_failed()
        worst = max(worst, Fraction(result.realised))
    assert float(worst) == pytest.approx(float(oracle.epsilon), rel=1e-9)


def test_a_sketch_with_the_wrong_flip_is_flagged_for_a_fixed_seed() -> None:
    """Broken variant: CMS flipping bits with 1/(1 + e^ε) (as if each bit could spend ε)."""

    class Greedy(local.CountMeanSketch):
        @property
        def flip(self) -> float:
            return 1.0 / (1.0 + float(np.exp(float(self.epsilon))))

    oracle = Greedy(3, EPS, m=3)
    size = oracle.family.size
    pmf = oracle.output_pmf(0).reshape(size, -1) * size
    other = oracle.output_pmf(1).reshape(size, -1) * size
    flagged = [
        not check_finite_pure_dp(
            lambda v, a=a: (pmf if v == 0 else other)[a], [(0, 1), (1, 0)], oracle.epsilon
        ).passed
        for a in range(size)
    ]
    assert any(flagged)


def test_rappor_is_within_epsilon_for_every_fixed_cohort() -> None:
    oracle = local.Rappor(4, m=6, hashes=2, cohorts=3)
    tables = {v: oracle.output_pmf(v).reshape(3, -1) * 3 for v in range(4)}
    for c in range(3):
        check_finite_pure_dp(
            lambda v, c=c: tables[v][c], pairs(4), oracle.epsilon
        ).raise_if_failed()


# ----------------------------------------------------------------------------- refusals
FREQUENCY = [
    local.GeneralizedRR,
    local.SymmetricUnaryEncoding,
    local.OptimizedUnaryEncoding,
    local.OptimizedLocalHashing,
    local.BinaryLocalHashing,
    local.HadamardResponse,
    local.SubsetSelection,
    local.CountMeanSketch,
    local.HadamardCountMeanSketch,
]


@pytest.mark.parametrize("cls", FREQUENCY, ids=lambda c: c.name)
@pytest.mark.parametrize(
    ("d", "epsilon", "parameter"),
    [
        (1, 1, "d"),
        (0, 1, "d"),
        (2.5, 1, "d"),
        (True, 1, "d"),
        (4, 0, "epsilon"),
        (4, -1, "epsilon"),
        (4, float("nan"), "epsilon"),
        (4, float("inf"), "epsilon"),
    ],
)
def test_every_oracle_refuses_bad_public_parameters(
    cls: Any, d: Any, epsilon: Any, parameter: str
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        cls(d, epsilon)
    assert info.value.parameter == parameter


def test_the_other_constructors_refuse_bad_public_parameters() -> None:
    for call in (
        lambda: local.LocalHashing(4, 1, 6),  # not a field size
        lambda: local.Rappor(1),
        lambda: local.Rappor.for_epsilon(8, 0),
        lambda: local.Rappor.for_epsilon(8, -1),
        lambda: local.PrefixExtension(0),
        lambda: local.PrefixExtension(float("nan")),
        lambda: local.DuchiMean(0, 0, 1),
        lambda: local.PiecewiseMean(-1, 0, 1),
        lambda: local.HybridMean(1, 1, 0),
        lambda: local.DuchiMean(1, 0, float("nan")),
        lambda: local.recommend_oracle(0, 8, 100),
        lambda: local.recommend_oracle(1, 1, 100),
        lambda: local.CountMeanSketch(16, 1, m=16),  # not a prime
    ):
        with pytest.raises(InvalidParameterError):
            call()


BAD_VALUES = [[0, 4], [-1], [0.5], [float("nan")], [float("inf")], ["a"], [True], [[0, 9]]]


def _all_clients() -> list[Any]:
    return [cls(4, EPS) for cls in FREQUENCY] + [
        local.OptimizedUnaryEncoding(4, EPS, packed=True),
        local.Rappor(4, m=8),
    ]


@pytest.mark.parametrize("values", BAD_VALUES, ids=str)
def test_bad_values_are_refused_before_any_randomness_is_drawn(values: list[Any]) -> None:
    """The refusal comes first: the generator's stream is exactly where it was."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", noise.InsecureRandomnessWarning)
        with noise.insecure_deterministic_seed(99):
            first = noise.random_words(1)
        for client in _all_clients():
            with noise.insecure_deterministic_seed(99):
                with pytest.raises(InvalidDataError):
                    client.randomize(values)
                assert noise.random_words(1) == first
    pem = local.PrefixExtension(1, bits=8, k=2, eta=2)
    for bad in ([256], [-1], [float("nan")], [1.5], ["x"]):
        with pytest.raises(InvalidDataError):
            pem.randomize(bad)


@pytest.mark.usefixtures("seeded")
def test_reports_of_another_oracle_or_parameters_are_refused_everywhere() -> None:
    clients = _all_clients()
    reports = [c.randomize([0, 1, 2, 3]) for c in clients]
    for server in clients:
        for j, batch in enumerate(reports):
            if clients[j].signature == server.signature:
                continue
            with pytest.raises(DomainMismatchError):
                if isinstance(server, local.Rappor):
                    server.aggregate(batch, [0, 1])
                else:
                    server.aggregate(batch)
    # same oracle, other parameters
    for a, b in (
        (local.CountMeanSketch(4, EPS, m=5), local.CountMeanSketch(4, EPS, m=7)),
        (local.Rappor(4, m=8), local.Rappor(4, m=8, cohorts=4)),
        (local.SubsetSelection(6, EPS, k=2), local.SubsetSelection(6, EPS, k=3)),
    ):
        with pytest.raises(DomainMismatchError):
            if isinstance(b, local.Rappor):
                b.aggregate(a.randomize([1, 2]), [0, 1])
            else:
                b.aggregate(a.randomize([1, 2]))
    duchi, piecewise = local.DuchiMean(1, 0, 1), local.PiecewiseMean(1, 0, 1)
    with pytest.raises(DomainMismatchError):
        piecewise.estimate_mean(duchi.randomize([0.5]))
    with pytest.raises(DomainMismatchError):
        local.DuchiMean(2, 0, 1).estimate_mean(duchi.randomize([0.5]))
    pem = local.PrefixExtension(1, bits=8, k=2, eta=2)
    with pytest.raises(DomainMismatchError):
        local.PrefixExtension(2, bits=8, k=2, eta=2).heavy_hitters(pem.randomize([1, 2]))


def test_pem_reports_are_exactly_epsilon_over_every_pair() -> None:
    """PEM's report (group, seed, y): the group is uniform and independent of the value, then
    local hashing of the value's prefix, so P(t, a, y | v) = P_t(a, y | prefix_t(v))/G."""
    pem = local.PrefixExtension(1, bits=4, k=2, eta=1)
    groups = len(pem.oracles)

    def pmf(v: int) -> np.ndarray:
        parts = [
            oracle.output_pmf(v >> (pem.bits - length)) / groups
            for length, oracle in zip(pem.lengths, pem.oracles, strict=True)
        ]
        return np.concatenate(parts)

    assert pmf(5).sum() == pytest.approx(1.0)
    result = check_finite_pure_dp(pmf, pairs(16), pem.epsilon).raise_if_failed()
    assert float(result.realised) == pytest.approx(float(pem.epsilon), rel=1e-9)
    assert not check_finite_pure_dp(pmf, pairs(16), pem.epsilon / 2).passed


@pytest.mark.parametrize(("epsilon", "d"), [(1, 4), (2, 64), (Fraction(1, 2), 1024), (4, 300)])
def test_variance_formulas_match_the_docs_table(epsilon: Any, d: int) -> None:
    """The closed forms of docs/local.md's table (n·Var at f = 0) are what the recommender
    compares: E = e^ε, h = e^{ε/2}."""
    import math

    E, h, n = math.exp(float(epsilon)), math.exp(float(epsilon) / 2), 1000
    table = local.recommend_oracle(epsilon, d, n).table
    closed = {
        "grr": (E + d - 2) / (E - 1) ** 2,
        "sue": h / (h - 1) ** 2,
        "oue": 4 * E / (E - 1) ** 2,
        "blh": (E + 1) ** 2 / (E - 1) ** 2,
        "hr": (E + 1) ** 2 / (E - 1) ** 2,
    }
    for name, value in closed.items():
        assert table[name][0] * n == pytest.approx(value, rel=1e-9), name
    olh = local.OptimizedLocalHashing(d, epsilon)
    p, q = E / (E + olh.g - 1), 1 / olh.g
    assert table["olh"][0] * n == pytest.approx(q * (1 - q) / (p - q) ** 2, rel=1e-9)
    cms, hcms = local.CountMeanSketch(d, epsilon), local.HadamardCountMeanSketch(d, epsilon)
    m, s2, c = cms.m, h / (h - 1) ** 2, (E + 1) / (E - 1)
    expected = (m / (m - 1)) ** 2 * (s2 + 1 / m - 1 / m**2)
    assert table["cms"][0] * n == pytest.approx(expected, rel=1e-9)
    m = hcms.m
    assert table["hcms"][0] * n == pytest.approx((m / (m - 1)) ** 2 * (c**2 - 1 / m**2), rel=1e-9)
    best = min(v for v, _ in table.values())
    chosen = local.recommend_oracle(epsilon, d, n)
    assert chosen.variance <= 1.02 * best


def test_floyd_bitmap_membership_is_the_same_algorithm() -> None:
    """Subset selection's Floyd sampler tests membership by scanning (small k) or with a
    bitmap (large k): on the same bits both give the same subsets, and they are distinct."""
    from dpkit.local._oracles import _floyd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", noise.InsecureRandomnessWarning)
        with noise.insecure_deterministic_seed(4):
            scan = _floyd(3000, 40, 20, bitmap=False)
        with noise.insecure_deterministic_seed(4):
            bitmap = _floyd(3000, 40, 20, bitmap=True)
    np.testing.assert_array_equal(scan, bitmap)
    ordered = np.sort(bitmap, axis=1)
    assert (ordered[:, 1:] > ordered[:, :-1]).all() and ordered.min() >= 0 and ordered.max() < 40
