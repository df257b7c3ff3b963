"""The dashboard, a workbench: server-rendered HTML with an inline SVG chart (no JavaScript,
no CDN).

Analysts see their datasets with every column's kind, registered bounds and key set (as people
write them: ``[0, 3000]``, ``["a", "b"]``), ask SQL queries with an ε, (ε, δ) or ρ budget and
read the answer with its intervals, its cost and its receipt. Privacy officers register
datasets (budget, column bounds and key sets), set (ε, δ) or ρ budgets and allowances, and
watch the spend. Every value shown is escaped (``html.escape``). Login stores the token in an
HttpOnly, SameSite=Strict cookie, so other sites cannot submit the forms with it.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from dpkit._format import column_decimals, format_column
from dpkit.errors import DPError, InvalidParameterError
from dpkit.ledger import LedgerError
from dpkit.service._core import (
    FailedAfterReservationError,
    NotFoundError,
    PermissionDeniedError,
    Preview,
    Service,
    dataset_columns,
    loss_from_parts,
    loss_json,
    shown_number,
)
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
form.card{border:1px solid #ccc;background:#fafafa;padding:.6rem .9rem;margin:.5rem 0 1.5rem}
form.card label{display:inline-block;margin:.25rem 1rem .25rem 0}
form.card textarea{font-family:ui-monospace,monospace;width:100%;box-sizing:border-box}
form.card .wide{display:block}
.hint{color:#555;font-size:.9em;margin:.2rem 0}
code,.mono{font-family:ui-monospace,monospace}
td.interval{color:#444;white-space:nowrap}
.cost{padding:.5rem;background:#eef5ff;border:1px solid #9bbbe0}
pre.plan{white-space:pre-wrap;background:#f6f6f6;border:1px solid #ddd;padding:.5rem}
button.secondary{margin-left:.5rem}
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


def _pair(values: Sequence[Any]) -> str:
    """Bounds as people write them: ``[0, 3000]``."""
    return "[" + ", ".join(str(shown_number(v)) for v in values) + "]"


def _key_list(values: Sequence[Any], most: int = 20) -> str:
    """A key set as people write it: ``["a", "b"]`` (the first ``most`` values)."""
    shown = json.dumps(list(values[:most]), ensure_ascii=False)
    return shown if len(values) <= most else f"{shown[:-1]}, …] ({len(values):,} values)"


def _contribution(bounds: Mapping[str, Any]) -> str:
    """The unit's contribution bounds as a metadata file writes them: ``max_rows = 1``."""
    items = dict(bounds.get("contribution", {}))
    if bounds.get("max_per_key") is not None:
        items["max_per_key"] = bounds["max_per_key"]
    return ", ".join(f"{k} = {v}" for k, v in items.items()) or "—"


def _columns_table(name: str, columns: Mapping[str, Mapping[str, Any]]) -> str:
    """Each column of a dataset: its kind, registered bounds and key set."""
    rows = "".join(
        f"<tr><td><code>{_e(column)}</code></td><td>{_e(spec.get('kind', ''))}</td>"
        f"<td class=mono>{_e(_pair(spec['bounds']) if 'bounds' in spec else '—')}</td>"
        f"<td class=mono>{_e(_key_list(spec['keys']) if 'keys' in spec else '—')}</td></tr>"
        for column, spec in columns.items()
    )
    return (
        f'<table class="columns" id="columns-{_e(name)}"><tr><th>column</th><th>kind</th>'
        "<th>bounds</th><th>keys</th></tr>" + rows + "</table>"
    )


def _dataset_sections(service: Service, who: Principal) -> str:
    """The datasets a principal may query or manage, each with its columns."""
    out = []
    for record in service.visible_datasets(who):
        source = f" · source <code>{_e(record.source)}</code>" if who.role == "officer" else ""
        described = f" — {_e(record.description)}" if record.description else ""
        out.append(
            f'<h3 class="dataset">{_e(record.name)}</h3><p class="hint">privacy unit '
            f"<code>{_e(record.privacy_unit)}</code> · per unit "
            f"<code>{_e(_contribution(record.bounds))}</code>{source}{described}</p>"
            + _columns_table(record.name, dataset_columns(record, service.data_root))
        )
    return "".join(out) or "<p>No datasets yet.</p>"


