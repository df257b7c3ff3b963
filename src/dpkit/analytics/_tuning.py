"""Private tuning of a query's contribution bounds and clamping bounds, with a pre-spend report.

:meth:`dpkit.analytics.Session.tune` spends a declared share ε of the budget, as **one release**
through the one door (:func:`dpkit._door.release`), to choose what an analyst would otherwise
guess, and forecasts the error of the tuned query before its budget is spent.

**What the tuning release measures** (each part an existing mechanism; the charge is their
sequential composition, :func:`dpkit.core.compose` of the parts' own losses):

1. ``rows``: the engine counts each privacy unit's rows after the query's filters (one bounded
   plan grouped by the unit, and by the query's group keys when it has some: no Python loop over
   rows). Each unit falls in exactly one bin of a public geometric grid of counts
   (:data:`COUNT_EDGES`: 1..8, then powers of two), so adding or removing one unit moves one
   bin by one: the L1 sensitivity of the histogram is 1 and the geometric mechanism
   (:func:`dpkit.make_geometric`, ``sensitivity=1``) makes it ε_rows-DP. Quantiles, the rows a
   cap would drop and the error-optimal cap are read off this one noisy histogram
   (post-processing, free).
2. ``groups`` (grouped queries whose ``max_groups`` is not declared): the same histogram of each
   unit's number of groups (one unit, one bin: sensitivity 1).
3. ``bounds of C`` (each aggregation written without bounds, whose column has no registered
   bounds): the existing estimator of :meth:`Session.estimate_bounds` (two exponential-mechanism
   quantiles over the public grid ``0, ±2^i``), run with the max_rows chosen in 1 as its
   sensitivity (adaptive sequential composition: the cap is a post-processing of part 1).
4. ``selection`` (private group keys): a histogram of the groups by their number of distinct
   units, after each unit keeps at most ``max_groups`` of its groups (the first in an order that
   depends only on the unit's own rows, a fresh secret salt): one unit moves at most
   ``max_groups`` groups by one bin each way, L1 sensitivity ``2·max_groups``; the geometric
   mechanism at that sensitivity. It forecasts the groups partition selection will suppress.
5. ``values of C`` (each column of a sum or mean whose bounds are written or registered): the
   sum of its values clamped to those bounds, on a grid of at most 2^20 steps from 0, at most
   the provisional cap of rows per unit (the plan's own contribution bounding): one unit moves
   it by at most cap × the largest grid value, the geometric mechanism's sensitivity (the cap
   is a post-processing of part 1). Divided by the rows the histogram says that cap keeps, it
   estimates the values' mean: a sum's dropped rows are weighed by it, and a mean's forecast
   counts the noise of its row count by its distance from the bounds' centre.

The split of ε among the parts is public: equal shares, but half of one for each ``values``
part (one noisy sum, precise at a small ε). The parts' losses are composed
(pure ε add up), and that composed loss is what the ledger is charged: the test suite
recomputes it from the mechanisms the release actually ran.

**The choice of max_rows** (when neither the query nor the session declares it): among
:data:`CAP_CANDIDATES` (the grid's edges and, between two a factor of two apart, their
geometric mean), the cap k that minimises the forecast error of the query's aggregations
released with the budget the analyst means to spend (``spend=``, default the budget left after
tuning): ``Σ_a (err_a(k) / scale_a)²`` with ``err_a² = bias_a(k)² + σ_a(k)²``, σ from the
planner's own calibration of the tuned query (public), the bias from the noisy histogram (the
rows a cap k drops, :func:`dropped_rows`, times the estimated mean of the values for sums, or
the bounds' typical magnitude without one; for means the distance of a subsample's mean from
all rows'). ``max_groups``: the upper end of the grid bin that holds the noisy 95th percentile
of groups per unit (capped at max_rows).

**The report** (:class:`TuningReport`) is computed from the noisy histograms, the chosen
parameters and public calibration only: post-processing, free. It gives, per aggregation, the
noise's standard deviation and (1-α) half-width under ``spend``, the estimated bias from dropped
rows and the resulting RMSE; the estimated share of rows the chosen max_rows drops; and, with
private group keys, the estimated number of groups partition selection will suppress.

Limits (documented in docs/analytics.md, "Tuning"): one-table sessions only; the per-unit counts
are taken after the query's filters but before its public key set (rows outside the declared
keys are counted); quantile and other order-statistic aggregations are reported with their rank
accuracy only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

from dpkit._door import Stage, release
from dpkit._exact import Number, check_epsilon
from dpkit.analytics._engines._base import BoundedPlan, Output, ValueSpec
from dpkit.analytics._planner import Mechanism
from dpkit.analytics._query import (
    Aggregate,
    Bounding,
    Query,
    Unbounded,
    count,
    written_aggregations,
)
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, compose
from dpkit.errors import (
    BudgetExceededError,
    DPError,
    InvalidParameterError,
    UnsupportedQueryError,
)
from dpkit.noise import random_words

if TYPE_CHECKING:
    from dpkit.analytics._session import Session

__all__ = [
    "CAP_CANDIDATES",
    "COUNT_EDGES",
    "Forecast",
    "Tuning",
    "TuningReport",
    "cap_candidates",
    "count_edges",
    "tune",
]


def count_edges(top: int = 2**30) -> tuple[int, ...]:
    """The public grid of per-unit counts: 1..8, then the powers of two up to ``top``. Bin i
    holds the counts in ``[edges[i], edges[i+1])``; the last bin is open. Few bins keep the
    noise of the counts summed from the top small (the tail estimate reads those sums)."""
    edges = list(range(1, 9))
    while edges[-1] < top:
        edges.append(edges[-1] * 2)
    return tuple(edges)


COUNT_EDGES = count_edges()
"""The bins of per-unit row and group counts (public)."""

_GROUPS_QUANTILE = 0.95
"""max_groups is the upper end of the grid bin holding this noisy quantile of groups per unit."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """The forecast error of one aggregation of the tuned query, released with ``spend``.

    ``std``: the noise's standard deviation (None when the noise gives none, e.g. quantiles);
    ``halfwidth``: the (1-α) half-width of the release's interval (rows, for a quantile's rank);
    ``bias``: the estimated bias from rows dropped by max_rows (0 when not estimated; for a
    mean, the typical distance of the kept rows' mean from all rows' mean);
    ``rmse``: ``sqrt(std² + bias²)`` (None without a std)."""

    name: str
    kind: str
    std: float | None
    halfwidth: float
    bias: float
    mechanism: str

    @property
    def rmse(self) -> float | None:
        return None if self.std is None else math.hypot(self.std, self.bias)


@dataclass(frozen=True, slots=True)
class TuningReport:
    """What the tuning release found and what the tuned query's release would cost in error.

    Every number is a post-processing of the tuning release (noisy histograms and private
    estimates) and of public calibration: reading it is free.

    Attributes:
        max_rows, max_groups: the tuned query's contribution bounds (chosen or declared).
        chosen: which of them (and which columns' bounds) the tuning chose.
        bounds: clamping bounds chosen privately, by column.
        forecasts: per aggregation name, its :class:`Forecast` under ``spend``.
        units: the estimated number of privacy units (after the query's filters).
        rows: the estimated number of rows.
        dropped_rows_share: the estimated share of rows the tuned max_rows drops.
        groups: with private group keys, the estimated number of groups with a unit.
        suppressed_groups: with private group keys, the estimated number of those groups
            partition selection would suppress (None otherwise).
        spend: the budget the forecasts assume for the main release.
        loss: what the tuning release was charged; ``parts``: its parts' losses.
        receipt: the ledger's receipt of the tuning release.
        means: per column of a sum or mean with known bounds, its estimated mean.
    """

    max_rows: int | None
    max_groups: int | None
    chosen: tuple[str, ...]
    bounds: Mapping[str, tuple[float, float]]
    forecasts: Mapping[str, Forecast]
    units: float
    rows: float
    dropped_rows_share: float
    groups: float | None
    suppressed_groups: float | None
    spend: PrivacyLoss
    loss: PrivacyLoss
    parts: Mapping[str, PrivacyLoss]
    alpha: float
    receipt: Any = None
    means: Mapping[str, float] = field(default_factory=dict)
    """Per column of a sum or mean with known bounds, the estimated mean of its clamped
    values (the forecasts' magnitude of a sum's dropped rows, and of a mean's noise)."""

    def text(self) -> str:
        """The report as people read it (the command line prints this)."""
        lines = [f"tuning release charged {self.loss} ({', '.join(self.parts)})"]
        chose = ", ".join(self.chosen) or "nothing (all declared)"
        lines.append(f"chosen privately: {chose}")
        bounding = f"max_rows={self.max_rows}"
        if self.max_groups is not None:
            bounding += f", max_groups={self.max_groups}"
        lines.append(f"contribution bounds: {bounding}")
        for column, (lo, hi) in self.bounds.items():
            lines.append(f"clamping bounds of {column}: [{lo:g}, {hi:g}]")
        for column, m in self.means.items():
            lines.append(f"estimated mean of {column} (clamped): {m:.4g}")
        lines.append(
            f"estimated: {self.units:,.0f} units, {self.rows:,.0f} rows; rows dropped by "
            f"max_rows: {100 * self.dropped_rows_share:.1f}%"
        )
        if self.groups == 0:
            lines.append("groups: too few to estimate privately at this tuning share")
        elif self.suppressed_groups is not None and self.groups is not None:
            lines.append(
                f"estimated groups: {self.groups:,.0f}, of which partition selection would "
                f"suppress about {self.suppressed_groups:,.0f}"
            )
        level = round(100 * (1 - self.alpha))
        lines.append(f"expected error if released with {self.spend}:")
        for f in self.forecasts.values():
            if f.std is None:
                lines.append(f"  {f.name}: {level}% bound ±{f.halfwidth:.3g} ({f.kind})")
                continue
            bias = f", bias from dropped rows ≈ {f.bias:.3g}" if f.bias else ""
            lines.append(
                f"  {f.name}: std {f.std:.3g}, {level}% half-width {f.halfwidth:.3g}{bias}"
                f" (RMSE ≈ {f.rmse:.3g})"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True, slots=True)
class Tuning:
    """What :meth:`Session.tune` returns: the tuned ``query`` and its ``report``; unpacks as
    ``query, report = session.tune(...)``."""

    query: Query
    report: TuningReport

    def __iter__(self) -> Iterator[Any]:
        return iter((self.query, self.report))


@dataclass
class _Found:
    """What the release body found (all noisy or chosen from noisy values)."""

    rows_hist: np.ndarray | None = None
    groups_hist: np.ndarray | None = None
    units_hist: np.ndarray | None = None
    max_rows: int | None = None
    max_groups: int | None = None
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    sums: dict[str, tuple[float, int, float, float]] = field(default_factory=dict)
    """per located column: (noisy sum of its clamped values at a cap, that cap, its bounds)"""
    used: list[tuple[str, PrivacyLoss]] = field(default_factory=list)
    """(part, loss of the mechanism actually run): what the privacy tests recompose."""


def _bins(values: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    """How many of ``values`` (>= 1) fall in each bin of ``edges`` (vectorised)."""
    index = np.searchsorted(np.asarray(edges, dtype=np.int64), values, side="right") - 1
    return np.bincount(np.clip(index, 0, len(edges) - 1), minlength=len(edges)).astype(np.int64)


_HIDDEN_BINS = 1
"""How many bins past the significant run are read one by one (thresholded)."""

_SIGNIFICANT = 4
"""A noisy survival count is read as it is when above this many of its noise sds. It is the
sum of every bin's noise above it (a random walk over ~30 bins), tested at every edge: at 3 sd
the empty tail of a 40-wave panel passed about once in 100 tunings, and the tuning then chose a
cap of 370,728."""

_TAIL_FROM = 8
"""The power law of the tail is fitted to the edges from 8 up (the wide bins): below, counts
are too discrete for a continuous law (Zipf(2)'s P(n >= x) falls as x^-1.3 at 2, x^-1.0 at 64)."""


def _denoise(
    noisy: np.ndarray, epsilon: Fraction, sensitivity: int, extrapolate: bool = False
) -> np.ndarray:
    """A histogram estimated from noisy bin counts (post-processing, free), through the
    survival counts ``S_i = Σ_{j>=i} count_j`` (units with at least ``edges[i]``).

    The noisy ``S̃_i`` are unbiased with noise sd ``sd_i = √(2·(bins − i))·Δ/ε``.

    * Over the first run of edges where ``S̃_i > 4·sd_i`` (:data:`_SIGNIFICANT`) they are
      used as they are (made non-increasing; the true counts never increase, so a
      "significant" edge after a gap is noise).
    * Past the run a survival count carries the noise of every bin above it (sd ≈ 70 units at
      ε = 0.1 on the 35-bin grid), so the next :data:`_HIDDEN_BINS` bin is read by its own
      noisy count (sd ``√2·Δ/ε``), kept when above 2.5 of its sd, else taken as empty: TPC-H's
      50 customers with 128-155 line items are seen at ε = 0.1; reading the survival count
      there as it was put ~30 phantom persons beyond 64 in a panel whose rows stop at 40, and
      the tuning doubled the cap.
    * Beyond, with ``extrapolate``, a power law ``S(e) ∝ e^−α`` fitted to the significant
      edges from 8 (:data:`_TAIL_FROM`) and the median up, least squares in logs weighted by
      each edge's precision, taking the heaviest slope within 2 standard errors of the fit,
      fills in the units too few to see: on heavy-tailed data (rows per
      person following a power law) the few heaviest units drop most of the rows a cap drops.
      A light tail fits a steep α (>= 4) and gets nothing; the law (α at least 1) is extended
      while at least one unit is expected beyond an edge, and only while it agrees with the noisy
      survival count there (not above ``S̃_i + 3·sd_i``): data whose rows stop (a 40-wave
      panel) fit a flat law that the empty tail's counts reject.

    The estimate then gives each bin ``S_i − S_{i+1}``."""
    counts = np.asarray(noisy, dtype=np.float64)
    bins = len(counts)
    raw = np.cumsum(counts[::-1])[::-1]
    sd = np.sqrt(2.0 * np.arange(bins, 0, -1)) * sensitivity / float(epsilon)
    above = raw > _SIGNIFICANT * sd
    if not above[0]:
        return np.zeros(bins)
    # the true survival counts never increase: only the first run of significant edges is
    # read (an isolated "significant" edge far in an empty tail is noise)
    top = int(np.argmin(above)) - 1 if not above.all() else bins - 1
    significant = np.arange(top + 1)
    survival = np.zeros(bins + 1)
    survival[: top + 1] = np.minimum.accumulate(np.maximum(raw[: top + 1], 0.0))
    hidden = range(top + 1, min(top + 1 + _HIDDEN_BINS, bins))
    bin_sd = math.sqrt(2.0) * sensitivity / float(epsilon)
    seen = [max(float(counts[j]), 0.0) if counts[j] > 2.5 * bin_sd else 0.0 for j in hidden]
    for k, j in enumerate(hidden):
        survival[j] = min(float(np.sum(seen[k:])), survival[top])
    if extrapolate:
        lo = np.asarray(COUNT_EDGES[:bins], dtype=np.float64)
        median = int(np.searchsorted(-survival[: top + 1], -survival[0] / 2))
        points = [i for i in significant if i >= median and lo[i] >= _TAIL_FROM and survival[i] > 0]
        if len(points) >= 2:
            # least squares in logs, each edge weighted by its precision (S_i/sd_i)²: the
            # lower edges, counted to a few per cent, anchor the law; the top edge of the run,
            # 3 sd from nothing, barely moves it (anchoring on it alone varied the tail's rows
            # by ±40% at ε = 0.1 and the chosen cap over 1448-92682 on Zipf(2))
            x, y = np.log(lo[points]), np.log(survival[points])
            w = survival[points] / sd[points]
            slope = float(np.polyfit(x, y, 1, w=w)[0])
            # the slope's standard error (log S_i has sd about 1/w_i): the tail taken is the
            # heaviest within 2 standard errors — over 8 octaves a slope of −1.2 instead of
            # −1.0 (2-3 noisy edges on Zipf(2)) forecasts a third of the rows a cap drops,
            # and the report then promised 1/5 of the error the release had (1 tuning in 7)
            centre = float(np.sum(w**2 * x) / np.sum(w**2))
            spread = float(np.sum(w**2 * (x - centre) ** 2))
            se = 1 / math.sqrt(spread) if spread > 0 else math.inf
            # α <= 1 would put unboundedly many rows in the tail; at 1 (Zipf's law for rows per
            # person, P(n >= x) ~ 1/x) the law stops where fewer than one unit is expected
            alpha = max(-slope - 2 * se, 1.0)
            intercept = float(np.sum(w**2 * (y + alpha * x)) / np.sum(w**2))
            if alpha < 4:
                for i in range(top + 1, bins):
                    level = min(math.exp(intercept - alpha * math.log(lo[i])), survival[top])
                    if level > raw[i] + 3 * sd[i]:
                        break  # the noisy counts say fewer: the law does not hold here
                    if level < 1:
                        break  # fewer than one unit expected beyond: the law ends here
                    survival[i] = max(level, survival[i])
    return np.maximum(survival[:-1] - survival[1:], 0.0)


def _representatives(edges: tuple[int, ...]) -> np.ndarray:
    """A bin's typical count: the geometric mean of its ends (the last, open bin: its edge ×2)."""
    lo = np.asarray(edges, dtype=np.float64)
    hi = np.append(lo[1:] - 1, lo[-1] * 2)
    return np.sqrt(lo * np.maximum(hi, lo))


def _quantile_edge(hist: np.ndarray, edges: tuple[int, ...], q: float) -> int:
    """The upper end of the bin holding the noisy q-quantile (at least 1)."""
    total = float(hist.sum())
    if total <= 0:
        return 1
    index = int(np.searchsorted(np.cumsum(hist), q * total, side="left"))
    index = min(index, len(edges) - 1)
    return edges[index + 1] - 1 if index + 1 < len(edges) else edges[index]


def dropped_rows(hist: np.ndarray, edges: tuple[int, ...], cap: int) -> float:
    """Rows a cap drops, from a (denoised) histogram of per-unit counts: ``∫_cap^∞ S(y) dy``,
    ``S(y)`` the units with more than ``y`` rows (``cap = 0``: all rows).

    ``S`` is known at the edges only (``S_i``: units with at least ``edges[i]``). Between two
    edges one apart it is ``S_{i+1}`` (counts are integers); across a wide bin whose upper
    edge still has units it falls as the power law through both ends, ``S_i·(y/e_i)^−a``
    (exact for Zipf-like counts, and it puts a bin's units near its lower end when the next
    bin holds far fewer — TPC-H: 4,242 customers with 64+ line items, 50 with 128+). In the
    last occupied wide bin, ``S`` falls on at the rate it fell over the bin below (to 0 at the
    bin's upper edge) when that rate is steeper than ``1/y``; otherwise the bin's units are
    spread evenly in log y over the bin (a model: a panel's persons with 30-40 rows are read as
    spread over 32-63, so a cap of 45 is forecast to drop rows it does not drop)."""
    lo = np.asarray(edges, dtype=np.float64)
    h = np.maximum(np.asarray(hist, dtype=np.float64), 0.0)
    survival = np.append(np.cumsum(h[::-1])[::-1], 0.0)
    total = survival[0] * max(lo[0] - cap, 0.0)  # y in [0, edges[0]): every unit
    for i in range(len(h)):
        s_i, s_next = survival[i], survival[i + 1]
        if s_i <= 0:
            break
        a, b = lo[i], (lo[i + 1] if i + 1 < len(lo) else lo[i] * 2)
        start = max(float(cap), a)
        if start >= b:
            continue
        if b - a <= 1:
            total += s_next * (b - start)
            continue
        if s_next > 0:
            k = math.log(s_i / s_next) / math.log(b / a)  # S(y) = s_i·(y/a)^-k
        else:
            # the last occupied bin: when S fell steeply over the bin below (faster than 1/y;
            # TPC-H: 4,242 customers at 64+, 50 at 128+) it falls on at that rate inside it
            # (to 0 at its upper edge), putting its units near its lower edge; otherwise
            # nothing says where they lie and they are spread evenly in log y (S falls
            # linearly in log y to 0 at the upper edge). Putting them all at the bin's
            # geometric mean instead made a cap there look free: with TPC-H's 50 customers
            # at 128+ unseen, a cap of 91 was chosen and dropped 15,000 line items.
            k = 0.0
            if i > 0 and survival[i - 1] > s_i:
                k = math.log(survival[i - 1] / s_i) / math.log(a / lo[i - 1])
            if k <= 1:
                width = math.log(b / a)
                logs = b * math.log(b / a) - b - (start * math.log(start / a) - start)
                total += s_i * ((b - start) - logs / width)
                continue
        if abs(k - 1) < 1e-9:
            total += s_i * a * math.log(b / start)
        else:
            total += s_i * a**k * (b ** (1 - k) - start ** (1 - k)) / (1 - k)
    return float(total)


def cap_candidates(edges: tuple[int, ...] = COUNT_EDGES) -> tuple[int, ...]:
    """The max_rows the tuning chooses from (public): the grid's edges and, between two edges
    a factor of two apart, their geometric mean (8, 11, 16, 23, 32, 45, 64, 91, 128, 181, …):
    a cap at 181 keeps the line items of TPC-H's heaviest customers (128-155) at √2 less
    noise than 256."""
    out = set(edges)
    for a, b in itertools.pairwise(edges):
        if b == 2 * a:
            out.add(round(math.sqrt(a * b)))
    return tuple(sorted(out))


CAP_CANDIDATES = cap_candidates()
"""The caps max_rows is chosen from (public)."""


def _share(loss: PrivacyLoss, parts: int) -> PrivacyLoss:
    if isinstance(loss, PureDP):
        return PureDP(loss.epsilon / parts)
    if isinstance(loss, ApproxDP):
        return ApproxDP(loss.epsilon / parts, loss.delta / parts)
    if isinstance(loss, ZCDP):
        return ZCDP(loss.rho / parts)
    raise InvalidParameterError("spend", loss, "a PureDP, ApproxDP or ZCDP loss")


def _std(kind: str, mechanism: str, expected_abs: float | None, halfwidth: float) -> float | None:
    """A noise's standard deviation from what its accuracy says: Laplace-like noise has
    std = √2·E|Z|, Gaussian noise std = √(π/2)·E|Z|."""
    if kind != "exact" or expected_abs is None:
        return None
    if "gauss" in mechanism:
        return expected_abs * math.sqrt(math.pi / 2)
    return expected_abs * math.sqrt(2)


def tune(
    session: Session,
    query: Query,
    *,
    epsilon: Number,
    spend: PrivacyLoss | None = None,
    alpha: float = 0.05,
    mechanism: Mechanism = "auto",
    parts_of: Any = None,
) -> Tuning:
    """See :meth:`dpkit.analytics.Session.tune` (which checks ``epsilon`` against the query
    floor and ceiling first). ``parts_of``: tests only (a hook that may
    change the list of parts the charge is composed from, to show the test catches it)."""
    from dpkit.analytics._planner import validate
    from dpkit.analytics._planner._rewrite import rewrite

    session._check_open()
    eps = check_epsilon(epsilon)
    dry_run, check_engine = session._dry_run, session._check_engine
    if not 0 < alpha < 1:
        raise InvalidParameterError("alpha", alpha, "in (0, 1), e.g. 0.05")
    if session.catalog is not None:
        raise UnsupportedQueryError(
            "tuning works on a session over one table; declare max_rows, max_per_key and "
            "bounds for a query over several tables"
        )
    node = query.plan if isinstance(query, Query) else None
    if not isinstance(node, Aggregate):
        raise UnsupportedQueryError(
            "only aggregated queries can be tuned: finish the query with .agg(count(), ...)"
        )
    unit = session.privacy_unit
    declared = session.defaults.merged(node.bounding)
    grouped = bool(node.keys)
    private_keys = grouped and node.key_set is None
    # aggregations without bounds whose column has none registered: bounds to estimate
    written = written_aggregations(node.aggregations)
    to_bound = tuple(
        dict.fromkeys(
            a.column for a in written if isinstance(a, Unbounded) and a.column not in session.bounds
        )
    )
    # public checks before anything is reserved: the filters and columns, the bounded columns
    probe = replace(node, aggregations=(count(),), bounding=Bounding(max_rows=1))
    checked = validate(Query(probe), session.schema, unit)
    for column in to_bound:
        if checked.schema.get(column) != "numeric":
            raise InvalidParameterError("column", column, "a numeric column of the table")

    names = ["rows"]
    if grouped and declared.max_groups is None:
        names.append("groups")
    names += [f"bounds of {c}" for c in to_bound]
    if private_keys:
        names.append("selection")
    located = _located(written, session.bounds)
    names += [f"values of {c}" for c in located]
    # each part an equal share, but a column's values (one noisy sum, precise at a small ε)
    # half of one
    weights = {n: Fraction(1, 2) if n.startswith("values of") else Fraction(1) for n in names}
    share = eps / sum(weights.values())
    parts: dict[str, PrivacyLoss] = {name: PureDP(share * weights[name]) for name in names}
    charged_parts = dict(parts) if parts_of is None else dict(parts_of(dict(parts)))
    charge = compose(*charged_parts.values())

    # the budget the forecasts assume: given, or what is left after tuning
    if spend is not None:
        # tuning for a release the budget cannot pay for would spend the share for nothing:
        # both together must fit now (checked again by the ledger when each is charged)
        both = compose(charge, spend)
        if not session.ledger.can_afford(session.dataset, both, session.analyst):
            raise BudgetExceededError(
                both,
                session.remaining,
                scope=f"dataset {session.dataset!r}",
                hint="Tuning and the release it prepares together exceed the budget; nothing "
                "was charged. Ask for less, or have an officer raise the budget.",
            )
    else:
        left = session.remaining
        if isinstance(left, PureDP | ApproxDP) and left.epsilon < eps:
            spend = left  # the ledger refuses the tuning itself (over budget), nothing charged
        elif isinstance(left, PureDP) and left.epsilon > eps:
            spend = PureDP(left.epsilon - eps)
        elif isinstance(left, ApproxDP) and left.epsilon > eps:
            spend = ApproxDP(left.epsilon - eps, left.delta)
        if spend is None:
            raise InvalidParameterError(
                "spend",
                None,
                "the budget of the release to forecast (e.g. spend=dp.PureDP(1))",
                "The budget left after tuning cannot be used as the default here.",
            )
    budget = _as_budget(spend)

    counts_steps = rewrite(checked.steps, frozenset({unit, *node.keys}))
    salt = int(random_words(1)[0] >> np.uint64(2))
    counts_plan = BoundedPlan(
        counts_steps,
        unit,
        (unit, *node.keys),
        None,
        None,
        None,
        None,
        salt,
        (),
        (Output("rows"),),
    )

    def tuned_query(found: _Found, cap: int | None = None) -> Query:
        rows = cap if cap is not None else found.max_rows
        bounding = Bounding(
            rows, found.max_groups if grouped else None, declared.max_rows_per_group
        )
        aggs = tuple(
            a.bounded(found.bounds[a.column])
            if isinstance(a, Unbounded) and a.column in found.bounds
            else a
            for a in written
        )
        return replace(query, plan=replace(node, aggregations=cast(Any, aggs), bounding=bounding))

    calibrate = _Calibrate(session, budget, mechanism, alpha)

    def bounds_plan(column: str, cap: int) -> Any:
        return session._bounds_plan(column, checked, cap, salt)

    def values_plan(column: str, cap: int) -> tuple[BoundedPlan, int, int]:
        """The plan summing ``column``'s values clamped to its bounds, at most ``cap`` rows per
        unit, on the grid ``2^exponent`` (at most 2^20 steps from 0): (plan, exponent,
        the largest |grid value|, so one unit moves the sum by at most cap times it)."""
        lo, hi = located[column]
        top = max(abs(lo), abs(hi))
        exponent = math.ceil(math.log2(top)) - 20
        largest = math.ceil(math.ldexp(top, -exponent))
        plan = BoundedPlan(
            rewrite(checked.steps, frozenset({unit, column})),
            unit,
            (),
            None,
            cap,
            None,
            None,
            salt,
            (ValueSpec(column, lo, hi, exponent),),
            (Output("sum", 0),),
        )
        return plan, exponent, largest

    def rehearse() -> None:
        check_engine(session.engine, counts_plan)
        guess = _Found(max_rows=declared.max_rows or 1, max_groups=declared.max_groups or 1)
        guess.bounds = {c: (0.0, 1.0) for c in to_bound}
        dry_run(calibrate(tuned_query(guess)), alpha)
        for column in to_bound:
            plan, choose = bounds_plan(column, guess.max_rows or 1)
            check_engine(session.engine, plan)
            choose(np.zeros(len(plan.bins.edges) - 1, dtype=np.int64), Fraction(share))
        for column in located:
            check_engine(session.engine, values_plan(column, guess.max_rows or 1)[0])

    def body(stage: Stage) -> _Found:
        found = _Found()
        stage(reading=True, doing="counting each unit's rows")
        table = session.engine.run(counts_plan)
        stage(reading=False)
        unit_ids = table.column(counts_plan.group_columns[0])
        rows = np.asarray(table.column(counts_plan.output_columns[0]).to_numpy(), np.int64)
        per_unit = pa.table({"u": unit_ids, "r": pa.array(rows)}).group_by("u")
        totals = per_unit.aggregate([("r", "sum"), ("r", "count")])
        unit_rows = np.asarray(totals.column("r_sum").to_numpy(), dtype=np.int64)
        unit_groups = np.asarray(totals.column("r_count").to_numpy(), dtype=np.int64)
        from dpkit.mechanisms import make_geometric

        hist_mechanism = make_geometric(sensitivity=1, epsilon=share)
        found.rows_hist = np.asarray(hist_mechanism(_bins(unit_rows, COUNT_EDGES)))
        found.used.append(("rows", hist_mechanism.loss))
        rows_hist = _denoise(found.rows_hist, share, 1, extrapolate=True)
        if "groups" in parts:
            found.groups_hist = np.asarray(hist_mechanism(_bins(unit_groups, COUNT_EDGES)))
            found.used.append(("groups", hist_mechanism.loss))
            groups_hist = _denoise(found.groups_hist, share, 1)
            found.max_groups = _quantile_edge(groups_hist, COUNT_EDGES, _GROUPS_QUANTILE)
        else:
            found.max_groups = declared.max_groups
        # bounds first, with a provisional cap (the noisy 90th percentile of rows per unit)
        provisional = declared.max_rows or _quantile_edge(rows_hist, COUNT_EDGES, 0.9)
        for column in to_bound:
            plan, choose = bounds_plan(column, provisional)
            stage(reading=True, doing=f"binning {column}")
            binned = session.engine.run(plan).to_pydict()
            stage(reading=False)
            counts = np.zeros(len(plan.bins.edges) - 1, dtype=np.int64)
            bins, values = binned[plan.group_columns[0]], binned[plan.output_columns[0]]
            counts[np.asarray(bins, dtype=np.int64)] = np.asarray(values, dtype=np.int64)
            found.bounds[column] = choose(counts, Fraction(share))
            found.used.append((f"bounds of {column}", PureDP(share)))
        for column in located:
            # the sum of the column's clamped values, at most `provisional` rows per unit: one
            # unit moves it by at most provisional·largest (grid units), the geometric
            # mechanism's sensitivity; the cap is a post-processing of the rows part
            plan, exponent, largest = values_plan(column, provisional)
            stage(reading=True, doing=f"summing {column}")
            summed = session.engine.run(plan).column(plan.output_columns[0]).to_pylist()
            stage(reading=False)
            exact = int(sum(v for v in summed if v is not None))
            loss = parts[f"values of {column}"]
            sum_mechanism = make_geometric(
                sensitivity=provisional * largest, epsilon=cast(PureDP, loss).epsilon
            )
            noisy = int(sum_mechanism(exact))
            found.sums[column] = (math.ldexp(noisy, exponent), provisional, *located[column])
            found.used.append((f"values of {column}", sum_mechanism.loss))
        calibrate.locations = _locations(found, rows_hist)
        if declared.max_rows is not None:
            found.max_rows = declared.max_rows
        else:
            found.max_rows = _best_cap(rows_hist, found, tuned_query, calibrate, alpha)
        if grouped and found.max_groups is not None:
            found.max_groups = min(found.max_groups, found.max_rows)
        if private_keys:
            m = found.max_groups or found.max_rows
            keep = _first_groups(unit_ids, m)
            group_keys = table.select(list(counts_plan.group_columns[1:])).filter(keep)
            per_group = (
                group_keys.append_column("one", pa.array(np.ones(group_keys.num_rows, np.int64)))
                .group_by(list(group_keys.column_names))
                .aggregate([("one", "sum")])
            )
            units = np.asarray(per_group.column("one_sum").to_numpy(), dtype=np.int64)
            sel_mechanism = make_geometric(sensitivity=2 * m, epsilon=share)
            found.units_hist = np.asarray(sel_mechanism(_bins(units, COUNT_EDGES)))
            found.used.append(("selection", sel_mechanism.loss))
        return found

    found, receipt = release(
        session._books,
        charge,
        body,
        query=f"tune({node.render()[:400]})",
        mechanism="geometric" + (", exponential" if to_bound else ""),
        rehearse=rehearse,
        rehearsing="checking the tuning on public inputs",
    )
    tuned = tuned_query(found)
    report = _report(found, tuned, calibrate, spend, charge, parts, alpha, receipt, declared)
    return Tuning(tuned, report)


def _as_budget(spend: PrivacyLoss) -> dict[str, Any]:
    if isinstance(spend, ApproxDP):
        return {"epsilon": spend.epsilon, "delta": spend.delta}
    if isinstance(spend, PureDP):
        return {"epsilon": spend.epsilon}
    if isinstance(spend, ZCDP):
        return {"rho": spend.rho}
    raise InvalidParameterError("spend", spend, "a PureDP, ApproxDP or ZCDP loss")


def _first_groups(unit_ids: Any, m: int) -> Any:
    """A mask keeping, for each unit, at most ``m`` of its (unit, group) rows: the first in a
    random order drawn afresh (it depends on nothing but the unit's own rows)."""
    n = len(unit_ids)
    order_key = random_words(n) if n else np.zeros(0, dtype=np.uint64)
    codes = np.asarray(pa.compute.dictionary_encode(unit_ids).combine_chunks().indices)
    order = np.lexsort((order_key, codes))
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_codes)) + 1] if n else np.zeros(0, np.int64)
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n])) if n else np.zeros(0)
    keep = np.zeros(n, dtype=bool)
    keep[order] = rank < m
    return pa.array(keep)


