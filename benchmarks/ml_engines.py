"""k-means through a Session on Spark beside DuckDB: `fit_kmeans` wall-clock time per engine.

    python benchmarks/ml_engines.py --n 10000 100000 --d 50 --k 20
    python benchmarks/ml_engines.py --n 10000 --source parquet   # Spark reads a Parquet file

For each n, both engines fit the same data (a Gaussian mixture, one row per unit, ε = 1): one
Lloyd step, a `lloyd` fit (5 steps) and an `lsh` fit (coreset + 1 step). Spark is the local
SparkSession of `dpkit.analytics._engines._spark.default_spark_session` (1 core, default
driver memory); its first query warms the JVM up (a tiny fit, not timed). The load average is
printed beside each figure (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np


def mixture(n: int, d: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """The Gaussian mixture of benchmarks/ml.py (k centres in [-0.7, 0.7]^d, σ = 0.05)."""
    centres = rng.uniform(-0.7, 0.7, size=(k, d))
    labels = rng.integers(0, k, size=n)
    return np.clip(centres[labels] + rng.normal(0, 0.05, size=(n, d)), -1, 1)


def _engine(name: str, frame: Any, source: str, path: str) -> Any:
    if name == "duckdb":
        from dpkit.analytics._engines._duckdb import DuckDBEngine

        return DuckDBEngine(path if source == "parquet" else frame)
    from dpkit.analytics._engines._spark import SparkEngine

    return SparkEngine(path if source == "parquet" else frame)


def run(n: int, d: int, k: int, engines: list[str], source: str, steps: list[str]) -> None:
    import pandas as pd

    import dpkit as dp
    from dpkit.analytics import Session
    from dpkit.ml import fit_kmeans

    x = mixture(n, d, k, np.random.default_rng(0))
    names = [f"x{i}" for i in range(d)]
    frame = pd.DataFrame(x, columns=names)
    frame["u"] = np.arange(n)
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "step": ("one Lloyd step", {"method": "lloyd", "max_iter": 1}),
        "lloyd": ("lloyd fit (5 steps)", {"method": "lloyd"}),
        "lsh": ("lsh fit (coreset + 1 step)", {"method": "lsh"}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.parquet")
        if source == "parquet":
            frame.to_parquet(path)
        for key in steps:
            label, kwargs = cases[key]
            line = f"n={n:>8} d={d} k={k} {label:<28}"
            for name in engines:
                session = Session(
                    frame, "u", dp.PureDP(100), engine=_engine(name, frame, source, path)
                )
                start = time.perf_counter()
                try:
                    fit_kmeans(session, names, k, bounds=(-1, 1), epsilon=1, max_rows=1, **kwargs)
                    took = f"{time.perf_counter() - start:7.2f} s"
                except Exception as error:  # a benchmark reports a failure and goes on
                    took = f"failed ({type(error).__name__})"
                line += f" | {name} {took} (load {os.getloadavg()[0]:.1f})"
            print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--engines", nargs="+", default=["duckdb", "spark"])
    parser.add_argument("--source", choices=["pandas", "parquet"], default="pandas")
    parser.add_argument("--steps", nargs="+", default=["step", "lloyd", "lsh"])
    args = parser.parse_args()
    if "spark" in args.engines:  # warm the JVM up (not timed)
        run(200, 2, 2, ["spark"], args.source, ["step"])
    for n in args.n:
        run(n, args.d, args.k, args.engines, args.source, args.steps)


if __name__ == "__main__":
    main()
