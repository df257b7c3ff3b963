"""``unitless``: a relation whose unit is only a label, read without its links' joins; and
every shape where the unit is more than a label, refused (None)."""

from __future__ import annotations

from sqlglot import exp

from dpkit.analytics._engines._base import Step
from dpkit.analytics._engines._relation import (
    Join,
    KeyUnit,
    PerUnit,
    Project,
    Relation,
    Scan,
    Steps,
    Truncate,
    clean_columns,
    sql_steps,
    unitless,
)
from dpkit.analytics._expr import Lit, col

U = "__dpkit_unit"


def _annotated(table: str = "lineitem", columns: tuple[str, ...] = ("k", "x")) -> Project:
    """A private table's rows with their unit, as the planner builds them (a link's key map
    joined, the rows of one unit kept)."""
    parent = Project(Scan("orders", (("ok", "ok"), ("cust", "lo"), ("cust", "hi"))), (), ())
    keys = KeyUnit(parent, "ok", "lo", "hi", "key", "lo", "hi")
    scan = Scan(table, tuple((c, c) for c in columns))
    joined = Join(scan, keys, (("k", "key"),), "left")
    reached = Project(joined, tuple((c, c) for c in (*columns, "lo", "hi")))
    one = Steps(reached, (Step("filter", col("lo") == col("hi")),), reached.output)
    return Project(one, (*((c, c) for c in columns), ("lo", U)), annotates=table)


def _public(name: str = "part") -> Scan:
    return Scan(name, (("pk", "pk"), ("name", "name")))


def test_a_private_table_alone_is_read_as_stored_with_unit_zero() -> None:
    found = unitless(_annotated())
    assert found is not None
    node, unit = found
    assert unit == U
    assert isinstance(node, Steps) and node.output == ("k", "x", U)
    assert node.child == Scan("lineitem", (("k", "k"), ("x", "x")))
    assert node.steps == (Step("derive", Lit(0.0), U),)


def test_joins_with_public_tables_and_steps_keep_the_label() -> None:
    inner = Join(_annotated(), _public(), (("k", "pk"),), "inner")
    left = Join(_annotated(), _public(), (("k", "pk"),), "left")
    right = Join(_public(), _annotated(), (("pk", "k"),), "inner")
    stepped = Steps(inner, (Step("filter", col("x") > 1),), inner.output)
    renamed = Project(stepped, (("x", "y"), (U, U)))
    for node in (inner, left, right, stepped, renamed):
        assert unitless(node) is not None, node


def test_every_use_of_the_unit_beyond_a_label_is_refused() -> None:
    base = _annotated()
    cases: list[Relation] = [
        # the private side null-extended by a left join
        Join(_public(), base, (("pk", "k"),), "left"),
        # the unit as a join key, filtered on, replaced, copied, renamed, dropped
        Join(base, _public(), ((U, "pk"),), "inner"),
        Steps(base, (Step("filter", col(U) > 1),), base.output),
        Steps(base, (Step("derive", Lit(1.0), U),), base.output),
        Project(base, (("x", "x"), (U, U), (U, "copy"))),
        Project(base, (("x", "x"), (U, "other"))),
        Steps(base, (Step("select", columns=("x",)),), ("x",)),
        # two private tables; a per-unit aggregate; a truncation
        Join(base, _annotated("other", ("k2", "y")), (("k", "k2"),), "inner"),
        PerUnit(base, (U,), (("n", "count_star", ""),)),
        Truncate(base, ("k",), 2, ("k",)),
        # no private table at all
        _public(),
    ]
    for node in cases:
        assert unitless(node) is None, node


def test_clean_columns_are_those_no_definition_can_make_nan() -> None:
    free = {"lineitem": {"k"}, "orders": {"ok"}, "part": {"pk"}}
    node = Join(_annotated(), _public(), (("k", "pk"),), "inner")
    clean = clean_columns(node, lambda table: free.get(table, set()))
    # stored as integers; a key map's key; units converted as keys (NaN read as NULL)
    assert {"k", "pk", "ok", "key"} <= clean
    assert "x" not in clean and "name" not in clean  # stored as floats (or text)
    # the key map's units are MIN/MAX of the orders' customer keys, stored as floats here...
    assert "lo" not in clean
    # ...a derived column, a sum, and a name defined once cleanly and once not, are not clean
    derived = Steps(node, (Step("derive", col("k") * 1.5, "k"),), node.output)
    assert "k" not in clean_columns(derived, lambda table: free.get(table, set()))
    summed = PerUnit(node, (U,), (("n", "count", "x"), ("s", "sum", "x")))
    found = clean_columns(summed, lambda table: free.get(table, set()))
    assert "n" in found and "s" not in found


def test_steps_test_for_nan_only_in_columns_that_can_hold_it() -> None:
    """A relation's steps (such as the test that a row reaches one unit, ``lo == hi``) read a
    clean column as it is: TPC-H's integer customer keys were tested for NaN on every row."""
    kinds = {"lo": "numeric", "hi": "numeric"}
    step = (Step("filter", col("lo") == col("hi")),)
    select = exp.select("*").from_("t")
    for clean, tests in ((frozenset(), 2), ({"lo"}, 1), ({"lo", "hi"}, 0)):
        built, _ = sql_steps("duckdb", clean=clean)(select.copy(), step, ("lo", "hi"), kinds)
        assert built.sql("duckdb").upper().count("ISNAN") == tests, clean
