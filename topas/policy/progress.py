"""Workflow arithmetic shared by policies: what remains of a task, how far an agent is
from execution, estimated service of a stage. Pure functions over the template, the
task's realized progress and online estimates (never true lengths).

A stage's *remaining calls* = max(expected_count - finished, calls active now), so a
repeated stage (one call per file, ReAct turns) is expected to run `expected_count`
times until it has, and at least as often as calls are visibly waiting or running.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

from topas.policy.estimates import ServiceEstimator
from topas.policy.view import CostModel, RequestInfo, SchedulerView, TaskProgress
from topas.workflow import WorkflowTemplate


def active_stage_counts(view: SchedulerView) -> dict[int, Counter]:
    """Per task: number of waiting + running calls of each stage."""
    out: dict[int, Counter] = defaultdict(Counter)
    for r in view.waiting + view.running:
        out[r.task_id][r.stage] += 1
    return out


def remaining_calls(tpl: WorkflowTemplate, progress: TaskProgress, active: Mapping[str, int]) -> dict[str, float]:
    """Expected calls still to finish per stage (active ones included)."""
    out = {}
    for s in tpl.stages.values():
        done = progress.stage_done.get(s.id, 0)
        out[s.id] = max(s.expected_count - done, float(active.get(s.id, 0)), 0.0)
    return out


def steps_to_execution(tpl: WorkflowTemplate, remaining: Mapping[str, float], active: Mapping[str, int]) -> dict[str, int]:
    """KVFlow's steps-to-execution per agent of one task: 0 for agents with calls active now,
    else the number of stage hops from the nearest active or ready-to-start stage to the
    agent's next unfinished stage. Agents with nothing left are absent."""
    pending = {s for s, n in remaining.items() if n > 0}
    dist: dict[str, int] = {}
    frontier = [s for s in tpl.topo_order if s in pending and (active.get(s, 0) > 0 or not any(d in pending for d in tpl.stages[s].deps))]
    for s in frontier:
        dist[s] = 0 if active.get(s, 0) > 0 else 1
    for s in tpl.topo_order:  # topological relaxation: a stage runs one hop after its last pending parent
        if s not in pending or s in dist:
            continue
        parents = [dist[d] for d in tpl.stages[s].deps if d in dist]
        if parents:
            dist[s] = max(parents) + 1
    out: dict[str, int] = {}
    for s, d in dist.items():
        a = tpl.stages[s].agent
        out[a] = min(out.get(a, d), d)
    return out


def estimated_call_seconds(est: ServiceEstimator, costs: CostModel, agent: str, stage: str,
                           batch_size: int = 16, context: int = 4096) -> float:
    """Expected service of one call: its estimated output at a typical decode step time.
    Prefill is left out on purpose: it depends on residency, which the policies decide."""
    return est.output_tokens(agent, stage) * costs.decode_step_time(batch_size, context)


def request_remaining_seconds(r: RequestInfo, est: ServiceEstimator, costs: CostModel,
                              batch_size: int = 16, context: int = 4096) -> float:
    """Estimated remaining processing of one call: uncached prefill + estimated remaining decode."""
    left = max(est.output_tokens(r.agent, r.stage) - r.generated_tokens, 1.0)
    prefill = costs.prefill_time(max(r.prompt_tokens - r.cached_tokens, 0), r.cached_tokens) if r.admitted_time is None else 0.0
    return prefill + left * costs.decode_step_time(batch_size, context)
