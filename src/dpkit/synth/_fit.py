"""``dpkit.synth.fit``: one ledger release that measures, then a model that samples records.

The fit is ONE release through :func:`dpkit._door.release`: everything decidable from public
inputs (the domain, the table's column names, the budget, the size limit, and the whole pipeline
run on an empty table) is checked before the reservation, a refusal charges nothing; then the
ledger reserves the plan's exact loss, the engine counts every needed marginal in one GROUP BY
GROUPING SETS query (DuckDB), the mechanism adds its noise, and the ledger commits before the
model is returned. Sampling is post-processing (free, any number of times).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpkit._door import Books, Stage, release
from dpkit._exact import check_delta, check_epsilon, check_rho
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss
from dpkit.errors import InternalError, InvalidParameterError, PrivacyCheckError
from dpkit.synth._aim import DEFAULT_MAX_MODEL_MB, ROUND_ITERATIONS, AIMPlan, AIMRun, run_aim
from dpkit.synth._domain import DEFAULT_MAX_CELLS, Domain
from dpkit.synth._model import GraphicalModel
from dpkit.synth._mst import MSTPlan, MSTRun, run_mst

__all__ = ["Synthesizer", "fit"]

METHODS = ("mst", "aim")
AIM_MAX_CELLS = 5 * 10**7
"""AIM's default limit on the cells of the candidates' count tables (int64: 400 MB)."""
COUNT_BATCH = 64
"""Candidate marginals counted per GROUPING SETS query (AIM)."""
LOSS_FLOOR = Fraction(1, 10**6)
LOSS_CEILING = Fraction(10**6)


class Synthesizer:
    """A fitted synthetic-data model: the released measurements and the graphical model fitted
    to them. :meth:`sample` draws records (post-processing: free, repeatable)."""

    def __init__(
        self,
        domain: Domain,
        method: str,
        loss: PrivacyLoss,
        receipt: Any,
        run: MSTRun | AIMRun,
    ) -> None:
        if run.model is None:  # pragma: no cover - the runs always fit a model
            raise InternalError("the synthesis returned no model", charged=True)
        self.domain = domain
        self.method = method
        self.loss = loss
        """The loss charged to the ledger (one release)."""
        self.receipt = receipt
        self.model: GraphicalModel = run.model
        self.measurements = run.measurements
        self.steps = run.steps
        names = domain.names
        self.tree: list[tuple[str, str]] = []
        """The 2-way marginals MST selected (column names)."""
        self.selected: list[tuple[str, ...]] = []
        """The marginals AIM selected, round by round (column names)."""
        self.workload: tuple[tuple[int, ...], ...] = ()
        if isinstance(run, AIMRun):
            self.supports = [np.ones(k, dtype=bool) for k in domain.shape]
            self.workload = run.workload
            self.selected = [tuple(names[a] for a in r) for r in run.selected]
        else:
            self.supports = run.supports
            self.tree = [(names[a], names[b]) for a, b in run.tree]

    @property
    def total(self) -> float:
        """The model's (noisy) number of rows."""
        return self.model.total

    def sample(self, n: int | None = None) -> Any:
        """``n`` synthetic records (default: the model's noisy row count) as a pandas
        DataFrame with the domain's columns and declared values."""
        import pandas as pd  # type: ignore[import-untyped]  # no stubs in the env

        rows = max(1, round(self.total)) if n is None else n
        if isinstance(rows, bool) or not isinstance(rows, int | np.integer) or rows < 0:
            raise InvalidParameterError("n", n, "a number of rows >= 0")
        indices = self.model.sample(int(rows))
        columns: dict[str, Any] = {}
        for a, name in enumerate(self.domain.names):
            declared = np.asarray(self.domain.values(name), dtype=object)
            support = self.supports[a]
            kept = np.flatnonzero(support)
            merged = np.flatnonzero(~support)
            code = indices[:, a]
            original = np.empty(code.size, dtype=np.int64)
            inside = code < kept.size
            original[inside] = kept[code[inside]]
            if merged.size:
                from dpkit.noise import uniform_integers

                spread = np.asarray(uniform_integers(merged.size, int((~inside).sum())))
                original[~inside] = merged[spread.astype(np.int64)]
            values = declared[original]
            if all(isinstance(v, int) and not isinstance(v, bool) for v in declared):
                columns[name] = values.astype(np.int64)
            else:
                columns[name] = values
        return pd.DataFrame(columns)

    def error_report(self, confidence: float = 0.95) -> Any:
        """AIM: for each workload marginal, the model's estimated L1 error (normalised by the
        total, as the workload error) from the noisy measurements, and an interval holding the
        true error with probability >= ``confidence`` (per marginal). Post-processing of the
        released measurements (free). A pandas DataFrame: ``marginal``, ``measured``
        (the measured marginal used), ``estimate``, ``low``, ``high`` (NaN when no measured
        marginal contains it)."""
        import pandas as pd

        from dpkit.synth._aim import error_report

        if self.method != "aim":
            raise InvalidParameterError(
                "method", self.method, "'aim' (MST has no workload to report on)"
            )
        if isinstance(confidence, bool) or not isinstance(confidence, float | int):
            raise InvalidParameterError("confidence", confidence, "a number in (0, 1)")
        if not 0 < confidence < 1:
            raise InvalidParameterError("confidence", confidence, "a number in (0, 1)")
        names = self.domain.names
        rows = error_report(self.model, self.measurements, self.workload, 1 - float(confidence))
        return pd.DataFrame(
            [
                {
                    "marginal": tuple(names[a] for a in r),
                    "measured": None if c is None else tuple(names[a] for a in c),
                    "estimate": e,
                    "low": lo,
                    "high": hi,
                }
                for r, c, e, lo, hi in rows
            ]
        )

    def _plot_points(self) -> tuple[np.ndarray, np.ndarray]:
        """(noisy measured count, the model's count) of every cell of every measured marginal:
        released values and their post-processing."""
        measured = [np.asarray(m.values, dtype=np.float64).reshape(-1) for m in self.measurements]
        modelled = [self.model.marginal(m.clique).reshape(-1) for m in self.measurements]
        return np.concatenate(measured), np.concatenate(modelled)

    def plot(self, path: str | Path) -> Path:
        """Write a PNG of measured vs synthetic marginals: one point per cell of every measured
        marginal, its noisy measured count against the count the model gives it (the expected
        count in a synthetic table of the model's size), on symmetric-log axes with the
        diagonal. Post-processing of released values: free. Needs matplotlib (the ``cli``
        extra). Returns the path."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        out = Path(path)
        measured, modelled = self._plot_points()
        figure = Figure(figsize=(6, 6), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot(1, 1, 1)
        axes.scatter(measured, modelled, s=4, alpha=0.4, linewidths=0)
        top = max(1.0, float(np.max(np.abs(measured))), float(np.max(np.abs(modelled))))
        axes.plot([-top, top], [-top, top], color="grey", linewidth=0.8, linestyle="--")
        axes.set_xscale("symlog", linthresh=10)
        axes.set_yscale("symlog", linthresh=10)
        axes.set_xlabel("measured count (with noise)")
        axes.set_ylabel("synthetic count (the model's)")
        axes.set_title(
            f"{self.method.upper()}: {len(self.measurements)} measured marginals, "
            f"{measured.size:,} cells"
        )
        figure.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(str(out), format="png")
        return out

    def __repr__(self) -> str:
        return (
            f"Synthesizer(method={self.method!r}, columns={len(self.domain)}, "
            f"loss={self.loss}, rows≈{self.total:.0f})"
        )


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _relation(data: Any, names: list[str]) -> tuple[Any, Any]:
    """(connection, DuckDB relation) over the data (a CSV or Parquet path, a DataFrame, an
    Arrow table or a DuckDB relation). Only metadata is read here: a CSV file is read with its
    header and every column as text (nothing sniffed from the rows, as the Session reads it);
    a pandas ``object`` column of the domain is read as text."""
    import duckdb

    if isinstance(data, duckdb.DuckDBPyRelation):
        return None, data
    con = duckdb.connect()
    if isinstance(data, str | Path):
        path = Path(data)
        if not path.is_file():
            raise InvalidParameterError("data", str(data), "an existing CSV or Parquet file")
        if path.suffix.lower() in (".parquet", ".pq"):
            return con, con.read_parquet(str(path))
        from dpkit.analytics._engines._columns import csv_header

        header = csv_header(path)
        columns = ", ".join(f"{_sql_string(h)}: 'VARCHAR'" for h in header)
        sql = (
            f"SELECT * FROM read_csv({_sql_string(str(path))}, header = true, "
            "auto_detect = false, delim = ',', quote = '\"', escape = '\"', "
            f"columns = {{{columns}}}, ignore_errors = false, strict_mode = true)"
        )
        return con, con.sql(sql)
    type_name = type(data).__module__.split(".")[0]
    if type_name == "pandas":
        text = [n for n in names if n in data.columns and data[n].dtype == object]
        if text:
            data = data.assign(**{n: data[n].astype("string") for n in text})
        return con, con.from_df(data)
    if type_name == "pyarrow":
        return con, con.from_arrow(data)
    raise InvalidParameterError(
        "data",
        type(data).__name__,
        "a CSV or Parquet path, a pandas DataFrame, an Arrow table or a DuckDB relation",
        "dpkit.synth reads a table directly (a Session's source: pass the same source).",
    )


def _typed(relation: Any, dom: Domain, unit: str | None) -> Any:
    """The domain's columns converted to the declared values' type, whatever the storage type
    (text from a CSV, numbers, mixed): a value that does not convert is NULL and falls outside
    the domain (dropped), so no value can make the engine fail after the reservation."""
    parts = []
    for name in dom.names:
        values = dom.values(name)
        column = f"CAST({_quote(name)} AS VARCHAR)"
        if all(isinstance(v, bool) for v in values):
            cast = f"TRY_CAST({column} AS BOOLEAN)"
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            number = f"TRY_CAST({column} AS DOUBLE)"
            cast = f"CASE WHEN {number} = floor({number}) THEN TRY_CAST({number} AS BIGINT) END"
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            cast = f"TRY_CAST({column} AS DOUBLE)"
        else:
            cast = column
        parts.append(f"{cast} AS {_quote(name)}")
    if unit is not None:
        parts.append(_quote(unit))
    return relation.project(", ".join(parts))


def _budget(
    epsilon: Any, delta: Any, rho: Any
) -> tuple[Fraction, Fraction | None, Fraction | None]:
    """(ρ, δ or None, ε or None): an (ε, δ) request runs at the Session's ρ for (ε, δ)."""
    if (epsilon is None) == (rho is None):
        raise InvalidParameterError(
            "epsilon", epsilon, "given with delta, or else rho (exactly one of the two)"
        )
    if rho is not None:
        if delta is not None:
            raise InvalidParameterError("delta", delta, "not given with rho")
        value = check_rho(rho)
        _check_range("rho", value, rho)
        return value, None, None
    eps = check_epsilon(epsilon)
    _check_range("epsilon", eps, epsilon)
    if delta is None or check_delta(delta) == 0:
        raise InvalidParameterError(
            "delta",
            delta,
            "> 0 (MST measures with Gaussian noise: an (ε, δ) or a ρ-zCDP budget)",
            "Pass delta= far below 1/n for n people (e.g. 1e-9), or rho=.",
        )
    dlt = check_delta(delta, allow_zero=False)
    from dpkit.analytics._planner._noise import rho_for

    return rho_for(eps, dlt), dlt, eps


