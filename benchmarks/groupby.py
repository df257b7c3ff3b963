"""DP count and DP sum per group: dpkit on DuckDB and Spark beside the same query without privacy
on DuckDB and on Spark (the limits), and OpenDP Polars.

Generates (seeded) N rows — user_id with about N/5 distinct users having 1-9 rows each, a public
group key with 100 values, a value uniform on [0, 100] — in chunks of 5M rows to a Parquet file.
Task: DP count and DP sum per group, at most 10 rows per user, values clamped to [0, 100], ε = 1
(for dpkit: the whole ``Session.evaluate`` — planning, ledger, engine, noise).

Each system runs in its own subprocess, so peak memories do not mix. Below ``--parquet-from``
rows (default 50M) a worker loads the table into memory first (an Arrow table; a cached Spark
DataFrame; a Polars frame) and reports the process peak during the run (VmHWM, reset after
loading) and the peak above the loaded data (that minus the resident size once the data was
loaded). From ``--parquet-from`` rows on every system reads the Parquet file itself (DuckDB's
``read_parquet``, ``Session(path)``, ``spark.read.parquet``, ``pl.scan_parquet``). Spark's
memory is its JVM's (a child process), measured the same way; its time is the first query's (JVM
warm-up and code generation included), and the note gives a second run's (plain Spark, the
limit for dpkit on Spark, runs the same non-private query as DuckDB's floor). The last column
is dpkit's time over its engine's limit in the same run. OpenDP's time
includes its calibration (a binary search over the noise scale). A run that does not finish
within ``--timeout`` seconds, or whose processes grow beyond ``--max-memory-gb`` resident, is
stopped and reported as such.

    python benchmarks/groupby.py --rows 1000000 10000000 100000000
    python benchmarks/groupby.py --rows 10000000 --systems floor dpkit-duckdb
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SYSTEMS = ("floor", "dpkit-duckdb", "spark", "dpkit-spark", "opendp")
LABELS = {
    "floor": "non-private DuckDB (floor)",
    "dpkit-duckdb": "dpkit on DuckDB",
    "spark": "non-private Spark local[2]",
    "dpkit-spark": "dpkit on Spark local[2]",
    "opendp": "OpenDP Polars",
}
CHUNK = 5_000_000
SEED = 20240601
KEYS = 100


# ------------------------------------------------------------------------------ data
def generate_chunk(rows: int, index: int, first_user: int) -> tuple[pa.Table, int]:
    """``rows`` rows of users first_user, first_user + 1, ... with 1-9 rows each, shuffled."""
    rng = np.random.default_rng([SEED, index])
    per_user = rng.integers(1, 10, size=rows // 4 + 10)
    user_id = np.repeat(np.arange(per_user.size, dtype=np.int64) + first_user, per_user)[:rows]
    users = int(user_id[-1] - first_user + 1) if rows else 0
    order = rng.permutation(rows)
    table = pa.table(
        {
            "user_id": user_id[order],
            "group_key": rng.integers(0, KEYS, size=rows, dtype=np.int64),
            "value": rng.uniform(0.0, 100.0, size=rows),
        }
    )
    return table, users


def write_parquet(path: Path, rows: int) -> int:
    """The N-row table, written in chunks (never all in memory); returns the number of users."""
    users = 0
    writer: pq.ParquetWriter | None = None
    try:
        for index, start in enumerate(range(0, rows, CHUNK)):
            chunk, n_users = generate_chunk(min(CHUNK, rows - start), index, users)
            users += n_users
            if writer is None:
                writer = pq.ParquetWriter(path, chunk.schema)
            writer.write_table(chunk, row_group_size=1_000_000)
    finally:
        if writer is not None:
            writer.close()
    return users


# ------------------------------------------------------------------------------ memory
def _status(pid: int | str, field: str) -> float:
    """A VmRSS / VmHWM line of /proc/<pid>/status, in MB (0 if unavailable)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _tree(root: int) -> list[int]:
    """root and its descendants (a Spark worker's JVM is a child of the Python process)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        out.extend(frontier)
    return out


class Memory:
    """Resident size after loading, and the high-water mark of a run (this process and its
    descendants), reset between the two via /proc/<pid>/clear_refs."""

    def __init__(self) -> None:
        self.pids = _tree(os.getpid())
        self.loaded = sum(_status(p, "VmRSS") for p in self.pids)
        self.resettable = True
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as handle:
                    handle.write("5")  # reset VmHWM to the current RSS
            except OSError:
                self.resettable = False

    def peak(self) -> tuple[float, float]:
        """(process peak during the run, peak above the loaded data), in MB."""
        if not self.resettable:  # pragma: no cover - kernels without clear_refs
            import resource

            own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            return own, own - self.loaded
        peak = sum(_status(p, "VmHWM") for p in self.pids)
        return peak, peak - self.loaded


# ------------------------------------------------------------------------------ systems
def _floor(path: str, in_memory: bool) -> tuple[Callable[[], Any], Callable[[], None], str]:
    import duckdb

    con = duckdb.connect()
    if in_memory:
        con.register("t", pq.read_table(path))
        source = "t"
    else:
        source = f"read_parquet('{path}')"
    sql = (
        f"SELECT group_key, count(*), sum(least(greatest(value, 0), 100)) FROM {source} "
        "GROUP BY group_key"
    )
    note = "Arrow table in memory" if in_memory else "reads the Parquet file"
    return lambda: con.sql(sql).fetchall(), con.close, note


def _spark_frame(path: str, in_memory: bool) -> tuple[Any, Any, str]:
    """A local[2] SparkSession and the table as a DataFrame (cached when ``in_memory``)."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "8g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = spark.read.parquet(path)
    if in_memory:
        frame = frame.cache()
        frame.count()
    note = "cached DataFrame" if in_memory else "reads the Parquet file"
    return spark, frame, note


