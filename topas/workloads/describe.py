"""Human-readable views of a trace: DAG text, token totals, KV-budget arithmetic, a DAG picture."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

from topas.workflow import Task, Trace, Workflow

FULL_BATCH = 16  # running calls that make "a full batch" in the budget arithmetic (README)


def template_text(trace: Trace) -> list[str]:
    out = []
    for name, tpl in trace.templates.items():
        out.append(f"template {name}: {len(tpl.stages)} stages (the scheduler's view)")
        for sid in tpl.topo_order:
            s = tpl.stages[sid]
            deps = ", ".join(s.deps) or "-"
            out.append(f"  {sid:<12} agent {s.agent:<26} deps {deps:<14} expected_count {s.expected_count:g}")
    return out


def dag_text(task: Task) -> list[str]:
    wf = task.workflow
    out = [f"task {task.task_id} (arrival {task.arrival:.2f} s): {len(wf.nodes)} calls"]
    for nid in wf.topo_order:
        n = wf.nodes[nid]
        hist = " ".join(f"{r.kind}:{r.node}" for r in n.history) or "-"
        out.append(
            f"  {nid:<16} agent {n.agent:<26} stage {n.stage_id:<12} deps {','.join(n.deps) or '-':<16} "
            f"fresh {n.input_tokens:>5} out {n.output_tokens:>5} prompt {wf.prompt_tokens(nid):>6}  history [{hist}]"
        )
    return out


@dataclass(frozen=True)
class TokenStats:
    calls: float
    prompt: float  # sum over calls of (prefix + history + fresh)
    prefix: float
    history: float
    fresh: float
    output: float


def token_stats(trace: Trace) -> TokenStats:
    """Per-task token totals, averaged over the tasks of the trace."""
    rows = []
    for t in trace.tasks:
        wf = t.workflow
        pre = sum(wf.agents[n.agent].prefix_tokens for n in wf.nodes.values())
        hist = sum(wf.segment_tokens(r) for n in wf.nodes.values() for r in n.history)
        fresh = sum(n.input_tokens for n in wf.nodes.values())
        out = sum(n.output_tokens for n in wf.nodes.values())
        rows.append((len(wf.nodes), pre + hist + fresh, pre, hist, fresh, out))
    return TokenStats(*(float(x) for x in np.mean(np.array(rows, dtype=float), axis=0)))


def dynamic_kv(wf: Workflow, node_id: str) -> int:
    """KV a call holds beyond its agent prefix when it finishes: history + fresh + output."""
    n = wf.nodes[node_id]
    return wf.prompt_tokens(node_id) - wf.agents[n.agent].prefix_tokens + n.output_tokens


def budget_text(trace: Trace, full_batch: int = FULL_BATCH) -> list[str]:
    agents = trace.agents
    total = sum(a.prefix_tokens for a in agents.values())
    biggest = max(a.prefix_tokens for a in agents.values())
    dyn = [dynamic_kv(t.workflow, n) for t in trace.tasks for n in t.workflow.nodes]
    mean = float(np.mean(dyn))
    batch = full_batch * mean
    rows = [
        (f"resident prefixes of all {len(agents)} agents", f"{total:,}"),
        ("dynamic KV per call (history+fresh+output)", f"mean {mean:,.0f}, max {max(dyn):,}"),
        (f"a full batch of {full_batch} calls (x mean)", f"{batch:,.0f}"),
        ("all prefixes + full batch", f"{total + batch:,.0f}"),
        ("largest prefix + full batch", f"{biggest + batch:,.0f}"),
    ]
    head = "KV budget arithmetic (tokens; compare with the engine's KV pool, see topas/workloads/README.md):"
    return [head] + [f"  {k:<44} {v}" for k, v in rows]


def _layout(wf: Workflow) -> dict[str, tuple[float, float]]:
    """Swimlanes: x = topological generation, y = agent lane (repeated agents stay on one lane)."""
    lanes: dict[str, int] = {}
    for nid in wf.topo_order:
        lanes.setdefault(wf.nodes[nid].agent, len(lanes))
    pos = {}
    for x, gen in enumerate(nx.topological_generations(wf.graph)):
        for nid in gen:
            pos[nid] = (float(x), -float(lanes[wf.nodes[nid].agent]))
    return pos


def draw_dag(task: Task, path: str | Path, title: str = "") -> Path:
    """Save a picture of one task's DAG (nodes coloured by agent, labelled id / fresh / output)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wf = task.workflow
    pos = _layout(wf)
    agents = list(dict.fromkeys(wf.nodes[n].agent for n in wf.topo_order))
    cmap = plt.get_cmap("tab10" if len(agents) <= 10 else "tab20")
    colour = {a: cmap(i % cmap.N) for i, a in enumerate(agents)}
    ncols = 1 + int(max(x for x, _ in pos.values()))
    fig, ax = plt.subplots(figsize=(min(2.5 + 1.3 * ncols, 40), max(2.5, 0.9 * len(agents) + 1.2)))
    nx.draw_networkx_edges(wf.graph, pos, ax=ax, arrows=True, arrowsize=12, node_size=900, edge_color="#555")
    nx.draw_networkx_nodes(
        wf.graph, pos, ax=ax, node_size=900, node_color=[colour[wf.nodes[n].agent] for n in wf.graph.nodes]
    )
    labels = {n: f"{n}\n{wf.nodes[n].input_tokens}/{wf.nodes[n].output_tokens}" for n in wf.graph.nodes}
    nx.draw_networkx_labels(wf.graph, pos, labels, ax=ax, font_size=6)
    lane_y = [next(pos[n][1] for n in wf.topo_order if wf.nodes[n].agent == a) for a in agents]
    ax.set_yticks(lane_y, [f"{a}\n(prefix {wf.agents[a].prefix_tokens})" for a in agents], fontsize=7)
    ax.tick_params(axis="y", length=0, left=False, labelleft=True)
    ax.set_xticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xlim(-0.6, ncols - 0.4)
    ax.set_ylim(min(lane_y) - 0.6, max(lane_y) + 0.6)
    ax.set_title(
        title or f"{wf.name}: task {task.task_id} ({len(wf.nodes)} calls; labels: id, fresh/output tokens)", fontsize=9
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
