"""dpkit._format: any number or value a message can meet is printed short and without failing."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit._format import number, shown

_CASES = {  # expected text: value (pytest's ids would str() the ints, so they are keys here)
    "0": 0,
    "-999999999999999": -(10**15) + 1,
    "1e+15": 10**15,
    "1e+308": 10**308,
    "1e+5000": 10**5000,  # beyond int's 4,300-digit str limit
    "-1e+5000": -(10**5000),
    "3e+100000": 3 * 10**100000,
    "1e-5000": Fraction(1, 10**5000),
    "3.33333e+4999": Fraction(10**5000 + 1, 3),
}


@pytest.mark.parametrize("text", list(_CASES))
def test_number_of_any_size(text: str) -> None:
    assert number(_CASES[text]) == text
    assert shown(_CASES[text]) == text


def test_huge_ints_never_go_through_str() -> None:
    # str() of an int past sys.get_int_max_str_digits() raises ValueError; number must not
    for digits in (4299, 4301, 10_000, 200_000):
        text = number(10**digits - 1)
        assert len(text) < 20
        assert text.endswith(f"e+{digits}") or text.endswith(f"e+{digits - 1}")


def test_shown_of_containers_of_huge_ints() -> None:
    assert shown([10**5000, 1]) == "[1e+5000, 1]"
    assert len(shown({"a": 10**5000})) < 40  # a repr that fails is named by its type
    assert len(shown([*range(20), 10**5000])) < 40


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(min_value=-(10**6), max_value=10**6), st.integers(min_value=0, max_value=10**4))
def test_number_is_short_and_right_to_six_digits(mantissa: int, digits: int) -> None:
    value = mantissa * 10**digits
    text = number(value)
    assert len(text) <= 16
    if value != 0:
        assert abs(Fraction(text) / value - 1) < Fraction(1, 10**5)
