"""The PostgreSQL store's own guarantees (the shared ledger suite runs on it via
ledger/test_ledger.py): append-only enforced by the server, versioned migrations, durability,
failing closed."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import psycopg
import pytest

from dpkit.core._losses import PureDP
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.ledger import (
    BudgetMonitor,
    Ledger,
    LedgerCorruptError,
    LedgerError,
    ReservationStateError,
)
from dpkit.ledger._postgres import (
    SCHEMA_VERSION,
    LedgerUnavailableError,
    PostgresStore,
    split_url,
)

QUIET = BudgetMonitor(log=False)


def _raw(url: str) -> tuple[psycopg.Connection[tuple[object, ...]], str]:
    plain, schema = split_url(url)
    return psycopg.connect(plain, autocommit=True), schema


def test_entries_are_append_only_in_the_database(postgres_url: str) -> None:
    with Ledger.open(postgres_url, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
        ledger.commit(ledger.reserve("d", PureDP(0.5)))
    conn, s = _raw(postgres_url)
    with conn:
        for statement in (
            f"UPDATE {s}.entries SET loss = 'pure:0'",
            f"DELETE FROM {s}.entries",
            f"TRUNCATE {s}.entries",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(statement)
        # create, reserve, alert (50 %), commit
        assert conn.execute(f"SELECT count(*) FROM {s}.entries").fetchone() == (4,)


def test_migrations_are_versioned_and_a_newer_schema_is_refused(postgres_url: str) -> None:
    Ledger.open(postgres_url, monitor=QUIET).close()
    conn, s = _raw(postgres_url)
    with conn:
        rows = conn.execute(f"SELECT version FROM {s}.schema_version ORDER BY version").fetchall()
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
        Ledger.open(postgres_url, monitor=QUIET).close()  # reopening applies nothing twice
        assert conn.execute(f"SELECT count(*) FROM {s}.schema_version").fetchone() == (
            SCHEMA_VERSION,
        )
        conn.execute(f"INSERT INTO {s}.schema_version VALUES (999, 'future', 0)")
    with pytest.raises(LedgerError, match="schema version 999"):
        Ledger.open(postgres_url, monitor=QUIET)


def test_foreign_schema_is_refused(postgres_url: str) -> None:
    conn, s = _raw(postgres_url)
    with conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(f"CREATE TABLE {s}.customers (id int)")
    with pytest.raises(LedgerCorruptError, match="not a dpkit ledger"):
        Ledger.open(postgres_url, monitor=QUIET)


def test_durable_across_reopen_and_tampering_fails_closed(postgres_url: str) -> None:
    with Ledger.open(postgres_url, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
        ledger.commit(ledger.reserve("d", PureDP(0.25)))
    with Ledger.open(postgres_url, monitor=QUIET) as again:
        assert again.spent("d") == PureDP(0.25)
    conn, s = _raw(postgres_url)
    with conn:
        conn.execute(f"UPDATE {s}.budgets SET spent_xi = '0'")  # budgets are the cache
    with pytest.raises(LedgerCorruptError, match="disagree"):
        Ledger.open(postgres_url, monitor=QUIET)
    with Ledger.open(postgres_url, monitor=QUIET, verify=False) as inspect:
        inspect.repair(actor="officer")
    with Ledger.open(postgres_url, monitor=QUIET) as repaired:
        assert repaired.spent("d") == PureDP(0.25)


def test_schema_names_are_identifiers_only(postgres_server_url: str) -> None:
    sep = "&" if "?" in postgres_server_url else "?"
    for bad in ("x;drop", "A", "1x", "a-b"):
        with pytest.raises(InvalidParameterError, match="schema"):
            Ledger.open(f"{postgres_server_url}{sep}schema={bad}")


def test_unreachable_server_is_a_clean_error(tmp_path: object) -> None:
    with pytest.raises(LedgerUnavailableError, match="unavailable"):
        PostgresStore("postgresql://nobody@/db?host=/nonexistent-dir", timeout=1)


def test_restarted_connection_reconnects(postgres_url: str) -> None:
    """A connection killed by the server gives a clean error, and the next call reconnects;
    nothing acknowledged is lost."""
    ledger = Ledger.open(postgres_url, monitor=QUIET)
    ledger.create_budget("d", PureDP(1))
    ledger.commit(ledger.reserve("d", PureDP(0.1)))
    conn, _ = _raw(postgres_url)
    with conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database()"
        )
    outcomes = []
    for _ in range(3):
        try:
            ledger.commit(ledger.reserve("d", PureDP(0.1)))
            outcomes.append("ok")
        except LedgerUnavailableError:
            outcomes.append("unavailable")
    assert outcomes[-1] == "ok"
    granted = 1 + outcomes.count("ok")
    assert ledger.replay().ok
    assert ledger.budget("d").charges >= granted
    ledger.close()


def test_a_version_2_ledger_is_upgraded_in_place(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger written before migration 3 (entry ids from the identity default, no order
    trigger) opens with this dpkit: the migration is applied once, old entries replay, and new
    charges use the batched write path under the new trigger."""
    from dpkit.ledger import _postgres

    monkeypatch.setattr(_postgres, "MIGRATIONS", _postgres.MIGRATIONS[:2])
    monkeypatch.setattr(_postgres, "SCHEMA_VERSION", 2)
    with Ledger.open(postgres_url, monitor=QUIET) as old:
        old.create_budget("d", PureDP(1))
        old.commit(old.reserve("d", PureDP(Fraction(1, 4))))
        kept = old.reserve("d", PureDP(Fraction(1, 4)))
    conn, s = _raw(postgres_url)
    with conn:
        assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone() == (2,)
    monkeypatch.undo()
    with Ledger.open(postgres_url, monitor=QUIET) as new:
        assert new.replay().ok
        new.commit(kept)  # a reservation made before the upgrade
        new.commit(new.reserve("d", PureDP(Fraction(1, 4))))
        assert new.spent("d") == PureDP(Fraction(3, 4))
        assert new.budget("d").charges == 3
        assert new.pending() == []
        assert new.replay().ok
    conn, s = _raw(postgres_url)
    with conn:
        versions = conn.execute(f"SELECT version FROM {s}.schema_version ORDER BY version")
        assert [r[0] for r in versions] == list(range(1, SCHEMA_VERSION + 1))
        assert SCHEMA_VERSION >= 3


