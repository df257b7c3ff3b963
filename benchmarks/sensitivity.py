"""Accuracy and speed of dpkit's data-dependent-sensitivity mechanisms, from one run.

    PYTHONPATH=src .venv/bin/python benchmarks/sensitivity.py [--reps 500] [--sa-reps 500]
        [--sizes 100,10000,1000000]

Median table: for normal, lognormal, bimodal and a heavy-tailed income-shaped distribution
(Pareto, shape 1.5, scale 1000) at each n, with declared bounds [-1e6, 1e6] and ε ∈ {0.1, 1}, the
median absolute error (over --reps releases) of

* ``global``: Laplace on the clamped median with its global sensitivity U − L (make_laplace);
* ``EM-1024``: the exponential-mechanism quantile the analytics layer uses (1024 candidates);
* ``smooth-C``: smooth sensitivity, Cauchy-type noise γ = 4 (pure ε);
* ``smooth-L``: smooth sensitivity, Laplace noise ((ε, 1e-6));
* ``PTR``: propose-test-release proposing b = 0.1 (ε split in half, δ = 1e-6); the error is over
  the releases that were not refused (nan if all were), and the refusals are counted;
* ``inverse``: the inverse sensitivity mechanism (2^40 candidates).

Sample-and-aggregate table: mean of a lognormal and the slope of y = 2x + noise, against the
non-private estimate, with the widened winsorized mean and m = choose_m(...), and global-
sensitivity Laplace on the clamped mean (mean only) as the baseline.
"""

from __future__ import annotations

import argparse
import math
import time
from fractions import Fraction

import numpy as np

import dpkit as dp
from dpkit.analytics._em import em_quantile_index
from dpkit.sensitivity import smooth_sensitivity
from dpkit.sensitivity.inverse import make_inverse_sensitivity
from dpkit.sensitivity.ptr import make_propose_test_release
from dpkit.sensitivity.sample_aggregate import choose_m, make_sample_and_aggregate
from dpkit.sensitivity.smooth import make_smooth_sensitivity

LOW, HIGH = -1e6, 1e6


