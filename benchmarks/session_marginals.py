"""End to end: a Session ``marginals`` query on DuckDB vs the plain DuckDB GROUP BY per marginal.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/session_marginals.py [--rows 10000000]

A table of ``--rows`` rows (about 10 rows per privacy unit, 4 attributes with 10, 8, 12 and 6
values) is built once as an Arrow table; both sides scan that same table in the same process:

* plain: ``SELECT a, b, COUNT(*) FROM t GROUP BY ALL`` for each of the 6 two-way marginals
  (no contribution bounding, no noise);
* dpkit: ``Session(table, privacy_unit="uid", max_rows=10).evaluate(query().agg(marginals(
  "all_2way", domains=...)), rho=1)``: ledger reservation, the bounded plans (at most 10 rows
  per unit, values outside the declared domains dropped, one GROUP BY over the four columns),
  OPT_M planning and the exact lattice release, with the result tables built.
"""

from __future__ import annotations

import argparse
import time

import duckdb

import dpkit as dp
from dpkit.analytics import Session, marginals

DOMAINS = {"a": list(range(10)), "b": list(range(8)), "c": list(range(12)), "d": list(range(6))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    rows = args.rows
    con = duckdb.connect()
    table = con.sql(
        f"SELECT i % {max(1, rows // 10)} AS uid, (i * 7) % 11 AS a, (i * 13) % 8 AS b, "
        f"(i * 31) % 12 AS c, (i * 17) % 6 AS d FROM range({rows}) r(i)"
    ).arrow()
    if hasattr(table, "read_all"):  # newer DuckDB returns a record batch reader
        table = table.read_all()
    con.register("t", table)
    names = list(DOMAINS)
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
    session = Session(table, privacy_unit="uid", budget=dp.ZCDP(100), max_rows=10)
    query = session.query().agg(marginals("all_2way", domains=DOMAINS, name="m"))
    t = time.perf_counter()
    explanation = session.explain(query, rho=1)
    compile_secs = time.perf_counter() - t
    print(explanation)
    for _ in range(args.repeat):
        t = time.perf_counter()
        for x, y in pairs:
            con.execute(f"SELECT {x}, {y}, COUNT(*) FROM t GROUP BY ALL").fetchall()
        plain = time.perf_counter() - t
        t = time.perf_counter()
        release = session.evaluate(query, rho=1)
        secs = time.perf_counter() - t
        assert len(release.tables["m"]) == sum(len(DOMAINS[x]) * len(DOMAINS[y]) for x, y in pairs)
        print(f"\n| end to end ({rows:,} rows, 4 attributes, 6 two-way marginals) | seconds |")
        print("|---|---|")
        print(f"| plain DuckDB GROUP BY per marginal (no bounding, no noise) | {plain:.2f} |")
        print(f"| dpkit: compile / explain (OPT_M, cached afterwards) | {compile_secs:.2f} |")
        print(
            f"| dpkit Session marginals query (max_rows=10 per uid; bounded GROUP BY, OPT_M, "
            f"exact release, ledger) | {secs:.2f} ({secs / plain:.2f}× plain) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
