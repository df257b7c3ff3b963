"""The conformance suite on the additive mechanisms, one test id per (mechanism, check), and on
broken ones it must reject: each broken mechanism fails the check named for its fault."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._framework import Measurement, make_postprocess
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidParameterError, PrivacyCheckError
from dpkit.testing import (
    CHECKS,
    OMIT,
    AuditResult,
    CheckResult,
    ConformanceReport,
    MechanismCheck,
    check_mechanism,
    mechanism_checks,
    parametrize_mechanism_checks,
)

LAPLACE_BAD: list[tuple[dict[str, Any], str]] = [
    ({"epsilon": -1}, "epsilon"),
    ({"epsilon": 0}, "epsilon"),
    ({"epsilon": float("nan")}, "epsilon"),
    ({"epsilon": OMIT}, "epsilon"),  # neither epsilon nor scale
    ({"scale": 2}, "epsilon"),  # both epsilon and scale
    ({"sensitivity": 0}, "sensitivity"),
    ({"sensitivity": -2}, "sensitivity"),
    ({"sensitivity": True}, "sensitivity"),
    ({"grid_exponent": 2.5}, "grid_exponent"),
    ({"changed_coordinates": 0}, "changed_coordinates"),
]

GAUSSIAN_BAD: list[tuple[dict[str, Any], str]] = [
    ({"delta": 0}, "delta"),
    ({"delta": 1}, "delta"),
    ({"delta": OMIT}, "delta"),
    ({"epsilon": -0.5}, "epsilon"),
    ({"sensitivity": 0}, "sensitivity"),
    ({"calibration": "optimal"}, "calibration"),
    ({"rho": 0.5}, "rho"),  # rho together with epsilon and delta
]

ZCDP_BAD: list[tuple[dict[str, Any], str]] = [
    ({"rho": 0}, "rho"),
    ({"rho": -1}, "rho"),
    ({"rho": "a lot"}, "rho"),
    ({"sensitivity": -1}, "sensitivity"),
]

CASES: list[tuple[str, Callable[..., Measurement[Any]], dict[str, Any], list[Any], Any, Any]] = [
    ("laplace", dp.make_laplace, {"sensitivity": 1, "epsilon": 1}, LAPLACE_BAD, 0.0, 1.0),
    ("laplace-scale", dp.make_laplace, {"sensitivity": 2, "scale": 3}, [], 0.0, 2.0),
    (
        "geometric",
        dp.make_geometric,
        {"sensitivity": 1, "epsilon": 0.5},
        [({"epsilon": -1}, "epsilon"), ({"sensitivity": 0}, "sensitivity")],
        0,
        1,
    ),
    (
        "gaussian",
        dp.make_gaussian,
        {"sensitivity": 1, "epsilon": 1, "delta": 1e-6},
        GAUSSIAN_BAD,
        0.0,
        1.0,
    ),
    ("gaussian-zcdp", dp.make_gaussian, {"sensitivity": 1, "rho": 0.5}, ZCDP_BAD, 0.0, 1.0),
    (
        "discrete-gaussian",
        dp.make_discrete_gaussian,
        {"sensitivity": 2, "epsilon": 0.5, "delta": 1e-7},
        GAUSSIAN_BAD,
        0,
        2,
    ),
    (
        "discrete-gaussian-zcdp",
        dp.make_discrete_gaussian,
        {"sensitivity": 1, "rho": Fraction(1, 8)},
        ZCDP_BAD,
        0,
        1,
    ),
]


@parametrize_mechanism_checks(
    *(
        mechanism_checks(
            factory, valid, bad_kwargs=bad, sample_input=x, neighbour_input=neighbour, name=name
        )
        for name, factory, valid, bad, x, neighbour in CASES
    )
)
def test_additive_mechanisms_conform(check: MechanismCheck) -> None:
    outcome = check()
    assert outcome.check == check.check
    if check.check == "privacy":
        assert isinstance(outcome.privacy, CheckResult)  # the exact check applied
        assert outcome.summary == "privacy (exact check)"


def test_check_mechanism_runs_every_check_in_order() -> None:
    _name, factory, valid, bad, x, neighbour = CASES[0]
    report = check_mechanism(
        factory, valid, bad_kwargs=bad, sample_input=x, neighbour_input=neighbour
    )
    assert isinstance(report, ConformanceReport)
    assert isinstance(report.privacy, CheckResult)  # the exact check applied
    assert report.checks[0] == "privacy (exact check)"
    assert len(report.checks) == len(CHECKS) == 6
    each = [check().summary for check in mechanism_checks(factory, valid, bad_kwargs=bad)]
    assert list(report.checks) == each


@pytest.mark.usefixtures("seeded")
def test_a_measurement_without_declared_noise_is_audited_instead() -> None:
    def factory(**kwargs: Any) -> Measurement[Any]:
        return make_postprocess(dp.make_laplace(**kwargs), lambda v: v)

    report = check_mechanism(
        factory, {"sensitivity": 1, "epsilon": 1}, audit_samples_per_side=5_000
    )
    assert isinstance(report.privacy, AuditResult)
    assert report.checks[0] == "privacy (statistical audit)"


# ----------------------------------------------------------------------- what it must reject
def laplace_claiming_half(**kwargs: Any) -> Measurement[Any]:
    real = dp.make_laplace(kwargs["sensitivity"], 2 * kwargs["epsilon"])
    return dataclasses.replace(real, privacy_map=lambda d: PureDP(d * kwargs["epsilon"]))


def test_rejects_an_under_reported_loss() -> None:
    with pytest.raises(PrivacyCheckError, match="'privacy' failed"):
        check_mechanism(laplace_claiming_half, {"sensitivity": 1, "epsilon": 1})


@pytest.mark.usefixtures("seeded")
def test_rejects_an_under_reported_loss_by_audit_when_no_exact_check_applies() -> None:
    def factory(**kwargs: Any) -> Measurement[Any]:
        return make_postprocess(laplace_claiming_half(**kwargs), lambda v: v)

    with pytest.raises(PrivacyCheckError, match="'privacy' failed: statistical audit"):
        check_mechanism(factory, {"sensitivity": 1, "epsilon": 1}, audit_samples_per_side=5_000)


def test_rejects_a_silently_repaired_parameter() -> None:
    def lenient(sensitivity: Any, epsilon: Any) -> Measurement[Any]:
        return dp.make_laplace(sensitivity, abs(epsilon))  # "fixes" a negative ε

    with pytest.raises(PrivacyCheckError, match=r"'parameters' failed.*was accepted"):
        check_mechanism(
            lenient, {"sensitivity": 1, "epsilon": 1}, bad_kwargs=[({"epsilon": -1}, "epsilon")]
        )


def test_rejects_an_error_naming_the_wrong_parameter() -> None:
    def confused(sensitivity: Any, epsilon: Any) -> Measurement[Any]:
        if epsilon <= 0:
            raise InvalidParameterError("eps", epsilon, "> 0")
        return dp.make_laplace(sensitivity, epsilon)

    with pytest.raises(PrivacyCheckError, match="about 'eps', expected 'epsilon'"):
        check_mechanism(
            confused, {"sensitivity": 1, "epsilon": 1}, bad_kwargs=[({"epsilon": -1}, "epsilon")]
        )


def test_rejects_a_generic_error_for_a_bad_parameter() -> None:
    def terse(sensitivity: Any, epsilon: Any) -> Measurement[Any]:
        if epsilon <= 0:
            raise ValueError("bad")
        return dp.make_laplace(sensitivity, epsilon)

    with pytest.raises(PrivacyCheckError, match="raised ValueError"):
        check_mechanism(
            terse, {"sensitivity": 1, "epsilon": 1}, bad_kwargs=[({"epsilon": -1}, "epsilon")]
        )


def with_function(function: Callable[[Any], Any]) -> Callable[..., Measurement[Any]]:
    def factory(**kwargs: Any) -> Measurement[Any]:
        return dataclasses.replace(dp.make_laplace(**kwargs), function=function)

    return factory


def test_rejects_a_mechanism_that_accepts_nan() -> None:
    real = dp.make_laplace(1, 1)

    def careless(data: Any) -> Any:
        array = np.asarray(data, dtype=np.float64)
        if not np.all(np.isfinite(array)):
            return data  # passes NaN through instead of refusing it
        return real(data)

    with pytest.raises(PrivacyCheckError, match="'data' failed"):
        check_mechanism(with_function(careless), {"sensitivity": 1, "epsilon": 1})


def test_rejects_numpy_scalars_and_lost_shapes() -> None:
    real = dp.make_laplace(1, 1)

    def numpy_scalar(data: Any) -> Any:
        out = real(data)
        return np.float64(out) if np.ndim(data) == 0 else out

    with pytest.raises(PrivacyCheckError, match=r"'shapes' failed.*Python scalar"):
        check_mechanism(with_function(numpy_scalar), {"sensitivity": 1, "epsilon": 1})

    def flattening(data: Any) -> Any:
        out = real(data)
        return np.ravel(out) if np.ndim(data) > 1 else out

    # arrays reach the function only when calibrated for them (else refused by their shape)
    vectors = {"sensitivity": 1, "epsilon": 1, "changed_coordinates": 6}
    real = dp.make_laplace(**vectors)
    with pytest.raises(PrivacyCheckError, match=r"'shapes' failed.*\(2, 3\)"):
        check_mechanism(with_function(flattening), vectors)


class MutableMeasurement(Measurement[Any]):
    """A measurement subclass that (wrongly) allows attribute assignment."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


