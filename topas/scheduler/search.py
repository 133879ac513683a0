"""TOPAS search over post-decision states (docs/topas.md).

A candidate state is a resident prefix set R' plus the requests admitted under it.
`greedy_pack` fills R' with admissions by largest age-weighted conditional progress
until the KV budget is spent, the gain is zero, or K actions are taken; the
budget constraint  sum_{a in R'} l_a + sum_{r in Q'} d_r <= B  holds for every plan.
`search` enumerates every subset of the free agents when there are at most M of them,
else starts from the forced set and applies greedy single and pair additions with
repair moves (drop, swap) while the score improves: O(|A|^2) evaluations per round.

No waiting call depends on R' alone to be scored: a task with a call waiting well beyond
the expected wait W (`Problem.overdue`) whose agents are all outside R' still offers its
first call, by its own gain; admitting it brings the agent's prefix into R' (its tokens
join the budget, its move-in is charged), and if it does not fit it is listed as blocked
(so it keeps its place by gain, and the preemption repair may make room for it).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from topas.scheduler import score as S
from topas.scheduler.batch import BatchPricing
from topas.scheduler.ordering import task_value
from topas.scheduler.repair import Candidates, RunningOption, preempt_repair

Chain = Sequence[tuple[str, float]]  # [(rid, age-weighted marginal gain)] of one task, in admission order


class AgentOption(NamedTuple):  # a tuple: built for every agent at every decision
    name: str
    tokens: int  # l_a
    forced: bool  # a kept running request uses it: it stays resident
    on_gpu: bool
    move_in_s: float  # 0 on GPU; host load; or recompute (prefill) when on neither tier
    reuse_n: int  # one-hop downstream stages about to become ready (V_reuse)
    reload_s: float  # seconds to bring the prefix back later (V_reuse unit)


@dataclass(frozen=True)
class Weights:
    beta: float = 1.0
    move: bool = True
    reuse: bool = True


@dataclass
class Problem:
    budget: int  # B
    base_tokens: int  # KV of the running requests that are kept
    agents: Mapping[str, AgentOption]
    request_agent: Mapping[str, str]
    request_task: Mapping[str, int]
    request_tokens: Mapping[str, int]  # d_r of each waiting request
    task_agents: Mapping[int, frozenset[str]]  # agents of each task's waiting requests
    chain: Callable[[int, frozenset[str]], Chain]  # the task's admission chain for eligible agents
    swap_s_per_token: float
    max_actions: int  # K
    weights: Weights = field(default_factory=Weights)
    # preemption candidates, computed on demand: any sequence (sorted by order_key here), or `Candidates`
    running: Callable[[], Sequence[RunningOption]] | None = None
    overdue: frozenset[int] = frozenset()  # tasks with a call waiting well beyond W: scored outside R' too
    batch: BatchPricing | None = None  # J_batch on (None: off)
    pop_by_task_value: bool = False  # a task's next call is popped by its remaining chain's value (see _key)
    service_s: Mapping[str, float] = field(default_factory=dict)  # expected service of each waiting request
    _victims: Sequence[RunningOption] | None = field(default=None, init=False, repr=False)
    _locked_demand: list[tuple[float, str]] | None = field(default=None, init=False, repr=False)
    # per decision: tasks grouped by their agents, each group's first calls per R' pattern (_heads), and
    # the blocked calls whose repair failed, rid -> (gain, smallest memory shortfall seen)
    _groups: dict[frozenset[str], list[int]] | None = field(default=None, init=False, repr=False)
    _group_heads: dict[tuple, list] = field(default_factory=dict, init=False, repr=False)
    _repair_fails: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)
    _agent_terms: tuple | None = field(default=None, init=False, repr=False)  # see _score
    _min_tokens: int | None = field(default=None, init=False, repr=False)

    def min_tokens(self) -> int:
        """The smallest d_r of a scored call: a state with less room left admits nothing more."""
        if self._min_tokens is None:
            self._min_tokens = min(self.request_tokens.values(), default=0)
        return self._min_tokens

    def batch_locked(self) -> frozenset[str]:
        return frozenset(a for a, o in self.agents.items() if o.forced)

    def locked_demand(self) -> list[tuple[float, str]]:
        """(gain, rid) of every scored waiting call, largest gain first: what an opened prefix's room could serve."""
        if self._locked_demand is None:
            items = [(g, rid) for t, ags in self.task_agents.items() if ags for rid, g in self.chain(t, ags)]
            self._locked_demand = sorted(items, key=lambda x: -x[0])
        return self._locked_demand

    def victims(self) -> Sequence[RunningOption]:
        """Preemption candidates, cheapest per freed token first (computed once per decision)."""
        if self._victims is None:
            opts = self.running() if self.running else ()
            self._victims = opts if isinstance(opts, Candidates) else sorted(opts, key=lambda r: r.order_key)
        return self._victims


