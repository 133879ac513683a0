"""FCFS: SGLang's default `fcfs` schedule policy (managers/schedule_policy.py,
`CacheAgnosticPolicy.FCFS`: the waiting queue is left in entry order; retracted
requests re-enter at the tail). The admission walk stops at the first request
that does not fit, as SGLang's `_get_new_batch_prefill_raw` does."""

from __future__ import annotations

from topas.policy import Decision, Policy, SchedulerView, register_policy


def sort_by_fcfs(view: SchedulerView) -> tuple[str, ...]:
    return tuple(r.rid for r in view.waiting)


@register_policy("fcfs")
class FCFS(Policy):
    def schedule(self, view: SchedulerView) -> Decision:
        return Decision(admit=sort_by_fcfs(view), stop_at_first_misfit=True)
