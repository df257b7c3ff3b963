"""Unit tests of dpkit.ledger: budgets, reservations, exactness, errors, replay."""

from __future__ import annotations

import math
import os
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest

from dpkit.core._losses import ZCDP, ApproxDP, PureDP
from dpkit.errors import BudgetExceededError, DPError, InvalidParameterError
from dpkit.ledger import (
    BudgetMonitor,
    Ledger,
    LedgerCorruptError,
    LedgerError,
    MemoryStore,
    ReservationStateError,
    SQLiteStore,
    UnknownBudgetError,
)

QUIET = BudgetMonitor(log=False)


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "dict", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Ledger:
    if request.param == "postgres":
        target = request.getfixturevalue("postgres_url")
    else:
        target = {
            "sqlite-file": f"sqlite:///{tmp_path}/ledger.db",
            "sqlite-memory": ":memory:",
            "dict": "memory://",
        }[request.param]
    opened = Ledger.open(target, monitor=BudgetMonitor(log=False))
    request.addfinalizer(opened.close)
    return opened


def test_hundred_charges_of_one_hundredth_fit_exactly(ledger: Ledger) -> None:
    ledger.create_budget("visits", PureDP(1.0))
    for _ in range(100):
        ledger.commit(ledger.reserve("visits", PureDP(0.01)))
    assert ledger.spent("visits") == PureDP(1)
    assert ledger.remaining("visits") == PureDP(0)
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve("visits", PureDP(0.01))
    assert info.value.requested == PureDP(0.01)
    assert info.value.remaining == PureDP(0)
    assert ledger.budget("visits").charges == 100


