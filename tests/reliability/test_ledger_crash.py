"""Crash safety: SIGKILL at arbitrary moments never loses an acknowledged charge, never ends
over budget, and a half-written reservation fails closed.

The kill moments are spread deterministically over a window (a golden-ratio sequence), so the
test needs no random numbers and every run hits the same variety of moments: before the first
charge, inside BEGIN IMMEDIATE ... COMMIT, between reserve and commit, inside group commits.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import time
from fractions import Fraction
from pathlib import Path

import pytest
from _ledger_workers import QUIET, charge_until_killed, context, reserve_then_die

from dpkit.core._losses import PureDP
from dpkit.ledger import Ledger

CI_ROUNDS = 20
SLOW_ROUNDS = 200
WINDOW_SECONDS = 0.06
GOLDEN = (5**0.5 - 1) / 2


def _acks(path: Path) -> tuple[int, set[int], set[int]]:
    ready = 0
    reserved: set[int] = set()
    committed: set[int] = set()
    if not path.exists():
        return ready, reserved, committed
    for line in path.read_text().splitlines():
        if line == "ready":
            ready += 1
        elif line.startswith("r "):
            reserved.add(int(line[2:]))
        elif line.startswith("c "):
            committed.add(int(line[2:]))
    return ready, reserved, committed


def _check(path: Path, ack_path: Path) -> tuple[int, int]:
    _, acked_reserved, acked_committed = _acks(ack_path)
    with Ledger.open(path, monitor=QUIET) as ledger:  # verify=True: refuses inconsistent totals
        report = ledger.replay()
        assert report.ok, report.mismatches
        reserves = {e.id: e for e in ledger.history(kinds=["reserve"])}
        commits = {e.ref for e in ledger.history(kinds=["commit"])}
        assert acked_reserved <= set(reserves), "an acknowledged reservation was lost"
        assert acked_committed <= commits, "an acknowledged commit was lost"
        small = ledger.spent("small")
        assert isinstance(small, PureDP)
        assert small.epsilon <= 1, "the small budget ended over budget"
        n_small = sum(1 for e in reserves.values() if e.dataset == "small")
        assert small.epsilon == Fraction(n_small, 100)  # pending reservations stay spent
        big = ledger.spent("big")
        n_big = sum(1 for e in reserves.values() if e.dataset == "big")
        assert big == PureDP(Fraction(n_big, 100))
        return len(acked_reserved), len(report.pending)


def _kill_rounds(tmp_path: Path, rounds: int) -> None:
    path = tmp_path / "ledger.db"
    ack_path = tmp_path / "acks.txt"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("big", PureDP(10**6))
        ledger.create_budget("small", PureDP(1))
    ctx = context()
    acknowledged = 0
    for i in range(rounds):
        ready_before = _acks(ack_path)[0]
        child = ctx.Process(target=charge_until_killed, args=(str(path), str(ack_path)))
        child.start()
        deadline = time.monotonic() + 60
        while _acks(ack_path)[0] == ready_before and child.is_alive():
            assert time.monotonic() < deadline, "the child never opened the ledger"
            time.sleep(0.001)
        time.sleep(((i + 1) * GOLDEN % 1.0) * WINDOW_SECONDS)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=60)
        assert child.exitcode == -signal.SIGKILL
        acknowledged, _ = _check(path, ack_path)
    assert acknowledged > 0  # the rounds did charge


def test_sigkill_rounds_ci(tmp_path: Path) -> None:
    _kill_rounds(tmp_path, CI_ROUNDS)


@pytest.mark.slow
def test_sigkill_rounds_slow(tmp_path: Path) -> None:
    _kill_rounds(tmp_path, SLOW_ROUNDS)


def test_crash_between_reserve_and_commit_keeps_the_charge(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("small", PureDP(1))
    child = context().Process(target=reserve_then_die, args=(str(path),))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    with Ledger.open(path, monitor=QUIET) as ledger:
        assert ledger.spent("small") == PureDP(0.25)  # fails closed: no refund
        assert len(ledger.pending()) == 1
        assert ledger.replay().pending == (ledger.pending()[0].id,)


def test_torn_wal_tail_is_discarded_whole(tmp_path: Path) -> None:
    """A half-written transaction at the end of the WAL is ignored as a whole by SQLite: the
    ledger reopens consistent (entries and totals agree) and the lost charge was never
    acknowledged, so nothing was read for it."""
    path = tmp_path / "ledger.db"
    ledger = Ledger.open(path, monitor=QUIET)
    ledger.create_budget("small", PureDP(1))
    for _ in range(5):
        ledger.commit(ledger.reserve("small", PureDP(0.01)))
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(f"{path}{suffix}", copy_dir / f"ledger.db{suffix}")
    ledger.close()
    wal = copy_dir / "ledger.db-wal"
    size = wal.stat().st_size
    assert size > 0
    with open(wal, "r+b") as handle:
        handle.truncate(size - 100)  # tear the last frame
    with Ledger.open(copy_dir / "ledger.db", monitor=QUIET) as torn:
        assert torn.replay().ok
        spent = torn.spent("small")
        assert isinstance(spent, PureDP) and spent.epsilon <= Fraction(5, 100)
        reserves = len(torn.history("small", kinds=["reserve"]))
        assert spent.epsilon == Fraction(reserves, 100)


def test_half_written_reservation_without_totals_fails_closed(tmp_path: Path) -> None:
    """If a store ever held a reservation entry whose totals were not updated (a damaged or
    hand-edited file), the ledger refuses to open for charging rather than under-count."""
    path = tmp_path / "ledger.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("small", PureDP(1))
        ledger.reserve("small", PureDP(0.5))
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO entries (ts, kind, dataset, analyst, loss, query, query_hash, mechanism,"
        " ref, receipt, actor, detail) VALUES (0, 'reserve', 'small', '', 'pure:1/2', '', '',"
        " '', NULL, '', '', '')"
    )
    conn.commit()
    conn.close()
    from dpkit.ledger import LedgerCorruptError

    with pytest.raises(LedgerCorruptError, match="fails closed"):
        Ledger.open(path, monitor=QUIET)
    with Ledger.open(path, monitor=QUIET, verify=False) as inspect:
        inspect.repair(actor="admin")
    with Ledger.open(path, monitor=QUIET) as repaired:
        assert repaired.spent("small") == PureDP(1)  # the larger record wins
        assert not repaired.can_afford("small", PureDP(0.01))
