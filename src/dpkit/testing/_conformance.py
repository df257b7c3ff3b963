"""A conformance suite every mechanism should pass, in the spirit of scikit-learn's
``check_estimator`` and ``parametrize_with_checks``.

:func:`check_mechanism` builds a measurement from a constructor and runs every check, in order;
:func:`mechanism_checks` yields the same checks one by one (each a :class:`MechanismCheck` you can
call), and :func:`parametrize_mechanism_checks` makes them one pytest test id per (mechanism,
check), so that a failure names its check and one check can be run alone. The checks
(:data:`CHECKS`):

a. **privacy** — the declared loss is honoured: the exact check
   (:func:`~dpkit.testing.check_measurement_exact`) when one applies, else a statistical audit
   (:func:`~dpkit.testing.audit_measurement`) on ``sample_input`` and ``neighbour_input``;
b. **parameters** — each bad set of arguments raises
   :class:`~dpkit.errors.InvalidParameterError` whose ``.parameter`` names the culprit;
c. **data** — NaN and ±inf inputs raise :class:`~dpkit.errors.InvalidDataError`;
d. **shapes** — a scalar input gives a plain Python scalar; arrays of shape (n,) and (2, 3) give
   arrays of the same shape;
e. **post-processing** — ``make_postprocess`` (and ``measurement >> f``) keep the privacy map;
f. **immutability** — setting an attribute raises :class:`dataclasses.FrozenInstanceError`.

A failing check raises :class:`~dpkit.errors.PrivacyCheckError` naming the check (a factory
that does not build a :class:`~dpkit.core._framework.Measurement` fails every check as
``'construct'``); :func:`check_mechanism` stops at the first and otherwise returns a
:class:`ConformanceReport`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dpkit._exact import Number, fraction_of
from dpkit.core._framework import Measurement, make_postprocess
from dpkit.errors import InvalidDataError, InvalidParameterError, PrivacyCheckError
from dpkit.testing._audit import AuditResult, audit_measurement
from dpkit.testing._exact import CheckResult, check_measurement_exact
from dpkit.testing._failures import EXTREME_FLOATS, FailureCheckResult, check_failure_behaviour

if TYPE_CHECKING:
    import pytest

__all__ = [
    "CHECKS",
    "OMIT",
    "CheckOutcome",
    "ConformanceReport",
    "MechanismCheck",
    "check_mechanism",
    "mechanism_checks",
    "parametrize_mechanism_checks",
]

CHECKS: tuple[str, ...] = ("privacy", "parameters", "data", "shapes", "post-processing", "frozen")
"""The conformance checks, in the order :func:`check_mechanism` runs them."""


class _Omit:
    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = _Omit()
"""Use as a value in ``bad_kwargs`` to leave that argument out of the call."""


@dataclass(frozen=True, slots=True)
class ConformanceReport:
    """What :func:`check_mechanism` verified.

    Attributes:
        measurement: the measurement built from ``valid_kwargs``.
        privacy: the exact check's or the audit's result.
        checks: the names of the checks that passed, in order.
    """

    measurement: Measurement[Any]
    privacy: CheckResult | AuditResult
    checks: tuple[str, ...]


def _fail(check: str, message: str) -> PrivacyCheckError:
    return PrivacyCheckError(f"conformance check '{check}' failed: {message}")


def _merge(valid: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = {**valid, **override}
    return {key: value for key, value in merged.items() if value is not OMIT}


def _check_shapes(measurement: Measurement[Any], sample_input: Any, input_kind: str) -> str:
    """Scalars give scalars and arrays keep their shape (elementwise); a vector gives one
    release and a stack of k vectors gives k (vector)."""
    if input_kind == "vector":
        one = measurement(np.asarray(sample_input))
        if isinstance(one, np.ndarray) and one.ndim > 0:
            raise _fail("shapes", f"one input vector gave an array of shape {one.shape}")
        rows = measurement(np.stack([np.asarray(sample_input)] * 3))
        if np.shape(rows) != (3,):
            raise _fail("shapes", f"3 stacked input vectors gave shape {np.shape(rows)}")
        return "shapes (vector → one release, 3 rows → 3)"
    scalar_out = measurement(sample_input)
    if isinstance(scalar_out, np.ndarray):
        raise _fail("shapes", f"a scalar input gave an array of shape {scalar_out.shape}")
    if isinstance(scalar_out, np.generic):
        raise _fail(
            "shapes",
            f"a scalar input gave numpy {type(scalar_out).__name__}; expected a Python scalar",
        )
    refused_by_shape = 0
    for shape in ((7,), (2, 3)):
        try:
            out = measurement(np.full(shape, sample_input))
        except InvalidDataError as error:
            if "changed_coordinates" not in str(error):
                raise
            # a grid mechanism calibrated for one coordinate refuses arrays by their shape
            # (public), whatever their values: that is allowed, and checked by the edges
            refused_by_shape += 1
            continue
        if not isinstance(out, np.ndarray) or out.shape != shape:
            got = out.shape if isinstance(out, np.ndarray) else type(out).__name__
            raise _fail("shapes", f"an input of shape {shape} gave {got}")
        numeric_scalar = isinstance(scalar_out, int | float | bool)
        if numeric_scalar and out.dtype.kind not in "biuf":
            raise _fail("shapes", f"an input of shape {shape} gave dtype {out.dtype}")
    if refused_by_shape:
        return "shapes (scalar; arrays refused by their shape without changed_coordinates)"
    return "shapes (scalar, (7,), (2, 3))"


def edge_pairs(
    sample_input: Any, distance: Fraction, input_kind: Literal["elementwise", "vector"]
) -> list[tuple[Any, Any]]:
    """Neighbouring inputs at the edges of float64 and the grids: ``x`` and ``x ± d`` for every
    finite value of :data:`~dpkit.testing.EXTREME_FLOATS` (and off-grid values);
    vectors are filled with ``x`` and differ in their first coordinate."""
    step = float(distance)
    pairs: list[tuple[Any, Any]] = []
    for x in EXTREME_FLOATS:
        if not np.isfinite(x):
            continue
        for y in (x + step, x - step):
            if input_kind == "vector":
                width = max(int(np.size(sample_input)), 1)
                first = np.full(width, x)
                second = first.copy()
                second[0] = y
                pairs.append((first, second))
            else:
                pairs.append((x, y))
    return pairs


def _edge_message(result: FailureCheckResult) -> str:
    try:
        result.raise_if_failed()
    except PrivacyCheckError as error:
        return str(error)
    return "passed"


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What one passing check verified.

    Attributes:
        check: the check's name (one of :data:`CHECKS`).
        summary: what it verified, e.g. ``"privacy (exact check)"``.
        privacy: for the ``privacy`` check, the exact check's or the audit's result.
    """

    check: str
    summary: str
    privacy: CheckResult | AuditResult | None = None


