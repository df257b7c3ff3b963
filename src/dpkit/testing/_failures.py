"""Does a release fail differently on neighbouring inputs? (An exception is an output.)

If one table makes a query raise and its neighbour makes it release, an observer tells the two
apart with certainty, whatever the noise. dpkit's rule (docs/design.md, "An exception is an
output"): once a release is possible, whether it succeeds and which error it raises must not
depend on the private data. Refusals are decided from public information (parameters, declared
schema, declared bounds) before any data is read; values a representation cannot hold are
clamped or saturated inside the privacy argument.

:func:`check_failure_behaviour` runs a release on both inputs of each neighbouring pair and
compares the *outcomes*: both released, or both raised an exception of the same type with the
same message. It does not look at released values (that is what the privacy checks do).
:func:`check_session_failures` does the same for a :class:`~dpkit.analytics.Session` query over
pairs of tables, building a fresh session (own in-memory ledger) for each table.
:func:`add_one_unit` makes such pairs: a table, and the table with one more privacy unit whose
rows are chosen to be hard (extreme values, NaN, keys a nanosecond apart, off-grid floats).

Example:
    >>> import dpkit as dp
    >>> from dpkit.testing import check_failure_behaviour
    >>> m = dp.make_laplace(sensitivity=1, epsilon=1)
    >>> check_failure_behaviour(m, [(0.0, 1.0), (2.0**40, 2.0**40 + 1)]).passed
    True
    >>> def fragile(x):  # refuses large values: whether it raises depends on the data
    ...     if x > 100:
    ...         raise ValueError("too large")
    ...     return m(x)
    >>> result = check_failure_behaviour(fragile, [(100.0, 101.0)])
    >>> result.passed, result.witness
    (False, (100.0, 101.0))
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpkit._extras import require
from dpkit.errors import PrivacyCheckError

__all__ = [
    "EXTREME_FLOATS",
    "FailureCheckResult",
    "add_one_unit",
    "check_failure_behaviour",
    "check_session_failures",
    "outcome_of",
]

EXTREME_FLOATS: tuple[float, ...] = (
    0.0,
    -0.0,
    0.1,
    3.3,
    5e-324,
    2.0**31,
    2.0**32,
    2.0**52 + 0.5,
    2.0**53,
    2.0**62,
    2.0**63,
    1e300,
    -1e300,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
)
"""Values that sit at the edges of float64, int64 and the output grids."""

Outcome = tuple[str, str]


def outcome_of(run: Callable[[Any], Any], data: Any) -> Outcome:
    """``("released", "")`` if ``run(data)`` returns, else (exception type, message).

    Warnings are silenced; ``KeyboardInterrupt`` and ``SystemExit`` propagate.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run(data)
    except Exception as error:  # an exception is an output: record it, whatever it is
        return (f"{type(error).__module__}.{type(error).__qualname__}", str(error))
    return ("released", "")


@dataclass(frozen=True, slots=True)
class FailureCheckResult:
    """The outcome of :func:`check_failure_behaviour`."""

    passed: bool
    pairs_checked: int
    witness: tuple[Any, Any] | None = None
    outcomes: tuple[Outcome, Outcome] | None = None
    released_pairs: int = 0
    refused_pairs: list[Outcome] = field(default_factory=list)

    def raise_if_failed(self) -> FailureCheckResult:
        """Raise :class:`PrivacyCheckError` naming the pair whose outcomes differ."""
        if not self.passed:
            assert self.outcomes is not None  # set whenever passed is False
            first, second = self.outcomes
            raise PrivacyCheckError(
                "neighbouring inputs fail differently: "
                f"{_describe(first)} on one and {_describe(second)} on the other "
                f"(pair {self.witness!r}). Whether a release fails must not depend on the data."
            )
        return self

    def __repr__(self) -> str:
        if self.passed:
            return (
                f"FailureCheckResult(passed=True, pairs_checked={self.pairs_checked}, "
                f"released_pairs={self.released_pairs})"
            )
        return f"FailureCheckResult(passed=False, witness={self.witness!r})"


