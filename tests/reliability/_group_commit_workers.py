"""Code run in child processes by test_ledger_group_commit.py (importable, no test items)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from dpkit.core._losses import PureDP
from dpkit.errors import BudgetExceededError
from dpkit.ledger import BudgetMonitor, Ledger, SQLiteStore

QUIET = BudgetMonitor(log=False)


def hold_the_fsync_forever(path: str, marker: str) -> None:
    """Reserve, and hang inside the WAL's fsync (so this process holds the fsync lock, with
    ``started`` ahead of ``done``) until the parent kills it."""
    import dpkit.ledger._sqlite as sqlite_store

    def stuck(fd: int) -> None:
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write("in fsync\n")
        time.sleep(3600)

    sqlite_store._datasync = stuck
    ledger = Ledger.open(path, monitor=QUIET)
    ledger.reserve("small", PureDP(0.25), query="never acknowledged")


def mixed_client(
    path: str, shared_fsync: bool, threads: int, attempts: int, start: Any, result_path: str
) -> None:
    """``threads`` threads, each trying ``attempts`` ε = 0.01 charges, on a store that shares
    fsyncs across processes or fsyncs inside its own COMMIT (both kinds write one ledger)."""
    ledger = Ledger(SQLiteStore(path, shared_fsync=shared_fsync), monitor=QUIET)
    granted = [0] * threads
    errors: list[str] = []

    def client(index: int) -> None:
        for _ in range(attempts):
            try:
                reservation = ledger.reserve("d", PureDP(0.01))
            except BudgetExceededError:
                continue
            except Exception as exc:
                errors.append(repr(exc))
                continue
            granted[index] += 1
            ledger.commit(reservation)

    start.wait()
    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    ledger.close()
    with open(result_path, "w", encoding="utf-8") as handle:
        handle.write(f"{sum(granted)} {len(errors)} {os.getpid()}\n")
        handle.writelines(e.replace("\n", " ") + "\n" for e in errors)
