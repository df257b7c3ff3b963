"""Public group keys (:class:`KeySet`) and the checks of the names and key values a query declares.

Below both the query builder (:mod:`dpkit.analytics._query`, which re-exports :class:`KeySet`)
and the engines (:mod:`dpkit.analytics._engines._base`), so that an engine's plan can carry a key
set without importing the builder.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from dpkit.analytics._expr import check_unicode
from dpkit.errors import InvalidParameterError

__all__ = ["KeySet", "KeyValue", "check_key_value", "check_name"]

KeyValue: TypeAlias = Any
"""A public group key value: a string, number, boolean, date or other hashable value."""


def check_name(name: object, what: str = "name") -> str:
    """``name`` if it is a non-empty string of valid Unicode, else an error naming ``what``."""
    if not isinstance(name, str) or not name:
        raise InvalidParameterError(what, name, "a non-empty string")
    return check_unicode(what, name)


@dataclass(frozen=True, slots=True)
class KeySet:
    """Public group keys: the groups the result will have, declared without looking at data.

    Every key appears in the result (empty groups get a noisy zero); rows whose key is not in
    the set are dropped.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[KeyValue, ...], ...]

    @staticmethod
    def from_values(column: str, values: Iterable[KeyValue]) -> KeySet:
        """Keys for one column."""
        return KeySet.from_tuples((column,), [(v,) for v in values])

    @staticmethod
    def from_dict(values: Mapping[str, Iterable[KeyValue]]) -> KeySet:
        """The cartesian product of per-column value lists."""
        columns = tuple(values)
        lists = [list(v) for v in values.values()]
        return KeySet.from_tuples(columns, itertools.product(*lists))

    @staticmethod
    def from_tuples(columns: Sequence[str], rows: Iterable[Sequence[KeyValue]]) -> KeySet:
        """Keys given row by row."""
        names = tuple(check_name(c, "columns") for c in columns)
        if not names or len(set(names)) != len(names):
            raise InvalidParameterError("columns", columns, "distinct column names")
        out: list[tuple[KeyValue, ...]] = []
        seen: set[tuple[KeyValue, ...]] = set()
        for row in rows:
            key = tuple(row)
            if len(key) != len(names):
                raise InvalidParameterError("keys", row, f"tuples of {len(names)} values")
            for value in key:
                check_key_value(value)
            if key in seen:
                raise InvalidParameterError("keys", row, "distinct keys (this one repeats)")
            seen.add(key)
            out.append(key)
        if not out:
            raise InvalidParameterError("keys", [], "at least one key")
        return KeySet(names, tuple(out))

    def __len__(self) -> int:
        return len(self.rows)


def check_key_value(value: object) -> None:
    """Refuse a key value that cannot name a public group (NULL, non-finite, unhashable)."""
    if value is None:
        raise InvalidParameterError(
            "keys", value, "non-NULL values", "Rows with a NULL key are never in a public group."
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameterError("keys", value, "finite values")
    if isinstance(value, str):
        check_unicode("keys", value)
    if not isinstance(value, bool | int | float | str | np.integer | np.floating):
        # dates and the like are fine: they are compared, never pasted into SQL
        try:
            hash(value)
        except TypeError:
            raise InvalidParameterError("keys", value, "hashable values") from None
