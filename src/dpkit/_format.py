"""Numbers and values as people read them, for every message dpkit writes.

Privacy losses are exact :class:`~fractions.Fraction`\\ s, and a budget of ε = 1e308 is an
integer of 309 digits: interpolated as it is, one refusal printed all of them. Every error
message and every loss's ``str`` goes through :func:`number` (numbers) or :func:`shown` (any
value a parameter received), so no message prints a 300-digit integer, a ``Fraction(1, 3)``
or a four-megabyte string.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

__all__ = ["number", "shown"]

_EXACT_DIGITS = 15
"""Integers of up to this many digits are printed in full (every such one is a float exactly)."""

_LONG_TEXT = 200
"""Texts and reprs longer than this are cut, saying how long they were."""


def _scientific(value: Fraction) -> str:
    """Six significant digits in scientific notation, for any size of numerator/denominator."""
    num, den = value.numerator, value.denominator
    if max(num.bit_length(), den.bit_length()) > 4000:  # Decimal(int) is slow on huge ints
        exponent = round((abs(num).bit_length() - den.bit_length()) * math.log10(2))
        return f"{'-' if num < 0 else ''}~1e{exponent:+d}"
    with localcontext() as context:
        context.prec = 6
        context.Emax = 10**9
        context.Emin = -(10**9)
        quotient = Decimal(num) / Decimal(den)
    return format(quotient.normalize(), "g")


def number(value: int | float | Fraction) -> str:
    """A number as people write it: ``0.25``, ``1e-06``, ``0.333333`` (six digits when not
    exact), ``1e+308``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value) if len(str(abs(value))) <= _EXACT_DIGITS else _scientific(Fraction(value))
    if isinstance(value, float):
        return repr(value)
    if value.denominator == 1:
        return number(value.numerator)
    try:
        as_float = float(value)
    except OverflowError:
        return _scientific(value)
    if as_float != 0 and math.isfinite(as_float):
        if Fraction(repr(as_float)) == value:
            return repr(as_float)
        return f"{as_float:.6g}"
    return _scientific(value)


def shown(value: Any) -> str:
    """The value a parameter received, for an error message: numbers by :func:`number`, a
    privacy loss by its ``str`` (``PureDP(ε=1)``), anything else by its ``repr``, cut when
    long."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int | Fraction):
        return number(value)
    if type(value).__module__ == "dpkit.core.losses":
        return f"{type(value).__name__}({value})"
    if isinstance(value, tuple | list) and len(value) <= 10:
        inner = ", ".join(shown(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails is named by its type
        return f"<{type(value).__name__}>"
    if len(text) > _LONG_TEXT:
        return f"{text[: _LONG_TEXT - 20]}… ({len(text):,} characters)"
    return text
