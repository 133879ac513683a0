"""GREEDYPACK: fill a resident set R' with admissions (docs/topas.md, "The search").

Calls are taken task by task from their admission chains, the task whose remaining chain is worth most
first (a fan-out's branches compete by what admitting all of them is worth, at any width), until the
pool (`kv_pool_tokens`, B) is full, the next value is zero, or K actions are taken; the pool constraint
sum_{a in R'} l_a + sum_{r in Q'} d_r <= B holds for every plan. A call that does not fit is blocked and
the rest of its task's chain is dropped (later gains are conditional on it).

No waiting call depends on R' alone to be scored: a task with a call waiting well beyond the expected wait
W (`Problem.overdue`) whose agents are all outside R' still offers its first call, by its own gain;
admitting it brings the agent's prefix into R' (its tokens join the pool's, its move-in is charged).
"""

from __future__ import annotations

import heapq

from topas.scheduler.ordering import task_value
from topas.scheduler.problem import Chain, Plan, Problem
from topas.scheduler.score import score_state


def _heads(p: Problem, resident: frozenset[str], overdue: bool) -> list[tuple[float, int, int, Chain]]:
    """Heap entries (-value, task, index in chain, chain) of the first call of each task under R': of its
    chain for its agents in R', or, with `overdue`, for an overdue task with none in R', of its full chain
    (index -1).
    Tasks with the same agents share R' membership, so each group's entries are built once per decision
    and eligible set; chains not read yet are read in task order, as a task-by-task walk reads them."""
    if p._groups is None:
        p._groups = {}
        for t, ags in p.task_agents.items():
            p._groups.setdefault(ags, []).append(t)
    cache = p._group_heads
    keys, missing = [], {}
    for ags in p._groups:
        if ags <= resident:
            key = (ags, ags)
        else:
            elig = ags & resident
            key = (ags, elig if elig else None)
            if key[1] is None and not overdue:
                continue
        keys.append(key)
        if key not in cache:
            missing[ags] = key
    if missing:
        built: dict[tuple, list] = {key: [] for key in missing.values()}
        for t, ags in p.task_agents.items():
            key = missing.get(ags)
            if key is None:
                continue
            if key[1] is not None:
                ch = p.chain(t, key[1])
                if ch:
                    built[key].append((-task_value(ch), t, 0, ch))
            elif t in p.overdue:  # no agent of this task is in R': its first call still competes by its own gain
                ch = p.chain(t, ags)
                if ch:
                    built[key].append((-task_value(ch), t, -1, ch))
        cache.update(built)
    heap: list[tuple[float, int, int, Chain]] = []
    for key in keys:
        heap += cache[key]
    return heap


def greedy_pack(p: Problem, resident: frozenset[str], overdue: bool = True) -> Plan:
    """The state R' = `resident` filled with admissions by value (no preemption: repair.py adds those).
    `overdue` False: no overdue task's call outside R' competes (a held phase, search.py)."""
    agents, kv_pool_tokens, tokens = p.agents, p.kv_pool_tokens, p.request_tokens
    mem = p.base_tokens + sum([agents[a].tokens for a in resident])
    heap = _heads(p, resident, overdue)  # keys (-value, task, index) are distinct: pops come in one order
    outside_agents: set[str] = set()
    admit: list[str] = []
    gains: dict[str, float] = {}
    blocked: list[tuple[float, str]] = []
    max_admit = p.max_actions
    pop, push = heapq.heappop, heapq.heappush
    min_d = p.min_tokens()
    if mem + min_d <= kv_pool_tokens:  # else nothing fits: the heap is only read in order below
        heapq.heapify(heap)
    while heap and len(admit) < max_admit:
        if mem + min_d > kv_pool_tokens:  # nothing left fits: the rest are blocked (their chains dropped), in pop order
            for neg, _, i, ch in sorted(heap):
                if -neg <= 0:
                    break
                rid, g = ch[i] if i >= 0 else ch[0]
                blocked.append((g, rid))
            break
        neg, t, i, ch = pop(heap)
        if -neg <= 0:
            break
        if i < 0:  # an overdue task's first call, outside R'
            rid, g = ch[0]
            a = p.request_agent[rid]
            d = tokens[rid] + (0 if a in outside_agents else agents[a].tokens)  # an earlier one may have brought it in
            if mem + d > kv_pool_tokens:
                blocked.append((g, rid))
                continue
            mem += d
            admit.append(rid)
            gains[rid] = g
            outside_agents.add(a)
            continue
        rid, g = ch[i]
        d = tokens[rid]
        if mem + d > kv_pool_tokens:
            blocked.append((g, rid))
            continue  # later items of this chain are conditional on this one: drop the chain
        mem += d
        admit.append(rid)
        gains[rid] = g
        if i + 1 < len(ch):
            push(heap, (-task_value(ch[i + 1:]), t, i + 1, ch))
    if outside_agents:
        resident = resident | outside_agents  # an admitted overdue call brings its prefix into R'
    return Plan(resident, admit, gains, mem, score_state(p, resident, admit, gains, mem), blocked)
