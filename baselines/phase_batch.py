"""Phase-batch: agent-phase batching, the simplest consolidation baseline.

Our own design, not a published system. It isolates the mechanism TOPAS relies on: a running
call locks its agent's prefix on the device, so the fewer distinct agents the running calls
belong to, the less KV goes to locked prefixes and the larger the batch can be. Phase-batch
gets that effect with a fixed rule and no cost model:

1. anti-starvation first: every waiting call whose wait (now - ready time) exceeds
   `starvation_limit_s` is admitted ahead of the phase rule, in task-arrival order;
2. phase: waiting calls of the agents that already have running calls (their prefix is
   locked anyway), in task-arrival order;
3. a new agent is opened only when no call of a running agent waits: the agent of the
   oldest waiting call by task arrival, with all its waiting calls in task-arrival order.
   One agent per scheduling point; once its calls run it is a running agent.

Task-arrival order is (task arrival, the call's ready time, task id, rid). Calls not listed
stay waiting, so other agents wait while a running agent's calls do. The engine walks the
list and skips what does not fit (the policy contract, `stop_at_first_misfit` False),
except while a starved call waits: then the walk stops at the first misfit, so no later
call overtakes a starved one that does not fit yet (with skipping, large starved calls --
Engineer2 late in its conversation on MetaGPT-TL -- were overtaken for 4x the limit).
`starvation_limit_s` None (or inf) disables step 1 (`phase_batch_nolimit`).

Blind: reads only the view (agents, task arrival, ready times and the clock); never a
call's true output length or future arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from topas.policy import Decision, Policy, RequestInfo, SchedulerView, check_ranges, register_policy


def task_arrival_order(calls: Iterable[RequestInfo]) -> list[RequestInfo]:
    return sorted(calls, key=lambda r: (r.task_arrival, r.ready_time, r.task_id, r.rid))


def phase_order(view: SchedulerView, starvation_limit_s: float | None) -> tuple[tuple[str, ...], bool]:
    """The admission list of the rule above (rids), and whether a starved call heads it."""
    waiting = task_arrival_order(view.waiting)
    if not waiting:
        return (), False
    limit = math.inf if starvation_limit_s is None else starvation_limit_s
    starved = [r for r in waiting if view.now - r.ready_time > limit]
    rest = [r for r in waiting if view.now - r.ready_time <= limit]
    running_agents = {r.agent for r in view.running}
    phase = [r for r in rest if r.agent in running_agents]
    if not phase and rest:
        opened = rest[0].agent  # the oldest waiting call's agent (by task arrival)
        phase = [r for r in rest if r.agent == opened]
    return tuple(r.rid for r in starved + phase), bool(starved)


@register_policy("phase_batch")
class PhaseBatch(Policy):
    @dataclass(frozen=True)
    class Params:
        # seconds a call may wait before it is admitted ahead of the phase rule; None = no limit.
        # Tuned under the project's tuning rules (analysis/results/tuning/tuning.md).
        starvation_limit_s: float | None = 45.0

        def __post_init__(self) -> None:
            check_ranges(self, starvation_limit_s="in [0, inf]")  # inf (or None): no limit

    def schedule(self, view: SchedulerView) -> Decision:
        admit, starved = phase_order(view, self.params.starvation_limit_s)
        return Decision(admit=admit, stop_at_first_misfit=starved)


@register_policy("phase_batch_nolimit")
class PhaseBatchNoLimit(PhaseBatch):
    """Reference: the phase rule alone, without the starvation limit."""

    @dataclass(frozen=True)
    class Params(PhaseBatch.Params):
        starvation_limit_s: float | None = None
