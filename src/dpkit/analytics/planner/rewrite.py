"""Rewrites of the relational steps: pure ``steps -> steps`` rules that preserve the result."""

from __future__ import annotations

from dpkit.analytics.engines.base import Step
from dpkit.analytics.expr import (
    Binary,
    columns_of,
)


# ------------------------------------------------------------------ rewrites
def merge_filters(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Adjacent filters become one conjunction."""
    out: list[Step] = []
    for step in steps:
        if step.kind == "filter" and out and out[-1].kind == "filter":
            previous = out.pop()
            assert previous.expr is not None and step.expr is not None
            out.append(Step("filter", expr=Binary("and", previous.expr, step.expr)))
        else:
            out.append(step)
    return tuple(out)


def push_filters(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Move each filter before derived columns it does not read (filter early)."""
    out = list(steps)
    changed = True
    while changed:
        changed = False
        for i in range(1, len(out)):
            before, step = out[i - 1], out[i]
            if (
                step.kind == "filter"
                and before.kind == "derive"
                and step.expr is not None
                and before.name not in columns_of(step.expr)
            ):
                out[i - 1], out[i] = step, before
                changed = True
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
