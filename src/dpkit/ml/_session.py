"""Fitting dpkit.ml models on a :class:`dpkit.analytics.Session`'s columns.

The sufficient statistics of a linear regression are sums: Σ z_i z_j, Σ z_j y, Σ y² and the row
count, with z_j = (x_j - mid_j)/half_j and y scaled the same way from the declared bounds. They
are computed by **one** Session query (one engine pass on DuckDB, Spark, pandas, ...), through
the Session's public API: derived columns for the products, then bounded sums. The Session does
everything a query does — per-unit contribution bounding, clamping every product into [-1, 1],
reserving the loss in its ledger before the engine reads data, exact noise — so the privacy
guarantee is the Session's guarantee for that query, under its privacy unit. The ridge, the solve
and the intervals are post-processing (:class:`dpkit.ml.LinearRegression`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpkit.errors import InvalidParameterError
from dpkit.ml._common import check_box
from dpkit.ml._linear import LinearRegression

__all__ = ["fit_linear_regression"]

_Z = 1.959963984540054  # interval half-width / σ at α = 0.05 (used only to size the ridge)


def fit_linear_regression(
    session: Any,
    features: Sequence[str],
    target: str,
    *,
    bounds_X: Any,
    bounds_y: Any,
    epsilon: Any = None,
    rho: Any = None,
    method: str = "adassp",
    confidence: float = 0.95,
) -> LinearRegression:
    """Fit :class:`~dpkit.ml.LinearRegression` (with intercept) on a Session's columns.

    Returns a fitted estimator whose ``privacy_loss_`` is the loss the Session charged. Columns,
    bounds and budget are validated (by this function and by the Session's compiler) before
    anything is charged or read.
    """
    from dpkit.analytics import Session, col, count
    from dpkit.analytics import sum as dp_sum

    if not isinstance(session, Session):
        raise InvalidParameterError("session", session, "a dpkit.analytics.Session")
    names = list(features)
    if not names or not all(isinstance(n, str) for n in names) or not isinstance(target, str):
        raise InvalidParameterError("features", features, "a non-empty list of column names")
    model = LinearRegression(
        epsilon=epsilon,
        rho=rho,
        bounds_X=bounds_X,
        bounds_y=bounds_y,
        method=method,
        confidence=confidence,
    )
    _, box_x, box_y = model._validate(len(names))
    box_x = check_box(bounds_X, "bounds_X", d=len(names)) if box_x.d == 1 else box_x
    if box_x.d != len(names):
        raise InvalidParameterError("bounds_X", bounds_X, f"one bound per feature ({len(names)})")
    d = len(names)
    p = d + 1
    query = session.query()
    z = [f"__z{j}" for j in range(d)]
    for j, name in enumerate(names):
        query = query.with_column(
            z[j], (col(name) - float(box_x.mid[j])) * (1.0 / float(box_x.half[j]))
        )
    query = query.with_column(
        "__y", (col(target) - float(box_y.mid[0])) * (1.0 / float(box_y.half[0]))
    )
    aggs: list[Any] = []
    for i in range(d):
        for j in range(i, d):
            product = f"__a{i}_{j}"
            query = query.with_column(product, col(z[i]) * col(z[j]))
            aggs.append(dp_sum(product, (0 if i == j else -1, 1), name=product))
        aggs.append(dp_sum(z[i], (-1, 1), name=f"__a{i}_{d}"))
        query = query.with_column(f"__b{i}", col(z[i]) * col("__y"))
        aggs.append(dp_sum(f"__b{i}", (-1, 1), name=f"__b{i}"))
    query = query.with_column("__yy", col("__y") * col("__y"))
    aggs += [
        dp_sum("__y", (-1, 1), name=f"__b{d}"),
        dp_sum("__yy", (0, 1), name="__c"),
        count(name=f"__a{d}_{d}"),
    ]
    budget = {"epsilon": epsilon} if epsilon is not None else {"rho": rho}
    release = session.evaluate(query.agg(*aggs), **budget)
    row = release.table.iloc[0]
    a_noisy = np.zeros((p, p))
    sig_a = []
    for i in range(p):
        for j in range(i, p):
            key = f"__a{i}_{j}"
            a_noisy[i, j] = a_noisy[j, i] = float(row[key])
            sig_a.append(release.accuracy[key].halfwidth / _Z)
    b_noisy = np.array([float(row[f"__b{i}"]) for i in range(p)])
    sig_b = max(release.accuracy[f"__b{i}"].halfwidth / _Z for i in range(p))
    c_noisy = float(row["__c"])
    model._finish(a_noisy, b_noisy, c_noisy, max(sig_a), sig_b, 0.0, box_x, box_y, intercept=True)
    model.privacy_loss_ = release.loss
    return model
