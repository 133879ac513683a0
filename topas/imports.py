"""The project's import graph, read from its sources with `ast` (nothing is imported or executed).

An edge `a -> b` says module `a` imports module `b` (or a name defined in it), with how:
- `module`: at module level, run when `a` is imported;
- `lazy`: inside a function, run when that function is (a lazy import hides a cycle, it does not remove it);
- `typing`: under `if TYPE_CHECKING:`, never run, read by type checkers only.

tests/test_imports.py checks the layering rules on this graph (docs/layout.md); topas.run_identity scopes a
run's code fingerprint to the modules a run executes (`reachable`), found on it too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("topas", "baselines", "analysis")
RUN = ("module", "lazy")  # the kinds of import that execute code


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every Python module of `packages` under `root` (notebooks aside), by dotted name."""
    out = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            if "notebooks" not in p.parts and "__pycache__" not in p.parts:
                out[module_name(p, root)] = p
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _names(node: ast.Import | ast.ImportFrom, module: str, is_pkg: bool) -> list[str]:
    """The absolute names an import statement of `module` refers to (modules, or names in modules)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:  # relative: resolved against the importing package
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" for a in node.names]


def imports(tree: ast.AST, module: str, is_pkg: bool) -> list[tuple[str, str]]:
    """(imported name, kind) of every import statement of `module`; kind: module, lazy or typing."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[ast.AST, str]] = [(tree, "module")]
    while stack:
        node, kind = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack += [(n, "typing") for n in node.body] + [(n, kind) for n in node.orelse]
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [(name, kind) for name in _names(node, module, is_pkg)]
        inner = "lazy" if kind == "module" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else kind
        stack += [(n, inner) for n in ast.iter_child_nodes(node)]
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (the longest known prefix), or None (third party)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in known:
            return cand
    return None


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> nx.DiGraph:
    """Modules and their imports; each edge carries `kinds`, the set of ways it is imported."""
    mods = modules(root, packages)
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for imported, kind in imports(tree, name, path.name == "__init__.py"):
            target = _resolve(imported, mods)
            if target is not None and target != name:
                if not g.has_edge(name, target):
                    g.add_edge(name, target, kinds=set())
                g.edges[name, target]["kinds"].add(kind)
    return g


def only(g: nx.DiGraph, kinds: Iterable[str]) -> nx.DiGraph:
    """The graph of the edges imported in one of `kinds` (e.g. RUN: what executes)."""
    kinds = set(kinds)
    return g.edge_subgraph([(a, b) for a, b, k in g.edges(data="kinds") if k & kinds]).copy()


def parents(module: str) -> list[str]:
    """The packages Python imports before `module` (`a.b.c`: `a`, `a.b`)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@cache
def _executed(root: Path) -> nx.DiGraph:
    g = import_graph(root, ("topas", "baselines"))
    run = only(g, RUN)
    run.add_nodes_from(g)
    run.add_edges_from((m, p) for m in list(g) for p in parents(m) if p in g)  # importing a.b runs a/__init__ first
    return run


def clear_cache() -> None:
    _executed.cache_clear()


def reachable(entries: Iterable[str], root: Path = ROOT) -> set[str]:
    """Every module of `topas` and `baselines` that importing `entries` may execute (their imports, lazy ones
    included, and the packages above each)."""
    run = _executed(root)
    out: set[str] = set()
    for e in entries:
        if e in run:
            out |= {e} | nx.descendants(run, e)
    return out
