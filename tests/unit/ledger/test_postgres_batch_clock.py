"""Review probe: a batch's entries go as one array per column; the timestamps come from the
ledger's ``clock`` (a user callable). A batch whose clock values mix ints and floats (or numpy
floats) must store the same as the one-row INSERT did (every value bound on its own)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.ledger._ledger as ledger_module
from dpkit.core._losses import PureDP
from dpkit.ledger import BudgetMonitor, Ledger
from dpkit.ledger._postgres import PostgresStore

QUIET = BudgetMonitor(log=False)


@pytest.mark.parametrize(
    "values",
    [
        [1_700_000_000, 1_700_000_000.5, 1_700_000_001],
        [1_700_000_000.5, 1_700_000_001, 1_700_000_002.25],
        [np.float64(1_700_000_000.123456789), 1_700_000_001.5, 1_700_000_002.0],
        [1_700_000_000.123456789, 1_700_000_000.1234567891, 2.0**60 + 0.0],
    ],
)
def test_a_batch_stores_every_clock_value(
    postgres_url: str, values: list[object], captured_requests: Any
) -> None:

    ticks = itertools.cycle(values)
    produced: list[object] = []

    def clock() -> object:
        produced.append(next(ticks))
        return produced[-1]

    ledger = Ledger.open(postgres_url, monitor=QUIET, clock=clock)  # type: ignore[arg-type]
    ledger.create_budget("d", PureDP(100))
    store = ledger.store
    assert isinstance(store, PostgresStore)
    calls: list[Callable[[], object]] = [
        lambda: ledger.reserve("d", PureDP(Fraction(1, 10))) for _ in values
    ]
    batch = captured_requests(store, calls)
    store._await_durable(store._run_batch(batch))
    assert all(r.error is None for r in batch), [r.error for r in batch]
    got = [e.timestamp for e in ledger.history("d") if e.kind == "reserve"]
    assert len(got) == len(values)
    assert all(isinstance(t, float) for t in got)
    exact = {float(v) for v in produced}  # type: ignore[arg-type]
    assert set(got) <= exact and len(set(got)) == len(set(map(float, values)))  # type: ignore[arg-type]
    ledger.close()


def test_a_nul_text_in_a_batch_fails_alone(
    postgres_url: str, captured_requests: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text PostgreSQL cannot store (NUL) in one request of a batch: the batch's one INSERT
    of arrays fails as a whole, and each request is then run alone, so only that one fails and
    the others are stored and charged exactly once. (Ledger.reserve refuses such a text up
    front; bypassed here to exercise the store's own defence.)"""
    monkeypatch.setattr(ledger_module, "_check_text", lambda name, value: value)

    ledger = Ledger.open(postgres_url, monitor=QUIET)
    ledger.create_budget("d", PureDP(1))
    store = ledger.store
    assert isinstance(store, PostgresStore)
    texts = ["a", "b\x00c", "d"]
    calls: list[Callable[[], object]] = [
        (lambda t=t: ledger.reserve("d", PureDP(Fraction(1, 10)), query=t)) for t in texts
    ]
    batch = captured_requests(store, calls)
    token = store._run_batch(batch)
    if token is not None:
        store._await_durable(token)
    assert [r.error is None for r in batch] == [True, False, True]
    assert ledger.budget("d").charges == 2
    assert [e.query for e in ledger.history("d") if e.kind == "reserve"] == ["a", "d"]
    assert ledger.replay().ok
    ledger.close()