def test_the_database_refuses_ids_it_did_not_issue_and_stray_finalisations(
    postgres_url: str,
) -> None:
    """Migration 3's trigger: writers choose entry ids (from the sequence), so the server checks
    that an id was issued and that a commit/fail follows a reservation of its dataset."""
    with Ledger.open(postgres_url, monitor=QUIET) as ledger:
        ledger.create_budget("d", PureDP(1))
        ledger.create_budget("e", PureDP(1))
        reservation = ledger.reserve("d", PureDP(Fraction(1, 10)))
    conn, s = _raw(postgres_url)
    columns = "id, ts, kind, dataset, analyst, loss, query, query_hash, mechanism, ref, receipt"
    insert = (
        f"INSERT INTO {s}.entries ({columns}, actor, detail) OVERRIDING SYSTEM VALUE "
        "VALUES (%s, 0, %s, %s, '', 'pure:1/10', '', '', '', %s, '', '', '')"
    )
    with conn:
        cases: list[tuple[tuple[object, ...], str]] = [
            ((10**12, "reserve", "d", None), "not issued"),  # a future id
            ((None, "commit", "e", reservation.id), "does not follow"),  # another dataset
            ((None, "fail", "d", reservation.id + 10**6), "does not follow"),  # no reservation
        ]
        for args, match in cases:
            if args[0] is None:
                row = conn.execute(f"SELECT nextval(pg_get_serial_sequence('{s}.entries', 'id'))")
                issued = row.fetchone()
                assert issued is not None
                args = (issued[0], *args[1:])
            with pytest.raises(psycopg.errors.CheckViolation, match=match):
                conn.execute(insert, args)
        ids = conn.execute(f"SELECT count(*) FROM {s}.entries WHERE kind IN ('commit', 'fail')")
        assert ids.fetchone() == (0,)


