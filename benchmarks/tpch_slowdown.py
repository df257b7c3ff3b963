"""Reproduce the intermittent TPC-H slowdown of docs/joins.md ("Speed"): one process holds the
in-process service (every query registered and asked twice) beside a Python session, and runs
each query through both; in about one process in five the session's warm Q18 takes 1.4-1.9 s
instead of 0.6 s for the life of the process. The last line of each round gives Q18's two
warm times and how long the session's relation step (``DuckDBEngine._run_relation``: the
temporary table of the joined rows, then the bounded query) took in each of its three runs.

    python benchmarks/tpch_slowdown.py --dir /tmp/tpch-1      # repeat until a slow process
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import tpch_frontends as frontends
from dpkit.analytics._engines import _duckdb

STEPS: list[float] = []
_relation = _duckdb.DuckDBEngine._run_relation


def _timed_relation(self: Any, plan: Any) -> Any:
    start = time.perf_counter()
    try:
        return _relation(self, plan)
    finally:
        STEPS.append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="TPC-H Parquet files")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    _duckdb.DuckDBEngine._run_relation = _timed_relation  # type: ignore[method-assign]
    bench = frontends.tpch()
    names = list(bench.QUERIES)
    with tempfile.TemporaryDirectory() as scratch:
        session = bench._session(args.dir, "duckdb", 1.0)
        with frontends.service(args.dir, Path(scratch)) as client:
            token = frontends.register(client, names)
            for round_ in range(args.rounds):
                for name in names:
                    STEPS.clear()
                    times = bench.run_query(session, bench.QUERIES[name], {}, 2, 1).times
                    steps = list(STEPS)
                    for _ in range(2):
                        frontends.ask(client, token, name)
                    if name == "Q18":
                        print(
                            f"round {round_}: Q18 warm {' '.join(f'{t:.3f}' for t in times)} s; "
                            f"relation steps {' '.join(f'{t:.3f}' for t in steps)} s",
                            flush=True,
                        )
        session.close()


if __name__ == "__main__":
    main()
