"""The door: the one function outside :mod:`dpkit.ledger` that spends privacy budget.

Every release goes through :func:`release`: a Session query, a bounds estimate,
sample-and-aggregate, a k-means or regression fit (all their rounds under one reservation),
:meth:`dpkit.accounting.Accountant.release`, and through the Session the command line and the
service. It makes the three-outcome rule true in one place:

1. **refused**: ``rehearse`` (everything decidable from public inputs: the plans, the engine's
   SQL, the release on an empty table) and the ledger's own checks (the budget left) run before
   anything is reserved; a :class:`~dpkit.errors.DPError` there is a refusal and nothing is
   charged. Any other error there is a dpkit bug, reported as an
   :class:`~dpkit.errors.InternalError` with ``charged=False``.
2. **released and charged**: the ledger reserves the loss (durably, before any data is read),
   ``body`` reads the data and computes the release, the ledger commits, and only then is the
   value returned ("spend before you speak").
3. **failed after the reservation**: the charge stays (a refund would let failing queries probe
   the data). The error is reported as what it is: an
   :class:`~dpkit.errors.UnreadableDataError` if the data could not be read, an
   :class:`~dpkit.errors.InternalError` for a dpkit bug, never as "the data". Its message is
   withheld unless it is dpkit's own (an engine's text can quote the data it choked on), and
   the ledger records only the error's class.

``body`` receives a :class:`Stage` and says what it is doing (``stage.reading = True`` while
an engine reads, ``False`` while dpkit post-processes exact results) so that a failure is
classified correctly.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from dpkit.errors import DPError, InternalError, InvalidDataError, UnreadableDataError

if TYPE_CHECKING:
    from dpkit.core._losses import PrivacyLoss
    from dpkit.ledger import Ledger

__all__ = [
    "Books",
    "Stage",
    "Watch",
    "failed_after_reservation",
    "internal_error",
    "release",
    "watching",
]

T = TypeVar("T")

_READING_MODULES = ("duckdb", "pyarrow", "pandas", "pyspark", "py4j", "grpc", "polars")
"""Errors raised by these libraries while a plan runs are errors reading the data (a file that
does not parse, a type the engine cannot read, a Spark Connect server that went away); other
errors are dpkit's own bugs."""


@dataclass(frozen=True, slots=True)
class Books:
    """Where a release is charged: a ledger, a dataset, and optionally an analyst and the
    privacy unit recorded with the entry."""

    ledger: Ledger
    dataset: str
    analyst: str | None = None
    privacy_unit: str | None = None


class Stage:
    """What a release's body is doing, for classifying a failure after the reservation.

    ``reading``: True while an engine reads the data, False while dpkit computes the release
    from exact results, None when the body cannot tell (only the error's type decides then).
    ``doing``: a short public description for the error message (never data)."""

    __slots__ = ("doing", "reading")

    def __init__(self) -> None:
        self.reading: bool | None = None
        self.doing: str | None = None

    def __call__(self, reading: bool | None, doing: str | None = None) -> None:
        self.reading = reading
        self.doing = doing


class Watch:
    """The reservations the door made inside a :func:`watching` block (in this thread or task),
    oldest first: a caller that reports failures itself (the service) tells a refusal (none)
    from a failure after the reservation (the charge stays) without reading the ledger."""

    __slots__ = ("reservations",)

    def __init__(self) -> None:
        self.reservations: list[Any] = []

    @property
    def reservation(self) -> Any:
        """The last reservation made, or None."""
        return self.reservations[-1] if self.reservations else None


_WATCH: ContextVar[Watch | None] = ContextVar("dpkit_door_watch", default=None)


@contextmanager
def watching() -> Iterator[Watch]:
    """Record every reservation :func:`release` makes inside the block (a context variable:
    each thread and each asyncio task sees only its own)."""
    watch = Watch()
    token = _WATCH.set(watch)
    try:
        yield watch
    finally:
        _WATCH.reset(token)


def _reading_error(error: BaseException) -> bool:
    if isinstance(error, OSError | MemoryError | UnicodeError):
        return True
    return any(
        (kind.__module__ or "").lstrip("_").split(".")[0] in _READING_MODULES
        for kind in type(error).__mro__
    )


_PACKAGE = __file__.rsplit("/", 1)[0] if "/" in __file__ else ""


def _dpkits_own(error: BaseException) -> bool:
    """Whether ``error`` is a dpkit error raised by dpkit's own code all the way down: only then
    is its message kept after the reservation (dpkit's messages never quote data; a third-party
    engine's :class:`~dpkit.errors.DPError`, or a dpkit helper it called on a value, could)."""
    if not isinstance(error, DPError):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    # every frame from the door down to the raise is dpkit's: a dpkit helper called by third-party
    # code (an engine plugin, a custom measurement) on a data value would quote that value
    return bool(_PACKAGE) and all(f.filename.startswith(_PACKAGE + "/") for f in frames)


def _trace(error: BaseException) -> tuple[str, ...]:
    """Where ``error`` happened (file, line, function), never its message (it can quote data)."""
    frames = traceback.extract_tb(error.__traceback__)
    return tuple(f"{f.filename}:{f.lineno} in {f.name}" for f in frames[-12:])


