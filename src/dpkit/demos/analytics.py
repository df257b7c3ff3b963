"""The payroll section of ``dpkit demo``: a synthetic payroll analysed through a Session.

The table is generated deterministically from public parameters (no randomness, no real
people): employees in departments, twelve monthly payslips each, salaries on a *polarised* pay
scale — two company-wide pay grades, 2,500-3,000 and 16,000-17,500 a month, nobody in between
(a December bonus lifts the high grade). It is analysed end to end: contribution bounding by
employee, public and private group keys, means, quantiles and a histogram, and a pay bill whose
per-payslip values are *declared* to lie in the two grades, so the planner can pick the ladder
mechanism (it adds less noise than Laplace or the staircase when the values have a wide gap);
every charge is recorded in a SQLite ledger in a temporary directory.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env
from rich.console import Console

from dpkit.analytics._expr import col
from dpkit.analytics._query import (
    count,
    count_distinct_units,
    histogram,
    mean,
    median,
    quantile,
)
from dpkit.analytics._query import sum as dp_sum
from dpkit.analytics._session import Session
from dpkit.core._losses import ApproxDP
from dpkit.ledger import BudgetMonitor, Ledger

__all__ = ["DEPARTMENTS", "GAP_NOTE", "PAY_GRADES", "payroll_demo", "payroll_table"]

DEPARTMENTS = ("Engineering", "Sales", "Operations", "Finance", "Support", "Legal")
_TITLES = ("Associate", "Analyst", "Specialist", "Manager", "Director")
# share of staff on the high pay grade, per department
_HIGH_SHARE = {
    "Engineering": 0.45,
    "Sales": 0.25,
    "Operations": 0.10,
    "Finance": 0.30,
    "Support": 0.05,
    "Legal": 0.40,
}
PAY_GRADES = ((2_500, 3_000), (16_000, 17_500))
"""The two monthly pay grades (public: a collective agreement); December pays the high grade
a 40% bonus."""


GAP_NOTE = (
    "a median can land in the empty gap between the two grades (3,000-16,000): no payslip lies "
    "there, so every point of the gap has the same rank, and where a department's true median "
    "sits at the edge of a grade (Engineering, Finance and Legal pay 30-45% of their staff on "
    "the high grade) the exponential mechanism spreads its choice over the whole gap. Its "
    "guarantee is about rank — the value is within the printed number of payslips of the "
    "middle one — not about distance in dollars; the means are the better summary here."
)
"""Printed under the per-department table: why a median may sit where no salary is."""


def _uniforms(label: str, n: int) -> np.ndarray:
    """n numbers in [0, 1) from SHA-256 of public labels: deterministic, not random."""
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        digest = hashlib.sha256(f"dpkit-payroll:{label}:{i}".encode()).digest()
        out[i] = int.from_bytes(digest[:7], "big") / 2.0**56
    return out


def payroll_table(employees: int = 1200) -> pd.DataFrame:
    """Monthly payslips: employee_id, department, title, month, salary (monthly, in dollars)."""
    u_dept, u_band, u_pay, u_title = (
        _uniforms(x, employees) for x in ("dept", "band", "pay", "title")
    )
    weights = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
    dept_index = np.searchsorted(np.cumsum(weights), u_dept, side="right")
    rows = []
    for e in range(employees):
        department = DEPARTMENTS[min(int(dept_index[e]), len(DEPARTMENTS) - 1)]
        on_high = u_band[e] < _HIGH_SHARE[department]
        low, high = PAY_GRADES[1 if on_high else 0]
        monthly = low + (high - low) * u_pay[e]
        title = _TITLES[
            min(
                int(u_title[e] * (2 if not on_high else 3)) + (2 if on_high else 0),
                len(_TITLES) - 1,
            )
        ]
        months = 12 if e % 10 else 6  # one in ten joined mid-year
        for m in range(12 - months + 1, 13):
            bonus = 1.4 if (m == 12 and on_high) else 1.0
            rows.append((e + 1, department, title, m, round(monthly * bonus, 2)))
    return pd.DataFrame(rows, columns=["employee_id", "department", "title", "month", "salary"])


def payroll_demo(console: Console | None = None) -> None:
    """Analyse the synthetic payroll through a Session with a SQLite ledger, and print it."""
    from dpkit._format import format_loss
    from dpkit.analytics._render import print_alerts, render_release

    console = console or Console()
    table = payroll_table()
    console.rule("[bold]Payroll analytics: a Session over a synthetic payroll")
    console.print(
        f"{len(table):,} monthly payslips of {table['employee_id'].nunique():,} employees in "
        f"{len(DEPARTMENTS)} departments; salaries on a polarised pay scale (two grades, "
        "2,500-3,000 and 16,000-17,500 a month). The privacy unit is the employee: at most 12 "
        "payslips each count (bounded by dpkit, never read from the data). Budget: ε = 5, "
        "δ = 1e-6, kept in a SQLite ledger."
    )
    with tempfile.TemporaryDirectory() as tmp:
        alerts: list[Any] = []
        ledger = Ledger.open(
            str(Path(tmp) / "ledger.db"),
            monitor=BudgetMonitor(log=False, callbacks=[alerts.append]),
        )
        # the privacy officer's act: a budget belongs to a dataset someone created
        ledger.create_budget("payroll", ApproxDP(5, 1e-6), privacy_unit="employee_id")

        def show_alerts() -> None:
            print_alerts(alerts, console)
            alerts.clear()

        session = Session(
            table,
            privacy_unit="employee_id",
            budget=ApproxDP(5, 1e-6),
            ledger=ledger,
            dataset="payroll",
            max_rows=12,
        )
        # an employee works in one department: max_groups=1 says so (a privacy decision,
        # enforced by dpkit), so one employee moves one department's numbers, not all six
        by_dept = (
            session.query()
            .filter(col("month") >= 1)
            .group_by("department", keys=list(DEPARTMENTS))
            .bound(max_groups=1)
            .agg(
                count_distinct_units("employees"),
                mean("salary", (0, 25_000), "mean_monthly"),
                median("salary", (0, 25_000), "median_monthly"),
            )
        )
        release = session.evaluate(by_dept, epsilon=1)
        render_release(
            release,
            console,
            "Per department (public keys, one department per employee: max_groups=1), ε = 1",
            aggregations=by_dept,
            keys=("department",),
            footnotes=[GAP_NOTE],
        )
        show_alerts()

        bands = session.query().agg(
            count("payslips"),
            quantile("salary", 0.9, (0, 25_000), "p90_monthly"),
            histogram(
                "salary", [0, 2_500, 5_000, 7_500, 10_000, 12_500, 15_000, 25_000], "pay_bands"
            ),
        )
        release = session.evaluate(bands, epsilon=1)
        render_release(release, console, "Whole company, ε = 1", aggregations=bands)
        show_alerts()

        grades = [(float(lo), float(hi)) for lo, hi in PAY_GRADES]
        pay_bill = (
            session.query()
            .filter(col("month") == 11)
            .group_by("department", keys=list(DEPARTMENTS))
            .bound(max_rows=1)
            .agg(dp_sum("salary", values=grades, name="november_pay_bill"))
        )
        release = session.evaluate(pay_bill, epsilon=2)
        render_release(
            release,
            console,
            "November pay bill per department (one payslip per employee, values declared in "
            "the two grades), ε = 2",
            aggregations=pay_bill,
            keys=("department",),
        )
        show_alerts()
        chosen = release.accuracy["november_pay_bill"]
        console.print(
            f"mechanism chosen for the pay bill: [bold]{chosen.mechanism}[/bold] — {chosen.note}"
        )

        titles = (
            session.query().group_by("title", max_groups=1).agg(count_distinct_units("employees"))
        )
        release = session.evaluate(titles, epsilon=0.5, delta=1e-7)
        render_release(
            release,
            console,
            "Job titles found privately (partition selection), ε = 0.5, δ = 1e-7",
            aggregations=titles,
            keys=("title",),
            footnotes=["groups with few people are suppressed (partition selection)."],
        )
        show_alerts()

        console.print(
            "[bold]Ledger[/bold]: every query reserved its loss before reading data "
            "and committed a receipt after."
        )
        for entry in ledger.history("payroll"):
            if entry.kind in ("commit", "create"):
                console.print(f"  {entry.kind:<7} {format_loss(entry.loss)}  {entry.receipt or ''}")
        console.print(f"budget left for 'payroll': [bold]{format_loss(session.remaining)}[/bold]")
        session.close()
        ledger.close()
