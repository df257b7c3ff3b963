"""`dpkit query` over several tables (issue 23): --table / --public NAME=PATH, --unit
TABLE.COLUMN, --link CHILD.COLUMN=PARENT.COLUMN, --schema TABLE.COLUMN=KIND, with a budget made
by `dpkit budget create --unit TABLE.COLUMN` in a shared ledger file.

At ε = 10^6 a count's noise is 0 (see QUERY_LOSS_CEILING), so the printed counts are the exact
answers over the joined tables, compared with pandas; every refusal exits 2 and charges nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from dpkit.cli import app as main_app
from dpkit.cli.query import query_command
from dpkit.core._losses import PureDP
from dpkit.ledger import BudgetMonitor, Ledger

app = typer.Typer()
app.command("query")(query_command)


@app.command()
def other() -> None:  # a second command keeps "query" a sub-command, as in the main app
    """Unused."""


def _frames() -> dict[str, pd.DataFrame]:
    customer = pd.DataFrame(
        {
            "c_custkey": [1, 2, 3, 4, 5, 6],
            "c_segment": ["AUTO", "AUTO", "BUILD", "BUILD", "MACH", "MACH"],
            "c_nationkey": [0, 1, 1, 2, 7, 0],  # 7: no nation (the LEFT JOIN keeps it)
        }
    )
    orders = pd.DataFrame(
        {
            "o_orderkey": [10, 11, 12, 13, 14, 15, 16],
            "o_custkey": [1, 1, 2, 3, 3, 3, 5],  # customers 4 and 6 have no orders
            "o_totalprice": [100.0, 250.5, 80.0, 10.0, 20.0, 30.0, 999.0],
            "o_orderdate": pd.to_datetime(
                [
                    "1995-01-01",
                    "1996-03-01",
                    "1995-06-01",
                    "1997-01-01",
                    "1994-02-02",
                    "1995-05-05",
                    "1996-12-31",
                ]
            ),
        }
    )
    lineitem = pd.DataFrame(
        {
            "l_orderkey": [10, 10, 11, 12, 13, 13, 13, 14, 16, 16],
            "l_quantity": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
            "l_extendedprice": [
                100.0,
                200.0,
                300.0,
                400.0,
                500.0,
                600.0,
                700.0,
                800.0,
                900.0,
                1000.0,
            ],
            "l_discount": [0.0, 0.1, 0.0, 0.05, 0.0, 0.0, 0.1, 0.0, 0.0, 0.02],
        }
    )
    nation = pd.DataFrame({"n_nationkey": [0, 1, 2], "n_name": ["FRANCE", "PERU", "KENYA"]})
    return {"customer": customer, "orders": orders, "lineitem": lineitem, "nation": nation}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tpch")
    found = {}
    for name, frame in _frames().items():
        if name == "orders":  # one table as CSV: its columns are text until declared
            found[name] = root / "orders.csv"
            frame.to_csv(found[name], index=False)
        else:
            found[name] = root / f"{name}.parquet"
            frame.to_parquet(found[name])
    return found


UNIT = "customer.c_custkey"
LINKS = ["orders.o_custkey=customer.c_custkey", "lineitem.l_orderkey=orders.o_orderkey"]
SCHEMA = (
    "orders.o_custkey=int,orders.o_orderkey=int,orders.o_totalprice=float,orders.o_orderdate=date"
)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    result = CliRunner().invoke(
        main_app,
        ["budget", "create", "tpch", "--epsilon", "1e7", "--unit", UNIT, "--ledger", str(path)],
    )
    assert result.exit_code == 0, result.output
    assert "per customer.c_custkey" in result.output
    return path


def _tables(files: dict[str, Path]) -> list[str]:
    args = [f"--table={name}={files[name]}" for name in ("customer", "orders", "lineitem")]
    args += [f"--public=nation={files['nation']}"]
    for link in LINKS:
        args += ["--link", link]
    return [*args, "--schema", SCHEMA]


def invoke(ledger: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["query", *args, "--dataset", "tpch", "--ledger", str(ledger)],
        env={"COLUMNS": "160"},
    )
    return result.exit_code, result.output


def run(ledger: Path, *args: str) -> str:
    code, out = invoke(ledger, *args)
    assert code == 0, out
    return out


def spent(ledger: Path) -> tuple[float, int]:
    with Ledger.open(ledger, monitor=BudgetMonitor(log=False)) as opened:
        (status,) = opened.budgets("tpch")
        return float(status.spent.epsilon), status.charges


def cells(out: str, key: str) -> list[str]:
    """The cells of the printed row whose first cell is ``key``."""
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("│")]
        if len(parts) > 2 and parts[1] == key:
            return parts[2:-1]
    raise AssertionError(f"no row {key!r} in:\n{out}")


def number(text: str) -> float:
    return float(re.sub(r"[,\s]", "", text))


EXACT = ["--epsilon", "1e6"]


def test_join_of_three_tables_with_public_keys_answers_exactly_twice(
    files: dict[str, Path], ledger: Path
) -> None:
    db = _frames()
    joined = db["customer"].merge(db["orders"], left_on="c_custkey", right_on="o_custkey")
    joined = joined.merge(db["lineitem"], left_on="o_orderkey", right_on="l_orderkey")
    truth = joined.groupby("c_segment").size()
    query = (
        "SELECT c_segment, COUNT(*) AS n FROM customer JOIN orders ON c_custkey = o_custkey "
        "JOIN lineitem ON l_orderkey = o_orderkey GROUP BY c_segment"
    )
    for _ in range(2):  # the same query twice: the same exact answer, charged twice
        out = run(
            ledger,
            query,
            *_tables(files),
            *EXACT,
            "--max-rows",
            "20",
            "--keys",
            "c_segment=AUTO,BUILD,MACH",
        )
        for segment in ("AUTO", "BUILD", "MACH"):
            assert number(cells(out, segment)[0]) == truth.get(segment, 0)
        assert "tables customer, orders, lineitem, nation (public) (dataset tpch)" in out
        assert "after the joins" in out
    assert spent(ledger) == (2e6, 2)


def test_per_person_subquery_and_declared_csv_columns(files: dict[str, Path], ledger: Path) -> None:
    out = run(
        ledger,
        "SELECT COUNT(*) AS buyers FROM (SELECT o_custkey, COUNT(*) AS n FROM orders "
        "GROUP BY o_custkey) AS per_customer",
        *_tables(files),
        *EXACT,
        "--max-rows",
        "5",
    )
    assert number(cells(out, "buyers")[0]) == 4  # customers 1, 2, 3 and 5 have orders
    # a column of the CSV table declared float: SUM over the join, with a WHERE on a date
    out = run(
        ledger,
        "SELECT SUM(o_totalprice, 0, 1000) AS total FROM orders JOIN customer "
        "ON o_custkey = c_custkey WHERE o_orderdate < DATE '1996-01-01'",
        *_tables(files),
        *EXACT,
        "--max-rows",
        "5",
    )
    assert number(cells(out, "total")[0]) == pytest.approx(100 + 80 + 20 + 30, abs=1)


def test_left_join_with_a_public_table(files: dict[str, Path], ledger: Path) -> None:
    query = (
        "SELECT n_name, COUNT(*) AS n FROM customer LEFT JOIN nation "
        "ON c_nationkey = n_nationkey GROUP BY n_name"
    )
    for _ in range(2):
        out = run(
            ledger,
            query,
            *_tables(files),
            *EXACT,
            "--max-rows",
            "2",
            "--keys",
            "n_name=FRANCE,PERU,KENYA",
        )
        assert [number(cells(out, k)[0]) for k in ("FRANCE", "PERU", "KENYA")] == [2, 2, 1]


def test_unit_defaults_to_the_datasets_and_must_match(files: dict[str, Path], ledger: Path) -> None:
    query = "SELECT COUNT(*) AS n FROM customer"
    out = run(ledger, query, *_tables(files), *EXACT, "--max-rows", "1", "--unit", UNIT)
    assert number(cells(out, "n")[0]) == 6
    code, out = invoke(
        ledger, query, *_tables(files), *EXACT, "--max-rows", "1", "--unit", "orders.o_custkey"
    )
    assert code == 2 and "does not match the privacy unit" in out


REFUSALS = [
    # (links, extra arguments, the query, words of the message)
    (["ordrs.o_custkey=customer.c_custkey"], [], "no table 'ordrs'"),
    (["orders.o_custkey"], [], "expected CHILD.COLUMN=PARENT.COLUMN"),
    (["orders.nope=customer.c_custkey"], [], "nope"),
    ([LINKS[0], LINKS[0]], [], "given twice"),
    ([LINKS[0]], [], "lineitem"),  # a private table with no path to the unit
    ([*LINKS, "orders.o_orderkey=lineitem.l_orderkey"], [], "orders"),  # two paths / a cycle
    (LINKS, ["--unit", "c_custkey"], "expected TABLE.COLUMN"),
    (LINKS, ["--unit", "nation.n_nationkey"], "not a private table"),
    (LINKS, ["--schema", "o_totalprice=float"], "TABLE.COLUMN=kind"),
    (LINKS, ["--schema", "shop.x=float"], "no table 'shop'"),
    (LINKS, ["--table", "extra=elsewhere.parquet"], "no file"),
    (LINKS, ["--table", "customer"], "expected NAME=PATH"),
    (LINKS, ["--public", "nation=x.csv"], "already given"),
    (LINKS, ["--keys", "c_segment=AUTO"], "no GROUP BY"),
]


@pytest.mark.parametrize(("links", "extra", "words"), REFUSALS)
def test_refusals_charge_nothing(
    files: dict[str, Path], ledger: Path, links: list[str], extra: list[str], words: str
) -> None:
    args = [a for a in _tables(files) if a != "--link" and a not in LINKS]
    for link in links:
        args += ["--link", link]
    code, out = invoke(
        ledger, "SELECT COUNT(*) FROM lineitem", *args, *extra, *EXACT, "--max-rows", "1"
    )
    assert code == 2, out
    assert words in out, out
    assert spent(ledger) == (0.0, 0)


QUERY_REFUSALS = [
    ("SELECT COUNT(*) FROM orders JOIN customer ON o_custkey < c_custkey", "non-equi"),
    ("SELECT COUNT(*) FROM orders JOIN customer ON o_nope = c_custkey", "o_nope"),
    ("SELECT COUNT(*) FROM shops", "shops"),
    ("SELECT COUNT(*)", "FROM"),
]


@pytest.mark.parametrize(("query", "words"), QUERY_REFUSALS)
def test_query_refusals_charge_nothing(
    files: dict[str, Path], ledger: Path, query: str, words: str
) -> None:
    code, out = invoke(ledger, query, *_tables(files), *EXACT, "--max-rows", "1")
    assert code == 2, out
    assert words in out, out
    assert spent(ledger) == (0.0, 0)


def test_positional_data_with_tables_and_a_single_table_unit_are_refused(
    files: dict[str, Path], ledger: Path, tmp_path: Path
) -> None:
    code, out = invoke(
        ledger,
        str(files["customer"]),
        "SELECT COUNT(*) FROM customer",
        *_tables(files),
        *EXACT,
        "--max-rows",
        "1",
    )
    assert code == 2 and "give only the query" in out
    code, out = invoke(
        ledger,
        "SELECT COUNT(*) FROM customer",
        f"--public=nation={files['nation']}",
        *EXACT,
        "--max-rows",
        "1",
    )
    assert code == 2 and "--table" in out
    # a dataset whose unit is a bare column (a single-table dataset)
    single = tmp_path / "single.sqlite"
    with Ledger.open(single, monitor=BudgetMonitor(log=False)) as opened:
        opened.create_budget("tpch", PureDP(10**7), privacy_unit="c_custkey")
    code, out = invoke(
        single, "SELECT COUNT(*) FROM customer", *_tables(files), *EXACT, "--max-rows", "1"
    )
    assert code == 2 and "needs a unit TABLE.COLUMN" in out
    code, out = invoke(
        ledger,
        "SELECT COUNT(*) FROM customer",
        *_tables(files),
        *EXACT,
        "--max-rows",
        "1",
        "--server",
        "http://localhost:1",
    )
    assert code == 2 and "--table" in out and "--server" in out
    assert spent(ledger) == (0.0, 0)


def test_budget_create_refuses_a_half_dotted_unit(tmp_path: Path) -> None:
    for unit in ("customer.", ".c_custkey"):
        result = CliRunner().invoke(
            main_app,
            [
                "budget",
                "create",
                "x",
                "--epsilon",
                "1",
                "--unit",
                unit,
                "--ledger",
                str(tmp_path / "l.sqlite"),
            ],
        )
        assert result.exit_code == 2, result.output
        assert "TABLE.COLUMN" in result.output


def test_a_truncated_join_with_max_per_key(files: dict[str, Path], ledger: Path) -> None:
    """Customers of the same nation pair rows of different people: refused without
    --max-per-key; with it, each side keeps one row per customer and one per nation key, so
    the four nation keys give four pairs, charged once at the query's ε."""
    query = "SELECT COUNT(*) AS n FROM customer a JOIN customer b ON a.c_nationkey = b.c_nationkey"
    code, out = invoke(ledger, query, *_tables(files), *EXACT, "--max-rows", "1")
    assert code == 2 and "max_per_key" in out
    assert spent(ledger) == (0.0, 0)
    out = run(
        ledger, query, *_tables(files), *EXACT, "--max-rows", "1", "--max-per-key", "1", "--explain"
    )
    assert number(cells(out, "n")[0]) == 4
    assert "truncated join" in out
    assert spent(ledger) == (1e6, 1)
    code, out = invoke(
        ledger, str(files["customer"]), "SELECT COUNT(*)", *EXACT, "--max-per-key", "1"
    )
    assert code == 2 and "--max-per-key" in out
    assert spent(ledger) == (1e6, 1)


