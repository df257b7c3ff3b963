"""The FastAPI application of ``dpkit serve``: thin routers over :class:`Service`.

Authentication: ``Authorization: Bearer <token>`` (or the dashboard's ``dpkit_token`` cookie).
Errors are JSON ``{"error": kind, "detail": message}`` with a 4xx status (424 for a query that
failed after its loss was reserved, 503 when the database is unreachable or the service failed
internally); never a 500. dpkit's error messages never quote data.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import math
import os
import sys
import time
import traceback
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

import dpkit.service._schemas as w
from dpkit.analytics._querytext import plain
from dpkit.analytics._results import TableRelease
from dpkit.core._losses import PrivacyLoss
from dpkit.errors import BudgetExceededError, DPError, InvalidParameterError
from dpkit.ledger import BudgetStatus, LedgerEntry, LedgerError, UnknownBudgetError
from dpkit.ledger._postgres import LedgerUnavailableError
from dpkit.service._core import (
    TEXTS_ALLOWED,
    ConflictError,
    FailedAfterReservationError,
    NotFoundError,
    PermissionDeniedError,
    Service,
    ServiceConfig,
    dataset_columns,
    loss_from_parts,
    loss_json,
    shown_number,
    tables_of,
)
from dpkit.service._registry import Principal

__all__ = ["MAX_BODY", "announce_token", "build_app", "create_app"]

COOKIE = "dpkit_token"

MAX_BODY = 1 << 20
"""The largest request body the service reads (bytes); a larger one is refused with 413."""

MAX_AUDIT_PAGE = 1_000
"""The most audit records one ``GET /api/v1/audit`` returns."""

logger = logging.getLogger("dpkit.service")


# Dependencies are ``async``: a sync dependency costs a hop to the thread pool per request. The
# token check reads SQLite on the event loop (a WAL read on this thread's own connection, tens
# of microseconds); on PostgreSQL it goes to the thread pool.


async def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _token(request: Request, authorization: str | None) -> str | None:
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return None
    return request.cookies.get(COOKIE)


class AuthError(Exception):
    pass


async def current_principal(
    request: Request,
    service: Annotated[Service, Depends(get_service)],
    authorization: Annotated[str | None, Header()] = None,
) -> Principal:
    token = _token(request, authorization)
    expired: float | None = None
    if service.registry.local_reads:
        principal = service.authenticate(token)
        if principal is None:
            expired = service.token_expired_at(token)
    else:
        principal = await run_in_threadpool(service.authenticate, token)
        if principal is None:
            expired = await run_in_threadpool(service.token_expired_at, token)
    if principal is None:
        if expired is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expired))
            raise AuthError(
                f"this token expired at {when}; ask a privacy officer for a new one "
                "(POST /api/v1/principals/{name}/tokens)"
            )
        raise AuthError(
            "a valid, unrevoked, unexpired token is required (Authorization: Bearer <token>)"
        )
    return principal


async def officer(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if principal.role != "officer":
        raise PermissionDeniedError("this needs the officer role")
    return principal


async def analyst(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if principal.role != "analyst":
        raise PermissionDeniedError("this needs the analyst role")
    return principal


ServiceDep = Annotated[Service, Depends(get_service)]
Anyone = Annotated[Principal, Depends(current_principal)]
Officer = Annotated[Principal, Depends(officer)]
Analyst = Annotated[Principal, Depends(analyst)]


def budget_out(status: BudgetStatus) -> w.BudgetOut:
    return w.BudgetOut(
        dataset=status.dataset,
        analyst=status.analyst,
        total=loss_json(status.total),
        spent=loss_json(status.spent),
        remaining=loss_json(status.remaining),
        used=float(status.used),
        charges=status.charges,
    )


def receipt_out(entry: LedgerEntry) -> w.ReceiptOut:
    return w.ReceiptOut(
        receipt=entry.receipt,
        reservation_id=entry.ref or 0,
        dataset=entry.dataset,
        analyst=entry.analyst,
        loss=loss_json(entry.loss),
        timestamp=entry.timestamp,
    )


def _clean(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)


def _error(status: int, kind: str, detail: str) -> JSONResponse:
    # plain text: no terminal escapes or control characters from any message reach the JSON
    return JSONResponse({"error": kind, "detail": plain(detail)}, status_code=status)


def _table_rows(frame: Any) -> list[dict[str, Any]]:
    """A released table's rows as JSON-ready dicts, column by column (``DataFrame.to_dict``
    costs more than the whole rest of a small answer)."""
    names = [str(c) for c in frame.columns]
    if not names:
        return [{} for _ in range(len(frame))]
    columns = [[_clean(v) for v in frame.iloc[:, j].tolist()] for j in range(len(names))]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def query_dict(release: TableRelease, remaining: PrivacyLoss | None) -> dict[str, Any]:
    """The wire form of an answer (the :class:`~dpkit.service._schemas.QueryOut` shape, as
    plain JSON values): tables (rows, and each table's columns), error bars, the charge, the
    receipt and the allowance left."""
    receipt = release.receipt
    return {
        "tables": {name: _table_rows(frame) for name, frame in release.tables.items()},
        "columns": {
            name: [str(c) for c in frame.columns] for name, frame in release.tables.items()
        },
        "accuracy": {
            name: {
                "kind": a.kind,
                "halfwidth": _clean(float(a.halfwidth)),
                "alpha": a.alpha,
                "mechanism": a.mechanism,
                "expected_abs": None if a.expected_abs is None else _clean(float(a.expected_abs)),
                "loss": loss_json(a.loss),
                "note": a.note,
            }
            for name, a in release.accuracy.items()
        },
        "loss": loss_json(release.loss),
        "receipt": {
            "receipt": str(receipt.id),
            "reservation_id": int(receipt.reservation_id),
            "dataset": str(receipt.dataset),
            "analyst": None if receipt.analyst is None else str(receipt.analyst),
            "loss": loss_json(receipt.loss),
            "timestamp": float(receipt.committed_at),
        },
        "remaining": loss_json(remaining),
    }


def query_out(release: TableRelease, remaining: PrivacyLoss | None) -> w.QueryOut:
    """:func:`query_dict` as the pydantic model (the endpoint sends the dict's JSON directly)."""
    return w.QueryOut.model_validate(query_dict(release, remaining))


def query_json(release: TableRelease, remaining: PrivacyLoss | None) -> bytes:
    """The answer's JSON body, as FastAPI's ``JSONResponse`` renders it."""
    answer = query_dict(release, remaining)
    try:
        return json.dumps(
            answer, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")
    except UnicodeEncodeError:  # a text UTF-8 cannot hold: the same JSON, escaped
        return json.dumps(answer, allow_nan=False, separators=(",", ":")).encode("ascii")


router = APIRouter(prefix="/api/v1")


@router.get("/me", response_model=w.MeOut, tags=["everyone"])
def me(principal: Anyone, service: ServiceDep) -> w.MeOut:
    """Who you are, and the budgets you may see (analysts: their own allowances)."""
    budgets = [budget_out(b) for b in service.budgets_for(principal)]
    return w.MeOut(name=principal.name, role=principal.role, budgets=budgets)


@router.get("/datasets", response_model=list[w.DatasetOut], tags=["everyone"])
def list_datasets(principal: Anyone, service: ServiceDep) -> list[w.DatasetOut]:
    """Registered datasets (analysts: those they hold an allowance on, without the source)."""
    out = []
    budgets = {(b.dataset, b.analyst): b for b in service.ledger.budgets()}
    for record in service.visible_datasets(principal):
        scope = (record.name, None if principal.role == "officer" else principal.name)
        status = budgets.get(scope)
        out.append(
            dataset_out(
                record,
                principal.role == "officer",
                None if status is None else budget_out(status),
                dataset_columns(record, service.data_root),
            )
        )
    return out


@router.get("/datasets/{dataset}", response_model=w.DatasetOut, tags=["everyone"])
def get_dataset(dataset: str, principal: Anyone, service: ServiceDep) -> w.DatasetOut:
    """One dataset (analysts: one they hold an allowance on), with its columns' kinds and
    registered bounds."""
    record = service.dataset_for(principal, dataset)
    analyst = None if principal.role == "officer" else principal.name
    found = [b for b in service.ledger.budgets(record.name) if b.analyst == analyst]
    return dataset_out(
        record,
        principal.role == "officer",
        budget_out(found[0]) if found else None,
        dataset_columns(record, service.data_root),
    )


def dataset_out(
    record: Any,
    officer: bool,
    budget: w.BudgetOut | None,
    columns: dict[str, dict[str, Any]] | None = None,
) -> w.DatasetOut:
    """A dataset as the API shows it: paths only to officers; a dataset over several tables
    with its tables' names (officers: their paths) and links; each column's kind and
    registered bounds as people write them (``[0, 3000]``)."""
    bounds = {k: v for k, v in record.bounds.items() if k != "tables"}
    if "columns" in bounds:
        bounds["columns"] = {
            c: [shown_number(v) for v in pair] for c, pair in bounds["columns"].items()
        }
    columns = columns or {}
    tables = tables_of(record)
    shown = None
    if tables is not None:
        shown = {
            "private": dict(tables["private"]) if officer else sorted(tables["private"]),
            "public": dict(tables["public"]) if officer else sorted(tables["public"]),
            "links": dict(tables["links"]),
        }
    return w.DatasetOut(
        name=record.name,
        privacy_unit=record.privacy_unit,
        schema={c: v["kind"] for c, v in columns.items()} or record.schema,
        bounds=bounds,
        columns=columns,
        description=record.description,
        budget=budget,
        source=record.source if officer and tables is None else None,
        tables=shown,
    )


@router.post("/datasets", response_model=w.DatasetOut, status_code=201, tags=["officer"])
def register_dataset(body: w.DatasetIn, principal: Officer, service: ServiceDep) -> w.DatasetOut:
    """Register a dataset: a source under the data root, its unit, schema, bounds and budget."""
    total = loss_from_parts(body.budget.epsilon, body.budget.delta, body.budget.rho, "budget")
    bounds = body.bounds.model_dump()
    bounds["columns"] = {k: list(v) for k, v in body.bounds.columns.items()}
    try:
        record = service.register_dataset(
            principal,
            body.name,
            body.source,
            body.privacy_unit,
            dict(body.schema_),
            bounds,
            total,
            body.description,
            tables=body.tables,
            public=body.public,
            links=body.links,
        )
    except Exception as exc:
        service.registry.audit(
            principal.name,
            "officer",
            "register_dataset",
            body.name,
            "refused",
            {"reason": _public_reason(exc)},
        )
        raise
    return dataset_out(
        record,
        True,
        budget_out(service.ledger.budget(record.name)),
        dataset_columns(record, service.data_root),
    )


@router.put("/datasets/{dataset}/budget", response_model=w.BudgetOut, tags=["officer"])
def adjust_budget(
    dataset: str, body: w.AllowanceIn, principal: Officer, service: ServiceDep
) -> w.BudgetOut:
    """Raise or lower a dataset's total budget (never below what was spent)."""
    total = loss_from_parts(body.total.epsilon, body.total.delta, body.total.rho, "total")
    return budget_out(service.adjust_dataset_budget(principal, dataset, total, body.reason))


@router.put("/datasets/{dataset}/allowances/{name}", response_model=w.BudgetOut, tags=["officer"])
def set_allowance(
    dataset: str, name: str, body: w.AllowanceIn, principal: Officer, service: ServiceDep
) -> w.BudgetOut:
    """Create or adjust an analyst's allowance (never below its spend; no refunds)."""
    total = loss_from_parts(body.total.epsilon, body.total.delta, body.total.rho, "total")
    return budget_out(service.set_allowance(principal, dataset, name, total, body.reason))


@router.post("/principals", response_model=w.TokenOut, status_code=201, tags=["officer"])
def create_principal(body: w.PrincipalIn, principal: Officer, service: ServiceDep) -> w.TokenOut:
    """Create an analyst (or officer) and issue their first token (shown once; it expires
    after ``expires_in_days``, by default the server's lifetime)."""
    token_id, token, expires_at = service.create_principal(
        principal, body.name, body.role, body.expires_in_days
    )
    return w.TokenOut(token_id=token_id, principal=body.name, token=token, expires_at=expires_at)


@router.post(
    "/principals/{name}/tokens", response_model=w.TokenOut, status_code=201, tags=["officer"]
)
def issue_token(
    name: str, principal: Officer, service: ServiceDep, body: w.TokenIn | None = None
) -> w.TokenOut:
    """Issue another token for a principal (shown once; the body may set
    ``expires_in_days``)."""
    days = None if body is None else body.expires_in_days
    token_id, token, expires_at = service.issue_token(principal, name, days)
    return w.TokenOut(token_id=token_id, principal=name, token=token, expires_at=expires_at)


@router.delete("/tokens/{token_id}", status_code=204, tags=["officer"])
def revoke_token(token_id: str, principal: Officer, service: ServiceDep) -> None:
    """Revoke a token: every later request with it is refused. The last active officer token
    cannot be revoked (409 ``conflict``): issue another officer token first."""
    service.revoke_token(principal, token_id)


@router.get("/tokens", tags=["officer"])
def list_tokens(principal: Officer, service: ServiceDep) -> list[dict[str, Any]]:
    """Token ids, owners, creation, revocation and expiry times (never the tokens)."""
    return service.registry.tokens()


@router.post("/query", response_model=w.QueryOut, tags=["analyst"])
async def run_query(
    body: w.QueryIn, principal: Analyst, service: ServiceDep, request: Request
) -> Response:
    """Answer a query (SQL text or the JSON model) with differential privacy.

    Everything that can refuse the query is checked before the budget is reserved; a refused
    query is not charged. The answer carries error bars and the ledger receipt.
    """
    # the work blocks (the ledger waits for its fsync), so it runs on the app's own thread pool;
    # a plain executor hop costs a fraction of anyio's per-call thread-pool machinery
    executor: ThreadPoolExecutor | None = request.app.state.executor
    payload = await asyncio.get_running_loop().run_in_executor(
        executor, _answer, service, principal, body
    )
    return Response(payload, media_type="application/json")


@router.post("/preview", response_model=w.PreviewOut, tags=["analyst"])
async def preview_query(
    body: w.QueryIn, principal: Analyst, service: ServiceDep, request: Request
) -> w.PreviewOut:
    """How a query would be answered and what it would cost, free: the same checks as
    ``POST /query`` makes before its reservation (a request it would refuse is refused with the
    same error), then the plan (bounds, sensitivities, mechanisms, the loss split), the loss
    the ledger would be charged, the allowance left and whether the charge fits. Nothing is
    read from the data, reserved or charged."""
    executor: ThreadPoolExecutor | None = request.app.state.executor
    loss = loss_from_parts(body.loss.epsilon, body.loss.delta, body.loss.rho, "loss")

    def work() -> Any:
        return service.preview(
            principal,
            body.dataset,
            loss,
            sql=body.sql,
            model=body.query,
            keys=body.keys,
            alpha=body.alpha,
        )

    found = await asyncio.get_running_loop().run_in_executor(executor, work)
    return w.PreviewOut(
        plan=found.plan,
        loss=loss_json(found.charge),
        remaining=loss_json(found.remaining),
        fits=found.fits,
    )


def _answer(service: Service, principal: Principal, body: w.QueryIn) -> bytes:
    """The answer's JSON, or the refusal (nothing charged) or the failure after the
    reservation (charged: :class:`FailedAfterReservationError`) as an exception. The audit
    record is written in every case; if writing it fails, the outcome is still what it was
    (an answer that was charged is returned) and the failure is logged."""
    asked = {"sql": body.sql, "query": body.query, "loss": body.loss.model_dump()}
    try:
        loss = loss_from_parts(body.loss.epsilon, body.loss.delta, body.loss.rho, "loss")
        release, remaining = service.query(
            principal,
            body.dataset,
            loss,
            sql=body.sql,
            model=body.query,
            keys=body.keys,
            alpha=body.alpha,
        )
    except FailedAfterReservationError as exc:
        extra = {"reservation": exc.reservation_id, "charged": str(exc.loss), "reason": exc.cause}
        _audit(service, principal, body.dataset, "failed", {**asked, **extra})
        raise
    except Exception as exc:
        reason = _public_reason(exc)
        _audit(service, principal, body.dataset, "refused", {**asked, "reason": reason})
        raise
    receipt = release.receipt
    _audit(
        service,
        principal,
        body.dataset,
        "answered",
        {**asked, "receipt": str(receipt), "charged": str(release.loss)},
    )
    try:
        return query_json(release, remaining)
    except Exception as exc:  # answered and charged, but the answer cannot be sent
        raise FailedAfterReservationError(receipt.reservation_id, release.loss, exc) from None


def _audit(
    service: Service, principal: Principal, dataset: str, outcome: str, detail: dict[str, Any]
) -> None:
    """Record a query's outcome in the audit log; a failure to write it is logged, never
    reported in place of the query's own outcome."""
    try:
        service.registry.audit(principal.name, "analyst", "query", dataset, outcome, detail)
    except Exception:
        logger.error(
            "could not write the audit record of a query (%s, %s, %s)",
            principal.name,
            dataset,
            outcome,
            exc_info=True,
        )


@router.get("/receipts", response_model=list[w.ReceiptOut], tags=["everyone"])
def receipts(
    principal: Anyone,
    service: ServiceDep,
    analyst: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> list[w.ReceiptOut]:
    """Receipts, newest first (analysts: only their own)."""
    return [receipt_out(e) for e in service.receipts(principal, analyst, limit)]


@router.get("/audit", response_model=list[w.AuditOut], tags=["officer"])
def audit(
    principal: Officer,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_PAGE)] = 200,
    actor: Annotated[str | None, Query(max_length=64)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,  # a 64-bit row id
) -> list[w.AuditOut]:
    """The append-only audit log, newest first: every query, refusal and budget change.

    At most ``limit`` records (up to 1,000) per page; pass ``before`` = the smallest ``id``
    of a page to get the page after it. Each record's detail is bounded (8 KiB)."""
    return [
        w.AuditOut(
            id=r.id,
            timestamp=r.timestamp,
            actor=r.actor,
            role=r.role,
            action=r.action,
            dataset=r.dataset,
            outcome=r.outcome,
            detail=r.detail,
        )
        for r in service.registry.audit_log(limit, actor, action, before)
    ]


@router.get("/alerts", tags=["officer"])
def alerts(principal: Officer, service: ServiceDep) -> list[dict[str, Any]]:
    """Threshold alerts recorded in the ledger, newest first."""
    return [
        {
            "entry_id": e.id,
            "timestamp": e.timestamp,
            "dataset": e.dataset,
            "analyst": e.analyst,
            "detail": e.detail,
        }
        for e in service.alert_entries()
    ]


@router.get("/health", tags=["everyone"])
async def health() -> dict[str, str]:
    """Liveness (answered on the event loop, never behind a query)."""
    return {"status": "ok"}


def _public_reason(exc: BaseException) -> str:
    if isinstance(exc, DPError | NotFoundError | PermissionDeniedError | AuthError):
        return str(exc)[:1000]
    return type(exc).__name__


# (exception type, HTTP status, error code): the message is the exception's own (DPError and
# the service's errors are written for the caller). Starlette picks the most specific class.
_ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (AuthError, 401, "unauthenticated"),
    (PermissionDeniedError, 403, "forbidden"),
    (NotFoundError, 404, "not_found"),
    (UnknownBudgetError, 404, "not_found"),
    (ConflictError, 409, "conflict"),
    (BudgetExceededError, 409, "budget_exceeded"),
    (LedgerError, 409, "ledger_refused"),
    (DPError, 400, "invalid_request"),
)

# the error code of an HTTP error raised by the framework (unknown route, wrong method, a body
# that could not be read)
_HTTP_KINDS = {
    400: "invalid_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


class _BodyTooLarge(StarletteHTTPException):
    """Raised while a body is read, once it passes :data:`MAX_BODY` bytes (FastAPI re-raises
    HTTP errors from body reading as they are)."""

    def __init__(self) -> None:
        super().__init__(413, _too_large())


def _too_large() -> str:
    return f"the request body is larger than {MAX_BODY:,} bytes; nothing was read or recorded"


def _log_internal(request: str, exc: BaseException) -> None:
    """One log record of an internal error: its class, message and last frames (a
    RecursionError's full traceback is thousands of lines)."""
    frames = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-12))
    logger.error("internal error answering %s: %s", request, frames[-6000:])


def _install_handlers(app: FastAPI) -> None:
    for kind, status, code in _ERRORS:

        def handle(
            request: Request, exc: Exception, status: int = status, code: str = code
        ) -> JSONResponse:
            return _error(status, code, str(exc))

        app.add_exception_handler(kind, handle)

    @app.exception_handler(FailedAfterReservationError)
    def _failed(request: Request, exc: FailedAfterReservationError) -> JSONResponse:
        return JSONResponse(
            {
                "error": "failed_after_reservation",
                "detail": str(exc),
                "charged": loss_json(exc.loss),
                "reservation_id": exc.reservation_id,
            },
            status_code=424,
        )

    @app.exception_handler(LedgerUnavailableError)
    def _unavailable(request: Request, exc: LedgerUnavailableError) -> JSONResponse:
        return _error(
            503,
            "unavailable",
            "the ledger database is unavailable; nothing was "
            "charged or recorded by this request. Retry shortly.",
        )

    @app.exception_handler(ValueError)
    def _value(request: Request, exc: ValueError) -> JSONResponse:
        return _error(400, "invalid_request", "the request has an invalid value")

    @app.exception_handler(TypeError)
    def _type(request: Request, exc: TypeError) -> JSONResponse:
        return _error(400, "invalid_request", "the request has a value of the wrong type")

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code if 400 <= exc.status_code < 500 else 503
        kind = _HTTP_KINDS.get(status, "invalid_request")
        detail = exc.detail if isinstance(exc.detail, str) else "the request was refused"
        return JSONResponse(
            {"error": kind, "detail": detail}, status_code=status, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        errors = [
            {"loc": list(map(str, e.get("loc", ()))), "msg": str(e.get("msg", ""))[:300]}
            for e in problems[:50]
        ]
        if problems and all(e.get("type") == "string_unicode" for e in problems):
            # a lone surrogate (JSON "\ud800") in a text field: an invalid value, refused with
            # the same 400 as one anywhere else in the request (docs/service.md, Errors)
            where = ".".join(str(p) for p in problems[0].get("loc", ()) if p != "body")
            return JSONResponse(
                {
                    "error": "invalid_request",
                    "detail": str(
                        InvalidParameterError(
                            where or "body", "(a text with a lone surrogate)", TEXTS_ALLOWED
                        )
                    ),
                    "errors": errors,
                },
                status_code=400,
            )
        if problems and all(e.get("type") == "json_invalid" for e in problems):
            return JSONResponse(
                {
                    "error": "invalid_request",
                    "detail": "the request body is not valid JSON",
                    "errors": errors,
                },
                status_code=400,
            )
        return JSONResponse(
            {
                "error": "invalid_request",
                "detail": "the request does not match the schema",
                "errors": errors,
            },
            status_code=422,
        )


class _Guard:
    """ASGI middleware: refuses bodies over :data:`MAX_BODY` bytes (413, before reading them
    when ``Content-Length`` says so) and turns any error that escaped the handlers into a JSON
    503 ``internal_error`` (never a plain-text 500 or a dropped connection), logged once."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and (not value.isdigit() or int(value) > MAX_BODY):
                await _send_json(send, 413, "payload_too_large", _too_large())
                return
        seen = 0
        started = False

        async def bounded_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY:
                    raise _BodyTooLarge
            return message

        async def tracked_send(message: Any) -> None:
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, tracked_send)
        except _BodyTooLarge:
            if not started:
                await _send_json(send, 413, "payload_too_large", _too_large())
        except Exception as exc:
            _log_internal(f"{scope.get('method')} {scope.get('path')}", exc)
            if not started:
                await _send_json(
                    send,
                    503,
                    "internal_error",
                    f"the service failed while handling this request ({type(exc).__name__}): "
                    "a fault of the service, not of the request, and logged. A query that gets "
                    "this answer reserved nothing (a failure after a reservation is a 424).",
                )


async def _send_json(send: Any, status: int, kind: str, detail: str) -> None:
    body = json.dumps({"error": kind, "detail": detail}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _freeze_heap() -> None:
    """Move every object alive now (the imported modules, pandas, sqlglot, FastAPI...) to the
    garbage collector's permanent generation, so that full collections stop walking them.

    Under load a full (generation 2) collection of the unfrozen heap took 100-330 ms, twice in
    eight seconds, holding the GIL: every request in flight waited, and it was most of the
    p99 latency. Frozen, a full collection takes about 3 ms. Frozen objects are still freed by
    reference counting; only cycles among them are no longer collected (there are none worth
    having among module-level objects).

    Then full collections are made frequent and small (``gc.set_threshold(700, 10, 1)``: one
    per ten young collections, instead of one per hundred): building a query's SQL (sqlglot)
    leaves cyclic garbage, and with the default thresholds it piled up into full collections of
    250-450 ms after a few uncached query shapes; with these, 50-90 ms.

    Last, the interpreter's switch interval is 1 ms instead of 5: a thread that wants the GIL
    (``/health``) asks the running one to drop it after 1 ms. On a busy 2-core machine (load
    about 6) under the hostile load of tests/service/test_health_under_load.py, /health's p99
    was 93-161 ms in four runs at 5 ms and 90-93 ms in two at 1 ms."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 1)
    sys.setswitchinterval(0.001)


def create_app(
    config: ServiceConfig | None = None,
    service: Service | None = None,
    *,
    freeze_heap: bool = False,
) -> FastAPI:
    """The app for ``config`` (or around an existing ``service``).

    ``freeze_heap``: at startup, collect and freeze the garbage collector's heap (see
    :func:`_freeze_heap`; ``dpkit serve`` does, as the process is the server's own)."""
    from contextlib import asynccontextmanager

    from dpkit.service._dashboard import router as dashboard_router

    owned = service is None
    svc = service if service is not None else Service(config or ServiceConfig())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if freeze_heap:
            _freeze_heap()
        svc.prewarm(freeze=freeze_heap)  # registered datasets load on a background thread
        # queries run here (threads are cheap; concurrent queries share the ledger's group commit)
        executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="dpkit-query")
        app.state.executor = executor
        yield
        app.state.executor = None
        executor.shutdown(wait=True)
        if owned:
            svc.close()

    app = FastAPI(
        title="dpkit privacy-budget service",
        version="1",
        description="Differentially private queries with per-analyst budgets, receipts and an "
        "append-only audit log.",
        lifespan=lifespan,
    )
    app.state.service = svc
    app.state.executor = None  # set while the app runs (lifespan); None: the loop's default
    app.state.answer_query = _answer  # the dashboard's query form answers as the API does
    app.include_router(router)
    app.include_router(dashboard_router)
    _install_handlers(app)
    app.add_middleware(_Guard)
    return app


def build_app() -> FastAPI:
    """The app from environment variables (for ``uvicorn --factory`` and worker processes)."""
    config = ServiceConfig(
        database=os.environ.get("DPKIT_DATABASE", "sqlite:///dpkit-service.db"),
        data_root=os.environ.get("DPKIT_DATA_ROOT", "."),
        webhook_url=os.environ.get("DPKIT_WEBHOOK_URL") or None,
        bootstrap_token=os.environ.get("DPKIT_BOOTSTRAP_TOKEN") or None,
        engine=os.environ.get("DPKIT_ENGINE", "duckdb"),
        token_days=float(os.environ.get("DPKIT_TOKEN_DAYS") or 90),
    )
    app = create_app(config, freeze_heap=True)
    announce_token(app.state.service, config.bootstrap_token)
    return app


def announce_token(service: object, chosen: str | None) -> None:
    """Print a token the service issued at start (the first officer's, or a new one when no
    officer token was active any more), unless it is the one the operator chose."""
    token = getattr(service, "bootstrap_token", None)
    if token and token != chosen:
        name = getattr(service, "bootstrap_officer", None) or "officer"
        print(
            f"dpkit serve: issued a token for the officer {name!r} (no officer token was "
            f"active); shown once: {token}",
            file=sys.stderr,
            flush=True,
        )
