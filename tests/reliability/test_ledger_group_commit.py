"""Group commit across processes (docs/ledger.md, "Durability and group commit").

Writers COMMIT with ``synchronous=NORMAL`` and are answered only after an fsync of the WAL that
started after their COMMIT returned; one process's fsync answers the writers of every process.
These tests check the ordering that makes this as durable as ``synchronous=FULL`` (every
acknowledged reservation was covered by a completed fsync), that a process killed while holding
the fsync lock - or at any moment of its work, while other processes keep charging - never
costs an acknowledged entry nor blocks the others, and that writers sharing fsyncs and writers
fsyncing in their own COMMIT never jointly overspend.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from _group_commit_workers import hold_the_fsync_forever, mixed_client
from _ledger_workers import QUIET, charge_until_killed, context

import dpkit.ledger._sqlite as sqlite_store
from dpkit.core._losses import PureDP
from dpkit.ledger import Ledger, LedgerError, SQLiteStore
from dpkit.ledger._store import NewEntry, StoreTransaction

GOLDEN = (5**0.5 - 1) / 2


def _entry(txn: StoreTransaction, note: str) -> int:
    return txn.append_entry(NewEntry(time.time(), "alert", "d", None, detail=note))


class _AnswersBeforeTheFsync(SQLiteStore):
    """A deliberately broken store: it shares fsyncs but answers without waiting for one."""

    def _await_durable(self, token: object) -> None:
        return None


def _unfsynced_answers(
    store_type: type[SQLiteStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Synced writes from 6 threads (and unsynced ones between them) on ``store_type``; the
    synced writes answered without a completed fsync that began after their COMMIT."""
    fsyncs: list[tuple[int, int]] = []
    commits: dict[str, int] = {}
    original_fsync = sqlite_store._SharedFsync._fsync_wal
    original_run = SQLiteStore._run_batch_locked

    def timed_fsync(self: sqlite_store._SharedFsync) -> None:
        start = time.monotonic_ns()
        original_fsync(self)
        fsyncs.append((start, time.monotonic_ns()))

    def timed_run(self: SQLiteStore, batch: list) -> bool:  # type: ignore[type-arg]
        committed = original_run(self, batch)
        now = time.monotonic_ns()
        for r in batch:
            commits[r.work.note] = now
        return committed

    monkeypatch.setattr(sqlite_store._SharedFsync, "_fsync_wal", timed_fsync)
    monkeypatch.setattr(SQLiteStore, "_run_batch_locked", timed_run)
    store = store_type(tmp_path / "l.db")
    assert store._fsync is not None
    returned: dict[str, tuple[int, bool]] = {}

    class Work:
        def __init__(self, note: str) -> None:
            self.note = note

        def __call__(self, txn: StoreTransaction) -> int:
            return _entry(txn, self.note)

    def client(k: int) -> None:
        for i in range(15):
            note = f"{k}-{i}"
            sync = i % 3 != 2
            store.write(Work(note), sync=sync)
            returned[note] = (time.monotonic_ns(), sync)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert len(returned) == 90
    assert all(commits[note] < at for note, (at, _) in returned.items())
    return [
        note
        for note, (at, sync) in returned.items()
        if sync and not any(commits[note] < s and e <= at for s, e in fsyncs)
    ]


