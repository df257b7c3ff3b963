"""Quantiles: the exponential mechanism over a public grid (:mod:`dpkit.analytics._em`), and the
data-dependent methods (inverse sensitivity, smooth sensitivity, PTR) on a fine grid
(:mod:`dpkit.analytics._dd_quantile`), chosen by ``method=`` or by the public ``"auto"`` rule.


Everything here is decided from public information only: the declared bounds, the budget share
(ε, or ρ through ε = √(2ρ), and the query's δ), the declared contribution bounds and, for
``"auto"``, the declared ``n_range`` of rows per group. Nothing reads the data; the mechanisms
run on the engine's per-group counts of the values rounded to a fine public grid
(:mod:`dpkit.analytics._dd_quantile`, whose docstring and docs/sensitivity.md §10 give the
proofs).

**Neighbours and groups.** One privacy unit has at most ``k = rows_per_group`` rows in a group,
``L1 = rows_l1`` rows in total, in at most ``G = groups`` groups.

* ``inverse``: P(t) ∝ exp(−ε·len(x; t)/(2·L1)) per group. A unit with x_g rows in group g moves
  that group's path lengths by at most x_g (one per row), so group g costs ε·x_g/L1 and all
  groups together at most ε (the exponential mechanism's bound, as for ``"exponential"``).
* ``smooth``: per group ε/G with the unit-level β-smooth bound for k rows; pure ε/G-DP per group
  (Cauchy-type noise, γ = 4, calibrated by :func:`dpkit.sensitivity._smooth.plan_smooth`), so at
  most ε over the G groups one unit can touch. Under a zCDP share ρ: per group ρ/G-zCDP with a
  Bun–Steinke family (:func:`dpkit.sensitivity._smooth.plan_zcdp`, the family with the smallest
  noise sd unless ``noise=`` names one), so at most ρ over the G groups (zCDP composition).
* ``ptr``: per group (ε/G, δ/G): half of ε/G for the noisy distance-to-instability test, half for
  the Laplace release with the proposed bound; basic composition over the G groups.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import log_upper
from dpkit.analytics._bounding import Contribution
from dpkit.analytics._dd_quantile import (
    SMOOTH_BETA_CAP,
    GroupCounts,
    inverse_release,
    ptr_release,
    smooth_release,
)
from dpkit.analytics._em import em_quantile_index, rank_error_bound
from dpkit.analytics._engines._base import BinSpec, BoundedPlan, ValueSpec
from dpkit.analytics._planner._compiled import Context, OutputRegistry
from dpkit.analytics._planner._noise import Share, ceil_log2, floor_log2, grid_range
from dpkit.analytics._planner._registry import (
    Compiled,
    Family,
    FamilyContext,
    Form,
    Use,
    register_family,
)
from dpkit.analytics._query import Quantile, dyadic_step, median, quantile, render_bounded
from dpkit.analytics._results import Accuracy, clip_columns
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import UnsupportedQueryError

__all__ = [
    "AUTO_ALPHA",
    "FINE_BITS",
    "DataDependentQuantile",
    "build",
    "choose_method",
    "compile_quantile",
]

FINE_BITS = 32
"""The data-dependent methods use a grid of 2^-32 of the bounds' width (about 4·10^9 points)."""

AUTO_ALPHA = Fraction(1, 20)
"""The auto rule compares the inverse mechanism's 95% path-length bound with the rows."""

SMOOTH_OUTPUT_SHIFT = 20
"""Smooth-sensitivity outputs live on a grid 2^20 times finer than the value grid, so the
lattice's minimum scale (2^20 output steps, docs/sensitivity.md §3) is one value-grid step."""


def inverse_rank_bound(candidates: int, epsilon: Fraction, l1: int, alpha: Fraction) -> float:
    """With probability >= 1 − α the inverse mechanism's output has path length at most this
    (exponential mechanism: (2Δ/ε)(ln C + ln(1/α)) with C candidates)."""
    return 2 * l1 / float(epsilon) * (math.log(candidates) + math.log(float(1 / alpha)))


