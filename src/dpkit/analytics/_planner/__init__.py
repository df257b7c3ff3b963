"""From a query to a :class:`CompiledQuery`: validation, rewrites, sensitivity, mechanisms.

1. **Validate** the plan against the table's schema (column names and kinds; the privacy unit
   column must exist and cannot be redefined).
2. **Rewrite** the relational steps with pure ``steps -> steps`` rules (:func:`merge_filters`,
   :func:`push_filters`, :func:`prune_columns`); each preserves the result (property-tested).
3. **Stability -> sensitivity**: the declared contribution bounds (:mod:`.bounding`) and the
   declared value bounds give each aggregate's L1 / L2 sensitivity, in integer grid units.
4. **Mechanism choice and calibration**: the query budget's kind decides — ``PureDP``: geometric
   (discrete Laplace) noise; ``ZCDP``: discrete Gaussian noise; ``ApproxDP``: whichever of the two
   has the smaller noise for the row counts (``mechanism=`` overrides), and partition selection
   by a noisy threshold for private keys. Quantiles use the exponential mechanism (:mod:`._em`).
   A sum whose values are declared to lie in a union of intervals (``sum(col, values=...)``)
   gets, from a pure share, whichever of geometric, staircase and ladder noise has the smallest
   expected absolute error for the neighbour set of one unit (:mod:`._valueset`).
   The budget is split across aggregations by their weights, explicitly; the split and every
   measurement's loss are computed by the measurements' privacy maps and their composition is
   checked against the query budget, exactly.

Noise is added in :meth:`CompiledQuery.release`, in Python, to the exact integer aggregates the
engine returned.

The package has one module per stage — :mod:`.validate`, :mod:`.rewrite`, :mod:`.noise`
(calibration helpers), :mod:`.compiled` (the release step), :mod:`.compile` — and one module per
aggregate family under :mod:`.families`, each registering its compiler in :mod:`.registry`. To
add a family: write ``families/<name>.py`` with its aggregation, builder, compiler and a
``register_family(Family(...))`` spec (builder, SQL syntax, JSON form, result columns,
rendering), and import it in ``families/__init__.py`` (docs/design.md, "The family registry").
"""

from __future__ import annotations

from dpkit.analytics._planner import families  # noqa: F401  (registers the families)
from dpkit.analytics._planner._compile import compile_query
from dpkit.analytics._planner._compiled import (
    CompiledQuery,
    Context,
    Noisy,
    OutputRegistry,
    _rows_by_group,
)
from dpkit.analytics._planner._noise import (
    MAX_ROWS_FOR_INTERVALS,
    Share,
    SumGrid,
    integer_gaussian,
    linear_noise_halfwidth,
    noise_expected_abs,
    noise_halfwidth,
    noise_variance,
    sum_grid,
)
from dpkit.analytics._planner._registry import Compiled, FamilyContext, compiler_for, register
from dpkit.analytics._planner._rewrite import merge_filters, prune_columns, push_filters, rewrite
from dpkit.analytics._planner._types import Family, Mechanism
from dpkit.analytics._planner._validate import Validated, normalise_key_set, validate

__all__ = [
    "MAX_ROWS_FOR_INTERVALS",
    "Compiled",
    "CompiledQuery",
    "Context",
    "Family",
    "FamilyContext",
    "Mechanism",
    "Noisy",
    "OutputRegistry",
    "Share",
    "SumGrid",
    "Validated",
    "_rows_by_group",
    "compile_query",
    "compiler_for",
    "integer_gaussian",
    "linear_noise_halfwidth",
    "merge_filters",
    "noise_expected_abs",
    "noise_halfwidth",
    "noise_variance",
    "normalise_key_set",
    "prune_columns",
    "push_filters",
    "register",
    "rewrite",
    "sum_grid",
    "validate",
]