def _check_range(name: str, value: Fraction, given: Any) -> None:
    if not LOSS_FLOOR <= value <= LOSS_CEILING:
        raise InvalidParameterError(
            name, given, f"between {float(LOSS_FLOOR):g} and {float(LOSS_CEILING):g}"
        )


def _charge(
    plan: MSTPlan | AIMPlan, rho: Fraction, delta: Fraction | None, eps: Fraction | None
) -> Any:
    exact = plan.charge()
    if not isinstance(exact, ZCDP):  # pragma: no cover - every step is zCDP
        raise PrivacyCheckError(f"internal check failed: the charge {exact} is not zCDP")
    if delta is None or eps is None:
        return exact
    converted = exact.to_approx(delta)
    if converted.epsilon > eps:  # conversion not monotone by a hair: ρ' <= ρ is also ρ-zCDP
        converted = ZCDP(rho).to_approx(delta)
    return ApproxDP(converted.epsilon, converted.delta)


def _books(ledger: Any, budget: Any, dataset: str, analyst: str | None, unit: str | None) -> Books:
    from dpkit.ledger import Ledger

    label = unit or "row"
    if ledger is None:
        if budget is None:
            raise InvalidParameterError(
                "budget",
                budget,
                "a privacy loss such as dp.ZCDP(1) or dp.ApproxDP(1, 1e-9)",
                "Without a ledger the fit keeps its own budget: pass budget= (or ledger=).",
            )
        book = Ledger.open(":memory:")
        book.create_budget(dataset, budget, privacy_unit=label)
        if analyst is not None:
            book.create_budget(dataset, budget, analyst=analyst, privacy_unit=label)
        return Books(book, dataset, analyst, label)
    book = ledger if isinstance(ledger, Ledger) else Ledger.open(str(ledger))
    return Books(book, dataset, analyst, label)


