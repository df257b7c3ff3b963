"""Synthetic data benchmark (issue 24): workload error of dpkit's MST and AIM on adult.

The table is ``../shared/data/adult/`` (48,842 rows, 14 attributes over a public domain; a row
id is added as the privacy unit, one row per person). The error is the AIM paper's: the mean
over the workload's marginals of the L1 distance between the true and the synthetic marginal,
each normalised to sum to 1; the workloads are all 364 3-way and all 91 2-way marginals.
δ = 1e-9. Beside dpkit's MST the same run computes the no-model floor: independent 1-way
marginals (each measured with discrete Gaussian noise at ρ/14, rounded like the synthetic
data, i.e. sampled from the product of the clipped noisy marginals). The issue's reference
figures (private-pgm's MST and independent marginals, mean of 3 seeds) are printed beside
(the reference AIM did not finish: none). Errors are medians over the seeds; time is the
mean, peak the process's maximum (so AIM's row includes MST's when both run).

Run: ``PYTHONPATH=src python benchmarks/synth.py [--seeds 3] [--epsilons 0.1 1 10]``. Time is
wall-clock (noisy on a shared machine); "cpu s" is the process's CPU time for the same span.
Each seed is one fresh run with dpkit's secure randomness (no seed is set).

``--scale`` instead fits 10^6 rows x 20 attributes (10 values each) drawn from a known model (a
Markov chain: each column copies the previous one with probability 0.6, else is uniform), at
ε = 1, δ = 1e-9, and prints the time, the process's peak memory and the mean L1 error of the
synthetic adjacent-pair marginals against the model's exact ones.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import time
from pathlib import Path

import numpy as np

ADULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "adult"

REFERENCE = {
    # ε: (MST 3-way, MST 2-way, independent 3-way, independent 2-way), issue 24
    0.1: (0.506, 0.306, 0.519, 0.309),
    1.0: (0.228, 0.105, 0.357, 0.167),
    10.0: (0.199, 0.082, 0.346, 0.156),
}


def _locate() -> Path:
    for base in (ADULT, Path("/work/shared/data/adult")):
        if (base / "adult.csv").is_file():
            return base.resolve()
    raise SystemExit("adult data not found (../shared/data/adult)")


def workload_error(true: np.ndarray, synth: np.ndarray, shape: list[int], k: int) -> float:
    """Mean L1 distance between normalised k-way marginals of two index matrices."""
    errors = []
    for cols in itertools.combinations(range(true.shape[1]), k):
        dims = [shape[c] for c in cols]
        size = int(np.prod(dims))
        a = np.bincount(np.ravel_multi_index(tuple(true[:, c] for c in cols), dims), minlength=size)
        b = np.bincount(
            np.ravel_multi_index(tuple(synth[:, c] for c in cols), dims), minlength=size
        )
        errors.append(float(np.abs(a / a.sum() - b / b.sum()).sum()))
    return float(np.mean(errors))


def independent(data: np.ndarray, shape: list[int], rho: float) -> np.ndarray:
    """Independent 1-way marginals, each with discrete Gaussian noise at ρ/d, sampled."""
    from fractions import Fraction

    from dpkit.mechanisms import make_discrete_gaussian
    from dpkit.synth._model import round_sample

    d = len(shape)
    n = data.shape[0]
    out = np.zeros_like(data)
    share = Fraction(rho) / d
    for a in range(d):
        counts = np.bincount(data[:, a], minlength=shape[a])
        noisy = np.clip(np.asarray(make_discrete_gaussian(1, rho=share)(counts), float), 0, None)
        out[:, a] = round_sample(noisy[None, :], np.zeros(n, dtype=np.int64))
    return out


def _ledger(eps: float) -> object:
    """A private in-memory ledger holding exactly the run's budget (its alerts silenced)."""
    import dpkit as dp
    from dpkit.ledger import BudgetMonitor, Ledger

    ledger = Ledger.open(":memory:", monitor=BudgetMonitor(log=False))
    ledger.create_budget("table", dp.ApproxDP(eps, 1e-9), privacy_unit="person")
    return ledger