def _located(
    written: tuple[Any, ...], registered: Mapping[str, tuple[Any, Any]]
) -> dict[str, tuple[float, float]]:
    """The columns of sums and means whose bounds are known before tuning (written or
    registered; public), with those bounds: the tuning estimates where their values lie."""
    out: dict[str, tuple[float, float]] = {}
    for a in written:
        if isinstance(a, Unbounded):
            kind, bounds = a.function, registered.get(a.column)
        else:
            kind, bounds = type(a).__name__.lower(), getattr(a, "bounds", None)
        if kind not in ("sum", "mean") or bounds is None:
            continue
        lo, hi = float(bounds[0]), float(bounds[1])
        if lo < hi and max(abs(lo), abs(hi)) > 0:
            out.setdefault(a.column, (lo, hi))
    return out


def _locations(found: _Found, rows_hist: np.ndarray) -> dict[str, float]:
    """Per located column, the estimated mean of its clamped values: the noisy sum over the
    rows the histogram says its cap kept, inside the bounds (post-processing, free)."""
    out: dict[str, float] = {}
    total = dropped_rows(rows_hist, COUNT_EDGES, 0)
    for column, (noisy, cap, lo, hi) in found.sums.items():
        kept = total - dropped_rows(rows_hist, COUNT_EDGES, cap)
        out[column] = min(max(noisy / max(kept, 1.0), lo), hi)
    return out


