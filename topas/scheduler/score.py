"""TOPAS's score of a post-decision state, every term in seconds (docs/topas.md, "The score"):

    Score = J_admit - J_move - J_hold - J_redo - J_revoke - margin + V_reuse

J_admit: the age-weighted path drops of the admitted calls plus the value of their cached context (`context_value`).
The terms are pure functions; `score_state` is the one place a state's score is computed, with every term
in a `ScoreBreakdown` (problem.py; aging included: J_admit's age-weighted sum beside the sum of the plain path drops).
The search, the preemption repair and the tests all call it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from topas.scheduler.problem import Problem, RunningOption, ScoreBreakdown

_MIN_WORK_S = 1e-3  # a task whose last call is about to finish: its weight stays finite


def aging(now: float, arrival: float, rho: float, h_age: float) -> float:
    """g_i(t) = 1 + rho * log(1 + (t - tau_i) / H_age); multiplies the admission term only."""
    return 1.0 + rho * math.log1p(max(now - arrival, 0.0) / h_age)


def remaining_work(remaining_s: float, reference_s: float) -> float:
    """A task's weight for finishing soon: the reference remaining work over the task's own (Smith's rule, the c-mu
    index with a holding cost of one per task-second). Serving a call of a task with less work left brings its
    completion, and with it the end of its holding cost, closer per second of service; 1 for a task of reference
    size. `reference_s`: the scored tasks' mean, so the weights average about 1 and J_admit stays in seconds."""
    return reference_s / max(remaining_s, _MIN_WORK_S)


def j_hold(held_tokens: int, hold_s: float, displaced: Iterable[tuple[int, float, float]]) -> float:
    """The opening cost of an agent no running call holds: its prefix takes `held_tokens` of the pool for about
    `hold_s` (its admitted calls' longest service), memory the best waiting calls of other agents would use.
    `displaced`: those calls (d_r, age-weighted gain, service s), best gain per token first; the cost is the
    gain they would earn per service period, taken for hold_s. 0 when no other call waits."""
    left, gain, service, share = held_tokens, 0.0, 0.0, 0.0
    for tokens, g, s in displaced:
        if left <= 0:
            break
        f = min(tokens, left) / tokens
        gain, service, share, left = gain + g * f, service + s * f, share + f, left - tokens
    if share <= 0 or service <= 0:
        return 0.0
    return gain * hold_s / (service / share)


def context_value(reload_s: float, weight: float) -> float:
    """What admitting a waiting call now saves when part of its prompt beyond the agent prefix (its conversation
    history, upstream outputs) is cached: left waiting, that context may be evicted and reloaded later (`reload_s`:
    recomputed without a host tier, transferred back with one). The reload occupies the engine, so it delays every
    task the decision reads: `weight` is the sum of their weights (aging x remaining work), the unit of J_admit."""
    return reload_s * weight


def j_admit(gains: Iterable[tuple[float, float]]) -> float:
    """Sum over admitted requests of aging x Delta_task: items are (delta_seconds, aging)."""
    return sum(d * g for d, g in gains)


def j_move(moves: Iterable[tuple[float, int]]) -> float:
    """Prefix movement: items are (seconds to move one prefix in or out, tasks it affects).
    The transfer delays each affected task once (docs/topas.md: charged once per affected task)."""
    return sum(t * max(n, 1) for t, n in moves)


def j_redo(generated_tokens: Iterable[int], t_decode: float) -> float:
    """Re-decoding the tokens preempted requests had already generated."""
    return t_decode * sum(generated_tokens)


def j_revoke(credits: Iterable[float]) -> float:
    """Admission credit taken back from preempted requests (no progress is earned twice)."""
    return sum(credits)


def v_reuse(resident: Iterable[tuple[int, float]], beta: float) -> float:
    """beta x sum over kept prefixes of (one-hop downstream stages about to become ready) x reload seconds."""
    return beta * sum(n * t for n, t in resident)


