"""Autellix-LAS: program-level least attained service (PLAS / ATLAS) with
discretized multi-level queues.

Source: Autellix (Luo et al., 2025, arXiv 2502.13965; "Agentix" at NSDI'26),
section 4.2 and Algorithm 1:
- PLAS (Eq. 1, single-threaded programs): a call's priority is its program's attained
  service, the sum of the service of the program's earlier calls;
- ATLAS (Eq. 2, multi-threaded programs / DAGs): p(c) = max over c's parent calls k of
  (p(k) + t(k)), the attained service along the critical path so far (root calls: 0).
  On a chain ATLAS equals PLAS;
- discretized priorities: K queues Q_1..Q_K with ranges [lo_i, hi_i) on the priority
  (lo_1 = 0, hi_K = inf); a new call enters the queue whose range holds its priority;
  FCFS inside a queue; a call that has run for its queue's quantum (hi_i - lo_i) is
  demoted one queue; anti-starvation: a waiting call whose program's total waiting time
  over total service reaches beta is promoted to Q_1; calls of higher queues preempt
  running calls of strictly lower queues.

Mapping onto the engine-neutral API (a task is a program, a call a request):
- t(k): engine seconds a call was running (admission -> finish, plus earlier runs cut
  by preemption); the program's service T is the engine's `TaskProgress.attained_service`;
  its waiting time W sums, over its calls, the time they spent ready but not running;
- parents: the realized DAG is not visible, only the template; a call's parents are
  taken to be the task's finished calls whose stage is *comparable* to its own in the
  template (ancestor, descendant or the same stage: repeated and looping stages such as
  MetaGPT's write_code/code_review are sequential), never calls of parallel branches;
  p grows along every path, so when those calls are all realized ancestors (true for our
  workloads) the max over them equals the max over the true parents;
- levels: geometric quanta (first quantum `first_quantum_s`, ratio `quantum_ratio`,
  `num_levels` queues: Q_i = [q (r^(i-1) - 1)/(r - 1), q (r^i - 1)/(r - 1)));
- admission order: (level, time the call entered its level, rid); with `preempt`, while
  the best waiting call sits in a strictly better level than the worst running call
  and would not fit (no free slot, or estimated KV short), the worst running call
  (lowest level, latest entry) is preempted, at most `max_preempt_per_decision`.

Deviations: quanta, demotion, promotion and preemption are evaluated at the engine's
decision points (events), not every iteration; preemption in our engine recomputes the
generated tokens instead of swapping them to host; Algorithm 1's numeric defaults are
not given in the text available to us, so K, quanta and beta are our choice (recorded
in conf/scheduler/autellix_las.yaml) and get the tuning budget of docs/protocol.md.
Out-of-memory needs of preemption use estimated (never true) remaining outputs.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

import networkx as nx

from topas.policy import Decision, Policy, RequestFinished, RequestInfo, SchedulerView, check_ranges, register_policy
from topas.policy.estimates import PRIOR_OUTPUT_TOKENS, Prior, ServiceEstimator
from topas.policy.events import Event
from topas.workflow import WorkflowTemplate


def level_thresholds(num_levels: int, first_quantum: float, ratio: float) -> list[float]:
    """Upper bounds hi_1..hi_{K-1} of the queue ranges (cumulative geometric quanta)."""
    out, acc = [], 0.0
    for i in range(num_levels - 1):
        acc += first_quantum * ratio**i
        out.append(acc)
    return out


def level_of(priority: float, thresholds: list[float]) -> int:
    """Index (0 = Q_1, highest priority) of the queue whose range holds `priority`."""
    return bisect.bisect_right(thresholds, priority)


def comparable_stages(tpl: WorkflowTemplate, stage: str) -> set[str]:
    g = tpl.graph
    if stage not in g:
        return set(g.nodes)
    return {stage} | nx.ancestors(g, stage) | nx.descendants(g, stage)


@dataclass
class _Call:
    task_id: int
    stage: str
    priority: float  # p(c) when the call became ready (PLAS / ATLAS)
    level: int  # 0 = Q_1
    level_entry_service: float  # call service when it entered its current level
    level_entry_time: float  # FCFS key inside a level
    service_before: float = 0.0  # service of earlier runs cut by preemption / retraction
    run_start: float | None = None  # admitted_time of the current run, as last seen


@dataclass
class _Program:
    finished: list[tuple[str, float, float]] = field(default_factory=list)  # (stage, p, t) of finished calls
    wait_done: float = 0.0  # waiting time of finished calls


@register_policy("autellix_las")
class AutellixLAS(Policy):
    @dataclass(frozen=True)
    class Params:
        mode: Literal["atlas", "plas"] = "atlas"  # ATLAS for DAGs (= PLAS on chains)
        num_levels: int = 10  # K
        first_quantum_s: float = 1.0  # quantum of Q_1, engine seconds
        quantum_ratio: float = 2.0  # quantum of Q_{i+1} / quantum of Q_i
        starvation_ratio: float = 8.0  # beta: promote to Q_1 when W / T >= beta
        preempt: bool = True
        max_preempt_per_decision: int = 1
        prior_output_tokens: float = PRIOR_OUTPUT_TOKENS  # estimates for the preemption memory check only
        stop_at_first_misfit: bool = True  # vLLM's (Autellix's base) admission stops at the first misfit

        def __post_init__(self) -> None:
            if self.mode not in ("atlas", "plas"):
                raise ValueError(f"autellix_las: mode must be 'atlas' or 'plas', got {self.mode!r}")
            check_ranges(self, num_levels=">= 1", first_quantum_s="> 0", quantum_ratio=">= 1", starvation_ratio="> 0",
                         max_preempt_per_decision=">= 0", prior_output_tokens="> 0")

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        p = self.params
        self.thresholds = level_thresholds(p.num_levels, p.first_quantum_s, p.quantum_ratio)
        self.quanta = [p.first_quantum_s * p.quantum_ratio**i for i in range(p.num_levels)]
        self.calls: dict[str, _Call] = {}
        self.programs: dict[int, _Program] = defaultdict(_Program)
        self.templates: dict[int, WorkflowTemplate] = {}
        self.attained: dict[int, float] = {}  # program service T, from the last view
        self._comparable: dict[tuple[str, str], set[str]] = {}
        self.est = ServiceEstimator(Prior(p.prior_output_tokens))

    # ------------------------------------------------------------------ priorities
    def program_priority(self, r: RequestInfo) -> float:
        """p(c) of a call becoming ready: PLAS = program service; ATLAS = critical-path service."""
        if self.params.mode == "plas":
            return self.attained.get(r.task_id, 0.0)
        prog = self.programs.get(r.task_id)
        if prog is None:
            return 0.0
        tpl = self.templates.get(r.task_id)
        comp = None
        if tpl is not None:
            key = (tpl.name, r.stage)
            if key not in self._comparable:
                self._comparable[key] = comparable_stages(tpl, r.stage)
            comp = self._comparable[key]
        return max((pk + tk for s, pk, tk in prog.finished if comp is None or s in comp), default=0.0)

    def _call(self, r: RequestInfo) -> _Call:
        c = self.calls.get(r.rid)
        if c is None:
            p = self.program_priority(r)
            c = _Call(r.task_id, r.stage, p, level_of(p, self.thresholds), 0.0, r.ready_time)
            self.calls[r.rid] = c
        return c

    @staticmethod
    def call_service(c: _Call, now: float) -> float:
        return c.service_before + (max(now - c.run_start, 0.0) if c.run_start is not None else 0.0)

    # ------------------------------------------------------------------ events
    def on_event(self, event: Event) -> None:
        self.est.on_event(event)
        if not isinstance(event, RequestFinished):
            return
        r = event.request
        c = self.calls.pop(r.rid, None)
        prio = c.priority if c is not None else self.program_priority(r)
        t = (c.service_before if c is not None else 0.0) + event.service_s
        prog = self.programs[r.task_id]
        prog.finished.append((r.stage, prio, t))
        admitted = r.admitted_time if r.admitted_time is not None else event.time
        prog.wait_done += max(admitted - r.ready_time, 0.0)
        if event.task_done:
            self.programs.pop(r.task_id, None)
            self.templates.pop(r.task_id, None)
            self.attained.pop(r.task_id, None)

    def _sync(self, view: SchedulerView) -> None:
        """Bring call state up to date with the view: new calls, runs, cut runs, demotions."""
        self.attained = {tid: tp.attained_service for tid, tp in view.tasks.items()}
        for tid, tp in view.tasks.items():
            if tid not in self.templates and tp.template in view.templates:
                self.templates[tid] = view.templates[tp.template]
        now = view.now
        for r in view.waiting:
            c = self._call(r)
            if c.run_start is not None:  # it ran and was sent back since: credit the cut run (end ~ now)
                c.service_before = self.call_service(c, now)
                c.run_start = None
        for r in view.running:
            c = self._call(r)
            if c.run_start is not None and r.admitted_time is not None and r.admitted_time != c.run_start:
                # cut and re-admitted between two decisions: the earlier run ended before the new admission
                c.service_before += max(r.admitted_time - c.run_start, 0.0)
            c.run_start = r.admitted_time if r.admitted_time is not None else now
            svc = self.call_service(c, now)
            while c.level < self.params.num_levels - 1 and svc - c.level_entry_service >= self.quanta[c.level]:
                c.level_entry_service += self.quanta[c.level]  # quantum exhausted: demote one queue
                c.level += 1
                c.level_entry_time = now

    # ------------------------------------------------------------------ anti-starvation
    def program_wait(self, view: SchedulerView, task_id: int) -> float:
        """W: time the program's calls spent ready but not running."""
        prog = self.programs.get(task_id)
        w = prog.wait_done if prog is not None else 0.0
        for r in view.waiting:
            if r.task_id == task_id:
                w += max(view.now - r.ready_time, 0.0)
        for r in view.running:
            if r.task_id == task_id and r.admitted_time is not None:
                w += max(r.admitted_time - r.ready_time, 0.0)
        return w

    def _promote_starving(self, view: SchedulerView) -> None:
        beta = self.params.starvation_ratio
        waits: dict[int, float] = {}
        for r in view.waiting:
            c = self.calls[r.rid]
            if c.level == 0:
                continue
            if r.task_id not in waits:
                waits[r.task_id] = self.program_wait(view, r.task_id)
            if waits[r.task_id] >= beta * max(self.attained.get(r.task_id, 0.0), 1e-9):
                c.level = 0
                c.level_entry_service = self.call_service(c, view.now)
                c.level_entry_time = view.now

    # ------------------------------------------------------------------ preemption
    def _reserve(self, r: RequestInfo) -> float:
        """Estimated decode tokens a request still needs (never its true length)."""
        return max(self.est.output_tokens(r.agent, r.stage) - r.generated_tokens, 1.0)

    def fits(self, view: SchedulerView, r: RequestInfo, running: list[RequestInfo], freed: float = 0.0) -> bool:
        if len(running) >= view.max_running_requests:
            return False
        room = view.kv_free_tokens + view.kv_evictable_tokens + freed - sum(self._reserve(x) for x in running)
        return room >= r.uncached_tokens + self._reserve(r)

    def preemptions(self, view: SchedulerView, order: list[RequestInfo]) -> tuple[str, ...]:
        """Preempt running calls of strictly worse queues while the best waiting call does not fit."""
        p = self.params
        if not p.preempt or not order or not view.running or p.max_preempt_per_decision == 0:
            return ()
        best = order[0]
        lvl_best = self.calls[best.rid].level
        running = list(view.running)
        out: list[str] = []
        freed = 0.0
        while running and len(out) < p.max_preempt_per_decision:
            worst = max(running, key=lambda x: (self.calls[x.rid].level, self.calls[x.rid].level_entry_time, x.rid))
            if self.calls[worst.rid].level <= lvl_best or self.fits(view, best, running, freed):
                break
            running.remove(worst)
            out.append(worst.rid)
            freed += worst.dynamic_kv_tokens
        return tuple(out)

    # ------------------------------------------------------------------ decision
    def schedule(self, view: SchedulerView) -> Decision:
        self._sync(view)
        self._promote_starving(view)
        key = lambda r: (self.calls[r.rid].level, self.calls[r.rid].level_entry_time, r.ready_time, r.rid)  # noqa: E731
        order = sorted(view.waiting, key=key)
        preempt = self.preemptions(view, order)
        for rid in preempt:  # the cut run ends now
            c = self.calls[rid]
            c.service_before = self.call_service(c, view.now)
            c.run_start = None
        return Decision(admit=tuple(r.rid for r in order), preempt=preempt,
                        stop_at_first_misfit=self.params.stop_at_first_misfit)