def test_a_finalisation_that_loses_a_race_fails_alone(
    postgres_url: str, captured_requests: Any
) -> None:
    """Process A finalises its reservations without reading them (it wrote them); if process B
    finalised one meanwhile, the unique index refuses A's batch, and A reruns its requests one
    by one: that commit fails with ReservationStateError, its batch-mates succeed."""

    a = Ledger.open(postgres_url, monitor=QUIET)
    b = Ledger.open(postgres_url, monitor=QUIET)
    a.create_budget("d", PureDP(1))
    raced = a.reserve("d", PureDP(Fraction(1, 10)))
    other = a.reserve("d", PureDP(Fraction(1, 10)))
    b.commit(raced)  # B read it from the database; A's store still holds it as open

    store = a.store
    assert isinstance(store, PostgresStore)
    batch = captured_requests(
        store,
        [
            lambda: a.commit(raced),
            lambda: a.commit(other),
            lambda: a.reserve("d", PureDP(Fraction(1, 10))),
        ],
    )
    token = store._run_batch(batch)
    assert token is not None
    store._await_durable(token)
    assert isinstance(batch[0].error, ReservationStateError)
    assert "already finalised" in str(batch[0].error)
    assert batch[1].error is None and batch[1].result.reservation_id == other.id
    assert batch[2].error is None
    assert a.budget("d").charges == 3
    assert [e.id for e in a.pending()] == [batch[2].result[0].id]  # reserved, not finalised
    assert a.replay().ok
    a.close()
    b.close()


def test_a_batch_reads_its_own_writes(postgres_url: str, captured_requests: Any) -> None:
    """Requests batched in one transaction see the entries and budgets written by the requests
    before them (the buffer is laid over the database), and a refused request leaves nothing."""

    ledger = Ledger.open(postgres_url, monitor=QUIET)
    ledger.create_budget("d", PureDP(Fraction(3, 10)))
    store = ledger.store
    assert isinstance(store, PostgresStore)
    reserve = lambda: ledger.reserve("d", PureDP(Fraction(1, 10)))  # noqa: E731
    # the fourth reservation does not fit; the budget exists already (in the database)
    batch = captured_requests(
        store, [reserve, reserve, reserve, reserve, lambda: ledger.create_budget("d", PureDP(1))]
    )
    store._await_durable(store._run_batch(batch))
    assert [r.error is None for r in batch] == [True, True, True, False, False]
    assert isinstance(batch[3].error, BudgetExceededError)
    ids = [r.result[0].id for r in batch[:3]]
    assert ids == sorted(ids)
    assert ledger.budget("d").charges == 3
    assert ledger.spent("d") == PureDP(Fraction(3, 10))
    assert [e.kind for e in ledger.history("d")].count("reserve") == 3
    assert ledger.replay().ok
    ledger.close()


HOSTILE_TEXTS = [
    "NULL",
    "null",
    "",
    '{"a", b}',
    "a,b",
    'quote " and \\ backslash',
    "it's",
    "{}",
    "{NULL}",
    "ünïcödé ∑ 𝔼",
    "line\nbreak\ttab",
    "x" * 5000,
]


def test_a_batch_of_hostile_texts_is_stored_exactly(
    postgres_url: str, captured_requests: Any
) -> None:
    """A batch's entries travel as one array per column (``unnest``): texts that mean something
    in an array literal (NULL, braces, quotes, commas, backslashes) or are long come back
    exactly, in one batch and in id order; a missing ref stays NULL."""

    ledger = Ledger.open(postgres_url, monitor=QUIET)
    ledger.create_budget("d", PureDP(100))
    store = ledger.store
    assert isinstance(store, PostgresStore)
    calls: list[Callable[[], object]] = [
        (lambda t=t: ledger.reserve("d", PureDP(Fraction(1, 10)), query=t, mechanism=t))
        for t in HOSTILE_TEXTS
    ]
    batch = captured_requests(store, calls)
    store._await_durable(store._run_batch(batch))
    assert all(r.error is None for r in batch)
    reserves = [e for e in ledger.history("d") if e.kind == "reserve"]
    assert [e.query for e in reserves] == HOSTILE_TEXTS
    assert [e.mechanism for e in reserves] == HOSTILE_TEXTS
    assert all(e.ref is None for e in reserves)
    receipts = [ledger.commit(r.result[0], receipt=f"r-{i}-NULL") for i, r in enumerate(batch)]
    commits = [e for e in ledger.history("d") if e.kind == "commit"]
    assert [e.receipt for e in commits] == [r.id for r in receipts]
    assert [e.ref for e in commits] == [r.result[0].id for r in batch]
    assert ledger.replay().ok
    ledger.close()