def internal_error(error: BaseException, doing: str, *, charged: bool) -> InternalError:
    """An :class:`InternalError` for ``error``: its class (and dpkit's own message, which never
    quotes data), what dpkit was doing, and what happened to the budget."""
    own = f": {error}" if _dpkits_own(error) else ""
    spent = (
        "the query's budget stays spent (the data may have been read)"
        if charged
        else "nothing was reserved or charged"
    )
    return InternalError(
        f"internal error in dpkit while {doing} ({type(error).__name__}{own}); {spent}. This is "
        "a dpkit bug, not a problem with the query or the data: please report it to the dpkit "
        "maintainers with the query (not the data) and the dpkit version. The error's own "
        "message is withheld because it can quote the data.",
        charged=charged,
        trace=_trace(error),
    )


def failed_after_reservation(
    ledger: Ledger,
    reservation: Any,
    error: BaseException,
    *,
    reading: bool | None = None,
    doing: str | None = None,
) -> BaseException:
    """Record a failure after the reservation (the charge stays) and return the error to raise.

    Every failure after the reservation is one of two documented kinds (both charged):

    * :class:`UnreadableDataError`: the data could not be read (a malformed file, which the
      engines report themselves; an I/O error; an error of the engine library while it read);
    * :class:`InternalError`: a bug in dpkit (any other error while the plan ran, and every
      error while the exact results were turned into the release, ``reading=False``).

    The ledger records only the error's class; a message is kept only when it is dpkit's own
    (those never carry data), and the original is never chained. KeyboardInterrupt and friends
    pass through unchanged.
    """
    with suppress(Exception):  # if the ledger cannot record the failure, the reservation stays
        ledger.fail(reservation, type(error).__name__)  # pending, which counts in full
    if not isinstance(error, Exception) or isinstance(error, InternalError):
        return error
    if isinstance(error, UnreadableDataError):  # an engine's own: a malformed file, say
        if _dpkits_own(error):
            return UnreadableDataError(f"{error}. The query's budget stays spent.", charged=True)
        return UnreadableDataError(
            "the data could not be read (the engine's message is withheld because it can quote "
            "the data). The query's budget stays spent.",
            charged=True,
        )
    if reading is not False and isinstance(error, InvalidDataError):
        shown = f": {error}" if _dpkits_own(error) else " (the engine's message is withheld)"
        return UnreadableDataError(f"the data could not be read{shown}; its budget stays spent")
    if reading is not False and not isinstance(error, DPError) and _reading_error(error):
        return UnreadableDataError(
            f"the data could not be read ({type(error).__name__}); the query's budget stays "
            "spent. The engine's message is withheld because it can quote the data. Check that "
            "the file is well formed and that the declared keys, bounds and types match it."
        )
    if doing is None:
        doing = "running the query's plan" if reading else "computing the release"
    return internal_error(error, doing, charged=True)


def release(
    books: Books,
    charge: PrivacyLoss,
    body: Callable[[Stage], T],
    *,
    query: str,
    mechanism: str,
    rehearse: Callable[[], object] | None = None,
    rehearsing: str = "checking the query on public inputs",
) -> tuple[T, Any]:
    """Rehearse, reserve ``charge``, run ``body``, commit: return ``(value, receipt)``.

    Args:
        books: where the charge goes.
        charge: the loss the ledger is charged (what the release's measurement maps one
            privacy unit's change to).
        body: reads the data and computes the release; called once, after the reservation,
            with a :class:`Stage` it updates as it goes.
        query, mechanism: public descriptions recorded with the ledger entry.
        rehearse: everything decidable from public inputs, run before the reservation; a
            :class:`~dpkit.errors.DPError` from it is a refusal (nothing charged).
        rehearsing: what ``rehearse`` does, for the message of an internal error there.
    """
    if rehearse is not None:
        try:
            rehearse()
        except DPError:
            raise
        except Exception as error:  # public inputs only: any other error is a dpkit bug
            raise internal_error(error, rehearsing, charged=False) from None
    ledger = books.ledger
    reservation = ledger.reserve(
        books.dataset,
        charge,
        analyst=books.analyst,
        privacy_unit=books.privacy_unit,
        query=query,
        mechanism=mechanism,
    )
    watch = _WATCH.get()
    if watch is not None:
        watch.reservations.append(reservation)
    stage = Stage()
    try:
        value = body(stage)
    except BaseException as error:
        raise failed_after_reservation(
            ledger, reservation, error, reading=stage.reading, doing=stage.doing
        ) from None
    try:
        receipt = ledger.commit(reservation)
    except Exception as error:
        # the value is withheld ("spend before you speak"); the reservation is durable and
        # counts in full whether or not the commit reached the store
        raise InternalError(
            f"the release was computed but the ledger could not record its commit "
            f"({type(error).__name__}); the answer is withheld and the query's budget stays "
            "spent (its reservation counts in full). Check the ledger's storage; the error's "
            "own message is withheld because it can quote the data.",
            charged=True,
            trace=_trace(error),
        ) from None
    return value, receipt
