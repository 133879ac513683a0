"""Workflow model: agents, call DAGs, the template a scheduler may see, tasks, traces.

A *task* is one user job: a DAG of LLM calls (nodes). Every call belongs to an
*agent* whose static system prompt (its *prefix*) opens the call's prompt.
A call's prompt is an ordered list of segments (docs/workflow_model.md):

    [agent prefix] + history segments (upstream outputs / own earlier turns) + fresh input

Segments are identified, not materialised: the simulator's radix cache and the
SGLang driver both derive token identity from the segment id, so prefix reuse
follows from one rule in both engines (longest common leading run of segments).

The realized DAG (`Workflow`) carries true lengths; schedulers only see the
`WorkflowTemplate` (stages, agents, edges, expected repetition counts) plus the
progress of each task. Nothing here imports an engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import networkx as nx


class WorkflowError(ValueError):
    """A malformed workflow, template or trace. The message is one line naming the problem."""


@dataclass(frozen=True, slots=True)
class Agent:
    name: str
    prefix_tokens: int  # length of the static system prompt (tokens)

    def __post_init__(self) -> None:
        if self.prefix_tokens <= 0:
            raise WorkflowError(f"agent '{self.name}': prefix_tokens must be positive, got {self.prefix_tokens}")


SegmentKind = Literal["in", "out"]


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A task-level segment in a prompt: the fresh input ('in') or the output ('out') of a node."""

    kind: SegmentKind
    node: str


@dataclass(frozen=True, slots=True)
class CallNode:
    """One LLM call of a realized task."""

    id: str
    agent: str
    input_tokens: int  # fresh tokens of this call (after prefix and history)
    output_tokens: int  # true generation length: engines use it, schedulers never see it
    deps: tuple[str, ...] = ()
    history: tuple[SegmentRef, ...] = ()  # segments between the agent prefix and the fresh input
    stage: str = ""  # template stage this call realizes (defaults to id)
    gap_s: float = 0.0  # client-side delay (tool time) between deps finishing and this call's issue

    @property
    def stage_id(self) -> str:
        return self.stage or self.id


@dataclass(frozen=True, slots=True)
class Segment:
    """A resolved prompt segment: a stable id and its length in tokens."""

    id: str
    tokens: int


def prefix_segment_id(agent: str) -> str:
    return f"agent:{agent}"


def task_segment_id(task_id: int, ref: SegmentRef) -> str:
    return f"t{task_id}:{ref.node}:{ref.kind}"


@dataclass(frozen=True)
class Workflow:
    """A realized call DAG (true lengths). Validated on construction."""

    name: str
    agents: Mapping[str, Agent]
    nodes: Mapping[str, CallNode]

    def __post_init__(self) -> None:
        validate_workflow(self)

    @cached_property
    def graph(self) -> nx.DiGraph:
        return _dag(self.name, self.nodes.keys(), ((d, n.id) for n in self.nodes.values() for d in n.deps))

    @cached_property
    def topo_order(self) -> tuple[str, ...]:
        return tuple(nx.lexicographical_topological_sort(self.graph))

    @cached_property
    def children(self) -> dict[str, tuple[str, ...]]:
        return {n: tuple(sorted(self.graph.successors(n))) for n in self.nodes}

    def prompt_segments(self, task_id: int, node_id: str) -> tuple[Segment, ...]:
        """The ordered prompt of a call: agent prefix, history, fresh input."""
        node = self.nodes[node_id]
        segs = [Segment(prefix_segment_id(node.agent), self.agents[node.agent].prefix_tokens)]
        for ref in node.history:
            segs.append(Segment(task_segment_id(task_id, ref), self.segment_tokens(ref)))
        segs.append(Segment(task_segment_id(task_id, SegmentRef("in", node_id)), node.input_tokens))
        return tuple(segs)

    def segment_tokens(self, ref: SegmentRef) -> int:
        node = self.nodes[ref.node]
        return node.input_tokens if ref.kind == "in" else node.output_tokens

    def prompt_tokens(self, node_id: str) -> int:
        node = self.nodes[node_id]
        return (
            self.agents[node.agent].prefix_tokens
            + sum(self.segment_tokens(r) for r in node.history)
            + node.input_tokens
        )


