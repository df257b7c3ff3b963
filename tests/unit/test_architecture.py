"""The shape of ``src/dpkit``: no import circle, and no library module importing the CLI.

Read from the source with :mod:`ast` (nothing is imported). Every import counts, at module level
and inside functions alike: an import hidden in a function is still a dependency, and a circle
through one is still a circle. Only imports under ``if TYPE_CHECKING:`` are left out (they never
run). ``from package import name`` depends on ``package.name`` when that is a module, else on
``package``. See docs/design.md, "Layers and extras".
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

CLI_IMPORTERS = ("dpkit.cli", "dpkit.__main__")
"""The modules that may import :mod:`dpkit.cli`: the CLI itself and ``python -m dpkit``."""


def modules(src: Path) -> dict[str, Path]:
    """Every module under ``src/dpkit`` by its dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for path in sorted((src / "dpkit").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(src: Path = SRC) -> dict[str, dict[str, int]]:
    """``{module: {imported dpkit module: line of the first such import}}``."""
    mods = modules(src)

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for module, path in mods.items():
        is_package = path.name == "__init__.py"
        targets: list[tuple[str, int]] = []
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets += [(alias.name, node.lineno) for alias in node.names]
                continue
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append((full if full in mods else base, node.lineno))
        for name, line in targets:
            target = owner(name)
            if target is not None and target != module:
                graph[module].setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    edges = [
        f"    {a} -> {b} (line {line})"
        for a in component
        for b, line in sorted(graph[a].items())
        if b in members
    ]
    return f"  {len(component)} modules: {', '.join(component)}\n" + "\n".join(edges)


def test_no_import_cycle_in_src() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import circles in src/dpkit (move code to the right layer):\n" + "\n".join(
        _describe(c, graph) for c in found
    )


def test_the_library_never_imports_the_cli() -> None:
    graph = import_graph()
    upward = [
        f"{module} -> {target} (line {line})"
        for module, targets in graph.items()
        if not any(module == c or module.startswith(c + ".") for c in CLI_IMPORTERS)
        for target, line in targets.items()
        if target == "dpkit.cli" or target.startswith("dpkit.cli.")
    ]
    assert not upward, "library modules importing the CLI:\n" + "\n".join(upward)


DEMO_IMPORTERS = ("dpkit.demos", "dpkit.cli")
"""The modules that may import :mod:`dpkit.demos`: the demos themselves and the CLI that runs
them (``dpkit demo``, ``dpkit ladder reproduce``)."""


def test_the_library_never_imports_the_demos() -> None:
    """Issue 22: the worked examples and the ladder paper's reproduction live in ``dpkit.demos``
    (they were five ``demo`` modules inside analytics, ml, local and the top package, and
    ``mechanisms/_ladder/_reproduce.py``); no library package depends on them."""
    graph = import_graph()
    upward = [
        f"{module} -> {target} (line {line})"
        for module, targets in graph.items()
        if not any(module == d or module.startswith(d + ".") for d in DEMO_IMPORTERS)
        for target, line in targets.items()
        if target == "dpkit.demos" or target.startswith("dpkit.demos.")
    ]
    assert not upward, "library modules importing the demos:\n" + "\n".join(upward)
    # the CLI names a module after each command (dpkit.cli.demo holds ``dpkit demo``, 20 lines)
    stray = sorted(
        m
        for m in graph
        if m.rpartition(".")[2] in {"demo", "_demo", "_reproduce"} and m != "dpkit.cli.demo"
    )
    assert not stray, f"demo modules outside dpkit.demos: {stray}"


def test_the_graph_sees_function_level_imports_and_skips_type_checking(tmp_path: Path) -> None:
    """The checker itself: a circle closed inside a function is found, one closed only under
    ``TYPE_CHECKING`` is not, and ``from package import module`` points at the module."""
    package = tmp_path / "dpkit"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from dpkit import b\n")
    (package / "b.py").write_text("def f():\n    from dpkit.a import x\n")
    (package / "c.py").write_text("import dpkit.a\n")
    (package / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dpkit.c import y\n"
        "from dpkit import c\n"
    )
    graph = import_graph(tmp_path)
    assert graph["dpkit.a"] == {"dpkit.b": 1}
    assert cycles(graph) == [["dpkit.a", "dpkit.b"]]
    (package / "b.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    from dpkit.a import x\n"
    )
    assert cycles(import_graph(tmp_path)) == []


