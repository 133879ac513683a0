"""TOPAS: workflow-aware prefix-state scheduling, as one decision pipeline (docs/topas.md, "The pipeline"):

    estimates      Estimator.begin(view) -> DecisionEstimates (W, decode step, estimate epoch, d_r)  estimates.py
    task inputs    TaskBook.states / chain_fn: path-model states, admission chains, reuse counts     tasks.py
    weights        aging x remaining-work factor of each task's gains                               score.py, build.py
    problem        build_problem: the scored calls, agent options, KV pool, preemption candidates,
                   the opening cost's inputs                                                          build.py
    search         candidate states (R', Q') scored by score.score_state, repaired by preemption     search.py, pack.py, repair.py
    order          admission_list: the plan's calls grouped by agent, then the fill                  ordering.py
    pins           safe_pins: prefixes of admitted calls, never holding memory a call needs          pins.py

Estimates only: output lengths and service times come from finished calls and a workload-independent prior;
W is learned from observed queueing delays.
"""

from __future__ import annotations

from topas.policy import Decision, Policy, RequestFinished, SchedulerView, register_policy
from topas.scheduler import score as S
from topas.scheduler.build import (
    build_problem,
    context_values,
    opening_inputs,
    overdue_tasks,
    preemption_candidates,
    remaining_work_factors,
    scored_tasks,
)
from topas.scheduler.digest import group_calls
from topas.scheduler.estimates import Estimator
from topas.scheduler.ordering import admission_list
from topas.scheduler.params import TopasParams
from topas.scheduler.pins import safe_pins
from topas.scheduler.search import search
from topas.scheduler.tasks import TaskBook


@register_policy("topas")
class Topas(Policy):
    """Full TOPAS. Ablations are subclasses that change parameter defaults (ablations.py)."""

    Params = TopasParams

    def __init__(self, params: TopasParams | None = None) -> None:
        super().__init__(params)
        self.estimator = Estimator(self.params)
        self.tasks = TaskBook(self.estimator, self.params.tie_temperature)
        # lambda_r of running requests, in units of W x aging (the scale gains are measured in),
        # so a credit revoked later is valued at the current W and aging, like a new admission.
        self.credit: dict[str, float] = {}
        self._arrival_key: dict[int, tuple[float, int]] = {}  # task -> (arrival, task): build.by_arrival

    @property
    def est(self):
        """The service estimator (finished calls and the prior)."""
        return self.estimator.est

    def on_event(self, event) -> None:
        self.estimator.on_event(event)
        if isinstance(event, RequestFinished):
            self.credit.pop(event.request.rid, None)

    def schedule(self, view: SchedulerView) -> Decision:
        p, est = self.params, self.estimator
        e = est.begin(view)
        waiting_by_task, running_by_task = group_calls(view)
        scored = scored_tasks(view, waiting_by_task, e.kv, self._arrival_key)
        states, reuse_n = self.tasks.states(view, e, waiting_by_task, running_by_task, scored)
        work = remaining_work_factors(self.tasks.remaining_seconds(view, e), states) if p.use_remaining_work else {}
        aging = {tid: (S.aging(view.now, view.tasks[tid].arrival, p.rho, p.h_age) if p.use_aging else 1.0)
                 * work.get(tid, 1.0) for tid in states}  # each task's weight on its gains
        scored_waiting = {t: waiting_by_task[t] for t in scored}
        context = context_values(view, scored_waiting, est, aging) if p.use_context else {}
        chain = self.tasks.chain_fn(view, states, waiting_by_task, aging, context)
        problem = build_problem(
            view, e, est, p, scored_waiting, reuse_n, chain, aging,
            running=lambda: preemption_candidates(view, e, est, self.tasks, p, self.credit, waiting_by_task, running_by_task,
                                                  work),
            overdue=overdue_tasks(view, scored, waiting_by_task, e, est, p.overdue_factor),
            context=context, remaining_work={t: work[t] for t in states} if work else None)
        problem.opening = lambda pr: opening_inputs(pr, scored_waiting, e, est)
        plan = search(problem, p.M)
        for rid in plan.admit:
            self.credit[rid] = plan.gains.get(rid, 0.0) / (e.wait_s * aging.get(problem.request_task[rid], 1.0))
        admit = admission_list(view, problem, plan, aging, p.consolidate_share)
        used = sorted({problem.request_agent[rid] for rid in plan.admit})
        expected = {r.rid: est.output_tokens(r.agent, r.stage) for r in view.running}
        pin = safe_pins(view, problem, plan.admit, [rid for _, rid in plan.blocked], used, expected)
        return Decision(admit=tuple(admit), pin=pin, preempt=tuple(plan.preempt_rids), stop_at_first_misfit=True)
