"""The preemption repair (docs/topas.md, "J_redo and J_revoke"): a blocked call of a state is admitted by
preempting running calls of other tasks when its gain exceeds their J_redo + J_revoke with the margin, tried
cheapest per freed token first, within the K actions of a decision. The repaired state is scored again by
`score.score_state`, so it has the documented score (its prefix moves and preemptions included)."""

from __future__ import annotations

from collections.abc import Sequence

from topas.scheduler.problem import Plan, Problem, RunningOption
from topas.scheduler.score import score_state


def _repair_tokens(p: Problem, plan: Plan, rid: str) -> int:
    a = p.request_agent[rid]
    return p.request_tokens[rid] + (0 if a in plan.resident else p.agents[a].tokens)


def _repairs_all_fail(p: Problem, plan: Plan, pool: Sequence[RunningOption]) -> bool:
    """True when no blocked call of this fresh plan can be repaired: a call that needs memory takes at least its
    first eligible candidate (the first not of its own task), and fails there when that candidate alone already
    costs its gain."""
    if not pool:
        return all(plan.memory + _repair_tokens(p, plan, rid) > p.kv_pool_tokens for _, rid in plan.blocked)
    first = pool[0]
    other = None  # the first candidate for a call of first's own task
    room, task_of = p.kv_pool_tokens - plan.memory, p.request_task
    for g, rid in plan.blocked:
        if _repair_tokens(p, plan, rid) <= room:
            return False
        cand = first
        if task_of[rid] == first.task_id:
            if other is None:
                other = next((r for r in pool if r.task_id != first.task_id), False)
            if other is False:
                continue
            cand = other
        if g > cand.lower_s and g > cand.cost():  # the bound spares computing the cost
            return False
    return True


def preempt_repair(p: Problem, plan: Plan) -> Plan:
    """The plan with the blocked calls that preemption can pay for admitted (in place; unchanged if none).
    A candidate's J_revoke is computed on its first use only (it may read the task-state cache)."""
    pool = p.victims()
    if not plan.blocked or _repairs_all_fail(p, plan, pool):
        return plan
    taken: set[str] = set()
    mem = plan.memory
    max_actions, kv_pool_tokens, fails = p.max_actions, p.kv_pool_tokens, p._repair_fails
    actions = len(plan.admit) + len(plan.preempt)
    repaired = False
    for g, rid in sorted(plan.blocked, reverse=True):
        if actions >= max_actions:
            break
        d = _repair_tokens(p, plan, rid)
        need = mem + d - kv_pool_tokens
        if not taken:
            failed = fails.get(rid)
            if failed is not None and failed[0] == g and need >= failed[1]:
                # with no candidate taken, a larger shortfall walks the same candidates to the same
                # failure (and reads no cost not yet computed): skip it
                continue
        task = p.request_task[rid]
        chosen, freed, cost = [], 0, 0.0
        for r in pool:
            if freed >= need:
                break
            if r.rid in taken or r.task_id == task:
                continue
            chosen.append(r)
            freed += r.tokens
            cost += r.cost()
            if cost >= g:
                break
        if freed < need or cost >= g:
            if not taken:  # not skipped above: no smaller shortfall has failed for this gain
                fails[rid] = (g, need)
            continue
        if actions + len(chosen) + 1 > max_actions:
            continue
        taken.update(r.rid for r in chosen)
        plan.preempt.extend(chosen)
        plan.admit.append(rid)
        plan.gains[rid] = g
        mem += d - freed
        plan.resident = plan.resident | {p.request_agent[rid]}
        actions += len(chosen) + 1
        repaired = True
    plan.memory = mem
    if repaired:
        plan.breakdown = score_state(p, plan.resident, plan.admit, plan.gains, mem, plan.preempt)
    return plan