def test_rejects_a_mutable_measurement() -> None:
    def factory(**kwargs: Any) -> Measurement[Any]:
        real = dp.make_laplace(**kwargs)
        fields = {f.name: getattr(real, f.name) for f in dataclasses.fields(real)}
        return MutableMeasurement(**fields)

    with pytest.raises(PrivacyCheckError, match="'frozen' failed"):
        check_mechanism(factory, {"sensitivity": 1, "epsilon": 1})


def test_rejects_a_factory_that_does_not_build_a_measurement() -> None:
    with pytest.raises(PrivacyCheckError, match="'construct' failed"):
        check_mechanism(lambda **kwargs: object(), {})  # type: ignore[arg-type]


# ----------------------------------------------------------------------- checks one at a time
def numpy_scalar_laplace(**kwargs: Any) -> Measurement[Any]:
    real = dp.make_laplace(**kwargs)

    def function(data: Any) -> Any:
        out = real(data)
        return np.float64(out) if np.ndim(data) == 0 else out

    return dataclasses.replace(real, function=function)


def mutable_laplace(**kwargs: Any) -> Measurement[Any]:
    real = dp.make_laplace(**kwargs)
    return MutableMeasurement(**{f.name: getattr(real, f.name) for f in dataclasses.fields(real)})


def lenient_laplace(sensitivity: Any, epsilon: Any) -> Measurement[Any]:
    return dp.make_laplace(sensitivity, abs(epsilon))  # "fixes" a negative ε


