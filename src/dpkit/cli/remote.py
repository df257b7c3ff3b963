"""``dpkit query --server URL --token TOKEN``: the same query, answered by a dpkit service.

The command checks what it can locally (the loss, α, δ, the SQL syntax, the keys) exactly as the
local command does, sends the query through :class:`dpkit.client.Client`, and prints the answer
with the local renderer (:func:`dpkit.analytics._render.render_release`): the same estimates, error
bars, post-processing notes, loss and receipt. The per-person bounds are the ones the privacy
officer registered with the dataset (printed with the answer); the analyst cannot change them,
so ``--max-rows`` and friends are refused rather than silently ignored.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpkit.cli._common import CLIError, check_key_columns, out_console, parse_keys

if TYPE_CHECKING:
    from dpkit.client import Answer, Client
    from dpkit.core._losses import PrivacyLoss

__all__ = ["loss_from_json", "query_remote", "release_from_answer"]

TOKEN_ENV = "DPKIT_TOKEN"


def loss_from_json(data: Mapping[str, Any] | None) -> PrivacyLoss | None:
    """The exact privacy loss of a service's loss JSON (``exact`` fractions; else the floats)."""
    from dpkit.core._losses import ZCDP, ApproxDP, PureDP

    if not data:
        return None
    exact = dict(data.get("exact") or {})

    def number(name: str) -> Fraction:
        text = exact.get(name)
        return Fraction(str(text)) if text is not None else Fraction(repr(float(data[name])))

    kind = data.get("kind")
    if kind == "pure":
        return PureDP(number("epsilon"))
    if kind == "approx":
        return ApproxDP(number("epsilon"), number("delta"))
    if kind == "zcdp":
        return ZCDP(number("rho"))
    return None


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def release_from_answer(answer: Answer) -> Any:
    """A :class:`~dpkit.analytics.TableRelease` holding the service's answer (for printing)."""
    import pandas as pd  # type: ignore[import-untyped]

    from dpkit.analytics._results import Accuracy, TableRelease

    tables = {
        name: pd.DataFrame(rows, columns=answer.columns.get(name) or None)
        for name, rows in answer.tables.items()
    }
    accuracy = {
        name: Accuracy(
            kind=a.get("kind", "exact"),
            halfwidth=_number(a.get("halfwidth")),
            alpha=float(a.get("alpha", 0.05)),
            mechanism=str(a.get("mechanism", "")),
            loss=loss_from_json(a.get("loss")),  # type: ignore[arg-type]
            expected_abs=None if a.get("expected_abs") is None else float(a["expected_abs"]),
            note=str(a.get("note", "")),
        )
        for name, a in answer.accuracy.items()
    }
    return TableRelease(
        tables,
        accuracy,
        loss_from_json(answer.loss),  # type: ignore[arg-type]
        answer.receipt.get("receipt"),
        loss_from_json(answer.remaining),
    )


def _bound_notes(bounds: Mapping[str, Any], private_keys: bool, joined: bool = False) -> list[str]:
    contribution = dict(bounds.get("contribution") or {})
    parts = []
    if contribution.get("max_rows") is not None:
        parts.append(f"at most {contribution['max_rows']} row(s) per person")
    if contribution.get("max_groups") is not None:
        parts.append(f"in at most {contribution['max_groups']} group(s)")
    if contribution.get("max_rows_per_group") is not None:
        parts.append(f"at most {contribution['max_rows_per_group']} row(s) per group")
    notes = [
        "bound applied (registered with the dataset by its privacy officer): "
        + (", ".join(parts) or "the service's default")
        + ". Rows beyond the bound were dropped, so counts and sums undercount for people "
        "with more rows."
    ]
    if joined:
        notes[0] += (
            " Over several tables the bound applies per person after the joins: a person's "
            "rows are the rows of the joined relation that reach them through the links."
        )
    if private_keys:
        notes.append(
            "groups were found privately: groups with few people are suppressed, so a group "
            "missing here may exist."
        )
    return notes


def _refused(error: Any, server: str) -> CLIError:
    """A service refusal as one readable line and a hint (nothing is charged by a refusal)."""
    status, kind, detail = error.status, error.kind, error.detail
    if status == 0:
        return CLIError(
            f"could not reach the dpkit service at {server} ({detail})",
            "Check --server (e.g. http://127.0.0.1:8000) and that `dpkit serve` is running.",
            code=1,
        )
    if status == 401:
        return CLIError(
            f"the service at {server} refused the token: {detail}",
            f"Ask the privacy officer for a token; pass it with --token or ${TOKEN_ENV}.",
        )
    if status == 503:
        return CLIError(
            f"the service's database is unavailable: {detail}",
            "Nothing was charged or recorded. Retry shortly.",
            code=1,
        )
    hints = {
        "budget_exceeded": "Nothing was charged. Spend less (a smaller --epsilon) or ask the "
        "privacy officer to raise your allowance.",
        "forbidden": "Queries need an analyst's token.",
        "not_found": "`dpkit query --server URL --token T` answers only datasets you hold an "
        "allowance on; ask the privacy officer.",
    }
    return CLIError(
        f"the service refused the query ({status} {kind}): {detail}",
        hints.get(kind, "Nothing was charged: a refused query is never charged."),
    )


