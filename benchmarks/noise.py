"""Noise throughput: dpkit's safe (exact, grid) noise beside numpy's unsafe float noise, one run.

    .venv/bin/pip install -e '.[bench]'   # optional: OpenDP for the comparison
    .venv/bin/python benchmarks/noise.py [--n 10000000] [--repeat 7]

Each row adds noise to N zeros and reports the median (and best) of --repeat runs in millions
of values per second, beside numpy's Generator (PCG64 floats: not safe, the ceiling) for the same
N in the same run, and the ratio of the medians. dpkit rows: ``make_laplace`` and
``make_gaussian`` on a float vector (exact rounding to the grid, exact discrete Laplace /
discrete Gaussian noise from the AES-CTR generator, exact float output), the same Gaussian
release with CKS's sampler (what ``make_gaussian`` used before the table sampler: before and
after in one run), and the bare discrete samplers (``noise.discrete_gaussian`` is CKS's; the
mechanisms sample through ``DiscreteGaussian``, the table sampler for σ >= 1). OpenDP's float
Laplace and integer Laplace / Gaussian measurements are timed on
--opendp-n values when opendp is installed. Run it on an otherwise idle machine (`uptime`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

import dpkit as dp
from dpkit import noise
from dpkit.noise._distributions import DiscreteGaussian
from dpkit.noise._grid import release_on_grid


def timings(
    fn: Callable[[], object], repeat: int, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    fn()  # warm-up: page in buffers, build caches
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--opendp-n",
        type=int,
        default=100_000,
        help="OpenDP is timed on fewer values (it is far slower) and scaled",
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: time.perf_counter; cpu: time.process_time (steadier on a shared machine)",
    )
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    n = args.n
    zeros = np.zeros(n)
    rng = np.random.default_rng()  # the unsafe ceiling, for comparison only
    laplace = dp.make_laplace(sensitivity=1, epsilon=1, changed_coordinates=n)
    gaussian = dp.make_gaussian(sensitivity=1, rho=Fraction(1, 2), changed_coordinates=n)
    grid = gaussian.noise  # the σ² (in grid steps) and grid of make_gaussian above
    sigma2, exponent = grid.lattice.sigma2, grid.exponent

    def gaussian_cks() -> object:
        """make_gaussian as it was before the table sampler: CKS's sampler, the same release."""
        return release_on_grid(zeros, exponent, noise.discrete_gaussian(sigma2, n))

    # (label, numpy baseline label, values, function)
    cases: list[tuple[str, str, int, Callable[[], object]]] = [
        ("numpy Generator.laplace (float, unsafe)", "", n, lambda: rng.laplace(0.0, 1.0, n)),
        ("numpy Generator.normal (float, unsafe)", "", n, lambda: rng.normal(0.0, 1.0, n)),
        ("dpkit make_laplace (safe grid, exact)", "laplace", n, lambda: laplace(zeros)),
        ("dpkit make_gaussian (safe grid, exact)", "normal", n, lambda: gaussian(zeros)),
        ("  same, with CKS's sampler (before)", "normal", n, gaussian_cks),
        (
            "dpkit discrete_laplace (t = 1, exact)",
            "laplace",
            n,
            lambda: noise.discrete_laplace(Fraction(1), n),
        ),
        (
            "dpkit discrete_gaussian (σ = 1, exact)",
            "normal",
            n,
            lambda: noise.discrete_gaussian(Fraction(1), n),
        ),
        (
            "dpkit DiscreteGaussian σ = 1 (table sampler)",
            "normal",
            n,
            lambda: DiscreteGaussian(Fraction(1)).sample(n),
        ),
    ]
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
        cases += [
            ("OpenDP make_laplace (float)", "laplace", m, lambda: float_lap(xs_f)),
            ("OpenDP make_laplace (integer)", "laplace", m, lambda: int_lap(xs_i)),
            ("OpenDP make_gaussian (integer)", "normal", m, lambda: int_gauss(xs_i)),
        ]
    except ImportError:
        print("(opendp not installed: pip install -e '.[bench]' to include it)")

    rates: dict[str, tuple[float, float]] = {}  # label -> (median, best) values per second
    for label, _, count, fn in cases:
        times = timings(fn, args.repeat, clock)
        rates[label] = (count / statistics.median(times), count / min(times))
    baseline = {
        "laplace": rates["numpy Generator.laplace (float, unsafe)"][0],
        "normal": rates["numpy Generator.normal (float, unsafe)"][0],
    }
    print(f"\n{n:,} values, median (best) of {args.repeat} runs, {args.clock} clock")
    print(f"{'sampler':44} {'M/s median':>11} {'M/s best':>9} {'numpy M/s':>10} {'numpy ÷':>8}")
    for label, base, _, _ in cases:
        median, best = rates[label]
        ref = f"{baseline[base] / 1e6:10.2f} {baseline[base] / median:7.1f}x" if base else ""
        print(f"{label:44} {median / 1e6:11.2f} {best / 1e6:9.2f} {ref}")


if __name__ == "__main__":
    main()