@dataclass(frozen=True, slots=True)
class _Subject:
    """A mechanism under test: its constructor and how to exercise it."""

    factory: Callable[..., Measurement[Any]]
    valid_kwargs: dict[str, Any]
    bad_kwargs: tuple[tuple[dict[str, Any], str], ...]
    sample_input: Any
    neighbour_input: Any
    d_in: Number | None
    neighbour_pairs: tuple[tuple[Any, Any], ...] | None
    input_kind: Literal["elementwise", "vector"]
    audit_samples_per_side: int
    audit_confidence: float

    def build(self) -> Measurement[Any]:
        measurement = self.factory(**self.valid_kwargs)
        if not isinstance(measurement, Measurement):
            raise _fail(
                "construct", f"factory returned {type(measurement).__name__}, not a Measurement"
            )
        return measurement

    def distance(self, measurement: Measurement[Any]) -> Fraction | None:
        return fraction_of("d_in", self.d_in) if self.d_in is not None else measurement.d_in

    def pairs(self, measurement: Measurement[Any]) -> list[tuple[Any, Any]] | None:
        """The neighbour pairs of the exact check: as given, or, for a finite-output mechanism,
        the sample and neighbour inputs both ways."""
        if self.neighbour_pairs is None and measurement.info.output_pmf is not None:
            return [
                (self.sample_input, self.neighbour_input),
                (self.neighbour_input, self.sample_input),
            ]
        return None if self.neighbour_pairs is None else list(self.neighbour_pairs)


