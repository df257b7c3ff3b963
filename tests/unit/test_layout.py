"""tests/unit mirrors src/dpkit (docs/verification.md, "Where a test lives").

A unit test of ``src/dpkit/<package path>/<module>.py`` lives in
``tests/unit/<package path>/test_<module>.py`` (leading underscore dropped; a file that protects
several modules of one package may be named after the package or a topic). Only tests of the
whole repository stay at the top of tests/unit: those named after a top-level module of dpkit
(``_door.py`` -> ``test_door.py``), those of a document (``*docs*``) and the few listed below.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"
SRC = ROOT / "src" / "dpkit"

# whole-repository checks kept at the top of tests/unit, each with what it checks
CROSS_CUTTING = {
    "test_api.py": "the pinned public surface, dpkit.__all__",
    "test_architecture.py": "the import graph of every module in src/dpkit",
    "test_doctests.py": "every docstring example of every module",
    "test_layout.py": "this file: the layout of tests/unit itself",
    "test_privacy_checks_survive_O.py": "no privacy check in src/dpkit is an assert",
    "test_public_api.py": "every public module's pinned __all__, one import path per name",
    "test_readme.py": "the README's promises and CI's test command",
    "test_test_extra.py": "every module a test skips without is in the test extra",
}

# directories under tests/unit that hold data, not tests
DATA_DIRS = {"snapshots", "__pycache__"}


def _test_dirs(unit: Path) -> list[Path]:
    return sorted(
        d
        for d in unit.rglob("*")
        if d.is_dir() and not any(part in DATA_DIRS for part in d.relative_to(unit).parts)
    )


def _strays(unit: Path, src: Path) -> list[str]:
    """Directories under ``unit`` with no package at the same path under ``src``."""
    return [
        d.relative_to(unit).as_posix()
        for d in _test_dirs(unit)
        if not (src / d.relative_to(unit) / "__init__.py").is_file()
    ]


def _misplaced(unit: Path, src: Path) -> list[str]:
    """Test files at the top of ``unit`` that are not whole-repository checks."""
    top_modules = {
        p.stem.lstrip("_") for p in src.glob("*.py") if p.stem not in {"__init__", "__main__"}
    }
    return [
        p.name
        for p in sorted(unit.glob("test_*.py"))
        if p.name not in CROSS_CUTTING
        and "docs" not in p.stem
        and p.stem.removeprefix("test_") not in top_modules
    ]


def test_every_test_directory_mirrors_a_package_of_dpkit() -> None:
    strays = _strays(UNIT, SRC)
    assert not strays, (
        f"{strays} under tests/unit have no matching package under src/dpkit: a unit test lives "
        "in tests/unit/<the path of its module's package under src/dpkit>/ (move it, or move "
        "the directory along with the package it tests)"
    )


def test_every_test_directory_is_a_package() -> None:
    # tests/unit is a package, so repeated basenames (analytics/test_session.py,
    # ml/test_session.py) import under distinct names; each subdirectory must be one too
    missing = [
        d.relative_to(ROOT).as_posix()
        for d in _test_dirs(UNIT)
        if not (d / "__init__.py").is_file()
    ]
    assert not missing, f"{missing} need an empty __init__.py"


def test_top_level_tests_are_whole_repository_checks() -> None:
    misplaced = _misplaced(UNIT, SRC)
    assert not misplaced, (
        f"{misplaced} sit at the top of tests/unit: move each to tests/unit/<package path>/ of "
        "the module it tests (or, if it checks the whole repository, add it to CROSS_CUTTING "
        "with what it checks)"
    )


def test_the_layout_checks_can_fail(tmp_path: Path) -> None:
    src, unit = tmp_path / "src", tmp_path / "unit"
    for package in ("", "ml", "mechanisms/_ladder"):
        (src / package).mkdir(parents=True, exist_ok=True)
        (src / package / "__init__.py").touch()
    (src / "_door.py").touch()
    for d in ("ml", "mechanisms/_ladder", "ml/snapshots", "ledger", "ml/kmeans", "mechanisms"):
        (unit / d).mkdir(parents=True, exist_ok=True)
    for name in ("test_door.py", "test_api.py", "test_ladder_docs.py", "test_kmeans.py"):
        (unit / name).touch()
    # `mechanisms` is a directory under src but not a package; `ledger` and `ml/kmeans` do not exist
    assert _strays(unit, src) == ["ledger", "mechanisms", "ml/kmeans"]
    assert _misplaced(unit, src) == ["test_kmeans.py"]