def _describe(outcome: Outcome) -> str:
    kind, message = outcome
    if kind == "released":
        return "a release"
    return f"{kind.rsplit('.', 1)[-1]}({message[:120]!r})"


def check_failure_behaviour(
    run: Callable[[Any], Any],
    pairs: Iterable[tuple[Any, Any]],
    *,
    repeats: int = 1,
) -> FailureCheckResult:
    """Run ``run`` on both inputs of every pair; fail if their outcomes differ.

    Args:
        run: a measurement, or any callable releasing a result for one input.
        pairs: neighbouring inputs (at the distance the release protects).
        repeats: run each input this many times (outcomes must agree across runs too, so a
            failure that depends on the noise is caught as well as one that depends on data).

    Returns:
        A :class:`FailureCheckResult`; ``passed`` is False at the first pair whose outcomes
        differ, with that pair as ``witness``.
    """
    checked = 0
    released = 0
    refused: list[Outcome] = []
    for x, y in pairs:
        outcomes = {outcome_of(run, data) for data in (x, y) for _ in range(repeats)}
        checked += 1
        if len(outcomes) > 1:
            first, second = sorted(outcomes)[:2]
            return FailureCheckResult(False, checked, (x, y), (first, second), released, refused)
        (only,) = outcomes
        if only[0] == "released":
            released += 1
        else:
            refused.append(only)
    return FailureCheckResult(True, checked, None, None, released, refused)


def add_one_unit(
    table: Any, unit_column: str, rows: Sequence[Mapping[str, Any]], *, unit: Any = None
) -> tuple[Any, Any]:
    """(table, table plus ``rows`` as one new privacy unit): neighbours under add/remove-one.

    ``table`` is a pandas DataFrame; the new unit's id is ``unit`` (default: a value not in the
    table). Columns keep their dtypes where the new values fit them.
    """
    require("analytics", by="dpkit.testing.add_one_unit")
    import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
    if unit is None:
        existing = frame[unit_column]
        unit = (
            int(existing.max()) + 1 if len(existing) and existing.dtype.kind in "iu" else "__new__"
        )
    extra = pd.DataFrame([{**row, unit_column: unit} for row in rows])
    for name in frame.columns:
        if name in extra.columns:
            # keep the new values as they are when they do not fit: the table's dtype widens
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                extra[name] = extra[name].astype(frame[name].dtype)
    bigger = pd.concat([frame, extra[[c for c in frame.columns if c in extra.columns]]])
    return frame, bigger.reset_index(drop=True)


def check_session_failures(
    pairs: Iterable[tuple[Any, Any]],
    build_query: Callable[[Any], Any],
    *,
    privacy_unit: str,
    budget: Any,
    session_options: Mapping[str, Any] | None = None,
    **evaluate_options: Any,
) -> FailureCheckResult:
    """:func:`check_failure_behaviour` for a Session query over neighbouring tables.

    For each table a fresh :class:`~dpkit.analytics.Session` is built with its own in-memory
    ledger holding ``budget``; ``build_query(session)`` returns the query, which is evaluated
    with ``evaluate_options`` (``epsilon=``, ``delta=``, ...). It may instead return a
    zero-argument callable that makes the release itself (e.g.
    ``lambda: session.sample_and_aggregate(...)``), which is called as is.

    Example:
        >>> import pandas as pd, dpkit as dp
        >>> from dpkit.analytics import count
        >>> from dpkit.testing import add_one_unit, check_session_failures
        >>> base = pd.DataFrame({"u": [1, 2], "x": [1.0, 2.0]})
        >>> pairs = [add_one_unit(base, "u", [{"x": float("nan")}])]
        >>> check_session_failures(pairs, lambda s: s.query().agg(count()), privacy_unit="u",
        ...     budget=dp.PureDP(1), session_options={"max_rows": 1}, epsilon=1).passed
        True
    """
    from dpkit.analytics import Session

    options = dict(session_options or {})

    def run(table: Any) -> Any:
        session = Session(table, privacy_unit=privacy_unit, budget=budget, **options)
        try:
            query = build_query(session)
            if callable(query):
                return query()
            return session.evaluate(query, **evaluate_options)
        finally:
            session.close()

    return check_failure_behaviour(run, pairs)