def scale() -> None:
    import pandas as pd

    import dpkit as dp
    from dpkit.ledger import BudgetMonitor, Ledger
    from dpkit.synth import fit

    n, d, k, stay = 10**6, 20, 10, 0.6
    rng = np.random.default_rng(0)  # the public test table only; dpkit's noise is its own
    cols = np.empty((n, d), dtype=np.int64)
    cols[:, 0] = rng.integers(0, k, n)
    for j in range(1, d):
        keep = rng.random(n) < stay
        cols[:, j] = np.where(keep, cols[:, j - 1], rng.integers(0, k, n))
    frame = pd.DataFrame(cols, columns=[f"x{j}" for j in range(d)])
    ledger = Ledger.open(":memory:", monitor=BudgetMonitor(log=False))
    ledger.create_budget("t", dp.ApproxDP(1, 1e-9))
    start = time.perf_counter()
    model = fit(
        frame, {f"x{j}": k for j in range(d)}, epsilon=1, delta=1e-9, ledger=ledger, dataset="t"
    )
    fitted = time.perf_counter() - start
    synth = model.sample()[list(frame.columns)].to_numpy(dtype=np.int64)
    total = time.perf_counter() - start
    exact = (stay * np.eye(k) + (1 - stay) / k) / k  # P(x_j, x_{j+1}) of the chain
    errors = []
    for j in range(d - 1):
        counts = np.bincount(synth[:, j] * k + synth[:, j + 1], minlength=k * k) / len(synth)
        errors.append(float(np.abs(counts - exact.reshape(-1)).sum()))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"10^6 rows x {d} attributes: fit {fitted:.1f} s, fit + sample {total:.1f} s, "
        f"peak {peak:.2f} GB; adjacent-pair L1 error vs the true model {np.mean(errors):.4f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0, 10.0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--scale", action="store_true", help="the 10^6 x 20 run instead")
    parser.add_argument("--max-model-mb", type=float, default=None, help="AIM's model size limit")
    parser.add_argument(
        "--round-iterations", type=int, default=None, help="AIM's refit steps per round (cap)"
    )
    parser.add_argument(
        "--methods", nargs="+", default=["mst", "aim"], help="dpkit mechanisms to run"
    )
    args = parser.parse_args()
    if args.scale:
        scale()
        return

    import pandas as pd

    import dpkit as dp
    from dpkit.analytics._planner._noise import rho_for
    from dpkit.synth import fit

    base = _locate()
    domain = json.loads((base / "adult-domain.json").read_text())
    names = list(domain)
    shape = [domain[c] for c in names]
    frame = pd.read_csv(base / "adult.csv")
    frame.insert(0, "person", np.arange(len(frame)))
    true = frame[names].to_numpy(dtype=np.int64)
    aim: dict[str, object] = {}
    if args.max_model_mb is not None:
        aim["max_model_mb"] = args.max_model_mb
    if args.round_iterations is not None:
        aim["round_iterations"] = args.round_iterations
    print(f"adult: {len(frame):,} rows, {len(names)} attributes; δ = 1e-9; {args.seeds} seeds")
    print(f"load average at the start: {os.getloadavg()[0]:.1f}; AIM settings: {aim or 'defaults'}")
    header = (
        f"{'mechanism':<28}{'ε':>6}{'3-way':>9}{'2-way':>9}{'ref 3-way':>11}{'ref 2-way':>11}"
        f"{'time s':>9}{'cpu s':>9}{'peak MB':>9}"
    )
    print(header)
    print("-" * len(header))
    for eps in args.epsilons:
        rows: dict[str, list[tuple[float, float, float, float, float]]] = {
            "indep": [],
            **{m: [] for m in args.methods},
        }
        for _ in range(args.seeds):
            for method in args.methods:
                start = time.perf_counter()
                cpu = time.process_time()
                model = fit(
                    frame,
                    domain,
                    epsilon=eps,
                    delta=1e-9,
                    privacy_unit="person",
                    max_rows=1,
                    ledger=_ledger(eps),
                    iterations=args.iterations,
                    method=method,
                    **(aim if method == "aim" else {}),
                )
                synth = model.sample()[names].to_numpy(dtype=np.int64)
                elapsed = time.perf_counter() - start
                cpu = time.process_time() - cpu
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak
                rows[method].append(
                    (
                        workload_error(true, synth, shape, 3),
                        workload_error(true, synth, shape, 2),
                        elapsed,
                        peak,
                        cpu,
                    )
                )
            start = time.perf_counter()
            ind = independent(true, shape, float(rho_for(dp.Fraction(eps), dp.Fraction(1, 10**9))))
            elapsed = time.perf_counter() - start
            rows["indep"].append(
                (
                    workload_error(true, ind, shape, 3),
                    workload_error(true, ind, shape, 2),
                    elapsed,
                    0,
                    elapsed,
                )
            )
        ref = REFERENCE.get(eps, (float("nan"),) * 4)
        nan = float("nan")
        for key, label, r3, r2 in (
            ("indep", "independent 1-way (dpkit)", ref[2], ref[3]),
            ("mst", "MST (dpkit)", ref[0], ref[1]),
            ("aim", "AIM (dpkit)", nan, nan),
        ):
            if key not in rows:
                continue
            values = rows[key]
            e3 = statistics.median(v[0] for v in values)
            e2 = statistics.median(v[1] for v in values)
            t = statistics.mean(v[2] for v in values)
            mem = max(v[3] for v in values)
            c = statistics.mean(v[4] for v in values)
            print(
                f"{label:<28}{eps:>6g}{e3:>9.3f}{e2:>9.3f}{r3:>11.3f}{r2:>11.3f}{t:>9.1f}{c:>9.1f}"
                f"{mem:>9.0f}  (3-way/2-way per seed: "
                f"{', '.join(f'{v[0]:.3f}/{v[1]:.3f}' for v in values)}; "
                f"load {os.getloadavg()[0]:.1f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
