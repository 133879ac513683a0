"""Which prefixes TOPAS pins: a pin never holds memory a call needs (unpin under pressure, as
SGLang's LRU would evict)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from topas.policy import SchedulerView
from topas.scheduler.problem import Problem


def safe_pins(view: SchedulerView, problem: Problem, admit: Sequence[int], blocked: Sequence[int], want: Sequence[str],
              expected_output: Mapping[int, float]) -> frozenset[str]:
    """The prefixes of `want` to pin. An agent with a running call is always pinned. An idle prefix is
    pinned only while the pool, less the running calls' KV and expected growth and the listed
    (`admit` + `blocked`) calls' KV and prefixes, still has room for it, and never when nothing
    runs (the list is admitted at once; a pin could only keep its head out). A running call that
    has outgrown its estimate (`expected_output`, by rid) is expected to generate as much again."""
    if not view.running:
        return frozenset()
    in_use = {r.agent for r in view.running}
    room = view.kv_pool_tokens
    for a in in_use:
        ps = view.prefixes.get(a)
        room -= ps.tokens if ps is not None else 0
    for r in view.running:
        y = expected_output[r.rid]
        growth = y - r.generated_tokens if r.generated_tokens < y else r.generated_tokens
        room -= r.dynamic_kv_tokens + int(growth)
    listed = list(admit) + list(blocked)
    room -= sum(problem.request_tokens[rid] for rid in listed)
    listed_agents = {problem.request_agent[rid] for rid in listed} - in_use
    room -= sum(problem.agents[a].tokens for a in listed_agents)
    pin = []
    for a in want:
        if a in in_use:
            pin.append(a)
            continue
        need = 0 if a in listed_agents else problem.agents[a].tokens
        if need <= room:
            pin.append(a)
            room -= need
    return frozenset(pin)
