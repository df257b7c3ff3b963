"""The ladder mechanism: construction time (δ optimised), sampling speed, reproduction time.

    .venv/bin/python benchmarks/ladder.py [--repeat 3] [--samples 1000000] [--no-baseline]

Rows, for the paper's V1-V7 at ε ∈ {0.1, 1, 4}: the time of ``make_ladder(V, ε)`` including the
δ search (best of --repeat), the δ found, rate = E|noise|/staircase E|noise|, the number of
listed levels H and whether the construction converged (exact ladder) or was capped, and
samples per second of the exact sampler. Then the full ``dpkit ladder reproduce`` run.

Baseline (same run): a straightforward pure-Python implementation of the paper's Algorithm 1
(lists of intervals, one level at a time, Definition 2 convergence) for a *single* δ on V1 and
V7 — what the δ search would cost per evaluation without the δ-free profile.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dpkit.demos.ladder import PAPER_SETS, reproduce
from dpkit.mechanisms._ladder_mechanism import make_ladder


def best_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _measure(intervals: list[tuple[float, float]]) -> float:
    return sum(hi - lo for lo, hi in intervals)


def straightforward_ladder(
    v: tuple[tuple[int, int], ...], delta: float, epsilon: float, max_levels: int = 100_000
) -> float:
    """Algorithm 1 as written, in plain Python: B_t = (B_{t-1} ± V) ∪ B_{t-1} until B_t is one
    interval growing by Δ per level (Definition 2); returns E|X| of the continuous density."""
    sensitivity = max(b for _, b in v)
    shifts = _merge([(0.0, 0.0)] + [(a, b) for a, b in v] + [(-b, -a) for a, b in v])
    current = [(-delta, delta)]
    measures = [_measure(current)]
    moments = [sum((hi * abs(hi) - lo * abs(lo)) / 2 for lo, hi in current)]
    for _ in range(max_levels):
        nxt = _merge([(lo + a, hi + b) for lo, hi in current for a, b in shifts])
        measures.append(_measure(nxt))
        moments.append(sum((hi * abs(hi) - lo * abs(lo)) / 2 for lo, hi in nxt))
        if len(nxt) == 1 and 2 * nxt[0][1] >= 2 * sensitivity:
            break
        current = nxt
    # |x| moments: ∫_B |x| dx; with one interval [-b, b] the tail is geometric
    h = len(measures) - 1
    rho = math.exp(-epsilon)
    alpha = measures[0] + sum(rho**t * (measures[t] - measures[t - 1]) for t in range(1, h + 1))
    first = sum(rho**t * (_abs_moment(measures, moments, t)) for t in range(h + 1))
    tail_mass = 2 * sensitivity
    top = measures[h] / 2
    alpha += rho ** (h + 1) * tail_mass / (1 - rho)
    first += rho ** (h + 1) * (
        tail_mass * (top + sensitivity / 2) / (1 - rho)
        + tail_mass * sensitivity * rho / (1 - rho) ** 2
    )
    return first / alpha


def _abs_moment(measures: list[float], moments: list[float], t: int) -> float:
    return moments[t] - (moments[t - 1] if t else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()

    print("make_ladder(V, ε) with δ optimised; sampling speed of its exact sampler")
    header = (
        f"{'set':<4} {'ε':>4} {'construct s':>11} {'δ*':>10} {'rate':>7} {'levels':>6} "
        f"{'kind':>9} {'Msamples/s':>10}"
    )
    print(header)
    print("-" * len(header))
    worst = 0.0
    for name, v in PAPER_SETS.items():
        for eps in (0.1, 1.0, 4.0):
            seconds = best_time(lambda v=v, eps=eps: make_ladder(v, eps), args.repeat)
            worst = max(worst, seconds)
            m = make_ladder(v, eps)
            lattice = m.noise.lattice
            lattice.sample(1000)
            sample_s = best_time(lambda lattice=lattice: lattice.sample(args.samples), args.repeat)
            kind = "exact" if m.info.converged_at is not None else "capped"
            print(
                f"{name:<4} {eps:>4g} {seconds:>11.3f} {float(m.info.delta):>10.4g} "
                f"{m.info.rate:>7.4f} {m.info.levels:>6} {kind:>9} "
                f"{args.samples / sample_s / 1e6:>10.2f}"
            )
    print(f"\nslowest construction: {worst:.3f} s (target < 0.5 s)")

    if not args.no_baseline:
        print("\nbaseline: straightforward Algorithm 1 in plain Python, ONE δ, to convergence")
        for name, delta, eps in (("V1", 48.0, 1.0), ("V7", 68.5, 1.0)):
            start = time.perf_counter()
            value = straightforward_ladder(PAPER_SETS[name], delta, eps)
            seconds = time.perf_counter() - start
            print(f"{name} δ={delta:g} ε={eps:g}: {seconds:.2f} s (E|X| = {value:.3f})")

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = reproduce(Path(tmp))
        seconds = time.perf_counter() - start
    print(
        f"\nfull reproduction (dpkit ladder reproduce): {seconds:.1f} s "
        f"(heat maps {result['heatmap_seconds']:.1f} s; target < 60 s)"
    )


if __name__ == "__main__":
    main()
