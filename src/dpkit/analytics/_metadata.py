"""Table metadata registered once: public column bounds, key sets and kinds, and the privacy
unit's default contribution bounds.

A privacy officer declares them (never read from the data): in Python as the
:class:`~dpkit.analytics.Session` options ``schema=``, ``bounds=``, ``keys=``, ``max_rows=``,
``max_groups=`` and ``max_rows_per_group=``; for the command line as a TOML file
(``dpkit query ... --metadata FILE``, read by :func:`read_metadata`); in the service with the
dataset's registration. Then ``AVG(wage)`` clamps to the registered bounds of ``wage``, and a
``GROUP BY dept`` without keys of its own uses the registered key set of ``dept``.

The TOML file::

    max_rows = 5             # the unit's defaults (a query's own bounds win)
    max_groups = 2

    [columns.wage]
    kind = "float"           # int, float, numeric, text, bool, date, timestamp, temporal
    bounds = [0, 3000]       # public clamping bounds of wage

    [columns.dept]
    kind = "text"
    keys = ["R&D", "Sales"]  # the public key set (domain) of dept
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpkit.analytics._keys import check_key_value
from dpkit.errors import InvalidParameterError

__all__ = [
    "TableMetadata",
    "check_column_bounds",
    "check_column_keys",
    "read_metadata",
    "registered_bounds",
    "registered_for",
    "registered_keys",
]

KIND_NAMES = {
    # the kind names people write (a metadata file, `dpkit query --schema`) and what each is
    "int": "numeric",
    "integer": "numeric",
    "float": "numeric",
    "double": "numeric",
    "decimal": "numeric",
    "number": "numeric",
    "numeric": "numeric",
    "bool": "bool",
    "boolean": "bool",
    "text": "text",
    "str": "text",
    "string": "text",
    "date": "temporal",
    "datetime": "temporal",
    "timestamp": "temporal",
    "temporal": "temporal",
}
_CONTRIBUTION = ("max_rows", "max_groups", "max_rows_per_group")
_COLUMN_FIELDS = ("kind", "bounds", "keys")


def _number(parameter: str, value: object) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParameterError(parameter, value, "a finite number")
    return value


def check_column_bounds(bounds: object, name: str = "bounds") -> dict[str, tuple[Any, Any]]:
    """``{column: (lower, upper)}`` with finite numbers, ``lower < upper``."""
    if bounds is None:
        return {}
    if not isinstance(bounds, Mapping):
        raise InvalidParameterError(
            name, bounds, "a mapping {column: (lower, upper)}, e.g. {'wage': (0, 3000)}"
        )
    out: dict[str, tuple[Any, Any]] = {}
    for column, pair in bounds.items():
        if not isinstance(column, str) or not column:
            raise InvalidParameterError(name, column, "column names (non-empty strings)")
        where = f"{name}[{column}]"
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidParameterError(where, pair, "a pair [lower, upper] of numbers")
        low, high = _number(where, pair[0]), _number(where, pair[1])
        if not low < high:
            raise InvalidParameterError(where, list(pair), "[lower, upper] with lower < upper")
        out[column] = (low, high)
    return out


def check_column_keys(keys: object, name: str = "keys") -> dict[str, tuple[Any, ...]]:
    """``{column: [public values, ...]}``: each a non-empty list of distinct key values."""
    if keys is None:
        return {}
    if not isinstance(keys, Mapping):
        raise InvalidParameterError(
            name, keys, "a mapping {column: [public values, ...]}, e.g. {'dept': ['a', 'b']}"
        )
    out: dict[str, tuple[Any, ...]] = {}
    for column, values in keys.items():
        if not isinstance(column, str) or not column:
            raise InvalidParameterError(name, column, "column names (non-empty strings)")
        where = f"{name}[{column}]"
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise InvalidParameterError(where, values, "a non-empty list of public values")
        for value in values:
            check_key_value(value)
        if len(set(values)) != len(values):
            raise InvalidParameterError(where, "a repeated value", "distinct values")
        out[column] = tuple(values)
    return out


def registered_for(registered: Mapping[str, Any], column: str) -> Any:
    """What is registered for ``column`` as a query names it: under that name, else under its
    bare name (``o.wage`` -> ``wage``), else under the one ``table.column`` registered with that
    bare name (over several tables). None if nothing is."""
    if column in registered:
        return registered[column]
    bare = column.rpartition(".")[2]
    if bare in registered:
        return registered[bare]
    found = [name for name in registered if name.rpartition(".")[2] == bare]
    return registered[found[0]] if len(found) == 1 else None


def registered_bounds(
    registered: Mapping[str, tuple[Any, Any]],
    column: str,
    call: str,
    written: str,
    help_text: str,
) -> tuple[Any, Any]:
    """The bounds registered for ``column``, for an aggregate written without its own (SQL's
    ``AVG(wage)``, the builder's ``mean("wage")``, the service's JSON ``{"op": "mean"}``).
    Neither: refused (before anything is reserved), naming the column and how to register
    its bounds. ``call``: the aggregate as written; ``written``: how to write its bounds in
    the query; ``help_text``: how to register them (``{column}`` is the column's name)."""
    found = registered_for(registered, column)
    if found is None:
        raise InvalidParameterError(
            "bounds",
            call,
            f"{written}, or registered for the column {column!r} (no bounds are registered for it)",
            help_text.replace("{column}", column.rpartition(".")[2]),
        )
    return found[0], found[1]


def registered_keys(
    registered: Mapping[str, Sequence[Any]], columns: Sequence[str]
) -> dict[str, list[Any]] | None:
    """The registered key sets of the grouping ``columns``, ``{column: [values]}``, when every
    one of them has one (the groups are then their product); else None (the groups are
    chosen privately)."""
    found = {column: registered_for(registered, column) for column in columns}
    if not columns or any(v is None for v in found.values()):
        return None
    return {column: list(values) for column, values in found.items()}


@dataclass(frozen=True)
class TableMetadata:
    """A table's registered metadata, as :class:`~dpkit.analytics.Session` takes it
    (:meth:`options`)."""

    schema: dict[str, str] = field(default_factory=dict)
    bounds: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    keys: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    max_rows: int | None = None
    max_groups: int | None = None
    max_rows_per_group: int | None = None
    integers: frozenset[str] = frozenset()
    """The columns declared ``int`` (quantiles of them may run over the integers)."""

    def options(self) -> dict[str, Any]:
        """The Session keyword arguments: schema, bounds, keys and the contribution bounds."""
        return {
            "schema": dict(self.schema),
            "bounds": dict(self.bounds),
            "keys": dict(self.keys),
            "max_rows": self.max_rows,
            "max_groups": self.max_groups,
            "max_rows_per_group": self.max_rows_per_group,
        }


def metadata_from(content: Mapping[str, Any], source: str = "metadata") -> TableMetadata:
    """The metadata of a parsed file (see the module docstring); every value checked."""
    unknown = sorted(k for k in content if k not in (*_CONTRIBUTION, "columns"))
    if unknown:
        raise InvalidParameterError(
            source, unknown[0], f"one of {', '.join((*_CONTRIBUTION, 'columns'))}"
        )
    contribution: dict[str, int] = {}
    for key in _CONTRIBUTION:
        value = content.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameterError(f"{source}: {key}", value, "a positive whole number")
        contribution[key] = value
    columns = content.get("columns", {})
    if not isinstance(columns, Mapping):
        raise InvalidParameterError(
            f"{source}: columns", columns, "a table per column: [columns.NAME]"
        )
    schema: dict[str, str] = {}
    bounds: dict[str, Any] = {}
    keys: dict[str, Any] = {}
    integers = set()
    for column, spec in columns.items():
        where = f"{source}: columns.{column}"
        if not isinstance(spec, Mapping):
            raise InvalidParameterError(where, spec, "a table with kind, bounds and/or keys")
        extra = sorted(k for k in spec if k not in _COLUMN_FIELDS)
        if extra:
            raise InvalidParameterError(where, extra[0], "one of kind, bounds, keys")
        if "kind" in spec:
            kind = spec["kind"]
            if not isinstance(kind, str) or kind.lower() not in KIND_NAMES:
                raise InvalidParameterError(
                    f"{where}.kind", kind, "int, float, numeric, text, bool, date or timestamp"
                )
            schema[column] = KIND_NAMES[kind.lower()]
            if kind.lower() in ("int", "integer"):
                integers.add(column)
        if "bounds" in spec:
            bounds[column] = spec["bounds"]
        if "keys" in spec:
            keys[column] = spec["keys"]
    return TableMetadata(
        schema,
        check_column_bounds(bounds, f"{source}: bounds"),
        check_column_keys(keys, f"{source}: keys"),
        integers=frozenset(integers),
        **contribution,
    )


def read_metadata(path: str | Path) -> TableMetadata:
    """The metadata in a TOML file (see the module docstring)."""
    import tomllib

    file = Path(path)
    try:
        with file.open("rb") as handle:
            content = tomllib.load(handle)
    except OSError as error:
        raise InvalidParameterError(
            "metadata", str(path), "a readable TOML file", f"({error.strerror})"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidParameterError(
            "metadata", str(path), f"a TOML file ({error})", "See docs/cli.md (metadata files)."
        ) from None
    return metadata_from(content, file.name)