def _magnitudes(q: Query, calibrate: Any) -> dict[str, tuple[str, float, float, float, float]]:
    """Per aggregation name: (function, typical magnitude |x|, half-width of its bounds,
    distance of the values' mean from the bounds' centre, the values' spread). Without a
    private estimate of the mean (``calibrate.locations``), the mean is taken at the centre;
    the spread is the smaller of a uniform's over the bounds (half/√3) and the largest any
    values with that mean can have, √((mean − lo)(hi − mean)) (Bhatia-Davis)."""
    out: dict[str, tuple[str, float, float, float, float]] = {}
    node = cast("Aggregate", q.plan)  # built by tune from an Aggregate
    registered = calibrate.session.bounds
    locations: Mapping[str, float] = getattr(calibrate, "locations", {})
    for a in written_aggregations(node.aggregations):
        if isinstance(a, Unbounded):
            kind, bounds = a.function, registered.get(a.column)
        else:
            kind, bounds = type(a).__name__.lower(), getattr(a, "bounds", None)
        if bounds is None:
            out[a.name] = (kind, 1.0, 0.5, 0.0, 0.5 / math.sqrt(3))
            continue
        lo, hi = float(bounds[0]), float(bounds[1])
        half, mid = (hi - lo) / 2, (hi + lo) / 2
        column = str(getattr(a, "column", ""))
        spread = half / math.sqrt(3)
        if column in locations:
            m = locations[column]
            magnitude, offset = abs(m), abs(m - mid)
            spread = min(spread, math.sqrt(max((m - lo) * (hi - m), 0.0)))
        else:
            magnitude, offset = (abs(lo) + abs(hi)) / 2, 0.0
        out[a.name] = (kind, max(magnitude, 1e-300), half, offset, spread)
    return out


