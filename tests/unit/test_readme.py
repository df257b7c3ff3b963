"""The README's promises: its two commands, its examples, and CI running the same test command."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _commands(text: str) -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", text)


def test_readme_gives_exactly_two_setup_commands() -> None:
    commands = _commands((ROOT / "README.md").read_text())
    assert len(commands) == 2
    assert commands[0].endswith("dpkit demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    test_command = _commands((ROOT / "README.md").read_text())[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_readme_examples_run() -> None:
    parser = doctest.DocTestParser()
    text = (ROOT / "README.md").read_text()
    test = parser.get_doctest(text, {}, "README.md", str(ROOT / "README.md"), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0, f"{runner.failures} README example(s) failed"
    assert runner.tries >= 8