def choose_method(
    method: str,
    q: Fraction,
    n_range: tuple[int, int] | None,
    epsilon: Fraction,
    l1: int,
    fine_candidates: int,
    candidate_set: bool = False,
) -> tuple[str, str]:
    """The method to run and the rule that chose it (public inputs only).

    ``"auto"``: ``"exponential"`` over the declared values when ``candidates=`` is a public set
    of values (``candidate_set``): every row is counted at its nearest candidate, so rows tied
    at a value are counted exactly; otherwise ``"inverse"`` when a row-count range is declared
    and the inverse mechanism's 95% path-length bound (2·L1/ε)(ln C + ln 20) is at most
    min(q, 1 − q)·n_min — the number of rows on the thin side of the quantile at the smallest
    declared n, so its output lies inside the data with probability >= 95% — otherwise
    ``"exponential"`` (no n is known, or too few rows for the fine grid: the coarse candidate
    grid is then more accurate). Smooth sensitivity and PTR are never chosen automatically:
    inverse sensitivity was more accurate in every row of the
    benchmark (docs/sensitivity.md §9).
    """
    if method != "auto":
        return method, f"method={method!r} requested"
    if candidate_set:
        return (
            "exponential",
            "auto: candidates= declares the public values, so the exponential mechanism over "
            "them counts tied rows exactly",
        )
    if n_range is None:
        return (
            "exponential",
            "auto: no n_range declared, so the rows per group are unknown and the "
            "exponential mechanism over the coarse grid is used",
        )
    bound = inverse_rank_bound(fine_candidates, epsilon, l1, AUTO_ALPHA)
    thin = float(min(q, 1 - q)) * n_range[0]
    if bound <= thin:
        return (
            "inverse",
            f"auto: the inverse mechanism's 95% path-length bound {bound:.4g} <= "
            f"min(q, 1-q)·n_min = {thin:.4g} (n_range={n_range})",
        )
    return (
        "exponential",
        f"auto: the inverse mechanism's 95% path-length bound {bound:.4g} > "
        f"min(q, 1-q)·n_min = {thin:.4g} (n_range={n_range}): too few rows for the fine grid",
    )


@dataclass(frozen=True)
class DataDependentQuantile:
    """A calibrated data-dependent quantile: ``release(group)`` returns the released float (NaN
    for a PTR refusal); ``loss`` is the aggregation's total loss; ``text`` says what runs."""

    method: str
    q: Fraction
    exponent: int
    lo: int
    hi: int
    loss: PrivacyLoss
    text: str
    params: dict[str, Any]

    def group(self, values: Any, counts: Any) -> GroupCounts:
        return GroupCounts(values, counts, self.lo, self.hi)

    def release(self, group: GroupCounts) -> float:
        p = self.params
        if self.method == "inverse":
            return math.ldexp(float(inverse_release(group, self.q, p["rate"])), self.exponent)
        if self.method == "smooth":
            index = smooth_release(group, self.q, p["k"], p["plan"], p["shift"])
            return math.ldexp(float(index), self.exponent - p["shift"])
        value = ptr_release(
            group,
            self.q,
            p["k"],
            p["bound_steps"],
            p["epsilon_test"],
            p["threshold"],
            p["cap"],
            p["scale"],
        )
        return math.nan if value is None else math.ldexp(float(value), self.exponent)


