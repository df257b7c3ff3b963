"""What bounds the ledger across processes: the disk's fsyncs per second (issue 15).

Prints, in one run and in the same directory:

1. raw ``write(100 B) + fsync`` per second (one process), and ``fdatasync``;
2. one-row SQLite transactions per second with WAL and ``synchronous=FULL`` (one fsync each);
3. dpkit ledger reserve+commit cycles per second from 8 processes - with an fsync inside each
   COMMIT (SQLite's ``synchronous=FULL``, the earlier design) and with fsyncs shared across
   processes (the default, docs/ledger.md) - and from 8 threads (``benchmarks/ledger.py``'s
   loops).

A cycle is two transactions (reserve, then commit). With an fsync inside each COMMIT, separate
processes cannot share fsyncs, so 8 processes are bounded by about fsyncs/s ÷ 2 whatever the CPU
does; shared fsyncs lift that bound (``benchmarks/ledger.py --processes`` has the full table).
The machine may be shared: compare rows within one run.

Run: ``PYTHONPATH=src python benchmarks/fsync.py [--dir DIR] [--seconds 3]``
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ledger import processes_rate, threads_rate


def _rate(step: Callable[[], None], seconds: float) -> float:
    count = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step()
        count += 1
    return count / elapsed


def fsync_rate(path: Path, seconds: float, sync: Callable[[int], None]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    payload = b"x" * 100

    def step() -> None:
        os.write(fd, payload)
        sync(fd)

    try:
        return _rate(step, seconds)
    finally:
        os.close(fd)


def sqlite_rate(path: Path, seconds: float) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")

    def step() -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("COMMIT")

    try:
        return _rate(step, seconds)
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--charges", type=int, default=2000)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPU(s), load average {load:.1f} at start")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp)
        print(f"directory: {d}")
        fs = fsync_rate(d / "f", args.seconds, os.fsync)
        fds = fsync_rate(d / "g", args.seconds, os.fdatasync)
        sq = sqlite_rate(d / "s.db", args.seconds)
        procs_full = processes_rate(d, 8, args.charges, sync="full")
        procs = processes_rate(d, 8, args.charges)
        threads = threads_rate(d, 8, args.charges)
    print(f"{'write + fsync (1 process)':<52} {fs:>9.0f}/s")
    print(f"{'write + fdatasync (1 process)':<52} {fds:>9.0f}/s")
    print(f"{'SQLite WAL synchronous=FULL 1-row transactions':<52} {sq:>9.0f}/s")
    print(f"{'  bound for 8 processes: transactions/s / 2':<52} {sq / 2:>9.0f}/s")
    print(f"{'dpkit reserve+commit, 8 processes, fsync in COMMIT':<52} {procs_full:>9.0f}/s")
    print(f"{'dpkit reserve+commit, 8 processes, shared fsync':<52} {procs:>9.0f}/s")
    print(f"{'dpkit reserve+commit, 8 threads (group commit)':<52} {threads:>9.0f}/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
