"""Column kinds from metadata or declarations, conversions that never fail, canonical values.

The kind of a column (numeric, text, bool, temporal, other) decides which queries compile, so it
must never depend on the values in the table: a query refused for free on one table and released
(and charged) on a neighbouring one would tell them apart at no cost. Kinds therefore come only
from storage metadata (pandas dtypes, an Arrow / Parquet / DuckDB / Spark schema) or from a
declaration (``Session(..., schema={"salary": "numeric"})``):

* a pandas ``object`` column and every column of a CSV file are **text** unless declared;
* a text column may be declared ``numeric``, ``bool`` or ``temporal``; any column may be declared
  ``text``; other changes are refused (checked against the metadata, before any data is read).

Converting a column to its declared kind never fails: a value that does not parse becomes NULL
(the same rules in every engine — numbers are plain decimals such as ``-1.5e3``; booleans are
``true/t/yes/y/1`` and ``false/f/no/n/0`` in any case; timestamps follow :data:`TEMPORAL_PATTERN`,
see :func:`text_timestamps`). A data-dependent error could otherwise quote the value it choked on.

:func:`canonical` is the one identity of a group key value, used by the reference engine for
both contribution bounding and aggregation, and by the planner to match engine results to
declared keys: ``-0.0`` is ``0.0``, NaN is NULL, and dates, datetimes and timestamps are naive
``datetime`` values (aware ones in UTC).
"""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics._expr import ColumnKind
from dpkit.errors import InvalidDataError, InvalidParameterError

__all__ = [
    "BOOL_FALSE",
    "BOOL_TRUE",
    "NUMBER_PATTERN",
    "RESERVED_PREFIX",
    "TEMPORAL_GROUPS",
    "TEMPORAL_MAX_US",
    "TEMPORAL_MIN_US",
    "TEMPORAL_PATTERN",
    "canonical",
    "check_declared_schema",
    "convert_series",
    "csv_header",
    "floor_arrow_temporal",
    "floor_sql_temporal",
    "is_parquet_path",
    "kind_of_arrow",
    "kind_of_pandas",
    "needs_conversion",
    "pandas_float_columns",
    "parquet_schema",
    "prepare_pandas",
    "resolve_kinds",
    "text_of",
    "text_timestamps",
]

RESERVED_PREFIX = "__dpkit_"
"""Engines return their results under names with this prefix; user columns may not use it."""

RELATION_UNIT = f"{RESERVED_PREFIX}unit"
"""The column of a joined relation that holds each row's privacy unit
(:mod:`dpkit.analytics._joins`)."""

_NUMBER = " *[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)? *"
NUMBER_PATTERN = "^" + _NUMBER + "\\z"
"""Text that converts to a number (anything else converts to NULL), in every engine (RE2 and
Java syntax; ``\\z`` is the very end, where ``$`` would also match before a final newline)."""

BOOL_TRUE = ("true", "t", "yes", "y", "1")
BOOL_FALSE = ("false", "f", "no", "n", "0")

_NUMBER_RE = re.compile(_NUMBER)  # used with fullmatch

# One rule for text read as a date/time, in every engine (issue 21: DuckDB's cast, Python's
# fromisoformat and Spark's parser each accepted a different set, e.g. "2024-3-5", "20240105",
# "2024-01-01T00", and DuckDB dropped offsets). Surrounding ASCII whitespace is ignored; then
# YYYY-MM-DD (ASCII digits, year 0001-9999), optionally "T" or one space and HH:MM, optionally
# :SS, optionally .f (1 to 6 digits), then optionally "Z" or +HH:MM / -HH:MM (only after a time).
# Hours 00-23, minutes and seconds 00-59 (no leap second, no 24:00), a real calendar date, and
# the value in UTC (the offset subtracted) within years 1-9999; anything else is NULL. Values are
# naive UTC timestamps. RE2 (DuckDB), Java (Spark) and Python read this text alike.
_WS = "[ \\t\\n\\x0b\\f\\r]*"
TEMPORAL_GROUPS = ("y", "mo", "d", "h", "mi", "s", "f", "sign", "oh", "om")
"""Names of :data:`TEMPORAL_PATTERN`'s groups, in order (year ... offset minutes)."""


