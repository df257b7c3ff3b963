"""A compiled Session query as a :class:`~dpkit.core._framework.Measurement`.

``Session.compile(query, epsilon=...)`` returns a :class:`QueryMeasurement`: the chain

    contribution bounding (a Transformation)  >>  the calibrated noise (a Measurement)

* **Contribution bounding** maps a table (an engine over the Session's data) to the exact
  integer outputs of the query's bounded plans: the engine keeps at most ``max_rows`` rows per
  privacy unit (``max_groups`` groups, ``max_rows_per_group`` rows in a group), then aggregates.
  It is 1-stable from :class:`~dpkit.core._spaces.UnitDistance` to its bounded form: tables
  ``k`` units apart give outputs computed from tables ``k`` bounded units apart (each unit's
  rows are kept or dropped by the unit's own salted hash, never by another unit's rows).
* **The noise** adds each family's calibrated lattice noise to those outputs and builds the
  released tables (post-processing). Its privacy map at one unit is the loss the compiler
  composed from the families' :class:`~dpkit.analytics._planner._registry.Use` records; at ``k``
  units it is the group-privacy loss (:func:`~dpkit.core._losses.group_privacy`).

``map(d_in)`` is therefore the loss of releasing the query for inputs ``d_in`` units apart, in
the form the ledger is charged: a query asked for with an (ε, δ) budget and answered with
Gaussian noise (ρ-zCDP) is charged the (ε, δ) conversion of its ρ at the query's δ (an (ε, δ)
budget composes its charges by adding ε and δ; see docs/accounting.md). ``map(1)`` is exactly
what :meth:`Session.evaluate <dpkit.analytics.Session.evaluate>` charges and what
:meth:`explain` shows; a property test checks the three agree.

Calling the measurement directly (``m(engine)``) releases without the ledger, like any
measurement of the framework: it is the curator's tool. Its input is an engine over the table
(``session.engine``), never anything else: the function reads its argument, so a release charged
to another dataset reads that dataset's engine. A Session charges through
:func:`dpkit._door.release`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpkit.analytics._engines._base import BoundedPlan
from dpkit.analytics._planner._compiled import CompiledQuery
from dpkit.analytics._planner._types import Part
from dpkit.core._framework import Measurement, Transformation, make_chain
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, group_privacy
from dpkit.core._spaces import AtomDomain, Measure, TableDomain, UnitDistance, VectorDomain
from dpkit.errors import DomainMismatchError

__all__ = ["QueryMeasurement", "make_query_measurement"]


@dataclass(frozen=True, slots=True)
class QueryMeasurement(Measurement[Any]):
    """A compiled Session query: ``bounding >> noise`` with the compiled plans attached.

    Attributes:
        compiled: the plans, the calibrated noisy outputs and the finishers.
        bounding: contribution bounding, the Transformation whose function runs the exact
            engine plans (``bounding(engine)`` -> one Arrow table per plan).
        noisy: the Measurement that adds the noise to those exact results and builds the
            released tables (``noisy(results)`` -> ``(tables, accuracy)``).
        charge: ``map(1)``, the loss the ledger is charged for one release.
    """

    compiled: CompiledQuery | None = None
    bounding: Transformation | None = None
    noisy: Measurement[Any] | None = None
    charge: PrivacyLoss | None = None
    stability: int = 1

    def _parts(self) -> CompiledQuery:
        if self.compiled is None:  # pragma: no cover - built only by make_query_measurement
            raise TypeError("a QueryMeasurement is built by make_query_measurement")
        return self.compiled

    @property
    def plans(self) -> tuple[BoundedPlan, ...]:
        """The bounded plans the engine runs (plan 0 is the main one)."""
        return self._parts().plans

    @property
    def split(self) -> Mapping[str, PrivacyLoss]:
        """Each aggregation's loss (and partition selection's), at one unit."""
        return self._parts().split

    @property
    def parts(self) -> tuple[Part, ...]:
        """The explanation as data: per aggregation (and partition selection), the mechanisms
        it runs with their losses (``Use`` records), its composed loss and its text."""
        return self._parts().parts

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The mechanisms the release runs (from the families' ``Use`` records)."""
        return self._parts().mechanisms

    @property
    def description(self) -> str:
        """:meth:`explain`'s text."""
        return self.explain()

    def explain(self) -> str:
        """How the query will be answered, without touching data: bounds, sensitivities,
        mechanisms, the loss split, and the loss the ledger is charged (``map(1)``)."""
        text = self._parts().description
        charge = self.map(1)
        if self.stability > 1:
            # the compiled text speaks of one joined row's budget
            text = text.replace("(query budget ", "(the budget of one joined row: ")
            text += (
                f"\ncharged to the ledger: {charge} (one person changes at most "
                f"{self.stability} rows of the truncated join: the loss above for "
                f"{self.stability} rows, by group privacy)"
            )
        elif charge != self._parts().loss:
            text += (
                f"\ncharged to the ledger: {charge} (the (ε, δ) conversion of "
                f"{self._parts().loss} at the query's δ)"
            )
        return text

    def check_input(self, data: Any) -> None:
        """Refuse an input this measurement cannot run on (before anything is reserved)."""
        _engine(data)

    def release(self, results: Sequence[Any], alpha: float = 0.05) -> Any:
        """The noisy release from exact engine results (see :meth:`CompiledQuery.release`)."""
        return self._parts().release(results, alpha)