def _marginal_cells(domain: Domain) -> int:
    shape = domain.shape
    return sum(shape) + sum(a * b for a, b in itertools.combinations(shape, 2))


def _fit_relation(
    con: Any,
    relation: Any,
    dom: Domain,
    *,
    plan_args: tuple[Fraction, Fraction | None, Fraction | None, int],
    privacy_unit: str | None,
    max_rows: int | None,
    books_args: tuple[Any, Any, str, str | None],
    method: str,
    iterations: int,
    aim: dict[str, Any],
) -> tuple[MSTRun | AIMRun, PrivacyLoss, Any]:
    """Check the table's columns, rehearse, and release (see :func:`fit`)."""
    rho_total, dlt, eps, contributions = plan_args
    columns = list(relation.columns)
    unknown = [n for n in dom.names if n not in columns]
    if unknown:
        raise InvalidParameterError(
            "domain",
            unknown[0],
            f"columns of the table ({', '.join(map(repr, columns[:20]))})",
            "Every column of the domain must be a column of the data.",
        )
    if privacy_unit is not None and (privacy_unit not in columns or privacy_unit in dom.names):
        raise InvalidParameterError(
            "privacy_unit", privacy_unit, "a column of the table that is not in the domain"
        )
    relation = _typed(relation, dom, privacy_unit)
    books = _books(*books_args, privacy_unit)
    d = len(dom)
    plan: MSTPlan | AIMPlan
    if method == "aim":
        plan = AIMPlan(
            dom.shape,
            rho_total,
            aim["workload"],
            contributions,
            rounds=aim["rounds"],
            max_model_mb=aim["max_model_mb"],
        )
        plan.check()
        sets: list[tuple[int, ...]] = sorted(
            set(plan.weights) | {(a,) for a in range(d)}, key=lambda c: (len(c), c)
        )
    else:
        plan = MSTPlan(d, rho_total, contributions)
        sets = [(a,) for a in range(d)] + list(itertools.combinations(range(d), 2))
    charge = _charge(plan, rho_total, dlt, eps)
    declared = dom.columns

    def empty() -> dict[tuple[int, ...], np.ndarray]:
        shape = dom.shape
        return {s: np.zeros([shape[a] for a in s], dtype=np.int64) for s in sets}

    def execute(counts: Any, rehearsal: bool) -> MSTRun | AIMRun:
        if isinstance(plan, AIMPlan):
            return run_aim(
                plan,
                counts,
                iterations=2 if rehearsal else iterations,
                round_iterations=1 if rehearsal else aim["round_iterations"],
                max_rounds=2 if rehearsal else None,
            )
        return run_mst(plan, counts, iterations=2 if rehearsal else iterations)

    def rehearse() -> None:
        execute(empty, True)

    def body(stage: Stage) -> MSTRun | AIMRun:
        from dpkit.workloads._table import marginal_tables_from_duckdb

        def counts() -> dict[tuple[int, ...], np.ndarray]:
            stage(True, "counting the marginals")
            tables: dict[tuple[int, ...], np.ndarray] = {}
            # bounded memory per query; every query groups by each column (the 1-way sets),
            # as GROUPING() over all columns requires
            ones: list[tuple[int, ...]] = [(a,) for a in range(d)]
            rest = [s for s in sets if len(s) > 1]
            for i in range(0, max(len(rest), 1), COUNT_BATCH):
                batch, _ = marginal_tables_from_duckdb(
                    con,
                    relation,
                    declared,
                    ones + rest[i : i + COUNT_BATCH],
                    privacy_unit=privacy_unit,
                    max_rows=max_rows if privacy_unit is not None else None,
                )
                tables.update(batch)
            stage(False, "measuring and fitting the model")
            return tables

        return execute(counts, False)

    run, receipt = release(
        books,
        charge,
        body,
        query=f"synth.fit(method={method!r}, columns={dom.names})"[:500],
        mechanism=f"{method}: discrete gaussian + exponential",
        rehearse=rehearse,
        rehearsing="checking the synthesis on an empty table",
    )
    return run, charge, receipt


