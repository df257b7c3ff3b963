"""``dpkit serve``: run the privacy-budget service (FastAPI + uvicorn).

The command imports the service (and so needs the ``service`` extra) only when it runs; uvicorn
starts each worker with :func:`dpkit.service._boot.boot_app`, which answers ``/api/v1/health``
at once and builds the service's app (:func:`dpkit.service._app.build_app`) in the background.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["serve_command"]


def _url(host: str, port: int) -> str:
    shown = host
    if host in ("0.0.0.0", "::", ""):  # every interface: this host's own name reaches it
        shown = "127.0.0.1" if host != "::" else "[::1]"
    elif ":" in host and not host.startswith("["):
        shown = f"[{host}]"
    return f"http://{shown}:{port}"


def serve_command(
    database: Annotated[
        str,
        typer.Option(help="sqlite:///file.db (default) or postgresql://user:pass@host/db."),
    ] = "sqlite:///dpkit-service.db",
    data_root: Annotated[
        Path, typer.Option(help="Datasets are files under this directory, and nothing else.")
    ] = Path("."),
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
    engine: Annotated[str, typer.Option(help="Engine reading the sources: duckdb or pandas.")] = (
        "duckdb"
    ),
    webhook: Annotated[
        str | None, typer.Option(help="POST budget threshold alerts here (JSON).")
    ] = None,
    token_days: Annotated[
        float,
        typer.Option(
            help="Lifetime of a token when its issuer does not choose one (days, ≤ 3650)."
        ),
    ] = 90,
) -> None:
    """Run the privacy-budget service: API at /api/v1 (OpenAPI at /docs), dashboard at /."""
    from dpkit._extras import require

    require("service", by="dpkit serve")
    import uvicorn

    os.environ["DPKIT_DATABASE"] = database
    os.environ["DPKIT_DATA_ROOT"] = str(data_root.resolve())
    os.environ["DPKIT_ENGINE"] = engine
    os.environ["DPKIT_TOKEN_DAYS"] = repr(float(token_days))
    if webhook:
        os.environ["DPKIT_WEBHOOK_URL"] = webhook
    chosen = os.environ.get("DPKIT_BOOTSTRAP_TOKEN") or None
    if workers > 1:
        # create the schema and the first officer once, before the workers start
        from dpkit.service._app import announce_token
        from dpkit.service._core import Service, ServiceConfig

        first = Service(
            ServiceConfig(
                database=database,
                data_root=data_root,
                bootstrap_token=chosen,
                token_days=token_days,
            )
        )
        announce_token(first, chosen)
        first.close()
    url = _url(host, port)
    print(
        f"dpkit serve: starting on {url} (API {url}/api/v1, docs {url}/docs, dashboard {url}/); "
        "stop with Ctrl+C",
        file=sys.stderr,
        flush=True,
    )
    # the front app answers /api/v1/health at once and loads the service in the background
    # (dpkit.service._boot): the server listens within about a second of start
    uvicorn.run(
        "dpkit.service._boot:boot_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
    )
    from dpkit.service._boot import failed

    if failed.is_set():
        raise typer.Exit(1)
