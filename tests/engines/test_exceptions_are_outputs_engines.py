"""Exceptions are outputs, the cases that need the Spark engine (found in review 8; see
tests/regression/test_exceptions_are_outputs.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd

import dpkit as dp
from dpkit.analytics import count
from dpkit.testing import check_session_failures


def test_spark_lone_surrogate_strings_fail_alike(spark: Any) -> None:
    n = 50

    def table(extra: list[str]) -> pd.DataFrame:
        keys = ["a"] * n + extra
        return pd.DataFrame({"u": range(len(keys)), "k": pd.Series(keys, dtype=object)})

    result = check_session_failures(
        [(table([]), table(["\ud800"]))],
        lambda s: s.query().agg(count()),
        privacy_unit="u",
        budget=dp.PureDP(10),
        session_options={"max_rows": 1, "engine": "spark", "spark": spark},
        epsilon=1,
    )
    result.raise_if_failed()
