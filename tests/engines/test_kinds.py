"""Column kinds come from metadata or declarations, conversions never fail, and every engine
identifies groups alike — run on pandas (the reference), DuckDB and Spark.

* a text column declared numeric, bool or temporal converts by the same rules everywhere, and a
  value that does not parse is NULL (never an error quoting it);
* a pandas ``object`` column is text unless declared, whatever its values;
* a CSV file's columns are text, converted as declared;
* -0.0 and 0.0 are one group; key texts holding the hash separator do not merge groups;
* temporal public keys given as dates or ISO text match the rows.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from _engine_oracle import result_dict

import dpkit as dp
from dpkit.analytics import Session, col, count
from dpkit.analytics._engines import BoundedPlan, Engine, Output, PandasEngine, Step, ValueSpec
from dpkit.analytics._engines._columns import canonical
from dpkit.analytics._query import KeySet
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed

Make = Callable[..., Engine]

NUMBERS = ["1", " 2 ", "1e3", "abc", "", None, "-4.", "1_000", "12\n", ".5", "1e400", "nan"]
BOOLS = ["true", "T", "yes", "0", "no", "maybe", None, "FALSE", "y", "1", "on", " true"]
STAMPS = [
    "2024-01-01",
    "2024-01-01 10:00:00",
    "garbage",
    None,
    "2024-01-02T08:30:00",
    "",
    "2024-13-45",
    "2024-01-03",
    "x",
    "2024-01-01",
    "2024-01-02",
    "-",
]


def texts() -> pd.DataFrame:
    n = len(NUMBERS)
    return pd.DataFrame(
        {
            "u": range(n),
            "num": pd.array(NUMBERS, dtype="str"),
            "flag": pd.array(BOOLS, dtype="str"),
            "when": pd.array(STAMPS, dtype="str"),
            "mixed": pd.Series([1, "a", 2.5, True, None, 1, "a", 7, 8, 9, 10, 11], dtype=object),
        }
    )


DECLARED = {"num": "numeric", "flag": "bool", "when": "temporal"}


def plan_for(keys: tuple[str, ...], **kw: Any) -> BoundedPlan:
    base: dict[str, Any] = dict(
        steps=(Step("filter", expr=col("when").is_not_null() | col("num").is_null()),),
        unit="u",
        keys=keys,
        key_set=None,
        max_rows=5,
        max_groups=None,
        max_rows_per_group=None,
        salt=5,
        values=(ValueSpec("num", -10.0, 5000.0, -2),),
        outputs=(Output("rows"), Output("nonnull", 0), Output("sum", 0)),
    )
    base.update(kw)
    return BoundedPlan(**base)


def test_declared_text_columns_convert_alike(make: Make) -> None:
    df = texts()
    engine = make(df, DECLARED)
    assert engine.schema() == {
        "u": "numeric",
        "num": "numeric",
        "flag": "bool",
        "when": "temporal",
        "mixed": "string",
    }
    reference = PandasEngine(df, schema=DECLARED)
    for keys in [("flag",), ("mixed",), ()]:
        plan = plan_for(keys)
        assert result_dict(engine.run(plan), plan) == result_dict(reference.run(plan), plan)
    got = result_dict(reference.run(plan_for(("flag",))), plan_for(("flag",)))
    # true: true, T, yes, y, 1; false: 0, no, FALSE; NULL: maybe, None, on, " true" (filtered
    # rows aside) — the filter keeps rows whose timestamp parsed or whose number is NULL
    assert set(got) == {(True,), (False,), (None,)}


def test_csv_columns_are_text_until_declared(make: Make, tmp_path: Path) -> None:
    df = texts()
    path = tmp_path / "texts.csv"
    df.to_csv(path, index=False)
    undeclared = make(str(path))
    assert set(undeclared.schema().values()) == {"string"}
    engine = make(str(path), {**DECLARED, "u": "numeric"})
    reference = PandasEngine(df, schema=DECLARED)
    for keys in [("flag",), ()]:
        plan = plan_for(keys)
        expected = result_dict(reference.run(plan), plan)
        assert result_dict(engine.run(plan), plan) == expected


def test_object_columns_are_text(make: Make) -> None:
    df = pd.DataFrame(
        {
            "u": range(8),
            "k": pd.Series(
                [1, "1", 1.0, True, None, dt.date(2024, 1, 1), 2**70, -0.0], dtype=object
            ),
        }
    )
    engine = make(df)
    assert engine.schema()["k"] == "string"
    plan = plan_for(("k",), steps=(), values=(), outputs=(Output("rows"),))
    got = result_dict(engine.run(plan), plan)
    assert got == result_dict(PandasEngine(df).run(plan), plan)
    assert got == {
        ("1",): [2],
        ("1.0",): [1],
        ("true",): [1],
        (None,): [1],
        ("2024-01-01",): [1],
        (str(2**70),): [1],
        ("-0.0",): [1],
    }


def test_signed_zero_and_separator_keys(make: Make) -> None:
    sep = "\x1f"
    df = pd.DataFrame(
        {
            "u": [1, 1, 1, 1, 2, 3],
            "x": [-0.0, 0.0, -0.0, 0.0, 0.0, -0.0],
            "a": ["x" + sep + "vy", "x", "x\x1eu", "x" + sep, "x", "x"],
            "b": ["z", "y" + sep + "vz", "z", "z", "z", "z"],
        }
    )
    for keys, bounds in [
        (("x",), {"max_groups": 1, "max_rows_per_group": 1}),
        (("a", "b"), {"max_groups": 1, "max_rows_per_group": 2}),
    ]:
        plan = plan_for(
            keys,
            steps=(),
            values=(),
            outputs=(Output("rows"), Output("units")),
            max_rows=None,
            **bounds,
        )
        got = result_dict(make(df).run(plan), plan)
        assert got == result_dict(PandasEngine(df).run(plan), plan)
        # units 2 and 3 add one row each; unit 1 keeps one group and at most 1 (resp. 2) rows
        assert sum(v[1] for v in got.values()) == 3, got
    plan = plan_for(("x",), steps=(), values=(), outputs=(Output("rows"),), max_rows=10)
    assert set(result_dict(make(df).run(plan), plan)) == {(0.0,)}


def test_temporal_public_keys(engine_name: str, request: Any) -> None:
    spark = request.getfixturevalue("spark") if engine_name == "spark" else None
    df = pd.DataFrame(
        {"u": range(60), "day": pd.to_datetime(["2024-01-01"] * 30 + ["2024-01-02"] * 30)}
    )
    session = Session(df, "u", dp.PureDP(100), engine=engine_name, spark=spark, max_rows=1)
    keys = KeySet.from_values("day", ["2024-01-01", dt.date(2024, 1, 2), dt.datetime(2024, 1, 3)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomnessWarning)
        with insecure_deterministic_seed(3):
            release = session.evaluate(
                session.query().group_by("day", keys=keys).agg(count()), epsilon=50
            )
    counts = release.table["count"].tolist()
    assert abs(counts[0] - 30) <= 2 and abs(counts[1] - 30) <= 2 and abs(counts[2]) <= 2
    session.close()


def test_times_of_day_and_durations_are_refused_as_keys_on_every_engine(
    engine_name: str, request: Any
) -> None:
    """An Arrow time or duration column was "temporal": DuckDB grouped it, pandas merged every
    value into one NULL group (a wrong answer). It is not a point in time: refused, before any
    reservation, alike on every engine."""
    import pyarrow as pa

    spark = request.getfixturevalue("spark") if engine_name == "spark" else None
    for values in (
        [dt.time(1, 0), dt.time(2, 0)],
        [dt.timedelta(seconds=1), dt.timedelta(seconds=2)],
    ):
        table = pa.table({"u": list(range(8)), "k": pa.array(values * 4)})
        ledger = dp.Ledger.open(":memory:")
        ledger.create_budget("t", dp.ApproxDP(10, 1e-3), privacy_unit="u")
        session = Session(
            table, "u", engine=engine_name, spark=spark, ledger=ledger, dataset="t", max_rows=1
        )
        with pytest.raises(dp.UnsupportedQueryError, match="group_by column 'k'"):
            session.evaluate(session.query().group_by("k").agg(count()), epsilon=1, delta=1e-6)
        assert ledger.spent("t") == dp.ApproxDP(0, 0)
        session.close()


def test_nan_keys_are_null(make: Make) -> None:
    df = pd.DataFrame({"u": [1, 2, 3, 4], "x": [np.nan, None, 1.5, np.nan]})
    plan = plan_for(("x",), steps=(), values=(), outputs=(Output("rows"),), max_rows=10)
    got = result_dict(make(df).run(plan), plan)
    assert got == {(None,): [3], (1.5,): [1]}


# text -> the naive UTC timestamp it denotes (None: NULL) by the one rule of every engine
# (engines._columns.TEMPORAL_PATTERN, documented in docs/analytics.md)
TEMPORAL_TEXTS: list[tuple[str | None, dt.datetime | None]] = [
    ("2024-01-01", dt.datetime(2024, 1, 1)),
    ("2024-01-01T10:20", dt.datetime(2024, 1, 1, 10, 20)),
    ("2024-01-01 10:20:30", dt.datetime(2024, 1, 1, 10, 20, 30)),
    ("2024-01-01T10:20:30Z", dt.datetime(2024, 1, 1, 10, 20, 30)),
    ("2024-01-01T10:20Z", dt.datetime(2024, 1, 1, 10, 20)),
    ("2024-01-01T10:20:30+05:30", dt.datetime(2024, 1, 1, 4, 50, 30)),
    ("2024-01-01 10:20:30-02:00", dt.datetime(2024, 1, 1, 12, 20, 30)),
    ("2024-01-01 00:00:00+02:00", dt.datetime(2023, 12, 31, 22)),
    ("2024-01-01T00:30+01:00", dt.datetime(2023, 12, 31, 23, 30)),
    ("2024-01-01T10:20:30.1", dt.datetime(2024, 1, 1, 10, 20, 30, 100000)),
    ("2024-01-01T10:20:31.12", dt.datetime(2024, 1, 1, 10, 20, 31, 120000)),
    ("2024-01-01T10:20:32.123", dt.datetime(2024, 1, 1, 10, 20, 32, 123000)),
    ("2024-01-01T10:20:33.1234", dt.datetime(2024, 1, 1, 10, 20, 33, 123400)),
    ("2024-01-01T10:20:34.12345", dt.datetime(2024, 1, 1, 10, 20, 34, 123450)),
    ("2024-01-01T10:20:35.123456Z", dt.datetime(2024, 1, 1, 10, 20, 35, 123456)),
    ("2024-01-01T10:20:36.000001-23:59", dt.datetime(2024, 1, 2, 10, 19, 36, 1)),
    ("2024-02-29", dt.datetime(2024, 2, 29)),
    ("2000-02-29 12:00", dt.datetime(2000, 2, 29, 12)),
    ("0001-01-01", dt.datetime(1, 1, 1)),
    ("9999-12-31T23:59:59.999999", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    (" 2024-01-05 ", dt.datetime(2024, 1, 5)),
    ("\t2024-01-06T01:02\n", dt.datetime(2024, 1, 6, 1, 2)),  # (strict CSV: no \r in a field)
    ("\x0c2024-01-07\x0b", dt.datetime(2024, 1, 7)),
    # NULL: not this form, not a calendar date, not a time, or beyond years 1-9999 in UTC
    ("2024-3-5", None),
    ("20240105", None),
    ("2024-01-01T00", None),
    ("2024-01-01T10:20:30.1234567", None),
    ("2024-01-01T10:20:30.", None),
    ("2024-01-01T10:20.5", None),
    ("2024-01-01T10:20:30,5", None),
    ("2023-02-29", None),
    ("1900-02-29", None),
    ("2024-04-31", None),
    ("2024-13-01", None),
    ("2024-00-10", None),
    ("0000-01-01", None),
    ("0001-01-01T00:30+01:00", None),
    ("9999-12-31T23:00-02:00", None),
    ("2024-12-31 23:59:60", None),
    ("2024-01-01T24:00", None),
    ("2024-01-01T10:00+24:00", None),
    ("2024-01-01T10:00+0200", None),
    ("2024-01-01Z", None),
    ("2024-01-01t10:00", None),
    ("2024-01-01T10:00z", None),
    ("2024-01-01  10:00", None),
    ("\u00a02024-01-01", None),  # a no-break space is not ASCII whitespace
    ("２０２４-01-01", None),  # fullwidth digits
    ("2024-01-0\u0661", None),  # an Arabic-Indic digit
    ("2024-W01-1", None),
    ("2024-001", None),
    ("NaT", None),
    ("", None),
    ("  ", None),
    (None, None),
]


def test_temporal_texts_convert_by_one_rule(
    engine_name: str, make: Make, tmp_path: Path, request: Any
) -> None:
    """A text column declared temporal gives the same naive UTC values on every engine and
    from every source (CSV file, pandas, Arrow), equal to the documented rule: before, DuckDB
    read '2024-3-5' and year 0000 and kept the local time of '+02:00', and rejected ISO forms
    pandas read (issue 21). Spark runs all its cases here (one function, one session)."""
    import pyarrow as pa

    texts = [text for text, _ in TEMPORAL_TEXTS]
    expected = {u: when for u, (_, when) in enumerate(TEMPORAL_TEXTS)}
    df = pd.DataFrame({"u": range(len(texts)), "when": pd.Series(texts, dtype=object)})
    path = tmp_path / "when.csv"
    df.to_csv(path, index=False)
    sources: list[tuple[str, Any]] = [
        ("csv", str(path)),
        ("object", df),
        ("str", df.astype({"when": "str"})),
        ("arrow", pa.Table.from_pandas(df, preserve_index=False)),
    ]
    if engine_name == "spark":  # a Spark DataFrame converts in Spark SQL
        spark = request.getfixturevalue("spark")
        sources.append(("spark", spark.createDataFrame(df)))
    plan = plan_for(("u", "when"), steps=(), values=(), outputs=(Output("rows"),), max_rows=1)
    for name, source in sources:
        declared = {"u": "numeric", "when": "temporal"} if name == "csv" else {"when": "temporal"}
        engine = make(source, declared)
        assert engine.schema()["when"] == "temporal"
        got = {int(u): canonical(when) for (u, when) in result_dict(engine.run(plan), plan)}
        wrong = {u: (texts[u], got.get(u), w) for u, w in expected.items() if got.get(u) != w}
        assert not wrong, (name, wrong)
        assert len(got) == len(expected)
