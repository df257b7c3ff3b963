"""The PostgreSQL store's own guarantees (the shared ledger suite runs on it via test_ledger.py):
append-only enforced by the server, versioned migrations, durability, failing closed."""

from __future__ import annotations

import psycopg
import pytest

from dpkit.core.losses import PureDP
from dpkit.errors import InvalidParameterError
from dpkit.ledger import BudgetMonitor, Ledger, LedgerCorruptError, LedgerError
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
