"""SPF: shortest (estimated) processing first; on a chain, SRPT at task level.

Source: the TOPAS paper's SPF baseline ("SPF (= SRPT on Chain-3)", docs/baselines.md); SRPT itself is Schrage's shortest-remaining-processing-time rule.

Every waiting request is ranked by the estimated remaining processing of its *task*
(`granularity: task`, the default): the expected service of everything the task still
has to run, i.e. for each unfinished template stage the calls not yet visible times
the stage's estimated call time, plus, for each call of the task now waiting or
running, its own estimated remaining processing (uncached prefill + estimated
remaining decode; `topas.policy.progress`). On a chain this is exactly SRPT over
tasks. Ties: earlier ready time, then request id. `granularity: request` ranks each
request by its own estimated remaining processing instead (call-level SPF).

Estimates only (docs/policy_contract.md): output lengths come from a `ServiceEstimator`
that starts from the workload-independent prior and learns from `RequestFinished`
events; the latency model turns tokens into seconds. Expected repetition counts come
from the template.

Deviations: not preemptive (a running call is never displaced; SGLang-style ranking
of the waiting queue only); future calls' prefill is not estimated (their prompts are
not known) so a stage's time is its estimated decode time
(`progress.estimated_call_seconds`). The admission walk stops at the first request that
does not fit (`stop_at_first_misfit`), like the SGLang priority queue the paper's
baselines ran on; exposed for tuning.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from topas.policy import Decision, Policy, RequestInfo, SchedulerView, check_ranges, register_policy
from topas.policy.estimates import PRIOR_OUTPUT_TOKENS, Prior, ServiceEstimator
from topas.policy.events import Event
from topas.policy.progress import (
    active_stage_counts,
    estimated_call_seconds,
    remaining_calls,
    request_remaining_seconds,
)


def task_remaining_seconds(view: SchedulerView, est: ServiceEstimator, batch_size: int,
                           context: int) -> dict[int, float]:
    """Estimated remaining processing (seconds) per active task."""
    active = active_stage_counts(view)
    calls: dict[int, list[RequestInfo]] = defaultdict(list)
    for r in view.waiting + view.running:
        calls[r.task_id].append(r)
    out: dict[int, float] = {}
    for tid, prog in view.tasks.items():
        tpl = view.templates.get(prog.template)
        own = sum(request_remaining_seconds(r, est, view.costs, batch_size, context) for r in calls.get(tid, ()))
        if tpl is None:
            out[tid] = own
            continue
        act = active.get(tid, {})
        rem = remaining_calls(tpl, prog, act)
        future = 0.0
        for s, n in rem.items():
            k = n - act.get(s, 0)
            if k > 0:
                future += k * estimated_call_seconds(est, view.costs, tpl.stages[s].agent, s, batch_size, context)
        out[tid] = own + future
    for tid, rs in calls.items():  # a request of a task missing from view.tasks: its own work
        if tid not in out:
            out[tid] = sum(request_remaining_seconds(r, est, view.costs, batch_size, context) for r in rs)
    return out


def sort_by_shortest_processing(view: SchedulerView, est: ServiceEstimator, p: SPF.Params) -> tuple[str, ...]:
    if p.granularity == "task":
        rem = task_remaining_seconds(view, est, p.batch_size, p.context_tokens)
        work = {r.rid: rem[r.task_id] for r in view.waiting}
    else:
        work = {r.rid: request_remaining_seconds(r, est, view.costs, p.batch_size, p.context_tokens)
                for r in view.waiting}
    return tuple(r.rid for r in sorted(view.waiting, key=lambda r: (work[r.rid], r.ready_time, r.rid)))


@register_policy("spf")
class SPF(Policy):
    @dataclass(frozen=True)
    class Params:
        granularity: Literal["task", "request"] = "task"  # task = SRPT over tasks (the paper's SPF on Chain-3)
        prior_output_tokens: float = PRIOR_OUTPUT_TOKENS  # workload-independent prior (docs/policy_contract.md)
        prior_weight: float = 1.0
        batch_size: int = 16  # typical decode batch used to turn tokens into seconds
        context_tokens: int = 4096  # typical context of that batch
        stop_at_first_misfit: bool = True

        def __post_init__(self) -> None:
            if self.granularity not in ("task", "request"):
                raise ValueError(f"spf: granularity must be 'task' or 'request', got {self.granularity!r}")
            check_ranges(self, prior_output_tokens="> 0", prior_weight="> 0", batch_size=">= 1", context_tokens=">= 1")

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        self.est = ServiceEstimator(Prior(self.params.prior_output_tokens, self.params.prior_weight))

    def on_event(self, event: Event) -> None:
        self.est.on_event(event)

    def schedule(self, view: SchedulerView) -> Decision:
        return Decision(admit=sort_by_shortest_processing(view, self.est, self.params),
                        stop_at_first_misfit=self.params.stop_at_first_misfit)
