"""The fourth step of TOPAS's pipeline: the admission list of the chosen state (docs/topas.md, "Admission list").

The plan's part (its admitted calls, its blocked calls, and the first calls of tasks whose small prefix is
outside R') is grouped by agent where the agent's prefix takes at least the room of a call's own KV, so calls
that share a prefix worth memory are admitted together (as Parrot's ctx_group; `prefix_groups`),
and the groups are ranked by the best task they serve, a task being worth its whole conditional progress
(`task_value`); when the prefixes locked by running calls bind the pool (`prefixes_bind_pool`), by the demand
they serve instead (`group_demand`: consolidation). The work-conserving fill follows: every other waiting
call by aging weight (oldest task first) and ready time, grouped by agent; an agent in R' gets no place
ahead of older tasks (docs/decisions/0022). The fill never reorders the plan's part. The plan's calls of running
agents whose context is cached go first (`cached_contexts_first`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from topas.policy import SchedulerView
from topas.scheduler.problem import Plan, Problem


def group_by_agent(rids: Sequence[str], agent_of: Mapping[str, Hashable],
                   group_value: Callable[[list[str]], Any] | None = None) -> list[str]:
    """Each agent's calls pulled together, in list order within the group. Groups keep the order of their
    first call, or, with `group_value`, are ranked by it (largest first; ties keep list order)."""
    by_agent: dict[Hashable, list[str]] = {}
    for rid in rids:
        by_agent.setdefault(agent_of[rid], []).append(rid)
    groups = list(by_agent.values())
    if group_value is not None:
        groups.sort(key=group_value, reverse=True)  # stable: ties keep list order
    return [rid for group in groups for rid in group]


def task_value(chain: Sequence[tuple[str, float]]) -> float:
    """A task's whole conditional progress: the age-weighted drop of its longest remaining path when all its
    ready calls are admitted (the sum of its admission chain's marginal gains). Ranking by it rather than by
    one call's marginal gain keeps a fan-out's first branch, whose own gain is small until its siblings run
    too, from trailing other tasks' single calls."""
    if len(chain) == 1:  # the common case; the sum below would add it to 0
        return 0.0 + chain[0][1]
    return sum([g for _, g in chain])


def group_demand(group: Sequence[str], value_of: Callable[[str], float]) -> tuple[float, int]:
    """What an agent group serves: the summed value of its calls' tasks, then its number of calls (ties).
    Ranking groups by it instead of by their best task is the consolidation order (`prefixes_bind_pool`)."""
    return sum([value_of(rid) for rid in group]), len(group)


def prefixes_bind_pool(locked_tokens: int, kv_pool_tokens: int, share: float) -> bool:
    """The batch is bound by prefixes: those locked by running calls take more than `share` of the pool."""
    return locked_tokens > share * kv_pool_tokens


def small_prefix_calls(p: Problem, resident: frozenset[str], listed: Mapping[str, float]) -> list[tuple[float, str]]:
    """(gain, rid) of the first call of each task none of whose agents is in R', when that call's prefix takes
    less room than the call's own KV. Leaving such an agent out of R' saves next to no memory, so its call is
    listed by its own gain like a blocked one instead of waiting behind the fill (docs/topas.md,
    "Small prefixes outside R'"). Calls already in `listed` keep their place."""
    out = []
    for t, ags in p.task_agents.items():
        if not ags or ags & resident:
            continue
        ch = p.chain(t, ags)
        if not ch:
            continue
        rid, g = ch[0]
        if g > 0 and rid not in listed and p.agents[p.request_agent[rid]].tokens < p.request_tokens[rid]:
            out.append((g, rid))
    return out


def prefix_groups(p: Problem) -> dict[str, tuple[str, str | None]]:
    """The group of each scored call in the admission list: its agent's, (agent, None), when the agent's prefix
    takes at least the room of the call's own KV, else its own, (agent, rid). Admitting calls together pays
    when they share a prefix worth memory; a prefix smaller than a call's KV saves next to nothing shared (the
    criterion of `small_prefix_calls`), and pulling its calls together would only override the value order
    (docs/decisions/0040)."""
    agents, tokens = p.agents, p.request_tokens
    return {rid: (a, None if agents[a].tokens >= tokens[rid] else rid) for rid, a in p.request_agent.items()}


def admission_list(view: SchedulerView, problem: Problem, plan: Plan, aging: Mapping[int, float],
                   consolidate_share: float) -> list[str]:
    """The decision's admission list for the chosen plan (see the module docstring)."""
    ranked = {rid: g for g, rid in plan.blocked}  # blocked calls keep their place by gain: the engine waits for them
    ranked.update(plan.gains)
    ranked.update((rid, g) for g, rid in small_prefix_calls(problem, plan.resident, ranked))
    plan_part = sorted(ranked, key=lambda rid: -ranked[rid])
    chosen = set(plan_part) | set(plan.preempt_rids)
    weight = aging.get
    fill = [r for r in view.waiting if r.rid not in chosen]
    fill.sort(key=lambda r: (-weight(r.task_id, 1.0), r.ready_time))
    values = {t: task_value(problem.chain(t, ags)) for t, ags in problem.task_agents.items() if ags}
    task_of = problem.request_task
    value_of = lambda rid: values.get(task_of[rid], 0.0)  # noqa: E731
    locked = sum([o.tokens for o in problem.agents.values() if o.forced])
    if prefixes_bind_pool(locked, problem.kv_pool_tokens, consolidate_share):
        rank = lambda group: group_demand(group, value_of)  # noqa: E731
    else:
        rank = lambda group: max(value_of(rid) for rid in group)  # noqa: E731
    listed = cached_contexts_first(group_by_agent(plan_part, prefix_groups(problem), rank), problem, plan.admit)
    return listed + group_by_agent([r.rid for r in fill], {r.rid: r.agent for r in fill})


def cached_contexts_first(listed: Sequence[str], problem: Problem, admit: Sequence[str]) -> list[str]:
    """The plan's admitted calls of running agents whose context beyond the agent prefix is cached on the device
    (`Problem.hot`) moved ahead of the rest, in list order. The plan admits them, but listed behind an opened agent's
    group the engine can stop at a misfit before reaching them, and their context is evicted while they wait
    (docs/decisions/0056)."""
    forced = {a for a, o in problem.agents.items() if o.forced}
    admitted = set(admit)
    first = [r for r in listed if r in problem.hot and r in admitted and problem.request_agent[r] in forced]
    if not first:
        return list(listed)
    moved = set(first)
    return first + [r for r in listed if r not in moved]