def _temporal_pattern(named: bool) -> str:
    """The rule's pattern; ``named``: its groups named by ``TEMPORAL_GROUPS`` (RE2's
    ``(?P<name>...)``, which Arrow needs; Java spells names otherwise, so SQL gets numbers)."""
    names = iter(TEMPORAL_GROUPS)

    def group(body: str) -> str:
        return f"(?P<{next(names)}>{body})" if named else f"({body})"

    hour, minute = "[01][0-9]|2[0-3]", "[0-5][0-9]"
    return (
        "^"
        + _WS
        + group("[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3}")  # not 0000
        + "-"
        + group("[0-9]{2}")
        + "-"
        + group("[0-9]{2}")
        + "(?:[T ]"
        + group(hour)
        + ":"
        + group(minute)
        + "(?::"
        + group(minute)
        + "(?:[.]"
        + group("[0-9]{1,6}")
        + ")?)?"
        + "(?:Z|"
        + group("[+-]")
        + group(hour)
        + ":"
        + group(minute)
        + ")?)?"
        + _WS
        + "\\z"
    )


TEMPORAL_PATTERN = _temporal_pattern(named=False)
"""Text that converts to a timestamp (anything else converts to NULL), in every engine (RE2 and
Java syntax; ``\\z`` is the very end). Its groups, in order: year, month, day, hour, minute,
second, fraction, offset sign, offset hours, offset minutes (a group that did not take part is
empty); the month and day are checked against the calendar after the match."""
_TEMPORAL_NAMED = _temporal_pattern(named=True)  # the same, for Arrow (RE2, like DuckDB)

TEMPORAL_MIN_US = -62_135_596_800_000_000
"""0001-01-01 00:00:00 as microseconds since 1970-01-01 (UTC): the first value a text gives."""
TEMPORAL_MAX_US = 253_402_300_799_999_999
"""9999-12-31 23:59:59.999999 as microseconds since 1970-01-01 (UTC): the last value."""

_KIND_NAMES: dict[str, ColumnKind] = {
    "numeric": "numeric",
    "number": "numeric",
    "text": "string",
    "string": "string",
    "str": "string",
    "bool": "bool",
    "boolean": "bool",
    "temporal": "temporal",
    "date": "temporal",
    "datetime": "temporal",
    "timestamp": "temporal",
}


def check_declared_schema(schema: object) -> dict[str, ColumnKind]:
    """A declared schema ``{column: kind}`` with the kinds' canonical names."""
    if schema is None:
        return {}
    if not isinstance(schema, Mapping):
        raise InvalidParameterError(
            "schema",
            schema,
            "a mapping column -> kind, e.g. {'salary': 'numeric', 'day': 'temporal'}",
        )
    out: dict[str, ColumnKind] = {}
    for name, kind in schema.items():
        if not isinstance(name, str) or not name:
            raise InvalidParameterError("schema", name, "column names (non-empty strings)")
        if not isinstance(kind, str) or kind.lower() not in _KIND_NAMES:
            raise InvalidParameterError(
                "schema",
                f"{name}: {kind!r}",
                "a kind among 'numeric', 'text', 'bool' and 'temporal'",
            )
        out[name] = _KIND_NAMES[kind.lower()]
    return out


def resolve_kinds(
    storage: Mapping[str, ColumnKind], declared: Mapping[str, ColumnKind]
) -> tuple[dict[str, ColumnKind], dict[str, ColumnKind]]:
    """(every column's kind, the columns whose values must be converted -> their kind).

    Raises:
        InvalidParameterError: a declared column does not exist, or its stored type cannot be
            converted to the declared kind (only text converts to numeric, bool or temporal).
    """
    kinds = dict(storage)
    conversions: dict[str, ColumnKind] = {}
    for name, target in declared.items():
        if name not in storage:
            known = ", ".join(repr(c) for c in storage)
            raise InvalidParameterError("schema", name, f"a column of the table ({known})")
        stored = storage[name]
        if stored == target:
            continue
        if target != "string" and stored != "string":
            raise InvalidParameterError(
                "schema",
                f"{name}: {target}",
                f"'{_public(stored)}' or 'text' (the column is stored as {_public(stored)})",
                "Only text columns (e.g. every column of a CSV file) can be declared numeric, "
                "bool or temporal; values that do not parse become NULL.",
            )
        kinds[name] = target
        conversions[name] = target
    return kinds, conversions