def build(
    method: str,
    q: Fraction,
    lo: int,
    hi: int,
    exponent: int,
    epsilon: Fraction,
    delta: Fraction,
    rows_l1: int,
    rows_per_group: int,
    groups: int,
    ptr_bound: Fraction | None,
    *,
    rho: Fraction | None = None,
    noise: str = "auto",
    beta: Fraction | None = None,
) -> DataDependentQuantile:
    """Calibrate ``method`` ("inverse", "smooth" or "ptr") from public inputs only.

    ``rho``: the aggregation's zCDP share when the query is answered in zCDP (else None);
    ``noise``: the smooth method's noise family (``"auto"`` or a name, see
    :func:`dpkit.analytics._query.quantile`); ``beta``: the smooth method's unit-level β (default
    from the budget; tests pass a wrong one to build broken variants).
    """
    from dpkit.sensitivity._smooth import plan_smooth

    step = Fraction(2) ** exponent
    if method == "inverse":
        rate = epsilon / (2 * rows_l1)
        text = (
            f"inverse sensitivity mechanism (Asi & Duchi 2020) over {hi - lo + 1} grid points "
            f"(step 2^{exponent}): P(t) ∝ exp(-ε·len(t)/(2·{rows_l1})), ε={float(epsilon):.4g}, "
            f"len = rows to add or remove for the quantile to be t"
        )
        return DataDependentQuantile(
            method, q, exponent, lo, hi, PureDP(epsilon), text, {"rate": rate}
        )
    per_group = epsilon / groups
    k = rows_per_group
    if method == "smooth" and (noise in ZCDP_NOISES or (noise == "auto" and rho is not None)):
        return _build_smooth_zcdp(q, lo, hi, exponent, rho, noise, k, groups, beta, epsilon, delta)
    if method == "smooth":
        plan = plan_smooth(
            per_group, Fraction(0), "cauchy", 4, exponent - SMOOTH_OUTPUT_SHIFT, beta
        )
        assert isinstance(plan.loss, PureDP)
        loss = PureDP(plan.loss.epsilon * groups)
        text = (
            f"smooth sensitivity mechanism (Nissim, Raskhodnikova & Smith 2007), Cauchy-type noise "
            f"(γ=4, α={float(plan.alpha):.4g}, β={float(plan.beta):.4g}) per group at "
            f"ε={float(per_group):.4g}, k={k} rows per unit (β/k per row), on grid 2^{exponent}"
        )
        params = {"plan": plan, "k": k, "shift": SMOOTH_OUTPUT_SHIFT, "family": "cauchy"}
        return DataDependentQuantile(method, q, exponent, lo, hi, loss, text, params)
    if method != "ptr":  # pragma: no cover - callers pass the three methods
        raise UnsupportedQueryError(f"unknown data-dependent method {method!r}")
    if ptr_bound is None:  # pragma: no cover - checked when the aggregation is built
        raise UnsupportedQueryError("method='ptr' needs ptr_bound")
    if delta <= 0:
        raise UnsupportedQueryError(
            "method='ptr' needs a δ (its test fails with probability δ): pass an (ε, δ) budget "
            "(e.g. epsilon=1, delta=1e-6) with public (or no) group keys, and mechanism="
            "'laplace' if the query's other aggregations would otherwise be answered in zCDP"
        )
    delta_group = delta / groups
    eps_test = per_group / 2
    eps_release = per_group - eps_test
    threshold = math.ceil(log_upper(1 / delta_group) / eps_test)
    cap = threshold + math.ceil(Fraction(40) / eps_test) + 1
    bound_steps = ptr_bound / step
    scale = Fraction(math.ceil(bound_steps)) / eps_release
    ptr_loss: PrivacyLoss = ApproxDP(epsilon, delta)
    text = (
        f"propose-test-release mechanism (Dwork & Lei 2009), proposed sensitivity "
        f"{float(ptr_bound):g}: "
        f"per group, release only if the distance to instability (in units of {k} rows) + "
        f"discrete Laplace(1/{float(eps_test):.4g}) > {threshold}, then Laplace noise at "
        f"ε={float(eps_release):.4g}; δ={float(delta_group):.3g} per group; a refusal is "
        "released as NaN"
    )
    params = {
        "k": k,
        "bound_steps": bound_steps,
        "epsilon_test": eps_test,
        "threshold": threshold,
        "cap": cap,
        "scale": scale,
    }
    return DataDependentQuantile(method, q, exponent, lo, hi, ptr_loss, text, params)


ZCDP_NOISES = ("laplace_log_normal", "uniform_log_normal", "student_t", "arcsinh_normal")
ZCDP_BETA_SHARE = Fraction(1, 8)
"""Under a zCDP share the smooth method's unit-level β is ε_g/8, ε_g = √(2ρ_g) (the default of
:func:`dpkit.sensitivity._smooth.plan_zcdp` for the log-normal families), for every family."""

_METHOD_MECHANISM = {
    "inverse": "inverse_sensitivity",
    "smooth": "smooth_sensitivity",
    "ptr": "propose_test_release",
}
"""The mechanism the ledger records for each data-dependent quantile method."""

_FAMILY_TEXT = {
    "laplace_log_normal": "Laplace log-normal",
    "uniform_log_normal": "uniform log-normal",
    "student_t": "Student's t",
    "arcsinh_normal": "arcsinh-normal",
}