def dataset(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "normal":
        return rng.normal(size=n)
    if kind == "lognormal":
        return rng.lognormal(size=n)
    if kind == "bimodal":
        return np.where(rng.random(n) < 0.5, rng.normal(-5, 1, n), rng.normal(5, 1, n))
    return 1000 * (rng.pareto(1.5, n) + 1)  # heavy-tailed, income-shaped


def em_1024(x: np.ndarray, epsilon: Fraction, reps: int) -> np.ndarray:
    candidates = np.linspace(LOW, HIGH, 1024)
    below = np.searchsorted(np.sort(x), candidates, side="left").tolist()
    picks = [em_quantile_index(below, x.size, Fraction(1, 2), epsilon, 1) for _ in range(reps)]
    return candidates[picks]


def median_table(sizes: list[int], reps: int) -> None:
    rng = np.random.default_rng(2026)
    names = ["global", "EM-1024", "smooth-C", "smooth-L", "PTR", "inverse"]
    print(f"\nMedian, bounds [{LOW:g}, {HIGH:g}]: median |error| over {reps} releases")
    print(f"{'data':<10}{'n':>9}{'eps':>5} " + "".join(f"{h:>11}" for h in names) + "  PTR refused")
    for kind in ("normal", "lognormal", "bimodal", "heavy"):
        for n in sizes:
            x = dataset(kind, n, rng)
            truth = float(np.sort(x)[math.ceil(n / 2) - 1])
            for eps in (Fraction(1, 10), Fraction(1)):
                row = []
                lap = dp.make_laplace(HIGH - LOW, epsilon=eps)
                row.append(np.array([lap(truth) for _ in range(reps)]))
                row.append(em_1024(x, eps, reps))
                for noise, delta in (("cauchy", 0), ("laplace", Fraction(1, 10**6))):
                    m = make_smooth_sensitivity(
                        "median", lower=LOW, upper=HIGH, n=n, epsilon=eps, delta=delta, noise=noise
                    )
                    row.append(m.info["release_many"](x, reps))
                ptr = make_propose_test_release(
                    "median",
                    lower=LOW,
                    upper=HIGH,
                    n=n,
                    bound=0.1,
                    epsilon_test=eps / 2,
                    epsilon_release=eps / 2,
                    delta=Fraction(1, 10**6),
                )
                results = ptr.info["release_many"](x, reps)
                refused = sum(r.refused for r in results)
                accepted = [r.value for r in results if not r.refused]
                row.append(np.array(accepted) if accepted else np.array([np.nan]))
                inv = make_inverse_sensitivity("median", lower=LOW, upper=HIGH, n=n, epsilon=eps)
                row.append(inv.info["release_many"](x, reps))
                errors = [float(np.median(np.abs(np.asarray(r) - truth))) for r in row]
                cells = "".join(f"{e:>11.3g}" for e in errors)
                print(f"{kind:<10}{n:>9}{float(eps):>5} {cells}  {refused}/{reps}")


def sa_table(sizes: list[int], reps: int) -> None:
    rng = np.random.default_rng(7)
    print(f"\nSample-and-aggregate (widened winsorized mean), output range [{LOW:g}, {HIGH:g}]:")
    print("median |error| vs the non-private estimate over", reps, "releases")
    print(f"{'task':<10}{'n':>9}{'eps':>5}{'m':>6}{'S&A':>11}{'global':>11}{'secs/rel':>10}")
    for n in sizes:
        if n < 1000:
            continue
        x = rng.lognormal(size=n)
        u = rng.normal(size=n)
        y = 2 * u + rng.normal(size=n)
        table = np.column_stack([u, y])
        units = np.arange(n)
        for eps in (Fraction(1, 10), Fraction(1)):
            m_blocks = choose_m((n, n), 0.01, epsilon=eps, output_width=100, min_block_units=10)
            for task in ("mean", "slope"):
                if task == "mean":
                    fn, data, truth = np.mean, (units, x), float(np.mean(x))
                    shape = 1
                else:

                    def fn(rows: np.ndarray) -> float:
                        return float(np.polyfit(rows[:, 0], rows[:, 1], 1)[0])

                    data, truth, shape = (units, table), float(np.polyfit(u, y, 1)[0]), 1
                m = make_sample_and_aggregate(
                    fn,
                    m=m_blocks,
                    n_range=(n, n),
                    output_shape=shape,
                    output_range=(LOW, HIGH),
                    epsilon=eps,
                )
                start = time.perf_counter()
                out = np.array([float(m(data)[0]) for _ in range(reps)])
                secs = (time.perf_counter() - start) / reps
                err = float(np.median(np.abs(out - truth)))
                if task == "mean":
                    lap = dp.make_laplace((HIGH - LOW) / n, epsilon=eps)
                    noisy = np.array([lap(truth) for _ in range(reps)])
                    base = float(np.median(np.abs(noisy - truth)))
                    base_s = f"{base:>11.3g}"
                else:
                    base_s = f"{'—':>11}"
                print(
                    f"{task:<10}{n:>9}{float(eps):>5}{m_blocks:>6}{err:>11.3g}{base_s}{secs:>10.3f}"
                )


def speed() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=10**6)
    start = time.perf_counter()
    smooth_sensitivity(x, "median", 0.01, lower=LOW, upper=HIGH)
    t_smooth = time.perf_counter() - start
    m = make_sample_and_aggregate(
        np.mean,
        m=1000,
        n_range=(10**6, 10**6),
        output_shape=1,
        output_range=(LOW, HIGH),
        epsilon=1,
    )
    start = time.perf_counter()
    m((np.arange(10**6), x))
    t_sa = time.perf_counter() - start
    t_duck = float("nan")
    try:
        import duckdb

        from dpkit.sensitivity.sample_aggregate import DuckDBBlocks

        con = duckdb.connect()
        con.register("frame", {"u": np.arange(10**6), "x": x})
        con.execute("CREATE TABLE t AS SELECT * FROM frame")
        start = time.perf_counter()
        m(DuckDBBlocks(con, "t", "u", ("x",)))
        t_duck = time.perf_counter() - start
    except ImportError:
        pass
    print("\nSpeed (n = 10^6):")
    print(f"  smooth sensitivity of the median (sort + O(n log n)): {t_smooth:.2f} s (target <= 2)")
    print(f"  sample-and-aggregate, m = 1000, numpy blocks:         {t_sa:.2f} s (target <= 10)")
    print(f"  sample-and-aggregate, m = 1000, DuckDB blocks:        {t_duck:.2f} s (target <= 10)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--sa-reps", type=int, default=500)
    parser.add_argument("--sizes", default="100,10000,1000000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    speed()
    median_table(sizes, args.reps)
    sa_table(sizes, args.sa_reps)


if __name__ == "__main__":
    main()
