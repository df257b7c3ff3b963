"""A conformance suite every mechanism should pass, in the spirit of scikit-learn's
``check_estimator``.

:func:`check_mechanism` builds a measurement from a constructor and checks, in order:

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

The first failure raises :class:`~dpkit.errors.PrivacyCheckError` naming the check; success
returns a :class:`ConformanceReport`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit._exact import Number, fraction_of
from dpkit.core.framework import Measurement, make_postprocess
from dpkit.errors import InvalidDataError, InvalidParameterError, PrivacyCheckError
from dpkit.testing._audit import AuditResult, audit_measurement
from dpkit.testing._exact import CheckResult, check_measurement_exact
from dpkit.testing._failures import EXTREME_FLOATS, FailureCheckResult, check_failure_behaviour

__all__ = ["OMIT", "ConformanceReport", "check_mechanism"]


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
    """Run the conformance suite on the mechanism ``factory(**valid_kwargs)``.

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
    measurement = factory(**valid_kwargs)
    if not isinstance(measurement, Measurement):
        raise _fail(
            "construct", f"factory returned {type(measurement).__name__}, not a Measurement"
        )
    distance = fraction_of("d_in", d_in) if d_in is not None else measurement.d_in
    passed: list[str] = []

    # (a) the declared loss is honoured
    privacy: CheckResult | AuditResult
    if neighbour_pairs is None and measurement.info.output_pmf is not None:
        neighbour_pairs = [(sample_input, neighbour_input), (neighbour_input, sample_input)]
    try:
        privacy = check_measurement_exact(measurement, distance, neighbour_pairs=neighbour_pairs)
        how = "exact check"
    except NotImplementedError:
        privacy = audit_measurement(
            measurement,
            sample_input,
            neighbour_input,
            audit_samples_per_side,
            d_in=distance,
            confidence=audit_confidence,
        )
        how = "statistical audit"
    try:
        privacy.raise_if_failed()
    except PrivacyCheckError as error:
        raise _fail("privacy", f"{how}: {error}") from error
    passed.append(f"privacy ({how})")

    # (b) bad parameters are refused, naming the parameter
    for overrides, parameter in bad_kwargs:
        kwargs = _merge(valid_kwargs, overrides)
        try:
            factory(**kwargs)
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
    passed.append(f"parameters ({len(bad_kwargs)} refused)")

    # (c) NaN is refused (it is at no finite distance from any input, so it is never a
    # neighbour), and neighbouring inputs at the edges fail alike (an exception is an output)
    if input_kind == "vector":
        width = np.size(sample_input)
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
        edges = [(x, y) for x, y in (neighbour_pairs or [])]
    else:
        edges = edge_pairs(sample_input, distance or Fraction(1), input_kind)
    behaviour = check_failure_behaviour(measurement, edges)
    if not behaviour.passed:
        raise _fail("edges", _edge_message(behaviour))
    passed.append(f"data (NaN refused; {len(edges)} edge pairs fail alike)")

    # (d) shapes
    try:
        passed.append(_check_shapes(measurement, sample_input, input_kind))
    except PrivacyCheckError:
        raise
    except Exception as error:
        raise _fail("shapes", f"{type(error).__name__}: {error}") from error

    # (e) post-processing keeps the map
    for post in (make_postprocess(measurement, lambda value: value), measurement >> abs):
        if post.map(distance) != measurement.map(distance):
            raise _fail("post-processing", f"{post.map(distance)} != {measurement.map(distance)}")
    passed.append("post-processing keeps the map")

    # (f) frozen
    for name in ("privacy_map", "function", "d_in"):
        try:
            setattr(measurement, name, None)
        except dataclasses.FrozenInstanceError:
            continue
        raise _fail("frozen", f"setting {name!r} on the measurement was allowed")
    passed.append("frozen")
    return ConformanceReport(measurement, privacy, tuple(passed))
