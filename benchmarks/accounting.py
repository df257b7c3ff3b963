"""Accounting benchmark (issue 15): time, peak memory and ε, every row measured in one run.

Table 1: ε at δ = 1e-6 for 1,000 composed Gaussian mechanisms with σ = 1·Δ.

* the limit: the μ-GDP closed form written out inline (μ = sqrt(1000), δ(ε) inverted with
  scipy's brentq), no validation, no rounding;
* dpkit ``numerical_epsilon`` (picks the exact μ-GDP closed form, rounds up);
* dp-accounting's RDP accountant (fast, loose) and PLD accountant (default grid 1e-4; slow).

Table 2: mixed compositions (Laplace, Gaussian, subsampled Gaussian under add/remove; randomized
response, Gaussian, subsampled Gaussian under replace): dpkit ``numerical_epsilon`` (PLD with
connect-the-dots on an ε-scaled grid) beside dp-accounting's RDP and PLD accountants, and the
excess of dpkit's ε over the same PLD on a 10× finer grid.

Peak memory is tracemalloc's peak (numpy reports its buffers to it) during one call; times are
the best of ``--repeat`` calls without tracemalloc (slow rows: one call). The machine may be
shared: compare rows within one run, not across runs.

Run: ``PYTHONPATH=src python benchmarks/accounting.py`` (``--skip-slow`` leaves out
dp-accounting's PLD on table 1, which takes ~30 s and ~2.6 GB).
"""

from __future__ import annotations

import argparse
import math
import os
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from dpkit.accounting import (
    composed,
    gaussian_event,
    laplace_event,
    numerical_epsilon,
    pld_epsilon,
    poisson_subsampled,
    randomized_response_event,
    self_composed,
)


def _measure(fn: Callable[[], float], repeat: int) -> tuple[float, float, float]:
    """(value, best seconds, peak MB)."""
    best = math.inf
    value = math.nan
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return value, best, peak / 1e6


def closed_form_limit(mu: float, delta: float) -> float:
    from scipy import optimize, special

    def f(eps: float) -> float:
        a = special.log_ndtr(-eps / mu + mu / 2)
        b = special.log_ndtr(-eps / mu - mu / 2)
        return float(a + math.log(-math.expm1(eps + b - a)) - math.log(delta))

    return float(optimize.brentq(f, 0.0, mu * mu + 10 * mu, xtol=1e-12))


def _direct(kind: str, event: Any, delta: float, relation: str, interval: float = 1e-4) -> float:
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.privacy_accountant import NeighboringRelation
    from dp_accounting.rdp import rdp_privacy_accountant

    rel = (
        NeighboringRelation.REPLACE_ONE
        if relation == "replace"
        else NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    if kind == "rdp":
        accountant: Any = rdp_privacy_accountant.RdpAccountant(neighboring_relation=rel)
    else:
        accountant = pld_privacy_accountant.PLDAccountant(
            neighboring_relation=rel, value_discretization_interval=interval
        )
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


def _row(name: str, value: float, seconds: float, peak: float, note: str = "") -> None:
    print(f"{name:<46} {value:>12.6f} {seconds * 1000:>11.2f} ms {peak:>9.1f} MB  {note}")


def _header() -> None:
    print(f"{'method':<46} {'epsilon':>12} {'time':>14} {'peak':>12}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-slow", action="store_true")
    args = parser.parse_args(argv)
    delta = 1e-6
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"machine: {os.cpu_count()} CPU(s), load average {load:.1f} at start")
    print()
    print("1) ε at δ = 1e-6 for 1,000 composed Gaussians, σ = 1·Δ")
    _header()
    event = self_composed(gaussian_event(1.0), 1000)
    mu = math.sqrt(1000)
    _row("limit: μ-GDP closed form inline", *_measure(lambda: closed_form_limit(mu, delta), 20))
    result = numerical_epsilon(event, delta)
    value, seconds, peak = _measure(
        lambda: float(numerical_epsilon(event, delta).loss.epsilon), args.repeat * 4
    )
    _row(f"dpkit numerical_epsilon ({result.method})", value, seconds, peak, "rounded up")
    _row(
        "dp-accounting RDP",
        *_measure(lambda: _direct("rdp", event, delta, "add_or_remove"), args.repeat),
        "loose",
    )
    if not args.skip_slow:
        _row(
            "dp-accounting PLD (grid 1e-4)",
            *_measure(lambda: _direct("pld", event, delta, "add_or_remove"), 1),
        )
    print()
    mixes = {
        "add_or_remove": composed(
            [
                self_composed(laplace_event(10.0), 100),
                self_composed(gaussian_event(5.0), 100),
                self_composed(poisson_subsampled(gaussian_event(1.0), 0.01), 1000),
            ]
        ),
        "replace": composed(
            [
                self_composed(randomized_response_event(0.5, 4), 10),
                self_composed(gaussian_event(5.0), 100),
                self_composed(poisson_subsampled(gaussian_event(1.0), 0.01), 1000),
            ]
        ),
    }
    labels = {
        "add_or_remove": "100 Laplace(10) + 100 Gaussian(5) + 1000 subsampled Gaussian(1, q=.01)",
        "replace": "10 RR(p=.5, 4 buckets) + 100 Gaussian(5) + 1000 subsampled Gaussian(1, q=.01)",
    }
    for n, (relation, mix) in enumerate(mixes.items(), start=2):
        print(f"{n}) mixed, {relation}: {labels[relation]}, δ = 1e-6")
        _header()
        result = numerical_epsilon(mix, delta, neighbouring=relation)  # type: ignore[arg-type]
        value, seconds, peak = _measure(
            lambda mix=mix, relation=relation: float(
                numerical_epsilon(mix, delta, neighbouring=relation).loss.epsilon  # type: ignore[arg-type]
            ),
            max(1, args.repeat // 2),
        )
        _row(f"dpkit numerical_epsilon ({result.method})", value, seconds, peak, result.detail)
        interval = float(result.detail.rsplit(" ", 1)[1]) if result.method == "pld" else 1e-3
        fine = float(
            pld_epsilon(
                mix, delta, value_discretization_interval=interval / 10, neighbouring=relation
            )  # type: ignore[arg-type]
        )
        print(
            f"{'  excess over dpkit PLD on a 10x finer grid':<46} "
            f"{(value - fine) / fine:>12.2e} relative (finer grid: ε = {fine:.6f})"
        )
        for kind, name, interval_direct in (
            ("rdp", "dp-accounting RDP", 0.0),
            ("pld", "dp-accounting PLD (grid 1e-3)", 1e-3),
        ):
            try:
                measured = _measure(
                    lambda mix=mix, relation=relation, kind=kind, iv=interval_direct: _direct(
                        kind, mix, delta, relation, iv
                    ),
                    1,
                )
            except Exception as exc:  # dp-accounting refuses some events under "replace"
                print(f"{name:<46} {'unsupported':>12}  ({str(exc).split('. ')[0][-70:]})")
                continue
            _row(name, *measured)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
