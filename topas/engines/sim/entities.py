"""Simulator entities: requests (LLM calls in flight), tasks in flight (`SimTask`) and the engine's counters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from topas.engines.sim.radix import Node, Run, runs_of
from topas.policy.view import RequestInfo, TaskProgress
from topas.workflow import SegmentRef, Task, task_segment_id


class ReqState(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False, slots=True)
class SimRequest:
    rid: str
    task: SimTask
    node: str
    agent: str
    stage: str
    prompt_runs: list[Run]
    prompt_tokens: int
    prefix_tokens: int
    out_segment: str
    output_tokens: int  # true length: the engine's, never a policy's
    max_new_tokens: int  # what the client sent (engine memory accounting)
    ready_time: float
    state: ReqState = ReqState.WAITING
    generated: int = 0
    fill_len: int = 0  # prompt + generated at the current admission
    fill_done: int = 0  # tokens of the fill cached or computed (SGLang prefix_len)
    extend_now: int = 0  # tokens this request computes in the current extend iteration
    lock_node: Node | None = None
    private_tokens: int = 0  # KV held outside the radix tree
    admitted_time: float | None = None
    first_admit_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    prefix_hit_tokens: int | None = None  # device hit at first admission
    host_hit_tokens: int = 0
    preemptions: int = 0
    service_s: float = 0.0  # engine time of iterations this request took part in
    computed_tokens: int = 0  # prefill tokens computed over its life (recompute included)
    # the last RequestInfo built and what it was built from: a waiting call's info is asked for at every
    # decision and rarely changes, so it is rebuilt only when one of its varying fields does
    _info: RequestInfo | None = field(default=None, repr=False)
    _info_key: tuple = field(default=(), repr=False)

    def fill_runs(self) -> list[Run]:
        if self.generated:
            return self.prompt_runs + [(self.out_segment, 0, self.generated)]
        return self.prompt_runs

    @property
    def remaining_tokens(self) -> int:
        return self.output_tokens - self.generated

    def info(self, cached: int = 0, host_cached: int = 0, cached_nodes: tuple[int, ...] = ()) -> RequestInfo:
        key = (cached, host_cached, cached_nodes, self.generated, self.preemptions, self.admitted_time)
        if self._info is not None and key == self._info_key:
            return self._info
        self._info, self._info_key = self._build_info(cached, host_cached, cached_nodes), key
        return self._info

    def _build_info(self, cached: int, host_cached: int, cached_nodes: tuple[int, ...]) -> RequestInfo:
        return RequestInfo(
            rid=self.rid,
            task_id=self.task.task.task_id,
            node=self.node,
            stage=self.stage,
            agent=self.agent,
            task_arrival=self.task.task.arrival,
            ready_time=self.ready_time,
            prompt_tokens=self.prompt_tokens,
            prefix_tokens=self.prefix_tokens,
            cached_tokens=cached,
            host_cached_tokens=host_cached,
            generated_tokens=self.generated,
            preemptions=self.preemptions,
            admitted_time=self.admitted_time,
            segments=tuple((sid, n) for sid, _, n in self.prompt_runs),
            cached_nodes=cached_nodes,
        )


@dataclass(eq=False)
class SimTask:
    task: Task
    pending_deps: dict[str, int] = field(default_factory=dict)
    finished_nodes: list[str] = field(default_factory=list)
    stage_done: Counter = field(default_factory=Counter)
    running: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    attained_s: float = 0.0
    finish_time: float | None = None
    # bumped by every change of the call sets below: `progress` is rebuilt only after one (or more service)
    _version: int = field(default=0, repr=False)
    _progress: TaskProgress | None = field(default=None, repr=False)
    _progress_key: tuple[int, float] = field(default=(-1, 0.0), repr=False)

    def __post_init__(self) -> None:
        self.pending_deps = {n.id: len(n.deps) for n in self.task.workflow.nodes.values()}

    def call_waiting(self, rid: str) -> None:
        """A call entered the waiting queue: issued, retracted or preempted."""
        self.running.discard(rid)
        self.waiting.add(rid)
        self._version += 1

    def call_running(self, rid: str) -> None:
        self.waiting.discard(rid)
        self.running.add(rid)
        self._version += 1

    def call_finished(self, rid: str, node: str, stage: str) -> None:
        self.running.discard(rid)
        self.finished_nodes.append(node)
        self.stage_done[stage] += 1
        self._version += 1

    @property
    def done(self) -> bool:
        return len(self.finished_nodes) == len(self.task.workflow.nodes)

    def progress(self) -> TaskProgress:
        key = (self._version, self.attained_s)
        if self._progress is None or key != self._progress_key:
            self._progress, self._progress_key = self._build_progress(), key
        return self._progress

    def _build_progress(self) -> TaskProgress:
        return TaskProgress(
            task_id=self.task.task_id,
            template=self.task.template,
            arrival=self.task.arrival,
            finished_nodes=tuple(self.finished_nodes),
            stage_done=dict(self.stage_done),
            running=tuple(sorted(self.running)),
            waiting=tuple(sorted(self.waiting)),
            attained_service=self.attained_s,
        )


def make_request(ts: SimTask, node_id: str, now: float, ignore_eos: bool, max_new_cap: int) -> SimRequest:
    wf = ts.task.workflow
    node = wf.nodes[node_id]
    segs = wf.prompt_segments(ts.task.task_id, node_id)
    runs = runs_of([(s.id, s.tokens) for s in segs])
    out_tokens = node.output_tokens if ignore_eos else min(node.output_tokens, max_new_cap)
    return SimRequest(
        rid=f"{ts.task.task_id}:{node_id}",
        task=ts,
        node=node_id,
        agent=node.agent,
        stage=node.stage_id,
        prompt_runs=runs,
        prompt_tokens=sum(s.tokens for s in segs),
        prefix_tokens=segs[0].tokens,
        out_segment=task_segment_id(ts.task.task_id, SegmentRef("out", node_id)),
        output_tokens=out_tokens,
        max_new_tokens=out_tokens if ignore_eos else max_new_cap,
        ready_time=now,
    )


@dataclass
class SimStats:
    iterations: int = 0
    prefill_iterations: int = 0
    decode_steps: int = 0
    decisions: int = 0
    decision_wall_s: list[float] = field(default_factory=list)
    retractions: int = 0
    preemptions: int = 0
    wall_s: float = 0.0
