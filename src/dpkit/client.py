"""A Python client of the dpkit privacy-budget service (``dpkit serve``), over httpx.

>>> from dpkit.client import Client                                     # doctest: +SKIP
>>> analyst = Client("http://127.0.0.1:8000", token="...")              # doctest: +SKIP
>>> answer = analyst.query("people", "SELECT COUNT(*)", epsilon="0.1")  # doctest: +SKIP
>>> answer.table, answer.receipt, answer.remaining                      # doctest: +SKIP

Privacy losses are sent as decimal strings so the service reads them exactly. Errors come back
as :class:`ServiceError` carrying the HTTP status, the error kind (``budget_exceeded``,
``forbidden``, ``unavailable``, ...) and the service's message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from dpkit._extras import require

require("cli", by="dpkit.client")

import httpx

from dpkit.errors import DPError, InvalidParameterError

__all__ = ["Answer", "Client", "ServiceError"]


class ServiceError(DPError):
    """The service refused a request (or could not be reached: status 0, kind
    ``"unreachable"``).

    ``info`` holds the error's other fields, e.g. for ``failed_after_reservation`` (a query that
    failed after its loss was reserved: HTTP 424, the charge stays) ``charged`` and
    ``reservation_id``."""

    def __init__(
        self, status: int, kind: str, detail: str, info: dict[str, Any] | None = None
    ) -> None:
        self.status = status
        self.kind = kind
        self.detail = detail
        self.info = dict(info or {})
        super().__init__(f"{status} {kind}: {detail}")


@dataclass(frozen=True)
class Answer:
    """A DP answer: the result tables (rows as dicts), error bars, the charge and the receipt
    (``columns``: each table's column names, also when it has no rows)."""

    tables: dict[str, list[dict[str, Any]]]
    accuracy: dict[str, dict[str, Any]]
    loss: dict[str, Any]
    receipt: dict[str, Any]
    remaining: dict[str, Any]
    columns: dict[str, list[str]] = field(default_factory=dict)

    @property
    def table(self) -> list[dict[str, Any]]:
        return self.tables["main"]

    def to_pandas(self, name: str = "main") -> Any:
        import pandas as pd  # type: ignore[import-untyped]

        return pd.DataFrame(self.tables[name], columns=self.columns.get(name) or None)


def _num(value: float | str | Decimal | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _query_body(
    dataset: str,
    sql: str | None,
    model: dict[str, Any] | None,
    keys: dict[str, list[Any]] | None,
    epsilon: Any,
    delta: Any,
    rho: Any,
    alpha: float,
) -> dict[str, Any]:
    body: dict[str, Any] = {"dataset": dataset, "loss": _loss(epsilon, delta, rho), "alpha": alpha}
    if sql is not None:
        body["sql"] = sql
    if model is not None:
        body["query"] = model
    if keys is not None:
        body["keys"] = keys
    return body


def _loss(epsilon: Any, delta: Any, rho: Any) -> dict[str, str]:
    out = {"epsilon": _num(epsilon), "delta": _num(delta), "rho": _num(rho)}
    return {k: v for k, v in out.items() if v is not None}


class Client:
    """Talk to a dpkit service as an analyst or an officer.

    Args:
        url: the service's base URL, e.g. ``http://127.0.0.1:8000``.
        token: the bearer token the officer issued.
        timeout: seconds per request.
        http: an existing ``httpx.Client`` to send through (e.g. FastAPI's ``TestClient``).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 60.0,
        http: httpx.Client | None = None,
    ) -> None:
        if not isinstance(token, str) or not token.strip():
            raise InvalidParameterError(
                "token",
                token if not isinstance(token, str) else "",
                "the non-empty bearer token a privacy officer issued",
                "Pass token=... (the CLI reads $DPKIT_TOKEN).",
            )
        if token != token.strip() or any(not c.isprintable() or c.isspace() for c in token):
            # named, never printed: a token is a secret
            raise InvalidParameterError(
                "token",
                "(the given token)",
                "one word of printable characters, without spaces or line breaks",
                "Check that the token was copied whole, without quotes or a newline.",
            )
        self._auth = {"Authorization": f"Bearer {token}"}
        self._http = http or httpx.Client(base_url=url.rstrip("/"), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            response = self._http.request(method, f"/api/v1{path}", headers=self._auth, **kw)
        except httpx.HTTPError as exc:
            raise ServiceError(0, "unreachable", f"{type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            info: dict[str, Any] = {}
            try:
                body = response.json()
                kind, detail = str(body.get("error", "error")), str(body.get("detail", ""))
                info = {k: v for k, v in body.items() if k not in ("error", "detail")}
            except (ValueError, AttributeError):
                kind, detail = "error", response.text[:500]
            raise ServiceError(response.status_code, kind, detail, info)
        return None if response.status_code == 204 else response.json()

    # -- everyone --

    def me(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/me")
        return result

    def datasets(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/datasets")
        return result

    def receipts(self, analyst: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if analyst is not None:
            params["analyst"] = analyst
        result: list[dict[str, Any]] = self._call("GET", "/receipts", params=params)
        return result

    # -- analysts --

    def query(
        self,
        dataset: str,
        sql: str | None = None,
        *,
        model: dict[str, Any] | None = None,
        keys: dict[str, list[Any]] | None = None,
        epsilon: float | str | Decimal | None = None,
        delta: float | str | Decimal | None = None,
        rho: float | str | Decimal | None = None,
        alpha: float = 0.05,
    ) -> Answer:
        """Run a query (SQL text, or ``model=`` the JSON query model) spending the given loss."""
        body = _query_body(dataset, sql, model, keys, epsilon, delta, rho, alpha)
        result = self._call("POST", "/query", json=body)
        return Answer(
            result["tables"],
            result["accuracy"],
            result["loss"],
            result["receipt"],
            result["remaining"],
            result.get("columns") or {},
        )

    def preview(
        self,
        dataset: str,
        sql: str | None = None,
        *,
        model: dict[str, Any] | None = None,
        keys: dict[str, list[Any]] | None = None,
        epsilon: float | str | Decimal | None = None,
        delta: float | str | Decimal | None = None,
        rho: float | str | Decimal | None = None,
    ) -> dict[str, Any]:
        """How :meth:`query` would answer, free: ``plan`` (its text), ``loss`` (the charge),
        ``remaining`` (the allowance now) and ``fits``. Nothing is read, reserved or charged;
        what :meth:`query` would refuse is refused the same way (:class:`ServiceError`)."""
        body = _query_body(dataset, sql, model, keys, epsilon, delta, rho, 0.05)
        result: dict[str, Any] = self._call("POST", "/preview", json=body)
        return result

    # -- officers --

    def register_dataset(
        self,
        name: str,
        source: str,
        privacy_unit: str,
        *,
        epsilon: float | str | Decimal | None = None,
        delta: float | str | Decimal | None = None,
        rho: float | str | Decimal | None = None,
        schema: dict[str, str] | None = None,
        max_rows: int = 1,
        max_groups: int | None = None,
        columns: dict[str, tuple[float, float]] | None = None,
        description: str = "",
    ) -> dict[str, Any]:
        bounds: dict[str, Any] = {"max_rows": max_rows, "max_groups": max_groups}
        if columns:
            bounds["columns"] = {k: list(v) for k, v in columns.items()}
        result: dict[str, Any] = self._call(
            "POST",
            "/datasets",
            json={
                "name": name,
                "source": source,
                "privacy_unit": privacy_unit,
                "schema": schema or {},
                "bounds": bounds,
                "budget": _loss(epsilon, delta, rho),
                "description": description,
            },
        )
        return result

    def add_analyst(
        self, name: str, role: str = "analyst", *, expires_in_days: float | None = None
    ) -> dict[str, Any]:
        """Create a principal; returns ``{token_id, principal, token, expires_at}`` (the token
        shown once; it expires after ``expires_in_days``, by default the server's lifetime)."""
        body: dict[str, Any] = {"name": name, "role": role}
        if expires_in_days is not None:
            body["expires_in_days"] = expires_in_days
        result: dict[str, Any] = self._call("POST", "/principals", json=body)
        return result

    def issue_token(self, name: str, *, expires_in_days: float | None = None) -> dict[str, Any]:
        """Another token for ``name``: ``{token_id, principal, token, expires_at}``."""
        body = {} if expires_in_days is None else {"expires_in_days": expires_in_days}
        result: dict[str, Any] = self._call("POST", f"/principals/{name}/tokens", json=body)
        return result

    def set_allowance(
        self,
        dataset: str,
        analyst: str,
        *,
        epsilon: float | str | Decimal | None = None,
        delta: float | str | Decimal | None = None,
        rho: float | str | Decimal | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "PUT",
            f"/datasets/{dataset}/allowances/{analyst}",
            json={"total": _loss(epsilon, delta, rho), "reason": reason},
        )
        return result

    def revoke_token(self, token_id: str) -> None:
        self._call("DELETE", f"/tokens/{token_id}")

    def audit(self, limit: int = 200, *, before: int | None = None) -> list[dict[str, Any]]:
        """Audit records, newest first (``limit`` ≤ 1,000; ``before``: only ids below it, to
        page back)."""
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        result: list[dict[str, Any]] = self._call("GET", "/audit", params=params)
        return result
