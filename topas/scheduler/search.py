"""TOPAS's search over candidate post-decision states (docs/topas.md, "The search").

A candidate state is a resident prefix set R' filled by GREEDYPACK (pack.py). With at most M free agents
(not forced resident by running calls) every subset is enumerated; otherwise a local search starts from
the forced set and applies single additions, drops and swaps, then pair additions when stuck, while the
score improves: O(|A|^2) evaluations per round. The preemption repair (repair.py) runs on the best state
and on every state whose blocked gains could still beat it; every state is scored by `score.score_state`.

A held phase narrows the candidates: while a call of a running agent whose cached context (its conversation's
earlier turns, upstream outputs) is on the device waits for memory, the only candidate is R' = the running
agents, without overdue calls outside it (docs/topas.md, "Held phases").
"""

from __future__ import annotations

import itertools

from topas.scheduler.pack import greedy_pack
from topas.scheduler.problem import Plan, Problem
from topas.scheduler.repair import preempt_repair


def feasible(p: Problem, resident: frozenset[str]) -> bool:
    return p.base_tokens + sum(p.agents[a].tokens for a in resident) <= p.kv_pool_tokens


def holds_phase(p: Problem, forced: frozenset[str], start: Plan) -> bool:
    """A running agent's call with its context cached on the device is blocked in the state of the running agents
    alone. Memory given to another agent's prefix and calls would delay it further and could evict its context."""
    return any(p.request_agent[rid] in forced and rid in p.hot for _, rid in start.blocked)


def _best(p: Problem, sets: list[frozenset[str]], memo: dict[frozenset[str], Plan]) -> Plan | None:
    best = None
    for r in sets:
        if r not in memo:
            if not feasible(p, r):
                continue
            memo[r] = greedy_pack(p, r)
        plan = memo[r]
        if best is None or plan.score > best.score + 1e-12:
            best = plan
    return best


def search(p: Problem, max_enumerate: int) -> Plan:
    """The best state over the resident sets tried, repaired where preemption could pay."""
    memo: dict[frozenset[str], Plan] = {}
    best = _search(p, max_enumerate, memo)
    if p.running is None:
        return best
    for plan in sorted(memo.values(), key=lambda pl: -pl.score):
        if plan is best or (plan.blocked and plan.score + sum(g for g, _ in plan.blocked) > best.score + 1e-12):
            preempt_repair(p, plan)
            if plan.score > best.score + 1e-12:
                best = plan
    return best


def _search(p: Problem, max_enumerate: int, memo: dict[frozenset[str], Plan]) -> Plan:
    forced = p.forced()
    free = sorted(a for a in p.agents if a not in forced)
    start = greedy_pack(p, forced)  # always evaluated, even if the forced prefixes alone overflow
    memo[forced] = start
    if holds_phase(p, forced, start):
        if p.overdue:
            start = memo[forced] = greedy_pack(p, forced, overdue=False)
        return start
    if len(free) <= max_enumerate:
        subsets = [forced | frozenset(c) for k in range(1, len(free) + 1) for c in itertools.combinations(free, k)]
        best = _best(p, subsets, memo)
        return best if best is not None and best.score > start.score + 1e-12 else start
    cur = start
    while True:
        inside = sorted(cur.resident - forced)
        outside = [a for a in free if a not in cur.resident]
        moves = [cur.resident | {a} for a in outside]
        moves += [cur.resident - {a} for a in inside]
        moves += [(cur.resident - {a}) | {b} for a in inside for b in outside]
        best = _best(p, moves, memo)
        if best is None or best.score <= cur.score + 1e-12:
            pairs = [cur.resident | {a, b} for a, b in itertools.combinations(outside, 2)]
            best = _best(p, pairs, memo)
            if best is None or best.score <= cur.score + 1e-12:
                return cur
        cur = best
