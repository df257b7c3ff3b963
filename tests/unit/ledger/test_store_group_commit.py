"""Review: the group commit wakes each waiting writer through a one-lock latch (set when its
request is done, or when it is handed the leader's role). Many threads writing at once through
a store whose batches take a little time, with and without pipelining and durability waits:
every write returns its own result exactly once, in one batch only, and nobody hangs."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from dpkit.ledger._store import GroupCommitStore, _Request


class _Fake(GroupCommitStore):
    def __init__(self, *, pipeline: bool, group_commit: bool) -> None:
        self.pipeline = pipeline
        self._init_group_commit(group_commit)
        self.runs: Counter[int] = Counter()
        self._lock = threading.Lock()

    def _describe(self) -> str:
        return "fake"

    def _run_batch(self, batch: list[_Request]) -> object | None:
        time.sleep(0.0002)
        for r in batch:
            r.result = r.work(None)  # type: ignore[arg-type]
            with self._lock:
                self.runs[r.result] += 1
        return object() if any(r.sync for r in batch) else None

    def _await_durable(self, token: object) -> None:
        time.sleep(0.0003)


@pytest.mark.parametrize("pipeline", [False, True])
@pytest.mark.parametrize("group_commit", [False, True])
def test_every_writer_gets_its_own_answer_once(pipeline: bool, group_commit: bool) -> None:
    store = _Fake(pipeline=pipeline, group_commit=group_commit)
    threads, per = 16, 150
    answers: dict[int, list[Any]] = {t: [] for t in range(threads)}

    def worker(t: int) -> None:
        for i in range(per):
            key = t * per + i
            answers[t].append(store.write(lambda _txn, key=key: key, sync=(i % 3 != 0)))

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in pool), "a writer hung"
    for t in range(threads):
        assert answers[t] == [t * per + i for i in range(per)]
    assert all(v == 1 for v in store.runs.values()) and len(store.runs) == threads * per
    assert store._close_writers()