def score_state(p: Problem, resident: frozenset[str], admit: Sequence[str], gains: Mapping[str, float], mem: int,
                preempt: Sequence[RunningOption] = ()) -> ScoreBreakdown:
    """The score of the state (R' = resident, Q' = the kept running calls + `admit` - `preempt`), holding
    `mem` tokens. J_move: every prefix in R' not on the GPU moves in, charged once per admitted task that uses
    it; prefixes left out of R' move out only for the tokens the batch needs beyond the pool. J_redo and
    J_revoke: of the preempted calls, with the preemption margin on top."""
    agents = p.agents
    on_gpu, reuse = p.agent_terms()
    in_order = sorted(resident)  # float sums in a fixed order: a set's order follows the string hash seed
    ctx, weight, agent_of, task_of = p.context_s.get, p.task_aging.get, p.request_agent, p.request_task
    work = p.task_remaining_work.get
    tasks_of: dict[str, set[int]] = {}  # agent -> tasks of its admitted calls
    # per admitted call, in admit order (one pass: the sums below read these lists): its context value, its
    # weighted path drop (gains are weighted path drops + context), that drop with aging only, and unweighted
    contexts, path, aged, plain = [], [], [], []
    for rid in admit:
        t, c = task_of[rid], ctx(rid, 0.0)
        tasks_of.setdefault(agent_of[rid], set()).add(t)
        g = gains[rid] - c
        f = work(t, 1.0)
        contexts.append(c)
        path.append(g)
        aged.append(g / f)
        plain.append(g / weight(t, 1.0))
    moves = [(agents[a].move_in_s, len(tasks_of.get(a, ()))) for a in in_order if not agents[a].on_gpu]
    out_tokens = sum([n for a, n in on_gpu if a not in resident])
    overflow = min(out_tokens, max(mem + out_tokens - p.kv_pool_tokens, 0))
    moves.append((overflow * p.swap_s_per_token, 1))
    hold = opening_cost(p, admit) if p.opening is not None else 0.0
    redo = revoke = 0.0
    for r in preempt:
        redo += r.redo_s
        revoke += r.revoke()
    margin = sum([r.margin * (r.redo_s + r.revoke()) for r in preempt]) if preempt else 0  # 0: sum([])
    context, weighted, by_age = sum(contexts), sum(path), sum(aged)
    return ScoreBreakdown(
        j_admit=weighted + context, aging=by_age - sum(plain), remaining_work=weighted - by_age, context=context, j_hold=hold,
        j_move=j_move(moves),
        v_reuse=v_reuse([reuse[a] for a in in_order], p.beta) if p.beta else 0.0,
        j_redo=redo, j_revoke=revoke, margin=margin,
    )


def opening_cost(p: Problem, admit: Sequence[str]) -> float:
    """J_hold of a state: `j_hold` of every agent with admitted calls that no running call forces resident,
    the memory it takes being what the other agents' waiting calls (not admitted here) would use."""
    ra, rt = p.request_agent, p.request_tokens
    by_agent: dict[str, list[str]] = {}
    for rid in admit:
        by_agent.setdefault(ra[rid], []).append(rid)
    opened = [a for a in sorted(by_agent) if not p.agents[a].forced]
    if not opened:
        return 0.0
    service, heads = p.opening_inputs()
    admitted, waiting = set(admit), p.waiting_tokens()
    total_waiting = sum(waiting.values())
    admitted_tokens: dict[str, int] = {}
    for rid in admit:
        admitted_tokens[ra[rid]] = admitted_tokens.get(ra[rid], 0) + rt[rid]
    admitted_total = sum(admitted_tokens.values())
    total = 0.0
    for a in opened:
        others = (total_waiting - waiting.get(a, 0)) - (admitted_total - admitted_tokens[a])
        held = min(p.agents[a].tokens, others)
        if held <= 0:
            continue
        displaced = ((h.tokens, h.gain, h.service_s) for h in heads  # read only until `held` is filled
                     if h.agent != a and h.rid not in admitted and h.tokens > 0)
        total += j_hold(held, max(service.get(rid, 0.0) for rid in by_agent[a]), displaced)
    return total
