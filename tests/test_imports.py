"""The package's import graph has no cycle, counting imports inside functions as well.

The graph is built statically with :mod:`ast` from the source files, so it sees every ``import``
statement wherever it sits (module level, inside a function, under a condition): an import moved
into a function to dodge a circular import at load time still closes the circle here. Edges run
from a module to the ``sgmc`` module an import statement names: ``from . import x`` names the
submodule ``x`` when there is one (else the package), ``from .a import f`` names ``a``. Parent
packages that Python executes on the way (``sgmc/__init__.py`` re-exports the public API) are not
edges; otherwise every module would depend on the whole package through its ``__init__``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "sgmc"


def _modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of the package."""
    out = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(node: ast.AST, here: str, is_pkg: bool, known: set) -> list[str]:
    """The sgmc modules an import statement names (resolved relative to module ``here``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return [_known_prefix(n, known) for n in names if n == "sgmc" or n.startswith("sgmc.")]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        pkg = here.split(".") if is_pkg else here.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if not (base == "sgmc" or base.startswith("sgmc.")):
        return []
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in known else _known_prefix(base, known))
    return out


def _known_prefix(name: str, known: set) -> str:
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the sgmc modules it imports anywhere in its source (self-edges dropped)."""
    mods = _modules(root)
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_pkg = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(t for t in _targets(node, name, is_pkg, known) if t and t != name)
        graph[name] = deps
    return graph


@functools.lru_cache(maxsize=1)
def _package_graph() -> dict[str, frozenset[str]]:
    return {k: frozenset(v) for k, v in import_graph().items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a closed path ``[a, b, ..., a]``, or ``None`` (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph.get(start, ())))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            s = state.get(nxt)
            if s == 1:
                return path[path.index(nxt):] + [nxt]
            if s is None:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_graph_sees_function_local_and_relative_imports(tmp_path):
    pkg = tmp_path / "sgmc"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n    return b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("import numpy\nfrom .. import c\n")
    (pkg / "c.py").write_text("import sgmc.sub.b as b\n")
    graph = import_graph(pkg)
    assert graph["sgmc"] == {"sgmc.a"}
    assert graph["sgmc.a"] == {"sgmc.sub.b"}
    assert graph["sgmc.sub.b"] == {"sgmc.c"}
    assert graph["sgmc.c"] == {"sgmc.sub.b"}
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"sgmc.sub.b", "sgmc.c"} and cycle[0] == cycle[-1]
    del graph["sgmc.c"]
    assert find_cycle(graph) is None


@pytest.mark.parametrize(
    ("graph", "cyclic"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
        ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, False),  # a diamond is no cycle
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
        ({"a": {"a2"}, "a2": set(), "x": {"y"}, "y": {"z"}, "z": {"y"}}, True),
    ],
)
def test_find_cycle(graph, cyclic):
    cycle = find_cycle(graph)
    assert (cycle is not None) == cyclic
    if cycle:
        assert cycle[0] == cycle[-1]
        assert all(b in graph[a] for a, b in zip(cycle, cycle[1:]))


def test_package_has_no_import_cycle():
    graph = _package_graph()
    assert len(graph) > 50 and "sgmc._dispatch" in graph
    cycle = find_cycle(graph)
    msg = "" if cycle is None else "import cycle: " + " -> ".join(cycle)
    assert cycle is None, msg


def _reach(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module reachable from ``start``, each with the module it was reached from."""
    seen = {start: ""}
    todo = [start]
    while todo:
        here = todo.pop()
        for nxt in sorted(graph.get(here, ())):
            if nxt not in seen:
                seen[nxt] = here
                todo.append(nxt)
    return seen


def test_natives_are_leaves_below_the_seam():
    """No module of sgmc.backends reaches the dispatch seam or an algorithm that calls it."""
    graph = _package_graph()
    for mod in sorted(m for m in graph if m.startswith("sgmc.backends.")):
        seen = _reach(graph, mod)
        if "sgmc._dispatch" in seen:
            chain = ["sgmc._dispatch"]
            while seen[chain[-1]]:
                chain.append(seen[chain[-1]])
            msg = f"{mod} reaches the dispatch seam: " + " -> ".join(reversed(chain))
            raise AssertionError(msg)
