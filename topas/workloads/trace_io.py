"""Trace files: export a trace as JSONL and replay it (`workload=trace workload.params.path=...`).

Line 1 is a header, then one line per task:

    {"format": "topas-trace", "version": 1, "name": "chain3",
     "agents": {"A": 6144, ...},                                   # agent -> prefix tokens
     "templates": {"chain3": {"agents": ["A", ...],                # optional: a scheduler's view
                              "stages": [{"id": "a", "agent": "A", "deps": [], "expected_count": 1.0}, ...]}}}
    {"task_id": 0, "arrival": 0.0, "template": "chain3",           # template optional (derived from the DAG)
     "nodes": [{"id": "a", "agent": "A", "stage": "a", "input_tokens": 1024, "output_tokens": 256,
                "deps": [], "history": [["out", "a"], ...], "gap_s": 0.0}, ...]}

Units: seconds and tokens. `history` lists the segments between the agent prefix and the fresh
input: ["out", node] is that node's output, ["in", node] its fresh input. Optional per task:
"workflow" (name, default the template's) and "agents" (default the template's agents).
Every problem on load is a one-line WorkflowError naming the file and line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from topas.workflow import (
    Agent,
    CallNode,
    SegmentRef,
    Task,
    TemplateStage,
    Trace,
    Workflow,
    WorkflowError,
    WorkflowTemplate,
    template_of,
)
from topas.workloads.arrivals import poisson_arrivals, streams
from topas.workloads.config import Generator, WorkloadConfig

FORMAT, VERSION = "topas-trace", 1
TASK_KEYS = {"task_id", "arrival", "nodes", "template", "workflow", "agents"}
NODE_KEYS = {"id", "agent", "input_tokens", "output_tokens", "deps", "history", "stage", "gap_s"}


# ----------------------------------------------------------------------------------------------
# export
# ----------------------------------------------------------------------------------------------


def _node(n: CallNode) -> dict:
    return {
        "id": n.id,
        "agent": n.agent,
        "stage": n.stage,
        "input_tokens": n.input_tokens,
        "output_tokens": n.output_tokens,
        "deps": list(n.deps),
        "history": [[r.kind, r.node] for r in n.history],
        "gap_s": n.gap_s,
    }


def trace_lines(trace: Trace) -> list[str]:
    header = {
        "format": FORMAT,
        "version": VERSION,
        "name": trace.name,
        "agents": {a.name: a.prefix_tokens for a in sorted(trace.agents.values(), key=lambda a: a.name)},
        "templates": {
            name: {
                "agents": sorted(t.agents),
                "stages": [
                    {"id": s.id, "agent": s.agent, "deps": list(s.deps), "expected_count": s.expected_count}
                    for s in t.stages.values()
                ],
            }
            for name, t in trace.templates.items()
        },
    }
    lines = [json.dumps(header, separators=(",", ":"))]
    for t in trace.tasks:
        row: dict[str, Any] = {"task_id": t.task_id, "arrival": t.arrival, "template": t.template}
        if t.workflow.name != t.template:
            row["workflow"] = t.workflow.name
        if set(t.workflow.agents) != set(trace.templates[t.template].agents):
            row["agents"] = sorted(t.workflow.agents)
        row["nodes"] = [_node(n) for n in t.workflow.nodes.values()]
        lines.append(json.dumps(row, separators=(",", ":")))
    return lines


def dump_trace(trace: Trace, path: str | os.PathLike) -> Path:
    """Write `trace` as JSONL (atomically) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(trace_lines(trace)) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------------------------
# load
# ----------------------------------------------------------------------------------------------


class _Where:
    def __init__(self, path: str) -> None:
        self.path, self.line = path, 0

    def err(self, msg: str) -> WorkflowError:
        return WorkflowError(f"trace {self.path} line {self.line}: {msg}")


def _int(where: _Where, what: str, v: Any, positive: bool = True) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < (1 if positive else 0):
        raise where.err(f"{what} must be a {'positive' if positive else 'non-negative'} integer, got {v!r}")
    return v


def _tokens(where: _Where, what: str, v: Any) -> int:
    """A token count: a positive integer, or an integral number such as 512.0 (read as 512)."""
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    return _int(where, what, v)


