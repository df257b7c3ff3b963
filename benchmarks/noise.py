"""Noise throughput: samples per second for N values, dpkit next to its baselines, one run.

    .venv/bin/pip install -e '.[bench]'   # optional: OpenDP for the comparison
    .venv/bin/python benchmarks/noise.py [--n 10000000] [--repeat 3]

Rows: numpy's Generator.laplace (float noise, not safe: the ceiling), dpkit's safe Laplace on a
grid (make_laplace on a vector: exact rounding + exact discrete Laplace + exact float output),
dpkit's discrete Laplace and discrete Gaussian samplers, and OpenDP's Laplace (float), discrete
Laplace and discrete Gaussian measurements when opendp is installed. Best of --repeat runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

import dpkit as dp
from dpkit import noise


def best_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--opendp-n",
        type=int,
        default=1_000_000,
        help="OpenDP is timed on fewer values (it is far slower) and scaled",
    )
    args = parser.parse_args()
    n = args.n
    rows: list[tuple[str, int, float]] = []

    rng = np.random.default_rng()  # the unsafe ceiling, for comparison only
    rows.append(
        (
            "numpy Generator.laplace (float, unsafe)",
            n,
            best_time(lambda: rng.laplace(0.0, 1.0, n), args.repeat),
        )
    )

    laplace = dp.make_laplace(sensitivity=1, epsilon=1)
    zeros = np.zeros(n)
    laplace(zeros[:1000])
    rows.append(
        ("dpkit make_laplace (safe grid, exact)", n, best_time(lambda: laplace(zeros), args.repeat))
    )
    rows.append(
        (
            "dpkit discrete_laplace (scale 1, exact)",
            n,
            best_time(lambda: noise.discrete_laplace(Fraction(1), n), args.repeat),
        )
    )
    rows.append(
        (
            "dpkit discrete_gaussian (σ = 1, exact)",
            n,
            best_time(lambda: noise.discrete_gaussian(Fraction(1), n), args.repeat),
        )
    )

    try:
        import opendp.prelude as odp

        odp.enable_features("contrib")
        m = args.opendp_n
        vec_f = odp.vector_domain(odp.atom_domain(T=float, nan=False))
        float_lap = odp.m.make_laplace(vec_f, odp.l1_distance(T=float), scale=1.0)
        vec_i = odp.vector_domain(odp.atom_domain(T=int))
        int_lap = odp.m.make_laplace(vec_i, odp.l1_distance(T=int), scale=1.0)
        int_gauss = odp.m.make_gaussian(vec_i, odp.l2_distance(T=int), scale=1.0)
        xs_f, xs_i = [0.0] * m, [0] * m
        for label, meas, xs in (
            ("OpenDP make_laplace (float)", float_lap, xs_f),
            ("OpenDP make_laplace (integer)", int_lap, xs_i),
            ("OpenDP make_gaussian (integer)", int_gauss, xs_i),
        ):
            rows.append((label, m, best_time(lambda meas=meas, xs=xs: meas(xs), args.repeat)))
    except ImportError:
        print("(opendp not installed: pip install -e '.[bench]' to include it)")

    ceiling = rows[0][2] / rows[0][1]
    print(f"\n{'sampler':48} {'values':>11} {'seconds':>9} {'M samples/s':>12} {'vs numpy':>9}")
    for label, count, seconds in rows:
        rate = count / seconds
        print(
            f"{label:48} {count:>11,} {seconds:>9.3f} {rate / 1e6:>12.2f} "
            f"{(seconds / count) / ceiling:>8.1f}x"
        )
    by_label = {label: count / seconds for label, count, seconds in rows}
    ours = by_label["dpkit make_laplace (safe grid, exact)"]
    theirs = by_label.get("OpenDP make_laplace (float)")
    if theirs:
        print(f"\ndpkit safe Laplace vs OpenDP Laplace: {ours / theirs:.1f}x faster")


if __name__ == "__main__":
    main()
