"""Compiling a query: the budget's family, each aggregation's compiler, partition selection,
and the exact check that the calibrated loss fits the query budget."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import numpy as np

from dpkit._exact import log_upper
from dpkit.analytics._bounding import Contribution, contribution
from dpkit.analytics._engines._base import BinSpec, BoundedPlan
from dpkit.analytics._expr import (
    ColumnKind,
)
from dpkit.analytics._families import family_of
from dpkit.analytics._planner._compiled import CompiledQuery, Finisher, Noisy, OutputRegistry
from dpkit.analytics._planner._noise import Share, rho_for, sqrt_down
from dpkit.analytics._planner._registry import FamilyContext, compiler_for
from dpkit.analytics._planner._rewrite import rewrite
from dpkit.analytics._planner._types import Mechanism, Part, Use
from dpkit.analytics._planner._validate import validate, value_columns
from dpkit.analytics._query import (
    Bounding,
    Query,
)
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, compose
from dpkit.errors import InvalidParameterError, PrivacyCheckError, UnsupportedQueryError
from dpkit.mechanisms import make_geometric
from dpkit.noise import random_words


# ------------------------------------------------------------------ compile
def _family_for(
    budget: PrivacyLoss,
    mechanism: Mechanism,
    contrib: Contribution,
    private_keys: bool,
    selection_share: Fraction,
    gaussian_helps: bool = True,
) -> tuple[Share, Share | None, Fraction]:
    """(aggregation share, selection share, selection δ).

    ``gaussian_helps``: some aggregation can use Gaussian noise; when none can (e.g. only
    ``mode``, a pure-ε selection), "auto" keeps an (ε, δ) budget's share pure."""
    if mechanism not in ("auto", "laplace", "gaussian"):
        raise InvalidParameterError("mechanism", mechanism, "'auto', 'laplace' or 'gaussian'")
    if isinstance(budget, PureDP):
        if private_keys:
            raise UnsupportedQueryError(
                "private group keys need a δ: the noisy threshold that picks which groups to "
                "release fails with a small probability δ. Pass an (ε, δ) budget (e.g. "
                "epsilon=1, delta=1e-6) or declare the keys: group_by(col, keys=[...])."
            )
        if mechanism == "gaussian":
            raise UnsupportedQueryError(
                "the Gaussian mechanism cannot be pure ε-DP: pass rho= (zCDP) or delta= too"
            )
        return Share("pure", budget.epsilon), None, Fraction(0)
    if isinstance(budget, ZCDP):
        if private_keys:
            raise UnsupportedQueryError(
                "private group keys need an (ε, δ) budget (partition selection is not zCDP); "
                "pass epsilon= and delta=, or declare the keys: group_by(col, keys=[...])."
            )
        if mechanism == "laplace":
            return Share("pure", sqrt_down(2 * budget.rho)), None, Fraction(0)
        return Share("zcdp", budget.rho), None, Fraction(0)
    epsilon, delta = budget.epsilon, budget.delta
    if private_keys and delta == 0:
        raise UnsupportedQueryError(
            "private group keys need δ > 0 for partition selection; pass delta=1e-6 or so, or "
            "declare the keys."
        )
    selection: Share | None = None
    sel_delta = Fraction(0)
    agg_epsilon = epsilon
    if private_keys:
        selection = Share("pure", epsilon * selection_share)
        agg_epsilon = epsilon - selection.amount
    use_gauss = mechanism == "gaussian"
    agg_delta = delta / 2 if private_keys else delta
    if mechanism == "auto" and agg_delta > 0 and gaussian_helps:
        rho = rho_for(agg_epsilon, agg_delta)
        laplace_std = math.sqrt(2) * contrib.rows_l1 / float(agg_epsilon)
        gauss_std = math.sqrt(contrib.rows_l2_squared / (2 * float(rho)))
        use_gauss = gauss_std < laplace_std
    if use_gauss:
        if agg_delta == 0:
            raise UnsupportedQueryError("the Gaussian mechanism needs δ > 0")
        sel_delta = delta - agg_delta if private_keys else Fraction(0)
        return Share("zcdp", rho_for(agg_epsilon, agg_delta)), selection, sel_delta
    return Share("pure", agg_epsilon), selection, delta if private_keys else Fraction(0)


