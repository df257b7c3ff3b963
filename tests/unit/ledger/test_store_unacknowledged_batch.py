"""Review: a batch whose transaction fails with an error that is not a database error must
acknowledge nobody.

* PostgreSQL: a text the client cannot encode (a lone surrogate, e.g. from JSON "\\ud800" in a
  service request's mechanism or receipt) makes the batch's one INSERT raise
  UnicodeEncodeError while it is sent. ``_attempt`` caught only psycopg errors, so the
  exception left ``_run_batch`` with every request's ``result`` already set (their work ran on
  the buffer) and nothing committed.
* GroupCommitStore.write: when the leader's ``_run_batch`` raised, the other writers of its
  batch were woken as done, with that result and no error: a reservation that was never
  recorded was returned to its caller as granted (the budget was never charged; the caller
  goes on to release), and the writer holding the surrogate could be that caller.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

import dpkit.ledger._ledger as ledger_module
from dpkit.core._losses import PureDP
from dpkit.ledger import BudgetMonitor, Ledger
from dpkit.ledger._postgres import PostgresStore
from dpkit.ledger._store import GroupCommitStore, _Request

QUIET = BudgetMonitor(log=False)


def test_an_unencodable_text_fails_its_request_alone(
    postgres_url: str, captured_requests: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ledger.reserve now refuses such a text up front (ledger/test_texts.py); this exercises the
    # store's own defence, for a text that reaches it another way
    monkeypatch.setattr(ledger_module, "_check_text", lambda name, value: value)
    ledger = Ledger.open(postgres_url, monitor=QUIET)
    ledger.create_budget("d", PureDP(1))
    store = ledger.store
    assert isinstance(store, PostgresStore)
    texts = ["a", "b\ud800c", "d"]
    calls: list[Callable[[], object]] = [
        (lambda t=t: ledger.reserve("d", PureDP(Fraction(1, 10)), mechanism=t)) for t in texts
    ]
    batch = captured_requests(store, calls)
    try:
        token = store._run_batch(batch)
    except Exception as exc:  # the batch failed: then nobody may hold a result
        assert all(r.result is None for r in batch), exc
        token = None
    if token is not None:
        store._await_durable(token)
    stored = [e.mechanism for e in ledger.history("d") if e.kind == "reserve"]
    granted = [r.result is not None and r.error is None for r in batch]
    # every request answered as granted is recorded and charged
    assert sum(granted) == ledger.budget("d").charges == len(stored)
    assert granted == [True, False, True]
    assert ledger.replay().ok
    ledger.close()


class _Failing(GroupCommitStore):
    """The second batch sets every result, then fails before anything is committed."""

    pipeline = False

    def __init__(self) -> None:
        self._init_group_commit(True)
        self.batches = 0

    def _describe(self) -> str:
        return "fake"

    def _run_batch(self, batch: list[_Request]) -> object | None:
        self.batches += 1
        if self.batches == 1:  # hold the first batch until two writers queue behind it
            deadline = time.monotonic() + 10
            while len(self._pending) < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
            for r in batch:
                r.result = r.work(None)  # type: ignore[arg-type]
            return None
        for r in batch:
            r.result = r.work(None)  # type: ignore[arg-type]
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    def _await_durable(self, token: object) -> None:  # pragma: no cover - never a token
        pass


def test_a_failed_batch_acknowledges_nobody() -> None:
    store = _Failing()
    answers: dict[str, object] = {}

    def writer(name: str) -> None:
        try:
            answers[name] = store.write(lambda _txn: f"granted {name}")
        except Exception as exc:
            answers[name] = exc

    first = threading.Thread(target=writer, args=("first",))
    first.start()
    while not store._leader:
        time.sleep(0.001)
    others = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in others:
        t.start()
        time.sleep(0.01)
    for t in [first, *others]:
        t.join(timeout=20)
    assert answers["first"] == "granted first"
    assert store.batches == 2
    # neither a nor b was committed: both must see an error, not a grant
    assert isinstance(answers["a"], Exception) and isinstance(answers["b"], Exception), answers
