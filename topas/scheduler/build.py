"""The second step of TOPAS's pipeline: one decision's search `Problem` from the view, the estimates and the
task inputs (docs/topas.md, "State and decision").

- which waiting tasks are scored (`scored_tasks`: under a long queue, the oldest whose calls could fill the
  pool; later ones could not be admitted this decision and wait for the fill);
- per agent of the active pool (running, waiting, or one hop downstream of a running stage) its
  `AgentOption`: prefix length, whether running calls force it resident, its move-in, its reuse count;
- the tasks with an overdue call (scored outside R' too);
- each task's remaining-work factor and the opening cost's inputs (`remaining_work_factors`, `opening_inputs`);
- each scored call's cached context value (`context_values`);
- the preemption candidates with their J_redo and J_revoke (`preemption_candidates`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from topas.policy import RequestInfo, Residency, SchedulerView
from topas.scheduler import score as S
from topas.scheduler.estimates import DecisionEstimates, Estimator
from topas.scheduler.params import TopasParams
from topas.scheduler.problem import AgentOption, Candidates, Head, Problem, RunningOption
from topas.scheduler.tasks import TaskBook

MIN_SCORED = 8  # tasks always scored per decision (scored_tasks)


def by_arrival(view: SchedulerView, tids: Iterable[int], arrival_key: dict[int, tuple[float, int]]) -> list[int]:
    """`tids` oldest first (arrival, then id). `arrival_key`: task -> (arrival, task), kept by the caller across
    decisions (a task's arrival never changes), so each task's key is built once."""
    if len(arrival_key) > 100_000:
        arrival_key.clear()
    for t in tids:
        if t not in arrival_key:
            arrival_key[t] = (view.tasks[t].arrival, t)
    return sorted(tids, key=arrival_key.__getitem__)


def scored_tasks(view: SchedulerView, waiting_by_task: dict[int, list[RequestInfo]], kv: Mapping[str, int],
                 arrival_key: dict[int, tuple[float, int]]) -> set[int]:
    """Tasks whose waiting requests are scored this decision. Under a long queue, only the oldest tasks (the
    largest aging weights) whose requests could fill the KV pool (at least MIN_SCORED) are scored; admitting
    any later one is impossible this decision, so they wait for the work-conserving fill. Keeps a decision's
    cost bounded by the pool, not the queue. `kv`: d_r by rid; `arrival_key`: as `by_arrival`'s."""
    if len(waiting_by_task) <= MIN_SCORED:
        return set(waiting_by_task)
    picked: set[int] = set()
    need = 0
    for tid in by_arrival(view, waiting_by_task, arrival_key):
        picked.add(tid)
        need += min([kv[r.rid] for r in waiting_by_task[tid]])
        if len(picked) >= MIN_SCORED and need > view.kv_pool_tokens:
            break
    return picked


def remaining_work_factors(remaining_s: Mapping[int, float], scored: Iterable[int]) -> dict[int, float]:
    """score.remaining_work of every task the decision reads (running or scored: a preemption's J_revoke weighs
    its victim's task as a new admission would), against the mean remaining work of the scored tasks."""
    own = [max(remaining_s[t], S._MIN_WORK_S) for t in scored]
    if not own:
        return {}
    reference = sum(own) / len(own)
    return {t: S.remaining_work(r, reference) for t, r in remaining_s.items()}


def context_values(view: SchedulerView, scored_waiting: Mapping[int, list[RequestInfo]], est: Estimator,
                   weights: Mapping[int, float]) -> dict[str, float]:
    """score.context_value of every scored call with a cached context beyond its agent prefix: its reload is a
    recompute without a host tier and a transfer with one, valued at the weights of every task the decision reads."""
    host = view.host_capacity_tokens > 0
    total = sum(weights.values())  # the same for every call: summed once
    out = {}
    for rs in scored_waiting.values():
        for r in rs:
            h = r.cached_tokens - r.prefix_tokens
            if h > 0:
                reload_s = est.swap_s(view, h) if host else view.costs.prefill_time(h, r.prefix_tokens)
                out[r.rid] = S.context_value(reload_s, total)
    return out


def opening_inputs(problem: Problem, scored_waiting: Mapping[int, list[RequestInfo]], e: DecisionEstimates,
                   est: Estimator) -> tuple[dict[str, float], list[Head]]:
    """For J_hold: the expected service of each scored call, and each scored task's first call (its chain over
    all its agents), best gain per token first."""
    service = {r.rid: est.stage_time(r.agent, r.stage, e.step_s)[0] for rs in scored_waiting.values() for r in rs}
    heads = []
    for t, ags in problem.task_agents.items():
        ch = problem.chain(t, ags) if ags else None
        if ch:
            rid, g = ch[0]
            heads.append(Head(rid, problem.request_agent[rid], problem.request_tokens[rid], g, service[rid]))
    heads.sort(key=lambda h: -h.gain / max(h.tokens, 1))
    return service, heads


def overdue_tasks(view: SchedulerView, scored: set[int], waiting_by_task, e: DecisionEstimates, est: Estimator,
                  factor: float) -> frozenset[int]:
    """Scored tasks with a call waiting longer than `factor` x max(W, its expected service)."""
    limit: dict[tuple[str, str], float] = {}  # per (agent, stage): the same for all its calls
    out = []
    for t in scored:
        for r in waiting_by_task[t]:
            key = (r.agent, r.stage)
            lim = limit.get(key)
            if lim is None:
                lim = limit[key] = factor * max(e.wait_s, est.stage_time(r.agent, r.stage, e.step_s)[0])
            if view.now - r.ready_time > lim:
                out.append(t)
                break
    return frozenset(out)


def build_problem(view: SchedulerView, e: DecisionEstimates, est: Estimator, p: TopasParams, scored_waiting: Mapping[int, list[RequestInfo]],
                  reuse_n: dict[str, int], chain, aging: Mapping[int, float], running=None, overdue=frozenset(),
                  context: Mapping[str, float] | None = None, remaining_work: Mapping[int, float] | None = None) -> Problem:
    """The search problem over the scored waiting calls (only these can be admitted by the plan)."""
    forced = {r.agent for r in view.running}
    pool = forced | {r.agent for r in view.waiting} | {a for a, n in reuse_n.items() if n > 0}
    agents = {}
    for a in sorted(pool):
        ps = view.prefixes.get(a)
        if ps is None:
            continue
        # the paper's J_move counts bytes moved (mu l_a / B_swap): a prefix on neither tier is charged the
        # same bytes; its recompute is part of the admitted request's own service, not an extra cost
        reload_s = est.swap_s(view, ps.tokens)
        on_gpu = ps.residency == Residency.GPU
        agents[a] = AgentOption(a, ps.tokens, a in forced, on_gpu, 0.0 if on_gpu else reload_s, reuse_n.get(a, 0), reload_s)
    request_agent, request_task, request_tokens, hot = {}, {}, {}, []
    for rs in scored_waiting.values():
        for r in rs:
            request_agent[r.rid], request_task[r.rid], request_tokens[r.rid] = r.agent, r.task_id, e.kv[r.rid]
            if r.cached_tokens > r.prefix_tokens:
                hot.append(r.rid)
    return Problem(
        kv_pool_tokens=view.kv_pool_tokens,
        base_tokens=sum([e.kv[r.rid] for r in view.running]),
        agents=agents,
        request_agent=request_agent,
        request_task=request_task,
        request_tokens=request_tokens,
        task_agents={t: frozenset([r.agent for r in rs if r.agent in agents]) for t, rs in scored_waiting.items()},
        chain=chain,
        swap_s_per_token=est.swap_s(view, 10_000) / 10_000,
        max_actions=p.K,
        beta=p.beta if p.use_reuse else 0.0,
        task_aging=aging,
        task_remaining_work=remaining_work or {},
        context_s=context or {},
        running=running,
        overdue=overdue,
        hot=frozenset(hot),
    )


def preemption_candidates(view: SchedulerView, e: DecisionEstimates, est: Estimator, tasks: TaskBook, p: TopasParams,
                          credit: Mapping[str, float], waiting_by_task, running_by_task,
                          remaining_work: Mapping[int, float] | None = None) -> Candidates:
    """Running calls as preemption candidates with J_redo (re-decoding their generated tokens) and J_revoke: the
    larger of the credit recorded at admission (rescaled to the current W, aging and remaining-work factor) and what the call's
    progress is worth now (its task's path grows by that much if it goes back to waiting), so a call admitted
    by the work-conserving fill is not free. Only the trial order (cost per freed token, the recorded credit
    standing in for J_revoke) is computed for all of them; an option is built when first tried."""
    running = view.running
    redos, kvs, credits, keys = [], [], [], []
    for r in running:
        redo = S.j_redo([r.generated_tokens], e.step_s)
        kv, c = e.kv[r.rid], credit.get(r.rid, 0.0)
        redos.append(redo)
        kvs.append(kv)
        credits.append(c)
        keys.append((redo + c) / max(kv, 1))

    def build(i: int) -> RunningOption:
        r, redo, c = running[i], redos[i], credits[i]
        age = S.aging(view.now, r.task_arrival, p.rho, p.h_age) if p.use_aging else 1.0
        if remaining_work:
            age *= remaining_work.get(r.task_id, 1.0)

        def revoke() -> float:
            gain = tasks.victim_gain(view, e, r, waiting_by_task, running_by_task)
            return S.j_revoke([max(c, gain / e.wait_s) * e.wait_s * age])

        # the cost with the recorded credit alone: never above the cost (rounding is monotone)
        lower = (redo + c * e.wait_s * age) * (1.0 + p.preempt_margin)
        return RunningOption(r.rid, r.task_id, kvs[i], redo, revoke, p.preempt_margin, order_key=keys[i], lower_s=lower)

    return Candidates(keys, build)
