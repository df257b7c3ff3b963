"""Benchmark dpkit.local beside pure-ldp (optional: ``pip install dpkit[bench]``).

    PYTHONPATH=src python benchmarks/local.py [--n 1000000] [--peer-n 2000]

1. Aggregation: n OLH reports at d = 1024, ε = 2 (dpkit: bincount + one FFT; pure-ldp's
   LHServer hashes every report against every value in Python, so it is timed on ``--peer-n``
   reports and extrapolated linearly; its FastLHServer, which also draws hashes from a bounded
   family, runs at full n). MSE of the frequency estimates against the truth for each.
2. Client randomisation rates (reports per second) for k-RR, OLH, HR, HCMS, SUE, CMS and
   OUE over a sweep of d (the unary encodings draw one exact coin of about one random byte per
   bit: dpkit.noise.bernoulli_logistic_bytes).
3. Heavy hitters: PEM over a 2^32 domain, n users.

The figures printed are quoted in docs/local.md. Data are generated with numpy's RNG: they are
test inputs, not privacy randomness (all of dpkit's randomness comes from dpkit.noise).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from dpkit import local

try:  # optional peer
    from pure_ldp.frequency_oracles.direct_encoding import DEClient
    from pure_ldp.frequency_oracles.local_hashing import (
        FastLHClient,
        FastLHServer,
        LHClient,
        LHServer,
    )
    from pure_ldp.frequency_oracles.unary_encoding import UEClient

    HAVE_PEER = True
except ImportError:  # pragma: no cover
    HAVE_PEER = False


def _patch_pure_ldp_xxhash() -> None:
    """pure-ldp 1.2 hashes ``str`` objects; xxhash >= 3 wants bytes. Encode on its behalf (the
    hash values are those pure-ldp intends: xxh32 of the UTF-8 decimal string)."""
    import importlib

    import xxhash

    class _Shim:
        @staticmethod
        def xxh32(data: Any, seed: int = 0) -> Any:
            raw = data.encode() if isinstance(data, str) else data
            return xxhash.xxh32(raw, seed=seed % (1 << 32))

    for name in ("lh_client", "lh_server", "fast_lh_server", "fast_lh_client"):
        module = importlib.import_module(f"pure_ldp.frequency_oracles.local_hashing.{name}")
        if hasattr(module, "xxhash"):
            module.xxhash = _Shim  # type: ignore[attr-defined]


if HAVE_PEER:
    _patch_pure_ldp_xxhash()


def zipf_population(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    weights = 1.0 / np.arange(1, d + 1) ** 1.1
    return rng.choice(d, size=n, p=weights / weights.sum())


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def cpu_timed(fn: Any, *args: Any) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a machine shared with other jobs the CPU
    time is what the call itself cost (numpy here runs on one thread)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def aggregation(console: Console, n: int, peer_n: int, rng: np.random.Generator) -> list[Any]:
    d, eps = 1024, 2.0
    values = zipf_population(n, d, rng)
    truth = np.bincount(values, minlength=d) / n
    rows: list[Any] = []
    olh = local.OptimizedLocalHashing(d, eps)
    reports, t_client = timed(olh.randomize, values)
    estimate, t_server = timed(olh.aggregate, reports)
    mse = float(np.mean((estimate.values - truth) ** 2))
    analytic = float(np.mean(olh.variance(n, truth)))
    rows.append((f"dpkit OLH (g={olh.g})", n, t_server, t_server, mse, analytic))
    console.print(f"dpkit OLH client: {n:,} reports in {t_client:.2f} s")
    if HAVE_PEER:
        sub = values[:peer_n]
        client = LHClient(eps, d, use_olh=True, index_mapper=lambda x: x)
        server = LHServer(eps, d, use_olh=True, index_mapper=lambda x: x)
        private = [client.privatise(int(v)) for v in sub]
        _, t_peer = timed(lambda: [server.aggregate(p) for p in private])
        est = np.array([server.estimate(i, suppress_warnings=True) for i in range(d)]) / peer_n
        sub_truth = np.bincount(sub, minlength=d) / peer_n
        peer_mse_small = float(np.mean((est - sub_truth) ** 2))
        rows.append(
            (
                f"pure-ldp LHServer (g={server.g}), extrapolated",
                n,
                t_peer,
                t_peer * n / peer_n,
                peer_mse_small * peer_n / n,
                float("nan"),
            )
        )
        k = 1024
        fast_client = FastLHClient(eps, d, k, use_olh=True, index_mapper=lambda x: x)
        fast_server, _ = timed(FastLHServer, eps, d, k, use_olh=True, index_mapper=lambda x: x)
        private = [fast_client.privatise(int(v)) for v in values]
        _, t_agg = timed(lambda: [fast_server.aggregate(p) for p in private])
        _, t_est = timed(fast_server._update_estimates)
        est = np.asarray(fast_server.estimated_data) / n
        rows.append(
            (
                f"pure-ldp FastLHServer (k={k} hashes)",
                n,
                t_agg + t_est,
                t_agg + t_est,
                float(np.mean((est - truth) ** 2)),
                float("nan"),
            )
        )
    return rows


OUE_SWEEP = (16, 64, 128, 256, 512, 768, 1024)


def _peer_client(kind: str, d: int) -> Any:
    if kind == "grr":
        return DEClient(2.0, d, index_mapper=lambda x: x)
    if kind == "olh":
        return LHClient(2.0, d, use_olh=True, index_mapper=lambda x: x)
    return UEClient(2.0, d, use_oue=True, index_mapper=lambda x: x)


def client_rates(n: int, rng: np.random.Generator, peer_n: int) -> list[Any]:
    """Reports per second of each client, dpkit at n reports, pure-ldp on ``peer_n`` (its
    clients are per-report Python loops: the rate does not depend on n)."""
    rows = []
    cases: list[tuple[str, Any, int, str]] = [
        ("k-RR (GRR)", local.GeneralizedRR(1024, 2), 1024, "grr"),
        ("OLH", local.OptimizedLocalHashing(1024, 2), 1024, "olh"),
        ("Hadamard response", local.HadamardResponse(1024, 2), 1024, ""),
        ("HCMS", local.HadamardCountMeanSketch(1024, 2), 1024, ""),
        ("SUE, packed", local.SymmetricUnaryEncoding(1024, 2, packed=True), 1024, ""),
        ("CMS (m = 199)", local.CountMeanSketch(1024, 2), 1024, ""),
        ("OUE, bools", local.OptimizedUnaryEncoding(1024, 2), 1024, "oue"),
    ]
    cases += [
        ("OUE, packed", local.OptimizedUnaryEncoding(d, 2, packed=True), d, "oue")
        for d in OUE_SWEEP
    ]
    peer_clients: dict[tuple[str, int], Any] = {}
    for label, oracle, d, peer in cases:
        values = rng.integers(0, d, n)
        seconds, cpu_seconds = cpu_timed(oracle.randomize, values)
        peer_rate = float("nan")
        if HAVE_PEER and peer and d in (16, 1024):
            key = (peer, d)
            if key not in peer_clients:
                peer_clients[key] = _peer_client(peer, d)
            sample = values[:peer_n].tolist()
            client = peer_clients[key]
            _, t_peer = timed(lambda c=client, s=sample: [c.privatise(v) for v in s])
            peer_rate = len(sample) / t_peer
        rows.append((f"{label} (d={d})", d, label, n / seconds, n / cpu_seconds, peer_rate))
    return rows


def coin_rates(coins: int) -> tuple[float, float]:
    """Exact Bernoulli(1/(1 + e^2)) coins per second: one 64-bit word per coin (the sampler the
    unary encodings used before) against about one byte per coin (what they use now)."""
    from fractions import Fraction

    from dpkit.noise import bernoulli_logistic, bernoulli_logistic_bytes

    _, t_word = timed(bernoulli_logistic, Fraction(1), Fraction(2), coins)
    _, t_byte = timed(bernoulli_logistic_bytes, Fraction(1), Fraction(2), coins, complement=True)
    return coins / t_word, coins / t_byte


def heavy_hitters(n: int, rng: np.random.Generator) -> tuple[float, float, int]:
    heavy = rng.integers(0, 2**32, 10)
    values = rng.integers(0, 2**32, n)
    share = np.array([0.1, 0.08, 0.07, 0.06, 0.05, 0.04, 0.04, 0.03, 0.03, 0.02])
    pick = np.searchsorted(np.cumsum(share), rng.random(n))
    mask = pick < 10
    values[mask] = heavy[pick[mask]]
    pem = local.PrefixExtension(2, k=16, eta=4)
    reports, t_client = timed(pem.randomize, values)
    found, t_server = timed(pem.heavy_hitters, reports)
    hits = len(set(found.values.tolist()) & set(heavy.tolist()))
    return t_client, t_server, hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--peer-n", type=int, default=2000)
    args = parser.parse_args()
    console = Console(width=120)
    rng = np.random.default_rng(2026)
    console.rule(f"1. OLH aggregation, n = {args.n:,}, d = 1024, ε = 2")
    table = Table("implementation", "reports", "measured s", "s for n", "MSE", "analytic MSE")
    rows = aggregation(console, args.n, args.peer_n, rng)
    for name, count, measured, full, mse, analytic in rows:
        table.add_row(
            name,
            f"{count:,}",
            f"{measured:.3f}",
            f"{full:.2f}",
            f"{mse:.3e}",
            "" if math.isnan(analytic) else f"{analytic:.3e}",
        )
    console.print(table)
    if len(rows) > 1:
        console.print(
            f"speed-up vs pure-ldp LHServer: {rows[1][3] / rows[0][3]:,.0f}×; "
            f"vs FastLHServer: {rows[2][3] / rows[0][3]:,.0f}×"
        )
    console.rule(f"2. Client randomisation, {args.n:,} reports each")
    rates = Table(
        "oracle", "dpkit reports/s (wall)", "dpkit reports per CPU-s", "pure-ldp reports/s"
    )
    measured = client_rates(args.n, rng, args.peer_n)
    for name, _, _, rate, cpu_rate, peer in measured:
        rates.add_row(
            name,
            f"{rate:,.0f}",
            f"{cpu_rate:,.0f}",
            "" if math.isnan(peer) else f"{peer:,.0f}",
        )
    console.print(rates)
    for column, index in (("wall", 3), ("CPU", 4)):
        fast = [r[1] for r in measured if r[2] == "OUE, packed" and r[index] >= 1e6]
        console.print(
            f"largest d in the sweep at which packed OUE reaches 10^6 reports/s ({column}): "
            + (str(max(fast)) if fast else "none")
        )
    word, byte = coin_rates(20 * args.n)
    console.print(
        f"exact coins/s: one word per coin {word:,.0f}; one byte per coin {byte:,.0f} "
        f"({byte / word:.1f}×)"
    )
    console.rule(f"3. PEM heavy hitters, {args.n:,} users over 2^32, ε = 2")
    t_client, t_server, hits = heavy_hitters(args.n, rng)
    console.print(
        f"clients {t_client:.2f} s, server {t_server:.2f} s, total {t_client + t_server:.2f} s; "
        f"found {hits} of the 10 planted heavy hitters"
    )


if __name__ == "__main__":
    main()
