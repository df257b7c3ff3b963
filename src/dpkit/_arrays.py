"""Numbers from containers, decided by the container and never refused by a value.

``np.asarray(data, dtype=float64)`` fails on a list holding ``None`` or a Python int beyond the
float range, and a list of ints turns into an ``object`` array at 2^64: whether a release then
raised depended on one person's value. :func:`as_float64` decides from the container: a list
(or object array) of numbers is read element by element, ``None`` and anything that is not a
number becoming NaN, and integers beyond the float range saturating at ±float max.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["as_float64"]

_MAX = float(np.finfo(np.float64).max)


def _one(value: Any) -> float:
    if value is None or isinstance(value, bool | np.bool_):
        return math.nan if value is None else float(value)
    if isinstance(value, numbers.Integral):
        integer = int(value)
        if abs(integer) > 2**1023:
            return _MAX if integer > 0 else -_MAX
        return float(integer)
    if isinstance(value, numbers.Real):
        return float(value)
    return math.nan


def as_float64(data: Any) -> np.ndarray:
    """``data`` as a float64 array of the same shape (see the module docstring).

    Example:
        >>> as_float64([1, None, 10**400, -(10**400)]).tolist()
        [1.0, nan, 1.7976931348623157e+308, -1.7976931348623157e+308]
    """
    try:
        array = np.asarray(data)
    except (ValueError, TypeError):  # ragged nesting: the shape, not a value, is wrong
        raise
    if array.dtype.kind in "biuf":
        return array.astype(np.float64)
    if array.dtype != object:
        return array.astype(np.float64)  # text dtypes: the container decides (and may refuse)
    flat = np.fromiter((_one(v) for v in array.reshape(-1)), dtype=np.float64, count=array.size)
    return flat.reshape(array.shape)
