"""Regression (review findings 4 and 5): contribution bounding must enforce the declared bounds.

For neighbouring tables D and D' = D + one unit's rows, the exact per-group vectors the planner
noises must differ by at most the declared sensitivities (bounding.contribution): L1 of row
counts <= rows_l1, L2² <= rows_l2_squared, L1 of distinct-unit counts <= groups. These tests
run the bounded plan of a compiled query on D and D' and measure the difference.

4. The pandas engine identified groups by ``repr`` of the key tuple for bounding but by value
   equality for aggregation: keys equal but printed differently (-0.0 and 0.0, which
   ``col(x).ceil()`` produces for x in (-1, 0)) formed one output group in which a unit kept up
   to ``max_groups · max_rows_per_group`` rows. Fixed: one canonical group identity
   (engines._columns.canonical: -0.0 is 0.0, NaN is NULL) serves bounding and aggregation in
   the reference engine, and the SQL engines normalise numeric keys the same way.
5. The SQL engines enforced ``max_groups`` with DENSE_RANK over md5(salt, unit, 'v'+key1, SEP,
   'v'+key2, ...) with unescaped parts, so two distinct groups of string keys containing the
   separator \\x1f hashed alike, shared a rank, and a unit kept both with ``max_groups=1``.
   Fixed: every part is escaped before joining (injective), and rank ties are broken by the
   key values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics._bounding import contribution
from dpkit.analytics._engines import make_engine
from dpkit.analytics._engines._base import Output
from dpkit.analytics._expr import col
from dpkit.analytics._planner import _rows_by_group, compile_query
from dpkit.analytics._query import Bounding, Query, count, count_distinct_units


def _outputs(engine: str, df: pd.DataFrame, query: Query) -> tuple[dict[Any, list[int]], Any]:
    e = make_engine(engine, df)
    compiled = compile_query(
        query, e.schema(), "u", dp.ApproxDP(1, 1e-6), mechanism="gaussian", salt=12345
    )
    table = e.run(compiled.plans[0])
    rows, _ = _rows_by_group(table, compiled.plans[0])
    return {k: v[0] for k, v in rows.items()}, compiled


def _difference(a: dict[Any, list[int]], b: dict[Any, list[int]], i: int) -> np.ndarray:
    keys = set(a) | set(b)
    return np.array([a.get(k, [0] * 9)[i] - b.get(k, [0] * 9)[i] for k in keys], dtype=np.int64)


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
@pytest.mark.parametrize("keys", [[0.0], None])
def test_signed_zero_keys_are_one_group_for_bounding(engine: str, keys: list[float] | None) -> None:
    others = pd.DataFrame({"u": [2, 3], "k": [0.0, 0.0]})
    target = pd.DataFrame({"u": [1, 1], "k": [-0.0, 0.0]})
    query = Query().group_by("k", keys=keys).bound(max_groups=2, max_rows_per_group=1).agg(count())
    with_unit, _ = _outputs(engine, pd.concat([others, target], ignore_index=True), query)
    without, _ = _outputs(engine, others, query)
    assert len(with_unit) == 1, f"-0.0 and 0.0 are one group: {with_unit}"
    delta = _difference(with_unit, without, 0)
    facts = contribution(Bounding(None, 2, 1), grouped=True)
    assert int(np.abs(delta).max()) <= facts.rows_per_group, (
        f"one unit adds {int(np.abs(delta).max())} rows to one group with max_rows_per_group=1"
    )
    assert int((delta**2).sum()) <= facts.rows_l2_squared, (
        f"L2² = {int((delta**2).sum())} > declared {facts.rows_l2_squared}: the Gaussian noise is "
        "calibrated for half the real sensitivity"
    )


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_separator_in_keys_does_not_merge_group_hashes(engine: str) -> None:
    sep = "\x1f"
    g1 = ("x" + sep + "vy", "z")
    g2 = ("x", "y" + sep + "vz")
    others = pd.DataFrame({"u": [2, 3], "a": [g1[0], g2[0]], "b": [g1[1], g2[1]]})
    target = pd.DataFrame({"u": [1, 1], "a": [g1[0], g2[0]], "b": [g1[1], g2[1]]})
    query = (
        Query()
        .group_by("a", "b")
        .bound(max_groups=1, max_rows_per_group=1)
        .agg(count(), count_distinct_units())
    )
    with_unit, compiled = _outputs(engine, pd.concat([others, target], ignore_index=True), query)
    without, _ = _outputs(engine, others, query)
    units_index = compiled.plans[0].outputs.index(
        next(o for o in compiled.plans[0].outputs if o.kind == "units")
    )
    delta = _difference(with_unit, without, units_index)
    assert int(np.abs(delta).sum()) <= 1, (
        f"with max_groups=1 one unit changed the distinct-unit counts of {int(np.abs(delta).sum())}"
        " groups (partition selection's δ and ε assume 1)"
    )


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_ceil_to_negative_zero_is_one_group(engine: str) -> None:
    """col(x).ceil() gives -0.0 for x in (-1, 0): still the group 0.0 for bounding."""
    others = pd.DataFrame({"u": [2, 3], "x": [0.0, 0.0]})
    target = pd.DataFrame({"u": [1, 1, 1], "x": [-0.5, -0.25, 0.0]})
    query = (
        Query()
        .with_column("k", col("x").ceil())
        .group_by("k")
        .bound(max_groups=3, max_rows_per_group=1)
        .agg(count())
    )
    with_unit, _ = _outputs(engine, pd.concat([others, target], ignore_index=True), query)
    without, _ = _outputs(engine, others, query)
    assert set(with_unit) == {(0.0,)}
    assert with_unit[(0.0,)][0] - without[(0.0,)][0] == 1, "max_rows_per_group=1"


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
def test_equal_numbers_of_an_object_column_are_one_group(engine: str) -> None:
    """1, 1.0 and True in an object column declared numeric are one key (1.0)."""
    df = pd.DataFrame({"u": [1, 1, 1, 2], "k": pd.Series([1, 1.0, True, 1], dtype=object)})
    e = make_engine(engine, df, schema={"k": "numeric"})
    query = Query().group_by("k").bound(max_groups=3, max_rows_per_group=1).agg(count())
    compiled = compile_query(
        query, e.schema(), "u", dp.ApproxDP(1, 1e-6), mechanism="gaussian", salt=3
    )
    rows, _ = _rows_by_group(e.run(compiled.plans[0]), compiled.plans[0])
    assert {k: v[0][0] for k, v in rows.items()} == {(1.0,): 2}


# ------------------------------------------------------------------ issue 21: public key counts
def _calibrated_l1(compiled: Any, name: str) -> int:
    """The L1 sensitivity the planner calibrated ``name``'s noise for, from explain()."""
    import re

    line = next(x for x in compiled.explain().splitlines() if x.startswith(f"{name}:"))
    match = re.search(r"sensitivity L1=(\d+)", line)
    assert match is not None, line
    return int(match.group(1))


