"""Local privacy accounting: a campaign records the ε each report spends, per client.

In the local model every client randomises its own value, so the guarantee is per client and
per report: a client who sends r reports of pure ε-DP randomizers has spent r·ε (sequential
composition), whoever collects the reports. RAPPOR's permanent response caps the reports of one
unchanged value at ε∞ (Erlingsson et al. 2014) — but only if the client memoises that permanent
response (:meth:`dpkit.local.Rappor.report`); :meth:`~dpkit.local.Rappor.randomize` draws a
fresh one per report, and then r reports cost r·ε₁.

The shuffle model reads the same reports centrally: if a trusted shuffler removes who sent
which report, n reports of ε₀-LDP randomizers are (ε, δ)-DP for the dataset of n clients with

    ε = ln(1 + (e^{ε₀} - 1)/(e^{ε₀} + 1) · (8·sqrt(e^{ε₀}·ln(4/δ))/sqrt(n) + 8·e^{ε₀}/n))

whenever ε₀ <= ln(n/(16·ln(2/δ))) (Feldman, McMillan & Talwar 2021, "Hiding among the clones",
FOCS, Thm. 3.1). This is an *optional reading*: it holds only if reports really are shuffled and
the collector cannot link them to clients; the local guarantee holds regardless.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._exact import Number, check_delta, round_up
from dpkit.core._losses import ApproxDP, PureDP
from dpkit.errors import DomainMismatchError, InvalidDataError, InvalidParameterError
from dpkit.local._core import Reports

__all__ = ["Campaign", "shuffle_amplification"]


def shuffle_amplification(epsilon0: Number, n: int, delta: Number) -> ApproxDP | None:
    """The Feldman–McMillan–Talwar 2021 bound for n shuffled ε₀-LDP reports, or None when its
    condition ε₀ <= ln(n/(16 ln(2/δ))) fails (then only the local ε₀ is claimed). The result
    is rounded up (computed in 50-digit decimal arithmetic, then rounded against the analyst).
    """
    from dpkit._exact import fraction_of

    eps0 = fraction_of("epsilon0", epsilon0)
    if eps0 <= 0:
        raise InvalidParameterError("epsilon0", epsilon0, "> 0")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "an integer >= 1")
    d = check_delta(delta, allow_zero=False)
    with localcontext() as ctx:
        ctx.prec = 50
        e0 = Decimal(eps0.numerator) / Decimal(eps0.denominator)
        dd = Decimal(d.numerator) / Decimal(d.denominator)
        limit = (Decimal(n) / (16 * (2 / dd).ln())) if n > 0 else Decimal(0)
        if limit <= 1 or e0 > limit.ln():
            return None
        ee = e0.exp()
        inner = (
            (ee - 1) / (ee + 1) * (8 * (ee * (4 / dd).ln()).sqrt() / Decimal(n).sqrt() + 8 * ee / n)
        )
        eps = (1 + inner).ln()
    return ApproxDP(min(round_up(eps), eps0), d)


class Campaign:
    """A collection of reports from one oracle, with per-client local accounting.

    Args:
        oracle: the frequency oracle (or numeric-mean mechanism, or Rappor) all reports use.
        name: a label for displays.
        memoised_permanent: RAPPOR only: every client sends all its reports from one memoised
            permanent response (:meth:`~dpkit.local.Rappor.report`) and its value does not
            change. Then r >= 2 reports of a client cost ε∞ in all (they are post-processing
            of one ε∞-DP permanent response); otherwise (the default, and what
            :meth:`~dpkit.local.Rappor.randomize` does) each report has a fresh permanent
            response and r reports cost r·ε₁.

    Every :meth:`add` records the reports and, if ``client_ids`` are given, charges each
    client its reports' ε (sequential composition, or the memoised RAPPOR bound above).
    :meth:`local_loss` is the largest loss of any client; :meth:`shuffle_reading` the optional
    central (ε, δ) of the shuffled reports.
    """

    def __init__(
        self, oracle: Any, name: str = "campaign", *, memoised_permanent: bool = False
    ) -> None:
        self.oracle = oracle
        self.name = name
        self.per_report: Fraction = oracle.loss.epsilon
        longitudinal = getattr(oracle, "epsilon_longitudinal", None)
        if memoised_permanent and longitudinal is None:
            raise InvalidParameterError(
                "memoised_permanent", memoised_permanent, "False unless the oracle is RAPPOR"
            )
        self.cap: Fraction | None = longitudinal if memoised_permanent else None
        self._batches: list[Reports] = []
        self._reports_per_client: dict[int, int] = {}
        self._anonymous = 0

    @property
    def n(self) -> int:
        return sum(b.n for b in self._batches)

    def add(self, reports: Reports, client_ids: Any = None) -> None:
        """Record a batch of reports (checked against the oracle's signature)."""
        if not isinstance(reports, Reports) or reports.signature != self.oracle.signature:
            raise DomainMismatchError(f"{self.name}: reports of another oracle or parameters")
        if client_ids is None:
            self._anonymous += reports.n
        else:
            ids = np.asarray(client_ids).reshape(-1)
            if ids.size != reports.n or ids.dtype.kind not in "iu":
                raise InvalidDataError("client_ids", "needs one integer id per report")
            unique, counts = np.unique(ids, return_counts=True)
            for client, count in zip(unique.tolist(), counts.tolist(), strict=True):
                self._reports_per_client[client] = self._reports_per_client.get(client, 0) + count
        self._batches.append(reports)

    def reports(self) -> Reports:
        """All reports, pooled."""
        if not self._batches:
            raise InvalidDataError(self.name, "has no reports yet")
        out = self._batches[0]
        for batch in self._batches[1:]:
            out = out.concat(batch)
        return out

    def client_loss(self, client: int) -> PureDP:
        """The ε client ``client`` has spent: reports × per-report ε (capped for RAPPOR)."""
        return PureDP(self._spent(self._reports_per_client.get(client, 0)))

    def _spent(self, reports: int) -> Fraction:
        if self.cap is not None and reports >= 2:
            return self.cap  # all reports post-process one ε∞-DP permanent response
        spent = self.per_report * reports
        return spent if self.cap is None else min(spent, self.cap)

    def local_loss(self) -> PureDP:
        """The largest loss of any client (anonymous reports count once each)."""
        most = max(self._reports_per_client.values(), default=1 if self._anonymous else 0)
        return PureDP(self._spent(most))

    def shuffle_reading(self, delta: Number = Fraction(1, 10**6)) -> ApproxDP | None:
        """The optional central reading of one report per client, if shuffled (FMT 2021)."""
        if any(v > 1 for v in self._reports_per_client.values()):
            raise InvalidParameterError(
                "client_ids", "repeats", "one report per client for the shuffle bound"
            )
        return shuffle_amplification(self.per_report, max(self.n, 1), delta)

    def summary(self) -> dict[str, Any]:
        reading = self.shuffle_reading() if self.n else None
        return {
            "name": self.name,
            "oracle": getattr(self.oracle, "name", type(self.oracle).__name__),
            "reports": self.n,
            "per_report_epsilon": float(self.per_report),
            "max_client_epsilon": float(self.local_loss().epsilon),
            "shuffle_epsilon_delta": None
            if reading is None
            else (float(reading.epsilon), float(reading.delta)),
        }
