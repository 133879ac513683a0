"""KVFlow: workflow-aware prefix eviction and prefetch, FCFS admission.

Source: KVFlow (Pan et al., 2025, arXiv 2507.07400, "Efficient Prefix Caching for
Accelerating LLM-Based Multi-Agent Workflows"), sections 3.1-3.2, built on SGLang:
- Agent Step Graph: each agent gets a *steps-to-execution* value, how many workflow
  steps remain before it runs again (0 = running now; a join runs one step after its
  latest parent: max(E1, E2) + 1); across concurrent workflows an agent takes the
  minimum (`topas.policy.progress.steps_to_execution`, aggregated as the min over
  active tasks; agents no active task needs are infinitely far);
- eviction: the value is set on the radix node that ends the agent's fixed prompt;
  when memory is needed the cache evicts the prefixes of agents farthest from
  execution first (dynamic suffixes before any fixed prompt, LRU among equals);
- prefetch: the prefixes of agents due within the next step(s) are loaded back from the
  CPU tier in the background before their requests arrive;
- admission: SGLang's FCFS waiting queue (KVFlow changes cache management, not order).

How its eviction maps onto our `Decision` (we cannot hand the engine a per-node
priority, only pins and explicit moves). KVFlow's priority is soft: a near agent's prefix
is evicted last, but it *is* evicted when admissions need the memory. So, with the
estimated demand D of the head of the FCFS queue (uncached prompt tokens + estimated
outputs of as many waiting requests as there are free running slots; online estimates,
never true lengths):
- `offload` = when D exceeds the free KV, the unpinned, idle, device-resident prefixes
  of the agents *farthest* from execution (not needed by any active task first, then
  larger steps first) are moved to the host tier until the shortfall is covered, so the
  engine's LRU does not reach nearer ones first. Agents within `hold_steps` (default:
  `lookahead`) are never offloaded;
- `pin` = the agents with steps-to-execution <= `lookahead`, nearest first, as long as
  their locked prefixes leave D (and the KV the running requests may still need) free:
  pinned prefixes are out of LRU's reach, so they go last; when admissions need their
  memory the farthest of them are unpinned and LRU may take them, as in KVFlow. Pinning
  a prefix that sits on the host tier loads it back now: that is the prefetch.
Pinned prefixes also stay within `max_pin_fraction` of the pool, and with nothing
running only the queue head's own prefix stays pinned (harness guards: KVFlow never
locks memory, so its prefixes can never keep requests out or stall the engine).

Deviations: KVFlow's status-aware scheduling (skip a request whose prefix is still
loading) has no counterpart because load-back is part of admission in our engine;
KVFlow's eviction priority acts inside every eviction, ours only at decision points
(between them, unpinned near and far prefixes compete under LRU).
"""

from __future__ import annotations

from dataclasses import dataclass

from topas.policy import Decision, Policy, RequestInfo, Residency, SchedulerView, check_ranges, register_policy
from topas.policy.estimates import PRIOR_OUTPUT_TOKENS, Prior, ServiceEstimator
from topas.policy.events import Event
from topas.policy.progress import active_stage_counts, remaining_calls, steps_to_execution

FAR = 1 << 30  # agents no active task needs


def agent_steps(view: SchedulerView) -> dict[str, int]:
    """Steps-to-execution per agent, min over active tasks (absent = not needed by any task)."""
    active = active_stage_counts(view)
    out: dict[str, int] = {}
    for tid, prog in view.tasks.items():
        tpl = view.templates.get(prog.template)
        if tpl is None:
            continue
        act = active.get(tid, {})
        for agent, d in steps_to_execution(tpl, remaining_calls(tpl, prog, act), act).items():
            out[agent] = min(out.get(agent, d), d)
    for r in view.waiting + view.running:  # a visible call's agent is due now whatever the template says
        out[r.agent] = 0
    return out


def pin_candidates_allowed(view: SchedulerView) -> set[str] | None:
    """Pins must never stall the engine: with nothing running, only the prefix the head of
    the queue needs itself may stay locked (None = no restriction)."""
    if view.running or not view.waiting:
        return None
    return {view.waiting[0].agent}


def conservative_remaining(r: RequestInfo, est: ServiceEstimator) -> float:
    """Decode tokens a running request may still need: the longest recently observed output of
    its (agent, stage) (the prior before any), minus what it generated. Estimates only."""
    return max(max(est.output_samples(r.agent, r.stage)) - r.generated_tokens, 1.0)