def _forecasts(
    tuned: Query,
    calibrate: Any,
    alpha: float,
    rows_hist: np.ndarray,
    cap: int,
) -> tuple[dict[str, Forecast], float, float]:
    """(forecasts, kept rows, dropped rows) of ``tuned`` (public calibration + noisy
    histogram only)."""
    measurement = calibrate(tuned)
    dry_run = calibrate.session._dry_run
    compiled = measurement.compiled
    empty = [
        pa.table({name: pa.array([], type=pa.int64()) for name in plan.result_columns})
        for plan in compiled.plans
    ]
    dry_run(measurement, alpha)
    _, accuracy = compiled.release(empty, alpha)
    total = dropped_rows(rows_hist, COUNT_EDGES, 0)
    dropped = dropped_rows(rows_hist, COUNT_EDGES, cap)
    kept = max(total - dropped, 1.0)
    magnitudes = _magnitudes(tuned, calibrate)
    out: dict[str, Forecast] = {}
    for name, acc in accuracy.items():
        function, magnitude, half, offset, spread = magnitudes.get(
            name, ("", 1.0, 0.5, 0.0, 0.5 / math.sqrt(3))
        )
        std = _std(acc.kind, acc.mechanism, acc.expected_abs, acc.halfwidth)
        bias = 0.0
        halfwidth = acc.halfwidth
        if function == "count" or name.startswith("count"):
            bias = -dropped
        elif function == "sum":
            bias = -dropped * magnitude
        elif function == "mean":
            # the mean's two noisy sums (values centred on the bounds, and rows) each spend half
            # of its loss, σ1·half and σ1: mean − centre = S/n, so its error is about
            # (δS − (mean − centre)·δn)/n, of std σ1·√(half² + offset²)/rows (the offset is
            # the estimated mean's distance from the centre: 0 when not estimated)
            unit_std = _count_std(tuned, name, calibrate, alpha)
            std = None if unit_std is None else unit_std * math.hypot(half, offset) / kept
            if std is not None:
                halfwidth = std * _z(alpha)
            # dropping rows leaves a subsample: its mean differs from all rows' by about
            # sd(x)·√(1/kept − 1/rows), sd(x) the spread above
            total = kept + dropped
            bias = spread * math.sqrt(max(1 / kept - 1 / total, 0.0))
        out[name] = Forecast(name, acc.kind, std, halfwidth, bias, acc.mechanism)
    return out, kept, dropped


