"""dpkit._door.release, the one function outside dpkit.ledger that reserves budget: its three
outcomes, what the ledger holds after each, and that no other module reserves."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from dpkit._door import Books, Stage, release, watching
from dpkit.core._losses import PureDP
from dpkit.errors import (
    BudgetExceededError,
    DPError,
    InternalError,
    InvalidDataError,
    InvalidParameterError,
    UnreadableDataError,
)
from dpkit.ledger import Ledger

SRC = Path(__file__).resolve().parents[2] / "src" / "dpkit"


def _books() -> Books:
    ledger = Ledger.open(":memory:")
    ledger.create_budget("d", PureDP(1), privacy_unit="person")
    return Books(ledger, "d", privacy_unit="person")


def _kinds(books: Books) -> list[str]:
    return [e.kind for e in books.ledger.history("d") if e.kind not in ("create", "alert")]


def test_a_release_is_committed_before_it_is_returned() -> None:
    books = _books()
    seen: list[list[str]] = []

    def body(stage: Stage) -> int:
        seen.append(_kinds(books))  # the charge is on the books before the data is read
        return 42

    value, receipt = release(books, PureDP(0.5), body, query="q", mechanism="m")
    assert value == 42 and receipt is not None
    assert seen == [["reserve"]]
    assert _kinds(books) == ["reserve", "commit"]
    assert books.ledger.remaining("d") == PureDP(0.5)


def test_a_refusal_in_the_rehearsal_reserves_nothing() -> None:
    books = _books()
    read: list[int] = []

    def refuse() -> None:
        raise InvalidParameterError("x", 3, "at most 2")

    with pytest.raises(InvalidParameterError):
        release(
            books, PureDP(0.5), lambda s: read.append(1), query="q", mechanism="m", rehearse=refuse
        )
    assert read == [] and _kinds(books) == []


def test_a_bug_in_the_rehearsal_is_internal_and_uncharged() -> None:
    books = _books()
    with pytest.raises(InternalError) as info:
        release(books, PureDP(0.5), lambda s: 1, query="q", mechanism="m", rehearse=lambda: 1 / 0)
    assert info.value.charged is False and _kinds(books) == []


def test_over_budget_is_refused_before_the_body_runs() -> None:
    books = _books()
    read: list[int] = []
    with pytest.raises(BudgetExceededError):
        release(books, PureDP(2), lambda s: read.append(1), query="q", mechanism="m")
    assert read == [] and _kinds(books) == []


_GRPC_ERROR = type("_InactiveRpcError", (Exception,), {"__module__": "grpc._channel"})


@pytest.mark.parametrize(
    ("reading", "error", "expected"),
    [
        (True, OSError("row 7 = 3.25"), UnreadableDataError),
        (True, KeyError("secret 3.25"), InternalError),
        # a Spark Connect server gone away mid-read: gRPC's error, not a dpkit bug
        (True, _GRPC_ERROR("row 7 = 3.25"), UnreadableDataError),
        (False, OSError("row 7 = 3.25"), InternalError),
        (None, ValueError("secret 3.25"), InternalError),
    ],
)
def test_a_failure_after_the_reservation_is_charged_and_says_what_it_is(
    reading: bool | None, error: Exception, expected: type[DPError]
) -> None:
    books = _books()

    def body(stage: Stage) -> Any:
        stage(reading)
        raise error

    with pytest.raises(expected) as info:
        release(books, PureDP(0.5), body, query="q", mechanism="m")
    assert "3.25" not in str(info.value)  # an engine's text can quote the data
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert _kinds(books) == ["reserve", "fail"]
    assert books.ledger.remaining("d") == PureDP(0.5)  # no refunds


def test_keyboard_interrupt_passes_through_and_stays_charged() -> None:
    books = _books()

    def body(stage: Stage) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        release(books, PureDP(0.5), body, query="q", mechanism="m")
    assert _kinds(books) == ["reserve", "fail"]


def _reserve_calls(path: Path) -> list[int]:
    """Lines that call ``.reserve(...)`` or define a ``reserve`` method (a ledger subclass
    outside dpkit.ledger would be a second door)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "reserve"
        )
        or (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "reserve")
    ]


def test_only_the_door_reserves_outside_the_ledger() -> None:
    """Issue 22: one function outside dpkit.ledger reserves budget (once), and nothing outside
    the ledger overrides ``reserve`` (the service's per-thread ledger subclass is gone: it
    watches the door instead, :func:`dpkit._door.watching`)."""
    callers = {
        str(path.relative_to(SRC)): lines
        for path in SRC.rglob("*.py")
        if "ledger" not in path.relative_to(SRC).parts[:1]
        for lines in [_reserve_calls(path)]
        if lines
    }
    assert set(callers) == {"_door.py"}, callers
    assert len(callers["_door.py"]) == 1