def _public(kind: ColumnKind) -> str:
    return "text" if kind == "string" else kind


def kind_of_arrow(dtype: Any) -> ColumnKind:
    """Map an Arrow type to a column kind."""
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

    if pa.types.is_boolean(dtype):
        return "bool"
    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
        return "numeric"
    if (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_string_view(dtype)
    ):
        return "string"
    if pa.types.is_date(dtype) or pa.types.is_timestamp(dtype):
        return "temporal"  # a time of day, a duration or an interval is not a point in time:
    # engines disagreed on them as keys (pandas merged them into one NULL group), so "other"
    if pa.types.is_dictionary(dtype):
        return kind_of_arrow(dtype.value_type)
    return "other"


def kind_of_pandas(dtype: Any) -> ColumnKind:
    """The kind of a pandas column from its dtype alone (``object`` is text)."""
    if isinstance(dtype, pd.CategoricalDtype):
        return kind_of_pandas(dtype.categories.dtype)
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_complex_dtype(dtype):
        return "other"
    if pd.api.types.is_numeric_dtype(dtype):
        return "numeric"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "temporal"
    if dtype == np.dtype(object) or pd.api.types.is_string_dtype(dtype):
        return "string"
    if isinstance(dtype, pd.ArrowDtype):
        return kind_of_arrow(dtype.pyarrow_dtype)
    return "other"


# ------------------------------------------------------------------ files
def is_parquet_path(path: str | Path) -> bool:
    return str(path).lower().endswith((".parquet", ".pq"))