def _num(where: _Where, what: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise where.err(f"{what} must be a number >= 0, got {v!r}")
    return float(v)


def _str_list(where: _Where, what: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise where.err(f"{what} must be a list of strings, got {v!r}")
    return tuple(v)


def _header(where: _Where, h: Any) -> tuple[str, dict[str, Agent], dict[str, WorkflowTemplate]]:
    if not isinstance(h, dict) or h.get("format") != FORMAT:
        raise where.err(f"not a trace header (expected an object with \"format\": \"{FORMAT}\")")
    if h.get("version") != VERSION:
        raise where.err(f"unsupported trace version {h.get('version')!r} (this reader knows {VERSION})")
    if not isinstance(h.get("agents"), dict) or not h["agents"]:
        raise where.err("header needs \"agents\": an object mapping agent name -> prefix tokens")
    agents = {a: Agent(a, _tokens(where, f"prefix tokens of agent '{a}'", n)) for a, n in h["agents"].items()}
    templates = {}
    for name, t in (h.get("templates") or {}).items():
        if not isinstance(t, dict) or not isinstance(t.get("stages"), list):
            raise where.err(f"template '{name}' needs a \"stages\" list")
        names = _str_list(where, f"template '{name}' agents", t.get("agents", []))
        unknown = sorted(set(names) - set(agents))
        if unknown:
            raise where.err(f"template '{name}': unknown agent(s) {unknown}")
        stages = {}
        for s in t["stages"]:
            if not isinstance(s, dict) or not isinstance(s.get("id"), str) or not isinstance(s.get("agent"), str):
                raise where.err(f"template '{name}': a stage needs string \"id\" and \"agent\", got {s!r}")
            if s["agent"] not in agents:
                raise where.err(f"template '{name}', stage '{s['id']}': unknown agent '{s['agent']}'")
            count = s.get("expected_count", 1.0)
            if isinstance(count, bool) or not isinstance(count, (int, float)):
                raise where.err(f"template '{name}', stage '{s['id']}': expected_count must be a number")
            deps = _str_list(where, f"template '{name}', stage '{s['id']}' deps", s.get("deps", []))
            stages[s["id"]] = TemplateStage(s["id"], s["agent"], deps, float(count))
        tpl_agents = {a: agents[a] for a in (names or sorted({s.agent for s in stages.values()}))}
        try:
            templates[name] = WorkflowTemplate(name, tpl_agents, stages)
        except WorkflowError as e:
            raise where.err(str(e)) from None
    return str(h.get("name", "trace")), agents, templates


def _read_node(where: _Where, tid: int, nd: Any, agents: Mapping[str, Agent], nodes: Mapping[str, CallNode]) -> CallNode:
    """One node of task `tid`'s line, checked (`nodes`: the task's nodes read so far)."""
    if not isinstance(nd, dict):
        raise where.err(f"task {tid}: a node must be a JSON object, got {nd!r}")
    bad = sorted(set(nd) - NODE_KEYS)
    missing = sorted({"id", "agent", "input_tokens", "output_tokens"} - set(nd))
    if bad or missing:
        raise where.err(f"task {tid}: node {nd.get('id')!r} has unknown key(s) {bad} / lacks {missing}")
    nid = nd["id"]
    if not isinstance(nid, str) or not nid:
        raise where.err(f"task {tid}: node id must be a non-empty string, got {nid!r}")
    if nid in nodes:
        raise where.err(f"task {tid}: duplicate node id '{nid}'")
    if nd["agent"] not in agents:
        raise where.err(f"task {tid}, node '{nid}': unknown agent {nd['agent']!r}")
    hist = nd.get("history", [])
    if not isinstance(hist, list) or not all(
        isinstance(h, list) and len(h) == 2 and h[0] in ("in", "out") and isinstance(h[1], str) for h in hist
    ):
        raise where.err(f"task {tid}, node '{nid}': history must be a list of [\"in\"|\"out\", node] pairs")
    tokens = {k: _tokens(where, f"task {tid}, node '{nid}': {k}", nd[k]) for k in ("input_tokens", "output_tokens")}
    stage = nd.get("stage", "")
    if not isinstance(stage, str):
        raise where.err(f"task {tid}, node '{nid}': stage must be a string")
    return CallNode(
        id=nid,
        agent=nd["agent"],
        input_tokens=tokens["input_tokens"],
        output_tokens=tokens["output_tokens"],
        deps=_str_list(where, f"task {tid}, node '{nid}': deps", nd.get("deps", [])),
        history=tuple(SegmentRef(k, n) for k, n in hist),
        stage=stage,
        gap_s=_num(where, f"task {tid}, node '{nid}': gap_s", nd.get("gap_s", 0.0)),
    )


def _task(where: _Where, row: Any, agents: Mapping[str, Agent], templates: dict[str, WorkflowTemplate]) -> Task:
    if not isinstance(row, dict):
        raise where.err("a task line must be a JSON object")
    unknown = sorted(set(row) - TASK_KEYS)
    if unknown:
        raise where.err(f"unknown task key(s) {unknown}; allowed: {sorted(TASK_KEYS)}")
    for k in ("task_id", "arrival", "nodes"):
        if k not in row:
            raise where.err(f"task line is missing \"{k}\"")
    tid = _int(where, "task_id", row["task_id"], positive=False)
    arrival = _num(where, f"task {tid}: arrival", row["arrival"])
    if not isinstance(row["nodes"], list) or not row["nodes"]:
        raise where.err(f"task {tid}: \"nodes\" must be a non-empty list")
    nodes: dict[str, CallNode] = {}
    for nd in row["nodes"]:
        node = _read_node(where, tid, nd, agents, nodes)
        nodes[node.id] = node
    return _workflow_task(where, row, tid, arrival, nodes, agents, templates)


def _workflow_task(where: _Where, row: dict, tid: int, arrival: float, nodes: dict[str, CallNode],
                   agents: Mapping[str, Agent], templates: dict[str, WorkflowTemplate]) -> Task:
    """The task of a line's nodes: its workflow, its agents and its template (a user trace without templates gets
    one per distinct workflow, each node its own stage)."""
    tpl_name = row.get("template")
    if tpl_name is not None and (not isinstance(tpl_name, str) or tpl_name not in templates):
        raise where.err(f"task {tid}: unknown template {tpl_name!r}")
    wf_name = row.get("workflow") or tpl_name or f"task{tid}"
    if not isinstance(wf_name, str):
        raise where.err(f"task {tid}: workflow must be a string, got {wf_name!r}")
    used = sorted({n.agent for n in nodes.values()})
    names = row.get("agents") or (sorted(templates[tpl_name].agents) if tpl_name in templates else used)
    names = _str_list(where, f"task {tid}: agents", list(names))
    for a in set(names) | set(used):
        if a not in agents:
            raise where.err(f"task {tid}: unknown agent '{a}'")
    try:
        wf = Workflow(wf_name, {a: agents[a] for a in sorted(set(names) | set(used))}, nodes)
        if tpl_name is None:  # a user trace without templates: each node is its own stage
            tpl = template_of(wf)
            tpl_name = wf_name
            if tpl_name in templates and templates[tpl_name] != tpl:
                tpl_name = f"{wf_name}#{tid}"
            templates.setdefault(tpl_name, tpl)
        else:
            tpl = templates[tpl_name]
            for n in nodes.values():
                if n.stage_id not in tpl.stages:
                    raise WorkflowError(f"task {tid}, node '{n.id}': stage '{n.stage_id}' not in template '{tpl_name}'")
        return Task(tid, arrival, wf, tpl_name)
    except WorkflowError as e:
        raise where.err(str(e)) from None


def load_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a JSONL trace; raise a one-line WorkflowError on the first problem."""
    where = _Where(str(path))
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise WorkflowError(f"trace {path}: cannot read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise WorkflowError(
            f"trace {path} line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
            "a trace is a JSONL file"
        ) from None
    header = None
    tasks: list[Task] = []
    seen: dict[int, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        where.line = lineno
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise where.err(f"malformed JSON ({e.msg} at column {e.colno})") from None
        if header is None:
            header = _header(where, obj)
            continue
        task = _task(where, obj, header[1], header[2])
        if task.task_id in seen:
            raise where.err(f"duplicate task_id {task.task_id} (first on line {seen[task.task_id]})")
        seen[task.task_id] = lineno
        tasks.append(task)
    if header is None:
        raise WorkflowError(f"trace {path}: empty file (no header line)")
    if not tasks:
        raise WorkflowError(f"trace {path}: no task lines after the header")
    try:
        return Trace(header[0], tuple(tasks), header[2])
    except WorkflowError as e:
        raise WorkflowError(f"trace {path}: {e}") from None


# ----------------------------------------------------------------------------------------------
# the `trace` generator
# ----------------------------------------------------------------------------------------------


class TraceReplay(Generator):
    """Replays a trace file. num_tasks null = all tasks (else the first num_tasks in file order);
    arrival_rate null = the file's arrival times, else fresh seeded Poisson arrivals at that rate."""

    name = "trace"
    defaults = {"path": None}

    def check(self, params: Mapping[str, Any]) -> None:
        if not isinstance(params["path"], str) or params["path"] in ("", "???"):
            raise ValueError("workload 'trace': param path (the JSONL trace file) is required")

    def build(self, cfg: WorkloadConfig, seed: int) -> Trace:
        params = self.resolve_params(cfg.params)
        trace = load_trace(os.path.expanduser(params["path"]))
        tasks = list(trace.tasks)
        if cfg.num_tasks is not None:
            if cfg.num_tasks > len(tasks):
                raise ValueError(f"workload '{cfg.name}': num_tasks={cfg.num_tasks} but {params['path']} has {len(tasks)} tasks")
            tasks = tasks[: cfg.num_tasks]
        if cfg.arrival_rate is not None:
            arrivals = poisson_arrivals(cfg.arrival_rate, len(tasks), streams(seed, cfg.name)[0])
            order = np.argsort([t.arrival for t in tasks], kind="stable")
            new = list(tasks)
            for rank, i in enumerate(order):
                t = tasks[i]
                new[i] = Task(t.task_id, arrivals[rank], t.workflow, t.template)
            tasks = new
        used = {t.template for t in tasks}
        return Trace(cfg.name, tuple(tasks), {k: v for k, v in trace.templates.items() if k in used})