def _build_smooth_zcdp(
    q: Fraction,
    lo: int,
    hi: int,
    exponent: int,
    rho: Fraction | None,
    noise: str,
    k: int,
    groups: int,
    beta: Fraction | None,
    epsilon: Fraction,
    delta: Fraction,
) -> DataDependentQuantile:
    """Smooth sensitivity with a Bun–Steinke zCDP family, ρ/G per group (public inputs only).

    ``rho`` is the zCDP share; without one (a pure share of an (ε, δ) query whose δ this
    aggregation may spend) an explicitly requested family runs at the largest ρ whose
    conversion at δ is at most ε, and the loss is that (ε', δ)."""
    from dpkit.analytics._planner._noise import rho_for
    from dpkit.sensitivity._bun_steinke import lipschitz_upper, noise_sd, smallest_sd
    from dpkit.sensitivity._smooth import _BETA_SLACK, plan_zcdp

    converted = rho is None
    if rho is None:
        if delta <= 0:
            raise UnsupportedQueryError(
                f"noise={noise!r} is a zCDP noise family: it needs a zCDP budget (rho=) or an "
                "(ε, δ) budget with public (or no) group keys; under a pure ε budget use "
                "noise='cauchy' or 'auto'"
            )
        rho = rho_for(epsilon, delta)
    per_group = rho / groups
    if beta is None:
        eps_g = math.sqrt(2 * float(per_group))
        # at most SMOOTH_BETA_CAP: the release computes its bound with β <= the cap anyway,
        # and a β of thousands (ρ = 1e9) overflowed e^β in the calibration
        share = min(eps_g * float(ZCDP_BETA_SHARE) * (1 - 1e-6), SMOOTH_BETA_CAP)
        beta = Fraction(share) - _BETA_SLACK
        if beta <= 0:
            raise UnsupportedQueryError(f"ρ per group {float(per_group):.3g} is too small")
    if noise == "auto":
        chosen = smallest_sd(per_group, beta + _BETA_SLACK).family
        rule = (
            "noise=auto under a zCDP share: the Bun–Steinke family whose noise has the smallest "
            "sd at this (ρ, β)"
        )
    else:
        chosen, rule = noise, f"noise={noise!r} requested"
    plan = plan_zcdp(per_group, chosen, 0, beta)
    z = plan.zcdp
    assert z is not None and isinstance(plan.loss, ZCDP)
    loss: PrivacyLoss = ZCDP(plan.loss.rho * groups)
    if converted:
        loss = ZCDP(plan.loss.rho * groups).to_approx(delta)
        rule += f" (ρ={float(rho):.4g} converted to (ε, δ={float(delta):.3g}))"
    if chosen == "student_t":
        law = f"d={z.d}, ε = (d+1)/(2√d)·s + d·t"
    elif chosen == "arcsinh_normal":
        law = f"σ={float(z.sigma):.4g}, ε = K, the privacy loss's Lipschitz constant in Y"
    else:
        lip = float(lipschitz_upper(chosen, z.sigma, z.d))
        law = f"σ={float(z.sigma):.4g}, ε = t/σ + L·s with L={lip:.4g}"
    text = (
        f"smooth sensitivity mechanism (Nissim, Raskhodnikova & Smith 2007), "
        f"{_FAMILY_TEXT[chosen]} noise (Bun & Steinke 2019; {law}, s={float(z.s):.4g}, "
        f"t=β={float(beta):.4g}, noise sd {noise_sd(z):.4g}·S) per group at "
        f"ρ={float(plan.loss.rho):.4g}-zCDP (ε={float(z.epsilon):.4g}), k={k} rows per unit "
        f"(β/k per row), exact grid rounding on grid 2^{exponent}; {rule}"
    )
    params = {"plan": plan, "k": k, "shift": 0, "family": chosen}
    return DataDependentQuantile("smooth", q, exponent, lo, hi, loss, text, params)


def fine_exponent(low: Fraction, high: Fraction) -> int:
    """The fine grid's exponent: 2^-32 of the width, and no finer than 2^-44 of the magnitude
    (so indices stay far below 2^53)."""
    magnitude = max(abs(low), abs(high))
    width = high - low
    e_width = math.floor(math.log2(width)) if width > 0 else 0
    while Fraction(2) ** (e_width + 1) <= width:
        e_width += 1
    while Fraction(2) ** e_width > width:
        e_width -= 1
    e_mag = math.ceil(math.log2(magnitude)) if magnitude > 0 else e_width
    return max(e_width - FINE_BITS, e_mag - 44)


