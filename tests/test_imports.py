"""The layering of the code (docs/layout.md, "Rules the layout keeps"), checked on its import graph
(topas/imports.py: read from the sources with `ast`, nothing executed). Every import counts: at module
level, inside a function (a lazy import hides a cycle, it does not remove it) and under `if TYPE_CHECKING:`
(what a type checker reads must layer too), except where a rule says "at module level".

1. No import cycle.
2. No upward import: every module has a layer (LAYERS) and imports only its own layer or lower ones.
3. Peers in the policies-and-engines layer do not import each other: no policy package imports another
   policy package or an engine, no engine another engine or a policy package.
4. A policy (baselines/, topas/scheduler/) imports only its own package, `topas.policy`, `topas.workflow`
   and `topas.errors`.
5. Analysis imports no policy, engine or runner: none at module level, even through another module; a lazy
   import (inside a function) may read a workload's description (`topas.workloads`), never a policy, an
   engine or the runner.
6. Inside `topas/engines/sglang/` the roles import one way (SGLANG_MAY_IMPORT).

Each rule is a function of a graph, so `violations(import_graph(root))` also judges another checkout.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from topas.imports import RUN, import_graph, only

PACKAGES = ("topas", "baselines", "analysis", "hydra_plugins")
# Lowest first. A module's layer is that of the longest prefix listed; the package inits in INIT_ONLY name
# themselves only, so a new top-level module or engine has no layer until it is given one.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("topas", "topas.errors", "topas.checks", "topas.workflow", "topas.scheduler_sets",
                    "topas.process_guard", "topas.imports")),
    ("model", ("topas.policy", "topas.engines", "topas.engines.latency", "topas.results", "topas.workloads",
               "topas.run_identity", "topas.config", "topas.bound")),
    ("policies and engines", ("baselines", "topas.scheduler", "topas.engines.sim", "topas.engines.sglang")),
    ("runner", ("topas.runner", "topas.fingerprint", "topas.wandb_logger")),
    ("drivers", ("topas.sweep", "topas.prediction", "topas.placement", "topas.launchers", "topas.tuning",
                 "topas.bench", "topas.bench_compare", "topas.measure_capacity", "topas.decision_trace",
                 "topas.reproduce_args", "hydra_plugins")),
    ("analysis", ("analysis",)),
    ("reproduction", ("topas.reproduce", "topas.fidelity")),
]
INIT_ONLY = ("topas", "topas.engines")
PEERS = ("baselines", "topas.scheduler", "topas.engines.sim", "topas.engines.sglang")
POLICIES = ("baselines", "topas.scheduler")
POLICY_MAY_IMPORT = ("topas.policy", "topas.workflow", "topas.errors")
NOT_FOR_ANALYSIS = (*POLICIES, "topas.policy", "topas.engines", "topas.runner")
ANALYSIS_MAY_READ_LAZILY = ("topas.workloads",)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _first(module: str, prefixes) -> str | None:
    """The longest of `prefixes` that `module` is under."""
    return max((p for p in prefixes if _under(module, p)), key=len, default=None)


def layer(module: str) -> int | None:
    best = _first(module, [p for _, ps in LAYERS for p in ps if p not in INIT_ONLY or p == module])
    return None if best is None else next(i for i, (_, ps) in enumerate(LAYERS) if best in ps)


def graph(root: Path | None = None) -> nx.DiGraph:
    return import_graph(root, PACKAGES) if root else import_graph(packages=PACKAGES)


def _edge(g: nx.DiGraph, a: str, b: str) -> str:
    return f"{a} -> {b} ({', '.join(sorted(g.edges[a, b]['kinds']))})"


def cycles(g: nx.DiGraph) -> list[str]:
    return [" -> ".join(c + [c[0]]) for c in sorted(nx.simple_cycles(g))]


def upward(g: nx.DiGraph) -> list[str]:
    bad = [f"{m}: no layer (add it to LAYERS)" for m in sorted(g) if layer(m) is None]
    return bad + [_edge(g, a, b) for a, b in sorted(g.edges)
                  if None not in (layer(a), layer(b)) and layer(b) > layer(a)]


def peers(g: nx.DiGraph) -> list[str]:
    return [_edge(g, a, b) for a, b in sorted(g.edges)
            if _first(a, PEERS) and _first(b, PEERS) and _first(a, PEERS) != _first(b, PEERS)]


def policy_imports(g: nx.DiGraph) -> list[str]:
    return [_edge(g, a, b) for a, b in sorted(g.edges) if _first(a, POLICIES)
            and not _under(b, _first(a, POLICIES)) and not _first(b, POLICY_MAY_IMPORT)]


def analysis_imports(g: nx.DiGraph) -> list[str]:
    at_import = only(g, ["module"])
    bad = []
    for a in sorted(m for m in g if _under(m, "analysis")):
        loaded = nx.descendants(at_import, a) if a in at_import else set()
        bad += [f"{a} loads {b} at import" for b in sorted(loaded) if _first(b, NOT_FOR_ANALYSIS)]
        bad += [_edge(g, a, b) for b in sorted(g.successors(a)) if "lazy" in g.edges[a, b]["kinds"]
                and not _under(b, "analysis") and _first(b, NOT_FOR_ANALYSIS) and not _first(b, ANALYSIS_MAY_READ_LAZILY)]
    return bad


# The real SGLang engine by role (topas/engines/sglang/__init__.py): code in the server
# process, code outside it, command-line tools, and what both sides share (top level).
SGLANG = "topas.engines.sglang"
SGLANG_MAY_IMPORT = {
    "plugin": {"plugin", "shared"},  # loaded in every server process: nothing of the client side
    "client": {"client", "shared"},
    "tools": {"tools", "client", "shared"},
    "shared": {"shared"},
}


def _sglang_role(module: str) -> str:
    first = module[len(SGLANG) + 1:].split(".")[0]
    return first if first in SGLANG_MAY_IMPORT and first != "shared" else "shared"


def sglang_roles(g: nx.DiGraph) -> list[str]:
    roles = {m: _sglang_role(m) for m in g if _under(m, SGLANG) and "cpu_stubs" not in m}
    return [_edge(g, a, b) for a, b in sorted(g.edges)
            if a in roles and b in roles and roles[b] not in SGLANG_MAY_IMPORT[roles[a]]]


RULES = {"cycles": cycles, "upward imports": upward, "peer imports": peers, "policy imports": policy_imports,
         "analysis imports": analysis_imports, "sglang roles": sglang_roles}


def violations(g: nx.DiGraph) -> dict[str, list[str]]:
    """Every rule's violations on `g` (empty lists: the layering holds)."""
    return {name: rule(g) for name, rule in RULES.items()}