def test_metadata_file_over_several_tables(
    files: dict[str, Path], ledger: Path, tmp_path: Path
) -> None:
    """--metadata (issue 25): kinds, bounds and key sets per TABLE.COLUMN (a query may name
    the column bare or through an alias), and the unit's max_rows."""
    meta = tmp_path / "tpch.toml"
    meta.write_text(
        "max_rows = 4\n"
        '[columns."orders.o_totalprice"]\nkind = "float"\nbounds = [0, 1000]\n'
        '[columns."customer.c_segment"]\nkeys = ["AUTO", "BUILD", "MACH", "NONE"]\n'
    )
    before = spent(ledger)
    out = run(
        ledger,
        "SELECT c_segment, COUNT(*) AS n, SUM(o.o_totalprice) AS total FROM customer "
        "JOIN orders o ON o.o_custkey = c_custkey GROUP BY c_segment",
        *_tables(files),
        "--metadata",
        str(meta),
        *EXACT,
        "--explain",
    )
    assert "sum(o_totalprice, [0, 1000])" in out, out
    assert "max_rows=4" in out, out
    assert [number(c) for c in cells(out, "AUTO")[:1]] == [3]
    assert cells(out, "NONE")  # a registered key without rows is released too
    assert spent(ledger)[1] == before[1] + 1
