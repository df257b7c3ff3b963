"""Small TPC-H-shaped databases with every edge a join plan must handle, and neighbours.

The privacy unit is the customer (``customer.c_custkey``); orders link by ``o_custkey``,
line items by ``l_orderkey`` through orders; ``nation`` is public. Edge cases, all present in
every database :func:`database` makes: customers with no orders, a customer with two rows,
orders of no customer in the table (their unit is the key), orders with a NULL customer,
order keys shared by two customers (line items under them belong to no unit), order keys
repeated within one customer, line items of no order and with a NULL order key, NULL and
duplicate nation keys, and one customer whose line items far exceed any bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

TABLES = ("customer", "orders", "lineitem")
LINKS = {"orders.o_custkey": "customer.c_custkey", "lineitem.l_orderkey": "orders.o_orderkey"}
UNIT = "customer.c_custkey"


def database(seed: int = 0, customers: int = 12) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    ids = np.arange(1, customers + 1)
    nation = rng.integers(0, 4, customers).astype("float64")
    nation[2] = np.nan
    nation[5:8] = [1.0, 2.0, 3.0]  # the customers of the shared and repeated order keys
    customer = pd.DataFrame(
        {
            "c_custkey": np.concatenate([ids, [ids[0]]]),  # customer 1 has two rows
            "c_nationkey": np.concatenate([nation, [nation[0]]]),
            "c_segment": rng.choice(["AUTO", "BUILD", "MACH"], customers + 1),
            "c_acctbal": np.round(rng.normal(500, 300, customers + 1), 2),
        }
    )
    order_cust = rng.choice(ids[:-2], 30).astype("float64")  # the last two have no orders
    order_cust = np.concatenate([order_cust, [np.nan, 99.0, 6.0, 7.0, 8.0, 8.0]])
    order_keys = np.concatenate([np.arange(100, 130), [130, 131, 132, 132, 133, 133]])
    # key 132 is shared by customers 6 and 7 (ambiguous); key 133 is repeated within customer 8
    status = rng.choice(["F", "O", "P"], order_keys.size)
    status[-4:] = "F"
    orders = pd.DataFrame(
        {
            "o_orderkey": order_keys,
            "o_custkey": order_cust,
            "o_orderstatus": status,
            "o_totalprice": np.round(rng.uniform(10, 1000, order_keys.size), 2),
            "o_orderdate": pd.to_datetime("1995-01-01")
            + pd.to_timedelta(rng.integers(0, 1500, order_keys.size), unit="D"),
        }
    )
    line_keys = rng.choice(order_keys, 80).astype("float64")
    heavy = np.full(40, float(order_keys[np.flatnonzero(order_cust == order_cust[0])[0]]))
    line_keys = np.concatenate([line_keys, heavy, [np.nan, 555.0, 132.0, 133.0]])
    lineitem = pd.DataFrame(
        {
            "l_orderkey": line_keys,
            "l_quantity": rng.integers(1, 50, line_keys.size).astype("float64"),
            "l_extendedprice": np.round(rng.uniform(100, 9000, line_keys.size), 2),
            "l_discount": rng.choice([0.0, 0.02, 0.05, 0.1], line_keys.size),
            "l_returnflag": rng.choice(["A", "N", "R"], line_keys.size),
        }
    )
    nations = pd.DataFrame(
        {"n_nationkey": [0.0, 1.0, 2.0, 3.0, 3.0], "n_name": ["A", "B", "C", "D", "D2"]}
    )
    return {"customer": customer, "orders": orders, "lineitem": lineitem, "nation": nations}


def remove_unit(db: dict[str, pd.DataFrame], unit: float) -> dict[str, pd.DataFrame]:
    """The neighbour without ``unit``: its customer rows and every row reachable from them
    (its orders, and the line items of those orders' keys)."""
    customer = db["customer"][db["customer"]["c_custkey"] != unit]
    mine = db["orders"]["o_custkey"] == unit
    keys = set(db["orders"].loc[mine, "o_orderkey"].tolist())
    orders = db["orders"][~mine]
    lineitem = db["lineitem"][~db["lineitem"]["l_orderkey"].isin(keys)]
    return {**db, "customer": customer, "orders": orders, "lineitem": lineitem}


def units(db: dict[str, pd.DataFrame]) -> list[float]:
    """Every unit of the database (customers, and customer keys that only orders hold)."""
    found = set(db["customer"]["c_custkey"].tolist()) | set(
        db["orders"]["o_custkey"].dropna().tolist()
    )
    return sorted(found)


def session_options(**more: Any) -> dict[str, Any]:
    return {"links": dict(LINKS), **more}


def split(db: dict[str, pd.DataFrame]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(private tables, public tables)."""
    return {t: db[t] for t in TABLES}, {"nation": db["nation"]}
