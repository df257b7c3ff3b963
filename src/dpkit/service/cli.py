"""``dpkit serve``: run the privacy-budget service (FastAPI + uvicorn).

Register it on the main app with ``app.command("serve")(serve_command)``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["build_app", "serve_command"]


def build_app() -> object:
    """The app from environment variables (for ``uvicorn --factory`` and worker processes)."""
    from dpkit.service._core import ServiceConfig
    from dpkit.service.app import create_app

    config = ServiceConfig(
        database=os.environ.get("DPKIT_DATABASE", "sqlite:///dpkit-service.db"),
        data_root=os.environ.get("DPKIT_DATA_ROOT", "."),
        webhook_url=os.environ.get("DPKIT_WEBHOOK_URL") or None,
        bootstrap_token=os.environ.get("DPKIT_BOOTSTRAP_TOKEN") or None,
        engine=os.environ.get("DPKIT_ENGINE", "duckdb"),
    )
    app = create_app(config, freeze_heap=True)
    token = app.state.service.bootstrap_token
    if token and not config.bootstrap_token:
        print(
            f"dpkit serve: created the officer 'officer'; its token (shown once): {token}",
            file=sys.stderr,
            flush=True,
        )
    return app


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
) -> None:
    """Run the privacy-budget service: API at /api/v1 (OpenAPI at /docs), dashboard at /."""
    import uvicorn

    os.environ["DPKIT_DATABASE"] = database
    os.environ["DPKIT_DATA_ROOT"] = str(data_root.resolve())
    os.environ["DPKIT_ENGINE"] = engine
    if webhook:
        os.environ["DPKIT_WEBHOOK_URL"] = webhook
    if workers > 1:
        # create the schema and the first officer once, before the workers start
        from dpkit.service._core import Service, ServiceConfig

        first = Service(ServiceConfig(database=database, data_root=data_root))
        if first.bootstrap_token:
            print(
                "dpkit serve: created the officer 'officer'; its token (shown once): "
                f"{first.bootstrap_token}",
                file=sys.stderr,
                flush=True,
            )
        first.close()
    uvicorn.run(
        "dpkit.service.cli:build_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
    )
