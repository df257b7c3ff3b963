"""The dashboard: server-rendered HTML with an inline SVG chart (no JavaScript, no CDN).

Every value shown is escaped (``html.escape``). Login stores the token in an HttpOnly,
SameSite=Strict cookie, so other sites cannot submit the forms with it.
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from dpkit.errors import DPError
from dpkit.ledger import LedgerError
from dpkit.service._core import NotFoundError, PermissionDeniedError, Service, loss_from_parts
from dpkit.service._registry import Principal

__all__ = ["router", "spend_chart"]

router = APIRouter(include_in_schema=False)

COOKIE = "dpkit_token"
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}
td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}th{background:#f3f3f3}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
.alert{color:#a00}.bar{background:#eee;width:160px;height:10px;display:inline-block}
.bar span{background:#1f77b4;height:10px;display:block}form.inline input{margin-right:.4rem}
.msg{padding:.5rem;background:#fff4d6;border:1px solid #e0c070}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, body: str, who: Principal | None = None) -> HTMLResponse:
    head = (
        f"<p>Signed in as <b>{_e(who.name)}</b> ({_e(who.role)}) · "
        '<form method="post" action="/logout" style="display:inline">'
        '<button type="submit">Log out</button></form></p>'
        if who
        else ""
    )
    return HTMLResponse(
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1>{head}{body}</body></html>"
    )


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _who(request: Request, service: Service) -> Principal | None:
    token = request.cookies.get(COOKIE)
    return service.authenticate(token) if token else None


def _ts(value: float) -> str:
    return dt.datetime.fromtimestamp(value, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def spend_chart(
    series: dict[tuple[str, str | None], list[tuple[float, float]]],
    width: int = 760,
    height: int = 260,
) -> str:
    """An inline SVG: share of each budget used (0–100 %) over time, one step line per budget."""
    left, right, top, bottom = 50, 200, 15, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    times = [t for points in series.values() for t, _ in points]
    parts = [
        f'<svg id="spend-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" role="img" aria-label="budget used over time">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" '
        'stroke="#999"/>',
    ]
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{frac:.0%}</text>"
        )
    if not times:
        parts.append(
            f'<text x="{left + 10}" y="{top + plot_h / 2}" font-size="13" fill="#666">'
            "no spend yet</text></svg>"
        )
        return "".join(parts)
    t0, t1 = min(times), max(times)
    span = (t1 - t0) or 1.0
    parts.append(
        f'<text x="{left}" y="{height - 8}" font-size="11">{_e(_ts(t0))}</text>'
        f'<text x="{left + plot_w}" y="{height - 8}" font-size="11" text-anchor="end">'
        f"{_e(_ts(t1))}</text>"
    )
    for i, (key, points) in enumerate(
        sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
    ):
        colour = _COLOURS[i % len(_COLOURS)]
        coords: list[tuple[float, float]] = [(left, top + plot_h)]
        for t, used in points:
            x = left + plot_w * (t - t0) / span
            y = top + plot_h * (1 - min(max(used, 0.0), 1.0))
            coords.append((x, coords[-1][1]))
            coords.append((x, y))
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
        label = key[0] + (f" / {key[1]}" if key[1] else " (dataset)")
        parts.append(
            f'<polyline class="series" data-budget="{_e(label)}" points="{path}" fill="none" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        ly = top + 14 + 16 * i
        parts.append(
            f'<rect x="{left + plot_w + 10}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{left + plot_w + 24}" y="{ly}" font-size="11">{_e(label)} '
            f"{points[-1][1]:.0%}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _budget_rows(service: Service, who: Principal) -> str:
    rows = []
    for b in service.budgets_for(who):
        pct = float(b.used)
        rows.append(
            f"<tr><td>{_e(b.dataset)}</td><td>{_e(b.analyst or '— (dataset)')}</td>"
            f"<td>{_e(b.total)}</td><td>{_e(b.spent)}</td><td>{_e(b.remaining)}</td>"
            f'<td><span class="bar"><span style="width:{min(pct, 1) * 100:.1f}%"></span></span> '
            f"{pct:.1%}</td><td>{b.charges}</td></tr>"
        )
    return (
        '<table id="budgets"><tr><th>dataset</th><th>analyst</th><th>total</th><th>spent</th>'
        "<th>remaining</th><th>used</th><th>charges</th></tr>" + "".join(rows) + "</table>"
    )


def _receipts(service: Service, who: Principal) -> str:
    rows = [
        f"<tr><td>{_e(e.receipt)}</td><td>{_e(e.dataset)}</td><td>{_e(e.analyst or '')}</td>"
        f"<td>{_e(e.loss)}</td><td>{_e(_ts(e.timestamp))}</td></tr>"
        for e in service.receipts(who, limit=25)
    ]
    return (
        '<table id="receipts"><tr><th>receipt</th><th>dataset</th><th>analyst</th><th>loss</th>'
        "<th>time (UTC)</th></tr>" + "".join(rows) + "</table>"
    )


def _series(
    service: Service, who: Principal
) -> dict[tuple[str, str | None], list[tuple[float, float]]]:
    out = {}
    for key, points in service.ledger.consumption().items():
        if who.role == "analyst" and key[1] != who.name:
            continue
        out[key] = [(t, float(used)) for t, used, _ in points]
    return out


def _alert_text(detail: str) -> str:
    """``threshold=1/2;used=3/5`` as ``crossed 50% (used 60%)``."""
    from fractions import Fraction

    try:
        parts = dict(item.split("=", 1) for item in detail.split(";"))
        threshold, used = Fraction(parts["threshold"]), Fraction(parts["used"])
    except (ValueError, KeyError, ZeroDivisionError):
        return detail
    return f"crossed {float(threshold):.0%} of its budget (used {float(used):.0%})"


def _officer_page(service: Service, who: Principal, message: str) -> HTMLResponse:
    datasets = "".join(
        f"<tr><td>{_e(d.name)}</td><td>{_e(d.source)}</td><td>{_e(d.privacy_unit)}</td>"
        f"<td>{_e(', '.join(f'{k}:{v}' for k, v in d.schema.items()))}</td>"
        f"<td>{_e(d.bounds.get('contribution', {}))}</td></tr>"
        for d in service.registry.datasets()
    )
    alerts = "".join(
        f'<li class="alert">{_e(_ts(e.timestamp))}: {_e(e.dataset)}'
        f"{_e(' / ' + e.analyst if e.analyst else '')} — {_e(_alert_text(e.detail))}</li>"
        for e in service.alert_entries(20)
    )
    analysts = [n for n, r in service.registry.principals() if r == "analyst"]
    body = (
        (f'<p class="msg">{_e(message)}</p>' if message else "")
        + "<h2>Spend over time</h2>"
        + spend_chart(_series(service, who))
        + "<h2>Budgets</h2>"
        + _budget_rows(service, who)
        + "<h2>Alerts</h2>"
        + (f'<ul id="alerts">{alerts}</ul>' if alerts else '<p id="alerts">No alerts.</p>')
        + "<h2>Datasets</h2>"
        + '<table id="datasets"><tr><th>name</th><th>source</th><th>privacy unit</th>'
        "<th>schema</th><th>per-person bounds</th></tr>"
        + datasets
        + "</table>"
        + """<h2>Register a dataset</h2>
