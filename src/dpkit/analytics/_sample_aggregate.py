"""Sample-and-aggregate inside the Session (:meth:`dpkit.analytics.Session.sample_and_aggregate`).

The flow is the Session's usual "spend before you speak":

1. **Public checks** (no data read): the function is callable; the columns exist (after the
   optional ``base`` query's filters and derived columns); ``m`` is an integer with
   ``2 <= m <= n_min`` (the fewest privacy units the declared ``n_range`` allows) or, when ``m``
   is not given, :func:`dpkit.sensitivity.choose_m` picks it from ``n_range``, the accuracy
   target, ε and the width of the declared output range; the output shape, range, default and
   aggregator are checked by :func:`dpkit.sensitivity.make_sample_and_aggregate`, and an optional
   public ``probe`` frame is run through the function. Every refusal is a
   :class:`~dpkit.errors.DPError` raised here.
2. **Reserve** the aggregator's loss in the ledger (over budget: nothing is read or charged).
3. **Blocks from the engine** (:mod:`dpkit.analytics._blocks`): units are hashed with a fresh
   secret salt into m blocks, the function runs on each block's rows, and a block whose function
   raises, returns the wrong shape or NaN/inf gets the public default (the centre of the output
   range unless declared), then every output is clamped into the declared range.
4. **Aggregate privately** with the aggregators of :mod:`dpkit.sensitivity._sample_aggregate`
   (coordinate by coordinate, ε/d each), then commit the receipt.

Guarantee: ε-DP for tables that differ in all the rows of one privacy unit (add/remove): the
salted hash puts every row of a unit in one block, so a unit changes at most one of the m block
outputs, whatever its number of rows (no contribution bound is needed), and each aggregator is
ε-DP for a change of one of m values in the declared range (docs/sensitivity.md §6 and §10).
With ``rho=`` the release is run at ε = √(2ρ) (rounded down) and charged ε²/2 <= ρ as zCDP; with
``delta=`` the release is still pure ε-DP and is charged (ε, 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

from dpkit._exact import Number, fraction_of
from dpkit.analytics._blocks import BlockCall, engine_blocks
from dpkit.analytics._expr import check_unicode
from dpkit.analytics._query import Query, count
from dpkit.analytics._results import Accuracy, TableRelease
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP
from dpkit.errors import InternalError, InvalidParameterError
from dpkit.noise import random_words
from dpkit.sensitivity._info import SampleAggregateInfo
from dpkit.sensitivity._sample_aggregate import choose_m, make_sample_and_aggregate

__all__ = ["run_sample_and_aggregate"]


def _sqrt_down(x: Fraction) -> Fraction:
    guess = Fraction(math.sqrt(float(x))).limit_denominator(10**12)
    while guess * guess > x:
        guess *= Fraction(999_999_999_999, 10**12)
    return guess


def _output_names(names: Sequence[str] | None, d: int) -> list[str]:
    if names is None:
        return ["value"] if d == 1 else [f"value_{j}" for j in range(d)]
    out = [str(n) for n in names]
    if len(out) != d or len(set(out)) != d or not all(out):
        raise InvalidParameterError("names", names, f"{d} distinct non-empty names")
    for name in out:
        check_unicode("names", name)  # a table column the release is built with
    return out


MAX_OUTPUTS = 1024
"""The most output coordinates (the product of ``output_shape``) sample_and_aggregate
releases: each is aggregated on its own, after the reservation; 10,000 took 65 s and 10^6
would take hours (issue 21). Refused before anything is reserved."""

MAX_BLOCKS = 100_000
"""The most blocks ``m``: ``fn`` runs once per block, after the reservation."""


def _check_sizes(output_shape: Any, m: Any) -> None:
    """Refuse an output shape or a number of blocks too large to run, from public inputs."""
    dims = [output_shape] if not isinstance(output_shape, tuple | list) else list(output_shape)
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in dims):
        size = math.prod(int(v) for v in dims)
        if size > MAX_OUTPUTS:
            raise InvalidParameterError(
                "output_shape",
                output_shape,
                f"at most {MAX_OUTPUTS:,} values in all (this shape has {size:,})",
                "Each value is aggregated separately after the budget is reserved; release "
                "fewer values or summarise them in fn. Nothing was charged.",
            )
    if isinstance(m, int | np.integer) and not isinstance(m, bool) and m > MAX_BLOCKS:
        raise InvalidParameterError(
            "m", m, f"at most {MAX_BLOCKS:,} blocks", "fn runs once per block. Nothing was charged."
        )


def run_sample_and_aggregate(
    session: Any,
    fn: Callable[[pd.DataFrame], Any],
    *,
    columns: Sequence[str],
    output_range: tuple[Number, Number],
    n_range: tuple[int, int],
    output_shape: Sequence[int] | int = 1,
    m: int | None = None,
    accuracy: Number | None = None,
    aggregator: str = "winsorized_mean",
    default: Number | None = None,
    widen: Number = 1,
    min_block_units: int = 10,
    base: Query | None = None,
    probe: Any = None,
    names: Sequence[str] | None = None,
    budget: PrivacyLoss,
) -> TableRelease:
    """See :meth:`dpkit.analytics.Session.sample_and_aggregate` (the public entry point)."""
    from dpkit.analytics._planner import rewrite, validate

    if not callable(fn):
        raise InvalidParameterError("fn", fn, "a function of a pandas DataFrame")
    if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
        raise InvalidParameterError("columns", columns, "a non-empty list of column names")
    wanted = [check_unicode("columns", str(c)) for c in columns]
    if len(set(wanted)) != len(wanted):
        raise InvalidParameterError("columns", columns, "distinct column names")
    if not callable(getattr(session.engine, "blocks", None)):  # the engine protocol, not names
        engine_name = getattr(session.engine, "name", "") or type(session.engine).__name__
        raise InvalidParameterError(
            "engine", engine_name, "an engine that computes blocks: 'duckdb', 'pandas' or 'spark'"
        )
    checked = validate((base or Query()).agg(count()), session.schema, session.privacy_unit)
    for name in wanted:
        if name not in checked.schema:
            raise InvalidParameterError(
                "columns", name, f"a column of the table ({', '.join(map(repr, checked.schema))})"
            )
        if name.startswith("__dpkit"):
            raise InvalidParameterError("columns", name, "a name not starting with '__dpkit'")
    # the budget: ε for the (pure) aggregator, and what the ledger is charged
    if isinstance(budget, ZCDP):
        epsilon = _sqrt_down(2 * budget.rho)
        charge: PrivacyLoss = ZCDP(epsilon * epsilon / 2)
    elif isinstance(budget, ApproxDP):
        epsilon = budget.epsilon
        charge = PureDP(epsilon)
    else:
        epsilon = budget.epsilon
        charge = PureDP(epsilon)
    if m is None:
        if accuracy is None:
            raise InvalidParameterError(
                "m", m, "an integer >= 2, or accuracy= (a target) so that choose_m picks m"
            )
        if not (isinstance(output_range, tuple | list) and len(output_range) == 2):
            raise InvalidParameterError("output_range", output_range, "a pair (lo, hi)")
        width = fraction_of("output_range", output_range[1]) - fraction_of(
            "output_range", output_range[0]
        )
        if width <= 0:
            raise InvalidParameterError("output_range", output_range, "lo < hi")
        chosen = choose_m(
            n_range,
            accuracy,
            epsilon=epsilon,
            output_width=width,
            min_block_units=min_block_units,
        )
        rule = (
            f"m={chosen} chosen by choose_m(n_range={tuple(n_range)}, accuracy={accuracy}, "
            f"ε={float(epsilon):.4g}, width={float(width):g}, "
            f"min_block_units={min_block_units})"
        )
    else:
        chosen = m
        rule = f"m={m} declared"
    _check_sizes(output_shape, chosen)
    measurement = make_sample_and_aggregate(
        fn,
        m=chosen,
        n_range=n_range,
        output_shape=output_shape,
        output_range=output_range,
        epsilon=epsilon,
        aggregator=aggregator,
        default=default,
        widen=widen,
        probe=probe,
    )
    if measurement.loss != PureDP(epsilon):  # pragma: no cover - the aggregators are pure ε
        raise InvalidParameterError("aggregator", aggregator, "a pure ε-DP aggregator")
    shape = (output_shape,) if isinstance(output_shape, int) else tuple(output_shape)
    d = math.prod(shape)
    labels = _output_names(names, d)
    lo = float(fraction_of("output_range", output_range[0]))
    hi = float(fraction_of("output_range", output_range[1]))
    fill = np.full(d, (lo + hi) / 2 if default is None else float(default))
    call = BlockCall(fn, shape, fill)
    steps = rewrite(checked.steps, frozenset({session.privacy_unit, *wanted}))
    description = "\n".join(
        [
            f"sample_and_aggregate({getattr(fn, '__name__', type(fn).__name__)}) over "
            f"{', '.join(map(repr, wanted))}"
            + (f" of {base.render()}" if base is not None else ""),
            f"blocks: {rule}; the {session.engine.name} engine hashes each privacy unit "
            f"({session.privacy_unit!r}) with a fresh secret salt into a block, so one unit "
            "changes one block",
            f"each block: fn -> shape {shape}, clamped to [{lo:g}, {hi:g}]; a block whose fn "
            f"raises, returns another shape or NaN/inf gets the public default {fill[0]:g}",
            f"aggregate: {aggregator} of the m block outputs per coordinate "
            f"(ε/{d} each); loss {charge}",
        ]
    )
    session._check_open()
    from dpkit._door import release
    from dpkit.analytics._blocks import check_blocks

    info = measurement.info
    if not isinstance(info, SampleAggregateInfo):  # pragma: no cover - built just above
        raise InternalError("sample-and-aggregate states no aggregator", charged=False)
    aggregate = info.aggregate

    def rehearse() -> None:
        check_blocks(session.engine, steps, session.privacy_unit, wanted)
        # the aggregator on the default outputs (public), before anything is reserved
        for j in range(d):
            float(aggregate(np.tile(fill, (chosen, 1))[:, j]))

    def body(stage: Any) -> list[float]:
        stage(reading=True)
        salt = int(random_words(1)[0] >> np.uint64(2))
        values = engine_blocks(
            session.engine, steps, session.privacy_unit, wanted, chosen, salt, call
        )
        stage(reading=False)
        values = np.clip(values, lo, hi)
        return [float(aggregate(values[:, j])) for j in range(d)]

    released, receipt = release(
        session._books,
        charge,
        body,
        query=description.splitlines()[0][:500],
        mechanism=f"sample_and_aggregate:{aggregator}",
        rehearse=rehearse,
        rehearsing="checking the aggregator on public outputs",
    )
    table = pd.DataFrame({name: [value] for name, value in zip(labels, released, strict=True)})
    note = (
        f"{aggregator} of {chosen} block outputs; no closed-form interval (the error depends on "
        "how the block outputs spread)"
    )
    accuracy_info = {
        name: Accuracy(
            "approximate",
            math.nan,
            0.05,
            f"sample_and_aggregate:{aggregator}",
            PureDP(epsilon / d),
            None,
            note,
        )
        for name in labels
    }
    return TableRelease(
        {"main": table},
        accuracy_info,
        charge,
        receipt,
        session.remaining,
        description,
        {"sample_and_aggregate": charge},
    )
