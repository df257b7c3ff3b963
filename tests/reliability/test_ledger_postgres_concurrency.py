"""Concurrency on PostgreSQL: 8 processes (each with its own Ledger and connections) of 8 threads
charging ε = 0.01 against a budget of 1.0 get exactly 100 grants; the advisory writer lock is what
serialises them across processes."""

from __future__ import annotations

import pytest
from _ledger_workers import QUIET, charge_threads, context, process_client, split

from dpkit.core._losses import PureDP
from dpkit.ledger import Ledger

CHARGES = 2_000


def _check(url: str, granted: int) -> None:
    assert granted == 100
    with Ledger.open(url, monitor=QUIET) as ledger:
        assert ledger.spent("d") == PureDP(1)
        assert ledger.budget("d").charges == 100
        assert len(ledger.history("d", kinds=["reserve"])) == 100
        assert len(ledger.history("d", kinds=["commit"])) == 100
        report = ledger.replay()
        assert report.ok, report.mismatches


def test_64_threads_grant_exactly_100_on_postgres(postgres_url: str) -> None:
    with Ledger.open(postgres_url, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
    granted, refused, errors = charge_threads(postgres_url, split(CHARGES, 64), [None] * 64)
    assert errors == []
    assert granted + refused == CHARGES
    _check(postgres_url, granted)


@pytest.mark.parametrize("run", range(2))
def test_8_processes_grant_exactly_100_on_postgres(
    postgres_url: str, tmp_path: object, run: int
) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    with Ledger.open(postgres_url, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
    ctx = context()
    start = ctx.Barrier(8)
    per_thread = split(CHARGES, 64)
    procs = []
    for p in range(8):
        result = tmp_path / f"result-{p}.txt"
        proc = ctx.Process(
            target=process_client,
            args=(postgres_url, per_thread[8 * p : 8 * p + 8], [None] * 8, start, str(result)),
        )
        proc.start()
        procs.append((proc, result))
    granted = refused = 0
    for proc, result in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0
        lines = result.read_text().splitlines()
        g, r, n_errors = (int(x) for x in lines[0].split())
        assert n_errors == 0, lines[1:]
        granted += g
        refused += r
    assert granted + refused == CHARGES
    _check(postgres_url, granted)
