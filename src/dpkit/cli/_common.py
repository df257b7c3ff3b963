"""What every ``dpkit`` command shares: the ledger location, consoles, errors, number style.

This module imports only the standard library and typer, so that ``dpkit --help`` and
``dpkit --version`` stay fast; each command imports the heavy layers (pandas, DuckDB, numpy) inside
its body.

The default ledger
------------------
Every command that reads or writes budgets uses the same ledger: ``--ledger PATH`` if given, else
the ``DPKIT_LEDGER`` environment variable, else :func:`default_ledger_path`
(``$XDG_DATA_HOME/dpkit/ledger.sqlite``, i.e. ``~/.local/share/dpkit/ledger.sqlite``).
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import typer

from dpkit._format import friendly, human_number

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "EPSILON_CEILING",
    "EPSILON_FLOOR",
    "CLIError",
    "check_key_columns",
    "check_ledger_file",
    "default_ledger_path",
    "err_console",
    "handles_errors",
    "out_console",
    "parse_keys",
    "resolve_ledger",
]

EPSILON_FLOOR = 1e-6
"""The smallest ε (and ρ) a command accepts. Below it the noise scale exceeds anything a float
represents usefully (ε = 1e-300 overflowed while reading the data); such a query can only ever
return noise, so it is refused as a parameter error before anything is charged."""

EPSILON_CEILING = 1e6
"""The largest ε (and ρ) a query accepts (dpkit.analytics._session.QUERY_LOSS_CEILING); budgets
may hold up to 1e9 (dpkit.ledger BUDGET_CEILING)."""

DELTA_WARN = 1e-5
"""δ above this prints a warning: δ is the chance that the guarantee fails outright, and it must
be far below 1/n for a table of n people (δ = 1/n allows releasing one random person's row)."""

DELTA_REFUSE = 0.1
"""δ at or above this is refused unless ``--allow-large-delta`` is given."""

_SQLITE_MAGIC = b"SQLite format 3\x00"


class CLIError(Exception):
    """A command-line failure: one readable line, a hint, and the exit code."""

    def __init__(self, message: str, hint: str = "", code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code


def default_ledger_path() -> Path:
    """``$XDG_DATA_HOME/dpkit/ledger.sqlite`` (``~/.local/share/dpkit/ledger.sqlite``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dpkit" / "ledger.sqlite"


LEDGER_HELP = (
    "The privacy ledger (SQLite). Default: $DPKIT_LEDGER, else "
    "~/.local/share/dpkit/ledger.sqlite (honours $XDG_DATA_HOME)."
)


def resolve_ledger(given: str | None) -> str:
    """The ledger every command uses: ``--ledger``, else ``$DPKIT_LEDGER``, else the default."""
    if given:
        return given
    env = os.environ.get("DPKIT_LEDGER")
    if env:
        return env
    return str(default_ledger_path())


def _ledger_file(ledger: str) -> Path | None:
    if ledger.startswith("sqlite:///"):
        ledger = ledger[len("sqlite:///") :]
    if ledger in ("", ":memory:") or "://" in ledger:
        return None
    return Path(ledger)


def check_ledger_file(ledger: str, *, must_exist: bool = True) -> None:
    """Refuse a ledger path that is missing (when ``must_exist``) or is not a dpkit ledger."""
    path = _ledger_file(ledger)
    if path is None:
        return
    if path.is_dir():
        raise CLIError(f"the ledger {str(path)!r} is a directory", "Give a file: --ledger PATH.")
    if not path.exists():
        if must_exist:
            raise CLIError(
                f"no ledger at {str(path)!r}",
                "A privacy officer creates each dataset's budget first: "
                "dpkit budget create DATASET --epsilon E --unit COLUMN "
                "(or point --ledger / DPKIT_LEDGER at an existing ledger).",
            )
        return
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as error:
        raise CLIError(
            f"cannot read the ledger {str(path)!r} ({error.strerror or type(error).__name__})",
            "Check the path and its permissions.",
        ) from None
    if head and head != _SQLITE_MAGIC:
        raise CLIError(
            f"{str(path)!r} is not a dpkit ledger (it is not a SQLite file)",
            "Point --ledger (or DPKIT_LEDGER) at the ledger file, not at a data file.",
        )
    if head:
        import sqlite3

        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            finally:
                conn.close()
        except sqlite3.Error:
            tables = set()
        if tables and "budgets" not in tables:
            raise CLIError(
                f"{str(path)!r} is not a dpkit ledger (a SQLite file without dpkit's tables)",
                "Point --ledger (or DPKIT_LEDGER) at the ledger file.",
            )


def _color_allowed(stderr: bool) -> bool:
    stream = sys.stderr if stderr else sys.stdout
    return not os.environ.get("NO_COLOR") and stream.isatty()


def out_console(width: int | None = None) -> Console:
    """The console for answers (stdout): no colour codes when piped or when NO_COLOR is set."""
    from rich.console import Console

    return Console(
        no_color=not _color_allowed(False),
        highlight=False,
        width=width,
        soft_wrap=False,
    )


def err_console() -> Console:
    """The console for progress, warnings, alerts and errors (stderr)."""
    from rich.console import Console

    return Console(stderr=True, no_color=not _color_allowed(True), highlight=False)


def fail(message: str, hint: str = "", code: int = 2) -> NoReturn:
    raise CLIError(message, hint, code)


def _report(message: str, hint: str, code: int) -> NoReturn:
    typer.echo(f"error: {friendly(message)}", err=True)
    if hint:
        typer.echo(f"hint: {friendly(hint)}", err=True)
    raise typer.Exit(code=code)


P = ParamSpec("P")
R = TypeVar("R")


def handles_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn every failure of a command into one readable line plus a hint (never a traceback)."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter, KeyboardInterrupt):
            raise
        except CLIError as error:
            _report(error.message, error.hint, error.code)
        except Exception as error:  # every error becomes one readable line
            from dpkit.errors import DPError

            if isinstance(error, DPError):
                message = str(error)
                hint = getattr(error, "hint", None) or ""
                if hint and message.endswith(hint):
                    message = message[: -len(hint)].rstrip()
                # 2: refused, nothing charged; 1: failed after the reservation (charged)
                _report(message, hint, 1 if getattr(error, "charged", False) else 2)
            if isinstance(error, OSError):
                where = f" {error.filename!r}" if getattr(error, "filename", None) else ""
                _report(
                    f"could not access{where}: {error.strerror or type(error).__name__}",
                    "Check the path exists, is writable and is not a directory.",
                    1,
                )
            # not dpkit's own: its text may quote the data, so only the class is named
            _report(
                f"the command failed ({type(error).__name__}); the message is withheld because it "
                "can quote the data",
                "Check the file, the declared keys, bounds and column types.",
                1,
            )

    return wrapper


def check_positive_flag(
    flag: str, value: float | None, *, floor: float | None = None, ceiling: float | None = None
) -> None:
    """A finite, positive number for ``flag`` (at least ``floor``, at most ``ceiling``)."""
    if value is None:
        return
    if not math.isfinite(value) or value <= 0:
        raise CLIError(f"{flag} must be a positive number (got {human_number(value)})")
    if floor is not None and value < floor:
        raise CLIError(
            f"{flag} {human_number(value)} is below dpkit's floor of {human_number(floor)}",
            f"With {flag} that small the answer is pure noise; use at least {floor:g} "
            "(docs/cli.md explains the floor). Nothing was charged.",
        )
    if ceiling is not None and value > ceiling:
        raise CLIError(
            f"{flag} {human_number(value)} is above dpkit's ceiling of {human_number(ceiling)}",
            f"At {flag} {ceiling:g} a count's noise is already 0 and a sum's is its bound / "
            f"{ceiling:g}: a larger value makes no answer more accurate (docs/cli.md). Nothing "
            "was charged.",
        )


class _Silent:
    """What :func:`spinner` gives when stderr is not a terminal: rich's disabled ``Progress``
    shows nothing either, but loading it (rich.progress, rich.live, ...) is not free."""

    task_ids = (0,)

    def update(self, task_id: Any, **fields: Any) -> None:
        """Nothing is shown."""

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def spinner(description: str) -> Any:
    """A transient progress display on stderr with elapsed time; silent when not a terminal."""
    console = err_console()
    if not console.is_terminal:
        return _Silent()
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    progress.add_task(description, total=None)
    return progress


# ------------------------------------------------------------------ --keys (query, remote)
def parse_keys(specs: list[str], schema: Mapping[str, str]) -> dict[str, list[Any]]:
    """``--keys column=v1,v2,...`` as lists of values, numbers and booleans read per ``schema``."""
    keys: dict[str, list[Any]] = {}
    for spec in specs:
        if "=" not in spec:
            raise CLIError(f"--keys {spec!r}: expected column=value1,value2,...")
        column, values = spec.split("=", 1)
        items = [v for v in values.split(",") if v != ""]
        if schema.get(column) == "numeric":
            try:
                parsed: list[Any] = [int(v) if v.lstrip("-").isdigit() else float(v) for v in items]
            except ValueError:
                raise CLIError(f"--keys {column}: {values!r} are not all numbers") from None
        elif schema.get(column) == "bool":
            parsed = [v.lower() in ("true", "1", "yes") for v in items]
        else:
            parsed = items
        keys[column] = parsed
    return keys


def check_key_columns(group_by: Sequence[str], specs: Sequence[str]) -> None:
    """--keys only for GROUP BY columns: keys of an ungrouped query, or of a column it does not
    group by, would be ignored and the query charged as if they had not been given."""
    named = [spec.split("=", 1)[0] for spec in specs]
    extra = [column for column in named if column not in group_by]
    if extra:
        raise CLIError(
            f"--keys {', '.join(extra)}: "
            + ("the query has no GROUP BY" if not group_by else "not a GROUP BY column"),
            "Give --keys only for the GROUP BY columns (or add the column to GROUP BY).",
        )
