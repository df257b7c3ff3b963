"""The conformance suite on the staircase, randomized response and selection mechanisms.

:func:`dpkit.testing.mechanism_checks` runs as is on the staircase with ``changed_coordinates``,
one test id per (mechanism, check). It cannot express every case of the other mechanisms, so
the same checks are run by :func:`conform_finite_output` below, with these adaptations — and
the suite itself (with ``neighbour_pairs`` and ``input_kind="vector"``) is run on each family
too, again one test id per check:

* **privacy** — finite-output mechanisms need ``neighbour_pairs`` for the exact check, and
  check_mechanism calls :func:`~dpkit.testing.check_measurement_exact` without them (it raises
  InvalidParameterError, which check_mechanism does not catch): the helper passes them;
* **shapes** — check_mechanism expects numeric arrays of the input's shape. Randomized response
  returns *bools* (dtype bool is refused), k-ary RR with labels returns labels, selection takes
  a *vector* of scores and returns one index (an int), or one per row of a 2-d array; and the
  staircase without ``changed_coordinates`` refuses arrays of more than one value by design.
  Each family's own shape contract is tested explicitly.

Parameters, data (NaN/inf), post-processing and immutability are checked exactly as
check_mechanism does.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._framework import Measurement, make_postprocess
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError, PrivacyCheckError
from dpkit.testing import (
    AuditResult,
    CheckResult,
    MechanismCheck,
    check_measurement_exact,
    check_mechanism,
    mechanism_checks,
    parametrize_mechanism_checks,
)

Factory = Callable[..., Measurement[Any]]
Bad = list[tuple[dict[str, Any], str]]

NAN, INF = float("nan"), float("inf")

# ----------------------------------------------------------------------- staircase
STAIRCASE_BAD: Bad = [
    ({"epsilon": 0}, "epsilon"),
    ({"epsilon": -1}, "epsilon"),
    ({"epsilon": NAN}, "epsilon"),
    ({"epsilon": INF}, "epsilon"),
    ({"epsilon": True}, "epsilon"),
    ({"epsilon": "much"}, "epsilon"),
    ({"sensitivity": 0}, "sensitivity"),
    ({"sensitivity": -2}, "sensitivity"),
    ({"sensitivity": NAN}, "sensitivity"),
    ({"sensitivity": True}, "sensitivity"),
    ({"gamma": 0}, "gamma"),
    ({"gamma": 1}, "gamma"),
    ({"gamma": -0.1}, "gamma"),
    ({"gamma": 1.5}, "gamma"),
    ({"gamma": NAN}, "gamma"),
    ({"gamma": True}, "gamma"),
    ({"gamma": "0.3"}, "gamma"),
    ({"cost": "l3"}, "cost"),
    ({"cost": "L1"}, "cost"),
    ({"cost": None}, "cost"),
    ({"grid_exponent": 1.5}, "grid_exponent"),
    ({"grid_exponent": -60}, "grid_exponent"),  # D = 2^60 grid steps: too fine
    ({"changed_coordinates": 0}, "changed_coordinates"),
    ({"changed_coordinates": 1.0}, "changed_coordinates"),
]

# (id, valid kwargs, sample input, neighbour input)
STAIRCASE_CASES: list[tuple[str, dict[str, Any], Any, Any]] = [
    ("one-coordinate", {"sensitivity": 1, "epsilon": 1, "changed_coordinates": 1}, 0.0, 1.0),
    (
        "l2-coarse-grid",
        {
            "sensitivity": 3,
            "epsilon": 0.5,
            "cost": "l2",
            "gamma": 0.4,
            "grid_exponent": -8,
            "changed_coordinates": 1,
        },
        0.0,
        3.0,
    ),
    # the exact check covers one changed coordinate only: check_mechanism audits instead
    (
        "three-coordinates",
        {"sensitivity": 2, "epsilon": 2, "changed_coordinates": 3, "grid_exponent": -8},
        0.0,
        2.0,
    ),
]


STAIRCASE_VALID = {name: valid for name, valid, _, _ in STAIRCASE_CASES}


@pytest.mark.usefixtures("seeded")
@parametrize_mechanism_checks(
    *(
        mechanism_checks(
            dp.make_staircase,
            valid,
            bad_kwargs=STAIRCASE_BAD,
            sample_input=x,
            neighbour_input=neighbour,
            name=f"staircase-{name}",
        )
        for name, valid, x, neighbour in STAIRCASE_CASES
    )
)
def test_staircase_conforms(check: MechanismCheck) -> None:
    outcome = check()
    if check.check != "privacy":
        return
    valid = STAIRCASE_VALID[check.mechanism.removeprefix("staircase-")]
    if valid["changed_coordinates"] == 1:
        assert isinstance(outcome.privacy, CheckResult)
        assert outcome.privacy.realised == Fraction(valid["epsilon"])  # tight
    else:
        assert isinstance(outcome.privacy, AuditResult)
        assert outcome.summary == "privacy (statistical audit)"


def test_check_mechanism_names_the_default_staircases_scalar_only_contract() -> None:
    """Without changed_coordinates the staircase refuses arrays by design, by their shape
    (public): the conformance suite accepts that and says so in its report."""
    report = check_mechanism(
        dp.make_staircase, {"sensitivity": 1, "epsilon": 1}, bad_kwargs=STAIRCASE_BAD
    )
    assert any("refused by their shape" in check for check in report.checks)


def test_default_staircase_conforms_on_scalars() -> None:
    """check_mechanism's checks for the staircase without changed_coordinates, scalar inputs."""
    valid: dict[str, Any] = {"sensitivity": 1, "epsilon": 1, "grid_exponent": -10}
    m = dp.make_staircase(**valid)
    privacy = check_measurement_exact(m).raise_if_failed()
    assert privacy.realised == 1
    assert_parameters_refused(dp.make_staircase, valid, STAIRCASE_BAD)
    for bad in (np.nan, np.array([np.nan]), np.array([0.0, np.nan])):
        with pytest.raises(InvalidDataError):
            m(bad)
    assert np.isfinite(m(np.inf)) and np.isfinite(m(-np.inf))  # saturated, never refused
    # shapes: a scalar gives a Python float, a one-value array keeps its shape, longer arrays
    # are refused with a pointer to changed_coordinates
    assert type(m(0.0)) is float and type(m(3)) is float
    one = m(np.array([0.5]))
    assert isinstance(one, np.ndarray) and one.shape == (1,) and one.dtype.kind == "f"
    for shape in ((7,), (2, 3)):
        with pytest.raises(InvalidDataError, match="changed_coordinates"):
            m(np.zeros(shape))
    assert_post_processing_and_frozen(m)