def parquet_schema(path: str | Path) -> Any:
    """The Arrow schema stored in a Parquet file's footer (no rows are read)."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # no stubs in the env

    return pq.read_schema(str(path))


def csv_header(path: str | Path) -> list[str]:
    """The column names on the first line of a CSV file (comma-separated, double quotes).

    Only the header is read: a CSV file stores no types, so every column is text unless the
    session declares otherwise, and nothing is inferred from the rows.
    """
    with open(path, "rb") as raw:
        first = raw.readline()  # only the header line is decoded: later bytes are data
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = ""
    if "\x00" in text:
        text = ""
    header = next(csv.reader([text.rstrip("\r\n")]), None) if text else None
    if not header or any(not name for name in header) or len(set(header)) != len(header):
        raise InvalidDataError(
            "source",
            f"the first line of {str(path)!r} is not a header of distinct, non-empty column names",
            "Write the column names on the first line, in UTF-8, separated by commas.",
        )
    return header


# ------------------------------------------------------------------ values
def _is_null(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    if isinstance(value, np.datetime64):
        return bool(np.isnat(value))
    return False


def text_of(value: Any) -> str | None:
    """The text SQL engines give ``CAST(value AS VARCHAR)`` (None for NULL and NaN)."""
    if _is_null(value):
        return None
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return repr(float(value))
    if isinstance(value, np.datetime64):
        return str(pd.Timestamp(value))
    return str(value)


def _number_of(value: Any) -> float:
    if _is_null(value):
        return math.nan
    if isinstance(value, np.generic):
        value = value.item()
    try:
        if isinstance(value, bool):
            return 1.0 if value else 0.0
        if isinstance(value, int):
            try:
                return float(value)
            except OverflowError:
                return math.copysign(math.inf, value)
        if isinstance(value, float | decimal.Decimal):
            return float(value)
        if isinstance(value, str):
            return float(value) if _NUMBER_RE.fullmatch(value) else math.nan
    except (ValueError, ArithmeticError):
        return math.nan
    return math.nan


def _bool_of(value: Any) -> bool | None:
    if _is_null(value):
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | float | np.integer | np.floating):
        return bool(value != 0)
    if isinstance(value, str):
        low = value.lower()
        if low in BOOL_TRUE:
            return True
        if low in BOOL_FALSE:
            return False
    return None


def _timestamp_of(value: Any) -> Any:
    """A value that is not text (texts follow :func:`text_timestamps`) as a timestamp."""
    if _is_null(value) or isinstance(value, str):
        return pd.NaT
    try:
        if isinstance(value, pd.Timestamp | _dt.datetime | np.datetime64):
            stamp = pd.Timestamp(value)
            if stamp.tzinfo is not None:
                stamp = stamp.tz_convert("UTC").tz_localize(None)
            return stamp.as_unit("us")
        if isinstance(value, _dt.date):
            return pd.Timestamp(_dt.datetime(value.year, value.month, value.day)).as_unit("us")
    except (ValueError, TypeError, OverflowError, ArithmeticError):
        return pd.NaT
    return pd.NaT


_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def _arrow_texts(series: pd.Series) -> Any:
    """``series`` as an Arrow string array: values that are not text are null, and text UTF-8
    cannot encode (a lone surrogate) has "?" for each such character."""
    import pyarrow as pa

    try:
        return pa.array(series, type=pa.string(), from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError, UnicodeError, OverflowError):
        pass
    values = [_replace_unencodable(v) if isinstance(v, str) else None for v in series.tolist()]
    return pa.array(values, type=pa.string())


def text_timestamps(series: pd.Series) -> np.ndarray:
    """The timestamps (``datetime64[us]``, NaT for NULL) that the texts of ``series`` denote by
    :data:`TEMPORAL_PATTERN`; a value that is not text is NaT. Vectorised: the pattern over the
    column in Arrow (RE2, the regular expressions DuckDB runs), then integer arithmetic (the
    calendar check included)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]  # no stubs in the env

    out = np.full(len(series), np.datetime64("NaT", "us"))
    if len(series) == 0:
        return out
    found = pc.extract_regex(_arrow_texts(series), _TEMPORAL_NAMED)
    matched = found.is_valid().to_numpy(zero_copy_only=False)
    if not matched.any():
        return out
    found = found.filter(found.is_valid())

    def text(name: str) -> Any:
        return found.field(TEMPORAL_GROUPS.index(name))

    def number(name: str) -> np.ndarray:  # a group of digits, 0 when it did not take part
        digits = pc.binary_join_element_wise("0", text(name), "")
        return np.asarray(pc.cast(digits, "int64").to_numpy(), dtype=np.int64)

    year, month, day = number("y"), number("mo"), number("d")
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_index = np.clip(month - 1, 0, 11)
    days_in_month = _DAYS_IN_MONTH[month_index] + ((month == 2) & leap)
    valid = (month >= 1) & (month <= 12) & (day >= 1) & (day <= days_in_month)
    months = (year - 1970) * 12 + month_index
    days = months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64) + day - 1
    fraction = np.asarray(
        pc.cast(pc.utf8_rpad(text("f"), 6, "0"), "int64").to_numpy(), dtype=np.int64
    )
    seconds = (number("h") * 60 + number("mi")) * 60 + number("s")
    west = pc.equal(text("sign"), "-").to_numpy(zero_copy_only=False)
    offset = np.where(west, -1, 1) * (number("oh") * 60 + number("om")) * 60
    micros = (days * 86_400 + seconds - offset) * 1_000_000 + fraction
    valid &= (micros >= TEMPORAL_MIN_US) & (micros <= TEMPORAL_MAX_US)
    out[matched] = np.where(valid, micros, np.iinfo(np.int64).min).astype("datetime64[us]")
    return out


