"""Every optional module a test skips without is in the `test` extra, so CI never skips it.

A test that imports an optional dependency with ``pytest.importorskip`` runs only where it is
installed. CI installs ``.[test]``; if the module is missing from that extra, the test is skipped
in CI every time (reported by ``-ra``, but easy to overlook). This test reads the extra from
pyproject.toml and every ``importorskip("…")`` under tests/.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SKIP = re.compile(r"importorskip\(\s*[\"']([A-Za-z0-9_.]+)[\"']")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+")
_SELF = re.compile(r"^dpkit\[([a-z,\s-]+)\]$")


def _test_extra() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    names: set[str] = set()
    seen: set[str] = set()

    def add(requirements: list[str]) -> None:
        for requirement in requirements:
            own = _SELF.match(requirement)
            if own is not None:  # dpkit[a,b]: the test extra pulls in other extras
                for extra in own.group(1).split(","):
                    if extra.strip() not in seen:
                        seen.add(extra.strip())
                        add(extras[extra.strip()])
                continue
            match = _NAME.match(requirement)
            assert match is not None, requirement
            names.add(match.group(0).lower().replace("-", "_"))

    # the main dependencies are always installed, and so is the test extra (with what it pulls)
    add([*project["dependencies"], *extras["test"]])
    return names


def test_every_importorskip_module_is_in_the_test_extra() -> None:
    extra = _test_extra()
    found = {
        (m.group(1).split(".")[0].lower(), path.relative_to(ROOT).as_posix())
        for path in (ROOT / "tests").rglob("*.py")
        for m in _SKIP.finditer(path.read_text())
    }
    assert {"polars", "pyspark"} <= {module for module, _ in found}
    missing = sorted((module, path) for module, path in found if module not in extra)
    assert not missing, f"skipped in CI: add to the `test` extra in pyproject.toml: {missing}"