def _dataset_info(client: Client, name: str, server: str) -> dict[str, Any]:
    from dpkit.client import ServiceError

    try:
        visible = client.datasets()
    except ServiceError as error:
        raise _refused(error, server) from None
    for info in visible:
        if info.get("name") == name:
            return info
    known = ", ".join(sorted(str(d.get("name")) for d in visible)) or "none"
    raise CLIError(
        f"no dataset {name!r} that you may query on {server}",
        f"Datasets you hold an allowance on: {known}. The privacy officer registers datasets "
        "and sets allowances.",
    )


_BOUNDS_HELP = (
    "dpkit never reads them from the data: declare the clamping bounds in the query, or ask "
    "the privacy officer to register them with the dataset (the service then applies them)."
)


def query_remote(
    *,
    server: str,
    token: str | None,
    name: str,
    query: str,
    query_loss: PrivacyLoss,
    keys: Sequence[str],
    alpha: float,
    timeout: float = 60.0,
    http: Any = None,
) -> None:
    """Answer ``query`` on the service's dataset ``name`` and print it like the local command.

    ``query_loss`` was checked by the caller (floors, δ); ``http`` is an optional ``httpx``
    client to send through (tests).
    """
    from dpkit.analytics._querytext import parse_query, query_schema
    from dpkit.analytics._render import render_release
    from dpkit.client import Client, ServiceError
    from dpkit.core._losses import ZCDP, ApproxDP
    from dpkit.errors import DPError

    if not token:
        raise CLIError(
            "give --token TOKEN (or set $DPKIT_TOKEN): the analyst token the privacy officer "
            "issued",
            "Keep tokens out of shell history: export DPKIT_TOKEN=... once per shell.",
        )
    if not server.startswith(("http://", "https://")):
        raise CLIError(
            f"--server {server!r} is not an http(s) URL", "e.g. --server http://127.0.0.1:8000"
        )
    client = Client(server, token, timeout=timeout, http=http)
    try:
        info = _dataset_info(client, name, server)
        unit = str(info.get("privacy_unit", ""))
        several = bool(info.get("tables"))
        registered = {  # AVG(wage) clamps to the bounds the officer registered for wage
            str(c): (v[0], v[1])
            for c, v in dict(dict(info.get("bounds") or {}).get("columns") or {}).items()
        }
        parsed = parse_query(
            query,
            unit.partition(".")[2] if several else unit,
            relations=several,  # the tables of the dataset are named by the query (FROM, JOIN)
            bounds=registered,
            bounds_help=_BOUNDS_HELP,
        )
        if not several and parsed.source is not None and parsed.source != name:
            raise CLIError(
                f"FROM {parsed.source}: the query may only read the dataset {name!r}",
                f"Leave FROM out, or write FROM {name}.",
            )
        if parsed.group_by and not keys and not isinstance(query_loss, ApproxDP | ZCDP):
            raise CLIError(
                "GROUP BY without --keys finds the groups privately, which needs δ > 0",
                "Give the public keys (--keys col=a,b,c) or a small --delta (e.g. 1e-7).",
            )
        check_key_columns(parsed.group_by, list(keys))
        schema = dict(info.get("schema") or {})
        if several:  # declared as table.column; a query may name the column bare
            schema.update({k.partition(".")[2]: v for k, v in list(schema.items())})
        with contextlib.suppress(DPError):  # a GROUP BY expression's keys read as its kind
            schema = query_schema(parsed, schema)
        key_values = parse_keys(list(keys), schema)
        if key_values:
            missing = [k for k in parsed.group_by if k not in key_values]
            if missing:
                raise CLIError(
                    f"--keys is missing {', '.join(missing)}",
                    "Give --keys for every GROUP BY column, or none.",
                )
        parts = {k: str(v) for k, v in _loss_parts(query_loss).items()}
        try:
            answer = client.query(
                name,
                query,
                keys=key_values or None,
                alpha=alpha,
                epsilon=parts.get("epsilon"),
                delta=parts.get("delta"),
                rho=parts.get("rho"),
            )
        except ServiceError as error:
            raise _refused(error, server) from None
    finally:
        if http is None:
            client.close()

    release = release_from_answer(answer)
    console = out_console()
    console.print(f"query: {query}", markup=False)
    render_release(
        release,
        console,
        f"dataset {name} (dpkit service {server})",
        aggregations=parsed.aggregations,
        footnotes=_bound_notes(
            dict(info.get("bounds") or {}), bool(parsed.group_by) and not key_values, several
        ),
        ledger=None,
        keys=parsed.group_by,
    )
    console.print(f"service: {server} (the receipt is in its ledger)", markup=False)


def _loss_parts(loss: PrivacyLoss) -> dict[str, Fraction]:
    from dpkit.core._losses import ApproxDP, PureDP

    if isinstance(loss, PureDP):
        return {"epsilon": loss.epsilon}
    if isinstance(loss, ApproxDP):
        return {"epsilon": loss.epsilon, "delta": loss.delta}
    return {"rho": loss.rho}
