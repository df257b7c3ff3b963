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

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._door import Stage, release
from dpkit.core._losses import PrivacyLoss, compose
from dpkit.errors import InvalidParameterError
from dpkit.ml._common import check_box
from dpkit.ml._kmeans import (
    MAX_FEATURES,
    KMeans,
    _grid_geometry,
    _lattice,
    _public_spread,
    coreset_centres,
    grid_em_select,
    lloyd_update,
    lsh_hash,
)
from dpkit.ml._linear import LinearRegression

__all__ = ["fit_kmeans", "fit_linear_regression"]

_PREFIX = "__ml_"
"""Prefix of the derived columns the fits add (feature names may not start with it)."""
_Z = 1.959963984540054  # interval half-width / σ at α = 0.05 (used only to size the ridge)


def _check_numeric(session: Any, names: Sequence[str], parameter: str, given: Any) -> None:
    """Every column a fit reads is one of the table's and numeric (the schema is public):
    refused here, before anything is reserved, with the column's kind in the message."""
    schema = session.schema
    for name in names:
        kind = schema.get(name)
        if kind is None:
            raise InvalidParameterError(
                parameter,
                given,
                f"of the table's columns ({', '.join(map(repr, list(schema)[:20]))}); "
                f"{name!r} is not one",
            )
        if kind != "numeric":
            raise InvalidParameterError(
                parameter,
                given,
                f"numeric ({name!r} is a {kind} column)",
                "Fits read numbers: derive a numeric column first (e.g. a 0/1 indicator).",
            )


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

    ``bounds_X``: one pair per feature ``[(lo, hi), ...]`` (in the order of ``features``), one
    pair ``(lo, hi)`` for every feature, or ``{"lower": [...], "upper": [...]}``.

    Returns a fitted estimator whose ``privacy_loss_`` is the loss the Session charged. Columns,
    bounds and budget are validated (by this function and by the Session's compiler) before
    anything is charged or read; after the release the post-processing never raises.
    """
    from dpkit.analytics import Session, col, count
    from dpkit.analytics import sum as dp_sum

    if not isinstance(session, Session):
        raise InvalidParameterError("session", session, "a dpkit.analytics.Session")
    if isinstance(features, str):
        features = [features]
    names = list(features) if isinstance(features, Sequence) else []
    if not names or not all(isinstance(n, str) and n for n in names):
        raise InvalidParameterError("features", features, "a non-empty list of column names")
    if len(set(names)) != len(names) or any(n.startswith(_PREFIX) for n in names):
        raise InvalidParameterError(
            "features", features, f"distinct column names not starting with {_PREFIX!r}"
        )
    if not isinstance(target, str) or not target or target.startswith(_PREFIX):
        raise InvalidParameterError(
            "target", target, f"a column name (not starting with {_PREFIX!r})"
        )
    model = LinearRegression(
        epsilon=epsilon,
        rho=rho,
        bounds_X=bounds_X,
        bounds_y=bounds_y,
        method=method,
        confidence=confidence,
    )
    _, box_x, box_y = model._validate(len(names))
    _check_numeric(session, names, "features", features)
    _check_numeric(session, [target], "target", target)
    d = len(names)
    p = d + 1
    query = session.query()
    z = [f"{_PREFIX}z{j}" for j in range(d)]
    yz = f"{_PREFIX}y"
    for j, name in enumerate(names):
        query = query.with_column(
            z[j], (col(name) - float(box_x.mid[j])) * (1.0 / float(box_x.half[j]))
        )
    query = query.with_column(
        yz, (col(target) - float(box_y.mid[0])) * (1.0 / float(box_y.half[0]))
    )
    aggs: list[Any] = []
    for i in range(d):
        for j in range(i, d):
            product = f"{_PREFIX}a{i}_{j}"
            query = query.with_column(product, col(z[i]) * col(z[j]))
            aggs.append(dp_sum(product, (0 if i == j else -1, 1), name=product))
        aggs.append(dp_sum(z[i], (-1, 1), name=f"{_PREFIX}a{i}_{d}"))
        query = query.with_column(f"{_PREFIX}b{i}", col(z[i]) * col(yz))
        aggs.append(dp_sum(f"{_PREFIX}b{i}", (-1, 1), name=f"{_PREFIX}b{i}"))
    query = query.with_column(f"{_PREFIX}yy", col(yz) * col(yz))
    aggs += [
        dp_sum(yz, (-1, 1), name=f"{_PREFIX}b{d}"),
        dp_sum(f"{_PREFIX}yy", (0, 1), name=f"{_PREFIX}c"),
        count(name=f"{_PREFIX}a{d}_{d}"),
    ]
    budget = {"epsilon": epsilon} if epsilon is not None else {"rho": rho}
    release = session.evaluate(query.agg(*aggs), **budget)
    # ---- released and charged: post-processing only from here, which never raises
    row = release.table.iloc[0]
    a_noisy = np.zeros((p, p))
    sig_a = []
    for i in range(p):
        for j in range(i, p):
            key = f"{_PREFIX}a{i}_{j}"
            a_noisy[i, j] = a_noisy[j, i] = float(row[key])
            sig_a.append(release.accuracy[key].halfwidth / _Z)
    b_noisy = np.array([float(row[f"{_PREFIX}b{i}"]) for i in range(p)])
    sig_b = max(release.accuracy[f"{_PREFIX}b{i}"].halfwidth / _Z for i in range(p))
    c_noisy = float(row[f"{_PREFIX}c"])
    model._finish(a_noisy, b_noisy, c_noisy, max(sig_a), sig_b, 0.0, box_x, box_y, intercept=True)
    model.privacy_loss_ = release.loss
    return model


# ============================================================================= k-means
_SESSION_WORK = 1 << 15
"""A Lloyd query on a Session computes k·(k - 1) comparisons and k·d products per row in one
SQL expression: k·(k + d) is at most this (k = 128 at d = 2 took 35 s per step on DuckDB)."""


def _session_clusters(d: int) -> int:
    """The largest k with k·(k + d) <= :data:`_SESSION_WORK`."""
    k = int((math.sqrt(d * d + 4 * _SESSION_WORK) - d) / 2)
    while k * (k + d) > _SESSION_WORK:
        k -= 1
    while (k + 1) * (k + 1 + d) <= _SESSION_WORK:
        k += 1
    return max(k, 1)


_STAGES = {
    "compiling": "building a later query (from public inputs and released centres)",
    "releasing": "adding the noise to the engine's results",
    "selecting": "selecting the centres from the engine's exact histogram",
}


_TERMS = 64
"""Terms per derived column (sums of more terms are split into partial sums, each a derived
column). The SQL engines turn NaN into NULL with a CASE that repeats its operand, once per
chain of + - * (:mod:`dpkit.analytics._engines._sql`), so a sum's expression is linear in its
number of terms; a distance to a centre in d <= 63 dimensions is one derived column."""

# Every helper below adds its columns in *stages*: all the columns of one stage read only
# earlier stages, and they are added one after another, so the SQL engines compute a whole stage
# in one SELECT (dpkit.analytics._engines._sql merges consecutive derived columns that do not read
# one another). A Lloyd query is then about ten subquery levels deep whatever k and d (one level
# per derived column, as before, was hundreds of levels at d = 50, k = 20).


def _balanced(terms: Sequence[Any]) -> Any:
    """Σ terms as a balanced tree (depth ⌈log2 len⌉)."""
    items = list(terms)
    while len(items) > 1:
        items = [
            items[i] + items[i + 1] if i + 1 < len(items) else items[i]
            for i in range(0, len(items), 2)
        ]
    return items[0]


def _with_sums(query: Any, sums: dict[str, Sequence[Any]]) -> Any:
    """Add each column ``name`` = Σ terms of ``sums``, through derived columns of at most
    :data:`_TERMS` terms, stage by stage for all the sums at once."""
    from dpkit.analytics import col

    pending = {name: list(terms) for name, terms in sums.items()}
    level = 0
    while any(len(items) > _TERMS for items in pending.values()):
        for name, items in pending.items():
            if len(items) <= _TERMS:
                continue
            parts = []
            for i in range(0, len(items), _TERMS):
                part = f"{name}_{level}_{i // _TERMS}"
                query = query.with_column(part, _balanced(items[i : i + _TERMS]))
                parts.append(col(part))
            pending[name] = parts
        level += 1
    for name, items in pending.items():
        query = query.with_column(name, _balanced(items))
    return query


def _linear_terms(z: Sequence[str], weights: np.ndarray, constant: float) -> list[Any]:
    """The terms of constant + Σ_t weights_t · z_t."""
    from dpkit.analytics import col, lit

    terms: list[Any] = [lit(float(constant))]
    terms += [col(n) * float(w) for n, w in zip(z, weights, strict=True) if w != 0]
    return terms


def _with_clamps(query: Any, clamps: dict[str, tuple[Any, float, float]]) -> Any:
    """Add each column ``name`` = clamp(value, lower, upper) of ``clamps`` (values are non-NULL
    numbers, ±inf included).

    Each value is first a derived column of its own (one stage for all); inf·0 is NaN, which
    every engine reads as NULL, so the in-range term is ``coalesce(v·[lower <= v <= upper], 0)``
    and the out-of-range terms are constants times indicators (the second stage)."""
    from dpkit.analytics import col

    for name, (value, _, _) in clamps.items():
        query = query.with_column(f"{name}_raw", value)
    for name, (_, lower, upper) in clamps.items():
        v = col(f"{name}_raw")
        inside = (v * v.between(lower, upper).as_number()).fill_null(0.0)
        outside = (v < lower).as_number() * lower + (v > upper).as_number() * upper
        query = query.with_column(name, inside + outside)
    return query


def _row_map(query: Any, names: Sequence[str], box: Any) -> tuple[Any, list[str]]:
    """The public row map of :mod:`dpkit.ml._common` as derived columns: NULL/NaN → midpoint,
    clamp to the declared box (±inf included), scale to [-1, 1]: z_j = (x_j - mid_j)/half_j."""
    from dpkit.analytics import col

    z = [f"{_PREFIX}z{j}" for j in range(len(names))]
    clamps = {
        f"{_PREFIX}x{j}": (
            col(name).fill_null(float(box.mid[j])),
            float(box.lower[j]),
            float(box.upper[j]),
        )
        for j, name in enumerate(names)
    }
    query = _with_clamps(query, clamps)
    for j in range(len(names)):
        mid, half = float(box.mid[j]), float(box.half[j])
        query = query.with_column(z[j], (col(f"{_PREFIX}x{j}") - mid) * (1.0 / half))
    return query, z


def _assignment(query: Any, z: Sequence[str], centres: np.ndarray, label: str) -> Any:
    """Add column ``label``: the index of the nearest centre, computed by the engine.

    D_j = ||c_j||² - 2 z·c_j (the squared distance minus ||z||², the same for every j) is a
    derived column per centre; W_j = [D_j < D_i for i < j and D_j <= D_i for i > j] (as 0/1) is
    a derived column per centre j >= 1, and the label is Σ_j j·W_j, the first index of the
    minimum. The comparisons read the materialised D_j, so exactly one indicator (counting
    j = 0's, which is not materialised) is 1 on every row: the label is always one of 0..k-1.
    """
    from dpkit.analytics import col, lit

    k = centres.shape[0]
    if k == 1:
        return query.with_column(label, lit(0.0))
    dist = [f"{_PREFIX}d{j}" for j in range(k)]
    query = _with_sums(
        query,
        {
            dist[j]: _linear_terms(z, -2.0 * centres[j], float(centres[j] @ centres[j]))
            for j in range(k)
        },
    )
    wins = [f"{_PREFIX}win{j}" for j in range(k)]
    for j in range(1, k):  # j = 0 contributes 0·[...]
        won: Any = None
        for i in range(k):
            if i == j:
                continue
            beats = col(dist[j]) < col(dist[i]) if i < j else col(dist[j]) <= col(dist[i])
            won = beats if won is None else won & beats
        query = query.with_column(wins[j], won.as_number())
    return _with_sums(query, {label: [col(wins[j]) * float(j) for j in range(1, k)]})


def _cell_label(
    query: Any,
    z: Sequence[str],
    projection: np.ndarray,
    radius: float,
    shift: np.ndarray,
    g: int,
    label: str,
) -> Any:
    """Add column ``label``: the LSH-grid cell of each row (the hash of
    :func:`dpkit.ml._kmeans._coreset_release`, computed by the engine): cell_a =
    floor((clip(z·P_a, ±r) + r)/(2r)·(G-1) + shift_a) clipped to [0, G-1], label = the C-order
    index of (cell_1, ..., cell_p)."""
    from dpkit.analytics import col

    p = projection.shape[1]
    w = [f"{_PREFIX}w{a}" for a in range(p)]
    query = _with_sums(query, {w[a]: _linear_terms(z, projection[:, a], 0.0) for a in range(p)})
    query = _with_clamps(query, {f"{w[a]}c": (col(w[a]), -radius, radius) for a in range(p)})
    cells = {}
    for a in range(p):
        scaled = (col(f"{w[a]}c") + radius) * ((g - 1) / (2 * radius)) + float(shift[a])
        cells[f"{_PREFIX}c{a}"] = (scaled.floor(), 0.0, g - 1.0)
    query = _with_clamps(query, cells)
    terms = [col(f"{_PREFIX}c{a}") * float(g ** (p - 1 - a)) for a in range(p)]
    return _with_sums(query, {label: terms})


def _lattice_label(query: Any, z: Sequence[str], g: int, label: str) -> Any:
    """Add column ``label``: the C-order index of the lattice cell of :func:`_grid_em` (cell_t =
    floor((z_t + 1)/2·G) clipped to [0, G-1]), as Σ_t cell_t·G^(d-1-t) (exact: G^d <= 8192)."""
    from dpkit.analytics import col

    d = len(z)
    cells = {
        f"{_PREFIX}g{t}": (((col(z[t]) + 1.0) * (g / 2.0)).floor(), 0.0, g - 1.0) for t in range(d)
    }
    query = _with_clamps(query, cells)
    terms = [col(f"{_PREFIX}g{t}") * float(g ** (d - 1 - t)) for t in range(d)]
    return _with_sums(query, {label: terms})


def _counts_and_sums(
    query: Any,
    z: Sequence[str],
    label: str,
    keys: int,
    count_weight: Fraction,
    sum_weight: Fraction,
) -> Any:
    """One grouped aggregate over public keys 0..keys-1: a count and the clamped sum of every
    z_t (bounds [-1, 1]) per key — one engine pass."""
    from dpkit.analytics import count
    from dpkit.analytics import sum as dp_sum

    aggs: list[Any] = [count(name=f"{_PREFIX}n", weight=count_weight)]
    aggs += [
        dp_sum(name, (-1, 1), name=f"{_PREFIX}s{t}", weight=sum_weight) for t, name in enumerate(z)
    ]
    return query.group_by(label, keys=list(range(keys))).agg(*aggs)


def _released(
    tables: Any, accuracy: Any, label: str, keys: int, d: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """(noisy counts, noisy sums (keys × d), count noise level) from a released table, in key
    order (public keys: every key has a row)."""
    table = tables["main"].set_index(label).reindex(range(keys))
    counts = table[f"{_PREFIX}n"].to_numpy(dtype=np.float64)
    sums = np.stack([table[f"{_PREFIX}s{t}"].to_numpy(dtype=np.float64) for t in range(d)], axis=1)
    level = float(accuracy[f"{_PREFIX}n"].expected_abs)
    return counts, sums, level


def fit_kmeans(
    session: Any,
    features: Sequence[str],
    n_clusters: int,
    *,
    bounds: Any,
    epsilon: Any = None,
    rho: Any = None,
    delta: Any = None,
    method: str = "lloyd",
    max_iter: int | None = None,
    coreset_share: float = 0.4,
    grid_size: int | None = None,
    n_candidates: int = 2048,
    em_radius: float = 0.1,
    max_rows: int | None = None,
) -> KMeans:
    """Fit :class:`~dpkit.ml.KMeans` privately on a Session's columns, inside the engine.

    Every read of the data is an aggregate query the Session's engine runs (DuckDB, Spark,
    pandas, ...); no row reaches Python:

    * ``"lloyd"`` (DPLloyd): ``max_iter`` (default 5) grouped queries. In each, the nearest
      current centre of every row is a derived column computed by the engine
      (:func:`_assignment`), and the query releases per cluster a noisy count and the noisy
      clamped sum of every scaled feature (public keys 0..k-1: a partition, one group per row).
      The first centres are public (a data-independent spread).
    * ``"lsh"``: one grouped query over the public LSH-grid cells (a noisy count and sums per
      cell, the private coreset), post-processed into k centres, then ``max_iter`` (default 1)
      Lloyd queries as above.
    * ``"grid_em"``: one engine pass computes the exact histogram of the rows over the public
      candidate lattice; the k exponential-mechanism selections use it with sensitivity
      (rows one unit may contribute) × cap.

    Privacy: each query is one of the Session's own (per-unit contribution bounding by
    ``max_rows`` or the session's defaults, clamping, exact noise), so under the Session's
    privacy unit the fit is ε-DP (ρ-zCDP; (ε, δ)-DP with ``delta``, run as the largest ρ-zCDP
    that converts within (ε, δ)) by sequential composition of the queries (each gets
    ε/steps, split between the count and the sums by public weights), and the public row map
    (NULL/NaN → midpoint, clamp to ``bounds``, scale to [-1, 1]) is applied by the engine row by
    row. The **whole** loss is reserved in the Session's ledger, once, before the first query
    reads data; every parameter, column and bound is checked before that (by compiling the
    first query). Whatever the data, the fit then releases (an empty cluster keeps its centre).

    ``bounds`` takes the forms of :class:`~dpkit.ml.KMeans` (per-feature pairs in the order of
    ``features``). On a Session, k·(k + d) is at most 2^15 for "lloyd" and "lsh" (the
    nearest-centre assignment is one query of k(k - 1) comparisons per row). A failure after
    the reservation is reported as an engine read failure or as dpkit's internal error, never
    as a problem with the data, and recorded as failed in the ledger.

    Returns a fitted :class:`~dpkit.ml.KMeans` (``cluster_centers_`` in original units,
    ``privacy_loss_`` the loss charged, ``receipt_`` the ledger receipt).
    """
    from dpkit.analytics import Session
    from dpkit.analytics._bounding import contribution
    from dpkit.analytics._engines._base import Output
    from dpkit.analytics._query import Bounding

    if not isinstance(session, Session):
        raise InvalidParameterError("session", session, "a dpkit.analytics.Session")
    if isinstance(features, str):
        features = [features]
    names = list(features)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise InvalidParameterError("features", features, "a non-empty list of column names")
    if len(set(names)) != len(names) or any(n.startswith(_PREFIX) for n in names):
        raise InvalidParameterError(
            "features", features, f"distinct column names not starting with {_PREFIX!r}"
        )
    model = KMeans(
        n_clusters,
        epsilon=epsilon,
        rho=rho,
        delta=delta,
        bounds=bounds,
        method=method,
        max_iter=max_iter,
        coreset_share=coreset_share,
        grid_size=grid_size,
        n_candidates=n_candidates,
        em_radius=em_radius,
    )
    budget, k, iters = model._validate()
    d = len(names)
    if d > MAX_FEATURES:
        raise InvalidParameterError("features", f"{d} columns", f"at most {MAX_FEATURES}")
    box = check_box(bounds, "bounds", d=d)
    _check_numeric(session, names, "features", features)
    model._check_method_geometry(d, k)
    if method != "grid_em" and k * (k + d) > _SESSION_WORK:
        raise InvalidParameterError(
            "n_clusters",
            k,
            f"at most {_session_clusters(d)} for {d} features on a Session (k·(k + d) <= "
            f"{_SESSION_WORK})",
            "The engine finds each row's nearest centre with k·(k - 1) comparisons and k·d "
            "products per row, in one query; use the in-memory KMeans for more clusters.",
        )
    session._check_open()
    base = session.query()
    if max_rows is not None:
        base = base.bound(max_rows=max_rows)
    base, z = _row_map(base, names, box)
    label = f"{_PREFIX}label"
    kind = "epsilon" if budget.kind == "pure" else "rho"
    g = 2

    # the budget plan: public, fixed before anything is read
    ratio = Fraction(math.sqrt(d)).limit_denominator(64)  # sums : count (see _count_sum_shares)
    count_weight, sum_weight = Fraction(1), ratio / d
    steps: list[Fraction] = []
    if method == "lloyd":
        steps = [budget.total / iters] * iters
    elif method == "lsh":
        core = model._core_fraction(iters)
        steps = [budget.total * core]
        steps += [budget.total * (1 - core) / iters] * iters if iters else []
    start = _public_spread(k, d)

    def compile_step(query: Any, share: Fraction) -> Any:
        if kind == "epsilon":
            return session.compile(query, epsilon=share)
        return session.compile(query, rho=share)

    def lloyd_query(centres: np.ndarray) -> Any:
        return _counts_and_sums(
            _assignment(base, z, centres, label), z, label, k, count_weight, sum_weight
        )

    em_plan: Any = None
    em_rows = 1
    em_output = ""
    if method == "grid_em":
        from dpkit.analytics import count

        g = _lattice(d, int(n_candidates))
        em_loss, em_step = model._loss_and_steps(budget, k)
        hist = _lattice_label(base, z, g, label).group_by(label, keys=list(range(g**d)))
        em_compiled = session.compile(hist.agg(count(name=f"{_PREFIX}n")), epsilon=1)
        em_plan = em_compiled.plans[0]
        # the rows one unit may hold after the bounding this very plan enforces
        enforced = Bounding(em_plan.max_rows, em_plan.max_groups, em_plan.max_rows_per_group)
        em_rows = contribution(enforced, grouped=True).rows_l1
        em_output = em_plan.output_columns[em_plan.outputs.index(Output("rows"))]
        model._check_shares(budget, d, k, iters, rows=em_rows)
        total: PrivacyLoss = em_loss
    else:
        model._check_shares(budget, d, k, iters)
        # compile the first queries now: columns, kinds and bounding are checked before the
        # reservation, and their losses are the steps' losses (the later queries differ only
        # in public constants: the released centres, a fresh public hash)
        losses: list[PrivacyLoss] = []
        lloyd_steps = steps
        if method == "lsh":
            probe, _ = _coreset_query(base, z, label, d, grid_size, count_weight, sum_weight)
            losses.append(compile_step(probe, steps[0]).loss)
            lloyd_steps = steps[1:]
        if lloyd_steps:
            step_loss = compile_step(lloyd_query(start), lloyd_steps[0]).loss
            losses += [step_loss] * len(lloyd_steps)
        total = compose(*losses)
    total = budget.reported(total)
    what = f"KMeans({method}, k={k}) on {', '.join(names)}"

    def rounds(stage: Stage) -> np.ndarray:
        """Every round of the fit, under the one reservation."""
        stage(False, _STAGES["compiling"])
        if method == "grid_em":
            stage(True)
            table = session.engine.run(em_plan).to_pydict()
            stage(False, _STAGES["selecting"])
            keys = table[em_plan.group_columns[0]]
            rows = table[em_output]
            h = np.zeros(g**d, dtype=np.int64)
            for key, value in zip(keys, rows, strict=True):
                if key is not None and 0 <= int(key) < h.size:
                    h[int(key)] = int(value)
            centres = grid_em_select(h, k, d, g, em_step, float(em_radius), em_rows)
        else:
            centres = start
            shares = list(steps)
            if method == "lsh":
                stage(False, _STAGES["compiling"])
                query, cells = _coreset_query(
                    base, z, label, d, grid_size, count_weight, sum_weight
                )
                compiled = compile_step(query, shares.pop(0))
                stage(True)
                results = [session.engine.run(plan) for plan in compiled.plans]
                stage(False, _STAGES["releasing"])
                tables, accuracy = compiled.release(results)
                counts, sums, level = _released(tables, accuracy, label, cells, d)
                centres = coreset_centres(counts, sums, level, k)
            for share in shares:
                stage(False, _STAGES["compiling"])
                compiled = compile_step(lloyd_query(centres), share)
                stage(True)
                results = [session.engine.run(plan) for plan in compiled.plans]
                stage(False, _STAGES["releasing"])
                tables, accuracy = compiled.release(results)
                counts, sums, level = _released(tables, accuracy, label, k, d)
                centres = lloyd_update(centres, counts, sums, level)
        return centres

    centres, model.receipt_ = release(
        session._books, total, rounds, query=what, mechanism=f"kmeans-{method}"
    )
    model.cluster_centers_ = box.unscale(centres)
    model.privacy_loss_ = total
    model.n_features_in_ = d
    model.n_iter_ = iters
    model.feature_names_in_ = np.array(names, dtype=object)
    return model


def _coreset_query(
    base: Any,
    z: Sequence[str],
    label: str,
    d: int,
    grid_size: int | None,
    count_weight: Fraction,
    sum_weight: Fraction,
) -> tuple[Any, int]:
    """The private coreset as one grouped query over the public LSH-grid cells (a fresh
    public hash each call), and the number of cells."""
    p, g = _grid_geometry(d, grid_size)
    projection, radius, shift = lsh_hash(d, grid_size)
    query = _cell_label(base, z, projection, radius, shift, g, label)
    return _counts_and_sums(query, z, label, g**p, count_weight, sum_weight), g**p
