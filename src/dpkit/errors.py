"""The dpkit error tree.

Every error dpkit raises on purpose is a :class:`DPError`. Errors about a bad argument also
subclass :class:`ValueError` (or :class:`TypeError`), so generic ``except ValueError`` code keeps
working. Each message names the parameter, the value it got, what is allowed, and how to fix it.

    DPError
    ├── InvalidParameterError (ValueError)   a constructor argument is out of its domain
    ├── InvalidDataError (ValueError)        the data a mechanism was called on is unusable
    ├── DomainMismatchError (TypeError)      two pieces of a pipeline do not fit together
    ├── BudgetExceededError                  a release would spend more than the budget allows
    ├── UnsupportedQueryError                a query dpkit cannot answer privately
    ├── PrivacyCheckError (AssertionError)   a privacy check found a violated claim
    ├── UnreadableDataError                  the data could not be read (after the reservation)
    └── InternalError                        a bug in dpkit itself

A query has three outcomes: refused before anything is reserved (any DPError, nothing charged),
released and charged, or failed after the reservation — charged, and then always an
:class:`UnreadableDataError` (the file or engine could not be read: a malformed CSV file, an I/O
error) or an :class:`InternalError` (dpkit's own bug), whose ``charged`` attribute is True.
Numbers in messages are printed as people write them (:mod:`dpkit._format`).
"""

from __future__ import annotations

from typing import Any

from dpkit._format import shown

__all__ = [
    "BudgetExceededError",
    "DPError",
    "DomainMismatchError",
    "InternalError",
    "InvalidDataError",
    "InvalidParameterError",
    "PrivacyCheckError",
    "UnreadableDataError",
    "UnsupportedQueryError",
]


class DPError(Exception):
    """Root of every error dpkit raises on purpose."""


class InvalidParameterError(DPError, ValueError):
    """A parameter is outside the values it may take.

    Attributes:
        parameter: the parameter's name as the caller spelled it.
        value: the value received.
        allowed: a short description of the allowed values.
    """

    def __init__(self, parameter: str, value: Any, allowed: str, hint: str | None = None) -> None:
        self.parameter = parameter
        self.value = value
        self.allowed = allowed
        self.hint = hint
        message = f"{parameter}={shown(value)} is not allowed: {parameter} must be {allowed}."
        if hint:
            message += f" {hint}"
        super().__init__(message)


class InvalidDataError(DPError, ValueError):
    """The data passed to a transformation or mechanism cannot be used as is."""

    def __init__(self, what: str, problem: str, hint: str | None = None) -> None:
        self.what = what
        self.problem = problem
        message = f"{what}: {problem}."
        if hint:
            message += f" {hint}"
        super().__init__(message)


class DomainMismatchError(DPError, TypeError):
    """Two parts of a pipeline do not fit (output space of one is not the input of the next)."""


class BudgetExceededError(DPError):
    """A release would exceed the privacy budget; nothing was released."""

    def __init__(
        self, requested: Any, remaining: Any, scope: str = "budget", hint: str | None = None
    ) -> None:
        self.requested = requested
        self.remaining = remaining
        self.scope = scope
        self.hint = hint or (
            "Ask for less (a larger noise scale / smaller epsilon) or have an administrator "
            "raise the budget."
        )
        super().__init__(
            f"{scope}: the request costs {requested} but only {remaining} remains; "
            f"nothing was released. {self.hint}"
        )


class UnsupportedQueryError(DPError):
    """The query cannot be answered with a differential-privacy guarantee by dpkit."""


class PrivacyCheckError(DPError, AssertionError):
    """A privacy check (exact or statistical) found a claim that does not hold."""


class UnreadableDataError(DPError):
    """The data could not be read: a malformed file, an I/O error, an engine that failed while
    reading. Raised after the query's budget was reserved (the data are private, so only reading
    them tells), and the charge stays (``charged``). The message never quotes the data."""

    def __init__(self, message: str, *, charged: bool = True) -> None:
        self.charged = charged
        super().__init__(message)


class InternalError(DPError):
    """A bug in dpkit itself, not a problem with the query or the data; please report it.

    ``charged`` says whether the query's budget stays spent (the failure came after the
    reservation) or nothing was charged (it was caught before). ``trace`` holds where it
    happened (files, lines and functions, never the message, which can quote the data), for a
    bug report.
    """

    def __init__(self, message: str, *, charged: bool, trace: tuple[str, ...] = ()) -> None:
        self.charged = charged
        self.trace = trace
        super().__init__(message)