@dataclass
class Plan:
    resident: frozenset[str]
    admit: list[str]
    gains: dict[str, float]
    score: float
    memory: int
    blocked: list[tuple[float, str]] = field(default_factory=list)  # (gain, rid) refused for lack of memory
    preempt: list[str] = field(default_factory=list)


def _heads(p: Problem, resident: frozenset[str]) -> list[tuple[float, int, int, Chain]]:
    """Heap entries (-gain, task, index in chain, chain) of the first call of each task under R': of its
    chain for its agents in R', or, for an overdue task with none in R', of its full chain (index -1).
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
                    built[key].append((-_key(p, ch, 0), t, 0, ch))
            elif t in p.overdue:  # no agent of this task is in R': its first call still competes by its own gain
                ch = p.chain(t, ags)
                if ch:
                    built[key].append((-_key(p, ch, 0), t, -1, ch))
        cache.update(built)
    heap: list[tuple[float, int, int, Chain]] = []
    for key in keys:
        heap += cache[key]
    return heap


def _key(p: Problem, ch: Chain, i: int) -> float:
    """What a task's next call (index i of its chain) is popped by: its own marginal gain, or, with
    `pop_by_task_value`, the value of the rest of its chain (`ordering.task_value`). A fan-out's first
    branch gains little until its sibling runs too, so by its own gain it trails every new task's entry
    call; by the chain's value the pair competes by what admitting the task's ready calls is worth."""
    if not p.pop_by_task_value:
        return ch[i][1]
    return task_value(ch[i:] if i else ch)


def greedy_pack(p: Problem, resident: frozenset[str], repair: bool = True) -> Plan:
    """Fill R' with admissions by gain; `repair`: then the preemption repair of blocked calls."""
    agents, budget, tokens = p.agents, p.budget, p.request_tokens
    mem = p.base_tokens + sum([agents[a].tokens for a in resident])
    heap = _heads(p, resident)  # keys (-gain, task, index) are distinct: pops come in one order
    heapq.heapify(heap)
    outside_agents: set[str] = set()
    admit: list[str] = []
    gains: dict[str, float] = {}
    blocked: list[tuple[float, str]] = []
    max_admit = p.max_actions
    pop, push = heapq.heappop, heapq.heappush
    min_d = p.min_tokens()
    while heap and len(admit) < max_admit:
        if mem + min_d > budget:  # nothing left fits: the rest are blocked (their chains dropped), in pop order
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
            if mem + d > budget:
                blocked.append((g, rid))
                continue
            mem += d
            admit.append(rid)
            gains[rid] = g
            outside_agents.add(a)
            continue
        rid, g = ch[i]
        d = tokens[rid]
        if mem + d > budget:
            blocked.append((g, rid))
            continue  # later items of this chain are conditional on this one: drop the chain
        mem += d
        admit.append(rid)
        gains[rid] = g
        if i + 1 < len(ch):
            push(heap, (-_key(p, ch, i + 1), t, i + 1, ch))
    if outside_agents:
        resident = resident | outside_agents  # an admitted overdue call brings its prefix into R'
    plan = Plan(resident, admit, gains, _score(p, resident, admit, gains, mem), mem, blocked)
    return preempt_repair(p, plan) if repair and p.running is not None and blocked else plan


