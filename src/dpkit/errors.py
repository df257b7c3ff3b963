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
    └── PrivacyCheckError (AssertionError)   a privacy check found a violated claim
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetExceededError",
    "DPError",
    "DomainMismatchError",
    "InvalidDataError",
    "InvalidParameterError",
    "PrivacyCheckError",
    "UnsupportedQueryError",
]


_SHOWN = 120


def _shown(value: Any) -> str:
    """``repr(value)``, shortened to its first characters when long (a 4 MB string or a
    10,000-digit number is named, not printed)."""
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails is named by its type
        return f"<{type(value).__name__}>"
    if len(text) <= _SHOWN:
        return text
    return f"{text[: _SHOWN - 40]}… ({len(text):,} characters)"


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
        message = f"{parameter}={_shown(value)} is not allowed: {parameter} must be {allowed}."
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

    def __init__(self, requested: Any, remaining: Any, scope: str = "budget") -> None:
        self.requested = requested
        self.remaining = remaining
        self.scope = scope
        super().__init__(
            f"{scope}: the request costs {requested} but only {remaining} remains; "
            "nothing was released. Ask for less (a larger noise scale / smaller epsilon) "
            "or have an administrator raise the budget."
        )


class UnsupportedQueryError(DPError):
    """The query cannot be answered with a differential-privacy guarantee by dpkit."""


class PrivacyCheckError(DPError, AssertionError):
    """A privacy check (exact or statistical) found a claim that does not hold."""