@pytest.mark.parametrize("engine", ["pandas", "duckdb"])
@pytest.mark.parametrize(("n_keys", "max_rows"), [(2, 10), (3, 10), (5, 2), (1, 7)])
def test_distinct_unit_counts_are_calibrated_for_the_public_keys(
    engine: str, n_keys: int, max_rows: int
) -> None:
    """Issue 21: with 2 public keys and max_rows=10 the distinct-unit count was calibrated for
    10 groups (5x the noise needed). The sensitivity is min(bound, number of public keys), and
    it is tight: the hardest neighbour — a unit with rows in every key and in keys not declared
    — moves the exact per-group counts by exactly that much, never more."""
    keys = list(range(n_keys))
    others = pd.DataFrame({"u": [100 + i for i in range(3 * n_keys)], "k": keys * 3})
    # the unit's rows: one in every declared key (so any rows bounding keeps are in distinct
    # groups), and rows of undeclared keys (dropped before bounding)
    target = pd.DataFrame({"u": 1, "k": [*keys, 97, 98, 99]})
    query = (
        Query()
        .group_by("k", keys=keys)
        .bound(max_rows=max_rows)
        .agg(count_distinct_units(), count())
    )
    with_unit, compiled = _outputs(engine, pd.concat([others, target], ignore_index=True), query)
    without, _ = _outputs(engine, others, query)
    units_index = compiled.plans[0].outputs.index(Output("units"))
    moved = int(np.abs(_difference(with_unit, without, units_index)).sum())
    calibrated = _calibrated_l1(compiled, "units")
    assert calibrated == min(max_rows, n_keys)  # not max_rows: the old calibration
    assert moved <= calibrated  # sound: the hard neighbour stays within it
    assert moved == calibrated  # tight: nothing to spare
    rows_moved = int(np.abs(_difference(with_unit, without, 0)).sum())
    assert rows_moved <= _calibrated_l1(compiled, "count")


def test_the_key_count_only_ever_lowers_the_bound() -> None:
    for k, m, c in [(10, None, None), (None, 4, 3), (6, 3, 2), (1, None, None)]:
        loose = contribution(Bounding(k, m, c), grouped=True)
        for n_keys in (1, 2, 3, 50):
            tight = contribution(Bounding(k, m, c), grouped=True, n_keys=n_keys)
            assert tight.groups == min(loose.groups, n_keys)
            assert tight.rows_l1 <= loose.rows_l1 and tight.rows_per_group <= loose.rows_per_group
            assert tight.rows_l1 <= tight.groups * tight.rows_per_group