def _timestamps_of(series: pd.Series) -> np.ndarray:
    """Texts by :func:`text_timestamps`; dates, datetimes and timestamps in an ``object``
    column as naive UTC (value by value: such columns are rare); anything else NaT."""
    out = text_timestamps(series)
    if pd.api.types.is_string_dtype(series.dtype) and series.dtype != np.dtype(object):
        return out
    if pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty"):
        return out
    values = series.tolist()
    for i, value in enumerate(values):
        if not isinstance(value, str) and not _is_null(value):
            stamp = _timestamp_of(value)
            if stamp is not pd.NaT:
                out[i] = np.datetime64(stamp.to_datetime64(), "us")
    return out


def convert_series(series: pd.Series, kind: ColumnKind) -> pd.Series:
    """``series`` converted to ``kind`` value by value (never raises: unparsable is NULL).

    numeric -> float64 (NaN for NULL); text -> pandas string; bool -> nullable boolean;
    temporal -> datetime64[us] (naive, UTC for aware values).
    """
    values = series.tolist()
    if kind == "numeric":
        out = pd.Series(np.array([_number_of(v) for v in values], dtype=np.float64))
    elif kind == "bool":
        out = pd.Series(pd.array([_bool_of(v) for v in values], dtype="boolean"))
    elif kind == "temporal":
        out = pd.Series(_timestamps_of(series))
    else:
        out = pd.Series(pd.array([text_of(v) for v in values], dtype=pd.StringDtype()))
    out.index = series.index
    return out


def needs_conversion(dtype: Any, kind: ColumnKind) -> bool:
    """Whether a pandas column of ``dtype`` must be converted to hold ``kind`` values."""
    if kind == "other":
        return False
    return bool(dtype == np.dtype(object)) or kind_of_pandas(dtype) != kind


def prepare_pandas(df: pd.DataFrame, kinds: Mapping[str, ColumnKind]) -> pd.DataFrame:
    """``df`` with each column whose dtype does not carry its kind converted (never fails)."""
    repaired = {}
    for name in df.columns:
        series = df[name]
        if series.dtype == np.dtype(object) or pd.api.types.is_string_dtype(series.dtype):
            encodable = _encodable_text(series)
            if encodable is not None:
                repaired[str(name)] = encodable
    if repaired:
        df = df.assign(**repaired)
    converted = {
        name: convert_series(df[name], kind)
        for name, kind in kinds.items()
        if needs_conversion(df[name].dtype, kind)
    }
    for name, kind in kinds.items():
        if kind == "temporal" and name not in converted:
            floored = _floor_pandas_temporal(df[name])
            if floored is not None:
                converted[name] = floored
    return df.assign(**converted) if converted else df


