"""Marginals and range counts over declared domains: the matrix mechanism on a Session table.

``marginals(cliques, domains=...)`` and ``ranges(column, domain=..., kind=...)`` (built and
checked in :mod:`dpkit.analytics._declared`) are answered from ONE bounded plan whose group keys
are the declared columns, after a filter ``col IN (declared values)`` per declared column. The
engine (DuckDB, pandas or Spark: the same :class:`BoundedPlan` semantics) therefore:

* keeps at most ``k`` rows per privacy unit, ``k`` = the query's row bound (``max_rows``, or
  ``max_rows_per_group`` when smaller: the ungrouped contribution bound), chosen by the salted
  row hash, i.e. from the unit's own rows only;
* drops rows whose value of a declared column is NULL or not a declared value, inside the
  query (domains are public; nothing is read from the data to build them);
* counts rows per cell (one GROUP BY over the declared columns).

A neighbouring table (one unit added or removed) moves the histogram x by at most ``k`` in L1:
the unit's kept rows, each in at most one cell. Hence every marginal moves by at most ``k`` in
L1 (and so in L2), and a range strategy's integer matrix B moves B·x by at most
``k·max_j‖b_j‖`` (triangle inequality over the changed cells).

**Marginals** are released by OPT_M (:func:`dpkit.workloads.optimize_marginals`, HDMM's
marginals optimiser over the downward closure of the cliques, McKenna et al. 2018 §6) with
exact lattice noise: each measured marginal a gets iid discrete Gaussian noise (zCDP share ρ:
cost Σ_a k²/(2 s_a² k²) <= ρ, Canonne, Kamath & Steinke 2020) or discrete Laplace noise (pure
share ε: cost Σ_a k/t_a = ε exactly), then generalised least squares in ResidualPlanner's
residual basis gives unbiased cells with exact per-cell variances
(:meth:`MarginalsStrategy.release`). ``choose_strategy`` also reports dpkit's exact
ResidualPlanner release and ResidualPlanner's optimum (Xiao et al. 2023); OPT_M starts from
ResidualPlanner's allocation, so it is never worse than that exact release.

**Ranges** (prefix, all-range or fixed-width windows over the ordered cells) use
:func:`dpkit.workloads.choose_strategy` (identity, hierarchical, wavelet, OPT_0: the smallest
analytic error) quantised to an integer matrix B (:func:`make_strategy_measurement`): y = B·x
+ Z with iid discrete Laplace (ε = k·max_j‖b_j‖₁/t) or discrete Gaussian noise
(ρ = k²·max_j‖b_j‖₂²/(2σ²)), and the answers W·(A_qᵀA_q)⁻¹A_qᵀ·y (unbiased; variance
v·wᵢᵀ(A_qᵀA_q)⁻¹wᵢ per query, Li et al. 2015).

Intervals. Each released value is its true value plus a fixed linear combination of
independent lattice noises with the stated variance V. Under a zCDP share every noise is a
discrete Gaussian N_Z(0, σ²), which is σ²-sub-Gaussian (CKS 2020), so the sum is sub-Gaussian
with parameter at most V·max(σ²/Var) and ``sqrt(2·ln(2/α)·V·max(σ²/Var))`` is a valid
(1 - α) half-width. Under a pure share (discrete Laplace) the half-width is Chebyshev's
``sqrt(V/α)``: valid for any distribution, conservative.

Nothing here reads data: strategies, noise and losses come from the declared domains, the
contribution bound and the budget share.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit.analytics._declared import render as render_declared
from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._columns import canonical
from dpkit.analytics._expr import Expr, col
from dpkit.analytics._planner._compiled import Context, GroupKey, OutputRegistry
from dpkit.analytics._planner._noise import Share
from dpkit.analytics._planner._registry import (
    Compiled,
    Family,
    FamilyContext,
    Form,
    Use,
    register_family,
)
from dpkit.analytics._query import MarginalCounts, RangeCounts, marginals, ranges
from dpkit.analytics._results import Accuracy
from dpkit.core._losses import PrivacyLoss
from dpkit.errors import UnsupportedQueryError
from dpkit.noise._distributions import DiscreteGaussian, LatticeNoise

__all__ = ["MarginalsPlan", "RangesPlan", "plan_marginals", "plan_ranges"]

_VARIANCE_FLOOR = 1e-250
"""The smallest per-cell noise variance the least-squares weights use (1/v stays finite for
tables of up to 2^52 per cell)."""

STRATEGY_SECONDS = 1.0
"""The optimisation budget of a Session strategy (OPT_M or OPT_0) per distinct workload."""


def _scale(share: Share, contributions: int) -> float:
    """Noise variance per unit sensitivity of the share, relative to choose_strategy's unit
    noise (L2: σ² = 1; L1: Laplace b = 1)."""
    c = contributions
    if share.family == "pure":
        return float(c * c / (share.amount * share.amount))
    return float(c * c / (2 * share.amount))


def _halfwidths(variances: np.ndarray, ratio: float, pure: bool, alpha: float) -> np.ndarray:
    """Valid (1 - α) half-widths for sums of independent lattice noises (module doc)."""
    v = np.maximum(np.asarray(variances, dtype=np.float64), 0.0)
    if pure:
        return np.sqrt(v / alpha)
    return np.sqrt(2 * math.log(2 / alpha) * v * ratio)


def _gaussian_ratio(noises: list[LatticeNoise]) -> float:
    """max σ²/Var over discrete Gaussian noises (>= 1: Var(N_Z(0, σ²)) < σ²)."""
    ratios = [
        float(z.sigma2) / z.variance()
        for z in noises
        if isinstance(z, DiscreteGaussian) and z.variance() > 0
    ]
    return max([1.0, *ratios])


def _require_ungrouped(agg: MarginalCounts | RangeCounts, ctx: FamilyContext) -> None:
    if ctx.n_keys is not None or ctx.private_keys:
        raise UnsupportedQueryError(
            f"{agg.name!r}: marginals(...) and ranges(...) answer the whole table; use "
            "query().agg(...) without group_by (add the grouping column to the marginal's "
            "clique, with its declared domain, instead)"
        )


def _cell_index(columns: tuple[tuple[Any, ...], ...]) -> dict[GroupKey, int]:
    """Canonical key tuple -> flat (C-order) cell index over the product of the domains."""
    return {
        tuple(canonical(v) for v in row): i for i, row in enumerate(itertools.product(*columns))
    }


def _histogram(
    rows: Mapping[GroupKey, Mapping[int, list[int]]], index: Mapping[GroupKey, int], n: int
) -> np.ndarray:
    """The exact histogram from the engine's groups (keys outside the declared product cannot
    occur: the filter drops them; any that did would be ignored, never raised on)."""
    x = np.zeros(n, dtype=np.int64)
    for key, bins in rows.items():
        i = index.get(key)
        if i is not None:
            x[i] += int(bins.get(0, [0])[0])
    return x


# ----------------------------------------------------------------------------- marginals
@functools.lru_cache(maxsize=32)
def _marginals_choice(domain: tuple[int, ...], sets: tuple[tuple[int, ...], ...], norm: str) -> Any:
    from dpkit.workloads import Marginals, choose_strategy

    return choose_strategy(Marginals(domain, sets), norm, max_seconds=STRATEGY_SECONDS)  # type: ignore[arg-type]


class MarginalsPlan:
    """The public part of a marginals release: strategy, noise, loss (no data)."""

    def __init__(self, agg: MarginalCounts, share: Share, contributions: int) -> None:
        from dpkit.workloads import MarginalsStrategy, ResidualPlan

        self.agg = agg
        self.share = share
        self.contributions = contributions
        self.domain = tuple(len(d) for d in agg.domains)
        self.cells = math.prod(self.domain)
        self.pure = share.family == "pure"
        norm = "l1" if self.pure else "l2"
        self.choice = _marginals_choice(self.domain, agg.cliques, norm)
        strategy = self.choice.strategy
        if isinstance(strategy, ResidualPlan):
            # the exact ResidualPlanner allocation as an OPT_M strategy: the same noise
            # (u_a = 1/σ_a²), reconstructed by GLS over every measured marginal
            support = list(strategy.sigma2)
            u = np.array([1.0 / strategy.sigma2[a] for a in support])
            strategy = MarginalsStrategy(
                self.domain, list(agg.cliques), [1.0] * len(agg.cliques), support, u / u.max(), "l2"
            )
        self.strategy: Any = strategy
        budget = {"epsilon": share.amount} if self.pure else {"rho": share.amount}
        self.noise, self.loss = strategy.noise(contributions=contributions, **budget)
        self.index = _cell_index(agg.domains)
        self.ratio = 1.0 if self.pure else _gaussian_ratio(list(self.noise.values()))

    def declared(self) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]:
        """The declared columns and their domains (the engine's filter and group keys)."""
        return self.agg.columns, self.agg.domains

    def histogram(self, rows: Mapping[GroupKey, Mapping[int, list[int]]]) -> np.ndarray:
        return _histogram(rows, self.index, self.cells)

    def measured_tables(self, x: np.ndarray) -> dict[tuple[int, ...], np.ndarray]:
        """The exact marginal table of every measured attribute set (numpy sums of x)."""
        cube = np.asarray(x, dtype=np.int64).reshape(self.domain)
        out: dict[tuple[int, ...], np.ndarray] = {}
        for a in self.noise:
            drop = tuple(i for i in range(len(self.domain)) if i not in a)
            out[a] = np.asarray(cube.sum(axis=drop) if drop else cube)
        return out

    def release_arrays(
        self, x: np.ndarray, runs: int | None = None
    ) -> tuple[list[np.ndarray], list[float]]:
        """One release (``runs=None``), or ``runs`` independent releases on the same histogram
        (tables with a leading axis of length ``runs``): the workload's marginal tables in
        clique order, and their per-cell variances.

        The measured marginal a is its exact table plus iid lattice noise ``noise[a]`` (as
        :meth:`MarginalsStrategy.release`, vectorised over runs); generalised least squares in
        the residual basis with the exact lattice variances v_a: residual b is
        (1/κ_b)·Σ_{a⊇b} t_{a,b}/v_a, κ_b = Σ_{a⊇b} 1/(v_a·cells_a), and marginal B is
        Σ_{b⊆B} residual b / cells_B, each cell with variance Σ_{b⊆B} dim_b/(cells_B²·κ_b).
        """
        n_runs = 1 if runs is None else int(runs)
        dom = self.domain
        exact = self.measured_tables(x)
        noisy: dict[tuple[int, ...], np.ndarray] = {}
        var: dict[tuple[int, ...], float] = {}
        for a, lattice in self.noise.items():
            table = np.clip(exact[a], 0, 2**52)
            z = lattice.sample(n_runs * max(1, table.size)).reshape((n_runs, *table.shape))
            noisy[a] = (table[None] + z).astype(np.float64)
            # floored: at a large ε the lattice's variance underflows to 0 (the measurement is
            # exact), and 1/0 in the weights below failed after the charge
            var[a] = max(float(lattice.variance()), _VARIANCE_FLOOR)
        from dpkit.workloads._residual import _subsets as subsets

        closure = sorted(
            {b for c in self.agg.cliques for b in subsets(c)}, key=lambda t: (len(t), t)
        )
        resid: dict[tuple[int, ...], np.ndarray] = {}
        kappa: dict[tuple[int, ...], float] = {}
        for b in closure:
            acc: np.ndarray | float = 0.0
            k = 0.0
            for a, y in noisy.items():
                if not set(b) <= set(a):
                    continue
                drop = tuple(1 + pos for pos, i in enumerate(a) if i not in b)
                t = y.sum(axis=drop) if drop else y
                t = t / math.prod(dom[i] for i in a if i not in b)
                for axis in range(len(b)):
                    t = t - t.mean(axis=1 + axis, keepdims=True)
                acc = acc + t / var[a]
                k += 1.0 / (var[a] * math.prod(dom[i] for i in a))
            kappa[b] = k  # > 0: the strategy covers every residual of the workload
            resid[b] = np.asarray(acc) / k
        tables: list[np.ndarray] = []
        variances: list[float] = []
        for clique in self.agg.cliques:
            shape = tuple(dom[i] for i in clique)
            cells = math.prod(shape)
            out = np.zeros((n_runs, *shape))
            v = 0.0
            for b in subsets(clique):
                idx = (slice(None), *(slice(None) if i in b else None for i in clique))
                out = out + resid[b][idx] / cells
                v += math.prod(dom[i] - 1 for i in b) / (cells * cells * kappa[b])
            tables.append(out[0] if runs is None else out)
            variances.append(v)
        return tables, variances

    def expected_error(self) -> float:
        """The analytic expected total squared error of the released cells."""
        return float(self.choice.errors[self.choice.chosen]) * _scale(
            self.share, self.contributions
        )

    def table(self, x: np.ndarray, alpha: float) -> tuple[pd.DataFrame, float]:
        tables, variances = self.release_arrays(x)
        agg = self.agg
        parts: list[pd.DataFrame] = []
        for clique, values, var in zip(agg.cliques, tables, variances, strict=True):
            label = "×".join(agg.columns[i] for i in clique)
            cells = list(itertools.product(*(agg.domains[i] for i in clique)))
            frame = pd.DataFrame({"marginal": [label] * len(cells)})
            for pos, column in enumerate(agg.columns):
                if pos in clique:
                    k = clique.index(pos)
                    frame[column] = pd.Series([c[k] for c in cells], dtype=object)
                else:
                    frame[column] = pd.Series([None] * len(cells), dtype=object)
            value = values.reshape(-1)
            h = float(_halfwidths(np.array([var]), self.ratio, self.pure, alpha)[0])
            frame["value"] = value
            frame["std_error"] = math.sqrt(var)
            frame["low"] = value - h
            frame["high"] = value + h
            parts.append(frame)
        first = _halfwidths(np.array([variances[0]]), self.ratio, self.pure, alpha)[0]
        return pd.concat(parts, ignore_index=True), float(first)

    def _direct_error(self) -> float:
        """The baseline: every clique measured once with equal weight (unit noise, as the
        choice's errors), reconstructed the same way."""
        from dpkit.workloads import MarginalsStrategy

        sets = list(self.agg.cliques)
        direct = MarginalsStrategy(
            self.domain, sets, [1.0] * len(sets), sets, np.ones(len(sets)), self.strategy.norm
        )
        return float(direct.expected_error(2.0 if self.pure else 1.0))

    def describe(self) -> str:
        scale = _scale(self.share, self.contributions)
        noise = "geometric" if self.pure else "discrete_gaussian"
        shown = ", ".join("×".join(self.agg.columns[i] for i in c) for c in self.agg.cliques)
        errors = dict(self.choice.errors)
        errors["each marginal measured directly"] = self._direct_error()
        others = [
            f"{name} {err * scale:.4g}"
            for name, err in sorted(errors.items(), key=lambda kv: kv[1])
            if name != self.choice.chosen
        ]
        line = (
            f"{len(self.agg.cliques)} marginal(s) [{shown}] over {self.cells} declared cells "
            f"(one GROUP BY on {', '.join(self.agg.columns)}; values outside the domains or "
            f"NULL dropped), {noise} noise, sensitivity {self.contributions} row(s) per "
            f"marginal; strategy {self.choice.chosen} (expected total squared error "
            f"{self.expected_error():.4g}"
        )
        if others:
            line += "; alternatives: " + ", ".join(others)
        if self.choice.bound is not None:
            line += f"; {self.choice.bound_name} {self.choice.bound * scale:.4g}"
        return line + ")"


def plan_marginals(agg: MarginalCounts, share: Share, contributions: int) -> MarginalsPlan:
    """The marginals release for ``agg`` (public inputs only)."""
    return MarginalsPlan(agg, share, contributions)


# ----------------------------------------------------------------------------- ranges
@functools.lru_cache(maxsize=32)
def _ranges_choice(kind: str, n: int, width: int, norm: str) -> Any:
    from dpkit.workloads import choose_strategy

    return choose_strategy(_range_workload(kind, n, width), norm, max_seconds=STRATEGY_SECONDS)  # type: ignore[arg-type]


def _range_workload(kind: str, n: int, width: int) -> Any:
    from dpkit.workloads import AllRange, Prefix, WidthRange

    if kind == "prefix":
        return Prefix(n)
    if kind == "all_range":
        return AllRange(n)
    return WidthRange(n, width)


class RangesPlan:
    """The public part of a range-counts release: strategy, its quantised integer matrix B,
    the lattice noise, the loss and the reconstruction (no data)."""

    def __init__(self, agg: RangeCounts, share: Share, contributions: int) -> None:
        from dpkit.workloads import make_strategy_measurement

        self.agg = agg
        self.share = share
        self.contributions = contributions
        self.n = len(agg.domain)
        self.pure = share.family == "pure"
        norm = "l1" if self.pure else "l2"
        self.workload = _range_workload(agg.kind, self.n, agg.width)
        self.choice = _ranges_choice(agg.kind, self.n, agg.width, norm)
        self.measurement = make_strategy_measurement(
            self.choice.strategy,
            norm=norm,  # type: ignore[arg-type]
            contributions=contributions,
            epsilon=share.amount if self.pure else None,
            rho=None if self.pure else share.amount,
        )
        from dpkit.workloads._measure import matrix_info

        info = matrix_info(self.measurement)
        self.quantised = info.quantised
        self.lattice: LatticeNoise = info.lattice
        self.loss: PrivacyLoss = self.measurement.loss
        self.index = {(canonical(v),): i for i, v in enumerate(agg.domain)}
        self.ratio = 1.0 if self.pure else _gaussian_ratio([self.lattice])
        self._solved: tuple[np.ndarray, np.ndarray] | None = None

    def declared(self) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]:
        """The declared column and its domain (the engine's filter and group key)."""
        return (self.agg.column,), (self.agg.domain,)

    def histogram(self, rows: Mapping[GroupKey, Mapping[int, list[int]]]) -> np.ndarray:
        return _histogram(rows, self.index, self.n)

    def _solve(self) -> tuple[np.ndarray, np.ndarray]:
        """(AᵀA)⁻¹ of the quantised strategy and the per-query variances (computed once)."""
        if self._solved is None:
            import scipy.linalg as sla

            from dpkit.workloads import query_variances

            a = self.quantised.matrix().toarray()  # A_q = B·2^-k
            cov = sla.cho_solve(sla.cho_factor(a.T @ a, lower=True), np.eye(self.n))
            v = self.lattice.variance() * math.ldexp(1.0, -2 * self.quantised.exponent)
            self._solved = (np.asarray(cov), v * query_variances(self.workload, cov))
        return self._solved

    def release_arrays(
        self, x: np.ndarray, runs: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One release (``runs=None``), or ``runs`` independent releases on the same histogram
        (answers with a leading axis of length ``runs``): the answers (unbiased) and their
        variances. The measurement is the one :meth:`make_strategy_measurement` defines:
        y = B·clip(x, 0, cap) + Z, Z iid lattice noise (vectorised over runs)."""
        n_runs = 1 if runs is None else int(runs)
        cov, variances = self._solve()
        q = self.quantised
        clipped = np.clip(np.asarray(x, dtype=np.int64).reshape(-1), 0, q.cap)
        exact = np.asarray(q.integer_matrix @ clipped, dtype=np.int64)
        y = exact[None, :] + self.lattice.sample(n_runs * exact.size).reshape(n_runs, -1)
        rhs = q.matrix().T @ (y.T.astype(np.float64) * math.ldexp(1.0, -q.exponent))
        answers = np.asarray(self.workload.matmat(cov @ np.asarray(rhs))).T  # runs × queries
        return (answers[0] if runs is None else answers), variances

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The first and last cell index of every query, in answer order."""
        n = self.n
        if self.agg.kind == "prefix":
            return np.zeros(n, dtype=np.int64), np.arange(n)
        if self.agg.kind == "all_range":
            i, j = np.triu_indices(n)
            return i.astype(np.int64), j.astype(np.int64)
        w = self.agg.width
        start = np.arange(n - w + 1)
        return start, start + w - 1

    def expected_error(self) -> float:
        return float(self.choice.errors[self.choice.chosen]) * _scale(
            self.share, self.contributions
        )

    def table(self, x: np.ndarray, alpha: float) -> tuple[pd.DataFrame, float]:
        answers, variances = self.release_arrays(x)
        first, last = self.bounds()
        domain = np.asarray(self.agg.domain)
        h = _halfwidths(variances, self.ratio, self.pure, alpha)
        frame = pd.DataFrame(
            {
                "start": domain[first],
                "end": domain[last],
                "value": answers,
                "std_error": np.sqrt(variances),
                "low": answers - h,
                "high": answers + h,
            }
        )
        return frame, float(h[0])

    def describe(self) -> str:
        scale = _scale(self.share, self.contributions)
        noise = "geometric" if self.pure else "discrete_gaussian"
        chosen = self.choice.chosen
        others = [
            f"{name} {err * scale:.4g}"
            for name, err in sorted(self.choice.errors.items(), key=lambda kv: kv[1])
            if name != chosen
        ]
        line = (
            f"{self.workload.shape[0]} {self.agg.kind} range(s) of {self.agg.column!r} over "
            f"{self.n} declared cells (values not declared or NULL dropped), {noise} noise on "
            f"B·x, sensitivity {self.contributions} row(s) × max column norm of B; strategy "
            f"{chosen} (expected total squared error {self.expected_error():.4g}"
        )
        if others:
            line += "; alternatives: " + ", ".join(others)
        if self.choice.bound is not None and not self.pure:
            line += f"; SVD lower bound {self.choice.bound * scale:.4g}"
        return line + ")"


def plan_ranges(agg: RangeCounts, share: Share, contributions: int) -> RangesPlan:
    """The range-counts release for ``agg`` (public inputs only)."""
    return RangesPlan(agg, share, contributions)


# ----------------------------------------------------------------------------- compilers
def _compile(plan: MarginalsPlan | RangesPlan, ctx: FamilyContext) -> Compiled:
    agg = plan.agg
    registry = OutputRegistry()
    registry.output("rows")
    base = ctx.make_plan(registry)
    columns, domains = plan.declared()
    # rows whose value of a declared column is NULL or undeclared are dropped by a filter
    # (one IN list per column: the product of the domains, never a key table of every cell)
    predicate: Expr | None = None
    for column, values in zip(columns, domains, strict=True):
        test = col(column).is_in(values)
        predicate = test if predicate is None else predicate & test
    assert predicate is not None
    # one GROUP BY over the declared columns; at most `c` rows per unit in total (the
    # ungrouped bound), whatever group limits the session declares for grouped queries
    bounded = replace(
        base,
        steps=(*base.steps, Step("filter", expr=predicate)),
        keys=columns,
        key_set=None,
        max_rows=plan.contributions,
        max_groups=None,
        max_rows_per_group=None,
    )
    ctx.extra_plans.append(bounded)
    index = len(ctx.extra_plans)
    mechanism = "geometric" if plan.pure else "discrete_gaussian"

    def finish(context: Context) -> None:
        x = plan.histogram(context.extra[index])
        table, first = plan.table(x, context.alpha)
        context.tables[agg.name] = table
        context.accuracy[agg.name] = Accuracy(
            "exact",
            first,
            context.alpha,
            mechanism,
            plan.loss,
            None,
            "matrix mechanism over the declared domain; values are unbiased raw estimates "
            "(a count may come out negative); std_error from the strategy; intervals: "
            + (
                "Chebyshev sqrt(V/α) (discrete Laplace noise)"
                if plan.pure
                else "sub-Gaussian bound of the discrete Gaussian noise"
            ),
        )

    return finish, [Use(mechanism, plan.loss)], plan.describe()


def compile_marginals(agg: MarginalCounts, ctx: FamilyContext) -> Compiled:
    _require_ungrouped(agg, ctx)
    return _compile(plan_marginals(agg, ctx.share, ctx.contrib.rows_l1), ctx)


def compile_ranges(agg: RangeCounts, ctx: FamilyContext) -> Compiled:
    _require_ungrouped(agg, ctx)
    return _compile(plan_ranges(agg, ctx.share, ctx.contrib.rows_l1), ctx)


def _display_declared(frame: pd.DataFrame, agg: MarginalCounts | RangeCounts) -> None:
    """Their tables (``marginal`` or ``start``, then value / std_error / low / high): counts
    clipped at 0 and rounded."""
    if "std_error" in frame.columns and {"marginal", "start"} & set(frame.columns):
        for name in ("value", "low", "high"):
            frame[name] = np.round(frame[name].astype("float64").clip(lower=0))


register_family(
    Family(
        MarginalCounts,
        (Form(marginals),),
        compile_marginals,
        render=render_declared,
        value_columns=lambda agg: agg.columns,
        display=_display_declared,
        table=True,
        summary="marginal counts over declared domains, released as a table",
    )
)
register_family(
    Family(
        RangeCounts,
        (Form(ranges),),
        compile_ranges,
        render=render_declared,
        display=_display_declared,
        table=True,
        summary="range counts over a declared ordered domain, released as a table",
    )
)