def _privacy(
    subject: _Subject, measurement: Measurement[Any]
) -> tuple[CheckResult | AuditResult, str]:
    """(a) the declared loss is honoured: the result, and how it was checked."""
    distance = subject.distance(measurement)
    privacy: CheckResult | AuditResult
    try:
        privacy = check_measurement_exact(
            measurement, distance, neighbour_pairs=subject.pairs(measurement)
        )
        how = "exact check"
    except NotImplementedError:
        privacy = audit_measurement(
            measurement,
            subject.sample_input,
            subject.neighbour_input,
            subject.audit_samples_per_side,
            d_in=distance,
            confidence=subject.audit_confidence,
        )
        how = "statistical audit"
    try:
        privacy.raise_if_failed()
    except PrivacyCheckError as error:
        raise _fail("privacy", f"{how}: {error}") from error
    return privacy, f"privacy ({how})"


def _check_privacy(subject: _Subject, measurement: Measurement[Any]) -> CheckOutcome:
    privacy, summary = _privacy(subject, measurement)
    return CheckOutcome("privacy", summary, privacy)


def _check_parameters(subject: _Subject, measurement: Measurement[Any]) -> CheckOutcome:
    """(b) bad parameters are refused, naming the parameter."""
    for overrides, parameter in subject.bad_kwargs:
        kwargs = _merge(subject.valid_kwargs, overrides)
        try:
            subject.factory(**kwargs)
        except InvalidParameterError as error:
            if error.parameter != parameter:
                raise _fail(
                    "parameters",
                    f"{kwargs} raised InvalidParameterError about "
                    f"{error.parameter!r}, expected {parameter!r}: {error}",
                ) from error
        except Exception as error:
            raise _fail(
                "parameters",
                f"{kwargs} raised {type(error).__name__} ({error}), expected InvalidParameterError",
            ) from error
        else:
            raise _fail(
                "parameters",
                f"{kwargs} was accepted; expected InvalidParameterError about {parameter!r}",
            )
    return CheckOutcome("parameters", f"parameters ({len(subject.bad_kwargs)} refused)")


def _check_data(subject: _Subject, measurement: Measurement[Any]) -> CheckOutcome:
    """(c) NaN is refused (it is at no finite distance from any input, so it is never a
    neighbour), and neighbouring inputs at the edges fail alike (an exception is an output)."""
    if subject.input_kind == "vector":
        width = np.size(subject.sample_input)
        bad_inputs: list[Any] = [np.full(width, np.nan)]
    else:
        bad_inputs = [np.nan, np.array([0.0, np.nan])]
    for bad in bad_inputs:
        try:
            measurement(bad)
        except InvalidDataError:
            continue
        except Exception as error:
            raise _fail(
                "data",
                f"input {bad!r} raised {type(error).__name__} ({error}), expected InvalidDataError",
            ) from error
        raise _fail("data", f"input {bad!r} was accepted; expected InvalidDataError")
    if measurement.info.output_pmf is not None:
        # a finite domain (categories, bits): its edges are the neighbour pairs themselves
        edges = list(subject.pairs(measurement) or [])
    else:
        distance = subject.distance(measurement)
        edges = edge_pairs(subject.sample_input, distance or Fraction(1), subject.input_kind)
    behaviour = check_failure_behaviour(measurement, edges)
    if not behaviour.passed:
        raise _fail("edges", _edge_message(behaviour))
    return CheckOutcome("data", f"data (NaN refused; {len(edges)} edge pairs fail alike)")


def _check_shapes_outcome(subject: _Subject, measurement: Measurement[Any]) -> CheckOutcome:
    """(d) shapes."""
    try:
        summary = _check_shapes(measurement, subject.sample_input, subject.input_kind)
    except PrivacyCheckError:
        raise
    except Exception as error:
        raise _fail("shapes", f"{type(error).__name__}: {error}") from error
    return CheckOutcome("shapes", summary)


def _check_post_processing(subject: _Subject, measurement: Measurement[Any]) -> CheckOutcome:
    """(e) post-processing keeps the map."""
    distance = subject.distance(measurement)
    for post in (make_postprocess(measurement, lambda value: value), measurement >> abs):
        if post.map(distance) != measurement.map(distance):
            raise _fail("post-processing", f"{post.map(distance)} != {measurement.map(distance)}")
    return CheckOutcome("post-processing", "post-processing keeps the map")


def _check_frozen(subject: _Subject, measurement: Measurement[Any]) -> CheckOutcome:
    """(f) frozen: setting an attribute is refused."""
    for name in ("privacy_map", "function", "d_in"):
        try:
            setattr(measurement, name, None)
        except dataclasses.FrozenInstanceError:
            continue
        raise _fail("frozen", f"setting {name!r} on the measurement was allowed")
    return CheckOutcome("frozen", "frozen")


