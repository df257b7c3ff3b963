"""Budget monitoring: thresholds that fire once each, delivered to callbacks, logs, files, webhooks.

The ledger decides *inside the charge's transaction* which thresholds a charge crossed and records
each as an ``alert`` entry, so a threshold fires once per budget even with many processes
charging at once, and again only after an administrator raised the budget below it. Delivery
happens after the transaction committed; a failing sink is logged and never undoes a charge.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from dpkit._exact import Number, fraction_of
from dpkit.core._losses import PrivacyLoss
from dpkit.errors import InvalidParameterError

__all__ = ["DEFAULT_THRESHOLDS", "AlertEvent", "BudgetMonitor"]

logger = logging.getLogger("dpkit.ledger.alerts")

DEFAULT_THRESHOLDS: tuple[Fraction, ...] = (Fraction(1, 2), Fraction(4, 5), Fraction(1))


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """A budget crossed ``threshold`` (a fraction of its total) with the charge ``entry_id``."""

    dataset: str
    analyst: str | None
    threshold: Fraction
    used: Fraction
    spent: PrivacyLoss
    total: PrivacyLoss
    entry_id: int
    timestamp: float

    def to_json(self) -> dict[str, object]:
        return {
            "event": "dpkit.budget.threshold",
            "dataset": self.dataset,
            "analyst": self.analyst,
            "threshold": float(self.threshold),
            "threshold_exact": str(self.threshold),
            "used": float(self.used),
            "used_exact": str(self.used),
            "spent": str(self.spent),
            "total": str(self.total),
            "entry_id": self.entry_id,
            "timestamp": self.timestamp,
        }

    def message(self) -> str:
        scope = f"dataset {self.dataset!r}" + (
            f", analyst {self.analyst!r}" if self.analyst else ""
        )
        return (
            f"privacy budget alert: {scope} has used {float(self.used):.1%} of its budget "
            f"(threshold {float(self.threshold):.0%}); spent {self.spent} of {self.total}"
        )


def check_thresholds(thresholds: Iterable[Number]) -> tuple[Fraction, ...]:
    out = sorted({fraction_of("thresholds", t) for t in thresholds})
    for t in out:
        if not 0 < t <= 1:
            raise InvalidParameterError(
                "thresholds", t, "fractions of the budget in (0, 1], e.g. (0.5, 0.8, 1)"
            )
    return tuple(out)


@dataclass
class BudgetMonitor:
    """Where threshold alerts go.

    Args:
        thresholds: fractions of a budget that raise an alert when first reached (default 50 %,
            80 %, 100 %).
        callbacks: Python callables receiving each :class:`AlertEvent`.
        log: also log each alert (logger ``dpkit.ledger.alerts``, level WARNING).
        jsonl_path: append each alert as one JSON line to this file.
        webhook_url: POST each alert as JSON to this http(s) URL (timeout ``webhook_timeout``).
    """

    thresholds: Sequence[Number] = DEFAULT_THRESHOLDS
    callbacks: list[Callable[[AlertEvent], object]] = field(default_factory=list)
    log: bool = True
    jsonl_path: str | Path | None = None
    webhook_url: str | None = None
    webhook_timeout: float = 5.0
    _levels: tuple[Fraction, ...] = field(init=False, repr=False)
    _file_lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._levels = check_thresholds(self.thresholds)
        if self.webhook_url is not None and not self.webhook_url.startswith(
            ("http://", "https://")
        ):
            raise InvalidParameterError(
                "webhook_url", self.webhook_url, "an http:// or https:// URL"
            )

    @property
    def levels(self) -> tuple[Fraction, ...]:
        return self._levels

    def add_callback(self, callback: Callable[[AlertEvent], object]) -> None:
        self.callbacks.append(callback)

    def crossed(self, used: Fraction, fired: Iterable[str]) -> list[Fraction]:
        """Thresholds that ``used`` reaches and that have not fired yet."""
        done = set(fired)
        return [t for t in self._levels if used >= t and str(t) not in done]

    def deliver(self, events: Sequence[AlertEvent]) -> None:
        for event in events:
            self._deliver_one(event)

    def _deliver_one(self, event: AlertEvent) -> None:
        if self.log:
            logger.warning(event.message())
        for callback in self.callbacks:
            try:
                callback(event)
            except Exception:
                logger.exception("budget alert callback %r failed", callback)
        if self.jsonl_path is not None:
            try:
                line = json.dumps(event.to_json(), sort_keys=True)
                with self._file_lock, open(self.jsonl_path, "a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
                    handle.flush()
            except OSError:
                logger.exception("could not append the budget alert to %s", self.jsonl_path)
        if self.webhook_url is not None:
            try:
                import urllib.request  # imported when used: it loads http, ssl and email

                body = json.dumps(event.to_json()).encode("utf-8")
                request = urllib.request.Request(
                    self.webhook_url,
                    data=body,
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                with urllib.request.urlopen(request, timeout=self.webhook_timeout) as response:
                    response.read()
            except Exception:
                logger.exception("budget alert webhook %s failed", self.webhook_url)
