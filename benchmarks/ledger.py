"""Ledger and accounting benchmark (issue 4).

1. Durable charges per second on SQLite (WAL, synchronous=FULL) from 1, 8 and 64 concurrent
   clients. A charge is ``reserve`` + ``commit`` - two durable transactions; each call returns
   only after SQLite's COMMIT (and its fsync) returned. Clients are threads sharing one Ledger
   (their writes are group-committed: several share one transaction and one fsync, each is
   answered only after that COMMIT) and, for comparison, processes each with its own Ledger on
   the same file (queued on a kernel file lock, then SQLite's write lock; no cross-process
   batching, so they are bounded by the disk's fsync rate).
2. Time to compute ε for 1,000 composed Gaussian mechanisms at δ = 1e-6 by zCDP (exact), RDP and
   PLD (through dp-accounting, rounded up), next to dp-accounting called directly in the same run.

Run: ``.venv/bin/python benchmarks/ledger.py`` (``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dpkit.accounting import (
    gaussian_event,
    pld_epsilon,
    rdp_epsilon,
    self_composed,
    zcdp_epsilon,
)
from dpkit.core.losses import PureDP
from dpkit.ledger import BudgetMonitor, Ledger

QUIET = BudgetMonitor(log=False)


def _fresh_ledger(directory: Path, name: str) -> Path:
    path = directory / f"{name}.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("bench", PureDP(10**9))
    return path


def _charge_loop(ledger: Ledger, count: int, with_commit: bool = True) -> None:
    for _ in range(count):
        reservation = ledger.reserve("bench", PureDP(0.01), query="SELECT count(*) FROM t")
        if with_commit:
            ledger.commit(reservation)


def threads_rate(directory: Path, clients: int, charges: int, with_commit: bool = True) -> float:
    path = _fresh_ledger(directory, f"threads-{clients}-{with_commit}")
    ledger = Ledger.open(path, monitor=QUIET)
    per_client = max(1, charges // clients)
    barrier = threading.Barrier(clients + 1)

    def client() -> None:
        barrier.wait()
        _charge_loop(ledger, per_client, with_commit)

    workers = [threading.Thread(target=client) for _ in range(clients)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    assert ledger.budget("bench").charges == per_client * clients
    assert ledger.replay().ok
    ledger.close()
    return per_client * clients / elapsed


def _process_client(path: str, count: int, start: Any, done: Any) -> None:
    ledger = Ledger.open(path, monitor=QUIET)
    start.wait()
    _charge_loop(ledger, count)
    ledger.close()
    done.put(os.getpid())


def processes_rate(directory: Path, clients: int, charges: int) -> float:
    path = _fresh_ledger(directory, f"processes-{clients}")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["dpkit.ledger"])
    per_client = max(1, charges // clients)
    start = ctx.Barrier(clients + 1)
    done = ctx.Queue()
    procs = [
        ctx.Process(target=_process_client, args=(str(path), per_client, start, done))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    start.wait()
    t0 = time.perf_counter()
    for _ in procs:
        done.get(timeout=600)
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    with Ledger.open(path, monitor=QUIET) as ledger:
        assert ledger.budget("bench").charges == per_client * clients
    return per_client * clients / elapsed


def _timed(fn: Any, repeat: int = 3) -> tuple[Any, float]:
    best = float("inf")
    value = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return value, best


def accounting_rows(
    noise_multiplier: float, count: int, delta: float
) -> list[tuple[str, str, float, float]]:
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    event = self_composed(gaussian_event(noise_multiplier), count)

    def direct_rdp() -> float:
        accountant = rdp_privacy_accountant.RdpAccountant()
        accountant.compose(event)
        return float(accountant.get_epsilon(delta))

    def direct_pld() -> float:
        accountant = pld_privacy_accountant.PLDAccountant()
        accountant.compose(event)
        return float(accountant.get_epsilon(delta))

    rows = []
    for label, source, fn in (
        ("zCDP (exact, CKS conversion)", "dpkit", lambda: float(zcdp_epsilon(event, delta))),
        ("RDP", "dpkit -> dp-accounting", lambda: float(rdp_epsilon(event, delta))),
        ("RDP", "dp-accounting direct", direct_rdp),
        ("PLD", "dpkit -> dp-accounting", lambda: float(pld_epsilon(event, delta))),
        ("PLD", "dp-accounting direct", direct_pld),
    ):
        value, seconds = _timed(fn)
        rows.append((label, source, float(value), seconds))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer charges")
    parser.add_argument("--charges", type=int, default=None, help="charges per configuration")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the ledger files")
    args = parser.parse_args(argv)
    charges = args.charges or (400 if args.quick else 4000)
    print(f"machine: {os.cpu_count()} CPU(s), shared with other work - numbers are indicative")
    print(f"python {sys.version.split()[0]}; SQLite WAL, synchronous=FULL; {charges} charges each")
    print()
    print("durable charges per second; every call returns after its fsync-ed COMMIT")
    print("  reserve         = the charge itself (checked and recorded before data is read)")
    print("  reserve+commit  = a whole release cycle: two durable transactions")
    header = ["clients", "reserve (threads)", "reserve+commit (threads)", "reserve+commit (procs)"]
    print(f"{header[0]:>8} {header[1]:>20} {header[2]:>26} {header[3]:>24}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        for clients in (1, 8, 64):
            r_rate = threads_rate(directory, clients, charges, with_commit=False)
            t_rate = threads_rate(directory, clients, charges)
            p_rate = processes_rate(directory, clients, charges)
            print(f"{clients:>8} {r_rate:>18.0f}/s {t_rate:>24.0f}/s {p_rate:>22.0f}/s")
    print()
    delta = 1e-6
    print(f"ε for 1,000 composed Gaussian mechanisms (σ = 100·Δ), δ = {delta:g}; best of 3 runs")
    print(f"{'method':<30} {'computed by':<24} {'epsilon':>10} {'time':>10}")
    for label, source, value, seconds in accounting_rows(100.0, 1000, delta):
        print(f"{label:<30} {source:<24} {value:>10.6f} {seconds * 1000:>8.1f}ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
