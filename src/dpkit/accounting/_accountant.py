"""The session-level accountant: no result leaves without a matching ledger entry.

``Accountant.release`` is the one path from a measurement to a released value:

1. compute the measurement's loss from its privacy map (nothing touches the data);
2. ``ledger.reserve`` records the charge atomically, or refuses with
   :class:`~dpkit.errors.BudgetExceededError` - before any data is read;
3. run the measurement on the data;
4. ``ledger.commit`` records the receipt; the caller gets a :class:`dpkit.Release` (the value,
   the loss, the receipt and the budget left).

Steps 2-4 are :func:`dpkit._door.release`, the one function every release goes through. If
step 3 or 4 fails the reservation is marked failed and the charge stays (no refunds: a failure
can leak as much as a result); the error is reported as what it is (an
:class:`~dpkit.errors.UnreadableDataError` or an :class:`~dpkit.errors.InternalError`, its own
message withheld unless it is dpkit's).
"""

from __future__ import annotations

from typing import Any, TypeVar

from dpkit._door import Books, release
from dpkit._exact import Number, check_positive, fraction_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import PrivacyLoss
from dpkit.core._release import Release
from dpkit.errors import InvalidParameterError
from dpkit.ledger import Ledger

__all__ = ["Accountant"]

T = TypeVar("T")


class Accountant:
    """Charges every release of one dataset (and optionally one analyst) to a ledger.

    Args:
        ledger: the ledger holding the dataset's budget.
        dataset: the dataset's name in the ledger.
        analyst: charge the analyst's budget under the dataset's too.
        unit_distance: how far apart two neighbouring inputs are when they differ in one
            privacy unit, in the measurements' input metric (e.g. 3 if one person can add three
            rows). Set once, here, by whoever defines the unit; default: each measurement's own
            ``d_in`` (what it was calibrated for). A release is charged at the larger of the two.

    A per-call ``d_in`` may only *raise* the distance (group privacy); a smaller one is refused
    before anything is reserved, so no caller can shrink what one unit is (``d_in=0`` once
    recorded ε = 0).

    Example:
        >>> from dpkit.core._losses import PureDP
        >>> from dpkit.ledger import Ledger
        >>> from dpkit.mechanisms import make_laplace
        >>> ledger = Ledger.open(":memory:")
        >>> _ = ledger.create_budget("visits", PureDP(1))
        >>> accountant = Accountant(ledger, "visits")
        >>> release = accountant.release(make_laplace(sensitivity=1, epsilon=0.25), 10.0)
        >>> release.loss, ledger.spent("visits")
        (PureDP(epsilon=Fraction(1, 4)), PureDP(epsilon=Fraction(1, 4)))
    """

    def __init__(
        self,
        ledger: Ledger,
        dataset: str,
        analyst: str | None = None,
        *,
        unit_distance: Number | None = None,
    ) -> None:
        if not isinstance(ledger, Ledger):
            raise InvalidParameterError("ledger", ledger, "a dpkit.ledger.Ledger")
        self.unit_distance = (
            None if unit_distance is None else check_positive("unit_distance", unit_distance)
        )
        self.ledger = ledger
        self.dataset = dataset
        self.analyst = analyst
        ledger.budget(dataset, analyst)  # fail early on an unknown dataset or analyst

    @property
    def books(self) -> Books:
        """Where this accountant's releases are charged (see :func:`dpkit._door.release`)."""
        return Books(self.ledger, self.dataset, self.analyst)

    def release(
        self, measurement: Measurement[T], data: Any, *, query: str = "", d_in: Number | None = None
    ) -> Release[T]:
        """Reserve the measurement's loss, run it on ``data``, commit; return the
        :class:`~dpkit.Release` (its ``remaining`` is the budget left just after the commit)."""
        if not isinstance(measurement, Measurement):
            raise InvalidParameterError("measurement", measurement, "a dpkit Measurement")
        floor = max(
            (d for d in (measurement.d_in, self.unit_distance) if d is not None),
            default=None,
        )
        if floor is None or floor <= 0:
            raise InvalidParameterError(
                "measurement",
                measurement.name,
                "a measurement with a declared d_in > 0, or an Accountant with unit_distance",
                "The distance one privacy unit moves the input is what the charge is for.",
            )
        distance = floor
        if d_in is not None:
            asked = fraction_of("d_in", d_in)
            if asked < floor:
                raise InvalidParameterError(
                    "d_in",
                    d_in,
                    f">= {floor} (one privacy unit's distance for this release)",
                    "A per-call d_in can only raise the distance (group privacy), never "
                    "shrink what one privacy unit is.",
                )
            distance = asked
        loss = measurement.map(distance)
        value, receipt = release(
            self.books,
            loss,
            lambda stage: measurement(data),
            query=query,
            mechanism=measurement.name,
            rehearse=lambda: _check_input(measurement, data),
            rehearsing="checking the measurement's input",
        )
        return Release(value, loss, receipt, remaining=self.remaining())

    def spent(self) -> PrivacyLoss:
        return self.ledger.spent(self.dataset, self.analyst)

    def remaining(self) -> PrivacyLoss:
        return self.ledger.remaining(self.dataset, self.analyst)

    def can_afford(self, loss: PrivacyLoss) -> bool:
        return self.ledger.can_afford(self.dataset, loss, self.analyst)

    def __repr__(self) -> str:
        who = f", analyst={self.analyst!r}" if self.analyst else ""
        return f"Accountant({self.ledger!r}, {self.dataset!r}{who})"


def _check_input(measurement: Measurement[Any], data: Any) -> None:
    """A measurement that can tell its input is wrong (a compiled Session query given anything
    but an engine) says so before the reservation: nothing is charged."""
    check = getattr(measurement, "check_input", None)
    if callable(check):
        check(data)
