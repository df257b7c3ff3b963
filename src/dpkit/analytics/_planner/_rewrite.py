"""Rewrites of the relational steps: pure ``steps -> steps`` rules that preserve the result."""

from __future__ import annotations

from dpkit.analytics._engines._base import Step
from dpkit.analytics._expr import (
    Binary,
    Expr,
    columns_of,
)


# ------------------------------------------------------------------ rewrites
def balanced_and(predicates: list[Expr]) -> Expr:
    """The conjunction of ``predicates`` as a balanced tree (depth ⌈log2 n⌉ over theirs)."""
    parts = list(predicates)
    while len(parts) > 1:
        paired: list[Expr] = [
            Binary("and", parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)
        ]
        parts = paired + (parts[-1:] if len(parts) % 2 else [])
    return parts[0]


def merge_filters(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Adjacent filters become one conjunction, balanced: 200 chained ``.filter()`` calls were
    one left-deep chain of 200 ANDs, which overflowed the SQL generator's recursion after the
    reservation (issue 21)."""
    out: list[Step] = []
    run: list[Expr] = []

    def close() -> None:
        if run:
            out.append(Step("filter", expr=balanced_and(run)))
            run.clear()

    for step in steps:
        if step.kind == "filter":
            assert step.expr is not None
            run.append(step.expr)
        else:
            close()
            out.append(step)
    close()
    return tuple(out)


def push_filters(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Move each filter before derived columns it does not read (filter early). In one pass:
    a filter moves back over the derived columns just before it (as the pairwise swaps did,
    which took time quadratic in the number of steps)."""
    out: list[Step] = []
    for step in steps:
        if step.kind == "filter" and step.expr is not None:
            reads = columns_of(step.expr)
            i = len(out)
            while i > 0 and out[i - 1].kind == "derive" and out[i - 1].name not in reads:
                i -= 1
            out.insert(i, step)
        else:
            out.append(step)
    return tuple(out)


def prune_columns(steps: tuple[Step, ...], needed: frozenset[str]) -> tuple[Step, ...]:
    """Drop derived columns nothing reads, and selects (they only restrict names)."""
    out: list[Step] = []
    live = set(needed)
    for step in reversed(steps):
        if step.kind == "select":
            continue
        if step.kind == "derive":
            if step.name not in live:
                continue
            live.discard(step.name)
        assert step.expr is not None
        live |= columns_of(step.expr)
        out.append(step)
    return tuple(reversed(out))


def rewrite(steps: tuple[Step, ...], needed: frozenset[str]) -> tuple[Step, ...]:
    """All rewrite rules, in order."""
    return prune_columns(push_filters(merge_filters(steps)), needed)