def test_refused_reservation_records_nothing(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    ledger.reserve("d", PureDP(0.75))
    before = ledger.history()
    with pytest.raises(BudgetExceededError):
        ledger.reserve("d", PureDP(0.5))
    assert ledger.history() == before
    assert ledger.spent("d") == PureDP(0.75)


def test_seed_split_spends_exactly_one(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    for eps in (0.5, 0.3, 0.2):
        ledger.commit(ledger.reserve("d", PureDP(eps)))
    assert ledger.spent("d") == PureDP(1)


def test_commit_returns_receipt_and_is_recorded(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    reservation = ledger.reserve("d", PureDP(0.1), query="SELECT count(*)", mechanism="laplace")
    receipt = ledger.commit(reservation)
    assert receipt.reservation_id == reservation.id
    assert str(receipt) == receipt.id
    kinds = [e.kind for e in ledger.history("d")]
    assert kinds == ["create", "reserve", "commit"]
    reserve_entry = ledger.history("d", kinds=["reserve"])[0]
    assert reserve_entry.query == "SELECT count(*)"
    assert len(reserve_entry.query_hash) == 64
    assert reserve_entry.mechanism == "laplace"
    commit_entry = ledger.history("d", kinds=["commit"])[0]
    assert commit_entry.receipt == receipt.id and commit_entry.ref == reservation.id


def test_custom_receipt_id(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    receipt = ledger.commit(ledger.reserve("d", PureDP(0.1)), receipt="result-42")
    assert receipt.id == "result-42"


def test_fail_keeps_the_charge(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    reservation = ledger.reserve("d", PureDP(0.4))
    ledger.fail(reservation, "engine crashed")
    assert ledger.spent("d") == PureDP(0.4)
    assert ledger.history("d")[-1].detail == "engine crashed"
    assert ledger.pending() == []


def test_double_commit_or_fail_is_refused(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    reservation = ledger.reserve("d", PureDP(0.1))
    ledger.commit(reservation)
    with pytest.raises(ReservationStateError):
        ledger.commit(reservation)
    with pytest.raises(ReservationStateError):
        ledger.fail(reservation, "late")


def test_reservation_from_another_ledger_is_refused(ledger: Ledger) -> None:
    other = Ledger.open("memory://", monitor=QUIET)
    other.create_budget("d", PureDP(1))
    ledger.create_budget("d", PureDP(1))
    with pytest.raises(ReservationStateError):
        ledger.commit(other.reserve("d", PureDP(0.1)))


def test_uncommitted_reservation_is_pending_and_spent(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    reservation = ledger.reserve("d", PureDP(0.3))
    assert [e.id for e in ledger.pending()] == [reservation.id]
    assert ledger.spent("d") == PureDP(0.3)
    assert ledger.replay().pending == (reservation.id,)


def test_analysts_never_jointly_exceed_the_dataset(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    ledger.create_budget("d", PureDP(0.7), analyst="ana")
    ledger.create_budget("d", PureDP(0.7), analyst="bob")
    ledger.reserve("d", PureDP(0.6), analyst="ana")
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve("d", PureDP(0.5), analyst="bob")
    assert "dataset 'd'" in str(info.value) and "bob" not in info.value.scope
    ledger.reserve("d", PureDP(0.4), analyst="bob")
    assert ledger.spent("d") == PureDP(1)
    assert ledger.spent("d", "ana") == PureDP(0.6)
    assert ledger.spent("d", "bob") == PureDP(0.4)
    with pytest.raises(BudgetExceededError) as info2:
        ledger.reserve("d", PureDP(0.2), analyst="ana")
    assert "ana" in info2.value.scope  # the analyst's own budget is checked first


def test_analyst_budget_must_fit_dataset_budget(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    with pytest.raises(InvalidParameterError):
        ledger.create_budget("d", PureDP(2), analyst="ana")
    with pytest.raises(UnknownBudgetError):
        ledger.create_budget("other", PureDP(1), analyst="ana")


def test_duplicate_budget_is_refused(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    with pytest.raises(LedgerError, match="already has a budget"):
        ledger.create_budget("d", PureDP(2))


def test_unknown_dataset_and_analyst(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    with pytest.raises(UnknownBudgetError, match="create_budget"):
        ledger.reserve("nope", PureDP(0.1))
    with pytest.raises(UnknownBudgetError, match="analyst 'zed'"):
        ledger.reserve("d", PureDP(0.1), analyst="zed")
    with pytest.raises(DPError):
        ledger.spent("nope")
    assert ledger.spent("d") == PureDP(0)


@pytest.mark.parametrize(
    "bad",
    [-0.1, math.nan, math.inf, 0.1, "0.1", None],
)
def test_bad_losses_are_rejected(ledger: Ledger, bad: object) -> None:
    ledger.create_budget("d", PureDP(1))
    with pytest.raises(DPError):
        loss = (
            PureDP(bad) if isinstance(bad, float) and (bad < 0 or not math.isfinite(bad)) else bad
        )
        ledger.reserve("d", loss)  # type: ignore[arg-type]
    assert ledger.spent("d") == PureDP(0)
    assert [e.kind for e in ledger.history()] == ["create"]


def test_tampered_loss_object_is_rejected(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    forged = PureDP(0.1)
    object.__setattr__(forged, "epsilon", Fraction(-1))
    with pytest.raises(InvalidParameterError):
        ledger.reserve("d", forged)
    object.__setattr__(forged, "epsilon", 0.1)
    with pytest.raises(InvalidParameterError):
        ledger.reserve("d", forged)


def test_delta_budget_zero_refuses_approximate_charge(ledger: Ledger) -> None:
    ledger.create_budget("d", ApproxDP(1, 0))
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve("d", ApproxDP(0.1, 1e-9))
    assert isinstance(info.value, DPError)
    ledger.reserve("d", ApproxDP(0.1, 0))
    ledger.create_budget("p", PureDP(1))
    with pytest.raises(BudgetExceededError, match="no δ > 0"):
        ledger.reserve("p", ApproxDP(0.1, 1e-9))
    with pytest.raises(InvalidParameterError, match="zCDP"):
        ledger.reserve("p", ZCDP(0.1))
    assert ledger.spent("p") == PureDP(0)


def test_approx_budget_composes_epsilon_and_delta(ledger: Ledger) -> None:
    ledger.create_budget("d", ApproxDP(1, 1e-6))
    ledger.reserve("d", ApproxDP(0.5, 5e-7))
    ledger.reserve("d", PureDP(0.5))
    assert ledger.spent("d") == ApproxDP(1, 5e-7)
    with pytest.raises(BudgetExceededError):
        ledger.reserve("d", ApproxDP(0, 6e-7))
    ledger.reserve("d", ApproxDP(0, 5e-7))
    assert ledger.remaining("d") == ApproxDP(0, 0)


def test_zcdp_charges_against_approx_budget_use_conversion(ledger: Ledger) -> None:
    ledger.create_budget("d", ApproxDP(1, 1e-6))
    ledger.reserve("d", ZCDP(0.01))
    spent = ledger.spent("d")
    assert isinstance(spent, ApproxDP)
    assert spent.delta == Fraction(1, 10**6)
    assert spent.epsilon == ZCDP(0.01).to_approx(1e-6).epsilon
    ledger.reserve("d", PureDP(0.1))  # counted as 0.005-zCDP once the budget holds zCDP
    assert ledger.budget("d").spend.rho == Fraction(15, 1000)
    with pytest.raises(BudgetExceededError):
        ledger.reserve("d", ZCDP(0.05))


def test_approx_budget_never_mixes_the_two_stopping_rules(ledger: Ledger) -> None:
    # Mixing (ε, δ) and zCDP charges in one (ε, δ) budget would let the zCDP allowance depend
    # on earlier answers (an odometer, not a filter): refused with a hint, nothing recorded.
    ledger.create_budget("basic", ApproxDP(1, 1e-6))
    ledger.reserve("basic", PureDP(0.1))
    with pytest.raises(InvalidParameterError, match="to_approx"):
        ledger.reserve("basic", ZCDP(0.01))
    ledger.reserve("basic", ZCDP(0.01).to_approx(1e-7))  # converted by the caller: fine
    ledger.create_budget("renyi", ApproxDP(1, 1e-6))
    ledger.reserve("renyi", ZCDP(0.01))
    with pytest.raises(InvalidParameterError, match="already holds zCDP"):
        ledger.reserve("renyi", ApproxDP(0.1, 1e-9))
    assert ledger.replay().ok


def test_zcdp_budget_converts_pure_charges(ledger: Ledger) -> None:
    ledger.create_budget("d", ZCDP(0.5))
    ledger.reserve("d", PureDP(0.5))  # 0.125-zCDP
    ledger.reserve("d", ZCDP(0.25))
    assert ledger.spent("d") == ZCDP(Fraction(3, 8))
    with pytest.raises(InvalidParameterError):
        ledger.reserve("d", ApproxDP(0.1, 1e-9))
    with pytest.raises(BudgetExceededError):
        ledger.reserve("d", ZCDP(0.2))


def test_adjust_budget_raises_and_records(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    ledger.reserve("d", PureDP(0.8))
    status = ledger.adjust_budget("d", PureDP(2), actor="admin", reason="new quarter")
    assert status.total == PureDP(2)
    adjust = ledger.history("d", kinds=["adjust"])[0]
    assert adjust.actor == "admin" and adjust.detail == "new quarter"
    ledger.reserve("d", PureDP(1.2))
    with pytest.raises(InvalidParameterError, match="already spent"):
        ledger.adjust_budget("d", PureDP(1.5))
    ledger.adjust_budget("d", PureDP(2))  # lowering to exactly the spend is allowed
    with pytest.raises(InvalidParameterError):
        ledger.adjust_budget("d", ApproxDP(3, 1e-6))
    assert ledger.replay().ok


def test_can_afford_does_not_record(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1))
    assert ledger.can_afford("d", PureDP(1))
    assert not ledger.can_afford("d", PureDP(1.5))
    assert not ledger.can_afford("d", ZCDP(0.1))
    assert ledger.history() == ledger.history("d")
    assert len(ledger.history()) == 1


def test_replay_matches_after_mixed_activity(ledger: Ledger) -> None:
    ledger.create_budget("d", ApproxDP(2, 1e-5))
    ledger.create_budget("d", ApproxDP(1, 1e-5), analyst="ana")
    ledger.create_budget("z", ApproxDP(2, 1e-5))
    ledger.commit(ledger.reserve("d", PureDP(0.3), analyst="ana"))
    ledger.fail(ledger.reserve("z", ZCDP(0.001)), "boom")
    ledger.reserve("z", PureDP(0.1))
    ledger.reserve("d", ApproxDP(0.1, 1e-7), analyst="ana")
    ledger.adjust_budget("d", ApproxDP(3, 1e-5))
    report = ledger.replay()
    assert report.ok, report.mismatches
    assert report.budgets == 3
    assert len(report.pending) == 2


def test_budgets_listing_and_status(ledger: Ledger) -> None:
    ledger.create_budget("d", PureDP(1), privacy_unit="user_id")
    ledger.create_budget("d", PureDP(0.5), analyst="ana")
    ledger.reserve("d", PureDP(0.25), analyst="ana")
    statuses = ledger.budgets()
    assert [(s.dataset, s.analyst) for s in statuses] == [("d", None), ("d", "ana")]
    assert statuses[1].privacy_unit == "user_id"
    assert statuses[1].used == Fraction(1, 2)
    assert statuses[0].used == Fraction(1, 4)
    with pytest.raises(InvalidParameterError):
        ledger.reserve("d", PureDP(0.1), privacy_unit="row")
    ledger.reserve("d", PureDP(0.1), privacy_unit="user_id")


def test_bad_names_are_rejected(ledger: Ledger) -> None:
    with pytest.raises(InvalidParameterError):
        ledger.create_budget("", PureDP(1))
    with pytest.raises(InvalidParameterError):
        ledger.create_budget("d", 1.0)  # type: ignore[arg-type]


# --- SQLite specifics ----------------------------------------------------------------------


def test_sqlite_is_durable_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path, monitor=QUIET) as first:
        first.create_budget("d", PureDP(1))
        first.commit(first.reserve("d", PureDP(0.25)))
    with Ledger.open(f"sqlite:///{path}", monitor=QUIET) as second:
        assert second.spent("d") == PureDP(0.25)
        assert second.replay().ok


def test_sqlite_pragmas(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "l.db", shared_fsync=False)
    try:
        conn = store._wconn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        store.close()
    # with fsyncs shared across processes, COMMIT only writes the WAL (NORMAL) and the store
    # fsyncs it before answering (tests/reliability/test_ledger_group_commit.py)
    store = SQLiteStore(tmp_path / "l.db")
    try:
        conn = store._wconn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert store._fsync is not None
    finally:
        store.close()


def test_entries_are_append_only_in_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
        ledger.reserve("d", PureDP(0.5))
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM entries")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE entries SET loss = 'pure:0'")
    conn.close()


def test_corrupt_file_gives_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(LedgerCorruptError, match="damaged or not a dpkit ledger"):
        Ledger.open(path)
    assert path.read_bytes() == b"this is not a database at all" * 100  # nothing lost


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match="not a dpkit ledger"):
        Ledger.open(path)


def test_tampered_totals_fail_closed(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
        ledger.reserve("d", PureDP(0.5))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE budgets SET spent_xi = '0', charges = 0")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match="fails closed"):
        Ledger.open(path)
    inspect = Ledger.open(path, verify=False, monitor=QUIET)
    report = inspect.replay()
    assert not report.ok
    inspect.repair(actor="admin")
    assert inspect.spent("d") == PureDP(0.5)
    inspect.close()
    with Ledger.open(path, monitor=QUIET) as repaired:
        assert repaired.spent("d") == PureDP(0.5)


def test_unreadable_stored_value_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE budgets SET total = 'pure:lots'")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match="cannot be read"):
        Ledger.open(path)


def test_open_urls(tmp_path: Path) -> None:
    assert isinstance(Ledger.open("memory://").store, MemoryStore)
    assert isinstance(Ledger.open("sqlite:///:memory:").store, SQLiteStore)
    with pytest.raises(InvalidParameterError, match="not available"):
        Ledger.open("mysql://localhost/db")
    with pytest.raises(InvalidParameterError):
        Ledger.open("")


def test_closed_ledger_refuses(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "l.db", monitor=QUIET)
    ledger.create_budget("d", PureDP(1))
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.reserve("d", PureDP(0.1))


def test_a_closed_or_inherited_store_refuses_and_names_the_ledger(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "l.db")
    store._pid = -1  # as if opened by the parent of a forked child
    with pytest.raises(DPError, match=r"ledger '.*l\.db' was opened in another process"):
        store.write(lambda tx: None)
    store._pid = os.getpid()
    store.close()
    with pytest.raises(DPError, match=r"ledger '.*l\.db' is closed"):
        store.write(lambda tx: None)