def _spark(path: str, in_memory: bool) -> tuple[Callable[[], Any], Callable[[], None], str]:
    """The same query on plain Spark, without privacy (the limit for dpkit on Spark)."""
    spark, frame, note = _spark_frame(path, in_memory)
    frame.createOrReplaceTempView("t")
    sql = (
        "SELECT group_key, count(*), sum(least(greatest(value, 0), 100)) FROM t GROUP BY group_key"
    )

    def run() -> Any:
        rows = spark.sql(sql).toArrow()
        assert rows.num_rows == KEYS
        return rows

    return run, spark.stop, note


def _dpkit(
    path: str, in_memory: bool, engine: str
) -> tuple[Callable[[], Any], Callable[[], None], str]:
    import dpkit as dp
    from dpkit.analytics import Session, count
    from dpkit.analytics import sum as dp_sum

    spark = None
    source: Any
    if engine == "spark":
        spark, source, note = _spark_frame(path, in_memory)
    else:
        source = pq.read_table(path) if in_memory else path
        note = "Arrow table in memory" if in_memory else "reads the Parquet file"
    session = Session(source, "user_id", dp.PureDP(1000), engine=engine, spark=spark)
    query = (
        session.query()
        .group_by("group_key", keys=list(range(KEYS)))
        .bound(max_rows=10)
        .agg(count(), dp_sum("value", (0, 100)))
    )

    def run() -> Any:
        release = session.evaluate(query, epsilon=1)
        assert len(release.table) == KEYS
        return release

    def close() -> None:
        session.close()
        if spark is not None:
            spark.stop()

    return run, close, note


def _opendp(path: str, in_memory: bool) -> tuple[Callable[[], Any], Callable[[], None], str]:
    import opendp.prelude as odp
    import polars as pl

    odp.enable_features("contrib")
    frame = pl.read_parquet(path).lazy() if in_memory else pl.scan_parquet(path)
    rows = pq.ParquetFile(path).metadata.num_rows
    keys = pl.DataFrame({"group_key": np.arange(KEYS, dtype=np.int64)})

    def run() -> Any:
        context = odp.Context.compositor(
            data=frame,
            privacy_unit=odp.unit_of(contributions=1, identifier=pl.col("user_id")),
            privacy_loss=odp.loss_of(epsilon=1.0),
            split_evenly_over=1,
            margins=[
                odp.polars.Margin(
                    by=["group_key"], invariant="keys", max_length=rows, max_groups=KEYS
                )
            ],
        )
        query = (
            context.query()
            .truncate_per_group(10)
            .group_by("group_key")
            .agg(pl.len().dp.noise(), pl.col("value").fill_null(0).dp.sum((0.0, 100.0)))
            .with_keys(keys)
        )
        out = query.release().collect()
        assert out.height == KEYS
        return out

    note = "Polars frame in memory" if in_memory else "scans the Parquet file"
    return run, lambda: None, note + "; includes calibration"