_RUNNERS: dict[str, Callable[[_Subject, Measurement[Any]], CheckOutcome]] = {
    "privacy": _check_privacy,
    "parameters": _check_parameters,
    "data": _check_data,
    "shapes": _check_shapes_outcome,
    "post-processing": _check_post_processing,
    "frozen": _check_frozen,
}


@dataclass(frozen=True, slots=True)
class MechanismCheck:
    """One conformance check of one mechanism, from :func:`mechanism_checks`.

    Call it to run the check: it builds the measurement afresh (a check never sees what another
    did to it), returns a :class:`CheckOutcome`, or raises
    :class:`~dpkit.errors.PrivacyCheckError` naming the check.

    Attributes:
        mechanism: the mechanism's name (``name=`` of :func:`mechanism_checks`).
        check: the check's name, one of :data:`CHECKS`.
    """

    mechanism: str
    check: str
    _subject: _Subject = field(repr=False, compare=False)

    @property
    def id(self) -> str:
        """``"<mechanism>-<check>"``, the test id :func:`parametrize_mechanism_checks` gives."""
        return f"{self.mechanism}-{self.check}"

    def __call__(self) -> CheckOutcome:
        return _RUNNERS[self.check](self._subject, self._subject.build())


def _subject(
    factory: Callable[..., Measurement[Any]],
    valid_kwargs: dict[str, Any],
    bad_kwargs: Sequence[tuple[dict[str, Any], str]],
    sample_input: Any,
    neighbour_input: Any,
    d_in: Number | None,
    neighbour_pairs: Iterable[tuple[Any, Any]] | None,
    input_kind: Literal["elementwise", "vector"],
    audit_samples_per_side: int,
    audit_confidence: float,
) -> _Subject:
    if input_kind not in ("elementwise", "vector"):
        raise InvalidParameterError("input_kind", input_kind, "'elementwise' or 'vector'")
    return _Subject(
        factory,
        dict(valid_kwargs),
        tuple(bad_kwargs),
        sample_input,
        neighbour_input,
        d_in,
        None if neighbour_pairs is None else tuple(neighbour_pairs),
        input_kind,
        audit_samples_per_side,
        audit_confidence,
    )


def mechanism_checks(
    factory: Callable[..., Measurement[Any]],
    valid_kwargs: dict[str, Any],
    *,
    bad_kwargs: Sequence[tuple[dict[str, Any], str]] = (),
    sample_input: Any = 0.0,
    neighbour_input: Any = 1.0,
    d_in: Number | None = None,
    neighbour_pairs: Iterable[tuple[Any, Any]] | None = None,
    input_kind: Literal["elementwise", "vector"] = "elementwise",
    audit_samples_per_side: int = 50_000,
    audit_confidence: float = 0.999,
    name: str | None = None,
    checks: Iterable[str] | None = None,
) -> Iterator[MechanismCheck]:
    """The conformance checks of the mechanism ``factory(**valid_kwargs)``, one at a time.

    Takes the arguments of :func:`check_mechanism`, and:

    Args:
        name: the mechanism's name in each check's :attr:`~MechanismCheck.id` (default: the
            factory's ``__name__``).
        checks: the names of the checks to yield (default :data:`CHECKS`, all of them), e.g.
            every check but ``"shapes"`` for a mechanism whose outputs are labels.

    Yields:
        A :class:`MechanismCheck` per check, in the order of :data:`CHECKS`. Nothing is built
        until a check is called.

    Raises:
        InvalidParameterError: ``checks`` names an unknown check, or ``input_kind`` is unknown.

    >>> import dpkit as dp
    >>> checks = list(mechanism_checks(dp.make_laplace, {"sensitivity": 1, "epsilon": 1}))
    >>> [check.check for check in checks]
    ['privacy', 'parameters', 'data', 'shapes', 'post-processing', 'frozen']
    >>> checks[0].id
    'make_laplace-privacy'
    >>> checks[0]().summary
    'privacy (exact check)'
    """
    if checks is None:
        selected = CHECKS
    else:
        wanted = [checks] if isinstance(checks, str) else list(checks)
        unknown = [check for check in wanted if check not in CHECKS]
        if unknown or not wanted:
            raise InvalidParameterError(
                "checks", wanted, f"a non-empty selection of {', '.join(CHECKS)}"
            )
        selected = tuple(check for check in CHECKS if check in wanted)
    subject = _subject(
        factory,
        valid_kwargs,
        bad_kwargs,
        sample_input,
        neighbour_input,
        d_in,
        neighbour_pairs,
        input_kind,
        audit_samples_per_side,
        audit_confidence,
    )
    label = name if name is not None else getattr(factory, "__name__", type(factory).__name__)
    for check in selected:
        yield MechanismCheck(label, check, subject)