def _loss_inputs(epsilon: str = "", delta: str = "", rho: str = "") -> str:
    """ε (with an optional δ), or ρ."""
    return (
        f'<label>ε <input name="epsilon" value="{_e(epsilon)}" size="7"></label>'
        f'<label>δ <input name="delta" value="{_e(delta)}" size="9" placeholder="optional">'
        f'</label><label>or ρ (zCDP) <input name="rho" value="{_e(rho)}" size="7"></label>'
    )


def _officer_page(service: Service, who: Principal, message: str) -> HTMLResponse:
    datasets = "".join(
        f"<tr><td>{_e(d.name)}</td><td>{_e(d.source)}</td><td>{_e(d.privacy_unit)}</td>"
        f"<td class=mono>{_e(_contribution(d.bounds))}</td></tr>"
        for d in service.registry.datasets()
    )
    alerts = "".join(
        f'<li class="alert">{_e(_ts(e.timestamp))}: {_e(e.dataset)}'
        f"{_e(' / ' + e.analyst if e.analyst else '')} — {_e(_alert_text(e.detail))}</li>"
        for e in service.alert_entries(20)
    )
    analysts = [n for n, r in service.registry.principals() if r == "analyst"]
    names = [d.name for d in service.registry.datasets()]
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
        "<th>per-unit bounds</th></tr>"
        + datasets
        + "</table>"
        + _dataset_sections(service, who)
        + """<h2>Register a dataset</h2>
<form id="register" class="card" method="post" action="/dashboard/datasets">
<label>Name <input name="name" required></label>
<label>Source (under the data root) <input name="source" required></label>
<label>Privacy unit <input name="privacy_unit" required></label><br>
<label>Schema (col=kind,…) <input name="schema" size="40"></label>
<label>Max rows per unit <input name="max_rows" value="1" size="4"></label>
<label>Max groups per unit <input name="max_groups" size="4" placeholder="none"></label><br>
<span>Budget:</span> """
        + _loss_inputs("1")
        + """
<label class="wide">Column bounds, one per line (public: declared, never read from the data)
<textarea name="column_bounds" rows="3" placeholder="wage = [0, 3000]"></textarea></label>
<label class="wide">Key sets, one per line (a GROUP BY on these columns uses them)
<textarea name="column_keys" rows="2" placeholder='dept = ["R&amp;D", "Sales"]'></textarea>
</label>
<button type="submit">Register</button></form>
<h2>Set an allowance</h2>
<form id="allowance" class="card" method="post" action="/dashboard/allowance">
<label>Dataset <input name="dataset" required list="dataset-names"></label>
<label>Analyst <input name="analyst" required list="analysts"></label><br>
<span>Allowance:</span> """
        + _loss_inputs()
        + """
<button type="submit">Save</button></form>
<h2>Change a dataset's budget</h2>
<form id="budget" class="card" method="post" action="/dashboard/budget">
<label>Dataset <input name="dataset" required list="dataset-names"></label><br>
<span>Total budget:</span> """
        + _loss_inputs()
        + """
<button type="submit">Save</button></form>
<datalist id="analysts">"""
        + "".join(f'<option value="{_e(a)}">' for a in analysts)
        + '</datalist><datalist id="dataset-names">'
        + "".join(f'<option value="{_e(n)}">' for n in names)
        + "</datalist><h2>Recent receipts</h2>"
        + _receipts(service, who)
    )
    return _page("dpkit — privacy officer", body, who)


