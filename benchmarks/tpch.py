"""TPC-H with differential privacy: the DP forms of ten TPC-H queries, each beside the same query
without privacy on DuckDB over the same Parquet files (error, interval coverage and time).

The privacy unit is the customer (``customer.c_custkey``): orders link by ``o_custkey``, line
items through ``l_orderkey``; nation, region, supplier and part are public. Each query runs
``--runs`` times through ``Session.evaluate_sql`` (the whole release: planning, ledger, engine,
noise) at ``--epsilon`` per query; the table reports the median over released values of the
relative error against the non-private answer, how many released values' 95 % intervals
covered the non-private answer (over all runs), dpkit's median time (warm: after one first
run, which computes the links' key maps once per session) and DuckDB's, and their ratio, in
wall time and in process CPU time (every thread). Each DP run follows a run of the same query
without privacy, so both see the same machine: on a shared machine the CPU ratio is the steadier.
``QUERIES`` says for each query what changed from the original and why.

    ../shared/tools/tpch.sh 1 /tmp/tpch-1      # the tables as Parquet (offline)
    python benchmarks/tpch.py --dir /tmp/tpch-1 --runs 5
    python benchmarks/tpch.py --dir /tmp/tpch-1 --queries Q1 Q13 --engine pandas
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRIVATE = ("customer", "orders", "lineitem")
PUBLIC = ("nation", "region", "supplier", "part")
LINKS = {"orders.o_custkey": "customer.c_custkey", "lineitem.l_orderkey": "orders.o_orderkey"}
UNIT = "customer.c_custkey"
NATIONS = [
    "ALGERIA", "ARGENTINA", "BRAZIL", "CANADA", "EGYPT", "ETHIOPIA", "FRANCE", "GERMANY",
    "INDIA", "INDONESIA", "IRAN", "IRAQ", "JAPAN", "JORDAN", "KENYA", "MOROCCO", "MOZAMBIQUE",
    "PERU", "CHINA", "ROMANIA", "SAUDI ARABIA", "VIETNAM", "RUSSIA", "UNITED KINGDOM",
    "UNITED STATES",
]  # fmt: skip
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
REVENUE = "l_extendedprice * (1 - l_discount)"


@dataclass(frozen=True)
class TPCHQuery:
    dp: str  # the DP form (dpkit SQL: aggregates declare their bounds)
    plain: str  # the same question without privacy (DuckDB SQL)
    keys: dict[str, list[Any]] = field(default_factory=dict)  # public group keys
    max_rows: int = 180  # rows per customer after the joins (at SF 1 a customer has <= 178)
    changed: str = ""


QUERIES: dict[str, TPCHQuery] = {
    "Q1": TPCHQuery(
        "SELECT l_returnflag, l_linestatus, SUM(l_quantity, 0, 50) AS sum_qty, "
        "SUM(l_extendedprice, 0, 105000) AS sum_base_price, "
        f"SUM({REVENUE}, 0, 105000) AS sum_disc_price, "
        f"SUM({REVENUE} * (1 + l_tax), 0, 115000) AS sum_charge, "
        "AVG(l_quantity, 0, 50) AS avg_qty, AVG(l_extendedprice, 0, 105000) AS avg_price, "
        "AVG(l_discount, 0, 0.1) AS avg_disc, COUNT(*) AS count_order FROM lineitem "
        "WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus",
        "SELECT l_returnflag, l_linestatus, SUM(l_quantity) AS sum_qty, "
        "SUM(l_extendedprice) AS sum_base_price, "
        f"SUM({REVENUE}) AS sum_disc_price, SUM({REVENUE} * (1 + l_tax)) AS sum_charge, "
        "AVG(l_quantity) AS avg_qty, AVG(l_extendedprice) AS avg_price, "
        "AVG(l_discount) AS avg_disc, COUNT(*) AS count_order FROM lineitem "
        "WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus",
        {"l_returnflag": ["A", "N", "R"], "l_linestatus": ["F", "O"]},
        changed="bounds on every aggregate (the spec's value ranges); the six flag/status "
        "pairs are public keys (two are empty and come out as noise around 0)",
    ),
    "Q3": TPCHQuery(
        "SELECT o_shippriority, SUM(" + REVENUE + ", 0, 105000) AS revenue, "
        "COUNT(*) AS lines FROM customer JOIN orders ON c_custkey = o_custkey "
        "JOIN lineitem ON l_orderkey = o_orderkey WHERE c_mktsegment = 'BUILDING' "
        "AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15' "
        "GROUP BY o_shippriority",
        "SELECT o_shippriority, SUM(" + REVENUE + ") AS revenue, COUNT(*) AS lines "
        "FROM customer JOIN orders ON c_custkey = o_custkey "
        "JOIN lineitem ON l_orderkey = o_orderkey WHERE c_mktsegment = 'BUILDING' "
        "AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15' "
        "GROUP BY o_shippriority",
        {"o_shippriority": [0]},
        changed="the top 10 orders by revenue (each one person's order) replaced by the "
        "revenue and line count of all such orders",
    ),
    "Q4": TPCHQuery(
        "SELECT o_orderpriority, COUNT(*) AS order_count FROM (SELECT o_custkey, o_orderkey, "
        "o_orderpriority, COUNT(*) AS late FROM orders JOIN lineitem ON l_orderkey = "
        "o_orderkey WHERE o_orderdate >= DATE '1993-07-01' AND o_orderdate < DATE "
        "'1993-10-01' AND l_commitdate < l_receiptdate GROUP BY o_custkey, o_orderkey, "
        "o_orderpriority) AS late_orders GROUP BY o_orderpriority",
        "SELECT o_orderpriority, COUNT(*) AS order_count FROM orders WHERE o_orderdate >= "
        "DATE '1993-07-01' AND o_orderdate < DATE '1993-10-01' AND EXISTS (SELECT * FROM "
        "lineitem WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate) "
        "GROUP BY o_orderpriority",
        {"o_orderpriority": PRIORITIES},
        max_rows=8,
        changed="EXISTS (a correlated subquery) written as a per-order subquery grouped "
        "with the customer (a per-person table); at most 8 late orders per customer in "
        "the quarter",
    ),
    "Q5": TPCHQuery(
        "SELECT n_name, SUM(" + REVENUE + ", 0, 105000) AS revenue FROM customer "
        "JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
        "JOIN supplier ON l_suppkey = s_suppkey AND c_nationkey = s_nationkey "
        "JOIN nation ON s_nationkey = n_nationkey JOIN region ON n_regionkey = r_regionkey "
        "WHERE r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01' "
        "AND o_orderdate < DATE '1995-01-01' GROUP BY n_name ORDER BY revenue DESC",
        "SELECT n_name, SUM(" + REVENUE + ") AS revenue FROM customer "
        "JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
        "JOIN supplier ON l_suppkey = s_suppkey AND c_nationkey = s_nationkey "
        "JOIN nation ON s_nationkey = n_nationkey JOIN region ON n_regionkey = r_regionkey "
        "WHERE r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01' "
        "AND o_orderdate < DATE '1995-01-01' GROUP BY n_name",
        {"n_name": ["INDIA", "INDONESIA", "JAPAN", "CHINA", "VIETNAM"]},
        max_rows=8,
        changed="bounds; the five ASIA nations are public keys; at most 8 such lines per "
        "customer in the year; the comma joins written as JOIN ... ON (the ORDER BY is "
        "post-processing of the released values)",
    ),
    "Q6": TPCHQuery(
        "SELECT SUM(l_extendedprice * l_discount, 0, 10500) AS revenue FROM lineitem "
        "WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
        "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
        "SELECT SUM(l_extendedprice * l_discount) AS revenue FROM lineitem "
        "WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
        "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
        changed="bounds only",
    ),
    "Q10": TPCHQuery(
        "SELECT n_name, SUM(" + REVENUE + ", 0, 105000) AS revenue, "
        "COUNT(DISTINCT c_custkey) AS customers FROM customer "
        "JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
        "JOIN nation ON c_nationkey = n_nationkey WHERE o_orderdate >= DATE '1993-10-01' "
        "AND o_orderdate < DATE '1994-01-01' AND l_returnflag = 'R' GROUP BY n_name",
        "SELECT n_name, SUM(" + REVENUE + ") AS revenue, COUNT(DISTINCT c_custkey) AS "
        "customers FROM customer JOIN orders ON c_custkey = o_custkey "
        "JOIN lineitem ON l_orderkey = o_orderkey JOIN nation ON c_nationkey = n_nationkey "
        "WHERE o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01' "
        "AND l_returnflag = 'R' GROUP BY n_name",
        {"n_name": NATIONS},
        max_rows=20,
        changed="the top 20 customers by lost revenue (with their names, addresses and "
        "phones) replaced by the lost revenue and the number of such customers per nation; at "
        "most 20 returned lines per customer in the quarter",
    ),
    "Q12": TPCHQuery(
        "SELECT l_shipmode, SUM(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = "
        "'2-HIGH' THEN 1 ELSE 0 END, 0, 1) AS high_line_count, SUM(CASE WHEN "
        "o_orderpriority <> '1-URGENT' AND o_orderpriority <> '2-HIGH' THEN 1 ELSE 0 END, 0, "
        "1) AS low_line_count FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
        "WHERE l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate "
        "AND l_shipdate < l_commitdate AND l_receiptdate >= DATE '1994-01-01' "
        "AND l_receiptdate < DATE '1995-01-01' GROUP BY l_shipmode",
        "SELECT l_shipmode, SUM(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = "
        "'2-HIGH' THEN 1 ELSE 0 END) AS high_line_count, SUM(CASE WHEN o_orderpriority <> "
        "'1-URGENT' AND o_orderpriority <> '2-HIGH' THEN 1 ELSE 0 END) AS low_line_count "
        "FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
        "WHERE l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate "
        "AND l_shipdate < l_commitdate AND l_receiptdate >= DATE '1994-01-01' "
        "AND l_receiptdate < DATE '1995-01-01' GROUP BY l_shipmode",
        {"l_shipmode": ["MAIL", "SHIP"]},
        max_rows=40,
        changed="the two ship modes are public keys; at most 40 such lines per customer",
    ),
    "Q13": TPCHQuery(
        "SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, COUNT(o_orderkey) AS "
        "c_count FROM customer LEFT JOIN orders ON c_custkey = o_custkey AND o_comment NOT "
        "LIKE '%special%requests%' GROUP BY c_custkey) AS c_orders GROUP BY c_count",
        "SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, COUNT(o_orderkey) AS "
        "c_count FROM customer LEFT JOIN orders ON c_custkey = o_custkey AND o_comment NOT "
        "LIKE '%special%requests%' GROUP BY c_custkey) AS c_orders GROUP BY c_count",
        {"c_count": list(range(51))},
        max_rows=1,
        changed="the order counts 0..50 are public keys (a customer has at most 41 orders "
        "at SF 1, so none is left out); one row per customer",
    ),
    "Q14": TPCHQuery(
        "SELECT SUM(CASE WHEN p_type LIKE 'PROMO%' THEN " + REVENUE + " ELSE 0 END, 0, "
        "105000) AS promo_revenue, SUM(" + REVENUE + ", 0, 105000) AS revenue FROM lineitem "
        "JOIN part ON l_partkey = p_partkey WHERE l_shipdate >= DATE '1995-09-01' "
        "AND l_shipdate < DATE '1995-10-01'",
        "SELECT SUM(CASE WHEN p_type LIKE 'PROMO%' THEN " + REVENUE + " ELSE 0 END) AS "
        "promo_revenue, SUM(" + REVENUE + ") AS revenue FROM lineitem "
        "JOIN part ON l_partkey = p_partkey WHERE l_shipdate >= DATE '1995-09-01' "
        "AND l_shipdate < DATE '1995-10-01'",
        max_rows=40,
        changed="the two sums are released and the percentage 100 * promo / total is "
        "post-processing (arithmetic over aggregates is not part of the SQL); at most 40 lines "
        "per customer in the month",
    ),
    "Q18": TPCHQuery(
        "SELECT COUNT(*) AS large_orders, SUM(qty, 0, 350) AS quantity FROM (SELECT "
        "o_custkey, o_orderkey, SUM(l_quantity) AS qty FROM orders JOIN lineitem ON "
        "o_orderkey = l_orderkey GROUP BY o_custkey, o_orderkey HAVING SUM(l_quantity) > 300) "
        "AS big",
        "SELECT COUNT(*) AS large_orders, SUM(qty) AS quantity FROM (SELECT o_orderkey, "
        "SUM(l_quantity) AS qty FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
        "GROUP BY o_orderkey HAVING SUM(l_quantity) > 300) AS big",
        max_rows=1,
        changed="the list of large orders with their customers replaced by how many there "
        "are and their total quantity; one large order per customer counts; an order's "
        "quantity bounded by the spec's range (at most 7 lines of at most 50)",
    ),
}


def _session(directory: Path, engine: str, epsilon: float) -> Any:
    import dpkit as dp
    from dpkit.analytics import Session

    return Session(
        {t: str(directory / f"{t}.parquet") for t in PRIVATE},
        privacy_unit=UNIT,
        links=LINKS,
        public={t: str(directory / f"{t}.parquet") for t in PUBLIC},
        budget=dp.PureDP(10_000 * epsilon),
        engine=engine,
    )


def _plain_connection(directory: Path) -> Any:
    import duckdb

    con = duckdb.connect()
    for t in (*PRIVATE, *PUBLIC):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{directory / t}.parquet')")
    return con


def _cpu() -> float:
    """This process's CPU time so far (every thread: DuckDB's too)."""
    times = os.times()
    return times.user + times.system


def _plain(directory: Path, sql: str) -> tuple[Any, float]:
    con = _plain_connection(directory)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        frame = con.sql(sql).df()
        times.append(time.perf_counter() - start)
    con.close()
    return frame, statistics.median(times)


def _by_key(frame: Any, keys: list[str]) -> dict[tuple[Any, ...], dict[str, float]]:
    out = {}
    for row in frame.to_dict("records"):
        key = tuple(row[k] for k in keys)
        out[key] = {c: float(v) for c, v in row.items() if c not in keys and v is not None}
    return out


@dataclass
class Outcome:
    errors: list[float] = field(default_factory=list)
    covered: int = 0
    intervals: int = 0
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    plain_times: list[float] = field(default_factory=list)
    plain_cpu: list[float] = field(default_factory=list)


def run_query(
    session: Any,
    query: TPCHQuery,
    truth: Any,
    runs: int,
    epsilon: float,
    plain: Any = None,
) -> Outcome:
    """``runs`` releases of ``query`` (after a first, untimed one), scored against ``truth``;
    with ``plain`` (a DuckDB connection over the same files), each release follows a run of
    the same query without privacy, so that both see the same machine (wall and CPU time)."""
    outcome = Outcome()
    keys = list(query.keys)
    for i in range(runs + 1):
        if plain is not None and i > 0:
            start, cpu = time.perf_counter(), _cpu()
            plain.sql(query.plain).df()
            outcome.plain_times.append(time.perf_counter() - start)
            outcome.plain_cpu.append(_cpu() - cpu)
        start, cpu = time.perf_counter(), _cpu()
        release = session.evaluate_sql(
            query.dp, keys=query.keys or None, max_rows=query.max_rows, epsilon=epsilon
        )
        elapsed, used = time.perf_counter() - start, _cpu() - cpu
        if i == 0:
            continue  # the first run computes the links' key maps (once per session)
        outcome.times.append(elapsed)
        outcome.cpu.append(used)
        for row in release.table.to_dict("records"):
            true = truth.get(tuple(row[k] for k in keys))
            if true is None:
                continue  # a public key with no rows: its value is noise around 0
            for column, value in true.items():
                if column not in row or not math.isfinite(value):
                    continue
                if value != 0:
                    outcome.errors.append(abs(float(row[column]) - value) / abs(value))
                low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
                if low is not None and high is not None:
                    outcome.intervals += 1
                    outcome.covered += int(low <= value <= high)
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="TPC-H Parquet files")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--engine", default="duckdb", choices=["duckdb", "pandas", "spark"])
    parser.add_argument("--queries", nargs="*", default=list(QUERIES))
    args = parser.parse_args()
    session = _session(args.dir, args.engine, args.epsilon)
    print(
        f"TPC-H from {args.dir}, ε = {args.epsilon} per query, {args.runs} runs, "
        f"dpkit on {args.engine} vs DuckDB without privacy"
    )
    head = (
        f"{'query':6} {'median rel. error':>18} {'covered':>12} {'dpkit s':>8} "
        f"{'DuckDB s':>9} {'ratio':>6} {'CPU ratio':>10}"
    )
    print(head)
    print("-" * len(head))
    plain = _plain_connection(args.dir)
    for name in args.queries:
        query = QUERIES[name]
        frame = plain.sql(query.plain).df()  # (also warms DuckDB's caches)
        truth = _by_key(frame, list(query.keys))
        outcome = run_query(session, query, truth, args.runs, args.epsilon, plain)
        error = statistics.median(outcome.errors) if outcome.errors else float("nan")
        dp_time, plain_time = (
            statistics.median(outcome.times),
            statistics.median(outcome.plain_times),
        )
        cpu_ratio = statistics.median(outcome.cpu) / max(statistics.median(outcome.plain_cpu), 1e-9)
        print(
            f"{name:6} {error:>17.2%} {outcome.covered:>6}/{outcome.intervals:<5} "
            f"{dp_time:>8.3f} {plain_time:>9.3f} {dp_time / plain_time:>5.1f}x {cpu_ratio:>9.1f}x"
        )
    plain.close()
    session.close()
    print()
    for name in args.queries:
        print(f"{name}: {QUERIES[name].changed}")


if __name__ == "__main__":
    main()