def worker(system: str, path: str, in_memory: bool) -> None:
    """Load, reset the memory high-water mark, run once, print one JSON line."""
    warnings.simplefilter("ignore")
    if system == "floor":
        run, close, note = _floor(path, in_memory)
    elif system == "opendp":
        run, close, note = _opendp(path, in_memory)
    elif system == "spark":
        run, close, note = _spark(path, in_memory)
    else:
        run, close, note = _dpkit(path, in_memory, system.split("-")[1])
    pa.default_memory_pool().release_unused()  # Parquet decoding's slack is not the data
    memory = Memory()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    if system in ("spark", "dpkit-spark") and seconds < 120:  # the first query pays for JVM warm-up
        again = time.perf_counter()
        run()
        note += f"; a second run: {time.perf_counter() - again:.2f} s"
    peak, above = memory.peak()
    close()
    print(json.dumps({"seconds": seconds, "peak": peak, "above": above, "note": note}))


# ------------------------------------------------------------------------------ driver
def measure(
    system: str, path: Path, in_memory: bool, timeout: float, cap_mb: float
) -> dict[str, Any]:
    """Run one worker; stop it (and its JVM) after ``timeout`` s or above ``cap_mb`` resident."""
    command = [sys.executable, __file__, "--worker", system, "--data", str(path)]
    if in_memory:
        command.append("--in-memory")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            command,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,  # its own process group: stopping it ends the JVM too
        )
        start, stopped = time.monotonic(), ""
        while child.poll() is None:
            resident = sum(_status(pid, "VmRSS") for pid in _tree(child.pid))
            if resident > cap_mb:
                stopped = f"stopped: resident memory above {cap_mb / 1024:.0f} GB"
            elif time.monotonic() - start > timeout:
                stopped = f"did not finish within {timeout:.0f} s (stopped)"
            if stopped:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                return {"error": stopped}
            time.sleep(0.5)
        out.seek(0)
        err.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            last = (err.read().strip().splitlines() or ["no output"])[-1]
            return {"error": f"failed: {last[:90]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[10_000_000])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--parquet-from",
        type=float,
        default=50_000_000,
        help="from this many rows on, every system reads the Parquet file instead of memory",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per system and size")
    parser.add_argument(
        "--max-memory-gb",
        type=float,
        default=16,
        help="stop a run whose resident size exceeds this",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the Parquet files here")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--in-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.data, args.in_memory)
        return

    temporary = None
    if args.data_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="dpkit-groupby-")
        folder = Path(temporary.name)
    else:
        folder = args.data_dir
        folder.mkdir(parents=True, exist_ok=True)
    rows_list = [int(r) for r in args.rows]
    table: list[tuple[int, str, dict[str, Any]]] = []
    try:
        for rows in rows_list:
            path = folder / f"groupby_{rows}.parquet"
            start = time.perf_counter()
            users = -1 if path.exists() else write_parquet(path, rows)
            in_memory = rows < args.parquet_from
            made = f"{users:,} users, " if users >= 0 else "reused, "
            print(
                f"{rows:,} rows ({made}{path.stat().st_size / 2**20:,.0f} MB Parquet, "
                f"{time.perf_counter() - start:.1f} s); "
                f"{'in memory' if in_memory else 'read from Parquet'}",
                flush=True,
            )
            for system in args.systems:
                result = measure(system, path, in_memory, args.timeout, args.max_memory_gb * 1024)
                table.append((rows, system, result))
                shown = (
                    result["error"]
                    if "error" in result
                    else f"{result['seconds']:.3f} s, peak {result['peak']:,.0f} MB"
                )
                print(f"  {LABELS[system]:<28} {shown}", flush=True)
    finally:
        if temporary is not None:
            temporary.cleanup()

    print()
    print(
        f"| {'rows':>11} | {'system':<28} | {'seconds':>8} | {'process peak MB':>15} | "
        f"{'peak above data MB':>18} | {'÷ limit':>7} | note |"
    )
    print(f"|{'-' * 13}|{'-' * 30}|{'-' * 10}|{'-' * 17}|{'-' * 20}|{'-' * 9}|------|")
    seconds = {(r, s): res["seconds"] for r, s, res in table if "error" not in res}
    limits = {"dpkit-duckdb": "floor", "dpkit-spark": "spark"}
    for rows, system, result in table:
        limit = seconds.get((rows, limits.get(system, "")))
        ratio = f"{result['seconds'] / limit:>6.2f}x" if limit and "error" not in result else ""
        if "error" in result:
            cells = f"{'—':>8} | {'—':>15} | {'—':>18} | {ratio:>7} | {result['error']}"
        else:
            cells = (
                f"{result['seconds']:>8.3f} | {result['peak']:>15,.0f} | "
                f"{result['above']:>18,.0f} | {ratio:>7} | {result['note']}"
            )
        print(f"| {rows:>11,} | {LABELS[system]:<28} | {cells} |")


if __name__ == "__main__":
    main()