def _workload(workload: Any, dom: Domain) -> tuple[tuple[int, ...], ...]:
    """The workload as sorted column-index tuples (public; refused when malformed)."""
    names = dom.names
    if workload is None:
        k = min(3, len(names))
        return tuple(itertools.combinations(range(len(names)), k))
    if isinstance(workload, str) or not isinstance(workload, list | tuple):
        raise InvalidParameterError(
            "workload", workload, "a list of marginals, each a list of column names"
        )
    if not workload:
        raise InvalidParameterError(
            "workload", workload, "at least one marginal", "Omit workload= for all 3-way marginals."
        )
    out: list[tuple[int, ...]] = []
    for marginal in workload:
        if isinstance(marginal, str):
            marginal = (marginal,)
        if not isinstance(marginal, list | tuple) or not marginal:
            raise InvalidParameterError(
                "workload", marginal, "a non-empty list of column names per marginal"
            )
        for name in marginal:
            if name not in names:
                raise InvalidParameterError(
                    "workload", name, f"columns of the domain ({', '.join(map(repr, names[:20]))})"
                )
        if len(set(marginal)) != len(marginal):
            raise InvalidParameterError("workload", marginal, "distinct columns per marginal")
        out.append(tuple(sorted(names.index(n) for n in marginal)))
    return tuple(dict.fromkeys(out))


