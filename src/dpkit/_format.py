"""Numbers and values as people read them, for every message dpkit writes.

Privacy losses are exact :class:`~fractions.Fraction`\\ s, and a budget of ε = 1e308 is an
integer of 309 digits: interpolated as it is, one refusal printed all of them. Every error
message and every loss's ``str`` goes through :func:`number` (numbers) or :func:`shown` (any
value a parameter received), so no message prints a 300-digit integer, a ``Fraction(1, 3)``
or a four-megabyte string.

What dpkit prints for people to read (the CLI's answers and errors, the demos) writes numbers
with :func:`human_number`, losses with :func:`format_loss` and messages through
:func:`friendly`. They live here, below :mod:`dpkit.cli`, so that no library module needs the
CLI to print.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

__all__ = [
    "column_decimals",
    "format_column",
    "format_loss",
    "friendly",
    "human_number",
    "number",
    "shown",
]

_EXACT_DIGITS = 15
"""Integers of up to this many digits are printed in full (every such one is a float exactly)."""

_EXACT_LIMIT = 10**_EXACT_DIGITS

_LONG_TEXT = 200
"""Texts and reprs longer than this are cut, saying how long they were."""


def _scientific(value: Fraction) -> str:
    """Six significant digits in scientific notation, for any size of numerator/denominator."""
    num, den = value.numerator, value.denominator
    if max(num.bit_length(), den.bit_length()) > 4000:
        # Decimal(int) and str(int) are slow on huge ints (and refused beyond 4,300 digits);
        # math.log10 reads any int from its bits.
        return _scientific_from_log(num, den)
    with localcontext() as context:
        context.prec = 6
        context.Emax = 10**9
        context.Emin = -(10**9)
        quotient = Decimal(num) / Decimal(den)
    return format(quotient.normalize(), "g")


def _scientific_from_log(num: int, den: int) -> str:
    """Scientific notation of num/den (num ≠ 0) from logarithms: never converts an int to text.
    Six digits are right for any exponent a message can meet (float log10 has ~16 digits)."""
    log = math.log10(abs(num)) - math.log10(den)
    exponent = math.floor(log)
    mantissa = 10 ** (log - exponent)
    if mantissa >= 9.999995:  # rounds up to 10: carry into the exponent
        mantissa, exponent = 1.0, exponent + 1
    return f"{'-' if num < 0 else ''}{mantissa:.6g}e{exponent:+d}"


def number(value: int | float | Fraction) -> str:
    """A number as people write it: ``0.25``, ``1e-06``, ``0.333333`` (six digits when not
    exact), ``1e+308``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        if -_EXACT_LIMIT < value < _EXACT_LIMIT:  # never str() of a huge int: it is refused
            return str(value)
        return _scientific(Fraction(value))
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
    if type(value).__module__ == "dpkit.core._losses":
        return f"{type(value).__name__}({value})"
    if isinstance(value, tuple | list) and len(value) <= 10:
        inner = ", ".join(shown(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    try:
        text = repr(value)
    except Exception:  # a failing repr (or a container of 5,000-digit ints) is named by its type
        try:
            size = f" of {len(value):,} items"
        except Exception:
            size = ""
        return f"<{type(value).__name__}{size}>"
    if len(text) > _LONG_TEXT:
        return f"{text[: _LONG_TEXT - 20]}… ({len(text):,} characters)"
    return text


# ------------------------------------------------------------------ for people reading output
def human_number(value: Any) -> str:
    """A number as people write it: ``0.25``, ``1/3 ≈ 0.3333``, ``1e+308``, ``-1``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return human_number(value.numerator)
        as_float = float(value)
        text = f"{as_float:.6g}"
        if Fraction(text) == value:
            return text
        if value.denominator < 1000 and abs(value.numerator) < 10**6:
            return f"{value.numerator}/{value.denominator} ≈ {as_float:.4g}"
        return f"≈ {as_float:.6g}"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**15 else f"{float(value):.6g}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


_FRACTION_RE = re.compile(r"Fraction\((-?\d+), (\d+)\)")
_LONG_INT_RE = re.compile(r"(?<![\w.])-?\d{16,}(?:/\d+)?(?![\w.])")


def friendly(text: str) -> str:
    """Rewrite Python-isms in a message: ``Fraction(-1, 1)`` → ``-1``, 300 digits → ``1e+308``."""

    def fraction(match: re.Match[str]) -> str:
        return human_number(Fraction(int(match.group(1)), int(match.group(2))))

    def long_number(match: re.Match[str]) -> str:
        return human_number(Fraction(match.group(0)))

    return _LONG_INT_RE.sub(long_number, _FRACTION_RE.sub(fraction, text))


def format_loss(loss: Any) -> str:
    """A privacy loss as people write it: ``ε=0.25``, ``ε=1, δ=1e-06``, ``ρ=0.5``."""
    if loss is None:
        return ""
    symbols = {"epsilon": "ε", "delta": "δ", "rho": "ρ"}
    parts = [
        f"{symbols[name]}={human_number(getattr(loss, name))}"
        for name in getattr(loss, "__slots__", ())
        if name in symbols
    ]
    return ", ".join(parts) if parts else friendly(str(loss))


def column_decimals(values: Sequence[float], halfwidths: Sequence[float], integral: bool) -> int:
    """Decimals for a column: none for counts; else enough to show the error bar's first digit
    (at most 2 once the error bar is 1 or more, at most 4 ever)."""
    if integral:
        return 0
    finite = [h for h in halfwidths if math.isfinite(h) and h > 0]
    if finite:
        scale = sorted(finite)[len(finite) // 2]
        decimals = max(0, 1 - math.floor(math.log10(scale)))
        return min(decimals, 4)
    finite_values = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if not finite_values:
        return 0
    biggest = max(finite_values)
    return 0 if biggest >= 100 else 2 if biggest >= 1 else 4


def format_column(values: Sequence[float], decimals: int) -> list[str]:
    """One style for the whole column: fixed, thousands separators; scientific only when some
    value is too large for fixed notation (then for every value of the column)."""
    finite = [abs(v) for v in values if isinstance(v, float | int) and math.isfinite(v)]
    scientific = bool(finite) and max(finite) >= 1e15
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append("—")
        elif scientific:
            out.append(f"{v:.3e}")
        else:
            out.append(f"{v:,.{decimals}f}")
    return out
