"""Code run in forked child processes by the reliability tests (kept importable, no test items)."""

from __future__ import annotations

import os
import threading
from typing import Any

from dpkit.core._losses import PureDP
from dpkit.errors import BudgetExceededError
from dpkit.ledger import BudgetMonitor, Ledger

QUIET = BudgetMonitor(log=False)


def split(total: int, parts: int) -> list[int]:
    """``total`` attempts spread over ``parts`` clients as evenly as possible."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def charge_threads(
    path: str, attempts: list[int], analysts: list[str | None], start: Any = None
) -> tuple[int, int, list[str]]:
    """Run one thread per entry of ``attempts``; each tries that many ε = 0.01 charges.

    Returns (granted, refused, unexpected errors).
    """
    ledger = Ledger.open(path, monitor=QUIET)
    granted = [0] * len(attempts)
    refused = [0] * len(attempts)
    errors: list[str] = []
    barrier = threading.Barrier(len(attempts))

    def client(index: int) -> None:
        barrier.wait()
        for _ in range(attempts[index]):
            try:
                reservation = ledger.reserve("d", PureDP(0.01), analyst=analysts[index])
            except BudgetExceededError:
                refused[index] += 1
                continue
            except Exception as exc:
                errors.append(repr(exc))
                continue
            granted[index] += 1
            ledger.commit(reservation)

    if start is not None:
        start.wait()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(attempts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.close()
    return sum(granted), sum(refused), errors


def process_client(
    path: str, attempts: list[int], analysts: list[str | None], start: Any, result_path: str
) -> None:
    granted, refused, errors = charge_threads(path, attempts, analysts, start)
    with open(result_path, "w", encoding="utf-8") as handle:
        handle.write(f"{granted} {refused} {len(errors)}\n")
        handle.writelines(e.replace("\n", " ") + "\n" for e in errors)


def charge_until_killed(path: str, ack_path: str, threads: int = 2) -> None:
    """Charge forever from a few threads, appending an acknowledgement line after each
    reserve ("r <id>") and commit ("c <id>") returned; the parent SIGKILLs us at some moment."""
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    ledger = Ledger.open(path, monitor=QUIET)
    os.write(fd, b"ready\n")

    def client(offset: int) -> None:
        i = offset
        while True:
            dataset = "big" if i % 2 == 0 else "small"
            try:
                reservation = ledger.reserve(dataset, PureDP(0.01), query=f"q{i}")
            except BudgetExceededError:
                i += threads
                continue
            os.write(fd, f"r {reservation.id}\n".encode())
            if i % 3 != 0:  # every third reservation is left open, like a crashed query
                ledger.commit(reservation)
                os.write(fd, f"c {reservation.id}\n".encode())
            i += threads

    workers = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def reserve_then_die(path: str) -> None:
    """Reserve, then die by SIGKILL before commit (as if the engine crashed reading the data)."""
    import signal

    ledger = Ledger.open(path, monitor=QUIET)
    ledger.reserve("small", PureDP(0.25), query="the data is read next")
    os.kill(os.getpid(), signal.SIGKILL)


def context() -> Any:
    """A forkserver context whose server has dpkit imported already: children start fast, and
    are forked from a single-threaded server (safe even if the test process runs threads)."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    # (Python 3.11's forkserver ignores sys.path when preloading, so preload the installed
    # package, which is the slow part to import; this small module is imported per child.)
    ctx.set_forkserver_preload(["dpkit.ledger", "dpkit.accounting"])
    return ctx