def fit(
    data: Any,
    domain: Domain | Mapping[str, Any] | str | Path,
    *,
    epsilon: Any = None,
    delta: Any = None,
    rho: Any = None,
    method: str = "mst",
    privacy_unit: str | None = None,
    max_rows: int | None = None,
    budget: PrivacyLoss | None = None,
    ledger: Any = None,
    dataset: str | None = None,
    analyst: str | None = None,
    max_cells: int | None = None,
    iterations: int = 1000,
    workload: Any = None,
    rounds: int | None = None,
    max_model_mb: float = DEFAULT_MAX_MODEL_MB,
    round_iterations: int = ROUND_ITERATIONS,
) -> Synthesizer:
    """Fit a synthetic-data model on ``data`` over the public ``domain``, as one release.

    Args:
        data: a CSV or Parquet path, a pandas DataFrame, an Arrow table or a DuckDB relation.
        domain: a :class:`Domain`, ``{column: size or [values]}`` or a JSON domain file.
        epsilon, delta: an (ε, δ) budget (run as the largest ρ-zCDP within it, charged as its
            (ε', δ) conversion, ε' <= ε); or ``rho`` for a zCDP budget.
        method: ``"mst"`` (default) or ``"aim"``.
        privacy_unit, max_rows: the column identifying a person and the rows kept per person
            (default: every row is its own unit).
        budget, ledger, dataset, analyst: where the release is charged: a ledger (object or
            SQLite path) with a budget for ``dataset``; or, without a ledger, a private
            in-memory ledger holding ``budget``.
        max_cells: refuse a domain whose marginal tables exceed this many cells (MST: all
            1-way and 2-way tables, default 10^7; AIM: the count tables of every candidate,
            default 5·10^7).
        iterations: mirror-descent steps of the (final) estimation (post-processing).
        workload: AIM: the marginals the user cares about, a list of column-name lists
            (default: every 3-way marginal).
        rounds: AIM's T (default 16·d): the initial per-round budget is ρ/T.
        max_model_mb: AIM's limit on the junction tree's size in MB (default 80, as the
            reference): a candidate that would grow the model past the limit (scaled by the
            budget spent so far) is not selected.
        round_iterations: AIM: at most this many warm-started estimation steps after each
            round (default 300; the refit stops earlier once the model's marginal on the
            chosen candidate has settled, so that AIM's annealing test sees a converged fit).

    Values outside the declared domain (and NULLs) are dropped inside the engine: a row with
    any such value is left out of every marginal (decided by the public domain alone).
    """
    if method not in METHODS:
        raise InvalidParameterError("method", method, " or ".join(map(repr, METHODS)))
    dom = (
        domain
        if isinstance(domain, Domain)
        else (Domain.load(domain) if isinstance(domain, str | Path) else Domain(domain))
    )
    if max_cells is None:
        max_cells = AIM_MAX_CELLS if method == "aim" else DEFAULT_MAX_CELLS
    if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
        raise InvalidParameterError("max_cells", max_cells, "an integer >= 1")
    for name, value in (("iterations", iterations), ("round_iterations", round_iterations)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameterError(name, value, "an integer >= 1")
    aim: dict[str, Any] = {}
    if method == "aim":
        if rounds is not None and (
            isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1
        ):
            raise InvalidParameterError("rounds", rounds, "an integer > the number of columns")
        if (
            isinstance(max_model_mb, bool)
            or not isinstance(max_model_mb, int | float)
            or not 0 < max_model_mb < float("inf")
        ):
            raise InvalidParameterError("max_model_mb", max_model_mb, "a number of MB > 0")
        work = _workload(workload, dom)
        shape = dom.shape
        from dpkit.synth._aim import candidates

        cells = sum(int(np.prod([shape[a] for a in r])) for r in candidates(work))
        dom.check_size(cells, max_cells, "the count tables of AIM's candidate marginals")
        aim = {
            "workload": work,
            "rounds": rounds,
            "max_model_mb": float(max_model_mb),
            "round_iterations": round_iterations,
        }
    else:
        if workload is not None or rounds is not None:
            raise InvalidParameterError(
                "workload" if workload is not None else "rounds",
                workload if workload is not None else rounds,
                "given only with method='aim' (MST selects a tree of 2-way marginals)",
            )
        dom.check_size(_marginal_cells(dom), max_cells, "the 1-way and 2-way marginal tables")
    rho_total, dlt, eps = _budget(epsilon, delta, rho)
    contributions = 1
    if privacy_unit is not None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidParameterError(
                "max_rows", max_rows, "an integer >= 1 (rows kept per privacy unit)"
            )
        contributions = max_rows
    elif max_rows is not None:
        raise InvalidParameterError("max_rows", max_rows, "given only with privacy_unit")
    if ledger is not None and budget is not None:
        raise InvalidParameterError(
            "budget",
            budget,
            "omitted when ledger= is given (the ledger's budget for the dataset applies)",
        )
    con, relation = _relation(data, dom.names)
    try:
        run, charge, receipt = _fit_relation(
            con,
            relation,
            dom,
            plan_args=(rho_total, dlt, eps, contributions),
            privacy_unit=privacy_unit,
            max_rows=max_rows,
            books_args=(
                ledger,
                budget,
                dataset or (Path(data).stem if isinstance(data, str | Path) else "table"),
                analyst,
            ),
            method=method,
            iterations=iterations,
            aim=aim,
        )
    finally:
        if con is not None:
            con.close()
    return Synthesizer(dom, method, charge, receipt, run)
