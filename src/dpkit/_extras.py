"""The optional parts of dpkit and the one error that names what to install.

``pip install dpkit`` is the core: the framework, noise, mechanisms, accounting, the ledger and
the local-model clients (numpy, scipy, randomgen, dp-accounting, mpmath). Each optional package
checks its libraries when it is imported, with :func:`require`, and a missing one is refused
with a :class:`MissingExtraError` (an :class:`ImportError`) naming the extra to install::

    dpkit.analytics needs the 'analytics' extra: pip install 'dpkit[analytics]' (missing: duckdb)

:data:`EXTRAS` lists, per extra, the modules it provides; pyproject.toml's
``[project.optional-dependencies]`` installs them (tests/unit/test_extras.py checks that the two
agree). The check only looks the modules up (:func:`importlib.util.find_spec`); nothing heavy is
imported by it.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtraError", "require"]

_ANALYTICS = ("duckdb", "pyarrow", "pandas", "sqlglot")
_CLI = ("typer", "rich", "matplotlib", "httpx", *_ANALYTICS)

EXTRAS: dict[str, tuple[str, ...]] = {
    "analytics": _ANALYTICS,
    "ml": ("sklearn", *_ANALYTICS),
    "cli": _CLI,
    "service": ("fastapi", "uvicorn", "multipart", *_ANALYTICS),
    "spark": ("pyspark", *_ANALYTICS),
}
"""Import names each extra provides (its own and those of the extras it includes)."""

DISTRIBUTIONS = {"sklearn": "scikit-learn", "multipart": "python-multipart"}
"""The distribution to install where it differs from the import name."""


class MissingExtraError(ImportError):
    """An optional part of dpkit was imported without the libraries of its extra."""


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent that fails to import, or a module set to None
        return True


def require(extra: str, by: str) -> None:
    """Refuse (with :class:`MissingExtraError`) to go on importing ``by`` unless every module of
    ``extra`` (:data:`EXTRAS`) can be imported."""
    missing = [m for m in EXTRAS[extra] if _missing(m)]
    if missing:
        names = ", ".join(DISTRIBUTIONS.get(m, m) for m in missing)
        error = MissingExtraError(
            f"{by} needs the {extra!r} extra: pip install 'dpkit[{extra}]' (missing: {names})",
            name=missing[0],
        )
        raise error