def test_conformance_rejects_a_staircase_claiming_half() -> None:
    def broken(**kwargs: Any) -> Measurement[Any]:
        real = dp.make_staircase(**{**kwargs, "epsilon": 2 * kwargs["epsilon"]})
        return dataclasses.replace(real, privacy_map=lambda d: PureDP(kwargs["epsilon"] * d))

    valid = {"sensitivity": 1, "epsilon": 1, "grid_exponent": -8, "changed_coordinates": 1}
    with pytest.raises(PrivacyCheckError, match="'privacy' failed: exact check"):
        check_mechanism(broken, valid)


# ----------------------------------------------------------------------- shared helpers
def assert_parameters_refused(factory: Factory, valid: dict[str, Any], bad: Bad) -> None:
    """check_mechanism's 'parameters' check: each override raises InvalidParameterError naming
    the parameter."""
    for overrides, parameter in bad:
        kwargs = {**valid, **overrides}
        try:
            factory(**kwargs)
        except InvalidParameterError as error:
            assert error.parameter == parameter, f"{kwargs}: named {error.parameter!r}"
        else:
            pytest.fail(f"{kwargs} was accepted; expected InvalidParameterError({parameter!r})")


def assert_post_processing_and_frozen(m: Measurement[Any]) -> None:
    """check_mechanism's 'post-processing' and 'frozen' checks."""
    d = m.d_in
    assert d is not None
    for post in (make_postprocess(m, lambda value: value), m >> abs):
        assert post.map(d) == m.map(d)
    for name in ("privacy_map", "function", "d_in"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(m, name, None)


def conform_finite_output(
    factory: Factory,
    valid: dict[str, Any],
    *,
    bad: Bad,
    neighbour_pairs: Iterable[tuple[Any, Any]],
) -> CheckResult:
    """check_mechanism for a finite-output mechanism, minus the shape check (see the module
    docstring): privacy by the exact check on ``neighbour_pairs``, bad parameters, NaN/inf
    refused, post-processing, frozen. Raises PrivacyCheckError if the claim is false."""
    m = factory(**valid)
    privacy = check_measurement_exact(m, neighbour_pairs=list(neighbour_pairs)).raise_if_failed()
    assert_parameters_refused(factory, valid, bad)
    for data in (np.nan, np.inf, -np.inf, np.array([0.0, np.nan]), np.array([np.inf, 0.0])):
        with pytest.raises(InvalidDataError):
            m(data)
    assert_post_processing_and_frozen(m)
    return privacy


def all_answer_pairs(m: Measurement[Any]) -> list[tuple[Any, Any]]:
    outputs = list(m.info.outputs)
    answers = [False, True] if outputs == [False, True] else outputs
    return list(itertools.combinations(answers, 2))


def vertex_pairs(sensitivity: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Utility vectors (0, 0), (0, 1, 2)·Δu and (0, 40, 40)·Δu with every neighbour
    u + Δu·s, s ∈ {-1, 0, 1}^k."""
    pairs = []
    for base in ([0.0, 0.0], [0.0, 1.0, 2.0], [0.0, 40.0, 40.0]):
        u = np.asarray(base) * sensitivity
        signs = itertools.product((-1, 0, 1), repeat=u.size)
        pairs += [(u, u + sensitivity * np.asarray(s, dtype=np.float64)) for s in signs]
    return pairs


# ----------------------------------------------------------------------- randomized response
PROBABILITY_BAD: Bad = [
    ({"truth_probability": 0}, "truth_probability"),
    ({"truth_probability": 1}, "truth_probability"),
    ({"truth_probability": 1.5}, "truth_probability"),
    ({"truth_probability": -0.1}, "truth_probability"),
    ({"truth_probability": NAN}, "truth_probability"),
    ({"truth_probability": True}, "truth_probability"),
    ({"truth_probability": "half"}, "truth_probability"),
    ({"random_yes_probability": 0}, "random_yes_probability"),
    ({"random_yes_probability": 1}, "random_yes_probability"),
    ({"random_yes_probability": 2}, "random_yes_probability"),
    ({"random_yes_probability": -1}, "random_yes_probability"),
    ({"random_yes_probability": NAN}, "random_yes_probability"),
    ({"random_yes_probability": True}, "random_yes_probability"),
]

EPSILON_BAD: Bad = [
    ({"epsilon": 0}, "epsilon"),
    ({"epsilon": -1}, "epsilon"),
    ({"epsilon": NAN}, "epsilon"),
    ({"epsilon": INF}, "epsilon"),
    ({"epsilon": True}, "epsilon"),
    ({"epsilon": "abc"}, "epsilon"),
]

CATEGORIES_BAD: Bad = [
    ({"categories": value}, "categories")
    for value in (1, 0, -3, True, [], ["a"], ["a", "a"], "abc", 2.5, None, 10**7, [[], ["b"]])
]

# (id, factory, valid kwargs, bad kwargs)
RR_CASES: list[tuple[str, Factory, dict[str, Any], Bad]] = [
    ("two-coin-fair", dp.make_randomized_response, {}, PROBABILITY_BAD),
    (
        "two-coin-unfair",
        dp.make_randomized_response,
        {"truth_probability": Fraction(1, 3), "random_yes_probability": 0.75},
        PROBABILITY_BAD,
    ),
    ("epsilon", dp.make_randomized_response_epsilon, {"epsilon": 1}, EPSILON_BAD),
    (
        "k-ary",
        dp.make_generalized_randomized_response,
        {"categories": 4, "epsilon": 1.5},
        EPSILON_BAD + CATEGORIES_BAD,
    ),
    (
        "k-ary-labels",
        dp.make_generalized_randomized_response,
        {"categories": ["red", "green", "blue"], "epsilon": "1/2"},
        EPSILON_BAD + CATEGORIES_BAD,
    ),
]


@pytest.mark.parametrize(
    ("factory", "valid", "bad"),
    [case[1:] for case in RR_CASES],
    ids=[case[0] for case in RR_CASES],
)
def test_randomized_response_conforms(factory: Factory, valid: dict[str, Any], bad: Bad) -> None:
    m = factory(**valid)
    privacy = conform_finite_output(factory, valid, bad=bad, neighbour_pairs=all_answer_pairs(m))
    claim = m.map(Fraction(1))
    assert isinstance(claim, PureDP)
    assert abs(float(privacy.realised) - float(claim.epsilon)) <= 1e-12 * float(claim.epsilon)


@pytest.mark.parametrize(
    "factory", [dp.make_randomized_response, lambda: dp.make_randomized_response_epsilon(2)]
)
def test_binary_randomized_response_shapes(factory: Callable[[], Measurement[Any]]) -> None:
    m = factory()
    assert type(m(True)) is bool and type(m(0)) is bool
    for shape in ((7,), (2, 3)):
        for data in (np.ones(shape, dtype=bool), np.zeros(shape, dtype=np.int64)):
            out = m(data)
            assert isinstance(out, np.ndarray) and out.shape == shape and out.dtype == bool
    assert m([True, False, True]).shape == (3,)


def test_binary_randomized_response_refuses_non_answers() -> None:
    m = dp.make_randomized_response()
    for data in (2, "yes", [0, 2], [0.5], None):
        with pytest.raises(InvalidDataError):
            m(data)


def test_k_ary_randomized_response_shapes() -> None:
    m = dp.make_generalized_randomized_response(4, 1)
    assert type(m(3)) is int and 0 <= m(3) < 4
    for shape in ((7,), (2, 3)):
        out = m(np.full(shape, 2))
        assert isinstance(out, np.ndarray) and out.shape == shape and out.dtype == np.int64
    for data in (4, -1, 1.5, [True, False], "a"):
        with pytest.raises(InvalidDataError):
            m(data)

    labels = ["red", "green", "blue"]
    named = dp.make_generalized_randomized_response(labels, 1)
    assert named("green") in labels
    for shape in ((7,), (2, 3)):
        out = named(np.full(shape, "blue", dtype=object))
        assert isinstance(out, np.ndarray) and out.shape == shape
        assert set(out.reshape(-1).tolist()) <= set(labels)
    with pytest.raises(InvalidDataError):
        named("purple")


@parametrize_mechanism_checks(
    mechanism_checks(
        dp.make_generalized_randomized_response,
        {"categories": 4, "epsilon": 1},
        bad_kwargs=EPSILON_BAD + CATEGORIES_BAD,
        sample_input=0,
        neighbour_input=1,
        name="k-ary-rr",
    )
)
def test_check_mechanism_on_k_ary_randomized_response(check: MechanismCheck) -> None:
    check()


def test_finite_conformance_rejects_a_broken_claim_or_a_lenient_factory() -> None:
    def claiming_half(**kwargs: Any) -> Measurement[Any]:
        real = dp.make_randomized_response_epsilon(**kwargs)
        return dataclasses.replace(real, privacy_map=lambda d: PureDP(d * kwargs["epsilon"] / 2))

    with pytest.raises(PrivacyCheckError, match="realised ε is"):
        conform_finite_output(
            claiming_half, {"epsilon": 1}, bad=EPSILON_BAD, neighbour_pairs=[(True, False)]
        )

    def lenient(epsilon: Any) -> Measurement[Any]:
        return dp.make_randomized_response_epsilon(abs(epsilon))  # "repairs" a negative ε

    with pytest.raises(pytest.fail.Exception, match="was accepted"):
        conform_finite_output(
            lenient, {"epsilon": 1}, bad=[({"epsilon": -1}, "epsilon")], neighbour_pairs=[(1, 0)]
        )


# ----------------------------------------------------------------------- selection
def rnm_gumbel(**kwargs: Any) -> Measurement[Any]:
    return dp.make_report_noisy_max(noise="gumbel", **kwargs)


def rnm_exponential(**kwargs: Any) -> Measurement[Any]:
    return dp.make_report_noisy_max(noise="exponential", **kwargs)


SELECTION_BAD: Bad = [
    ({"epsilon": 0}, "epsilon"),
    ({"epsilon": -1}, "epsilon"),
    ({"epsilon": NAN}, "epsilon"),
    ({"epsilon": INF}, "epsilon"),
    ({"epsilon": True}, "epsilon"),
    ({"epsilon": "x"}, "epsilon"),
    ({"sensitivity": 0}, "sensitivity"),
    ({"sensitivity": -2}, "sensitivity"),
    ({"sensitivity": NAN}, "sensitivity"),
    ({"sensitivity": True}, "sensitivity"),
    ({"monotonic": "yes"}, "monotonic"),
    ({"monotonic": 1}, "monotonic"),
    ({"epsilon": 1e-300, "sensitivity": 1e10}, "epsilon / sensitivity"),
]

# (id, factory, extra bad kwargs)
SELECTION_CASES: list[tuple[str, Factory, Bad]] = [
    ("exponential", dp.make_exponential, []),
    (
        "report-noisy-max",
        dp.make_report_noisy_max,
        [({"noise": "laplace"}, "noise"), ({"noise": None}, "noise")],
    ),
    ("rnm-gumbel", rnm_gumbel, []),
    ("rnm-exponential", rnm_exponential, []),
    ("permute-and-flip", dp.make_permute_and_flip, []),
]
SELECTION_VALID: list[dict[str, Any]] = [
    {"epsilon": 1, "sensitivity": 1},
    {"epsilon": 0.5, "sensitivity": 3, "monotonic": False},
    {"epsilon": 2, "sensitivity": 0.25},
]


@pytest.mark.parametrize("valid", SELECTION_VALID, ids=["eps1-du1", "eps0.5-du3", "eps2-du0.25"])
@pytest.mark.parametrize(
    ("factory", "extra_bad"),
    [case[1:] for case in SELECTION_CASES],
    ids=[case[0] for case in SELECTION_CASES],
)
def test_selection_conforms(factory: Factory, extra_bad: Bad, valid: dict[str, Any]) -> None:
    sensitivity = float(valid["sensitivity"])
    privacy = conform_finite_output(
        factory,
        valid,
        bad=SELECTION_BAD + extra_bad,
        neighbour_pairs=vertex_pairs(sensitivity),
    )
    epsilon = float(valid["epsilon"])
    assert float(privacy.realised) <= epsilon * (1 + 1e-9)
    assert float(privacy.realised) > 0.999 * epsilon  # (0, 40, 40)·Δu: within e^-10 of ε


@pytest.mark.parametrize(
    "factory", [case[1] for case in SELECTION_CASES], ids=[case[0] for case in SELECTION_CASES]
)
def test_selection_shapes(factory: Factory) -> None:
    """One vector of k scores gives one Python int in [0, k); an (m, k) array gives m int64
    indices (one release per row); integer scores are accepted."""
    m = factory(epsilon=1, sensitivity=1)
    for utility in ([0.0, 1.0, 2.0], np.arange(5), np.array([3])):
        out = m(utility)
        assert type(out) is int and 0 <= out < np.size(utility)
    rows = m(np.zeros((6, 4)))
    assert isinstance(rows, np.ndarray) and rows.shape == (6,) and rows.dtype == np.int64
    assert np.all((rows >= 0) & (rows < 4))
    empty = m(np.zeros((0, 4)))
    assert isinstance(empty, np.ndarray) and empty.shape == (0,)
    for bad in ([], 3.0, [[[1.0]]], ["a", "b"], [2**60, 0], np.zeros((2, 0))):
        with pytest.raises(InvalidDataError):
            m(bad)


@parametrize_mechanism_checks(
    *(
        mechanism_checks(
            factory,
            {"epsilon": 1, "sensitivity": 1},
            bad_kwargs=SELECTION_BAD,
            sample_input=np.zeros(2),
            neighbour_input=np.array([-1.0, 1.0]),
            neighbour_pairs=vertex_pairs(1.0),
            input_kind="vector",
        )
        for factory in (dp.make_exponential, dp.make_permute_and_flip, dp.make_report_noisy_max)
    )
)
def test_check_mechanism_on_selection(check: MechanismCheck) -> None:
    check()


@parametrize_mechanism_checks(
    mechanism_checks(
        dp.make_randomized_response_epsilon,
        {"epsilon": 1},
        bad_kwargs=EPSILON_BAD,
        sample_input=True,
        neighbour_input=False,
        name="binary-rr",
    )
)
def test_check_mechanism_on_binary_randomized_response(check: MechanismCheck) -> None:
    check()


def test_selection_conformance_rejects_a_monotonic_misuse() -> None:
    """monotonic=True on non-monotone vertex neighbours realises 2ε: the privacy step fails."""
    with pytest.raises(PrivacyCheckError, match="realised ε is"):
        conform_finite_output(
            dp.make_exponential,
            {"epsilon": 1, "sensitivity": 1, "monotonic": True},
            bad=[],
            neighbour_pairs=vertex_pairs(1.0),
        )