def _dag(name: str, nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    if not nx.is_directed_acyclic_graph(g):
        cycle = [u for u, _ in nx.find_cycle(g)]
        raise WorkflowError(f"workflow '{name}': cycle {' -> '.join(cycle + cycle[:1])}")
    return g


def validate_workflow(wf: Workflow) -> None:
    """Raise WorkflowError (one line) on the first problem found."""
    if not wf.nodes:
        raise WorkflowError(f"workflow '{wf.name}': has no nodes")
    for key, agent in wf.agents.items():
        if key != agent.name:
            raise WorkflowError(f"workflow '{wf.name}': agent key '{key}' != agent name '{agent.name}'")
    for key, node in wf.nodes.items():
        where = f"workflow '{wf.name}', node '{key}'"
        if key != node.id:
            raise WorkflowError(f"{where}: key differs from node id '{node.id}'")
        if node.agent not in wf.agents:
            raise WorkflowError(f"{where}: unknown agent '{node.agent}'")
        if node.input_tokens <= 0:
            raise WorkflowError(f"{where}: input_tokens must be positive, got {node.input_tokens}")
        if node.output_tokens <= 0:
            raise WorkflowError(f"{where}: output_tokens must be positive, got {node.output_tokens}")
        if node.gap_s < 0:
            raise WorkflowError(f"{where}: gap_s must be >= 0, got {node.gap_s}")
        for d in node.deps:
            if d not in wf.nodes:
                raise WorkflowError(f"{where}: dangling dependency '{d}'")
        for ref in node.history:
            if ref.node not in wf.nodes:
                raise WorkflowError(f"{where}: history refers to unknown node '{ref.node}'")
    g = wf.graph  # raises on a cycle
    for node in wf.nodes.values():
        ancestors = nx.ancestors(g, node.id)
        for ref in node.history:
            if ref.node not in ancestors:
                raise WorkflowError(
                    f"workflow '{wf.name}', node '{node.id}': history segment of '{ref.node}' "
                    "is not from an upstream call"
                )


# ----------------------------------------------------------------------------------------------
# What a scheduler may see: the template
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TemplateStage:
    """A stage of a workflow template. `expected_count` > 1 means the stage repeats
    sequentially a number of times not known in advance (e.g. one call per file)."""

    id: str
    agent: str
    deps: tuple[str, ...] = ()
    expected_count: float = 1.0


@dataclass(frozen=True)
class WorkflowTemplate:
    """The workflow shape a scheduler knows: agents, stages, edges, expected repetitions.
    No true lengths and no realized repetition counts."""

    name: str
    agents: Mapping[str, Agent]
    stages: Mapping[str, TemplateStage]

    def __post_init__(self) -> None:
        for s in self.stages.values():
            if s.agent not in self.agents:
                raise WorkflowError(f"template '{self.name}', stage '{s.id}': unknown agent '{s.agent}'")
            for d in s.deps:
                if d not in self.stages:
                    raise WorkflowError(f"template '{self.name}', stage '{s.id}': dangling dependency '{d}'")
            if s.expected_count <= 0:
                raise WorkflowError(f"template '{self.name}', stage '{s.id}': expected_count must be positive")
        _ = self.graph

    @cached_property
    def graph(self) -> nx.DiGraph:
        return _dag(self.name, self.stages.keys(), ((d, s.id) for s in self.stages.values() for d in s.deps))

    @cached_property
    def topo_order(self) -> tuple[str, ...]:
        return tuple(nx.lexicographical_topological_sort(self.graph))

    @cached_property
    def children(self) -> dict[str, tuple[str, ...]]:
        return {s: tuple(sorted(self.graph.successors(s))) for s in self.stages}


def template_of(wf: Workflow) -> WorkflowTemplate:
    """The template of a workflow whose every node is its own stage (fixed shape DAGs)."""
    stages = {n.stage_id: TemplateStage(n.stage_id, n.agent, tuple(wf.nodes[d].stage_id for d in n.deps)) for n in wf.nodes.values()}
    return WorkflowTemplate(wf.name, wf.agents, stages)


# ----------------------------------------------------------------------------------------------
# Tasks and traces
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    task_id: int
    arrival: float  # seconds
    workflow: Workflow  # realized DAG (true lengths)
    template: str  # name of the WorkflowTemplate in the trace

    def __post_init__(self) -> None:
        if self.arrival < 0:
            raise WorkflowError(f"task {self.task_id}: negative arrival time {self.arrival}")


@dataclass(frozen=True)
class Trace:
    """A replayable workload: tasks with arrival times plus the templates they follow.
    The same trace is replayed for every scheduler."""

    name: str
    tasks: tuple[Task, ...]
    templates: Mapping[str, WorkflowTemplate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: set[int] = set()
        for t in self.tasks:
            if t.task_id in seen:
                raise WorkflowError(f"trace '{self.name}': duplicate task id {t.task_id}")
            seen.add(t.task_id)
            if t.template not in self.templates:
                raise WorkflowError(f"trace '{self.name}', task {t.task_id}: unknown template '{t.template}'")
            tpl = self.templates[t.template]
            for n in t.workflow.nodes.values():
                if n.stage_id not in tpl.stages:
                    raise WorkflowError(
                        f"trace '{self.name}', task {t.task_id}, node '{n.id}': stage '{n.stage_id}' "
                        f"not in template '{tpl.name}'"
                    )

    @cached_property
    def agents(self) -> dict[str, Agent]:
        out: dict[str, Agent] = {}
        for t in self.tasks:
            for a in t.workflow.agents.values():
                if a.name in out and out[a.name] != a:
                    raise WorkflowError(f"trace '{self.name}': agent '{a.name}' has two prefix lengths")
                out[a.name] = a
        return out