def compile_query(
    query: Query,
    schema: Mapping[str, ColumnKind],
    unit: str,
    budget: PrivacyLoss,
    *,
    mechanism: Mechanism = "auto",
    defaults: Bounding | None = None,
    salt: int | None = None,
    unit_label: str | None = None,
    source_text: str | None = None,
) -> CompiledQuery:
    """Validate, rewrite, bound and calibrate ``query`` for ``budget``; no data is read.

    ``unit_label``: how the explanation names the unit (a joined relation's unit column is an
    internal name; its label is the declared ``table.column``); ``source_text``: how the
    explanation shows the relation the query reads (its joins), instead of ``source``."""
    checked = validate(query, schema, unit)
    aggregate = checked.aggregate
    key_set = checked.key_set
    bounding = (defaults or Bounding()).merged(aggregate.bounding)
    grouped = bool(aggregate.keys)
    # one unit touches at most as many groups as there are public keys (rows of other keys are
    # dropped before bounding): every family's sensitivity uses it
    contrib = contribution(bounding, grouped, len(key_set.rows) if key_set is not None else None)
    private_keys = grouped and key_set is None
    gaussian_helps = any(
        (found := family_of(a)) is None or found.gaussian for a in aggregate.aggregations
    )
    agg_share, selection_share, selection_delta = _family_for(
        budget, mechanism, contrib, private_keys, aggregate.selection_share, gaussian_helps
    )
    needed = frozenset(
        {unit, *aggregate.keys, *(c for a in aggregate.aggregations for c in value_columns(a))}
    )
    steps = rewrite(checked.steps, needed)
    if salt is None:
        salt = int(random_words(1)[0] >> np.uint64(2))

    total_weight = sum((a.weight for a in aggregate.aggregations), Fraction(0))
    main = OutputRegistry()
    main.output("rows")  # the main plan always lists the groups that keep rows
    extra_plans: list[BoundedPlan] = []
    finishers: list[Finisher] = []
    split: dict[str, PrivacyLoss] = {}
    parts: list[Part] = []
    mechanisms: set[str] = set()
    label = unit_label or unit
    shown = aggregate.render()
    if source_text is not None and shown.startswith("source"):
        shown = source_text + shown[len("source") :]
    lines = [
        f"plan: {shown}",  # the validated plan: & / | chains balanced
        f"privacy unit: {label!r}; bounds: {bounding.describe()} -> one unit adds at most "
        f"{contrib.rows_l1} rows, {contrib.rows_per_group} per group, in "
        f"{contrib.groups} group(s)",
    ]

    def make_plan(registry: OutputRegistry, bins: BinSpec | None = None) -> BoundedPlan:
        return BoundedPlan(
            steps,
            unit,
            aggregate.keys,
            key_set,
            bounding.max_rows,
            bounding.max_groups,
            bounding.max_rows_per_group,
            salt,
            tuple(registry.values),
            tuple(registry.outputs),
            bins,
        )

    n_keys = len(key_set) if key_set is not None else None
    # the query's δ is unused by pure shares with public keys: aggregations may spend it (PTR)
    spare_delta = (
        budget.delta
        if isinstance(budget, ApproxDP) and agg_share.family == "pure" and not private_keys
        else Fraction(0)
    )
    for agg in aggregate.aggregations:
        share = agg_share.scaled(agg.weight / total_weight)
        family = FamilyContext(
            share,
            contrib,
            main,
            extra_plans,
            make_plan,
            n_keys,
            private_keys,
            mechanism,
            spare_delta * agg.weight / total_weight,
        )
        finisher, uses, text = compiler_for(agg)(agg, family)
        finishers.append(finisher)
        mechanisms.update(use.mechanism for use in uses)
        split[agg.name] = compose(*(use.loss for use in uses))
        parts.append(Part(agg.name, tuple(uses), split[agg.name], text))
        lines.append(f"{agg.name}: {text}; loss {split[agg.name]}")

    selection: Noisy | None = None
    threshold = 0
    if selection_share is not None:
        units_out = main.output("units")
        m = contrib.groups
        measurement = make_geometric(sensitivity=m, epsilon=selection_share.amount)
        t = Fraction(m) / selection_share.amount
        h = math.ceil(t * log_upper(Fraction(m) / selection_delta))
        threshold = 1 + h
        selection = Noisy(units_out, measurement)
        mechanisms.add("partition_selection")
        split["partition selection"] = ApproxDP(selection_share.amount, selection_delta)
        selection_text = (
            f"release a group when its distinct-unit count + discrete Laplace(scale "
            f"{float(t):.4g}) >= {threshold}"
        )
        parts.append(
            Part(
                "partition selection",
                (Use("partition_selection", split["partition selection"]),),
                split["partition selection"],
                selection_text,
            )
        )
        lines.append(
            f"partition selection: {selection_text}; loss {split['partition selection']}"
            f" (δ = {m}·P[noise >= {h}] <= {float(selection_delta):.3g})"
        )

    plans = (make_plan(main), *extra_plans)
    total = _total_loss(split, agg_share, selection is not None)
    if not total <= budget:
        raise PrivacyCheckError(
            f"internal check failed: the calibrated loss {total} exceeds the query budget "
            f"{budget}; nothing was run. Please report this."
        )
    lines.append(f"total loss: {total} (query budget {budget})")
    return CompiledQuery(
        plans,
        total,
        split,
        "\n".join(lines),
        aggregate.keys,
        key_set,
        tuple(finishers),
        selection,
        threshold,
        tuple(sorted(mechanisms)),
        tuple(parts),
    )


def _total_loss(split: Mapping[str, PrivacyLoss], share: Share, selection: bool) -> PrivacyLoss:
    parts = [loss for name, loss in split.items() if name != "partition selection"]
    aggregated = compose(*parts)
    if selection:
        sel = split["partition selection"]
        if isinstance(aggregated, ZCDP):
            assert isinstance(sel, ApproxDP)
            aggregated = aggregated.to_approx(sel.delta)
        return compose(aggregated, sel)
    return aggregated