def _replace_unencodable(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


def _encodable_text(series: pd.Series) -> pd.Series | None:
    """``series`` with text that UTF-8 cannot encode (lone surrogates) repaired, else None.

    Engines move text as UTF-8 (Arrow, DuckDB, Spark); a lone surrogate in one cell made them
    fail *after* the reservation while the neighbour without it released. Each unencodable
    character becomes "?" (Python's "replace" error handler), a rule that looks at that value
    alone. The common case, all text encodable, is checked in one Arrow conversion.
    """
    import pyarrow as pa

    try:
        pa.array(series, type=pa.string(), from_pandas=True)
        return None
    except (pa.ArrowException, UnicodeError, TypeError, ValueError, OverflowError):
        pass
    values = series.tolist()
    if not any(isinstance(v, str) for v in values):
        return None
    repaired = pd.Series([_replace_unencodable(v) for v in values], dtype=series.dtype)
    repaired.index = series.index
    return repaired


def _floor_pandas_temporal(series: pd.Series) -> pd.Series | None:
    """A datetime column finer than a microsecond, floored to microseconds (else None)."""
    dtype = series.dtype
    if not pd.api.types.is_datetime64_any_dtype(dtype):
        return None
    unit = getattr(dtype, "unit", None) or np.datetime_data(dtype)[0]
    if unit != "ns":
        return None
    return series.dt.floor("us").astype(
        pd.DatetimeTZDtype("us", dtype.tz) if getattr(dtype, "tz", None) else "datetime64[us]"
    )


def floor_arrow_temporal(table: Any) -> Any:
    """``table`` (Arrow) with every time, timestamp and duration column finer than a microsecond
    floored to whole microseconds.

    Group keys are identified at microsecond resolution (:func:`canonical`, Python's datetime).
    If an engine grouped nanosecond values exactly, two keys 1 ns apart would be two groups that
    the release step sees as one, and the query would fail on one table and release on its
    neighbour. So every engine floors to microseconds *before* it filters or groups: the key
    that is grouped is exactly the key that is released. Flooring depends on no other row.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    changed = False
    for field, col in zip(table.schema, table.columns, strict=True):
        t = field.type
        target = None
        if pa.types.is_timestamp(t) and t.unit == "ns":
            target = pa.timestamp("us", tz=t.tz)
        elif pa.types.is_time64(t) and t.unit == "ns":
            target = pa.time64("us")
        elif pa.types.is_duration(t) and t.unit == "ns":
            target = pa.duration("us")
        if target is None:
            columns.append(col)
            continue
        changed = True
        raw = col.cast(pa.int64())
        floored = pc.subtract(raw, pc.if_else(pc.less(raw, 0), 999, 0))  # floor, not toward 0
        micros = pc.divide(floored, 1000)
        columns.append(micros.cast(pa.int64()).cast(target))
    if not changed:
        return table
    return pa.table(
        columns,
        schema=pa.schema(
            [
                pa.field(f.name, c.type, f.nullable, f.metadata)
                for f, c in zip(table.schema, columns, strict=True)
            ]
        ),
    )


def floor_sql_temporal(sql_type: str) -> str | None:
    """A DuckDB expression template flooring a nanosecond temporal column to microseconds.

    ``{c}`` stands for the quoted column. DuckDB's casts from ``TIMESTAMP_NS`` round to the
    nearest microsecond; the engines floor (see :func:`floor_arrow_temporal`), so the cast is
    corrected down by one microsecond when it went up.
    """
    upper = sql_type.upper()
    coarse = {
        "TIMESTAMP_NS": "TIMESTAMP",
        "TIMESTAMP WITH TIME ZONE_NS": "TIMESTAMPTZ",
        "TIMESTAMPTZ_NS": "TIMESTAMPTZ",
        "TIME_NS": "TIME",
    }.get(upper)
    if coarse is None:
        return None
    return (
        f"(CAST({{c}} AS {coarse}) - CASE WHEN CAST(CAST({{c}} AS {coarse}) AS {upper}) > {{c}} "
        "THEN INTERVAL 1 MICROSECOND ELSE INTERVAL 0 MICROSECOND END)"
    )


def pandas_float_columns(df: pd.DataFrame, kinds: Mapping[str, ColumnKind]) -> set[str]:
    """The numeric columns that are floating point once :func:`prepare_pandas` ran."""
    return {
        str(name)
        for name, dtype in df.dtypes.items()
        if kinds.get(str(name)) == "numeric"
        and (
            needs_conversion(dtype, "numeric")
            or pd.api.types.is_float_dtype(dtype)
            or _arrow_floats(dtype)
        )
    }


def _arrow_floats(dtype: Any) -> bool:
    """An Arrow-backed pandas dtype whose values are floats (a dictionary of floats too, which
    pandas does not call a float dtype): its NaN reaches the engines."""
    arrow = getattr(dtype, "pyarrow_dtype", None)
    if arrow is None:
        return False
    import pyarrow as pa  # (loaded already: pandas has it)

    if pa.types.is_dictionary(arrow):
        arrow = arrow.value_type
    return bool(pa.types.is_floating(arrow))


def canonical(value: Any) -> Any:
    """The identity of a group key value (see the module docstring)."""
    if _is_null(value):
        return None
    if isinstance(value, np.datetime64):
        value = pd.Timestamp(value)
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return 0.0 if value == 0 else value
    if isinstance(value, decimal.Decimal):
        if value.is_nan():
            return None
        return int(value) if value == value.to_integral_value() else value
    if isinstance(value, pd.Timestamp):
        if value.tzinfo is not None:
            value = value.tz_convert("UTC").tz_localize(None)
        return value.to_pydatetime(warn=False)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day)
    return value
