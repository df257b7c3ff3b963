"""Sample-and-aggregate (Nissim, Raskhodnikova & Smith 2007; Smith 2011) for any function.

1. **Split.** Every privacy unit (not row) is assigned a block uniformly at random among m, with
   exact uniform integers from :mod:`dpkit.noise` (independently per unit, so adding, removing or
   changing one unit's rows changes exactly one block's rows and nothing else).
2. **Compute.** The user's function runs on each block's rows and must return an array of the
   declared ``output_shape``. A block whose function raises, returns the wrong shape, or returns
   NaN/inf gets the public ``default`` value instead (coordinate-wise for NaN/inf); nothing about
   *which* block failed is revealed or raised, and warnings raised inside ``fn`` are silenced
   (a warning printed for one block would say which). ``fn`` must not print or write files.
   Values are then clamped into the declared ``output_range``.
3. **Aggregate privately** over the m block values, coordinate by coordinate, each coordinate
   with ε/d (basic composition over the d coordinates):

   * ``"winsorized_mean"`` (Smith 2011's widened winsorized mean): the 1/4 and 3/4 quantiles
     a, b of the block values are released with the inverse sensitivity mechanism (ε/4 each),
     widened to [a − w·(b − a), b + w·(b − a)] ∩ range (w = ``widen``, default 1), the block values
     are winsorized to it and their mean is released with discrete Laplace noise for sensitivity
     (width/m) at ε/2 (adaptive composition: the interval is a released value);
   * ``"inverse_median"``: the median of the block values by the inverse sensitivity mechanism;
   * ``"smooth_median"``: the median with β-smooth sensitivity and Cauchy-type noise (pure ε);
   * ``"centre_of_attention"``: the mean of the block values clipped to their privately released
     interquartile range (inverse-sensitivity quantiles, ε/4 each; Laplace at ε/2), without
     widening (:mod:`dpkit.sensitivity._centre`).

Guarantee: ε-DP for datasets that differ in all rows of one privacy unit (the block assignment
is independent of the data, and conditioned on it one block value changes; each aggregator is
ε-DP under substitution of one of m values; a mixture of ε-DP mechanisms is ε-DP).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, check_epsilon
from dpkit._extras import require
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.core._spaces import AtomDomain, SymmetricDistance, VectorDomain
from dpkit.errors import InvalidParameterError
from dpkit.noise import random_words, uniform_integers
from dpkit.sensitivity._centre import make_centre_of_attention
from dpkit.sensitivity._info import SampleAggregateInfo
from dpkit.sensitivity._inverse import make_inverse_sensitivity
from dpkit.sensitivity._noise import discrete_laplace_wide
from dpkit.sensitivity._smooth import make_smooth_sensitivity

__all__ = ["DuckDBBlocks", "assign_blocks", "choose_m", "make_sample_and_aggregate"]

AGGREGATORS = ("winsorized_mean", "inverse_median", "smooth_median", "centre_of_attention")


def choose_m(
    n_range: tuple[int, int],
    accuracy_target: Number,
    *,
    epsilon: Number,
    output_width: Number,
    min_block_units: int = 10,
) -> int:
    """Pick m from public inputs only (never from the data).

    The winsorized mean's noise has E|noise| ≈ 2·width/(m·ε) (the factor 2 for the ε/2 share),
    so m >= 2·width/(ε·target) meets the target; blocks must keep at least ``min_block_units``
    units on the smallest declared n, so m <= n_min/min_block_units. Returns the smallest m that
    meets the target if it fits, else the largest m that fits (the target is then unreachable at
    this n and ε: more blocks would starve each block of data).
    """
    n_min, n_max = _check_n_range(n_range)
    target = check_epsilon(accuracy_target, "accuracy_target")
    eps = check_epsilon(epsilon)
    width = check_epsilon(output_width, "output_width")
    if (
        isinstance(min_block_units, bool)
        or not isinstance(min_block_units, int)
        or min_block_units < 1
    ):
        raise InvalidParameterError("min_block_units", min_block_units, "an integer >= 1")
    largest = n_min // min_block_units
    if largest < 2:
        raise InvalidParameterError(
            "n_range", n_range, f"with n_min >= {2 * min_block_units} for two blocks"
        )
    wanted = max(2, math.ceil(2 * width / (eps * target)))
    del n_max
    return min(wanted, largest)


def _check_n_range(n_range: Any) -> tuple[int, int]:
    ok = (
        isinstance(n_range, tuple | list)
        and len(n_range) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in n_range)
        and 1 <= n_range[0] <= n_range[1]
    )
    if not ok:
        raise InvalidParameterError(
            "n_range", n_range, "(n_min, n_max) integers, 1 <= n_min <= n_max"
        )
    return int(n_range[0]), int(n_range[1])


def assign_blocks(units: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices grouped by block, and the block boundaries (``bounds[b]:bounds[b+1]``).

    Each distinct unit gets a block uniformly at random in [0, m) (exact, independent).
    """
    require("analytics", by="dpkit.sensitivity.assign_blocks")
    import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

    # factorize, not sort: ids of mixed types (None among ints, text among numbers) cannot be
    # ordered, and a sort that raised on one unit's id would tell the tables apart
    codes, uniques = pd.factorize(pd.Series(np.asarray(units, dtype=object)), use_na_sentinel=False)
    blocks_of_units = uniform_integers(m, len(uniques))
    block_of_row = np.asarray(blocks_of_units, dtype=np.int64)[codes]
    rows = np.argsort(block_of_row, kind="stable")
    counts = np.bincount(block_of_row, minlength=m)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return rows, bounds


