"""The privacy-budget service: ``dpkit serve`` (FastAPI), its dashboard and its domain logic.

Officers register datasets (a source under the data root, the privacy unit, a declared schema
and per-person bounds, a total budget) and set per-analyst allowances; analysts send queries and
get DP answers with error bars and ledger receipts; every query, refusal and budget change is in
an append-only audit log. See docs/service.md.

Everything is imported lazily, so ``dpkit --help`` does not load the analytics stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpkit.service._app import create_app
    from dpkit.service._core import Service, ServiceConfig

from dpkit._extras import require

require("service", by="dpkit.service")

__all__ = ["Service", "ServiceConfig", "create_app"]


def __getattr__(name: str) -> object:
    if name in ("Service", "ServiceConfig"):
        from dpkit.service import _core

        return getattr(_core, name)
    if name == "create_app":  # FastAPI is imported only when the app is wanted
        from dpkit.service._app import create_app

        return create_app
    raise AttributeError(name)
