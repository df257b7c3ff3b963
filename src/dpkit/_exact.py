"""Exact numbers and argument validation shared by every module.

Privacy parameters are stored as :class:`fractions.Fraction`. A float the user typed is read as the
shortest decimal that prints as that float (``0.1`` means 1/10), because that is the number the
user meant and budgets must add up the way people add them (ten charges of 0.1 spend exactly 1).
Quantities that bound what the *data* can do (sensitivities, bounds) are instead rounded
*against the analyst*: the larger of the decimal and the exact binary value of the float.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, TypeAlias

import numpy as np

from dpkit.errors import InvalidParameterError

Number: TypeAlias = int | float | Fraction | Decimal | str | np.integer[Any] | np.floating[Any]

__all__ = [
    "MAX_DECIMAL_EXPONENT",
    "MAX_NUMBER_TEXT",
    "Number",
    "check_alpha",
    "check_delta",
    "check_epsilon",
    "check_positive",
    "check_probability",
    "check_rho",
    "exp_upper",
    "fraction_of",
    "log_upper",
    "round_up",
    "sensitivity_of",
    "sqrt_upper",
]


MAX_NUMBER_TEXT = 100
"""The longest number :func:`fraction_of` reads from text (characters, spaces included)."""

MAX_DECIMAL_EXPONENT = 400
"""The largest decimal exponent :func:`fraction_of` reads: numbers written as text or
:class:`~decimal.Decimal` lie within 1e-400 .. 1e400 in magnitude (every float does), and
integers within ±1e400. Reading ``"1e-8000000"`` exactly would compute a power of ten with
eight million digits (minutes of CPU); no privacy parameter needs more than a few hundred."""

_TEN_TO_MAX = 10**MAX_DECIMAL_EXPONENT
# The only texts read as numbers: ASCII digits, an optional sign, a decimal point, a decimal
# exponent, or a fraction of two integers. Python's Fraction (and int, float, Decimal) also read
# "1_0" as 10, Unicode digits ("١" is 1, "１" is 1), "١/٣" and surrounding Unicode spaces: a
# text that does not read as the number it looks like is refused, never guessed.
_DECIMAL_TEXT = re.compile(
    r"(?P<mantissa>[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE](?P<exponent>[-+]?[0-9]+))?",
    re.ASCII,
)
_FRACTION_TEXT = re.compile(r"[-+]?[0-9]+/[0-9]+", re.ASCII)
_SPACES = " \t\r\n"
_NUMBER_ALLOWED = (
    "a number such as 0.5, '1/3' or '1e-6' (ASCII digits, an optional sign, decimal point and "
    f"exponent; text of at most {MAX_NUMBER_TEXT} characters, exponent within "
    f"±{MAX_DECIMAL_EXPONENT})"
)


def _bounded_text(name: str, value: str) -> str:
    """``value`` without surrounding ASCII spaces, if it is a plain ASCII decimal
    (``-1.5e-3``) or fraction (``1/3``), short enough and with an exponent small enough to
    read exactly in microseconds; checked before any arithmetic."""
    if len(value) > MAX_NUMBER_TEXT:
        raise InvalidParameterError(name, value, _NUMBER_ALLOWED)
    text = value.strip(_SPACES)
    if _FRACTION_TEXT.fullmatch(text):
        return text
    found = _DECIMAL_TEXT.fullmatch(text)
    if found is None:
        raise InvalidParameterError(name, value, _NUMBER_ALLOWED)
    exponent = found.group("exponent")
    if exponent is not None and int(exponent.lstrip("+-")) > MAX_DECIMAL_EXPONENT:
        raise InvalidParameterError(name, value, _NUMBER_ALLOWED)
    return text


def fraction_of(name: str, value: Number) -> Fraction:
    """Read ``value`` as an exact fraction (floats by their shortest decimal), or raise.

    Bounded before any arithmetic, so that reading a number never costs more than
    microseconds: text is at most :data:`MAX_NUMBER_TEXT` characters with a decimal exponent
    within ±:data:`MAX_DECIMAL_EXPONENT`; a :class:`~decimal.Decimal` has at most
    :data:`MAX_NUMBER_TEXT` digits and an exponent in that range; an integer is at most
    10^:data:`MAX_DECIMAL_EXPONENT` in magnitude. (A :class:`~fractions.Fraction` is taken as
    it is.)
    """
    if isinstance(value, bool):
        raise InvalidParameterError(name, value, "a number, not a bool")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int | np.integer):
        exact = int(value)
        if abs(exact) > _TEN_TO_MAX:
            raise InvalidParameterError(
                name, value, f"a number of magnitude at most 1e{MAX_DECIMAL_EXPONENT}"
            )
        return Fraction(exact)
    if isinstance(value, float | np.floating):
        if not math.isfinite(float(value)):
            raise InvalidParameterError(name, value, "a finite number")
        return Fraction(repr(float(value)))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidParameterError(name, value, "a finite number")
        digits = value.as_tuple().digits
        if len(digits) > MAX_NUMBER_TEXT or abs(value.adjusted()) > MAX_DECIMAL_EXPONENT:
            raise InvalidParameterError(name, value, _NUMBER_ALLOWED)
        return Fraction(value)
    if isinstance(value, str):
        text = _bounded_text(name, value)
        try:
            return Fraction(text)
        except (ValueError, ZeroDivisionError):
            raise InvalidParameterError(name, value, _NUMBER_ALLOWED) from None
    raise InvalidParameterError(name, value, "a number (int, float, Fraction, Decimal or str)")


def sensitivity_of(name: str, value: Number) -> Fraction:
    """Read a data bound exactly, rounding a float *up*: max(its decimal, its binary value)."""
    exact = fraction_of(name, value)
    if isinstance(value, float | np.floating):
        exact = max(exact, Fraction(float(value)))
    return exact


def check_positive(name: str, value: Number, *, allow_zero: bool = False) -> Fraction:
    """An exact number that must be > 0 (or >= 0 with ``allow_zero``)."""
    exact = fraction_of(name, value)
    if exact < 0 or (exact == 0 and not allow_zero):
        raise InvalidParameterError(name, value, ">= 0" if allow_zero else "> 0")
    return exact


def check_epsilon(value: Number, name: str = "epsilon") -> Fraction:
    """ε: finite and > 0."""
    return check_positive(name, value)


def check_rho(value: Number, name: str = "rho") -> Fraction:
    """ρ for zCDP: finite and > 0."""
    return check_positive(name, value)


def check_delta(value: Number, name: str = "delta", *, allow_zero: bool = True) -> Fraction:
    """δ in [0, 1) (or (0, 1) when ``allow_zero`` is false)."""
    exact = fraction_of(name, value)
    if not (0 <= exact < 1) or (exact == 0 and not allow_zero):
        raise InvalidParameterError(name, value, "in [0, 1)" if allow_zero else "in (0, 1)")
    return exact


def check_probability(
    value: Number, name: str, *, open_low: bool = False, open_high: bool = False
) -> Fraction:
    """A probability in [0, 1], optionally with open ends."""
    exact = fraction_of(name, value)
    low_ok = exact > 0 if open_low else exact >= 0
    high_ok = exact < 1 if open_high else exact <= 1
    if not (low_ok and high_ok):
        interval = ("(" if open_low else "[") + "0, 1" + (")" if open_high else "]")
        raise InvalidParameterError(name, value, f"a probability in {interval}")
    return exact


def check_alpha(value: float, name: str = "alpha") -> float:
    """The miss probability of a (1 - α) confidence interval: in (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | Fraction):
        raise InvalidParameterError(name, value, "a number in (0, 1)")
    if not (0 < float(value) < 1):
        raise InvalidParameterError(name, value, "in (0, 1), e.g. 0.05 for a 95% interval")
    return float(value)


# --- rational upper bounds of transcendental values -------------------------------------------
# Decimal's exp/ln/sqrt are correctly rounded; we compute with 40 digits and then add a margin of
# 1e-35 relative, so the returned fraction is a certain upper bound, and tight to ~35 digits.

_DIGITS = 40
_MARGIN = Fraction(1, 10**35)


def round_up(value: Decimal) -> Fraction:
    """A fraction >= the exact value that ``value`` approximates to 40 correct digits."""
    exact = Fraction(value)
    return exact + abs(exact) * _MARGIN + Fraction(1, 10**60)


def _dec(value: Fraction) -> Decimal:
    return Decimal(value.numerator) / Decimal(value.denominator)


def exp_upper(x: Fraction) -> Fraction:
    """An upper bound on e^x, exact to ~35 significant digits."""
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        return round_up(_dec(x).exp())


def log_upper(x: Fraction) -> Fraction:
    """An upper bound on ln(x) for x > 0."""
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        return round_up(_dec(x).ln())


def sqrt_upper(x: Fraction) -> Fraction:
    """An upper bound on sqrt(x) for x >= 0."""
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        return round_up(_dec(x).sqrt())