def _score(p: Problem, resident: frozenset[str], admit: list[str], gains: Mapping[str, float], mem: int) -> float:
    """J_admit - J_move + V_reuse of a state (R', Q'), seconds; `preempt_repair` adds - J_redo - J_revoke."""
    w, agents = p.weights, p.agents
    if p._agent_terms is None:  # once per decision: (agent, l_a) of the prefixes on GPU, (n_a, reload) per agent
        p._agent_terms = ([(a, o.tokens) for a, o in agents.items() if o.on_gpu],
                          {a: (o.reuse_n, o.reload_s) for a, o in agents.items()})
    on_gpu, reuse = p._agent_terms
    in_order = sorted(resident)  # float sums in a fixed order: a set's order follows the string hash seed
    total = S.j_admit_weighted(gains.values())  # gains are already age-weighted
    if w.move:
        tasks_of: dict[str, set[int]] = {}  # agent -> tasks of its admitted calls
        for rid in admit:
            tasks_of.setdefault(p.request_agent[rid], set()).add(p.request_task[rid])
        moves = [(agents[a].move_in_s, len(tasks_of.get(a, ()))) for a in in_order if not agents[a].on_gpu]
        # prefixes left out of R' only move when the batch needs their memory
        out_tokens = sum([n for a, n in on_gpu if a not in resident])
        overflow = min(out_tokens, max(mem + out_tokens - p.budget, 0))
        moves.append((overflow * p.swap_s_per_token, 1))
        total -= S.j_move(moves)
    if w.reuse:
        total += S.v_reuse([reuse[a] for a in in_order], w.beta)
    if p.batch is not None:
        total -= _j_batch(p, admit, mem)
    return total


def _j_batch(p: Problem, admit: list[str], mem: int) -> float:
    """J_batch of a state: the calls of the agents locked by running calls that are pending, or become
    ready while the prefixes the state opens stay locked, and that the KV it leaves free cannot hold."""
    locked = p.batch_locked()
    hold_s = p.batch.call_s
    for rid in admit:
        if p.request_agent[rid] not in locked:
            hold_s = max(hold_s, p.service_s.get(rid, 0.0))
    taken = set(admit)
    gains = [g for g, rid in p.locked_demand() if rid not in taken and p.request_agent[rid] in locked]
    expected = sum(p.batch.ready_rate.get(a, 0.0) for a in sorted(locked)) * hold_s
    gains += [p.batch.expected_gain] * int(round(expected))
    return S.j_batch(gains, p.batch.call_tokens, p.budget - mem)


score_state = _score  # the score of a state, in one place (tests call it directly)


def feasible(p: Problem, resident: frozenset[str]) -> bool:
    return p.base_tokens + sum(p.agents[a].tokens for a in resident) <= p.budget


def _best(p: Problem, sets: list[frozenset[str]], memo: dict[frozenset[str], Plan]) -> Plan | None:
    best = None
    for r in sets:
        if r not in memo:
            if not feasible(p, r):
                continue
            memo[r] = greedy_pack(p, r, repair=False)
        plan = memo[r]
        if best is None or plan.score > best.score + 1e-12:
            best = plan
    return best


def search(p: Problem, max_enumerate: int) -> Plan:
    """The best state over the resident sets tried. The preemption repair (which only adds to a
    state's score) runs on the best state and on those whose blocked gains could still beat it."""
    memo: dict[frozenset[str], Plan] = {}
    best = _search(p, max_enumerate, memo)
    if p.running is None:
        return best
    for plan in sorted(memo.values(), key=lambda pl: -pl.score):
        if plan is best or (plan.blocked and plan.score + sum(g for g, _ in plan.blocked) > best.score + 1e-12):
            if plan.blocked:
                preempt_repair(p, plan)
            if plan.score > best.score + 1e-12:
                best = plan
    return best


def _search(p: Problem, max_enumerate: int, memo: dict[frozenset[str], Plan]) -> Plan:
    forced = frozenset(a for a, o in p.agents.items() if o.forced)
    free = sorted(a for a in p.agents if a not in forced)
    start = greedy_pack(p, forced, repair=False)  # always evaluated, even if the forced prefixes alone overflow
    memo[forced] = start
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