# ------------------------------------------------------------------ the project
def test_the_graph_sees_the_packages_and_every_kind_of_import():
    g = graph()
    assert {"topas.runner", "topas.engines.sim.engine", "baselines.lpm", "analysis.report", "hydra_plugins.topas_conf.topas_conf"} <= set(g)
    assert g.edges["topas.runner", "topas.engines.latency.specs"]["kinds"] == {"module"}
    assert "lazy" in g.edges["topas.engines.latency.factory", "topas.engines.latency.aiconfigurator"]["kinds"]
    assert "typing" in g.edges["topas.engines.sim.records", "topas.engines.sim.engine"]["kinds"]
    assert set(only(g, RUN).edges) < set(g.edges)


def test_the_layering_holds():
    bad = {k: v for k, v in violations(graph()).items() if v}
    assert not bad, "\n".join(f"{k}: {'; '.join(v[:8])}" for k, v in bad.items())


def test_every_layer_and_role_is_populated():
    g = graph()
    assert {layer(m) for m in g} == set(range(len(LAYERS)))
    roles = {_sglang_role(m) for m in g if _under(m, SGLANG) and "cpu_stubs" not in m}
    assert {"plugin", "client", "tools", "shared"} <= roles


# ------------------------------------------------------------------ the rules catch what they should
def _toy(edges: list[tuple[str, str, str]]) -> nx.DiGraph:
    g = nx.DiGraph()
    for a, b, kind in edges:
        g.add_edge(a, b, kinds={kind})
    return g


def test_a_cycle_under_type_checking_is_a_cycle():
    g = _toy([("topas.scheduler.score", "topas.scheduler.problem", "typing"),
              ("topas.scheduler.problem", "topas.scheduler.score", "module")])
    assert cycles(g) and not upward(g)


def test_each_rule_flags_its_breach():
    assert upward(_toy([("topas.config", "topas.engines.sim.config", "module")]))  # the model layer reaching up
    assert upward(_toy([("topas.workloads.x", "topas.no_such_layer", "lazy")]))  # every module has a layer
    assert upward(_toy([("topas.engines.vllm.x", "topas.workflow", "module")]))
    assert peers(_toy([("baselines.spf", "topas.scheduler.estimates", "module")]))
    assert peers(_toy([("topas.engines.sim.view", "topas.engines.sglang.hints", "lazy")]))
    assert policy_imports(_toy([("baselines.lpm", "topas.checks", "module")]))
    assert not policy_imports(_toy([("baselines.lpm", "topas.policy.params", "module"), ("baselines.lpm", "baselines.fcfs", "module")]))
    # analysis: a registry two imports away at module level, a policy inside a function; a workload lazily is fine
    assert analysis_imports(_toy([("analysis.style", "analysis.x", "module"), ("analysis.x", "topas.policy.registry", "module")]))
    assert analysis_imports(_toy([("analysis.figures", "baselines.lpm", "lazy")]))
    assert not analysis_imports(_toy([("analysis.shapes", "topas.workloads.shapes", "lazy")]))
    assert sglang_roles(_toy([("topas.engines.sglang.plugin.hooks", "topas.engines.sglang.client.server", "lazy")]))