def _measure(loss: PrivacyLoss) -> Measure:
    if isinstance(loss, PureDP):
        return "pure"
    return "approx" if isinstance(loss, ApproxDP) else "zcdp"


def _engine(data: Any) -> Any:
    """The input of a compiled Session query: an engine over a table of the declared schema
    (``session.engine``, or an engine of the same kind over a neighbouring table)."""
    if not callable(getattr(data, "run", None)):
        raise DomainMismatchError(
            f"a compiled Session query runs on an engine over the table (session.engine), not "
            f"on a {type(data).__name__}: it reads the table through the engine's exact plans"
        )
    return data


def make_query_measurement(
    compiled: CompiledQuery,
    schema: Mapping[str, str],
    unit: str,
    as_charged: Callable[[PrivacyLoss], PrivacyLoss],
    alpha: float = 0.05,
    stability: int = 1,
) -> QueryMeasurement:
    """``bounding >> noise`` for ``compiled``.

    Args:
        schema: the table's declared columns (name -> kind), for the input domain.
        unit: the privacy unit's column.
        as_charged: the loss as the ledger is charged (identity, or zCDP -> (ε, δ) at the
            query's δ), applied after group privacy.
        alpha: the confidence level of the released intervals (post-processing).
        stability: how many units of the compiled relation one unit of the tables is (a
            truncated join: the rows one unit changes, each its own unit; see
            :mod:`dpkit.analytics._joins`); the bounding is ``stability``-stable and the
            charge is the group loss at that distance.
    """
    plans = compiled.plans
    exact_outputs = VectorDomain(AtomDomain("int"))
    bounding = Transformation(
        TableDomain(tuple((name, str(kind)) for name, kind in schema.items())),
        UnitDistance(unit),
        exact_outputs,
        UnitDistance(unit, bounded=True),
        lambda engine: [_engine(engine).run(plan) for plan in plans],
        # 1-stable: each unit's rows are bounded by the unit's own hash (after a truncated
        # join, one unit of the tables is `stability` units of the relation)
        lambda d_in: d_in * stability,
        name="contribution bounding",
    )
    per_unit = compiled.loss

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return as_charged(group_privacy(per_unit, d_in))

    charge = privacy_map(Fraction(1))
    noisy: Measurement[Any] = Measurement(
        exact_outputs,
        UnitDistance(unit, bounded=True),
        _measure(charge),
        lambda results: compiled.release(results, alpha),
        privacy_map,
        name="noise (" + ", ".join(compiled.mechanisms) + ")",
        d_in=Fraction(1),
    )
    chained = make_chain(bounding, noisy)
    charge = chained.privacy_map(Fraction(1))  # a truncated join: the group loss
    return QueryMeasurement(
        chained.input_domain,
        chained.input_metric,
        chained.output_measure,
        chained.function,
        chained.privacy_map,
        name="session query",
        d_in=Fraction(1),
        compiled=compiled,
        bounding=bounding,
        noisy=noisy,
        charge=charge,
        stability=stability,
    )


def as_charged_for(delta: Fraction | None) -> Callable[[PrivacyLoss], PrivacyLoss]:
    """The ledger's form of a loss for a query asked for with ``delta`` (None or 0: as is)."""

    def convert(loss: PrivacyLoss) -> PrivacyLoss:
        if isinstance(loss, ZCDP) and delta is not None and delta > 0:
            # zero units apart cost nothing; the conversion would still carry its δ
            return ApproxDP(0, 0) if loss.rho == 0 else loss.to_approx(delta)
        return loss

    return convert
