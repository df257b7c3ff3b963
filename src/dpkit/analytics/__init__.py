"""dpkit.analytics: differentially private analytics over tables.

    >>> import pandas as pd
    >>> import dpkit as dp
    >>> from dpkit.analytics import Session, col, count, mean
    >>> df = pd.DataFrame({"user": [1, 2, 3, 4], "dept": ["a", "a", "b", "b"],
    ...                    "salary": [10.0, 20.0, 30.0, 40.0]})
    >>> session = Session(df, privacy_unit="user", budget=dp.PureDP(1), max_rows=1)
    >>> query = (session.query().filter(col("salary") > 0)
    ...          .group_by("dept", keys=["a", "b"]).agg(count(), mean("salary", (0, 50))))
    >>> release = session.evaluate(query, epsilon=0.5)
    >>> release.table["dept"].tolist()
    ['a', 'b']

See docs/analytics.md for the tutorial.
"""

from typing import Any

from dpkit._extras import require

require("analytics", by="dpkit.analytics")

from dpkit.analytics._engines import DuckDBEngine, Engine, PandasEngine
from dpkit.analytics._engines._csv import check_csv
from dpkit.analytics._expr import Expr, col, lit, when
from dpkit.analytics._planner import CompiledQuery
from dpkit.analytics._query import (
    Bounding,
    KeySet,
    Query,
    count,
    count_distinct_units,
    histogram,
    marginals,
    mean,
    median,
    quantile,
    ranges,
    std,
    sum,
    variance,
    workload,
)
from dpkit.analytics._results import Accuracy, TableRelease
from dpkit.analytics._session import BoundsEstimate, Session
from dpkit.analytics._tuning import Tuning, TuningReport

__all__ = [
    "Accuracy",
    "Bounding",
    "BoundsEstimate",
    "CompiledQuery",
    "DuckDBEngine",
    "Engine",
    "Expr",
    "KeySet",
    "PandasEngine",
    "Query",
    "Session",
    "TableRelease",
    "Tuning",
    "TuningReport",
    "check_csv",
    "col",
    "count",
    "count_distinct_units",
    "histogram",
    "lit",
    "marginals",
    "mean",
    "median",
    "quantile",
    "ranges",
    "std",
    "sum",
    "variance",
    "when",
    "workload",
]


def __getattr__(name: str) -> Any:
    """The builder of a registered aggregate family that is not listed above (e.g. ``mode``):
    a family written as one module (docs/design.md, "The family registry") is reachable as
    ``dpkit.analytics.<builder>`` without editing this file."""
    from dpkit.analytics._families import forms

    for form in forms():
        if form.name == name:
            return form.builder
    raise AttributeError(f"module 'dpkit.analytics' has no attribute {name!r}")
