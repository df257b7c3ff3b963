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