def safe_pins(view: SchedulerView, wanted: list[str], est: ServiceEstimator, max_pin_fraction: float,
              demand: float = 0.0) -> frozenset[str]:
    """Pin `wanted` (in priority order) within `max_pin_fraction` of the pool, as long as the
    locked prefixes leave the KV that the running requests may still need (pinning happens after
    they were admitted) plus `demand` (what the policy wants left for admissions). Lockable KV =
    free + evictable + prefixes pinned now but not in use; a prefix costs its tokens unless a
    running request holds it anyway or it is in neither tier (then it is pinned when a call
    prefills it, in memory that call reserved)."""
    budget = max_pin_fraction * view.kv_pool_tokens
    allowed = pin_candidates_allowed(view)
    lockable = view.kv_free_tokens + view.kv_evictable_tokens + sum(
        ps.tokens for ps in view.prefixes.values() if ps.pinned and not ps.in_use)
    headroom = (lockable - sum(conservative_remaining(r, est) for r in view.running) - len(view.running)
                - max(demand, 0.0))
    pins: list[str] = []
    used = 0
    for agent in wanted:
        ps = view.prefixes.get(agent)
        if ps is None or (allowed is not None and agent not in allowed) or used + ps.tokens > budget:
            continue
        cost = 0 if ps.in_use or ps.residency == Residency.NONE else ps.tokens
        if cost > headroom:
            continue
        headroom -= cost
        pins.append(agent)
        used += ps.tokens
    return frozenset(pins)


def kvflow_pins(view: SchedulerView, steps: dict[str, int], lookahead: int, max_pin_fraction: float,
                est: ServiceEstimator, demand: float) -> frozenset[str]:
    wanted = sorted((a for a, d in steps.items() if d <= lookahead), key=lambda a: (steps[a], a))
    return safe_pins(view, wanted, est, max_pin_fraction, demand)


def kvflow_offloads(view: SchedulerView, steps: dict[str, int], pins: frozenset[str], shortfall: float,
                    hold_steps: int) -> frozenset[str]:
    if shortfall <= 0:
        return frozenset()
    cands = [
        a for a, ps in view.prefixes.items()
        if a not in pins and not ps.in_use and ps.residency == Residency.GPU and steps.get(a, FAR) > hold_steps
    ]
    cands.sort(key=lambda a: (-steps.get(a, FAR), -view.prefixes[a].tokens, a))
    out: list[str] = []
    freed = 0
    for a in cands:
        if freed >= shortfall:
            break
        out.append(a)
        freed += view.prefixes[a].device_tokens
    return frozenset(out)


@register_policy("kvflow")
class KVFlow(Policy):
    @dataclass(frozen=True)
    class Params:
        lookahead: int = 1  # pin / prefetch agents due within this many steps (KVFlow prefetches the next step)
        hold_steps: int | None = None  # never offload agents within this many steps (None = lookahead)
        max_pin_fraction: float = 0.5  # harness guard: pinned prefix tokens <= this fraction of the pool
        prior_output_tokens: float = PRIOR_OUTPUT_TOKENS  # demand estimate only
        stop_at_first_misfit: bool = True  # SGLang FCFS admission

        def __post_init__(self) -> None:
            check_ranges(self, lookahead=">= 0", hold_steps=">= 0", max_pin_fraction="in [0, 1]", prior_output_tokens="> 0")

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        self.est = ServiceEstimator(Prior(self.params.prior_output_tokens))

    def on_event(self, event: Event) -> None:
        self.est.on_event(event)

    def demand_tokens(self, view: SchedulerView) -> float:
        """KV the FCFS head of the queue needs: uncached prompt + estimated output, for as many
        requests as there are free running slots."""
        slots = max(view.max_running_requests - len(view.running), 0)
        return sum(r.uncached_tokens + self.est.output_tokens(r.agent, r.stage) for r in view.waiting[:slots])

    def schedule(self, view: SchedulerView) -> Decision:
        p = self.params
        steps = agent_steps(view)
        demand = self.demand_tokens(view)
        pins = kvflow_pins(view, steps, p.lookahead, p.max_pin_fraction, self.est, demand)
        shortfall = demand - view.kv_free_tokens
        hold = p.lookahead if p.hold_steps is None else p.hold_steps
        offload = kvflow_offloads(view, steps, pins, shortfall, hold)
        return Decision(admit=tuple(r.rid for r in view.waiting), pin=pins, offload=offload,
                        stop_at_first_misfit=p.stop_at_first_misfit)
