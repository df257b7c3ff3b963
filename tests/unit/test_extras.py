"""A lean core and extras that name themselves (dpkit/_extras.py, docs/design.md "Layers and
extras").

``pip install dpkit`` gives the core; importing an optional package without its libraries is
refused with one line naming the extra to install, and the ``dpkit`` command says the same
instead of printing a traceback. Each check runs in a fresh interpreter where a library is
blocked (``sys.modules[name] = None`` makes its import fail as if it were not installed).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dpkit._extras import DISTRIBUTIONS, EXTRAS

ROOT = Path(__file__).resolve().parents[2]

HEAVY = (
    "duckdb",
    "pandas",
    "sqlglot",
    "matplotlib",
    "sklearn",
    "typer",
    "rich",
    "fastapi",
    "pyspark",
    "pyarrow",
    "httpx",
)
"""Libraries of the extras: none may load with the core."""

CORE = (
    "dpkit",
    "dpkit.core",
    "dpkit.noise",
    "dpkit.mechanisms",
    "dpkit.accounting",
    "dpkit.ledger",
    "dpkit.local",
    "dpkit.sensitivity",
    "dpkit.workloads",
    "dpkit.transformations",
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    src = str(ROOT / "src")
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r})\n{code}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_core_loads_no_library_of_an_extra() -> None:
    probe = _run(
        f"import {', '.join(CORE)}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]", f"the core loaded {probe.stdout.strip()}"


def test_the_core_imports_with_every_extra_blocked() -> None:
    """As after ``pip install dpkit``: the core packages import without any extra's library."""
    blocked = sorted({m for modules in EXTRAS.values() for m in modules})
    probe = _run(
        f"for name in {blocked!r}:\n    sys.modules[name] = None\n"
        f"import {', '.join(CORE)}\n"
        "import dpkit as dp\n"
        "print(dp.make_laplace is not None)"
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "True"


@pytest.mark.parametrize(
    ("module", "extra", "blocked"),
    [
        ("dpkit.analytics", "analytics", "duckdb"),
        ("dpkit.analytics", "analytics", "sqlglot"),
        ("dpkit.ml", "ml", "sklearn"),
        ("dpkit.synth", "analytics", "duckdb"),
        ("dpkit.cli", "cli", "typer"),
        ("dpkit.client", "cli", "httpx"),
        ("dpkit.demos", "cli", "rich"),
        ("dpkit.demos", "cli", "matplotlib"),
        ("dpkit.service", "service", "fastapi"),
        ("dpkit.analytics._engines._spark", "spark", "pyspark"),
    ],
)
def test_an_extra_package_without_its_library_names_the_extra(
    module: str, extra: str, blocked: str
) -> None:
    probe = _run(
        f"sys.modules[{blocked!r}] = None\n"
        "from dpkit._extras import MissingExtraError\n"
        "try:\n"
        f"    import {module}\n"
        "except MissingExtraError as error:\n"
        "    print(error)\n"
        "    print(isinstance(error, ImportError), error.name)\n"
    )
    assert probe.returncode == 0, probe.stderr
    message, flags = probe.stdout.strip().splitlines()
    distribution = DISTRIBUTIONS.get(blocked, blocked)
    assert message.endswith(
        f"needs the {extra!r} extra: pip install 'dpkit[{extra}]' (missing: {distribution})"
    )
    assert flags == f"True {blocked}"


def test_the_dpkit_command_without_the_cli_extra_says_what_to_install() -> None:
    probe = _run(
        "sys.modules['typer'] = None\n"
        "sys.argv = ['dpkit', '--help']\n"
        "from dpkit.__main__ import main\n"
        "main()\n"
    )
    assert probe.returncode == 1
    assert "Traceback" not in probe.stderr
    assert probe.stderr.strip() == (
        "error: dpkit.cli needs the 'cli' extra: pip install 'dpkit[cli]' (missing: typer)"
    )


def test_the_console_script_is_the_guarded_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"dpkit": "dpkit.__main__:main"}


def _extra_distributions(extras: dict[str, list[str]], name: str) -> set[str]:
    out: set[str] = set()
    for requirement in extras[name]:
        match = re.match(r"dpkit\[([^\]]+)\]", requirement)
        if match:
            for inner in match.group(1).split(","):
                out |= _extra_distributions(extras, inner.strip())
        else:
            out.add(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower())
    return out


def test_pyproject_extras_install_what_each_package_checks() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in project["dependencies"]}
    assert core == {"numpy", "scipy", "randomgen", "dp-accounting", "mpmath"}
    extras = project["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        installed = _extra_distributions(extras, extra)
        for module in modules:
            assert DISTRIBUTIONS.get(module, module) in installed, (extra, module)
    everything = _extra_distributions(extras, "all")
    for extra in EXTRAS:
        assert _extra_distributions(extras, extra) <= everything
    # the README's test command installs every extra (the suite covers them all)
    assert everything <= _extra_distributions(extras, "test")