def compile_data_dependent(
    agg: Any,
    method: str,
    reason: str,
    epsilon: Fraction,
    delta: Fraction,
    rows_l1: int,
    rows_per_group: int,
    groups: int,
    add_plan: Any,
    rho: Fraction | None = None,
) -> tuple[Any, list[Use], str]:
    """(finisher, losses, explanation) of a data-dependent quantile aggregation.

    ``add_plan(value_spec)`` registers an extra bounded plan with grid bins on ``value_spec``
    and returns (plan index, index of its "rows" output). The finisher reads that plan's
    per-group bin counts from the release context (``ctx.extra``) and writes the column.
    """
    from dpkit.analytics._engines._base import ValueSpec
    from dpkit.analytics._engines._pandas import grid_indices
    from dpkit.analytics._results import Accuracy

    low, high = agg.bounds
    exponent = fine_exponent(low, high)
    low_f, high_f = float(low), float(high)
    idx, _ = grid_indices(np.array([low_f, high_f]), low_f, high_f, exponent)
    lo, hi = int(idx[0]), int(idx[1])
    calibrated = build(
        method,
        agg.q,
        lo,
        hi,
        exponent,
        epsilon,
        delta,
        rows_l1,
        rows_per_group,
        groups,
        agg.ptr_bound,
        rho=rho,
        noise=agg.noise,
    )
    plan_index, out = add_plan(ValueSpec(agg.column, low_f, high_f, exponent))
    name = agg.name

    def finish(ctx: Any) -> None:
        per_group = ctx.extra[plan_index]
        released = []
        for group in ctx.groups:
            bins = per_group.get(group, {})
            values = np.array(list(bins.keys()), dtype=np.int64)
            counts = np.array([outputs[out] for outputs in bins.values()], dtype=np.int64)
            released.append(calibrated.release(calibrated.group(values, counts)))
        ctx.columns[name] = np.array(released, dtype=np.float64)
        if method == "inverse":
            bound = inverse_rank_bound(hi - lo + 1, epsilon, rows_l1, Fraction(ctx.alpha))
            ctx.accuracy[name] = Accuracy(
                "rank",
                bound,
                ctx.alpha,
                "inverse_sensitivity",
                calibrated.loss,
                None,
                f"with probability >= {1 - ctx.alpha:g} the released value is at most "
                f"{bound:.3g} rows (added or removed) away from being the group's q-quantile",
            )
        elif method == "smooth":
            ctx.accuracy[name] = Accuracy(
                "approximate",
                math.nan,
                ctx.alpha,
                "smooth_sensitivity",
                calibrated.loss,
                None,
                "the noise scale is the data's smooth sensitivity, which is not released",
            )
        else:
            scale = float(calibrated.params["scale"]) * 2.0**exponent
            half = scale * math.log(1 / ctx.alpha)
            ctx.accuracy[name] = Accuracy(
                "exact",
                half,
                ctx.alpha,
                "propose_test_release",
                calibrated.loss,
                scale,
                "when released (NaN means PTR refused: the data were too close to an unstable "
                "table); the interval is the Laplace noise's",
            )

    text = f"{calibrated.text}; {reason}"
    # the ledger records the smooth method's noise family too (the guarantee depends on it)
    family = calibrated.params.get("family")
    mechanism = _METHOD_MECHANISM[method] + (f"({family})" if family else "")
    return finish, [Use(mechanism, calibrated.loss)], text


def _em_note(bound: float, alpha: float, rounding: str) -> str:
    """The exponential mechanism's guarantee in words (what :func:`rank_error_bound` bounds)."""
    rows = f"{bound:,.1f}"
    return (
        f"with probability {100 * (1 - alpha):g}%, in each group, at most q·n + {rows} rows lie "
        f"below the released value and at least q·n - {rows} rows lie at or below it "
        f"(n: the group's rows with a value; {rounding}), so rows tied at the value count on "
        "either side"
    )


