"""Transformations, measurements and the combinators that build pipelines from them.

The design follows the OpenDP programming framework (Gaboardi, Hay & Vadhan 2020): every step is
a value that says what it consumes and what it guarantees, through a *map*:

* a :class:`Transformation` has a ``stability_map``: if two inputs are ``d_in`` apart (in its
  input metric), the outputs are at most ``stability_map(d_in)`` apart (in its output metric);
* a :class:`Measurement` has a ``privacy_map``: inputs ``d_in`` apart give output distributions
  whose privacy loss is at most ``privacy_map(d_in)``.

Chaining composes maps, so the privacy of a pipeline is computed from its parts rather than
asserted. Post-processing keeps the map (Dwork & Roth 2014, Prop. 2.1); sequential composition
adds losses; parallel composition over disjoint parts takes the maximum of the parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Generic, TypeVar

from dpkit._exact import Number, fraction_of
from dpkit.core._losses import ApproxDP, PrivacyLoss, PureDP, compose, parallel
from dpkit.core._spaces import (
    AbsoluteDistance,
    AtomDomain,
    Domain,
    L1Distance,
    L2Distance,
    Measure,
    Metric,
    VectorDomain,
)
from dpkit.errors import DomainMismatchError, InvalidParameterError

__all__ = [
    "Measurement",
    "MechanismInfo",
    "Transformation",
    "make_chain",
    "make_parallel_composition",
    "make_postprocess",
    "make_sequential_composition",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class MechanismInfo:
    """Facts a measurement states about itself, beyond its privacy map (typed, read-only).

    Every field is optional: ``None`` means the mechanism does not state that fact. Mechanisms
    with facts of their own attach a subclass (``dpkit.mechanisms.AdditiveInfo``,
    ``LadderInfo``, ``SelectionInfo``, ``RandomizedResponseInfo``, ...,
    ``dpkit.sensitivity.SensitivityInfo``, ``dpkit.workloads.MatrixMechanismInfo``); the fields
    here are the ones generic tools read (the exact checker, the conformance suite, audits).
    Combinators (:func:`make_chain`, :func:`make_postprocess`) carry the info of the measurement
    they wrap; change one field with :func:`dataclasses.replace`.
    """

    changed_coordinates: int | None = None
    """How many output coordinates one neighbouring change can move (``None``: one)."""
    release_many: Callable[..., Any] | None = None
    """``release_many(values, k)``: k independent releases on the same input, vectorised (used
    by the statistical audits; it draws from :mod:`dpkit.noise` like the measurement)."""
    grid_exponent: int | None = None
    """The output grid is multiples of 2**grid_exponent (grid-based mechanisms)."""
    outputs: Sequence[Any] | None = None
    """The finite output set, in the order of ``output_pmf`` (finite-output mechanisms)."""
    outputs_of: Callable[[Any], Sequence[Any]] | None = None
    """The output set for one input, when it depends on the input (selection mechanisms)."""
    output_pmf: Callable[[Any], Any] | None = None
    """``output_pmf(x)``: the exact output probabilities for input x as floats, in the order of
    ``outputs`` (finite-output mechanisms; the exact checker reads it)."""
    exact_output_pmf: Callable[[Any], Any] | None = None
    """The same probabilities as :class:`fractions.Fraction` values, when available."""
    explain: str | None = None
    """A one-line description of what runs (set by planners, e.g. quantile methods)."""


@dataclass(frozen=True, slots=True)
class Transformation:
    """A deterministic, stable map from datasets to datasets (or to aggregates)."""

    input_domain: Domain
    input_metric: Metric
    output_domain: Domain
    output_metric: Metric
    function: Callable[[Any], Any]
    stability_map: Callable[[Fraction], Fraction]
    name: str = "transformation"

    def __call__(self, data: Any) -> Any:
        return self.function(data)

    def map(self, d_in: Number) -> Fraction:
        """Largest output distance for inputs at most ``d_in`` apart."""
        return self.stability_map(_distance("d_in", d_in))

    def __rshift__(self, other: Any) -> Any:
        return make_chain(self, other)


@dataclass(frozen=True, slots=True)
class Measurement(Generic[T]):
    """A randomized map from datasets to released values, with a privacy map.

    ``noise`` is the additive noise distribution when the measurement is "value + noise" (used
    for accuracy and by the exact privacy checker); ``accuracy`` collects mechanism-specific
    accuracy facts (expected |error|, variance, a confidence-interval function) when known.
    ``info`` holds the other facts the mechanism states about itself (a :class:`MechanismInfo`,
    or a subclass of it for the mechanism's family).
    """

    input_domain: Domain
    input_metric: Metric
    output_measure: Measure
    function: Callable[[Any], T]
    privacy_map: Callable[[Fraction], PrivacyLoss]
    name: str = "measurement"
    noise: Any = None
    d_in: Fraction | None = None
    info: MechanismInfo = field(default_factory=MechanismInfo)

    def __call__(self, data: Any) -> T:
        return self.function(data)

    def map(self, d_in: Number | None = None) -> PrivacyLoss:
        """The privacy loss for inputs at most ``d_in`` apart (default: the ``d_in`` the
        measurement was calibrated for)."""
        if d_in is None:
            if self.d_in is None:
                raise InvalidParameterError("d_in", d_in, "given: this measurement has no default")
            return self.privacy_map(self.d_in)
        return self.privacy_map(_distance("d_in", d_in))

    @property
    def loss(self) -> PrivacyLoss:
        """The loss at the calibrated ``d_in`` (the neighbouring relation it was built for)."""
        return self.map()

    def __rshift__(self, postprocess: Callable[[T], Any]) -> Measurement[Any]:
        return make_postprocess(self, postprocess)


def _distance(name: str, d: Number) -> Fraction:
    value = fraction_of(name, d)
    if value < 0:
        raise InvalidParameterError(name, d, "a distance >= 0")
    return value


def make_chain(first: Transformation, second: Any) -> Any:
    """``first`` then ``second`` (a Transformation or a Measurement); maps compose.

    The output space of ``first`` must be the input space of ``second``: the domain's kind
    (vector / atom) and the metric must match, or :class:`DomainMismatchError` says which.
    """
    if not isinstance(first, Transformation):
        raise DomainMismatchError(
            f"only a Transformation can be chained into another step, got {type(first).__name__};"
            " to post-process a Measurement's output use make_postprocess or `measurement >> f`"
        )
    if not isinstance(second, Transformation | Measurement):
        raise DomainMismatchError(
            f"cannot chain into {type(second).__name__}: expected a Transformation or Measurement"
        )
    if not _metrics_fit(first.output_metric, second.input_metric):
        raise DomainMismatchError(
            f"cannot chain {first.name} into {second.name}: {first.name} outputs distances in"
            f" {first.output_metric}, but {second.name} expects {second.input_metric}"
        )
    if not _domains_fit(first.output_domain, second.input_domain):
        raise DomainMismatchError(
            f"cannot chain {first.name} into {second.name}: {first.name} outputs"
            f" {first.output_domain}, but {second.name} expects {second.input_domain}"
        )
    f1, f2 = first.function, second.function

    def function(data: Any) -> Any:
        return f2(f1(data))

    if isinstance(second, Transformation):
        s1, s2 = first.stability_map, second.stability_map
        return Transformation(
            first.input_domain,
            first.input_metric,
            second.output_domain,
            second.output_metric,
            function,
            lambda d: s2(s1(d)),
            name=f"{first.name} >> {second.name}",
        )
    s1, p2 = first.stability_map, second.privacy_map
    # A pipeline that starts from a dataset is calibrated for one privacy unit (d_in = 1).
    d_in = Fraction(1) if second.d_in is not None else None
    return Measurement(
        first.input_domain,
        first.input_metric,
        second.output_measure,
        function,
        lambda d: p2(s1(d)),
        name=f"{first.name} >> {second.name}",
        noise=second.noise,
        d_in=d_in,
        info=second.info,
    )


def _metrics_fit(produced: Metric, expected: Metric) -> bool:
    # On a scalar (a vector of length 1) the absolute distance is the L1 and the L2 distance.
    scalar = (AbsoluteDistance(), L1Distance(), L2Distance())
    return produced == expected or (produced == AbsoluteDistance() and expected in scalar)


def _domains_fit(produced: Domain, expected: Domain) -> bool:
    # A scalar fits wherever a vector of the same element kind (or a float vector) is read.
    if isinstance(produced, AtomDomain) and isinstance(expected, VectorDomain):
        return expected.element.kind in (produced.kind, "float")
    return type(produced) is type(expected)


def make_postprocess(
    measurement: Measurement[Any], postprocess: Callable[[Any], Any]
) -> Measurement[Any]:
    """Apply a data-independent function to a measurement's output: the privacy map is kept.

    Post-processing cannot increase privacy loss (Dwork & Roth 2014, Prop. 2.1): any event about
    ``g(M(x))`` is an event about ``M(x)``. ``postprocess`` must not look at the data; it only
    ever receives the released value.
    """
    inner = measurement.function

    def function(data: Any) -> Any:
        return postprocess(inner(data))

    return Measurement(
        measurement.input_domain,
        measurement.input_metric,
        measurement.output_measure,
        function,
        measurement.privacy_map,
        name=f"{measurement.name} >> postprocess",
        noise=None,
        d_in=measurement.d_in,
        info=measurement.info,
    )


def _common_input(measurements: Sequence[Measurement[Any]], what: str) -> Measurement[Any]:
    if not measurements:
        raise InvalidParameterError("measurements", measurements, "a non-empty list")
    first = measurements[0]
    for m in measurements[1:]:
        if m.input_metric != first.input_metric or m.input_domain != first.input_domain:
            raise DomainMismatchError(
                f"{what}: every measurement must read the same input space; {m.name} reads"
                f" {m.input_domain} under {m.input_metric}, {first.name} reads"
                f" {first.input_domain} under {first.input_metric}"
            )
    return first


def _measure_of(loss: PrivacyLoss) -> Measure:
    return (
        "pure" if isinstance(loss, PureDP) else "approx" if isinstance(loss, ApproxDP) else "zcdp"
    )


def make_sequential_composition(
    measurements: Sequence[Measurement[Any]],
) -> Measurement[tuple[Any, ...]]:
    """Run every measurement on the same data and release all outputs (a tuple).

    Privacy map: the sum of the parts' losses (Dwork & Roth 2014, Thm. 3.16), exactly.
    """
    first = _common_input(measurements, "sequential composition")
    parts = tuple(measurements)

    def function(data: Any) -> tuple[Any, ...]:
        return tuple(m(data) for m in parts)

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return compose(*(m.privacy_map(d_in) for m in parts))

    d_in = first.d_in if all(m.d_in == first.d_in for m in parts) else None
    measure = first.output_measure if d_in is None else _measure_of(privacy_map(d_in))
    return Measurement(
        first.input_domain,
        first.input_metric,
        measure,
        function,
        privacy_map,
        name="sequential(" + ", ".join(m.name for m in parts) + ")",
        d_in=d_in,
    )


def make_parallel_composition(
    partition: Callable[[Any], Sequence[Any]], measurements: Sequence[Measurement[Any]]
) -> Measurement[tuple[Any, ...]]:
    """Split the data into disjoint parts with ``partition`` and run measurement i on part i.

    ``partition`` must put each row (each privacy unit's rows) in exactly one part and must not
    depend on other rows: then changing d_in rows changes at most d_in parts, each by at most
    d_in rows, and the loss is at most the composition of the d_in largest part losses. For the
    usual d_in = 1 this is the maximum over parts (McSherry 2009, Thm. 4).
    """
    first = _common_input(measurements, "parallel composition")
    parts = tuple(measurements)

    def function(data: Any) -> tuple[Any, ...]:
        pieces = partition(data)
        if len(pieces) != len(parts):
            raise InvalidParameterError(
                "partition",
                f"{len(pieces)} parts",
                f"exactly {len(parts)} parts, one per measurement",
            )
        return tuple(m(piece) for m, piece in zip(parts, pieces, strict=True))

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        losses = [m.privacy_map(d_in) for m in parts]
        if d_in <= 1:
            return parallel(*losses)
        # d_in > 1 rows may fall in several parts: compose them all (conservative).
        return compose(*losses)

    return Measurement(
        first.input_domain,
        first.input_metric,
        first.output_measure,
        function,
        privacy_map,
        name="parallel(" + ", ".join(m.name for m in parts) + ")",
        d_in=first.d_in,
    )
