"""The import graph of the packages (docs/layout.md): no import cycle, and no engine module
imports a driver. Built by parsing the sources with `ast` (nothing is executed); imports
inside functions count too (a lazy import hides a cycle, it does not remove it), imports
under `if TYPE_CHECKING:` do not (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("topas", "baselines", "analysis")
# Modules that drive runs (Hydra runner, sweeps, tuning, fidelity, reproduction): engines are
# driven by them and must not import them.
DRIVERS = ("topas.runner", "topas.reproduce", "topas.sweep", "topas.tuning", "topas.fidelity", "analysis")
ENGINES = "topas.engines"
# Known exceptions: (importer, imported) -> one-line reason. Keep empty; each entry is a debt.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            if "notebooks" not in p.parts:
                out[_module_name(p)] = p
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_pkg: bool) -> list[str]:
    """Absolute names each import statement of `module` refers to (modules or names in modules)."""
    out: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing package
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            out += [f"{prefix}.{a.name}" for a in node.names]
        stack.extend(ast.iter_child_nodes(node))
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (the longest known prefix), or None (third party)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in known:
            return cand
    return None


def import_graph() -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for imported in _imports(tree, name, path.name == "__init__.py"):
            target = _resolve(imported, mods)
            if target is not None and target != name:
                g.add_edge(name, target)
    return g


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_graph_sees_the_packages_and_their_imports():
    g = import_graph()
    assert {"topas.runner", "topas.engines.sim.engine", "baselines.lpm", "analysis.report"} <= set(g)
    assert g.has_edge("topas.runner", "topas.engines.latency.specs")  # a module-level import
    assert g.has_edge("topas.engines.latency.factory", "topas.engines.latency.aiconfigurator")  # inside a function


def test_no_import_cycle():
    g = import_graph()
    g.remove_edges_from(KNOWN_CYCLE_EDGES)
    cycles = [c for c in nx.simple_cycles(g)]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + [c[0]]) for c in sorted(cycles)[:10])


def test_no_engine_imports_a_driver():
    g = import_graph()
    bad = sorted((a, b) for a, b in g.edges if _under(a, ENGINES) and any(_under(b, d) for d in DRIVERS)
                 and (a, b) not in KNOWN_UPWARD)
    assert not bad, "engine modules importing drivers: " + ", ".join(f"{a} -> {b}" for a, b in bad)


# The real SGLang engine by role (topas/engines/sglang/__init__.py): code in the server
# process, code outside it, command-line tools, and what both sides share (top level).
SGLANG = "topas.engines.sglang"
SGLANG_MAY_IMPORT = {
    "plugin": {"plugin", "shared"},  # loaded in every server process: nothing of the client side
    "client": {"client", "shared"},
    "tools": {"tools", "client", "shared"},
    "shared": {"shared"},
}


def _sglang_role(module: str) -> str | None:
    if not _under(module, SGLANG):
        return None
    first = module[len(SGLANG) + 1:].split(".")[0]
    return first if first in SGLANG_MAY_IMPORT and first != "shared" else "shared"


def test_sglang_roles_import_one_way():
    g = import_graph()
    roles = {m: _sglang_role(m) for m in g if _under(m, SGLANG) and "cpu_stubs" not in m}
    assert {"plugin", "client", "tools", "shared"} <= set(roles.values())
    bad = sorted((a, b) for a, b in g.edges if a in roles and b in roles and roles[b] not in SGLANG_MAY_IMPORT[roles[a]])
    assert not bad, "sglang modules importing across roles: " + ", ".join(f"{a} -> {b}" for a, b in bad)
