"""Threshold alerts to a webhook, sent by a background thread, never inside a request.

The ledger fires an alert while it records the charge that crossed a threshold; the service's
monitor only puts the event on a queue (:meth:`WebhookSender.__call__`), and one daemon thread per
server process POSTs it (JSON, the same body as :class:`~dpkit.ledger.BudgetMonitor`'s own
webhook). A slow or unreachable webhook therefore never delays or fails a query; failures are
logged. The alert itself is durable in the ledger (an ``alert`` entry) whatever the webhook does.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.request

from dpkit.errors import InvalidParameterError
from dpkit.ledger import AlertEvent

__all__ = ["WebhookSender"]

logger = logging.getLogger("dpkit.service.webhooks")

_STOP = object()


class WebhookSender:
    """Queue alerts and POST them to ``url`` from a daemon thread (at most ``backlog`` waiting;
    beyond that new alerts are dropped from the webhook and logged, never blocking a request)."""

    def __init__(self, url: str, *, timeout: float = 5.0, backlog: int = 10_000) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidParameterError("webhook_url", url, "an http:// or https:// URL")
        self.url = url
        self.timeout = timeout
        self.sent = 0
        self._queue: queue.Queue[object] = queue.Queue(maxsize=backlog)
        self._thread = threading.Thread(target=self._work, name="dpkit-webhooks", daemon=True)
        self._thread.start()

    def __call__(self, event: AlertEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            logger.error("budget alert webhook backlog full; not sent: %s", event.message())

    def _post(self, event: AlertEvent) -> None:
        body = json.dumps(event.to_json()).encode("utf-8")
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                assert isinstance(item, AlertEvent)
                self._post(item)
                self.sent += 1
            except Exception:
                logger.exception("budget alert webhook %s failed", self.url)
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued alert was tried (True) or ``timeout`` seconds passed."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to ``timeout`` seconds), then stop the thread."""
        self.flush(timeout)
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            return
        self._thread.join(timeout)