<form id="register" method="post" action="/dashboard/datasets">
<label>Name <input name="name" required></label>
<label>Source (under the data root) <input name="source" required></label>
<label>Privacy unit <input name="privacy_unit" required></label><br>
<label>Schema (col=kind,…) <input name="schema" size="40"></label>
<label>Max rows per person <input name="max_rows" value="1" size="4"></label>
<label>Budget ε <input name="epsilon" value="1" size="6"></label>
<button type="submit">Register</button></form>
<h2>Set an allowance</h2>
<form id="allowance" method="post" action="/dashboard/allowance">
<label>Dataset <input name="dataset" required></label>
<label>Analyst <input name="analyst" required list="analysts"></label>
<label>Allowance ε <input name="epsilon" required size="6"></label>
<button type="submit">Save</button></form>
<datalist id="analysts">"""
        + "".join(f'<option value="{_e(a)}">' for a in analysts)
        + "</datalist><h2>Recent receipts</h2>"
        + _receipts(service, who)
    )
    return _page("dpkit — privacy officer", body, who)


def _analyst_page(service: Service, who: Principal, message: str) -> HTMLResponse:
    body = (
        (f'<p class="msg">{_e(message)}</p>' if message else "")
        + "<h2>Your allowances</h2>"
        + _budget_rows(service, who)
        + "<h2>Spend over time</h2>"
        + spend_chart(_series(service, who))
        + "<h2>Your receipts</h2>"
        + _receipts(service, who)
    )
    return _page("dpkit — analyst", body, who)


@router.get("/", response_class=HTMLResponse)
def dashboard(request: Request, service: Annotated[Service, Depends(_service)]) -> Response:
    who = _who(request, service)
    if who is None:
        return RedirectResponse("/login", status_code=303)
    message = request.query_params.get("msg", "")[:300]
    if who.role == "officer":
        return _officer_page(service, who, message)
    return _analyst_page(service, who, message)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    failed = request.query_params.get("failed")
    return _page(
        "dpkit — sign in",
        ('<p class="msg">That token is not valid.</p>' if failed else "")
        + '<form id="login" method="post" action="/login"><label>Token '
        '<input type="password" name="token" size="50" required></label> '
        '<button type="submit">Sign in</button></form>',
    )


@router.post("/login")
def login(
    service: Annotated[Service, Depends(_service)], token: Annotated[str, Form(max_length=200)]
) -> Response:
    if service.authenticate(token) is None:
        return RedirectResponse("/login?failed=1", status_code=303)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", max_age=12 * 3600)
    return response


@router.post("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


def _done(message: str) -> Response:
    from urllib.parse import quote

    return RedirectResponse("/?msg=" + quote(message[:300]), status_code=303)


@router.post("/dashboard/datasets")
def register_form(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    name: Annotated[str, Form(max_length=64)],
    source: Annotated[str, Form(max_length=1024)],
    privacy_unit: Annotated[str, Form(max_length=64)],
    epsilon: Annotated[str, Form(max_length=32)],
    schema_spec: Annotated[str, Form(max_length=4000, alias="schema")] = "",
    max_rows: Annotated[int, Form(ge=1, le=1_000_000)] = 1,
) -> Response:
    who = _who(request, service)
    if who is None:
        return RedirectResponse("/login", status_code=303)
    try:
        declared = {}
        for item in schema_spec.split(","):
            if item.strip():
                column, _, kind = item.partition("=")
                declared[column.strip()] = kind.strip()
        service.register_dataset(
            who,
            name,
            source,
            privacy_unit,
            declared,
            {"max_rows": max_rows},
            loss_from_parts(epsilon, None, None, "budget"),
        )
    except (DPError, LedgerError, PermissionDeniedError, NotFoundError, ValueError) as exc:
        service.registry.audit(
            who.name, who.role, "register_dataset", name, "refused", {"reason": str(exc)[:500]}
        )
        return _done(f"Refused: {exc}")
    return _done(f"Registered dataset {name}.")


@router.post("/dashboard/allowance")
def allowance_form(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    dataset: Annotated[str, Form(max_length=64)],
    analyst: Annotated[str, Form(max_length=64)],
    epsilon: Annotated[str, Form(max_length=32)],
) -> Response:
    who = _who(request, service)
    if who is None:
        return RedirectResponse("/login", status_code=303)
    try:
        service.set_allowance(who, dataset, analyst, loss_from_parts(epsilon, None, None, "total"))
    except (DPError, LedgerError, PermissionDeniedError, NotFoundError, ValueError) as exc:
        return _done(f"Refused: {exc}")
    return _done(f"Allowance of {analyst} on {dataset} set to ε={epsilon}.")
