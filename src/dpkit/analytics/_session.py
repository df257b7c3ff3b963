"""The :class:`Session`: one table, one privacy unit, one budget in a ledger.

The flow of :meth:`Session.evaluate` ("spend before you speak"), through the one door every
release uses (:func:`dpkit._door.release`):

1. compile the query against the table's *schema* (public metadata; no rows are read) and
   rehearse its release on the empty table: a failure there is a refusal, nothing is charged;
2. the ledger reserves the query's loss — over budget,
   :class:`~dpkit.errors.BudgetExceededError` is raised here, before any data is read, and
   nothing is charged;
3. the engine runs the exact, bounded plan and returns integer aggregates;
4. noise is added in Python (:mod:`dpkit.noise`) and the tables are built;
5. ``ledger.commit(...)`` records the receipt, and only then is the
   :class:`~dpkit.analytics.TableRelease` returned.

If step 3 or 4 fails, the reservation is marked failed and **stays charged**: the data may have
been read, and a refund would let an attacker probe it with failing queries. The error is an
:class:`~dpkit.errors.UnreadableDataError` or an :class:`~dpkit.errors.InternalError`, never
"the data".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs in the env

from dpkit._door import Books, Stage, release
from dpkit._door import internal_error as _internal
from dpkit._exact import Number, check_delta, check_epsilon, check_rho
from dpkit.analytics._bounding import bounds_candidates, contribution
from dpkit.analytics._em import em_quantile_index, penalised_rank_error_bound
from dpkit.analytics._engines import Tables, make_engine, make_tables
from dpkit.analytics._engines._base import BinSpec, BoundedPlan, Engine, Output
from dpkit.analytics._joins import (
    UNIT,
    Catalog,
    plan_relation,
    qualify_chain,
    relation_schema,
    split_relation,
)
from dpkit.analytics._keys import KeySet, check_name
from dpkit.analytics._metadata import (
    check_column_bounds,
    check_column_keys,
    registered_bounds,
    registered_keys,
)
from dpkit.analytics._planner import CompiledQuery, Mechanism, compile_query, rewrite, validate
from dpkit.analytics._planner._measurement import (
    QueryMeasurement,
    as_charged_for,
    make_query_measurement,
)
from dpkit.analytics._query import (
    Aggregate,
    Bounding,
    CountUnits,
    Join,
    PlanNode,
    Query,
    Source,
    Unbounded,
    check_max_per_key,
    count,
    written_aggregations,
)
from dpkit.analytics._results import TableRelease
from dpkit.core._losses import ZCDP, ApproxDP, PrivacyLoss, PureDP, group_share
from dpkit.errors import DPError, InvalidParameterError, UnsupportedQueryError
from dpkit.ledger import Ledger
from dpkit.noise import random_words

__all__ = ["QUERY_LOSS_CEILING", "QUERY_LOSS_FLOOR", "BoundsEstimate", "Session", "dry_run"]


@dataclass(frozen=True, slots=True)
class BoundsEstimate:
    """Clamping bounds found privately by :meth:`Session.estimate_bounds`.

    ``lower`` and ``upper`` are points of a public grid (0 and ±powers of two) around the
    ``(1-coverage)/2`` and ``(1+coverage)/2`` quantiles: the left edge of a grid interval holding
    the lower quantile and the right edge of one holding the upper quantile. With probability
    >= 1 - alpha each (n: the rows with a value, t = (1-coverage)/2·n), at most t + E rows lie
    below ``lower`` and at least t - E below the next grid point above it; at most t + E rows
    lie at or above ``upper`` and at least t - E at or above the grid point below it. Here
    ``E = rank_error + rank_error_per_doubling·(|log2 b| + 1)``, ``b`` being the exact answer
    (the grid point returned without noise, of smallest magnitude if several; the second term
    is 0 when b = 0): the estimator prefers bounds of small magnitude, trading
    ``rank_error_per_doubling`` rows for each doubling (:mod:`dpkit.analytics._em`).
    """

    lower: float
    upper: float
    loss: PrivacyLoss
    rank_error: float
    receipt: Any = None
    rank_error_per_doubling: float = 0.0

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.lower, self.upper)


def _query_budget(
    epsilon: Number | None, delta: Number | None, rho: Number | None, loss: PrivacyLoss | None
) -> PrivacyLoss:
    given = [x is not None for x in (epsilon, rho, loss)]
    if sum(given) != 1:
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            "given (or rho=, or loss=) — exactly one way to say how much of "
            "the budget this query may spend",
            "e.g. session.evaluate(query, epsilon=0.5)",
        )
    if loss is not None:
        if delta is not None:
            # the loss says its own δ: a second one would let the charge's conversion use a δ
            # the budget did not ask for (1000x the loss's, or an ε above it)
            raise InvalidParameterError("delta", delta, "not given with loss= (put δ in the loss)")
        if not isinstance(loss, PureDP | ApproxDP | ZCDP):
            raise InvalidParameterError("loss", loss, "a PureDP, ApproxDP or ZCDP value")
        _check_floor("loss", loss.rho if isinstance(loss, ZCDP) else loss.epsilon, loss)
        return loss
    if rho is not None:
        if delta is not None:
            raise InvalidParameterError("delta", delta, "not given with rho")
        return ZCDP(_check_floor("rho", check_rho(rho), rho))
    eps = _check_floor("epsilon", check_epsilon(epsilon), epsilon)  # type: ignore[arg-type]
    if delta is None or check_delta(delta) == 0:
        return PureDP(eps)
    return ApproxDP(eps, check_delta(delta))


QUERY_LOSS_FLOOR = Fraction(1, 10**6)
"""The smallest ε (or ρ) a query may spend: below it the noise scale is so large that
calibration can overflow the engines' grids (ε = 1e-300 used to fail *after* charging), and no
answer is useful. The command line uses the same floor (docs/cli.md)."""


QUERY_LOSS_CEILING = Fraction(10**6)
"""The largest ε (or ρ) one query may spend. Decision (issue 21): a large ε is how users check a
pipeline against the truth, and every aggregate answers it exactly up to this ceiling (tests/
regression/test_large_epsilon.py); at ε = 10^6 a count's noise is 0 and a sum's is its bound
/ 10^6. Beyond it nothing gets more accurate, while dpkit's exact arithmetic on the loss (e^ε
bounds) grows without limit, so a larger loss is refused before anything is reserved. Budgets
have their own ceiling (:data:`dpkit.ledger._model.BUDGET_CEILING`, 10^9)."""


def _check_floor(name: str, value: Fraction, given: object) -> Fraction:
    if value < QUERY_LOSS_FLOOR:
        raise InvalidParameterError(
            name,
            given,
            f">= {float(QUERY_LOSS_FLOOR):g} (the smallest a query may spend)",
            "Noise for a smaller budget would swamp any answer.",
        )
    if value > QUERY_LOSS_CEILING:
        raise InvalidParameterError(
            name,
            given,
            f"<= {float(QUERY_LOSS_CEILING):g} (the most a query may spend)",
            "At 1e6 a count's noise is already 0 and a sum's is its bound / 1e6: a larger "
            "loss makes no answer more accurate. Nothing was charged.",
        )
    return value


def check_engine(engine: Engine, plan: BoundedPlan) -> None:
    """Let ``engine`` check ``plan`` from public inputs, before anything is reserved (the SQL
    engines write its SQL: a plan they cannot write is refused, never failed after the
    charge). An engine without a ``check`` method accepts every plan here."""
    check = getattr(engine, "check", None)
    if check is not None:
        check(plan)


def dry_run(compiled: CompiledQuery | QueryMeasurement, alpha: float) -> None:
    """Release ``compiled`` on an empty table — public, no data — before anything is reserved.

    Everything the release computes from public inputs alone (the noise's intervals, variances
    and rank bounds, the finishers' arithmetic) then runs before the reservation, so a failure
    there is a refusal that charges nothing, never a failure after the charge. The empty table
    is a valid input: a query that fails on it could fail on a neighbour of any table, so it is
    refused whatever the data. A dpkit error (a refusal from public inputs) passes through; any
    other error is an :class:`InternalError` with ``charged=False``.
    """
    empty = [
        pa.table({name: pa.array([], type=pa.int64()) for name in plan.result_columns})
        for plan in compiled.plans
    ]
    try:
        compiled.release(empty, alpha)
    except DPError:
        raise
    except Exception as error:
        raise _internal(error, "checking the query on an empty table", charged=False) from None


def _charged_delta(delta: Number | None, loss: PrivacyLoss | None) -> Fraction | None:
    """The δ a query was asked for with (None without one).

    A query asked for with (ε, δ) but answered with Gaussian noise compiles to ρ-zCDP with
    ``ZCDP(ρ).to_approx(δ)`` within (ε, δ). The ledger is charged that (ε, δ) conversion, not ρ:
    an (ε, δ) budget composes its charges by adding ε and δ (sound for adaptively chosen
    queries), and does not mix in zCDP charges (see docs/accounting.md). A query asked for
    with ρ is charged ρ.
    """
    query_delta = (
        delta if delta is not None else (loss.delta if isinstance(loss, ApproxDP) else None)
    )
    return None if query_delta is None else check_delta(query_delta)


_PENALTY_PER_DOUBLING = Fraction(3)


def _magnitude_penalty(edges: tuple[float, ...]) -> list[Fraction]:
    """A public base measure over the bounds grid: weight e^{-3(|log2 c| + 1)} for ±c, 1 for 0
    and e^{-1000} for the two infinite ends; among equally good bounds it prefers the one of
    smallest magnitude (otherwise every power of two above the data's maximum would tie).

    Each doubling beyond the data costs a factor e^{-3}: the smallest bound covering the data
    wins with probability ~95%, a bound four times too wide ~0.25%. (With e^{-1} per doubling,
    a bound 4x too wide — 16x the noise variance — came out 13% of the time.) Being public, the
    measure does not change the privacy guarantee.
    """
    out = []
    for i, edge in enumerate(edges):
        if i in (0, len(edges) - 1):
            out.append(Fraction(1000))
        elif edge == 0:
            out.append(Fraction(0))
        else:
            out.append(_PENALTY_PER_DOUBLING * (abs(int(np.log2(abs(edge)))) + 1))
    return out


_DISTINCT_AFTER_TRUNCATION = (
    "counting distinct people cannot follow a truncated join (max_per_key): its rows pair "
    "different people's rows and are not one person's; count rows (COUNT(*)) instead"
)
_SHRINKS = 24
"""How many times a truncated join's per-row budget is shrunk (by 4/5) to fit the budget."""


def _with_max_per_key(node: PlanNode, per_key: tuple[int, int] | None) -> PlanNode:
    """``node`` with ``max_per_key`` on each of its joins (None: as is)."""
    if per_key is None:
        return node
    changes = {
        name: _with_max_per_key(getattr(node, name), per_key)
        for name in ("child", "left", "right")
        if isinstance(getattr(node, name, None), PlanNode)
    }
    if isinstance(node, Join):
        changes["max_per_key"] = per_key  # type: ignore[assignment]
    return replace(cast(Any, node), **changes) if changes else node


def _rebuilt(chain: list[PlanNode], root: PlanNode) -> PlanNode:
    """The top chain of a query (outermost first) over another root."""
    node = root
    for item in reversed(chain):
        node = replace(cast(Any, item), child=node)
    return node


def _default_dataset(source: Any) -> str:
    if isinstance(source, str | Path):
        return Path(source).stem or "table"
    return "table"


class Session:
    """Differentially private queries over one table.

    Args:
        source: a CSV or Parquet path, a pandas / Polars DataFrame, an Arrow table, a DuckDB
            relation or a Spark DataFrame.
        privacy_unit: the column identifying one privacy unit (a person, a household...). All
            rows with the same value are protected together. Rows whose unit is NULL are dropped.
        budget: without ``ledger=``, the session's own budget (kept in a private in-memory
            ledger). With a shared ledger it may be omitted; if given it must equal the budget a
            privacy officer created for the dataset (a session never creates or changes one).
        engine: ``"duckdb"`` (default), ``"pandas"`` (the reference engine), ``"spark"``, or an
            :class:`~dpkit.analytics._engines.Engine`.
        ledger: a :class:`~dpkit.ledger.Ledger`, a path to a SQLite ledger file, or None for a
            private in-memory ledger.
        dataset: the dataset's name in the ledger (default: the file name, or ``"table"``).
        analyst: charge an analyst's budget under the dataset (it must exist in the ledger).
        max_rows, max_groups, max_rows_per_group: default contribution bounds for queries that
            do not declare their own (see :class:`~dpkit.analytics._query.Bounding`).
        spark: the SparkSession for ``engine="spark"`` (default: the active one).
        schema: declared column kinds, ``{column: "numeric" | "text" | "bool" | "temporal"}``.
            Kinds are otherwise read from the source's metadata only (dtypes, an Arrow, Parquet
            or Spark schema), never from its values: a pandas ``object`` column and every
            column of a CSV file are text unless declared. A text column declared numeric,
            bool or temporal is converted when a query runs; values that do not parse become
            NULL.
        bounds: public clamping bounds registered once per column, ``{column: (lower,
            upper)}``, declared by the privacy officer (never read from the data): a SQL
            aggregate written without bounds (``AVG(wage)``, ``QUANTILE(wage, 0.9)``) clamps to
            them; bounds written in the query win (any clamping bounds are private: wider ones
            only add noise). With neither, the query is refused before anything is reserved.
            Builders read them as ``session.bounds["wage"]``.
        keys: public key sets registered once per column, ``{column: [values, ...]}``: a SQL
            ``GROUP BY`` without ``keys=`` whose columns all have one groups on their product
            (without, the groups are chosen privately). See :mod:`dpkit.analytics._metadata`
            for the same metadata as a TOML file.

    Example:
        >>> import pandas as pd
        >>> import dpkit as dp
        >>> from dpkit.analytics import Session, count
        >>> df = pd.DataFrame({"user": [1, 1, 2, 3], "dept": ["a", "b", "a", "a"]})
        >>> session = Session(df, privacy_unit="user", budget=dp.PureDP(1), max_rows=2)
        >>> release = session.evaluate(session.query().agg(count()), epsilon=0.5)
        >>> list(release.table.columns)
        ['count', 'count_low', 'count_high']
        >>> session.remaining
        PureDP(epsilon=Fraction(1, 2))
    """

    def __init__(
        self,
        source: Any,
        privacy_unit: str,
        budget: PrivacyLoss | None = None,
        *,
        engine: str | Engine = "duckdb",
        ledger: Ledger | str | Path | None = None,
        dataset: str | None = None,
        analyst: str | None = None,
        max_rows: int | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        spark: Any = None,
        schema: Mapping[str, Any] | None = None,
        public: Mapping[str, Any] | None = None,
        links: Any = None,
        bounds: Mapping[str, tuple[Number, Number]] | None = None,
        keys: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(privacy_unit, str) or not privacy_unit:
            raise InvalidParameterError("privacy_unit", privacy_unit, "a column name")
        self.privacy_unit = privacy_unit
        self.defaults = Bounding(max_rows, max_groups, max_rows_per_group)
        self.bounds: dict[str, tuple[Any, Any]] = check_column_bounds(bounds)
        """The registered public bounds of columns (see the ``bounds`` argument)."""
        self.keys: dict[str, tuple[Any, ...]] = check_column_keys(keys)
        """The registered public key sets of columns (see the ``keys`` argument)."""
        self.catalog: Catalog | None = None
        self.tables: Tables | None = None
        if isinstance(source, Mapping) or public is not None or links is not None:
            self._open_tables(source, privacy_unit, engine, spark, schema, public, links)
        else:
            self.engine = make_engine(engine, source, spark=spark, schema=schema)
            self.schema = self.engine.schema()
        if self.catalog is None and privacy_unit not in self.schema:
            raise InvalidParameterError(
                "privacy_unit",
                privacy_unit,
                f"a column of the table ({', '.join(map(repr, self.schema))})",
                "Name the column that identifies a person (or one privacy unit).",
            )
        self._check_registered()
        self.dataset = dataset or (
            "+".join(source) if isinstance(source, Mapping) else _default_dataset(source)
        )
        self.analyst = analyst
        private = ledger is None
        if ledger is None:
            self.ledger = Ledger.open(":memory:")
        elif isinstance(ledger, Ledger):
            self.ledger = ledger
        else:
            self.ledger = Ledger.open(str(ledger))
        self._closed = False
        existing = self.ledger.budgets(self.dataset)
        known = {(b.dataset, b.analyst): b for b in existing}
        for status in existing:
            if status.privacy_unit != privacy_unit:
                raise InvalidParameterError(
                    "privacy_unit",
                    privacy_unit,
                    f"{status.privacy_unit!r}, the privacy unit of the ledger's budget for "
                    f"dataset {self.dataset!r}",
                    "A budget protects one kind of unit: spending it per another unit (e.g. per "
                    "payslip instead of per employee) would understate every charge. Use the "
                    "budget's unit, or another dataset name for a budget of your own unit.",
                )
        if private:
            # the session's own in-memory ledger: the budget argument *is* the budget
            if budget is None:
                raise InvalidParameterError(
                    "budget",
                    budget,
                    "a privacy loss such as dp.PureDP(1)",
                    "Without a ledger the session keeps its own budget: pass budget=.",
                )
            self.ledger.create_budget(self.dataset, budget, privacy_unit=privacy_unit)
            if analyst is not None:
                self.ledger.create_budget(
                    self.dataset, budget, analyst=analyst, privacy_unit=privacy_unit
                )
            return
        # a shared ledger: budgets belong to datasets a privacy officer created; a query (or a
        # session) never mints one, or a new dataset name would be a fresh budget for old rows
        for who in (None, analyst) if analyst is not None else (None,):
            found = known.get((self.dataset, who))
            whose = f"dataset {self.dataset!r}" + (f", analyst {who!r}" if who else "")
            if found is None:
                raise InvalidParameterError(
                    "dataset" if who is None else "analyst",
                    self.dataset if who is None else who,
                    f"a {'dataset' if who is None else 'analyst'} with a budget in the ledger "
                    f"({', '.join(sorted({b.dataset for b in self.ledger.budgets()})) or 'none'})",
                    f"The ledger has no budget for {whose}. Budgets are created by a privacy "
                    "officer, never by a query: ledger.create_budget(...) or `dpkit budget "
                    "create`.",
                )
            if budget is not None and who is None and found.total != budget:
                raise InvalidParameterError(
                    "budget",
                    budget,
                    f"omitted, or equal to the ledger's budget {found.total} for {whose}",
                    "A session cannot change a budget; a privacy officer adjusts it.",
                )

    def _check_registered(self) -> None:
        """Registered bounds and keys name columns of the table (of a table, over several;
        ``table.column`` or the column's name): a misspelt name would otherwise never apply."""
        if self.catalog is None:
            known = set(self.schema)
        else:
            known = {
                name
                for table, columns in self.catalog.schemas.items()
                for column in columns
                for name in (column, f"{table}.{column}")
            }
        for what, registered in (("bounds", self.bounds), ("keys", self.keys)):
            for column in registered:
                if column not in known:
                    raise InvalidParameterError(
                        what,
                        column,
                        f"a column of the table ({', '.join(map(repr, sorted(known)))})",
                    )

    def _open_tables(
        self,
        source: Any,
        privacy_unit: str,
        engine: Any,
        spark: Any,
        schema: Mapping[str, Any] | None,
        public: Mapping[str, Any] | None,
        links: Any,
    ) -> None:
        """A session over several tables (see :mod:`dpkit.analytics._joins`)."""
        if not isinstance(source, Mapping) or not source:
            raise InvalidParameterError(
                "source",
                type(source).__name__,
                "a mapping of private tables {name: source} when public= or links= is given",
            )
        public = dict(public or {})
        overlap = set(source) & set(public)
        if overlap:
            raise InvalidParameterError(
                "public", sorted(overlap)[0], "a name that is not also a private table"
            )
        schemas = dict(schema or {})
        for name, declared in schemas.items():
            if name not in source and name not in public:
                raise InvalidParameterError(
                    "schema", name, "a table name of the session, mapping to its column kinds"
                )
            if not isinstance(declared, Mapping):
                raise InvalidParameterError(
                    "schema", declared, f"the kinds of table {name!r}: {{column: kind}}"
                )
        self.tables = make_tables(engine, {**source, **public}, spark=spark, schemas=schemas)
        kinds = {name: e.schema() for name, e in self.tables.engines.items()}
        self.catalog = Catalog.build(kinds, public, privacy_unit, links)
        self.engine = self.tables.engines[self.catalog.unit_table]
        self.schema = kinds[self.catalog.unit_table]

    def _source_text(self, query: Query) -> str | None:
        """How explanations show the relation a query reads (None: the session's one table)."""
        if self.catalog is None:
            return None
        return split_relation(query.plan)[1].render()

    def _resolve(self, query: Query) -> tuple[Query, dict[str, Any], str, str, Engine]:
        """(the query over one relation, its schema, its unit column, the unit's label, the
        engine that runs it): joins are planned here (:mod:`dpkit.analytics._joins`)."""
        chain, root = split_relation(query.plan)
        if self.catalog is None:
            if isinstance(root, Source) and root.table in (None, self.dataset):
                if root.table is None:
                    return (
                        query,
                        dict(self.schema),
                        self.privacy_unit,
                        self.privacy_unit,
                        (self.engine),
                    )
                return (
                    replace(query, plan=_rebuilt(chain, Source())),
                    dict(self.schema),
                    self.privacy_unit,
                    self.privacy_unit,
                    self.engine,
                )
            raise UnsupportedQueryError(
                f"this session has one table ({self.dataset!r}): joins and other tables need a "
                "session over several tables, Session({name: source, ...}, "
                "privacy_unit='table.column', links=..., public=...)"
            )
        aggregate = next((n for n in chain if isinstance(n, Aggregate)), None)
        bounding = self.defaults.merged(aggregate.bounding if aggregate else Bounding())
        planned = plan_relation(self.catalog, root, bounding.max_rows)
        assert self.tables is not None
        qualified = qualify_chain(chain, planned)
        label = self.catalog.label
        if planned.stability > 1:
            if aggregate is not None and any(
                isinstance(a, CountUnits) for a in aggregate.aggregations
            ):
                raise UnsupportedQueryError(_DISTINCT_AFTER_TRUNCATION)
            # each row of a truncated join is its own contribution: one row per "unit", and
            # one unit of the tables is planned.stability of those (see _joins)
            qualified = [
                replace(n, bounding=Bounding(max_rows=1)) if isinstance(n, Aggregate) else n
                for n in qualified
            ]
            label = (
                f"one row of the truncated join (one {label} changes at most {planned.stability})"
            )
        return (
            replace(query, plan=_rebuilt(qualified, Source())),
            relation_schema(self.catalog, planned),
            UNIT,
            label,
            self.tables.relation(planned.node),
        )

    def _with_registered(self, query: Query) -> Query:
        """``query`` with the registered metadata applied, as SQL applies it: an aggregation
        written without bounds (``mean("wage")``) clamps to the column's registered bounds
        (refused here, before anything is reserved, naming the column, when none are), and a
        ``group_by`` without keys whose columns all have a registered key set groups on
        their product (:mod:`dpkit.analytics._metadata`)."""
        node = query.plan
        if not isinstance(node, Aggregate):
            return query
        aggregations = tuple(
            agg.bounded(
                registered_bounds(
                    self.bounds,
                    agg.column,
                    agg.call(),
                    f"given in the query, {agg.call('(lower, upper)')}",
                    self.bounds_help,
                )
            )
            if isinstance(agg, Unbounded)
            else agg
            for agg in written_aggregations(node.aggregations)
        )
        key_set = node.key_set
        if key_set is None and node.keys:
            found = registered_keys(self.keys, node.keys)
            if found is not None:
                key_set = KeySet.from_dict(found)
        if key_set is node.key_set and all(
            a is b for a, b in zip(aggregations, node.aggregations, strict=True)
        ):
            return query
        return replace(query, plan=replace(node, aggregations=aggregations, key_set=key_set))

    def _stability(self, query: Query) -> int:
        """How many units of the relation one unit of the tables is (a truncated join: the
        rows one unit changes; otherwise 1). Reads the declared schemas only."""
        if self.catalog is None:
            return 1
        chain, root = split_relation(query.plan)
        aggregate = next((n for n in chain if isinstance(n, Aggregate)), None)
        bounding = self.defaults.merged(aggregate.bounding if aggregate else Bounding())
        return plan_relation(self.catalog, root, bounding.max_rows).stability

    # ------------------------------------------------------------------ queries
    def query(self, table: str | None = None) -> Query:
        """A new query over the whole table, or over table ``table`` of a session over
        several tables (bounded by the session's defaults)."""
        if table is not None:
            check_name(table, "table")
        return Query(Source(table))

    table = query

    def sql(
        self,
        text: str,
        *,
        keys: Mapping[str, Any] | None = None,
        max_rows: int | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_per_key: int | tuple[int, int] | None = None,
    ) -> Query:
        """A query from SQL text (not yet answered: pass it to :meth:`evaluate`).

        The syntax of ``dpkit query`` (see :mod:`dpkit.analytics._querytext`), and over several
        tables also ``JOIN ... ON`` / ``USING``, ``LEFT JOIN``, subqueries in ``FROM`` and
        ``WITH`` (see docs/joins.md). ``keys`` declares public group keys
        (``{column: values}``, their cartesian product); without it the groups of a
        ``GROUP BY`` are chosen privately (which needs a δ). ``HAVING``, ``ORDER BY`` and
        ``LIMIT`` post-process a release: use :meth:`evaluate_sql` for them. ``max_rows``,
        ``max_groups``, ``max_rows_per_group``: the query's contribution bounds (default: the
        session's). ``max_per_key``: makes every join of private tables on keys that do not
        link them to one person a truncated join (see :meth:`Query.join
        <dpkit.analytics.Query.join>`).

        Example:
            >>> import pandas as pd, dpkit as dp
            >>> from dpkit.analytics import Session
            >>> df = pd.DataFrame({"user": [1, 1, 2], "dept": ["a", "b", "a"]})
            >>> s = Session(df, privacy_unit="user", budget=dp.PureDP(1), max_rows=2)
            >>> q = s.sql("SELECT dept, COUNT(*) GROUP BY dept", keys={"dept": ["a", "b"]})
            >>> list(s.evaluate(q, epsilon=1).table["dept"])
            ['a', 'b']
        """
        parsed = self._parse_sql(text)
        if parsed.post_processed:
            raise UnsupportedQueryError(
                "HAVING, ORDER BY and LIMIT post-process a release: use "
                "session.evaluate_sql(text, epsilon=...) for them"
            )
        bounds = Bounding(max_rows, max_groups, max_rows_per_group)
        return self._sql_query(parsed, keys, bounds, max_per_key)

    def evaluate_sql(
        self,
        text: str,
        *,
        keys: Mapping[str, Any] | None = None,
        max_rows: int | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_per_key: int | tuple[int, int] | None = None,
        **budget: Any,
    ) -> TableRelease:
        """Answer SQL text (see :meth:`sql`), then apply its ``HAVING``, ``ORDER BY`` and
        ``LIMIT`` to the released main table: post-processing of released values, which reads
        no data and costs nothing more. ``budget``: as :meth:`evaluate` (``epsilon=``...)."""
        from dpkit.analytics._querytext import check_released, post_process

        parsed = self._parse_sql(text)
        bounds = Bounding(max_rows, max_groups, max_rows_per_group)
        query = self._sql_query(parsed, keys, bounds, max_per_key)
        check_released(parsed, self._resolve(query)[1])  # before anything is reserved
        release: TableRelease = post_process(self.evaluate(query, **budget), parsed)
        return release

    def _parse_sql(self, text: str) -> Any:
        from dpkit.analytics._querytext import parse_query

        unit = self.catalog.unit_column if self.catalog is not None else self.privacy_unit
        return parse_query(
            text,
            unit,
            source=f"a table of the session ({', '.join(self._table_names())})",
            syntax_help="See docs/joins.md for the syntax.",
            relations=self.catalog is not None,
            bounds=self.bounds,
            bounds_help=self.bounds_help,
        )

    _dry_run = staticmethod(dry_run)
    _check_engine = staticmethod(check_engine)
    """The public rehearsals of a release, for :mod:`dpkit.analytics._tuning`."""

    bounds_help = (
        "dpkit never reads them from the data: declare the clamping bounds in the query, or "
        "register them once with the session: "
        "Session(..., bounds={'{column}': (lower, upper)})."
    )
    """How to register a column's bounds (the hint of a refused aggregate without bounds;
    ``{column}`` is replaced by the column's name)."""

    def _sql_query(
        self,
        parsed: Any,
        keys: Mapping[str, Any] | None,
        bounds: Bounding | None = None,
        max_per_key: object = None,
    ) -> Query:
        per_key = check_max_per_key(max_per_key)
        if self.catalog is not None and any(isinstance(a, CountUnits) for a in parsed.aggregations):
            self._check_distinct_unit(parsed, per_key)
        if per_key is not None and parsed.relation is None:
            raise InvalidParameterError("max_per_key", max_per_key, "only with a JOIN")
        if parsed.relation is not None:
            base = Query(_with_max_per_key(parsed.relation, per_key))
        elif self.catalog is not None:
            if parsed.source is None:
                raise UnsupportedQueryError(
                    "this session has several tables: name one with FROM, e.g. FROM orders"
                )
            base = self.query(parsed.source)
        else:
            if parsed.source is not None and parsed.source != self.dataset:
                raise UnsupportedQueryError(
                    f"FROM {parsed.source}: this session's table is {self.dataset!r}"
                )
            base = self.query()
        base = parsed.rows(base)
        if bounds is not None:
            base = base.bound(
                max_rows=bounds.max_rows,
                max_groups=bounds.max_groups,
                max_rows_per_group=bounds.max_rows_per_group,
            )
        if parsed.group_by:
            key_set = None
            if keys is None:
                keys = registered_keys(self.keys, parsed.group_by)  # None: chosen privately
            if keys is not None:
                if not isinstance(keys, Mapping) or set(keys) != set(parsed.group_by):
                    raise InvalidParameterError(
                        "keys",
                        keys,
                        f"a mapping of every GROUP BY column ({', '.join(parsed.group_by)}) to "
                        "its public values",
                    )
                key_set = {k: list(keys[k]) for k in parsed.group_by}
            grouped: Query = base.group_by(*parsed.group_by, keys=key_set).agg(*parsed.aggregations)
            return grouped
        if keys:
            raise InvalidParameterError("keys", keys, "only with GROUP BY")
        return base.agg(*parsed.aggregations)

    def _check_distinct_unit(self, parsed: Any, per_key: tuple[int, int] | None = None) -> None:
        """``COUNT(DISTINCT c_custkey)`` counts people only where ``c_custkey`` is a column
        equal to the person in the relation the query reads; otherwise it would count another
        column's values, which dpkit does not compute: refused."""
        assert self.catalog is not None
        root = parsed.relation if parsed.relation is not None else Source(parsed.source)
        # planned as answered (a truncated join with max_per_key; any max_rows plans it)
        planned = plan_relation(self.catalog, _with_max_per_key(root, per_key), 1)
        if planned.stability > 1:
            raise UnsupportedQueryError(_DISTINCT_AFTER_TRUNCATION)
        name = self.catalog.unit_column
        try:
            column = planned.resolve(name, "column")
        except DPError:
            column = None
        if column is None or column not in planned.unit_equal:
            raise UnsupportedQueryError(
                f"COUNT(DISTINCT {name}) counts people only where {name} is the person's column "
                f"({self.catalog.label}, or a link to it) in the tables the query reads; here "
                "it is not"
            )

    def _table_names(self) -> list[str]:
        if self.catalog is not None:
            return list(self.catalog.schemas)
        return [self.dataset]

    def compile(
        self,
        query: Query,
        *,
        epsilon: Number | None = None,
        delta: Number | None = None,
        rho: Number | None = None,
        loss: PrivacyLoss | None = None,
        mechanism: Mechanism = "auto",
        alpha: float = 0.05,
    ) -> QueryMeasurement:
        """Compile ``query`` for a budget without touching data or the ledger.

        Returns a :class:`~dpkit.core._framework.Measurement` (contribution bounding, a
        Transformation that runs the exact engine plans, chained with the calibrated noise)
        whose ``map(1)`` is the loss :meth:`evaluate` charges the ledger and :meth:`explain`
        shows, and ``map(k)`` the loss for tables ``k`` privacy units apart (group privacy).
        See :mod:`dpkit.analytics._planner._measurement`.
        """
        budget = _query_budget(epsilon, delta, rho, loss)
        query = self._with_registered(query)
        try:
            single, schema, unit, label, _ = self._resolve(query)
            stability = self._stability(query)
            scale = Fraction(1)
            for _ in range(_SHRINKS):
                compiled = compile_query(
                    single,
                    schema,
                    unit,
                    budget if stability == 1 else group_share(budget, stability, scale),
                    mechanism=mechanism,
                    defaults=self.defaults if stability == 1 else Bounding(),
                    unit_label=label,
                    source_text=self._source_text(query),
                )
                measurement = make_query_measurement(
                    compiled,
                    schema,
                    unit,
                    as_charged_for(_charged_delta(delta, loss)),
                    alpha,
                    stability,
                )
                # one unit of the tables is `stability` rows of a truncated join: the charge
                # is the group loss, which must fit the budget (a Gaussian release asked for
                # with (ε, δ) converts after the group step: shrink until it fits)
                if stability == 1 or measurement.map(1) <= budget:
                    return measurement
                scale *= Fraction(4, 5)
            raise UnsupportedQueryError(
                f"one person changes up to {stability} rows of the truncated join: no "
                f"calibration fits the budget {budget}; lower max_rows or max_per_key"
            )
        except DPError:
            raise
        except Exception as error:  # planning reads public inputs only: any other error is ours
            raise _internal(error, "planning the query", charged=False) from None

    def explain(self, query: Query, **budget: Any) -> str:
        """How ``query`` would be answered (bounds, sensitivities, mechanisms, loss split)."""
        return self.compile(query, **budget).explain()

    def evaluate(
        self,
        query: Query,
        *,
        epsilon: Number | None = None,
        delta: Number | None = None,
        rho: Number | None = None,
        loss: PrivacyLoss | None = None,
        mechanism: Mechanism = "auto",
        alpha: float = 0.05,
    ) -> TableRelease:
        """Answer ``query`` with differential privacy, spending at most the given budget.

        Raises:
            BudgetExceededError: the budget left is too small; nothing was read or charged.
            DPError: the query is invalid (unknown column, wrong type, missing bounds...);
                raised before anything is charged.
        """
        self._check_open()
        if not 0 < alpha < 1:
            raise InvalidParameterError("alpha", alpha, "in (0, 1), e.g. 0.05")
        query = self._with_registered(query)
        measurement = self.compile(
            query,
            epsilon=epsilon,
            delta=delta,
            rho=rho,
            loss=loss,
            mechanism=mechanism,
            alpha=alpha,
        )
        bounding, noisy = measurement.bounding, measurement.noisy
        if bounding is None or noisy is None:  # pragma: no cover - compile builds both
            raise _internal(TypeError("incomplete measurement"), "planning", charged=False)
        charge = measurement.map(1)
        explanation = measurement.explain()

        engine = self._resolve(query)[4]

        def body(stage: Stage) -> Any:
            stage(reading=True)
            results = bounding(engine)
            stage(reading=False)
            return noisy(results)

        # public failures are refusals, decided before the reservation (the dry run)
        (tables, accuracy), receipt = release(
            self._books,
            charge,
            body,
            query=explanation,
            mechanism=", ".join(measurement.mechanisms)[:500],
            rehearse=lambda: dry_run(measurement, alpha),
        )
        return TableRelease(
            tables,
            accuracy,
            charge,
            receipt,
            self.remaining,
            explanation,
            measurement.split,
        )

    def _bounds_plan(
        self,
        column: str,
        checked: Any,
        max_rows: int | None,
        salt: int,
        coverage: float = 0.95,
    ) -> tuple[BoundedPlan, Any]:
        """The bounds estimator of :meth:`estimate_bounds`, shared with tuning
        (:mod:`dpkit.analytics._tuning`): the plan counting the rows of ``column`` per bin of
        the public grid (after ``checked``'s steps, at most ``max_rows`` rows per unit), and
        ``choose(counts, epsilon)``: the two exponential-mechanism quantiles (each ε/2, with
        sensitivity the rows one unit keeps) that pick the bounds from those counts."""
        bounding = self.defaults.merged(Bounding(max_rows=max_rows))
        contrib = contribution(bounding, grouped=False)
        edges = (
            -float(np.finfo(np.float64).max),
            *bounds_candidates(),
            float(np.finfo(np.float64).max),
        )
        steps = rewrite(checked.steps, frozenset({self.privacy_unit, column}))
        plan = BoundedPlan(
            steps,
            self.privacy_unit,
            (),
            None,
            bounding.max_rows,
            None,
            bounding.max_rows_per_group,
            salt,
            (),
            (Output("rows"),),
            BinSpec("edges", column=column, edges=edges),
        )
        q_low = Fraction(1 - coverage).limit_denominator(10**6) / 2
        prior = _magnitude_penalty(edges)
        rows = contrib.rows_l1

        def choose(counts: np.ndarray, epsilon: Fraction) -> tuple[float, float]:
            # candidates are the bins [e_j, e_{j+1}): rows before each and up to its end (ties
            # inside a bin count on either side); the lower bound is a bin's left edge, the
            # upper bound its right edge, each with the magnitude penalty of that edge
            half = epsilon / 2
            upto = np.cumsum(counts).tolist()
            below = [0, *upto[:-1]]
            n = int(counts.sum())
            j_low = em_quantile_index(below, upto, n, q_low, half, rows, prior[:-1])
            j_high = em_quantile_index(below, upto, n, 1 - q_low, half, rows, prior[1:]) + 1
            inner = edges[1:-1]
            lower = edges[max(min(j_low, len(edges) - 2), 1)]
            upper = edges[min(max(j_high, 1), len(edges) - 2)]
            if upper <= lower:
                position = inner.index(lower) if lower in inner else 0
                upper = inner[min(position + 1, len(inner) - 1)]
            return lower, upper

        return plan, choose

    def estimate_bounds(
        self,
        column: str,
        *,
        epsilon: Number,
        coverage: float = 0.95,
        base: Query | None = None,
        max_rows: int | None = None,
        alpha: float = 0.05,
    ) -> BoundsEstimate:
        """Find clamping bounds for ``column`` privately, spending ``epsilon`` (ε-DP).

        Two exponential-mechanism quantiles (each ε/2) at ``(1-coverage)/2`` and
        ``(1+coverage)/2`` over the public grid ``0, ±2^-20 .. ±2^60`` (see
        :mod:`dpkit.analytics._bounding`). ``base`` may filter or derive columns first.
        """
        self._check_open()
        eps = _check_floor("epsilon", check_epsilon(epsilon), epsilon)
        if not 0 < coverage < 1:
            raise InvalidParameterError("coverage", coverage, "in (0, 1), e.g. 0.95")
        if not 0 < alpha < 1:
            raise InvalidParameterError("alpha", alpha, "in (0, 1), e.g. 0.05")
        probe = (base or Query()).bound(max_rows=max_rows).agg(count())
        checked = validate(probe, self.schema, self.privacy_unit)
        if column not in checked.schema or checked.schema[column] != "numeric":
            raise InvalidParameterError("column", column, "a numeric column of the table")
        loss = PureDP(eps)
        half = eps / 2
        plan, choose_with = self._bounds_plan(
            column, checked, max_rows, int(random_words(1)[0] >> np.uint64(2)), coverage
        )
        edges = plan.bins.edges if plan.bins is not None else ()
        prior = _magnitude_penalty(edges)
        rows = contribution(self.defaults.merged(Bounding(max_rows=max_rows)), False).rows_l1

        def choose(counts: np.ndarray) -> tuple[float, float]:
            return cast("tuple[float, float]", choose_with(counts, eps))

        # everything public runs before the reservation: the engine's SQL, the rank bounds, and
        # the selection on an empty table (a failure there is a refusal, never after the charge)
        def rehearse() -> tuple[float, float]:
            check_engine(self.engine, plan)
            error_at_zero = penalised_rank_error_bound(prior[:-1], half, rows, alpha, Fraction(0))
            per_doubling = 2 * rows / float(half) * float(_PENALTY_PER_DOUBLING)
            choose(np.zeros(len(edges) - 1, dtype=np.int64))
            return error_at_zero, per_doubling

        public: list[tuple[float, float]] = []

        def body(stage: Stage) -> tuple[float, float]:
            stage(reading=True)
            table = self.engine.run(plan).to_pydict()
            stage(reading=False)
            counts = np.zeros(len(edges) - 1, dtype=np.int64)
            bins, values = table[plan.group_columns[0]], table[plan.output_columns[0]]
            counts[np.asarray(bins, dtype=np.int64)] = np.asarray(values, dtype=np.int64)
            return choose(counts)

        (lower, upper), receipt = release(
            self._books,
            loss,
            body,
            query=f"estimate_bounds({column!r}, coverage={coverage})",
            mechanism="exponential",
            rehearse=lambda: public.append(rehearse()),
            rehearsing="checking the bounds estimate",
        )
        error_at_zero, per_doubling = public[0]
        return BoundsEstimate(lower, upper, loss, error_at_zero, receipt, per_doubling)

    def tune(
        self,
        query: Query,
        *,
        epsilon: Number,
        spend: PrivacyLoss | None = None,
        alpha: float = 0.05,
        mechanism: Mechanism = "auto",
    ) -> Any:
        """Choose ``query``'s contribution and clamping bounds privately, spending ``epsilon``
        (ε-DP, one release through the ledger), and forecast its error before its budget is
        spent.

        What is chosen (only what neither the query nor the session declares): ``max_rows``,
        the cap that minimises the forecast error, from a noisy histogram of the rows each
        privacy unit has after the query's filters (counted in the engine); ``max_groups``
        (grouped queries), the noisy 95th percentile of groups per unit; the clamping bounds of
        each aggregation written without bounds whose column has none registered (the
        estimator of :meth:`estimate_bounds`). ``epsilon`` is split equally among these parts
        (and, with private group keys, a histogram of units per group that forecasts the
        groups partition selection suppresses), but each column of a sum or mean with known
        bounds gets half a share (a noisy sum that estimates where its values lie, for the
        forecast); the charge is their composition.

        Returns a :class:`~dpkit.analytics._tuning.Tuning`: ``.query`` (the tuned query, to
        pass to :meth:`evaluate`, or not) and ``.report`` (expected std, half-width, bias and
        RMSE of each aggregation if released with ``spend``, default the budget left after
        tuning; the estimated share of rows dropped; the groups likely suppressed). The report
        is post-processing of the tuning release: free. See docs/analytics.md, "Tuning".

        Raises:
            DPError: a bad parameter or query, or too little budget left: before anything is
                reserved; nothing is charged.

        Example:
            >>> import numpy as np, pandas as pd, dpkit as dp
            >>> from dpkit.analytics import Session, count
            >>> df = pd.DataFrame({"user": np.repeat(np.arange(500), 3), "x": 1.0})
            >>> session = Session(df, privacy_unit="user", budget=dp.PureDP(2))
            >>> query, report = session.tune(session.query().agg(count()), epsilon=0.5)
            >>> report.max_rows >= 1, session.remaining
            (True, PureDP(epsilon=Fraction(3, 2)))
        """
        from dpkit.analytics._tuning import tune

        self._check_open()
        _check_floor("epsilon", check_epsilon(epsilon), epsilon)
        return tune(self, query, epsilon=epsilon, spend=spend, alpha=alpha, mechanism=mechanism)

    def sample_and_aggregate(
        self,
        fn: Any,
        *,
        columns: Any,
        output_range: tuple[Number, Number],
        n_range: tuple[int, int],
        output_shape: Any = 1,
        m: int | None = None,
        accuracy: Number | None = None,
        aggregator: str = "winsorized_mean",
        epsilon: Number | None = None,
        delta: Number | None = None,
        rho: Number | None = None,
        loss: PrivacyLoss | None = None,
        default: Number | None = None,
        widen: Number = 1,
        min_block_units: int = 10,
        base: Query | None = None,
        probe: Any = None,
        names: Any = None,
    ) -> TableRelease:
        """Run any function on m random blocks of privacy units and aggregate the outputs
        privately (sample-and-aggregate; Nissim, Raskhodnikova & Smith 2007; Smith 2011).

        The engine hashes every privacy unit with a fresh secret salt into one of ``m`` blocks
        (DuckDB in SQL, pandas with SipHash, Spark with ``applyInPandas``); ``fn`` receives one
        block's rows as a pandas DataFrame of ``columns`` and returns an array of
        ``output_shape``; the m outputs, clamped into ``output_range``, are aggregated with
        ``aggregator`` (``"winsorized_mean"``, ``"inverse_median"``, ``"smooth_median"``, or
        any other aggregator :func:`dpkit.sensitivity.make_sample_and_aggregate` offers).

        Guarantee: ε-DP when one privacy unit's rows are added or removed (one block changes).
        A block whose ``fn`` raises, returns another shape, or NaN/inf gets the public
        ``default`` (the centre of ``output_range`` unless given): which block failed is never
        raised, logged or released. Every parameter is checked before anything is reserved or
        read: ``m < 2``, ``m`` above the smallest declared number of units (``n_range[0]``),
        a bad range, shape or aggregator, or a ``probe`` frame on which ``fn`` fails raise a
        :class:`~dpkit.errors.DPError`. Budget as in :meth:`evaluate` (``rho=`` runs at
        ε = √(2ρ)). See docs/analytics.md ("Sample-and-aggregate") and docs/sensitivity.md §10.

        Args:
            fn: a function of a pandas DataFrame (one block's rows) returning an array.
            columns: the columns ``fn`` sees (after ``base``'s filters and derived columns).
            output_range: (lo, hi): every output coordinate is clamped into it (public).
            n_range: (n_min, n_max), the declared range of the number of privacy units.
            output_shape: the shape of ``fn``'s output.
            m: the number of blocks; or None with ``accuracy=`` to let
                :func:`dpkit.sensitivity.choose_m` pick it from public inputs.
            accuracy: the target error used by ``choose_m`` when ``m`` is None.
            base: an optional query whose filters/derived columns apply first.
            probe: public example rows (a DataFrame): ``fn(probe)`` is checked up front.
            names: the released columns' names (default ``value`` or ``value_0, value_1...``).

        Example:
            >>> import numpy as np, pandas as pd, dpkit as dp
            >>> from dpkit.analytics import Session
            >>> df = pd.DataFrame({"user": np.arange(2000), "x": np.linspace(0, 10, 2000)})
            >>> session = Session(df, privacy_unit="user", budget=dp.PureDP(1))
            >>> release = session.sample_and_aggregate(
            ...     lambda rows: rows["x"].mean(), columns=["x"], output_range=(0, 10),
            ...     n_range=(1000, 10_000), m=50, epsilon=1)
            >>> list(release.table.columns), release.loss
            (['value'], PureDP(epsilon=Fraction(1, 1)))
        """
        from dpkit.analytics._sample_aggregate import run_sample_and_aggregate

        self._check_open()
        return run_sample_and_aggregate(
            self,
            fn,
            columns=columns,
            output_range=output_range,
            n_range=n_range,
            output_shape=output_shape,
            m=m,
            accuracy=accuracy,
            aggregator=aggregator,
            default=default,
            widen=widen,
            min_block_units=min_block_units,
            base=base,
            probe=probe,
            names=names,
            budget=_query_budget(epsilon, delta, rho, loss),
        )

    # ------------------------------------------------------------------ budget
    @property
    def remaining(self) -> PrivacyLoss:
        """The budget left for this session's dataset (or analyst)."""
        return self.ledger.remaining(self.dataset, self.analyst)

    @property
    def spent(self) -> PrivacyLoss:
        return self.ledger.spent(self.dataset, self.analyst)

    def close(self) -> None:
        """Release the engine's resources (the ledger stays open: it may be shared). A closed
        session refuses every query before anything is reserved."""
        self._closed = True
        if self.tables is not None:
            self.tables.close()
        else:
            self.engine.close()

    @property
    def _books(self) -> Books:
        """Where this session's releases are charged (see :func:`dpkit._door.release`)."""
        return Books(self.ledger, self.dataset, self.analyst, self.privacy_unit)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidParameterError(
                "session",
                "closed",
                "an open session",
                "This session was closed: nothing was reserved or read. Open a new Session.",
            )

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Session(dataset={self.dataset!r}, privacy_unit={self.privacy_unit!r}, "
            f"engine={self.engine.name!r}, remaining={self.remaining})"
        )