def nan_passing_laplace(**kwargs: Any) -> Measurement[Any]:
    real = dp.make_laplace(**kwargs)

    def function(data: Any) -> Any:
        if not np.all(np.isfinite(np.asarray(data, dtype=np.float64))):
            return data  # passes NaN through instead of refusing it
        return real(data)

    return dataclasses.replace(real, function=function)


class ForgetfulMeasurement(Measurement[Any]):
    """A measurement subclass whose ``>>`` (wrongly) builds a chain with another privacy map."""

    def __rshift__(self, other: Any) -> Any:
        return dp.make_laplace(1, 10)


def forgetful_laplace(**kwargs: Any) -> Measurement[Any]:
    real = dp.make_laplace(**kwargs)
    fields = {f.name: getattr(real, f.name) for f in dataclasses.fields(real)}
    return ForgetfulMeasurement(**fields)


@pytest.mark.parametrize(
    ("factory", "broken"),
    [
        (laplace_claiming_half, "privacy"),
        (lenient_laplace, "parameters"),
        (nan_passing_laplace, "data"),
        (numpy_scalar_laplace, "shapes"),
        (forgetful_laplace, "post-processing"),
        (mutable_laplace, "frozen"),
    ],
    ids=["privacy", "parameters", "data", "shapes", "post-processing", "frozen"],
)
def test_a_broken_mechanism_fails_the_named_check_and_only_it(
    factory: Callable[..., Measurement[Any]], broken: str
) -> None:
    """Each check runs alone, on a measurement of its own: the fault fails its check and no
    other (a check that cannot fail verifies nothing; one that fails for every fault names
    none)."""
    checks = mechanism_checks(
        factory,
        {"sensitivity": 1, "epsilon": 1},
        bad_kwargs=[({"epsilon": -1}, "epsilon")],
        name="broken",
    )
    failed = []
    for check in checks:
        try:
            check()
        except PrivacyCheckError as error:
            assert f"'{check.check}' failed" in str(error)
            failed.append(check.check)
    assert failed == [broken]


def test_checks_can_be_selected_and_are_yielded_in_order() -> None:
    valid = {"sensitivity": 1, "epsilon": 1}
    chosen = mechanism_checks(dp.make_laplace, valid, checks=["shapes", "privacy"], name="lap")
    assert [(c.mechanism, c.check, c.id) for c in chosen] == [
        ("lap", "privacy", "lap-privacy"),
        ("lap", "shapes", "lap-shapes"),
    ]
    assert [c.check for c in mechanism_checks(dp.make_laplace, valid)] == list(CHECKS)
    assert next(mechanism_checks(dp.make_laplace, valid)).mechanism == "make_laplace"
    for bad in (["privacy", "speed"], [], "everything"):
        with pytest.raises(InvalidParameterError) as caught:
            list(mechanism_checks(dp.make_laplace, valid, checks=bad))
        assert caught.value.parameter == "checks"


def test_a_factory_that_does_not_build_a_measurement_fails_every_check() -> None:
    for check in mechanism_checks(lambda **kwargs: object(), {}, name="nothing"):  # type: ignore[arg-type]
        with pytest.raises(PrivacyCheckError, match="'construct' failed"):
            check()


def test_parametrize_gives_one_id_per_mechanism_and_check() -> None:
    valid = {"sensitivity": 1, "epsilon": 1}
    mark = parametrize_mechanism_checks(
        mechanism_checks(dp.make_laplace, valid, name="a"),
        mechanism_checks(dp.make_laplace, valid, name="b", checks=["frozen"]),
    ).mark
    assert mark.args[0] == "check"
    assert mark.kwargs["ids"] == [f"a-{check}" for check in CHECKS] + ["b-frozen"]
    assert [c.id for c in mark.args[1]] == mark.kwargs["ids"]
    with pytest.raises(InvalidParameterError, match="name="):
        parametrize_mechanism_checks(
            mechanism_checks(dp.make_laplace, valid), mechanism_checks(dp.make_laplace, valid)
        )