def _z(alpha: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(1 - alpha / 2)


def _count_std(tuned: Query, name: str, calibrate: Any, alpha: float) -> float | None:
    """σ of a count with half a mean's loss, under the tuned bounding (public calibration)."""
    node = cast("Aggregate", tuned.plan)
    measurement = calibrate(tuned)
    loss = measurement.split.get(name)
    if loss is None:
        return None
    half = _share(loss, 2)
    single = replace(tuned, plan=replace(node, aggregations=(count(),)))
    try:
        helper = _calibrate_with(calibrate, single, half)
    except DPError:
        return None
    acc = helper
    return _std(acc.kind, acc.mechanism, acc.expected_abs, acc.halfwidth)


def _calibrate_with(calibrate: Any, q: Query, loss: PrivacyLoss) -> Any:
    """The accuracy of the single aggregation of ``q`` compiled with ``loss``."""
    measurement = calibrate.with_loss(q, loss)
    compiled = measurement.compiled
    empty = [
        pa.table({name: pa.array([], type=pa.int64()) for name in plan.result_columns})
        for plan in compiled.plans
    ]
    _, accuracy = compiled.release(empty, 0.05)
    return next(iter(accuracy.values()))


class _Calibrate:
    """Compiles a query with the forecast budget (public: no data read)."""

    def __init__(
        self, session: Session, budget: dict[str, Any], mechanism: Mechanism, alpha: float
    ) -> None:
        self.session, self.budget, self.mechanism, self.alpha = session, budget, mechanism, alpha
        self.locations: dict[str, float] = {}
        """Estimated means of located columns (set by the tuning, from its release)."""

    def __call__(self, q: Query) -> Any:
        return self.session.compile(
            q,
            mechanism=self.mechanism,
            alpha=self.alpha,
            **self.budget,
        )

    def with_loss(self, q: Query, loss: PrivacyLoss) -> Any:
        return self.session.compile(q, loss=loss, mechanism=self.mechanism, alpha=self.alpha)


def _best_cap(
    rows_hist: np.ndarray, found: _Found, tuned_query: Any, calibrate: Any, alpha: float
) -> int:
    """The grid edge minimising Σ_a (err_a/scale_a)² (see the module docstring)."""
    nonzero = np.flatnonzero(rows_hist > 0)
    top = int(nonzero[-1]) + 1 if nonzero.size else 1
    total = max(dropped_rows(rows_hist, COUNT_EDGES, 0), 1.0)
    best, best_score = 1, math.inf
    limit = COUNT_EDGES[min(top, len(COUNT_EDGES) - 1)]
    for cap in (c for c in CAP_CANDIDATES if c <= limit):
        try:
            forecasts, _, _ = _forecasts(tuned_query(found, cap), calibrate, alpha, rows_hist, cap)
        except DPError:
            continue
        magnitudes = _magnitudes(tuned_query(found, cap), calibrate)
        score = 0.0
        for name, f in forecasts.items():
            if f.rmse is None:
                continue
            function, magnitude, half, _, _ = magnitudes.get(name, ("", 1.0, 0.5, 0.0, 0.0))
            scale = total * magnitude if function in ("sum",) else total
            if function == "mean":
                scale = max(half, 1e-300)
            score += (f.rmse / scale) ** 2
        if score < best_score:
            best, best_score = cap, score
    return best


def _report(
    found: _Found,
    tuned: Query,
    calibrate: Any,
    spend: PrivacyLoss,
    charge: PrivacyLoss,
    parts: Mapping[str, PrivacyLoss],
    alpha: float,
    receipt: Any,
    declared: Bounding,
) -> TuningReport:
    if found.rows_hist is None or found.max_rows is None:  # pragma: no cover - body sets them
        raise UnsupportedQueryError("internal: the tuning release found no histogram")
    share = next(iter(parts.values()))
    epsilon = share.epsilon if isinstance(share, PureDP) else Fraction(1)
    rows_hist = _denoise(found.rows_hist, epsilon, 1, extrapolate=True)
    forecasts, kept, dropped = _forecasts(tuned, calibrate, alpha, rows_hist, found.max_rows)
    total = kept + dropped
    units = float(rows_hist.sum())
    groups = suppressed = None
    if found.units_hist is not None:
        m = found.max_groups or found.max_rows
        units_hist = _denoise(found.units_hist, epsilon, 2 * m)
        groups, suppressed = _suppressed(units_hist, calibrate(tuned))
    chosen = tuple(
        [*(["max_rows"] if declared.max_rows is None else [])]
        + (["max_groups"] if "groups" in parts else [])
        + [f"bounds of {c}" for c in found.bounds]
    )
    return TuningReport(
        max_rows=found.max_rows,
        max_groups=found.max_groups,
        chosen=chosen,
        bounds=dict(found.bounds),
        forecasts=forecasts,
        units=units,
        rows=total,
        dropped_rows_share=dropped / total if total > 0 else 0.0,
        groups=groups,
        suppressed_groups=suppressed,
        spend=spend,
        loss=charge,
        parts=dict(parts),
        alpha=alpha,
        receipt=receipt,
        means=dict(calibrate.locations),
    )


def _suppressed(units_hist: np.ndarray, measurement: Any) -> tuple[float, float]:
    """(groups, groups suppressed) estimated from the noisy histogram of units per group and
    the selection's public noise and threshold (its noise sampled: post-processing)."""
    compiled = measurement.compiled
    selection = compiled.selection
    groups = float(units_hist.sum())
    if selection is None:
        return groups, 0.0
    lattice = selection.measurement.noise.lattice
    draws = np.asarray(lattice.sample(4000), dtype=np.float64)
    reps = _representatives(COUNT_EDGES)
    kept = (reps[:, None] + draws[None, :] >= compiled.selection_threshold).mean(axis=1)
    return groups, float(np.sum(units_hist * (1 - kept)))
