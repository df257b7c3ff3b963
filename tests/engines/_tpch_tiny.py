"""A tiny TPC-H-shaped database (the columns benchmarks/tpch.py's queries read), seeded, for
running the DP TPC-H queries on every engine in tests (the real generator is not needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def benchmark() -> Any:
    """benchmarks/tpch.py as a module (its QUERIES, PRIVATE, PUBLIC, LINKS, UNIT)."""
    name = "dpkit_bench_tpch"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks/tpch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def tables(seed: int = 0, customers: int = 60) -> dict[str, pd.DataFrame]:
    bench = benchmark()
    rng = np.random.default_rng(seed)
    nations = bench.NATIONS
    nation = pd.DataFrame(
        {
            "n_nationkey": np.arange(len(nations)),
            "n_name": nations,
            "n_regionkey": np.arange(len(nations)) % 5,
        }
    )
    region = pd.DataFrame(
        {
            "r_regionkey": np.arange(5),
            "r_name": ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"],
        }
    )
    few = np.array([2, 7, 12, 0, 1])  # three ASIA nations and two others: Q5's local suppliers
    supplier = pd.DataFrame({"s_suppkey": np.arange(20), "s_nationkey": rng.choice(few, 20)})
    part = pd.DataFrame(
        {
            "p_partkey": np.arange(40),
            "p_type": rng.choice(["PROMO BRUSHED TIN", "STANDARD PLATED", "PROMO ANODIZED"], 40),
        }
    )
    customer = pd.DataFrame(
        {
            "c_custkey": np.arange(1, customers + 1),
            "c_nationkey": rng.choice(few, customers),
            "c_mktsegment": rng.choice(["BUILDING", "AUTOMOBILE", "MACHINERY"], customers),
        }
    )
    n_orders = customers * 4
    start = np.datetime64("1993-01-01")
    orders = pd.DataFrame(
        {
            "o_orderkey": np.arange(1, n_orders + 1),
            "o_custkey": rng.integers(1, customers - 3, n_orders),  # a few without orders
            "o_orderdate": start + rng.integers(0, 2000, n_orders).astype("timedelta64[D]"),
            "o_orderpriority": rng.choice(bench.PRIORITIES, n_orders),
            "o_shippriority": np.zeros(n_orders, dtype=np.int64),
            "o_comment": rng.choice(["fast", "special requests here", "none"], n_orders),
        }
    )
    n_lines = n_orders * 3
    # five large orders (eight lines of 45-50 each: Q18's HAVING SUM(l_quantity) > 300)
    keys = np.concatenate(
        [rng.integers(1, n_orders + 1, n_lines - 40), np.repeat(np.arange(1, 6), 8)]
    )
    ship = orders["o_orderdate"].to_numpy()[keys - 1] + rng.integers(1, 120, n_lines).astype(
        "timedelta64[D]"
    )
    commit = ship + rng.integers(-30, 30, n_lines).astype("timedelta64[D]")
    receipt = ship + rng.integers(1, 30, n_lines).astype("timedelta64[D]")
    lineitem = pd.DataFrame(
        {
            "l_orderkey": keys,
            "l_partkey": rng.integers(0, 40, n_lines),
            "l_suppkey": rng.integers(0, 20, n_lines),
            "l_quantity": np.concatenate(
                [rng.integers(1, 51, n_lines - 40), rng.integers(45, 51, 40)]
            ).astype("float64"),
            "l_extendedprice": np.round(rng.uniform(900, 100_000, n_lines), 2),
            "l_discount": rng.choice([0.0, 0.04, 0.05, 0.06, 0.07, 0.1], n_lines),
            "l_tax": rng.choice([0.0, 0.02, 0.08], n_lines),
            "l_returnflag": rng.choice(["A", "N", "R"], n_lines),
            "l_linestatus": rng.choice(["F", "O"], n_lines),
            "l_shipdate": ship,
            "l_commitdate": commit,
            "l_receiptdate": receipt,
            "l_shipmode": rng.choice(["MAIL", "SHIP", "AIR", "RAIL"], n_lines),
        }
    )
    return {
        "customer": customer,
        "orders": orders,
        "lineitem": lineitem,
        "nation": nation,
        "region": region,
        "supplier": supplier,
        "part": part,
    }
