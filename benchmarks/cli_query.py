"""The whole ``dpkit query`` process beside DuckDB's Python one-shot for the same query (issue 26).

A 28,155-row CSV (person, year, sex, region, edu, wage; ~4.7 rows per person, at most 15), one
query: COUNT(*) and a mean of wage by four public keys (10 x 2 x 4 x 4 = 320 groups), ε = 1, at
most 10 rows per person. DuckDB runs the same GROUP BY without privacy as
``python -c "import duckdb; duckdb.sql(...).show(max_rows=1000)"`` (both print the 320 rows).
Each run is a fresh process; the two are interleaved, after one warm-up each (which also writes
the bytecode caches an installed package has). Wall time and CPU time (user + system of the
child) are reported as medians, with the load average, since the machine may be shared.

    PYTHONPATH=src .venv/bin/python benchmarks/cli_query.py --runs 9 [--before OTHER/src]

``--before`` also runs ``dpkit query`` from another source tree (e.g. a checkout of an older
commit), interleaved with the others, to compare versions in one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

KEYS = [
    "--keys",
    "year=" + ",".join(str(y) for y in range(2000, 2010)),
    "--keys",
    "sex=F,M",
    "--keys",
    "region=1,2,3,4",
    "--keys",
    "edu=1,2,3,4",
]
DP_QUERY = (
    "SELECT year, sex, region, edu, COUNT(*) AS n, AVG(wage, 0, 5000) AS w "
    "GROUP BY year, sex, region, edu"
)


def write_csv(path: Path, rows: int, seed: int = 26) -> None:
    """``rows`` rows of ~6,000 people (1 to 15 rows each), written with numpy."""
    rng = np.random.default_rng(seed)
    person = np.sort(rng.integers(0, max(rows // 5, 1) + 1000, rows))
    year = rng.integers(2000, 2010, rows)
    sex = np.where(rng.random(rows) < 0.5, "F", "M")
    region = rng.integers(1, 5, rows)
    edu = rng.integers(1, 5, rows)
    wage = np.round(rng.lognormal(7.2, 0.6, rows), 2)
    with path.open("w", encoding="utf-8") as handle:
        handle.write("person,year,sex,region,edu,wage\n")
        for row in zip(person, year, sex, region, edu, wage, strict=True):
            handle.write(",".join(str(v) for v in row) + "\n")


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]} failed:\n{done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--rows", type=int, default=28_155)
    parser.add_argument("--before", type=Path, help="another dpkit source tree to time too")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        data, ledger = Path(tmp) / "q.csv", Path(tmp) / "ledger.sqlite"
        write_csv(data, args.rows)
        dpkit = [sys.executable, "-m", "dpkit"]
        create = ["budget", "create", "q", "--epsilon", str(2 * args.runs + 10)]
        subprocess.run(
            [*dpkit, *create, "--unit", "person", "--ledger", str(ledger)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        ours = [*dpkit, "query", str(data), DP_QUERY, "--dataset", "q", "--ledger", str(ledger)]
        ours += ["--epsilon", "1", "--schema", "wage=float,year=int,region=int,edu=int"]
        ours += [*KEYS, "--max-rows", "10"]
        plain = (
            "SELECT year, sex, region, edu, COUNT(*) AS n, AVG(wage) AS w "
            f"FROM read_csv('{data}') GROUP BY year, sex, region, edu"
        )
        theirs = [
            sys.executable,
            "-c",
            f'import duckdb; duckdb.sql("{plain}").show(max_rows=1000)',
        ]
        commands = {"dpkit query": (ours, env), "DuckDB one-shot": (theirs, env)}
        if args.before is not None:
            old = {**env, "PYTHONPATH": str(args.before.resolve())}
            commands["dpkit query (--before)"] = (ours, old)
        for command, where in commands.values():
            timed(command, where)  # warm-up: bytecode caches, file cache
        load_before = os.getloadavg()
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, (command, where) in commands.items():
                runs[name].append(timed(command, where))
        load_after = os.getloadavg()
    wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    print(f"{args.rows:,}-row CSV, {args.runs} interleaved runs, medians")
    print(
        f"load average (1, 5, 15 min): before {', '.join(f'{x:.1f}' for x in load_before)}; "
        f"after {', '.join(f'{x:.1f}' for x in load_after)}"
    )
    base = "DuckDB one-shot"
    print(f"{'':26s}{'wall s':>8s}{'CPU s':>8s}{'wall ratio':>12s}{'CPU ratio':>11s}")
    for name in runs:
        print(
            f"{name:26s}{wall[name]:8.3f}{cpu[name]:8.3f}"
            f"{wall[name] / wall[base]:11.2f}x{cpu[name] / cpu[base]:10.2f}x"
        )


if __name__ == "__main__":
    main()
