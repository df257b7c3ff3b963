"""Exact ε of a local randomizer from its declared log-weights: no floating point in the verdict.

Every frequency oracle here (except RAPPOR, whose probabilities are rational) gives each output
o of one client a probability P(o | v) = C·e^{λ_o(v)}, with λ_o(v) an exact rational multiple of
ε and C independent of o and v (the normaliser is the same for every input). The privacy loss
between inputs x and y is then exactly max_o |λ_o(x) - λ_o(y)|: a Fraction, compared with the
claim exactly. The declaration is tied to the distribution: ``output_pmf(v)/e^{λ(v)}`` must be the
same constant for every output and input (checked to 1e-9 relative), so a false declaration is
refused rather than trusted.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit.errors import PrivacyCheckError
from dpkit.testing import CheckResult

__all__ = ["check_exact_epsilon"]


def check_exact_epsilon(oracle: Any, pairs: Iterable[tuple[int, int]] | None = None) -> CheckResult:
    """The exact realised ε of ``oracle`` over ``pairs`` of inputs (default: every ordered pair
    of its d values), against its claimed ε, as a :class:`dpkit.testing.CheckResult`."""
    d = int(oracle.d)
    todo = (
        list(pairs) if pairs is not None else [(x, y) for x in range(d) for y in range(d) if x != y]
    )
    cache: dict[int, list[Fraction]] = {}
    constant: float | None = None
    for v in {v for pair in todo for v in pair}:
        weights = [Fraction(w) for w in oracle.log_weights(v)]
        pmf = np.asarray(oracle.output_pmf(v), dtype=np.float64)
        if len(weights) != pmf.size:
            raise PrivacyCheckError(f"{oracle!r}: log_weights and output_pmf disagree in length")
        ratio = pmf / np.exp(np.array([float(w) for w in weights]))
        if constant is None:
            constant = float(ratio[0])
        if not np.allclose(ratio, constant, rtol=1e-9, atol=0.0):
            raise PrivacyCheckError(
                f"{oracle!r}: output_pmf({v}) is not C·e^{{λ}} with one constant C: the "
                "declared log-weights are false, so no exact check is possible"
            )
        cache[v] = weights
    best = Fraction(0)
    witness: tuple[Any, ...] = ()
    for x, y in todo:
        gaps = [abs(a - b) for a, b in zip(cache[x], cache[y], strict=True)]
        o = max(range(len(gaps)), key=gaps.__getitem__)
        if gaps[o] > best:
            best, witness = gaps[o], (x, y, o)
    claimed = Fraction(oracle.epsilon)
    return CheckResult(
        notion="pure",
        realised=best,
        claimed=claimed,
        passed=best <= claimed,
        witness=witness,
        detail="exact max over input pairs (x, y) and outputs o of |λ_o(x) - λ_o(y)| with "
        f"P(o|v) = C·e^{{λ_o(v)}} ({len(todo)} pairs; witness: x, y, output index)",
    )
