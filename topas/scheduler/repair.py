"""TOPAS's preemption repair (docs/topas.md): a blocked call of a plan is admitted by preempting
running calls when its gain exceeds their J_redo + J_revoke. The candidates and their costs are built
by the policy (`preemption.py`); this module only tries them, within the K actions of a decision."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topas.scheduler.search import Plan, Problem


@dataclass(slots=True)
class RunningOption:
    """A preemption candidate. Its cost (J_redo + J_revoke) may be given or computed on first use."""

    rid: str
    task_id: int
    tokens: int  # KV freed by preempting it
    cost_s: float | Callable[[], float]
    order_key: float = 0.0  # cheap proxy the candidates are tried in (lower first)
    lower_s: float = 0.0  # a lower bound of the cost, known without computing it

    def cost(self) -> float:
        if callable(self.cost_s):
            self.cost_s = self.cost_s()
        return self.cost_s


class Candidates(Sequence):
    """Preemption candidates in trial order (`order_key`, ties in given order), each built on first
    access: a repair usually reads the first one or two of them only."""

    def __init__(self, keys: Sequence[float], build: Callable[[int], RunningOption]) -> None:
        self._order = sorted(range(len(keys)), key=keys.__getitem__)  # stable, as sorting the options
        self._build = build
        self._made: dict[int, RunningOption] = {}

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, i: int) -> RunningOption:
        opt = self._made.get(i)
        if opt is None:
            opt = self._made[i] = self._build(self._order[i])
        return opt


def _repairs_all_fail(p: Problem, plan: Plan, pool: Sequence[RunningOption]) -> bool:
    """True when no blocked call of this fresh plan can be repaired: a call that needs memory takes at least its
    first eligible candidate (the first not of its own task), and fails there when that candidate alone already
    costs its gain."""
    if not pool:
        return all(plan.memory + _repair_tokens(p, plan, rid) > p.budget for _, rid in plan.blocked)
    first = pool[0]
    other = None  # the first candidate for a call of first's own task
    room, task_of = p.budget - plan.memory, p.request_task
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


def _repair_tokens(p: Problem, plan: Plan, rid: str) -> int:
    a = p.request_agent[rid]
    return p.request_tokens[rid] + (0 if a in plan.resident else p.agents[a].tokens)


def preempt_repair(p: Problem, plan: Plan) -> Plan:
    """Repair move: admit a blocked high-gain request by preempting running ones whose
    J_redo + J_revoke is below its gain (tried in the candidates' proxy order), within K actions.
    A candidate's cost is computed on its first use only (it may read the task-state cache)."""
    pool = p.victims()
    if _repairs_all_fail(p, plan, pool):
        return plan
    taken: set[str] = set()
    mem = plan.memory
    max_actions, budget, fails = p.max_actions, p.budget, p._repair_fails
    request_agent = p.request_agent
    actions = len(plan.admit) + len(plan.preempt)
    for g, rid in sorted(plan.blocked, reverse=True):
        if actions >= max_actions:
            break
        a = request_agent[rid]
        d = _repair_tokens(p, plan, rid)
        need = mem + d - budget
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
            c = r.cost_s
            cost += r.cost() if callable(c) else c
            if cost >= g:
                break
        if freed < need or cost >= g:
            if not taken:  # not skipped above: no smaller shortfall has failed for this gain
                fails[rid] = (g, need)
            continue
        if actions + len(chosen) + 1 > max_actions:
            continue
        taken.update(r.rid for r in chosen)
        plan.preempt.extend(r.rid for r in chosen)
        plan.admit.append(rid)
        plan.gains[rid] = g
        plan.score += g - cost
        mem += d - freed
        plan.resident = plan.resident | {a}
        actions += len(chosen) + 1
    plan.memory = mem
    return plan
