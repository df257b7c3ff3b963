"""Threshold alerts: once each, to a callback, the log, a JSON-lines file and a webhook."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import ClassVar

import pytest

from dpkit.core._losses import PureDP
from dpkit.errors import InvalidParameterError
from dpkit.ledger import AlertEvent, BudgetMonitor, Ledger


def _spend(ledger: Ledger, n: int, eps: float = 0.1, dataset: str = "d") -> None:
    for _ in range(n):
        ledger.commit(ledger.reserve(dataset, PureDP(eps)))


def test_thresholds_fire_once_each_to_every_sink(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[AlertEvent] = []
    alerts_file = tmp_path / "alerts.jsonl"
    monitor = BudgetMonitor(callbacks=[events.append], jsonl_path=alerts_file)
    ledger = Ledger.open(tmp_path / "l.db", monitor=monitor)
    ledger.create_budget("d", PureDP(1))
    with caplog.at_level(logging.WARNING, logger="dpkit.ledger.alerts"):
        _spend(ledger, 4)
        assert events == []
        _spend(ledger, 1)  # 50 %
        _spend(ledger, 3)  # 80 %
        _spend(ledger, 2)  # 100 %
    assert [e.threshold for e in events] == [Fraction(1, 2), Fraction(4, 5), Fraction(1)]
    assert events[0].used == Fraction(1, 2) and events[0].dataset == "d"
    lines = [json.loads(x) for x in alerts_file.read_text().splitlines()]
    assert [x["threshold"] for x in lines] == [0.5, 0.8, 1.0]
    assert sum("privacy budget alert" in r.message for r in caplog.records) == 3
    assert len(ledger.history("d", kinds=["alert"])) == 3
    ledger.close()
    # A threshold fires once per budget, even across processes / reopenings.
    again: list[AlertEvent] = []
    reopened = Ledger.open(tmp_path / "l.db", monitor=BudgetMonitor(callbacks=[again.append]))
    reopened.adjust_budget("d", PureDP(1.2), actor="admin")  # now 83 %: 50/80 stay fired
    assert again == []
    reopened.commit(reopened.reserve("d", PureDP(0.2)))  # 100 % again -> re-armed, fires
    assert [e.threshold for e in again] == [Fraction(1)]
    assert reopened.replay().ok
    reopened.close()


def test_jump_over_several_thresholds_fires_each(tmp_path: Path) -> None:
    events: list[AlertEvent] = []
    ledger = Ledger.open(":memory:", monitor=BudgetMonitor(callbacks=[events.append], log=False))
    ledger.create_budget("d", PureDP(1))
    ledger.create_budget("d", PureDP(0.5), analyst="ana")
    ledger.reserve("d", PureDP(0.5), analyst="ana")
    scopes = sorted((e.analyst or "", e.threshold) for e in events)
    assert scopes == [
        ("", Fraction(1, 2)),
        ("ana", Fraction(1, 2)),
        ("ana", Fraction(4, 5)),
        ("ana", Fraction(1)),
    ]


def test_failing_sink_never_undoes_a_charge(tmp_path: Path) -> None:
    def broken(_: AlertEvent) -> None:
        raise RuntimeError("pager down")

    ledger = Ledger.open(
        ":memory:",
        monitor=BudgetMonitor(callbacks=[broken], log=False, jsonl_path=tmp_path / "no/dir/x"),
    )
    ledger.create_budget("d", PureDP(1))
    ledger.reserve("d", PureDP(1))
    assert ledger.spent("d") == PureDP(1)


class _Collector(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        _Collector.bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def webhook() -> Iterator[str]:
    _Collector.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts"
    finally:
        server.shutdown()
        server.server_close()


def test_webhook_receives_json(webhook: str) -> None:
    ledger = Ledger.open(":memory:", monitor=BudgetMonitor(webhook_url=webhook, log=False))
    ledger.create_budget("d", PureDP(1))
    ledger.reserve("d", PureDP(0.9))
    assert [b["threshold"] for b in _Collector.bodies] == [0.5, 0.8]
    assert _Collector.bodies[0]["event"] == "dpkit.budget.threshold"


def test_monitor_validation() -> None:
    with pytest.raises(InvalidParameterError):
        BudgetMonitor(thresholds=[0.5, 1.5])
    with pytest.raises(InvalidParameterError):
        BudgetMonitor(webhook_url="ftp://example")
    custom = BudgetMonitor(thresholds=[0.25])
    assert custom.levels == (Fraction(1, 4),)