@dataclass(frozen=True, slots=True)
class DuckDBBlocks:
    """Data in a DuckDB table: the engine assigns each unit its block.

    The block of a unit is ``hash(unit, key) % m`` computed in SQL, with a fresh 64-bit key from
    :func:`dpkit.noise.random_words` per release. The assignment is a function of the unit's id
    and the key alone, so one unit's rows still change exactly one block (the privacy argument
    needs nothing else); it is close to uniform, not exactly (DuckDB's hash is not a PRF), which
    only affects accuracy. Rows come back ordered by block and the user function receives a 2-d
    float array with ``columns`` (a 1-d array for one column).
    """

    connection: Any
    table: str
    unit_column: str
    columns: tuple[str, ...]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _duckdb_blocks(source: DuckDBBlocks, m: int) -> tuple[np.ndarray, np.ndarray]:
    key = int(random_words(1)[0])
    cols = ", ".join(_quote(c) for c in source.columns)
    query = (
        f"SELECT (hash({_quote(source.unit_column)}, {key}::UBIGINT) % {m})::BIGINT AS __block,"
        f" {cols} FROM {_quote(source.table)} ORDER BY __block"
    )
    try:
        result = source.connection.execute(query).fetchnumpy()
    except Exception:
        raise InvalidParameterError(
            "table", source.table, "a readable DuckDB table with the declared unit and columns"
        ) from None
    blocks = np.asarray(result["__block"], dtype=np.int64)
    values = [np.asarray(result[c], dtype=np.float64) for c in source.columns]
    table = values[0] if len(values) == 1 else np.column_stack(values)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(blocks, minlength=m))])
    return table, bounds


def _take(table: Any, rows: np.ndarray) -> Any:
    if hasattr(table, "iloc"):
        return table.iloc[rows]
    return np.asarray(table)[rows]


