"""Reading a number is bounded before any arithmetic (issue 21): ``Fraction("1e-8000000")``
computes a power of ten with eight million digits, minutes of CPU holding the GIL, and every
privacy parameter (the service's losses, budgets and allowances, the CLI's --epsilon, the
Python API) is read by :func:`dpkit._exact.fraction_of`."""

from __future__ import annotations

import time
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit._exact import MAX_DECIMAL_EXPONENT, MAX_NUMBER_TEXT, check_epsilon, fraction_of
from dpkit.errors import InvalidParameterError

HOSTILE = [
    "1e-8000000",
    "1e8000000",
    "1E-0000000000000000000000008000000",
    "1e-8_000_000",
    " 1e-99999999 ",
    "9" * 5000,
    "1/" + "7" * 5000,
    "0." + "0" * 200 + "1",
    "1e401",
    "1e-401",
    "1e",
    "1e+",
    "",
    "nan",
    "inf",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_number_texts_are_refused_at_once(text: str) -> None:
    start = time.perf_counter()
    with pytest.raises(InvalidParameterError) as caught:
        fraction_of("epsilon", text)
    assert time.perf_counter() - start < 0.25
    assert "epsilon" in str(caught.value)
    assert len(str(caught.value)) < 400  # the value is named, not printed in full


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.1", Fraction(1, 10)),
        (" 1/3 ", Fraction(1, 3)),
        ("1e-6", Fraction(1, 10**6)),
        ("1e400", Fraction(10**400)),
        ("1e-400", Fraction(1, 10**400)),
        ("1E+400", Fraction(10**400)),
        ("2.5e-3", Fraction(1, 400)),
        (" 1/3 ", Fraction(1, 3)),
        ("-.5", Fraction(-1, 2)),
        ("+2.", Fraction(2)),
        ("7" * MAX_NUMBER_TEXT, Fraction(int("7" * MAX_NUMBER_TEXT))),
    ],
)
def test_real_numbers_are_still_read_exactly(text: str, expected: Fraction) -> None:
    assert fraction_of("x", text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "1_0",  # Python reads 10
        "1_000",
        "\u0661",  # ARABIC-INDIC DIGIT ONE: Python reads 1
        "\uff11",  # FULLWIDTH DIGIT ONE
        "\u0661/\u0663",
        "\u00a01",  # a no-break space before it
        "1 / 3",
        "0x10",
        "1e",
        "nan",
        "inf",
        "",
        "1/0",
    ],
)
def test_text_that_is_not_a_plain_ascii_number_is_refused(text: str) -> None:
    """A loss of "1_0" charged ε = 10, and "١" (an Arabic-Indic one) ε = 1: Python's Fraction
    reads underscores and any Unicode digit. Only ASCII decimals, fractions and scientific
    numbers are read now."""
    with pytest.raises(InvalidParameterError):
        fraction_of("epsilon", text)


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_bools_are_refused(value: object) -> None:
    with pytest.raises(InvalidParameterError):
        fraction_of("epsilon", value)  # type: ignore[arg-type]


def test_decimals_and_integers_are_bounded_too() -> None:
    with pytest.raises(InvalidParameterError):
        fraction_of("x", Decimal("1e-8000000"))
    with pytest.raises(InvalidParameterError):
        fraction_of("x", Decimal("1." + "1" * 200))
    with pytest.raises(InvalidParameterError):
        fraction_of("x", 10 ** (MAX_DECIMAL_EXPONENT + 1))
    with pytest.raises(InvalidParameterError) as caught:
        fraction_of("x", 10**5000)  # more digits than int's repr allows: named, not printed
    assert len(str(caught.value)) < 400
    assert fraction_of("x", 10**MAX_DECIMAL_EXPONENT) == 10**MAX_DECIMAL_EXPONENT
    assert fraction_of("x", Decimal("1e-400")) == Fraction(1, 10**400)
    assert fraction_of("x", 5e-324) == Fraction("5e-324")  # every float is within the bounds
    assert fraction_of("x", 1.7976931348623157e308) == Fraction("1.7976931348623157e308")
    with pytest.raises(InvalidParameterError):
        check_epsilon("1e-8000000")


@settings(max_examples=150, deadline=None, database=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.from_regex(r"\A\s*[-+]?[0-9_]{0,30}(\.[0-9_]{0,30})?([eE][-+]?[0-9_]{0,12})?\s*\Z"),
        st.from_regex(r"\A[-+]?[0-9]{1,60}/[0-9]{1,60}\Z"),
    )
)
def test_any_text_is_read_or_refused_in_milliseconds(text: str) -> None:
    start = time.perf_counter()
    try:
        value = fraction_of("x", text)
    except InvalidParameterError:
        pass
    else:
        assert isinstance(value, Fraction)
        assert len(text) <= MAX_NUMBER_TEXT
    assert time.perf_counter() - start < 0.25