def parametrize_mechanism_checks(*groups: Iterable[MechanismCheck]) -> pytest.MarkDecorator:
    """A pytest decorator running each check of :func:`mechanism_checks` as its own test.

    The decorated test takes one argument, ``check``, and calls it; its ids are
    ``<mechanism>-<check>`` (``pytest -k privacy`` runs the privacy checks only)::

        from dpkit.testing import mechanism_checks, parametrize_mechanism_checks

        @parametrize_mechanism_checks(
            mechanism_checks(make_my_noise, {"epsilon": 1}, name="my-noise", bad_kwargs=BAD),
            mechanism_checks(make_my_noise, {"rho": 0.5}, name="my-noise-zcdp"),
        )
        def test_my_mechanism(check):
            check()

    Raises:
        InvalidParameterError: two checks have the same id (give each mechanism its ``name``).
    """
    import pytest

    checks = [check for group in groups for check in group]
    ids = [check.id for check in checks]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise InvalidParameterError(
            "name",
            repeated,
            "unique per mechanism",
            hint="Pass name= to mechanism_checks for each case of the same factory.",
        )
    return pytest.mark.parametrize("check", checks, ids=ids)


def check_mechanism(
    factory: Callable[..., Measurement[Any]],
    valid_kwargs: dict[str, Any],
    *,
    bad_kwargs: Sequence[tuple[dict[str, Any], str]] = (),
    sample_input: Any = 0.0,
    neighbour_input: Any = 1.0,
    d_in: Number | None = None,
    neighbour_pairs: Iterable[tuple[Any, Any]] | None = None,
    input_kind: Literal["elementwise", "vector"] = "elementwise",
    audit_samples_per_side: int = 50_000,
    audit_confidence: float = 0.999,
) -> ConformanceReport:
    """Run the conformance suite on the mechanism ``factory(**valid_kwargs)``: every check of
    :data:`CHECKS` in order, on one measurement (to run them as separate tests, see
    :func:`mechanism_checks` and :func:`parametrize_mechanism_checks`).

    Args:
        factory: a ``make_*`` constructor.
        valid_kwargs: arguments that build a valid measurement.
        bad_kwargs: pairs ``(overrides, parameter)``: ``factory(**{**valid_kwargs,
            **overrides})`` must raise InvalidParameterError with ``.parameter == parameter``.
            A value of :data:`OMIT` removes that argument.
        sample_input: a scalar input; arrays for the shape check are filled with it, so pick a
            value the mechanism takes as is (0 for the grid mechanisms).
        neighbour_input: a neighbour of ``sample_input`` at distance ``d_in`` (for the audit).
        d_in: the distance the privacy check uses; default the measurement's own ``d_in``.
        neighbour_pairs: for finite-output mechanisms (``info.output_pmf``), the pairs of
            neighbouring inputs the exact check compares; default: the sample and neighbour
            inputs, both ways.
        input_kind: ``"elementwise"`` (each element of an array is released independently:
            a scalar gives a scalar, an array an array of the same shape) or ``"vector"`` (a
            1-d input gives one release, e.g. a utility vector; a 2-d input one per row).
        audit_samples_per_side: releases per input when no exact check applies.
        audit_confidence: the audit's confidence.

    Returns:
        A :class:`ConformanceReport`.

    Raises:
        PrivacyCheckError: the first check that fails, named in the message.
    """
    subject = _subject(
        factory,
        valid_kwargs,
        bad_kwargs,
        sample_input,
        neighbour_input,
        d_in,
        neighbour_pairs,
        input_kind,
        audit_samples_per_side,
        audit_confidence,
    )
    measurement = subject.build()
    privacy, summary = _privacy(subject, measurement)
    others = [_RUNNERS[check](subject, measurement).summary for check in CHECKS[1:]]
    return ConformanceReport(measurement, privacy, (summary, *others))