def make_sample_and_aggregate(
    fn: Callable[[Any], Any],
    *,
    m: int,
    n_range: tuple[int, int],
    output_shape: Sequence[int] | int,
    output_range: tuple[Number, Number],
    epsilon: Number,
    aggregator: str = "winsorized_mean",
    default: Number | None = None,
    widen: Number = 1,
    probe: Any = None,
) -> Measurement[np.ndarray]:
    """Sample-and-aggregate: run ``fn`` on m random blocks of privacy units, aggregate privately.

    The Measurement is called as ``measurement((units, table))``: ``units[i]`` is the privacy
    unit of row i of ``table`` (a numpy array or pandas DataFrame); or as
    ``measurement(DuckDBBlocks(connection, table, unit_column, columns))`` to have DuckDB assign
    the blocks. Guarantee: ε-DP when one
    unit's rows are added, removed or changed (module docstring; docs/sensitivity.md §6). All
    parameters are checked here, before any data is read.

    Args:
        fn: any function of a block's rows returning an array of ``output_shape``.
        m: the number of blocks, 2 <= m <= n_min (the declared smallest number of units).
        n_range: (n_min, n_max), the declared range of the number of units (public).
        output_shape: the shape of ``fn``'s output (d = its number of elements).
        output_range: (lo, hi) every coordinate is clamped into (declared, public).
        epsilon: the total ε.
        aggregator: ``"winsorized_mean"``, ``"inverse_median"``, ``"smooth_median"`` or
            ``"centre_of_attention"``.
        default: the public value used for a block whose function fails (default: midpoint).
        widen: w of the widened winsorized mean.
        probe: optional *public* example rows (e.g. synthetic or an empty frame with the
            schema): ``fn(probe)`` is run here and a raise, wrong shape or NaN/inf is reported as
            :class:`~dpkit.errors.InvalidParameterError` before any private data is read. On
            private blocks the same failures silently give ``default``.
    """
    n_min, _ = _check_n_range(n_range)
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise InvalidParameterError("m", m, "an integer >= 2")
    if m > n_min:
        raise InvalidParameterError(
            "m", m, f"at most n_min={n_min}, the fewest units the declared n_range allows"
        )
    if not callable(fn):
        raise InvalidParameterError("fn", fn, "a callable")
    shape = (output_shape,) if isinstance(output_shape, int) else tuple(output_shape)
    if not shape or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape
    ):
        raise InvalidParameterError("output_shape", output_shape, "a tuple of positive integers")
    d = math.prod(shape)
    if not (isinstance(output_range, tuple | list) and len(output_range) == 2):
        raise InvalidParameterError("output_range", output_range, "a pair (lo, hi)")
    lo_f, hi_f = (Fraction(v) if isinstance(v, Fraction) else v for v in output_range)
    lo, hi = float(lo_f), float(hi_f)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise InvalidParameterError("output_range", output_range, "finite lo < hi")
    eps = check_epsilon(epsilon)
    if aggregator not in AGGREGATORS:
        raise InvalidParameterError("aggregator", aggregator, "one of " + ", ".join(AGGREGATORS))
    fill = (lo + hi) / 2 if default is None else float(default)
    if not lo <= fill <= hi:
        raise InvalidParameterError("default", default, f"in the output range [{lo}, {hi}]")
    w = check_epsilon(widen, "widen")
    if probe is not None:
        try:
            sample = np.asarray(fn(probe), dtype=np.float64)
        except Exception as error:
            raise InvalidParameterError(
                "fn", fn, f"a function that runs on the probe (it raised {type(error).__name__})"
            ) from None
        if sample.shape != shape and not (sample.ndim == 0 and shape == (1,)):
            raise InvalidParameterError(
                "fn", fn, f"returning shape {shape} (on the probe it returned {sample.shape})"
            )
        if not np.all(np.isfinite(sample)):
            raise InvalidParameterError("fn", fn, "returning finite values (probe gave NaN/inf)")
    per_coordinate = eps / d
    exponent = math.frexp(max(abs(lo), abs(hi), hi - lo))[1] - 40
    g = Fraction(2) ** exponent

    if aggregator == "winsorized_mean":
        quartile_lo = make_inverse_sensitivity(
            "quantile", q=Fraction(1, 4), lower=lo, upper=hi, n=m, epsilon=per_coordinate / 4
        )
        quartile_hi = make_inverse_sensitivity(
            "quantile", q=Fraction(3, 4), lower=lo, upper=hi, n=m, epsilon=per_coordinate / 4
        )
    elif aggregator == "centre_of_attention":
        median = make_centre_of_attention(m=m, lower=lo, upper=hi, epsilon=per_coordinate)
    elif aggregator == "inverse_median":
        median = make_inverse_sensitivity("median", lower=lo, upper=hi, n=m, epsilon=per_coordinate)
    else:
        median = make_smooth_sensitivity("median", lower=lo, upper=hi, n=m, epsilon=per_coordinate)

    def block_values(data: Any) -> np.ndarray:
        if isinstance(data, DuckDBBlocks):
            table, bounds = _duckdb_blocks(data, m)
            rows = np.arange(int(bounds[-1]))
        else:
            units, table = data
            rows, bounds = assign_blocks(np.asarray(units), m)
        values = np.full((m, d), fill)
        # warnings are silenced: a warning on one block would say which block failed
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            for b in range(m):
                part = _take(table, rows[bounds[b] : bounds[b + 1]])
                try:
                    out = np.asarray(fn(part), dtype=np.float64)
                except KeyboardInterrupt:
                    raise
                except BaseException:  # any failure (SystemExit too) maps to the public default
                    continue
                if out.shape != shape and not (out.ndim == 0 and shape == (1,)):
                    continue
                flat = out.reshape(-1)
                values[b] = np.where(np.isfinite(flat), flat, fill)
        return np.clip(values, lo, hi)

    def aggregate(column: np.ndarray) -> float:
        if aggregator != "winsorized_mean":
            return float(median(column))
        a = float(quartile_lo(column))
        b = float(quartile_hi(column))
        a, b = min(a, b), max(a, b)
        spread = (b - a) * float(w)
        low, high = max(lo, a - spread), min(hi, b + spread)
        mean = math.fsum(np.clip(column, low, high)) / m
        width = Fraction(high) - Fraction(low)
        steps = math.ceil((width / m + g) / g)  # +g: float error of the mean and rounding
        noise = discrete_laplace_wide(Fraction(steps) / (per_coordinate / 2), 1)[0]
        return math.ldexp(float(round(Fraction(mean) / g) + noise), exponent)

    def function(data: Any) -> np.ndarray:
        values = block_values(data)
        return np.array([aggregate(values[:, j]) for j in range(d)]).reshape(shape)

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float")),
        input_metric=SymmetricDistance(),
        output_measure="pure",
        function=function,
        privacy_map=lambda d_in: PureDP(eps * math.ceil(d_in)),
        name=f"sample_and_aggregate({aggregator}, m={m})",
        d_in=Fraction(1),
        info=SampleAggregateInfo(block_values=block_values, aggregate=aggregate, m=m),
    )
