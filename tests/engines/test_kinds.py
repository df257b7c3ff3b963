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
from _engine_oracle import result_dict

import dpkit as dp
from dpkit.analytics import Session, col, count
from dpkit.analytics.engines import BoundedPlan, Engine, Output, PandasEngine, Step, ValueSpec
from dpkit.analytics.query import KeySet
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


def test_nan_keys_are_null(make: Make) -> None:
    df = pd.DataFrame({"u": [1, 2, 3, 4], "x": [np.nan, None, 1.5, np.nan]})
    plan = plan_for(("x",), steps=(), values=(), outputs=(Output("rows"),), max_rows=10)
    got = result_dict(make(df).run(plan), plan)
    assert got == {(None,): [3], (1.5,): [1]}