def _number(value: Any) -> str:
    """A released number as people read it: ``101``, ``52.3761``, ``1.5e+12``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        if 1e-4 <= abs(value) < 1e9:
            return f"{value:.4f}".rstrip("0").rstrip(".")
        return f"{value:.6g}"
    return str(value)


def _column_texts(
    rows: Sequence[Mapping[str, Any]], column: str
) -> tuple[list[str], list[str], list[str]]:
    """A released column's values and interval ends as the command line prints them: as many
    decimals as the error bars' first digit needs, one style for the column (none for whole
    numbers such as counts)."""

    def number(value: Any) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok else math.nan

    values = [number(row.get(column)) for row in rows]
    lows = [number(row.get(f"{column}_low")) for row in rows]
    highs = [number(row.get(f"{column}_high")) for row in rows]
    halves = [(h - lo) / 2 for lo, h in zip(lows, highs, strict=True)]
    integral = all(not math.isfinite(v) or v.is_integer() for v in (*values, *lows, *highs))
    decimals = column_decimals(values, halves, integral)
    return tuple(format_column(part, decimals) for part in (values, lows, highs))  # type: ignore[return-value]


def _halfwidth(value: Any) -> str:
    """An error bar to two significant digits (``±10``, ``±0.52``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return _number(value)
    if value <= 0:
        return "0"
    return format_column([float(value)], column_decimals([value], [value], False))[0]


def _level(alpha: Any) -> str:
    """An interval's confidence level, ``95%`` for α = 0.05."""
    return f"{1 - float(alpha if alpha is not None else 0.05):.0%}"


def _result_table(
    name: str,
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    accuracy: Mapping[str, Mapping[str, Any]],
) -> str:
    """A released table: each value with its interval (``[low, high]``) beside it."""
    present = set(columns)
    valued = [c for c in columns if f"{c}_low" in present and f"{c}_high" in present]
    hidden = {f"{c}_{end}" for c in valued for end in ("low", "high")}
    shown = [c for c in columns if c not in hidden]
    head = []
    for column in shown:
        head.append(f"<th>{_e(column)}</th>")
        if column in valued:
            level = _level(accuracy.get(column, {}).get("alpha"))
            head.append(f"<th>{_e(level)} interval</th>")
    texts = {column: _column_texts(rows, column) for column in valued}
    body = []
    for index, row in enumerate(rows):
        cells = []
        for column in shown:
            if column in valued:
                value, low, high = (texts[column][part][index] for part in range(3))
                cells.append(f'<td class="value">{_e(value)}</td>')
                cells.append(f'<td class="interval">[{_e(low)}, {_e(high)}]</td>')
            else:
                cells.append(f'<td class="value">{_e(_number(row.get(column)))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    title = "" if name == "main" else f"<h3>{_e(name)}</h3>"
    return (
        f'{title}<table class="result" id="result-{_e(name)}"><tr>{"".join(head)}</tr>'
        + "".join(body)
        + "</table>"
    )


def _answer_section(answer: Mapping[str, Any]) -> str:
    """The answer of a query: its tables with intervals, how each value was released, what
    it cost, the receipt and the allowance left."""
    tables = "".join(
        _result_table(name, answer["columns"].get(name, []), rows, answer["accuracy"])
        for name, rows in answer["tables"].items()
    )
    how = "".join(
        f"<li><code>{_e(name)}</code>: {_e(a.get('mechanism', ''))}, ±"
        f"{_e(_halfwidth(a.get('halfwidth')))} at {_e(_level(a.get('alpha')))}"
        f"{_e(' — ' + a['note'] if a.get('note') else '')}</li>"
        for name, a in answer["accuracy"].items()
    )
    receipt = answer["receipt"]
    return (
        '<section id="answer"><h2>Answer</h2>'
        + tables
        + (f'<ul class="hint">{how}</ul>' if how else "")
        + f'<p class="cost" id="cost">Cost <b>{_e(answer["loss"].get("text", ""))}</b> · '
        f"receipt <code>{_e(receipt['receipt'])}</code> · allowance left "
        f"<b>{_e(answer['remaining'].get('text', '—'))}</b></p></section>"
    )


def _query_form(service: Service, who: Principal, asked: Mapping[str, str]) -> str:
    names = [r.name for r in service.visible_datasets(who)]
    chosen = asked.get("dataset", names[0] if names else "")
    options = "".join(
        f'<option value="{_e(n)}"{" selected" if n == chosen else ""}>{_e(n)}</option>'
        for n in names
    )
    return (
        '<h2>Ask a query</h2><form id="query" class="card" method="post" '
        'action="/dashboard/query">'
        f'<label>Dataset <select name="dataset">{options}</select></label><br>'
        '<label class="wide">SQL <textarea name="sql" rows="3" required '
        'placeholder="SELECT dept, COUNT(*), AVG(wage) FROM payroll GROUP BY dept">'
        f"{_e(asked.get('sql', ''))}</textarea></label>"
        '<p class="hint">Aggregates without bounds (<code>AVG(wage)</code>) use the '
        "column's registered bounds; a GROUP BY on columns with registered keys uses them. "
        "Refused queries cost nothing.</p><span>Spend:</span> "
        + _loss_inputs(asked.get("epsilon", "0.1"), asked.get("delta", ""), asked.get("rho", ""))
        + '<button type="submit" name="action" value="run">Run</button> '
        '<button type="submit" name="action" value="preview" class="secondary">'
        "Preview the plan and cost (free)</button></form>"
    )


def _preview_section(preview: Preview) -> str:
    """A query's plan and cost before anything is spent (``Service.preview``)."""
    fits = (
        "fits in your allowance"
        if preview.fits
        else "does <b>not</b> fit in your allowance: running it would be refused"
    )
    return (
        '<section id="preview"><h2>Preview (nothing spent)</h2>'
        f'<pre class="plan">{_e(preview.plan)}</pre>'
        f'<p class="cost">Running it would cost <b>{_e(loss_json(preview.charge)["text"])}</b>, '
        f"which {fits} (left: <b>{_e(loss_json(preview.remaining).get('text', '—'))}</b>).</p>"
        "</section>"
    )


def _analyst_page(
    service: Service,
    who: Principal,
    message: str,
    asked: Mapping[str, str] | None = None,
    answer: Mapping[str, Any] | None = None,
    preview: Preview | None = None,
) -> HTMLResponse:
    body = (
        (f'<p class="msg">{_e(message)}</p>' if message else "")
        + "<h2>Your datasets</h2>"
        + _dataset_sections(service, who)
        + _query_form(service, who, asked or {})
        + (_preview_section(preview) if preview is not None else "")
        + (_answer_section(answer) if answer is not None else "")
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


def _loss(epsilon: str, delta: str, rho: str, what: str) -> Any:
    """The loss of a form's ε, δ and ρ fields (empty fields are not given)."""
    if rho.strip() and (epsilon.strip() or delta.strip()):
        raise InvalidParameterError(
            what,
            f"ε={epsilon.strip() or '—'}, δ={delta.strip() or '—'}, ρ={rho.strip()}",
            "either ε (with an optional δ) or ρ, not both",
        )
    return loss_from_parts(
        epsilon.strip() or None, delta.strip() or None, rho.strip() or None, what
    )


def _assignments(text: str, what: str) -> dict[str, Any]:
    """``column = value`` lines, as a metadata file writes them (``wage = [0, 3000]``, ``dept
    = ["a", "b"]``), read as TOML."""
    import tomllib

    try:
        found = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InvalidParameterError(
            what,
            text[:80],
            'one line per column, e.g. wage = [0, 3000] or dept = ["a", "b"]',
            f"({error})",
        ) from None
    return found


_REFUSED = (DPError, LedgerError, PermissionDeniedError, NotFoundError, ValueError)


def _public_reason(exc: BaseException) -> str:
    """A refusal as the API words it: dpkit's and the service's own messages (which never
    quote data); any other error by its class only."""
    if isinstance(exc, DPError | LedgerError | NotFoundError | PermissionDeniedError):
        return str(exc)[:1000]
    return type(exc).__name__


@router.post("/dashboard/datasets")
def register_form(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    name: Annotated[str, Form(max_length=64)],
    source: Annotated[str, Form(max_length=1024)],
    privacy_unit: Annotated[str, Form(max_length=64)],
    epsilon: Annotated[str, Form(max_length=32)] = "",
    delta: Annotated[str, Form(max_length=32)] = "",
    rho: Annotated[str, Form(max_length=32)] = "",
    schema_spec: Annotated[str, Form(max_length=4000, alias="schema")] = "",
    max_rows: Annotated[int, Form(ge=1, le=1_000_000)] = 1,
    max_groups: Annotated[str, Form(max_length=8)] = "",
    column_bounds: Annotated[str, Form(max_length=20_000)] = "",
    column_keys: Annotated[str, Form(max_length=200_000)] = "",
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
        bounds: dict[str, Any] = {
            "max_rows": max_rows,
            "columns": _assignments(column_bounds, "column bounds"),
            "keys": _assignments(column_keys, "key sets"),
        }
        if max_groups.strip():
            bounds["max_groups"] = int(max_groups)
        service.register_dataset(
            who,
            name,
            source,
            privacy_unit,
            declared,
            bounds,
            _loss(epsilon, delta, rho, "budget"),
        )
    except _REFUSED as exc:
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
    epsilon: Annotated[str, Form(max_length=32)] = "",
    delta: Annotated[str, Form(max_length=32)] = "",
    rho: Annotated[str, Form(max_length=32)] = "",
) -> Response:
    who = _who(request, service)
    if who is None:
        return RedirectResponse("/login", status_code=303)
    try:
        total = _loss(epsilon, delta, rho, "total")
        service.set_allowance(who, dataset, analyst, total)
    except _REFUSED as exc:
        return _done(f"Refused: {exc}")
    return _done(f"Allowance of {analyst} on {dataset} set to {total}.")


@router.post("/dashboard/budget")
def budget_form(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    dataset: Annotated[str, Form(max_length=64)],
    epsilon: Annotated[str, Form(max_length=32)] = "",
    delta: Annotated[str, Form(max_length=32)] = "",
    rho: Annotated[str, Form(max_length=32)] = "",
) -> Response:
    """A dataset's total budget (never below its spend: the ledger refuses)."""
    who = _who(request, service)
    if who is None:
        return RedirectResponse("/login", status_code=303)
    try:
        total = _loss(epsilon, delta, rho, "total")
        service.adjust_dataset_budget(who, dataset, total)
    except _REFUSED as exc:
        return _done(f"Refused: {exc}")
    return _done(f"Budget of {dataset} set to {total}.")


@router.post("/dashboard/query", response_class=HTMLResponse)
def query_form(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    dataset: Annotated[str, Form(max_length=64)],
    sql: Annotated[str, Form(max_length=10_000)],
    epsilon: Annotated[str, Form(max_length=32)] = "",
    delta: Annotated[str, Form(max_length=32)] = "",
    rho: Annotated[str, Form(max_length=32)] = "",
    action: Annotated[str, Form(max_length=16)] = "run",
) -> Response:
    """Answer SQL text as the API's ``POST /api/v1/query`` does (same checks, ledger and
    audit record), and show the answer with its intervals, cost and receipt; or, with
    ``action=preview``, show its plan and cost as ``POST /api/v1/preview`` does (free)."""
    from pydantic import ValidationError

    from dpkit.service import _schemas as w

    # the API's answer (its checks, ledger and audit record), which the app hands over:
    # dpkit.service._app includes this router, so importing it here would be a cycle
    answer_query = request.app.state.answer_query
    who = _who(request, service)
    if who is None:
        return RedirectResponse("/login", status_code=303)
    asked = {"dataset": dataset, "sql": sql, "epsilon": epsilon, "delta": delta, "rho": rho}
    if who.role != "analyst":
        return _done("Queries are asked by analysts; an officer's token cannot spend.")
    try:
        if action not in ("run", "preview"):  # only an explicit run spends
            raise InvalidParameterError("action", action, "'run' or 'preview'")
        body = w.QueryIn(
            dataset=dataset,
            sql=sql,
            loss=w.LossIn(
                epsilon=epsilon.strip() or None,
                delta=delta.strip() or None,
                rho=rho.strip() or None,
            ),
        )
        if action == "preview":
            loss = loss_from_parts(
                epsilon.strip() or None, delta.strip() or None, rho.strip() or None, "loss"
            )
            found = service.preview(who, dataset, loss, sql=sql)
            return _analyst_page(service, who, "", asked, preview=found)
        answer = json.loads(answer_query(service, who, body))
    except FailedAfterReservationError as exc:
        message = (
            f"The query failed after its loss was reserved ({exc.cause}); the charge "
            f"{exc.loss} stays (reservation {exc.reservation_id})."
        )
        return _analyst_page(service, who, message, asked)
    except Exception as exc:  # a refusal: nothing was reserved
        if isinstance(exc, ValidationError):  # the form's own fields, e.g. ε = "abc"
            reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        else:
            reason = _public_reason(exc)
        return _analyst_page(service, who, f"Refused (nothing spent): {reason}", asked)
    return _analyst_page(service, who, "", asked, answer)
