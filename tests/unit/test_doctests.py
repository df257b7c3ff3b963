"""Every docstring example in dpkit runs and prints what it says (one test per docstring).

The examples are the first code users copy, so they are tests. Each is collected from every
module of the package (``pkgutil.walk_packages``; importing a module must not need anything
outside the `test` extra) and run with :mod:`doctest`'s default flags, as ``--doctest-modules``
would. An example must not depend on randomness: each runs twice, once on the secure generator
and once on a fixed (insecure, test-only) stream, and must pass both times — print properties of
a release (its type, shape, loss), never a noisy value.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import warnings

import pytest

import dpkit
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed


def _doctests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found: dict[str, doctest.DocTest] = {}
    names = ["dpkit"] + [
        info.name
        for info in pkgutil.walk_packages(dpkit.__path__, prefix="dpkit.")
        if not info.name.endswith("__main__")  # runs the command line when imported
    ]
    for name in names:
        module = importlib.import_module(name)
        for test in finder.find(module, name):
            # a re-exported object is found in its own module only
            if test.examples and test.name.startswith(name) and test.name not in found:
                found[test.name] = test
    return sorted(found.values(), key=lambda t: t.name)


DOCTESTS = _doctests()

# Known wrong examples, each with the reason (none at present).
KNOWN_WRONG: dict[str, str] = {}


def _params() -> list[object]:
    return [
        pytest.param(
            test,
            id=test.name,
            marks=pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[test.name])
            if test.name in KNOWN_WRONG
            else (),
        )
        for test in DOCTESTS
    ]


def _run(test: doctest.DocTest) -> tuple[int, str]:
    lines: list[str] = []
    runner = doctest.DocTestRunner(verbose=False)
    copy = doctest.DocTest(
        test.examples, dict(test.globs), test.name, test.filename, test.lineno, test.docstring
    )
    runner.run(copy, out=lines.append, clear_globs=True)
    return runner.failures, "".join(lines)


def test_the_package_has_examples() -> None:
    assert len(DOCTESTS) >= 40
    assert set(KNOWN_WRONG) <= {t.name for t in DOCTESTS}


@pytest.mark.parametrize("test", _params())
def test_docstring_example(test: doctest.DocTest) -> None:
    failures, report = _run(test)
    assert failures == 0, f"{test.name} ({test.filename}:{test.lineno}):\n{report}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomnessWarning)
        with insecure_deterministic_seed(20_240_601):
            failures, report = _run(test)
    assert failures == 0, f"{test.name} depends on the random stream:\n{report}"