def _em_finisher(
    agg: Quantile,
    plan_index: int,
    out: int,
    candidates: int,
    offset: int,
    value_of: Callable[[int], float],
    epsilon: Fraction,
    sensitivity: int,
    loss: PrivacyLoss,
    rounding: str,
) -> Callable[[Context], None]:
    """Per group: the rows at each candidate (bin ``offset + j``), their rank intervals
    [below_j, upto_j], and the exponential mechanism over them (:mod:`dpkit.analytics._em`)."""

    def finish(ctx: Context) -> None:
        per_group = ctx.extra[plan_index]
        values = []
        for group in ctx.groups:
            bins = per_group.get(group, {})
            counts = np.zeros(candidates, dtype=np.int64)
            for b, outputs in bins.items():
                counts[b - offset] = outputs[out]
            upto = np.cumsum(counts)
            below = upto - counts
            n = int(counts.sum())
            j = em_quantile_index(
                [int(b) for b in below], [int(u) for u in upto], n, agg.q, epsilon, sensitivity
            )
            values.append(value_of(j))
        ctx.columns[agg.name] = np.array(values, dtype=np.float64)
        bound = rank_error_bound(candidates, epsilon, sensitivity, ctx.alpha)
        note = _em_note(bound, ctx.alpha, rounding)
        ctx.accuracy[agg.name] = Accuracy("rank", bound, ctx.alpha, "exponential", loss, None, note)

    return finish


def _compile_quantile(
    agg: Quantile,
    share: Share,
    contrib: Contribution,
    extra_plans: list[BoundedPlan],
    make_plan: Callable[..., BoundedPlan],
) -> Compiled:
    if isinstance(agg.candidates, tuple):
        return _compile_candidate_set(agg, agg.candidates, share, contrib, extra_plans, make_plan)
    low, high = agg.bounds
    magnitude = max(abs(low), abs(high))
    exponent = max(floor_log2((high - low) / agg.candidates), ceil_log2(magnitude) - 40)
    step = math.ldexp(1.0, exponent)
    return _compile_grid(
        agg,
        agg.bounds,
        exponent,
        share,
        contrib,
        extra_plans,
        make_plan,
        "values clamped to the bounds and rounded to the nearest point of the grid of step "
        f"{step:g}",
        "grid points",
    )


def _compile_grid(
    agg: Quantile,
    bounds: tuple[Fraction, Fraction],
    exponent: int,
    share: Share,
    contrib: Contribution,
    extra_plans: list[BoundedPlan],
    make_plan: Callable[..., BoundedPlan],
    rounding: str,
    what: str,
) -> Compiled:
    """The exponential mechanism over the points of the grid 2^exponent in ``bounds``; the
    engine rounds each clamped value to the nearest point (half-way up) and counts them."""
    low_f, high_f, lo, hi = grid_range(bounds, exponent)
    registry = OutputRegistry()
    value = registry.value(ValueSpec(agg.column, low_f, high_f, exponent))
    out = registry.output("rows")
    plan_index = len(extra_plans) + 1
    extra_plans.append(make_plan(registry, BinSpec("grid", value=value)))
    epsilon = share.epsilon()
    sensitivity = contrib.rows_l1
    candidates = hi - lo + 1
    loss = PureDP(epsilon)
    finish = _em_finisher(
        agg,
        plan_index,
        out,
        candidates,
        lo,
        lambda j: math.ldexp(float(lo + j), exponent),
        epsilon,
        sensitivity,
        loss,
        rounding,
    )
    text = (
        f"exponential mechanism over {candidates} {what} of [{low_f:g}, {high_f:g}] "
        f"(step 2^{exponent}), ε={float(epsilon):.4g}, utility sensitivity {sensitivity}; "
        "utility −dist(q·n, [rows below, rows at or below]) (ties count on either side)"
    )
    return finish, [Use("exponential", loss)], text


def candidate_edges(values: tuple[Fraction, ...]) -> tuple[float, ...]:
    """Bin edges that send every value to its nearest candidate (a value exactly half-way goes
    to the larger one): −inf, the float64 midpoints of consecutive candidates, +inf."""
    floats = [float(v) for v in values]
    mids = [a / 2 + b / 2 for a, b in itertools.pairwise(floats)]
    return (-math.inf, *mids, math.inf)


