"""The service's wire schemas (pydantic), kept apart from dpkit's domain types.

Numbers of a privacy loss may be sent as JSON numbers or as decimal strings ("0.01"); both are
read exactly (a float is read as the decimal it prints as). Every number field is strict: a JSON
``true``/``false`` is not a number (pydantic would read it as 1/0), and a text must be an ASCII
decimal, fraction or scientific number (:func:`dpkit._exact.fraction_of`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

__all__ = [
    "AllowanceIn",
    "AuditOut",
    "BudgetOut",
    "DatasetIn",
    "DatasetOut",
    "ErrorOut",
    "LossIn",
    "MeOut",
    "PrincipalIn",
    "QueryIn",
    "QueryOut",
    "ReceiptOut",
    "TokenIn",
    "TokenOut",
]

Number = StrictInt | StrictFloat
"""A JSON number (never a bool)."""
Num = StrictInt | StrictFloat | StrictStr
"""A JSON number or a decimal text (never a bool)."""
Name = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$")
Column = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LossIn(_Strict):
    """ε (with optional δ), or ρ (zCDP)."""

    epsilon: Num | None = None
    delta: Num | None = None
    rho: Num | None = None


class Bounds(_Strict):
    max_rows: StrictInt | None = Field(default=1, ge=1, le=1_000_000)
    max_groups: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    max_rows_per_group: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    max_per_key: StrictInt | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Several tables: rows per join key on each side of a join of private tables "
        "on keys of different people (a truncated join); without it such joins are refused.",
    )
    columns: dict[str, tuple[Number, Number]] = Field(
        default_factory=dict, description="Declared value bounds per numeric column."
    )
    keys: dict[str, list[StrictStr | StrictInt | StrictFloat | bool]] = Field(
        default_factory=dict,
        max_length=256,
        description="Public key sets per column, {'dept': ['R&D', 'Sales']}: a GROUP BY "
        "without 'keys' whose columns all have one groups on their product (no δ spent on "
        "choosing groups). Declared, never read from the data.",
    )


class DatasetIn(_Strict):
    name: str = Name
    source: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="A .csv/.parquet path under the data root (one table; or give 'tables').",
    )
    privacy_unit: str = Field(
        min_length=1,
        max_length=129,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$",
        description="The unit's column; over several tables 'table.column'.",
    )
    tables: dict[str, str] | None = Field(
        default=None,
        max_length=16,
        description="Several tables: the private ones, {name: path under the data root}.",
    )
    public: dict[str, str] | None = Field(
        default=None, max_length=16, description="Public tables, {name: path} (with 'tables')."
    )
    links: dict[str, str] | None = Field(
        default=None,
        max_length=16,
        description="Foreign keys {'child.column': 'parent.column'} (with 'tables').",
    )
    schema_: dict[str, Literal["numeric", "text", "bool", "temporal"]] = Field(
        default_factory=dict, alias="schema"
    )
    bounds: Bounds = Field(default_factory=Bounds)
    budget: LossIn
    description: str = Field(default="", max_length=500)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class BudgetOut(BaseModel):
    dataset: str
    analyst: str | None
    total: dict[str, Any]
    spent: dict[str, Any]
    remaining: dict[str, Any]
    used: float
    charges: int


class DatasetOut(BaseModel):
    name: str
    privacy_unit: str
    schema_: dict[str, str] = Field(
        alias="schema",
        description="Every column's kind (numeric, text, bool, temporal), from the files' "
        "metadata and the declared schema; never from values.",
    )
    bounds: dict[str, Any]
    columns: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Each column's kind and registered bounds and key set, e.g. "
        "{'wage': {'kind': 'numeric', 'bounds': [0, 3000]}, "
        "'dept': {'kind': 'text', 'keys': ['R&D', 'Sales']}}.",
    )
    description: str
    budget: BudgetOut | None = None
    source: str | None = Field(default=None, description="Officers only.")
    tables: dict[str, Any] | None = Field(
        default=None,
        description="Several tables: 'private' and 'public' table names (officers: their "
        "paths) and 'links'.",
    )

    model_config = ConfigDict(populate_by_name=True)


class PrincipalIn(_Strict):
    name: str = Name
    role: Literal["officer", "analyst"] = "analyst"
    expires_in_days: Number | None = Field(
        default=None,
        gt=0,
        le=3650,
        description="The first token's lifetime (default: the server's, 90 days).",
    )


class TokenIn(_Strict):
    expires_in_days: Number | None = Field(
        default=None,
        gt=0,
        le=3650,
        description="The token's lifetime (default: the server's, 90 days).",
    )


class TokenOut(BaseModel):
    token_id: str
    principal: str
    token: str = Field(description="Shown once; only its SHA-256 is stored.")
    expires_at: float = Field(description="When the token stops working (Unix time).")


class AllowanceIn(_Strict):
    total: LossIn
    reason: str = Field(default="", max_length=500)


class QueryIn(_Strict):
    dataset: str = Name
    sql: str | None = Field(default=None, max_length=10_000)
    query: dict[str, Any] | None = Field(
        default=None,
        description=(
            "The query model: {aggregations: [{op, column?, lower?, upper?, q?, edges?, name?}],"
            " where?: text, group_by?: [columns]}"
        ),
    )
    keys: dict[str, list[str | float | int | bool]] | None = None
    loss: LossIn
    alpha: Number = Field(default=0.05, gt=0, lt=1)


class ReceiptOut(BaseModel):
    receipt: str
    reservation_id: int
    dataset: str
    analyst: str | None
    loss: dict[str, Any]
    timestamp: float


class PreviewOut(BaseModel):
    plan: str
    loss: dict[str, Any]
    remaining: dict[str, Any]
    fits: bool


class QueryOut(BaseModel):
    tables: dict[str, list[dict[str, Any]]]
    columns: dict[str, list[str]] = {}
    accuracy: dict[str, dict[str, Any]]
    loss: dict[str, Any]
    receipt: ReceiptOut
    remaining: dict[str, Any]


class MeOut(BaseModel):
    name: str
    role: str
    budgets: list[BudgetOut]


class AuditOut(BaseModel):
    id: int
    timestamp: float
    actor: str
    role: str
    action: str
    dataset: str
    outcome: str
    detail: dict[str, Any]


class ErrorOut(BaseModel):
    error: str
    detail: str
