"""The phase switch: when serving an agent means ending the phase of the chosen state (docs/topas.md, "The
phase switch").

An agent B outside the chosen R' whose prefix cannot sit beside the running calls, and would take more of the
room the running agents leave than the calls beside it could, is served only once the running phase ends: the
engine drains its calls. The search never chooses that state (it is infeasible now), so it is priced here, by
the exchange argument of two phases with set-ups: serve a batch of B's waiting calls now, before the waiting
queue of R' (A), or after it. With W the summed task weights of a set of calls and P the time the pool takes to
serve them (`phase_time`):

    value = W_B x P_A - W_A x (D + P_B) - (W_A + W_rest) x (sigma_A + sigma_B + idle_B)

B's batch saves the wait for A's queue; A's queue waits for the drain D (until B fits) and B's phase; every
other task in the system waits for the extra switch's overhead: the prefix moves (sigma) and the pool B's
phase leaves idle. The batch is the densest calls of B (weight per KV-second) whose value is largest. A switch
with value > 0 puts the batch at the head of the admission list, so the engine drains the pool for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from topas.scheduler.problem import Plan, Problem


class QueuedCall(NamedTuple):
    """A waiting call as the phase switch reads it (queues are keyed by agent)."""
    rid: str
    weight: float  # its task's weight over the task's waiting calls at this agent
    kv: int  # d_r
    service_s: float  # expected service


class RunningCall(NamedTuple):
    residual_s: float  # its expected remaining service
    agent: str
    kv: int


class SwitchValue(NamedTuple):
    """Every term of a phase switch's value (task-weight x seconds)."""
    saved: float  # W_B x P_A
    a_waits: float  # W_A x (D + P_B)
    overhead: float  # (W_A + W_rest) x (sigma_A + sigma_B + idle_B)

    @property
    def total(self) -> float:
        return self.saved - self.a_waits - self.overhead


class PhaseSwitch(NamedTuple):
    agent: str
    rids: list[str]  # the batch, densest first
    value: SwitchValue


def switch_value(w_b: float, p_a: float, w_a: float, drain_s: float, p_b: float, w_rest: float,
                 sigma_s: float, idle_b: float) -> SwitchValue:
    """The exchange argument's value of serving B's batch (W_B, its phase P_B) before A's waiting queue (W_A, P_A)."""
    return SwitchValue(w_b * p_a, w_a * (drain_s + p_b), (w_a + w_rest) * (sigma_s + idle_b))


def phase_time(kv_s: float, longest_s: float, room: int) -> tuple[float, float]:
    """(the time the pool serves calls of `kv_s` KV-seconds with `room` tokens: at least the longest call's
    service; the part of it the room stands idle)."""
    full = kv_s / max(room, 1)
    t = max(full, longest_s)
    return t, t - full


def drain_time(running: Sequence[RunningCall], prefix: Mapping[str, int], used: int, need: int, pool: int) -> float:
    """Seconds until `need` more tokens fit in the pool: running calls end shortest residual first, and an agent's
    prefix frees when its last running call ends. `used`: the running calls' KV and the prefixes they hold."""
    if used + need <= pool:
        return 0.0
    left: dict[str, int] = {}
    for r in running:
        left[r.agent] = left.get(r.agent, 0) + 1
    t = 0.0
    for r in sorted(running):
        t, used, left[r.agent] = r.residual_s, used - r.kv, left[r.agent] - 1
        if left[r.agent] == 0:
            used -= prefix.get(r.agent, 0)
        if used + need <= pool:
            break
    return t


def best_batch(calls: Sequence[QueuedCall], room: int, value) -> tuple[SwitchValue | None, list[str]]:
    """The first k of `calls` by density (weight per KV-second) whose `value(weight, phase, idle)` is largest;
    (that value, the batch), or (None, []) when no batch has a positive value."""
    order = sorted(calls, key=lambda c: -c.weight / max(c.kv * c.service_s, 1e-9))  # stable: ties keep queue order
    best, best_k, w, kv_s, longest = None, 0, 0.0, 0.0, 0.0
    for k, c in enumerate(order, 1):
        w, kv_s, longest = w + c.weight, kv_s + c.kv * c.service_s, max(longest, c.service_s)
        v = value(w, *phase_time(kv_s, longest, room))
        if v.total > 0 and (best is None or v.total > best.total):
            best, best_k = v, k
    return best, [c.rid for c in order[:best_k]]


def excludes(prefix_b: int, min_kv_b: int, running_tokens: int, forced_tokens: int, pool: int) -> bool:
    """B can join the running agents only by ending their phase: its prefix and smallest call do not fit beside
    the running calls, and its prefix would take more of the room the running agents' prefixes leave than the
    calls beside it could (otherwise B joins as calls end, and the search chooses)."""
    return running_tokens + forced_tokens + prefix_b + min_kv_b > pool and 2 * prefix_b > pool - forced_tokens


def excluded_agents(p: Problem, plan: Plan, min_kv: Mapping[str, int]) -> list[str]:
    """The agents with waiting calls (`min_kv`: the smallest waiting d_r per agent) that the chosen state excludes
    (`excludes`); cheap, so a decision builds the switch's inputs only when there is one."""
    agents, resident = p.agents, plan.resident
    forced_tokens = sum(o.tokens for o in agents.values() if o.forced)
    return [b for b in sorted(min_kv) if b not in resident and b in agents
            and excludes(agents[b].tokens, min_kv[b], p.base_tokens, forced_tokens, p.kv_pool_tokens)]


def phase_switch(p: Problem, plan: Plan, excluded: Sequence[str], queues: Mapping[str, Sequence[QueuedCall]],
                 running: Sequence[RunningCall], system_weight: float) -> PhaseSwitch | None:
    """The switch of largest positive value from the chosen state's phase to one of the `excluded` agents, or
    None. `queues`: every waiting call by agent; `system_weight`: the summed weight of every task in the system."""
    agents, pool, resident = p.agents, p.kv_pool_tokens, plan.resident
    a_calls = [c for a in sorted(resident) for c in queues.get(a, ())]
    if not a_calls:
        return None  # nothing of the phase waits: it ends by itself
    resident_tokens = sum(agents[a].tokens for a in resident)
    w_a = sum(c.weight for c in a_calls)
    p_a = sum(c.kv * c.service_s for c in a_calls) / max(pool - resident_tokens, 1)
    sigma_a = sum(agents[a].reload_s for a in resident)  # R''s prefixes come back after B's phase
    prefix = {a: o.tokens for a, o in agents.items()}
    forced_tokens = sum(o.tokens for o in agents.values() if o.forced)
    rest = system_weight - w_a  # every task's weight but A's queue's: B's batch and W_rest
    best = None
    for b in excluded:
        calls = queues[b]
        need = agents[b].tokens + min(c.kv for c in calls)
        drain = drain_time(running, prefix, p.base_tokens + forced_tokens, need, pool)
        sigma = sigma_a + agents[b].move_in_s

        def value(w_b: float, p_b: float, idle: float, drain=drain, sigma=sigma) -> SwitchValue:
            return switch_value(w_b, p_a, w_a, drain, p_b, rest - w_b, sigma, idle)

        v, rids = best_batch(calls, pool - agents[b].tokens, value)
        if v is not None and (best is None or v.total > best.value.total):
            best = PhaseSwitch(b, rids, v)
    return best