def _engine_private_reads(path: Path) -> list[str]:
    """``engine._x`` / ``self.engine._x`` / ``session.engine._x`` reads in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        if name == "engine" and not node.attr.startswith("__"):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_engines_are_used_through_their_protocol() -> None:
    """Issue 22: no module outside analytics/engines reads an engine's private attributes, and
    no analytics module switches on engine names (blocks.py read 11 of them and switched on
    'duckdb'/'spark'). The service choosing what to build for its configured engine is
    configuration, not a leak, and is not checked for names."""
    analytics = SRC / "dpkit" / "analytics"
    engines = analytics / "_engines"
    reads: list[str] = []
    switches: list[str] = []
    for path in (SRC / "dpkit").rglob("*.py"):
        if engines in path.parents:
            continue
        reads += _engine_private_reads(path)
        if analytics not in path.parents:
            continue
        text = path.read_text(encoding="utf-8")
        names = ('== "duckdb"', '== "spark"', '== "pandas"', "BLOCK_ENGINES")
        switches += [f"{path.relative_to(SRC)}: {q}" for q in names if q in text]
    assert reads == [], reads
    assert switches == [], switches


ENGINES = SRC / "dpkit" / "analytics" / "_engines"

MAX_FUNCTION_LINES = 80
"""The longest function allowed in ``analytics/_engines/``, in lines from its ``def`` to its
last line, docstring left out (the docstrings state each stage's privacy invariant and should
never be cut to fit). 80 lines is one editor screen: a function a reader can hold in mind.
Issue 22 found a 360-line ``sql.build_query``; split, its stages are each under 50 lines of
code. The limit leaves room for the longest straight-line code that reads best whole (the SQL
of ``_timestamp_of_text``, ~70 lines) without letting a second ``build_query`` grow."""

LONG_FUNCTIONS = {
    "_csv.py:csv_problem": "one chunked pass over the file's bytes that carries nine pieces "
    "of state (quote parity, the record in progress, the line ending seen first, ...) from "
    "chunk to chunk; split, every part would take and return that state, which reads worse "
    "than the one loop (its steps are commented in order)",
}
"""Named exceptions to :data:`MAX_FUNCTION_LINES` (``file:function``) and why."""


def function_lengths(root: Path) -> dict[str, int]:
    """``{"file:function": lines}`` for every function under ``root`` (methods and nested
    functions too, as ``file:Class.method`` and ``file:outer.inner``), docstrings left out."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                doc = child.body[0]
                if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                    lines -= (doc.end_lineno or doc.lineno) - doc.lineno + 1
                out[f"{prefix}{child.name}"] = lines
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), f"{rel}:")
    return out


def test_engine_functions_are_short() -> None:
    """Issue 22 ("build_query in functions a reader can hold in mind"): no function in
    analytics/engines is longer than MAX_FUNCTION_LINES but the named exceptions, and every
    exception is still needed (a function split since is taken off the list)."""
    lengths = function_lengths(ENGINES)
    long = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES}
    unexplained = sorted(
        f"{name}: {n} lines" for name, n in long.items() if name not in LONG_FUNCTIONS
    )
    assert not unexplained, (
        f"functions longer than {MAX_FUNCTION_LINES} lines in analytics/engines (split them "
        "into named stages):\n" + "\n".join(unexplained)
    )
    stale = sorted(set(LONG_FUNCTIONS) - set(long))
    assert not stale, f"no longer long (take them off LONG_FUNCTIONS): {stale}"


def test_function_lengths_leave_out_docstrings(tmp_path: Path) -> None:
    """The checker itself: a docstring does not count, a nested function counts in its own
    right and within its parent, and methods are named by their class."""
    (tmp_path / "m.py").write_text(
        'def f():\n    """one\n    two\n    """\n    def g():\n        return 1\n    return g\n'
        "class C:\n    def h(self):\n        pass\n"
    )
    assert function_lengths(tmp_path) == {"m.py:f": 4, "m.py:f.g": 2, "m.py:C.h": 2}