def _compile_candidate_set(
    agg: Quantile,
    values: tuple[Fraction, ...],
    share: Share,
    contrib: Contribution,
    extra_plans: list[BoundedPlan],
    make_plan: Callable[..., BoundedPlan],
) -> Compiled:
    """The exponential mechanism over a declared public set of candidate values: the engine
    counts the rows whose nearest candidate is each value (bins between the midpoints), so rows
    tied at a candidate are counted exactly, with no grid rounding. Consecutive multiples of a
    power of two (``range(0, 91)``) are the points of a grid: the engine rounds to it, which is
    the same nearest-candidate rule without a CASE over the midpoints."""
    exponent = dyadic_step(values)
    if exponent is not None:
        return _compile_grid(
            agg,
            (values[0], values[-1]),
            exponent,
            share,
            contrib,
            extra_plans,
            make_plan,
            "each value moved to its nearest candidate",
            "declared candidate values (consecutive grid points)",
        )
    registry = OutputRegistry()
    out = registry.output("rows")
    plan_index = len(extra_plans) + 1
    extra_plans.append(
        make_plan(registry, BinSpec("edges", column=agg.column, edges=candidate_edges(values)))
    )
    epsilon = share.epsilon()
    sensitivity = contrib.rows_l1
    loss = PureDP(epsilon)
    floats = [float(v) for v in values]
    finish = _em_finisher(
        agg,
        plan_index,
        out,
        len(values),
        0,
        lambda j: floats[j],
        epsilon,
        sensitivity,
        loss,
        "each value moved to its nearest candidate",
    )
    text = (
        f"exponential mechanism over the {len(values)} declared candidate values "
        f"[{floats[0]:g} .. {floats[-1]:g}], each row counted at its nearest candidate, "
        f"ε={float(epsilon):.4g}, utility sensitivity {sensitivity}; utility "
        "−dist(q·n, [rows below, rows at or below]) (ties count on either side)"
    )
    return finish, [Use("exponential", loss)], text


def compile_quantile(agg: Quantile, ctx: FamilyContext) -> Compiled:
    """The exponential mechanism, or a data-dependent method (``agg.method``, or the public
    ``"auto"`` rule of :func:`choose_method`); ``explain()`` gets the rule that chose it."""
    exponent = fine_exponent(*agg.bounds)
    fine = int((agg.bounds[1] - agg.bounds[0]) / Fraction(2) ** exponent) + 1
    epsilon = ctx.share.epsilon()
    chosen, reason = choose_method(
        agg.method,
        agg.q,
        agg.n_range,
        epsilon,
        ctx.contrib.rows_l1,
        fine,
        isinstance(agg.candidates, tuple),
    )
    if chosen == "exponential":
        finish, uses, text = _compile_quantile(
            agg, ctx.share, ctx.contrib, ctx.extra_plans, ctx.make_plan
        )
        return finish, uses, f"{text}; {reason}"

    def add_plan(spec: ValueSpec) -> tuple[int, int]:
        registry = OutputRegistry()
        value = registry.value(spec)
        out = registry.output("rows")
        return ctx.add_plan(registry, BinSpec("grid", value=value)), out

    return compile_data_dependent(
        agg,
        chosen,
        reason,
        epsilon,
        ctx.delta,
        ctx.contrib.rows_l1,
        ctx.contrib.rows_per_group,
        ctx.contrib.groups,
        add_plan,
        ctx.share.amount if ctx.share.family == "zcdp" else None,
    )


def _render_quantile(agg: Quantile) -> str:
    extra = f", q={agg.q}"
    if agg.method != "auto":
        extra += f", method={agg.method}"
    if agg.noise != "auto":
        extra += f", noise={agg.noise}"
    if isinstance(agg.candidates, tuple):
        first, last = float(agg.candidates[0]), float(agg.candidates[-1])
        extra += f", {len(agg.candidates)} candidates in [{first:g}, {last:g}]"
    return render_bounded("quantile", agg, extra)


register_family(
    Family(
        Quantile,
        (
            Form(quantile, ("column", "q", "lower", "upper"), sql=("QUANTILE",), op="quantile"),
            Form(median, ("column", "lower", "upper"), sql=("MEDIAN",), op="median"),
        ),
        compile_quantile,
        render=_render_quantile,
        display=lambda frame, agg: clip_columns(
            frame, agg.name, float(agg.bounds[0]), float(agg.bounds[1])
        ),
        columns=lambda agg: (agg.name,),
        summary="a quantile (or the median) of a clamped column",
    )
)