def test_every_acknowledged_write_follows_a_completed_fsync_that_began_after_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The durability argument, checked on the clock: for every synced write, some fsync of the
    WAL started after its COMMIT returned and ended before the write returned. Unsynced writes
    (finalisations) return after their COMMIT. The same check fails on a store that answers
    before the fsync."""
    assert _unfsynced_answers(SQLiteStore, tmp_path, monkeypatch) == []
    monkeypatch.undo()
    broken = tmp_path / "broken"
    broken.mkdir()
    assert _unfsynced_answers(_AnswersBeforeTheFsync, broken, monkeypatch) != []


def test_a_finalisation_needs_no_fsync_unless_durable_receipts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = sqlite_store._datasync

    def counting(fd: int) -> None:
        calls.append(fd)
        original(fd)

    monkeypatch.setattr(sqlite_store, "_datasync", counting)
    path = tmp_path / "l.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
        before = len(calls)
        reservation = ledger.reserve("d", PureDP(0.1))
        assert len(calls) == before + 1  # the charge is on stable storage before it is returned
        ledger.commit(reservation)
        assert len(calls) == before + 1  # the receipt is in the OS, synced with the next charge
        ledger.fail(ledger.reserve("d", PureDP(0.1)))
        assert len(calls) == before + 2
    with Ledger.open(path, monitor=QUIET, durable_receipts=True) as ledger:
        before = len(calls)
        ledger.commit(ledger.reserve("d", PureDP(0.1)))
        assert len(calls) == before + 2
        assert ledger.spent("d") == PureDP(Fraction(3, 10))
        assert ledger.replay().ok


def test_a_failed_fsync_is_not_an_acknowledgement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))

        def broken(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(sqlite_store, "_datasync", broken)
        with pytest.raises(LedgerError, match="not confirmed durable"):
            ledger.reserve("d", PureDP(0.25))
        monkeypatch.undo()
        # written but not acknowledged: no result was released for it, and it stays spent
        assert ledger.spent("d") == PureDP(Fraction(1, 4))
        assert ledger.replay().ok


def test_killing_the_process_holding_the_fsync_lock_blocks_nobody(tmp_path: Path) -> None:
    """A child commits a reservation and hangs inside the WAL's fsync, holding the fsync lock
    with ``started`` ahead of ``done``. The parent's reservation waits for that lock; once the
    child is killed, the kernel drops the lock, the parent runs an fsync of its own (the dead
    one never completed, so it covers nobody) and is answered."""
    path = tmp_path / "l.db"
    marker = tmp_path / "marker"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("small", PureDP(1))
    child = context().Process(target=hold_the_fsync_forever, args=(str(path), str(marker)))
    child.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and child.is_alive(), "the child never fsynced"
        time.sleep(0.005)
    store = SQLiteStore(path)
    ledger = Ledger(store, monitor=QUIET)
    done: list[object] = []
    waiter = threading.Thread(target=lambda: done.append(ledger.reserve("small", PureDP(0.25))))
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive(), "answered before any fsync covered the reservation"
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=60)
    waiter.join(timeout=60)
    assert not waiter.is_alive() and len(done) == 1
    assert store._fsync is not None and store._fsync.fsyncs >= 1
    # the child's reservation was committed (never acknowledged): it stays spent
    assert ledger.spent("small") == PureDP(Fraction(1, 2))
    assert ledger.replay().ok
    ledger.close()


def _acked(paths: list[Path]) -> tuple[set[int], set[int]]:
    reserved: set[int] = set()
    committed: set[int] = set()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if line.startswith("r "):
                reserved.add(int(line[2:]))
            elif line.startswith("c "):
                committed.add(int(line[2:]))
    return reserved, committed


def _kill_one_at_a_time(tmp_path: Path, rounds: int, writers: int) -> None:
    """``writers`` processes charge at once; each round kills one of them (any of them may be
    inside its transaction, holding the write lock, or fsyncing for the others) at a moment
    spread over a window, and restarts it. The others must keep being answered, and at the end
    every acknowledgement of every process is in the ledger, within budget."""
    path = tmp_path / "ledger.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("big", PureDP(10**6))
        ledger.create_budget("small", PureDP(1))
    ctx = context()
    ack_paths: list[Path] = []

    def spawn(k: int) -> object:
        ack = tmp_path / f"acks-{k}-{len(ack_paths)}.txt"
        ack_paths.append(ack)
        child = ctx.Process(target=charge_until_killed, args=(str(path), str(ack)))
        child.start()
        deadline = time.monotonic() + 60
        while not (ack.exists() and ack.read_text().startswith("ready")):
            assert time.monotonic() < deadline and child.is_alive(), "a child never started"
            time.sleep(0.002)
        return child

    children = [spawn(k) for k in range(writers)]
    progress_seen = 0
    for i in range(rounds):
        before = len(_acked(ack_paths)[0])
        time.sleep(0.02 + ((i + 1) * GOLDEN % 1.0) * 0.08)
        victim = children[i % writers]
        os.kill(victim.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        victim.join(timeout=60)  # type: ignore[attr-defined]
        if len(_acked(ack_paths)[0]) > before:
            progress_seen += 1
        children[i % writers] = spawn(i % writers)
    time.sleep(0.1)
    for child in children:
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        child.join(timeout=60)  # type: ignore[attr-defined]
    assert progress_seen > rounds // 2  # the survivors kept charging between the kills
    acked_reserved, acked_committed = _acked(ack_paths)
    assert acked_reserved
    with Ledger.open(path, monitor=QUIET) as ledger:  # verify=True: refuses inconsistent totals
        report = ledger.replay()
        assert report.ok, report.mismatches
        reserves = {e.id: e for e in ledger.history(kinds=["reserve"])}
        commits = {e.ref for e in ledger.history(kinds=["commit"])}
        assert acked_reserved <= set(reserves), "an acknowledged reservation was lost"
        assert acked_committed <= commits, "an acknowledged commit was lost"
        small = ledger.spent("small")
        n_small = sum(1 for e in reserves.values() if e.dataset == "small")
        assert isinstance(small, PureDP) and small.epsilon == Fraction(n_small, 100) <= 1
        n_big = sum(1 for e in reserves.values() if e.dataset == "big")
        assert ledger.spent("big") == PureDP(Fraction(n_big, 100))


def test_kill_one_of_three_writers_at_a_time(tmp_path: Path) -> None:
    _kill_one_at_a_time(tmp_path, rounds=9, writers=3)


@pytest.mark.slow
def test_kill_one_of_four_writers_at_a_time_slow(tmp_path: Path) -> None:
    _kill_one_at_a_time(tmp_path, rounds=80, writers=4)


@pytest.mark.parametrize("threads", [1, 8])
def test_processes_sharing_fsyncs_and_fsyncing_alone_grant_exactly_100(
    tmp_path: Path, threads: int
) -> None:
    """8 processes, half sharing fsyncs and half fsyncing inside COMMIT, 1,600 attempts of
    ε = 0.01 against a budget of 1: exactly 100 grants, and the totals replay."""
    path = tmp_path / "l.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
    ctx = context()
    start = ctx.Barrier(8)
    attempts = 1600 // 8 // threads
    procs = []
    for p in range(8):
        result = tmp_path / f"result-{p}.txt"
        proc = ctx.Process(
            target=mixed_client,
            args=(str(path), p % 2 == 0, threads, attempts, start, str(result)),
        )
        proc.start()
        procs.append((proc, result))
    granted = 0
    for proc, result in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0
        lines = result.read_text().splitlines()
        g, n_errors, _ = (int(x) for x in lines[0].split())
        assert n_errors == 0, lines[1:]
        granted += g
    assert granted == 100
    with Ledger.open(path, monitor=QUIET) as ledger:
        assert ledger.spent("d") == PureDP(1)
        assert ledger.budget("d").charges == 100
        assert len(ledger.history("d", kinds=["commit"])) == 100
        report = ledger.replay()
        assert report.ok, report.mismatches


def test_the_fsynced_file_is_the_wal_sqlite_writes_even_through_a_symlink_and_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    store = SQLiteStore("link/l.db")
    ledger = Ledger(store, monitor=QUIET)
    ledger.create_budget("d", PureDP(1))
    assert store._fsync is not None
    assert store._fsync._wal == str(real / "l.db-wal")
    monkeypatch.chdir(real)  # relative names would now point elsewhere
    ledger.reserve("d", PureDP(0.5))
    assert store._fsync.fsyncs >= 2
    assert os.path.exists(store._fsync._wal)
    ledger.close()
