"""The public domain of a synthetic table: each column's declared values, never read from data.

A domain is ``{column: size}`` (values ``0..size-1``, the format of private-pgm's
``adult-domain.json``) or ``{column: [value, ...]}`` (declared categories), in column order.
Everything here is public: a domain that is empty, has an empty column, a column name that is
not a string, repeated values or values of an unsupported type is refused with an
:class:`~dpkit.errors.InvalidParameterError` before anything is reserved.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkit.errors import InvalidParameterError

__all__ = ["DEFAULT_MAX_CELLS", "Domain"]

DEFAULT_MAX_CELLS = 10**7
"""The most cells the marginal tables a fit holds may have together (all 1-way and 2-way
candidate marginals for MST): 80 MB of float64. Raise it with ``max_cells=`` (``--max-cells``)."""


def _values(name: str, spec: Any) -> tuple[Any, ...]:
    if isinstance(spec, bool):
        raise InvalidParameterError(f"domain[{name!r}]", spec, "a size >= 1 or a list of values")
    if isinstance(spec, int):
        if spec < 1:
            raise InvalidParameterError(
                f"domain[{name!r}]",
                spec,
                "a size >= 1 (the column's values are 0..size-1)",
                "A column with no possible value cannot be synthesised: drop it from the domain.",
            )
        return tuple(range(spec))
    if isinstance(spec, str) or not isinstance(spec, Sequence):
        raise InvalidParameterError(f"domain[{name!r}]", spec, "a size >= 1 or a list of values")
    values = tuple(spec)
    if not values:
        raise InvalidParameterError(f"domain[{name!r}]", spec, "a non-empty list of values")
    for v in values:
        ok = isinstance(v, int | str) or (isinstance(v, float) and math.isfinite(v))
        if not ok:
            raise InvalidParameterError(
                f"domain[{name!r}]", v, "values that are ints, strings, bools or finite floats"
            )
    kinds = {bool if isinstance(v, bool) else str if isinstance(v, str) else float for v in values}
    if len(kinds) > 1:
        raise InvalidParameterError(
            f"domain[{name!r}]", spec, "values of one kind: all numbers, all strings or all bools"
        )
    if len({(type(v).__name__, v) for v in values}) != len(values):
        raise InvalidParameterError(f"domain[{name!r}]", spec, "distinct values")
    return values


class Domain:
    """Each column's declared values, in column order (public)."""

    __slots__ = ("_columns",)

    def __init__(self, columns: Mapping[str, Any] | Domain) -> None:
        if isinstance(columns, Domain):
            columns = columns.columns
        if not isinstance(columns, Mapping) or not columns:
            raise InvalidParameterError(
                "domain", columns, "a non-empty mapping {column: size or [values]}"
            )
        out: dict[str, tuple[Any, ...]] = {}
        for name, spec in columns.items():
            if not isinstance(name, str) or not name:
                raise InvalidParameterError("domain", name, "column names (non-empty strings)")
            out[name] = _values(name, spec)
        self._columns = out

    @classmethod
    def load(cls, path: str | Path) -> Domain:
        """A domain file: JSON ``{column: size}`` or ``{column: [values]}``."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidParameterError(
                "domain", str(path), "a readable JSON file", error.strerror or ""
            ) from None
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidParameterError(
                "domain", str(path), "a JSON object {column: size}", f"line {error.lineno}"
            ) from None
        return cls(parsed)

    @property
    def columns(self) -> dict[str, tuple[Any, ...]]:
        return dict(self._columns)

    @property
    def names(self) -> list[str]:
        return list(self._columns)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self._columns.values())

    def values(self, name: str) -> tuple[Any, ...]:
        return self._columns[name]

    def __len__(self) -> int:
        return len(self._columns)

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Domain) and self._columns == other._columns

    def __hash__(self) -> int:
        return hash(tuple(self._columns.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: {len(v)}" for n, v in list(self._columns.items())[:8])
        more = ", ..." if len(self._columns) > 8 else ""
        return f"Domain({{{inner}{more}}})"

    def check_size(self, cells: int, max_cells: int, what: str) -> None:
        """Refuse a model whose tables would hold more than ``max_cells`` cells."""
        if cells > max_cells:
            raise InvalidParameterError(
                "max_cells",
                max_cells,
                f">= {cells} ({what} of this domain)",
                f"The model would hold {cells:,} cells, above the limit of {max_cells:,}. "
                "Bin the largest columns more coarsely, drop columns, or raise the limit with "
                "max_cells= (--max-cells on the command line) if the memory is there "
                "(8 bytes per cell, several copies while fitting).",
            )
