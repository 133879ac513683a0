"""Parrot-FCFS: application-level FCFS with Parrot's DAG- and prefix-aware grouping.

Source: Parrot (Lin et al., OSDI'24, "Efficient Serving of LLM-based Applications
with Semantic Variable"), sections 5.2-5.3 (app-centric scheduling: requests of one
application and requests sharing a prompt prefix are scheduled together), and its code
(microsoft/ParrotServe):
- `parrot/engine/engine_scheduler.py`: the engine orders jobs by
  (arrival of the job's application thread, arrival of the job) -- app-level FIFO --
  and its admission loop breaks at the first job that does not fit;
- `parrot/serve/scheduler/global_scheduler.py` (`GlobalSchedulerConfig.app_fifo`,
  `graph_group`, `ctx_group`): walking the queue in priority order, each not yet
  scheduled request pulls the later requests of its *graph group* (requests whose
  outputs feed a common consumer request) or, if it has none, of its *context group*
  (requests whose first semantic variable, the shared prompt prefix, is the same) and
  the group is dispatched together; only one kind of grouping per group.

What we implement on one engine:
1. app FIFO: waiting requests sorted by (task arrival, task id, ready time, rid);
2. walking that order, each request not yet placed opens a group; later requests of the
   same task with a common consumer stage in the template join it (graph group: a task's
   parallel ready calls that feed the same join are scheduled together); if none joined,
   later requests whose prompt starts with the same prefix segment (the agent's system
   prompt: Parrot's `first_node.sv_id`) join it instead (context group);
3. groups are admitted in that order; the walk stops at the first misfit (Parrot's
   engine loop), exposed as `stop_at_first_misfit` for tuning.

Deviations: Parrot is a multi-engine system and its groups choose an engine; with one
engine grouping only decides contiguity in the admission order. Parrot's engine preempts
the jobs of the youngest applications when running contexts exceed its token budget;
here out-of-memory retraction follows the shared engine's SGLang rule (no policy
preemption). Parrot's per-request performance-criteria deduction (latency vs
throughput preference) has no counterpart on a single engine with one batch policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from topas.policy import Decision, Policy, RequestInfo, SchedulerView, register_policy


def app_fifo_order(waiting: tuple[RequestInfo, ...]) -> list[RequestInfo]:
    return sorted(waiting, key=lambda r: (r.task_arrival, r.task_id, r.ready_time, r.rid))


def _consumers(view: SchedulerView, r: RequestInfo) -> frozenset[str]:
    prog = view.tasks.get(r.task_id)
    tpl = view.templates.get(prog.template) if prog is not None else None
    if tpl is None or r.stage not in tpl.children:
        return frozenset()
    return frozenset(tpl.children[r.stage])


def _prefix_id(r: RequestInfo) -> str | None:
    return r.segments[0][0] if r.segments else None


def sort_by_app_fifo_grouped(view: SchedulerView, p: ParrotFCFS.Params) -> tuple[str, ...]:
    order = app_fifo_order(view.waiting)
    placed: set[str] = set()
    out: list[str] = []
    for i, r in enumerate(order):
        if r.rid in placed:
            continue
        group = [r.rid]
        placed.add(r.rid)
        graph_on, ctx_on = p.graph_group, p.ctx_group
        consumers = _consumers(view, r)
        for q in order[i + 1:]:
            if q.rid in placed:
                continue
            if graph_on and q.task_id == r.task_id:
                common = consumers & _consumers(view, q)
                if common:
                    group.append(q.rid)
                    placed.add(q.rid)
                    consumers = common
                    ctx_on = False  # one kind of grouping per group (Parrot)
                    continue
            if ctx_on and _prefix_id(q) is not None and _prefix_id(q) == _prefix_id(r):
                group.append(q.rid)
                placed.add(q.rid)
                graph_on = False
        out.extend(group)
    return tuple(out)


@register_policy("parrot_fcfs")
class ParrotFCFS(Policy):
    @dataclass(frozen=True)
    class Params:
        graph_group: bool = True  # GlobalSchedulerConfig.graph_group (on in Parrot's full system)
        ctx_group: bool = True  # GlobalSchedulerConfig.ctx_group (on in Parrot's full system)
        stop_at_first_misfit: bool = True  # Parrot's engine admission loop breaks at the first misfit

    def schedule(self, view: SchedulerView) -> Decision:
        return Decision(admit=sort_by_app_fifo_grouped(view, self.params),
                        stop_at_first_misfit=self.params.stop_at_first_misfit)
