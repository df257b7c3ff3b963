"""Accuracy and speed of dpkit's data-dependent-sensitivity mechanisms, from one run.

    PYTHONPATH=src .venv/bin/python benchmarks/sensitivity.py [--reps 500] [--sa-reps 500]
        [--sizes 100,10000,1000000] [--quick]

``--quick`` is --reps 100 --sa-reps 100 --sizes 100,10000 (a smoke run).

Median table: for normal, lognormal, bimodal and a heavy-tailed income-shaped distribution
(Pareto, shape 1.5, scale 1000) at each n, with declared bounds [-1e6, 1e6] and ε ∈ {0.1, 1}, the
median absolute error (over --reps releases) of

* ``global``: Laplace on the clamped median with its global sensitivity U − L (make_laplace);
* ``EM-1024``: the exponential-mechanism quantile the analytics layer uses (1024 candidates);
* ``smooth-C``: smooth sensitivity, Cauchy-type noise γ = 4 (pure ε);
* ``smooth-L``: smooth sensitivity, Laplace noise ((ε, 1e-6));
* ``sm-LLN``, ``sm-ULN``, ``sm-t3``, ``sm-ASN``: smooth sensitivity with the Bun–Steinke zCDP
  noises (Laplace log-normal, uniform log-normal, Student's t with 3 degrees of freedom,
  arcsinh-normal) at the zCDP
  equivalent ρ = ε²/2 (what pure ε-DP implies), released as exact grid roundings;
* ``PTR``: propose-test-release proposing b = 0.1 (ε split in half, δ = 1e-6); the error is over
  the releases that were not refused (nan if all were), and the refusals are counted;
* ``inverse``: the inverse sensitivity mechanism (2^40 candidates).

Variance table: the population variance with bounds [-10, 10] (normal and lognormal data), global-
sensitivity Laplace on the clamped variance (GS = (U − L)²(n − 1)/n²) against the smooth-sensitivity
release of the exact variance of the values rounded to 2^-20 of the width (Cauchy, and uniform
log-normal at ρ = ε²/2). The variance's local sensitivity is never below GS/8 (a value can always
move to the farther bound), so smooth sensitivity gains at most a small constant here.

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
from dpkit.sensitivity._centre import make_centre_of_attention
from dpkit.sensitivity._inverse import make_inverse_sensitivity
from dpkit.sensitivity._ptr import make_propose_test_release
from dpkit.sensitivity._sample_aggregate import choose_m, make_sample_and_aggregate
from dpkit.sensitivity._smooth import make_smooth_sensitivity

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
    ordered = np.sort(x)
    below = np.searchsorted(ordered, candidates, side="left").tolist()
    upto = np.searchsorted(ordered, candidates, side="right").tolist()
    half = Fraction(1, 2)
    picks = [em_quantile_index(below, upto, x.size, half, epsilon, 1) for _ in range(reps)]
    return candidates[picks]


def median_table(sizes: list[int], reps: int) -> None:
    rng = np.random.default_rng(2026)
    names = ["global", "EM-1024", "smooth-C", "smooth-L", "sm-LLN", "sm-ULN", "sm-t3", "sm-ASN"]
    names.append("PTR")
    names.append("inverse")
    ratios: dict[str, list[float]] = {name: [] for name in names[2:]}
    print(f"\nMedian, bounds [{LOW:g}, {HIGH:g}]: median |error| over {reps} releases")
    print(f"{'data':<10}{'n':>8}{'eps':>5} " + "".join(f"{h:>10}" for h in names) + "  PTR refused")
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
                    row.append(m.info.release_many(x, reps))
                for family in (
                    "laplace_log_normal",
                    "uniform_log_normal",
                    "student_t",
                    "arcsinh_normal",
                ):
                    m = make_smooth_sensitivity(
                        "median", lower=LOW, upper=HIGH, n=n, rho=eps**2 / 2, noise=family
                    )
                    row.append(m.info.release_many(x, reps))
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
                results = ptr.info.release_many(x, reps)
                refused = sum(r.refused for r in results)
                accepted = [r.value for r in results if not r.refused]
                row.append(np.array(accepted) if accepted else np.array([np.nan]))
                inv = make_inverse_sensitivity("median", lower=LOW, upper=HIGH, n=n, epsilon=eps)
                row.append(inv.info.release_many(x, reps))
                errors = [float(np.median(np.abs(np.asarray(r) - truth))) for r in row]
                cells = "".join(f"{e:>10.3g}" for e in errors)
                print(f"{kind:<10}{n:>8}{float(eps):>5} {cells}  {refused}/{reps}", flush=True)
                if kind in ("normal", "lognormal") and n >= 10**4:
                    for name, err in zip(names[2:], errors[2:], strict=True):
                        ratios[name].append(errors[0] / err if err > 0 else math.inf)
    if any(ratios.values()):
        print("\nConcentrated data (normal, lognormal), n >= 10^4: global error / method error")
        for name, values in ratios.items():
            ok = "yes" if min(values) >= 10 else "NO"
            print(f"  {name:<9} min {min(values):.3g}x  (>= 10x in every cell: {ok})")


def variance_table(sizes: list[int], reps: int) -> None:
    rng = np.random.default_rng(11)
    lo, hi = -10.0, 10.0
    heads = ("global", "smooth-C", "sm-ULN")
    print(f"\nVariance, bounds [{lo:g}, {hi:g}]: median |error| over {reps} releases")
    print(f"{'data':<10}{'n':>8}{'eps':>5} " + "".join(f"{h:>11}" for h in heads) + "  S* secs")
    for kind in ("normal", "lognormal"):
        for n in sizes:
            x = np.clip(dataset(kind, n, rng), lo, hi)
            truth = float(np.var(x))
            for eps in (Fraction(1, 10), Fraction(1)):
                gs = (hi - lo) ** 2 * (n - 1) / n**2
                lap = dp.make_laplace(gs, epsilon=eps)
                row = [np.array([lap(truth) for _ in range(reps)])]
                start = time.perf_counter()
                cauchy = make_smooth_sensitivity("variance", lower=lo, upper=hi, n=n, epsilon=eps)
                row.append(cauchy.info.release_many(x, reps))
                secs = time.perf_counter() - start
                uln = make_smooth_sensitivity(
                    "variance", lower=lo, upper=hi, n=n, rho=eps**2 / 2, noise="uniform_log_normal"
                )
                row.append(uln.info.release_many(x, reps))
                errors = [float(np.median(np.abs(np.asarray(r) - truth))) for r in row]
                cells = "".join(f"{e:>11.3g}" for e in errors)
                print(f"{kind:<10}{n:>8}{float(eps):>5} {cells}  {secs:.2f}", flush=True)


def sa_table(sizes: list[int], reps: int) -> None:
    rng = np.random.default_rng(7)
    print(f"\nSample-and-aggregate, output range [{LOW:g}, {HIGH:g}]: median |error| vs the")
    print(f"non-private estimate over {reps} releases (one random partition per cell; the")
    print("repetitions are the aggregator's noise draws)")
    heads = ("wins-mean", "centre", "inv-median", "global")
    print(f"{'task':<7}{'n':>9}{'eps':>5}{'m':>7}" + "".join(f"{h:>11}" for h in heads) + "  secs")
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
                else:

                    def fn(rows: np.ndarray) -> float:
                        return float(np.polyfit(rows[:, 0], rows[:, 1], 1)[0])

                    data, truth = (units, table), float(np.polyfit(u, y, 1)[0])
                m = make_sample_and_aggregate(
                    fn,
                    m=m_blocks,
                    n_range=(n, n),
                    output_shape=1,
                    output_range=(LOW, HIGH),
                    epsilon=eps,
                )
                start = time.perf_counter()
                column = m.info.block_values(data)[:, 0]
                wins = np.array([m.info.aggregate(column) for _ in range(reps)])
                secs = time.perf_counter() - start  # partition + reps winsorized means
                centre = make_centre_of_attention(m=m_blocks, lower=LOW, upper=HIGH, epsilon=eps)
                coa = centre.info.release_many(column, reps)
                inv = make_inverse_sensitivity(
                    "median", lower=LOW, upper=HIGH, n=m_blocks, epsilon=eps
                ).info.release_many(column, reps)
                errs = [float(np.median(np.abs(r - truth))) for r in (wins, coa, inv)]
                if task == "mean":
                    lap = dp.make_laplace((HIGH - LOW) / n, epsilon=eps)
                    noisy = np.array([lap(truth) for _ in range(reps)])
                    errs.append(float(np.median(np.abs(noisy - truth))))
                cells = "".join(f"{e:>11.3g}" for e in errs) + (
                    "" if task == "mean" else " " * 10 + "—"
                )
                print(f"{task:<7}{n:>9}{float(eps):>5}{m_blocks:>7}{cells}  {secs:.1f}", flush=True)


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

        from dpkit.sensitivity._sample_aggregate import DuckDBBlocks

        con = duckdb.connect()
        con.register("frame", {"u": np.arange(10**6), "x": x})
        con.execute("CREATE TABLE t AS SELECT * FROM frame")
        start = time.perf_counter()
        m(DuckDBBlocks(con, "t", "u", ("x",)))
        t_duck = time.perf_counter() - start
    except ImportError:
        pass
    start = time.perf_counter()
    smooth_sensitivity(x, "variance", 0.01, lower=LOW, upper=HIGH)
    t_var = time.perf_counter() - start
    var = make_smooth_sensitivity("variance", lower=LOW, upper=HIGH, n=10**6, epsilon=1)
    start = time.perf_counter()
    var(x)
    t_var_release = time.perf_counter() - start
    print("\nSpeed (n = 10^6):")
    print(f"  smooth sensitivity of the median (sort + O(n log n)): {t_smooth:.2f} s (target <= 2)")
    print(f"  smooth sensitivity of the variance, float analysis:   {t_var:.2f} s")
    print(f"  variance release (grid, exact value, integer S*):     {t_var_release:.2f} s")
    print(f"  sample-and-aggregate, m = 1000, numpy blocks:         {t_sa:.2f} s (target <= 10)")
    print(f"  sample-and-aggregate, m = 1000, DuckDB blocks:        {t_duck:.2f} s (target <= 10)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--sa-reps", type=int, default=500)
    parser.add_argument("--sizes", default="100,10000,1000000")
    parser.add_argument("--quick", action="store_true", help="100 reps, n in {100, 10^4}")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.sa_reps, args.sizes = 100, 100, "100,10000"
    sizes = [int(s) for s in args.sizes.split(",")]
    speed()
    median_table(sizes, args.reps)
    variance_table(sizes, args.reps)
    sa_table(sizes, args.sa_reps)


if __name__ == "__main__":
    main()
