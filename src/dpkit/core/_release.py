"""What every charged release returns: :class:`Release`.

One class for every release dpkit makes: a value computed with noise, the privacy loss charged
for it, the ledger's receipt, its accuracy and the budget left. The specialised releases are
subclasses with names of their own that add what only they have and name their value for what
it is (docs/design.md, "Releases"):

* :class:`dpkit.analytics.TableRelease` – a Session query's result tables (``tables``,
  ``table``; ``accuracy`` per aggregation, the plan and the loss per aggregation);
* :class:`dpkit.workloads.WorkloadRelease` – the matrix mechanism's answers (``answers``;
  ``variances`` per answer);
* :class:`dpkit.workloads.MarginalRelease` – marginal tables (``tables``; ``cell_variance`` per
  marginal).

``isinstance(x, Release)`` holds for all of them, and ``x.value``, ``x.loss``, ``x.receipt``,
``x.accuracy`` and ``x.remaining`` mean the same thing on each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dpkit.core._losses import PrivacyLoss

if TYPE_CHECKING:
    from dpkit.ledger import Receipt

__all__ = ["Release"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Release(Generic[T]):
    """A released value with the loss it cost, its receipt, its accuracy and the budget left.

    Attributes:
        value: what was released (post-processing it is free).
        loss: the privacy loss charged for it.
        receipt: the ledger's receipt of the charge; ``None`` when nothing was charged to a
            ledger (a mechanism run directly, e.g. :meth:`dpkit.workloads.ResidualPlan.release`:
            then charging it is the caller's business).
        accuracy: the error bars, in the form the value's kind has (each subclass documents
            its own); ``None`` when not known.
        remaining: the budget left after this release, when known.

    Example:
        >>> from dpkit.core import PureDP, Release
        >>> release = Release(3.5, PureDP(1))
        >>> release.value, release.receipt, release.remaining
        (3.5, None, None)
    """

    value: T
    loss: PrivacyLoss
    receipt: Receipt | None = None
    accuracy: Any = None
    remaining: PrivacyLoss | None = None