def test_a_watch_sees_the_reservations_made_in_its_block_only() -> None:
    books = _books()
    release(books, PureDP(0.1), lambda stage: 1, query="q", mechanism="m")  # not watched
    with watching() as watch:
        assert watch.reservation is None
        with pytest.raises(BudgetExceededError):  # refused: nothing reserved
            release(books, PureDP(5), lambda stage: 1, query="q", mechanism="m")
        assert watch.reservation is None

        def body(stage: Stage) -> Any:
            raise RuntimeError("boom")

        with pytest.raises(InternalError):
            release(books, PureDP(0.2), body, query="q", mechanism="m")
        first = watch.reservation
        assert first is not None and first.loss == PureDP(0.2)
        with watching() as inner:  # a nested block has its own watch
            release(books, PureDP(0.3), lambda stage: 1, query="q", mechanism="m")
        assert inner.reservation.loss == PureDP(0.3)
        assert watch.reservations == [first]


def test_a_watch_is_per_thread() -> None:
    import threading

    books = _books()
    with watching() as watch:
        thread = threading.Thread(
            target=lambda: release(books, PureDP(0.1), lambda s: 1, query="q", mechanism="m")
        )
        thread.start()
        thread.join()
        assert watch.reservation is None


@pytest.mark.parametrize(
    "error",
    [
        UnreadableDataError("row 7 holds 3.25"),
        InvalidDataError("column x", "value 3.25 is not a number"),
        InvalidParameterError("x", 3.25, "secret"),
    ],
)
def test_a_dpkit_error_raised_by_third_party_code_keeps_its_message_withheld(
    error: DPError,
) -> None:
    """A third-party engine (here: this test module) can raise dpkit's error classes with data
    in the text; after the reservation only dpkit's own code's messages are kept."""
    books = _books()

    def body(stage: Stage) -> Any:
        stage(True)
        raise error

    with pytest.raises(DPError) as info:
        release(books, PureDP(0.5), body, query="q", mechanism="m")
    assert "3.25" not in str(info.value)
    assert getattr(info.value, "charged", False)


def _dpkit_function(source: str, name: str) -> Any:
    """A function whose code lives, as far as tracebacks tell, in a dpkit module."""
    import dpkit

    namespace: dict[str, Any] = {}
    filename = str(Path(dpkit.__file__).parent / "_door_test_body.py")
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def test_a_dpkit_error_raised_by_dpkit_keeps_its_message() -> None:
    books = _books()
    body = _dpkit_function(
        "from dpkit._exact import check_epsilon\n"
        "def body(stage):\n"
        "    stage(False)\n"
        "    check_epsilon(-7)\n",
        "body",
    )
    with pytest.raises(InternalError) as info:
        release(books, PureDP(0.5), body, query="q", mechanism="m")
    assert "epsilon" in str(info.value) and info.value.charged


def test_a_dpkit_helper_called_by_third_party_code_on_data_is_withheld() -> None:
    """A plugin calling a dpkit check on a data value gets a dpkit-raised error that quotes the
    value: a frame outside dpkit between the door and the raise withholds it."""
    from dpkit._exact import check_epsilon

    books = _books()

    def plugin(stage: Stage) -> Any:
        stage(True)
        check_epsilon("alice-ssn-123")  # type: ignore[arg-type]

    with pytest.raises(DPError) as info:
        release(books, PureDP(0.5), plugin, query="q", mechanism="m")
    assert "alice" not in str(info.value) and getattr(info.value, "charged", False)


class _FailFails(Ledger):
    def fail(self, reservation: Any, reason: str = "") -> None:
        raise OSError("database is locked")


def test_a_ledger_that_cannot_record_the_failure_still_gives_a_charged_dpkit_error() -> None:
    ledger = _FailFails.open(":memory:")
    ledger.create_budget("d", PureDP(1), privacy_unit="person")
    books = Books(ledger, "d", privacy_unit="person")

    def body(stage: Stage) -> Any:
        raise ValueError("could not parse alice-ssn-123")

    with pytest.raises(InternalError) as info:
        release(books, PureDP(0.5), body, query="q", mechanism="m")
    assert info.value.charged and "alice" not in str(info.value)
    assert info.value.__suppress_context__
    assert ledger.remaining("d") == PureDP(0.5)  # the pending reservation counts in full


class _CommitFails(Ledger):
    def commit(self, reservation: Any, receipt: str | None = None) -> Any:
        raise OSError("disk full at row 3.25")


def test_a_commit_that_fails_withholds_the_value_and_stays_charged() -> None:
    ledger = _CommitFails.open(":memory:")
    ledger.create_budget("d", PureDP(1), privacy_unit="person")
    books = Books(ledger, "d", privacy_unit="person")
    with pytest.raises(InternalError) as info:
        release(books, PureDP(0.5), lambda stage: "secret 41", query="q", mechanism="m")
    assert info.value.charged and "3.25" not in str(info.value) and "41" not in str(info.value)
    assert "could not record its commit" in str(info.value)
    assert ledger.remaining("d") == PureDP(0.5)  # the pending reservation counts in full
