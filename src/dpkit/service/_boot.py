"""``dpkit serve``'s front app: the server answers ``/api/v1/health`` at once, while the service
(FastAPI, the engines, the ledger: several seconds of imports on a busy machine) loads.

uvicorn starts :func:`boot_app`, which imports nothing heavy. The service's app is built on a
background thread (:func:`dpkit.service._app.build_app`), then its own lifespan runs (the
prewarm, the query executor). Until then:

* ``GET /api/v1/health`` answers ``200 {"status": "starting"}`` (liveness: the process is up and
  listening; the service's own ``/health`` says ``"ok"`` once it is loaded);
* every other request waits for the service and is then served by it, unchanged.

If the service cannot be built (a bad database URL, say), the error is printed and the server
stops; ``dpkit serve`` then exits with status 1, as it did when uvicorn built the app itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["BootApp", "boot_app", "failed"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEALTH = "/api/v1/health"
_STARTING = b'{"status":"starting"}'

failed = threading.Event()
"""Set when the service could not be built (``dpkit serve`` then exits with status 1)."""


class BootApp:
    """An ASGI app that serves ``build()``'s app once it is built and started (see the
    module docstring); ``build`` runs on a background thread from the first call on."""

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._app: ASGIApp | None = None
        self._error: BaseException | None = None
        self._built = threading.Event()
        self._started: asyncio.Future[ASGIApp] | None = None
        self._inner_lifespan: tuple[asyncio.Queue[Message], asyncio.Queue[Message]] | None = None
        self._inner_task: asyncio.Future[None] | None = None
        threading.Thread(target=self._construct, name="dpkit-boot", daemon=True).start()

    def _construct(self) -> None:
        try:
            self._app = self._build()
        except BaseException as error:  # reported, then the server stops
            self._error = error
        finally:
            self._built.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        ready = self._started is not None and self._started.done()
        if scope["type"] == "http" and scope.get("path") == HEALTH and not ready:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": _STARTING})
            return
        app = await self._ready()
        await app(scope, receive, send)

    async def _ready(self) -> ASGIApp:
        if self._started is None:  # no lifespan (a bare ASGI server): start on first use
            self._started = asyncio.ensure_future(self._start({"type": "lifespan"}))
        return await asyncio.shield(self._started)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":  # pragma: no cover - the ASGI protocol
            return
        self._started = asyncio.ensure_future(self._start(scope))
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        if self._started.done() and self._started.exception() is None:
            if self._inner_lifespan is not None:
                to_inner, from_inner = self._inner_lifespan
                await to_inner.put({"type": "lifespan.shutdown"})
                await from_inner.get()
        else:
            self._started.cancel()
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self, scope: Scope) -> ASGIApp:
        """Wait for the build, then run the app's own lifespan startup."""
        await asyncio.to_thread(self._built.wait)
        if self._app is None:
            error = self._error or RuntimeError("the service was not built")
            _stop(error)
            raise error
        app = self._app
        to_inner: asyncio.Queue[Message] = asyncio.Queue()
        from_inner: asyncio.Queue[Message] = asyncio.Queue()
        self._inner_lifespan = (to_inner, from_inner)

        async def run() -> None:
            try:
                await app(dict(scope), to_inner.get, from_inner.put)
            except BaseException as error:  # an app without lifespan support
                await from_inner.put({"type": "lifespan.startup.failed", "message": str(error)})

        self._inner_task = asyncio.ensure_future(run())  # kept: the service's lifespan
        await to_inner.put({"type": "lifespan.startup"})
        answer = await from_inner.get()
        if answer["type"] != "lifespan.startup.complete":
            error = RuntimeError(f"the service did not start: {answer.get('message', '')}")
            _stop(error)
            raise error
        return app


def _stop(error: BaseException) -> None:
    """Report ``error`` and stop the server (uvicorn shuts down on SIGINT)."""
    failed.set()
    print("dpkit serve: the service could not start:", file=sys.stderr)
    traceback.print_exception(error, file=sys.stderr)
    os.kill(os.getpid(), signal.SIGINT)


def boot_app() -> BootApp:
    """The front app for ``uvicorn --factory`` (``dpkit serve``): the service's app from the
    environment (:func:`dpkit.service._app.build_app`), built in the background."""

    def build() -> ASGIApp:
        from dpkit.service._app import build_app

        return build_app()

    return BootApp(build)
