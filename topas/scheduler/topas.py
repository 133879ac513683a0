"""TOPAS: workflow-aware prefix-state scheduling (the policy wiring; docs/topas.md).

At each decision the policy builds, from the engine-neutral view, a `Problem`:
- per task, the path model state (stage service estimates learned online, running
  residuals, waiting calls, the expected queueing delay W) whose admission chains give
  each waiting request's conditional progress Delta_task, weighted by task aging;
- per agent of the active pool (running, waiting, or one hop downstream of a running
  stage): prefix length, whether running requests force it resident, the cost of moving
  it in (host load, or prefill recompute when on neither tier), its one-hop reuse count;
- the KV budget B and the KV of the kept running requests.
`search` picks the resident set R' and admissions maximizing
J_admit - J_move - J_redo - J_revoke + V_reuse; a repair step may preempt running
requests for a blocked request worth more than their redo + revoked credit. A task whose
call has waited more than `overdue_factor` x W is scored even when none of its agents is in
any R' that fits (its first call brings its prefix along), so no call starves behind resident
agents. The decision admits the chosen requests first, then (work-conserving) every other
waiting request by gain, aging and ready time; the engine skips what does not fit. It pins the
prefixes R' holds for a purpose, but an idle prefix only in memory that no running or listed
call is expected to need (`pins.safe_pins`): a pin never holds out the call it was meant to serve.
With `use_batch` (off by default; docs/topas.md, "Consolidation") the score also charges J_batch, the
calls of the held agents that the prefixes a state opens crowd out, and agents the plan does not hold
are deferred rather than opened by the fill.

Estimates only: output lengths and service times come from `ServiceEstimator`
(finished calls, workload-independent prior); W is learned from observed queueing delays.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from topas.policy import Decision, Policy, RequestFinished, RequestInfo, RequestReady, Residency, SchedulerView, register_policy
from topas.policy.estimates import Prior, ServiceEstimator
from topas.scheduler import score as S
from topas.scheduler.batch import BatchPricing, ReadyRates
from topas.scheduler.digest import group_calls
from topas.scheduler.ordering import AdmissionOrder, group_by_agent, group_demand, prefix_bound, task_value
from topas.scheduler.pins import safe_pins
from topas.scheduler.preemption import DecisionContext, PreemptionCosts
from topas.scheduler.search import AgentOption, Problem, Weights, search, small_prefix_calls
from topas.scheduler.task_model import TaskModel, two_digits

_TYPICAL_CONTEXT = 4096
_MIN_SCORED = 8  # tasks always scored per decision (see Topas._candidate_tasks)
_two_digits = two_digits  # coarse value for cache keys (task_model.py)


@dataclass(frozen=True)
class TopasParams:
    beta: float = 1.0  # V_reuse weight
    rho: float = 16.0  # aging strength (tuned, conf/scheduler/topas.yaml)
    h_age: float = 60.0  # aging time scale (s)
    M: int = 6  # enumerate all prefix subsets when the free agent pool is at most M
    K: int = 64  # at most K admits + preempts per decision
    use_aging: bool = True
    use_reuse: bool = True
    use_move: bool = True
    use_redo: bool = True
    use_revoke: bool = True
    tie_temperature: float = 0.25  # smooth-max temperature as a fraction of W
    wait_ewma: float = 0.2  # smoothing of the observed queueing delay W
    prior_output_tokens: float = 256.0  # workload-independent prior (docs/policy_contract.md)
    work_conserving: bool = True  # after scored admissions, offer every other waiting request
    preempt_margin: float = 2.0  # hysteresis (tuned): preempt only for a gain above (1 + margin) x (redo + revoke)
    stop_at_first_misfit: bool = True  # stop the admission walk at a misfit (tuned; False = the contract's skip)
    score_overdue: bool = True  # a task whose call is overdue competes by its gain even outside R'
    overdue_factor: float = 2.0  # overdue: waiting longer than this many times max(W, the call's expected service)
    list_small_prefix: bool = True  # list a call outside R' by its gain when its prefix is smaller than its own KV
    unpin_under_pressure: bool = True  # pin an idle prefix only in memory no running or listed call is expected to need
    admission_order: AdmissionOrder = AdmissionOrder.PLAN_BY_TASK  # ordering.py; GAIN: the search's order
    consolidate_share: float = 0.65  # above this share of the pool locked by running calls' prefixes, the plan's
    # agent groups are ranked by the demand they serve, not by their best task (docs/topas.md, "Consolidation by
    # demand"); 1.0 or more: never (ablation)
    pop_by_task_value: bool = True  # the search pops a task's next call by its remaining chain's value, not by the
    # call's own marginal gain (search._key; docs/topas.md, "Fan-outs in the search"); False: ablation
    pin_for_reuse: bool = False  # also pin idle prefixes for one-hop reuse (V_reuse); off: measured a throughput trap
    use_batch: bool = False  # J_batch: opening a prefix is charged the calls of locked agents it crowds out;
    # calls of agents outside R' are then deferred (not offered to the work-conserving fill)

    def __post_init__(self) -> None:
        from topas.checks import check_ranges  # a RangeError names the field (scheduler.params.<field> at start)

        try:
            object.__setattr__(self, "admission_order", AdmissionOrder(self.admission_order))
        except ValueError:
            raise ValueError(f"scheduler.params.admission_order: {self.admission_order!r} is not one of "
                             f"{[o.value for o in AdmissionOrder]}") from None

        check_ranges(self, h_age="> 0", M=">= 0", K="> 0", beta=">= 0", rho=">= 0", preempt_margin=">= 0",
                     overdue_factor=">= 0", consolidate_share=">= 0", tie_temperature=">= 0", wait_ewma="in (0, 1]",
                     prior_output_tokens="> 0")


class _LRU(OrderedDict):
    """A bounded cache: entries are put on a miss and leave oldest first."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, k, v) -> None:
        self[k] = v
        if len(self) > self.size:
            self.popitem(last=False)


@register_policy("topas")
class Topas(TaskModel, PreemptionCosts, Policy):
    """Full TOPAS. Ablations are subclasses that change parameter defaults (ablations.py)."""

    Params = TopasParams

    def __init__(self, params: TopasParams | None = None) -> None:
        super().__init__(params)
        p = self.params
        self.est = ServiceEstimator(Prior(output_tokens=p.prior_output_tokens))
        self.ready_rates = ReadyRates()
        self.wait_s = 0.0  # EWMA of observed queueing delays (W)
        self._seen_admitted: set[str] = set()
        # lambda_r of running requests, in units of W x aging (the scale gains are measured in),
        # so a credit revoked later is valued at the current W and aging, like a new admission.
        self.credit: dict[str, float] = {}
        self._init_task_model()  # per-template tables and path models, per-task digests (task_model.py)
        self._chains = _LRU(4096)  # (task, signature, eligible) -> chain of (stage, gain)
        self._states = _LRU(4096)  # (task, progress signature) -> TaskState
        self._victims = _LRU(4096)  # (TaskState, stage) -> gain of re-admitting a preempted call
        self._weights = Weights(beta=p.beta, move=p.use_move, reuse=p.use_reuse)
        self._swap_memo: tuple[object, dict[int, float]] = (None, {})  # per cost model: tokens -> swap seconds
        self._step_memo: tuple[object, dict[int, float]] = (None, {})  # per cost model: batch size -> decode step
        self._arrival_key: dict[int, tuple[float, int]] = {}  # task -> (arrival, task): the scoring order
        self._reset_memos()

    def _reset_memos(self) -> None:
        """Per-decision memos of per-call estimates (the estimates change only between decisions)."""
        self._bucket_memo: dict[str, float] = {}
        if getattr(self, "_time_epoch", None) != self.est.observed:  # these move only with the estimates
            self._time_epoch = self.est.observed
            self._time_memo: dict[tuple[str, str, float], tuple[float, float]] = {}
            self._kv_memo: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------------ learning
    def on_event(self, event) -> None:
        self.est.on_event(event)
        if isinstance(event, RequestReady) and self.params.use_batch:  # only J_batch reads the rates
            self.ready_rates.observe(event.request.agent, event.time)
        if isinstance(event, RequestFinished):
            self.credit.pop(event.request.rid, None)
            self._seen_admitted.discard(event.request.rid)

    def _observe_admissions(self, view: SchedulerView) -> None:
        for r in view.running:
            if r.rid not in self._seen_admitted and r.admitted_time is not None:
                self._seen_admitted.add(r.rid)
                if r.preemptions == 0:
                    delay = max(r.admitted_time - r.ready_time, 0.0)
                    a = self.params.wait_ewma
                    self.wait_s = delay if not self.wait_s else (1 - a) * self.wait_s + a * delay

    # ------------------------------------------------------------------ estimates
    def _step_s(self, view: SchedulerView) -> float:
        """Decode step time at the current batch size, rounded to a power of two (few distinct queries)."""
        bs = 1 << max(len(view.running), 1).bit_length() - 1
        if self._step_memo[0] is not view.costs:
            self._step_memo = (view.costs, {})
        memo = self._step_memo[1]
        out = memo.get(bs)
        if out is None:
            out = memo[bs] = view.costs.decode_step_time(bs, _TYPICAL_CONTEXT)
        return out

    def _stage_time(self, agent: str, stage: str, step_s: float) -> tuple[float, float]:
        key = (agent, stage, step_s)
        out = self._time_memo.get(key)
        if out is None:
            mom = self.est.service_moments(agent, stage)
            if mom is not None and self.est.observations(agent, stage) > 0:
                out = mom
            else:
                m = self.est.output_tokens(agent, stage) * step_s
                out = (m, 0.5 * m)
            self._time_memo[key] = out
        return out

    def _next_release_s(self, view: SchedulerView, step_s: float) -> float:
        """A lower bound of W: a call left waiting now waits at least until running calls release
        memory, i.e. about the mean estimated residual service of the running batch (or, with
        nothing running, one mean service time of the waiting calls)."""
        rs = view.running or view.waiting
        if not rs:
            return 0.0
        total = 0.0
        times, stage_time, buckets, bucket = self._time_memo, self._stage_time, self._bucket_memo, self._residual_bucket
        for r in rs:
            m = (times.get((r.agent, r.stage, step_s)) or stage_time(r.agent, r.stage, step_s))[0]
            total += m * (buckets.get(r.rid) or bucket(r)) if r.admitted_time is not None else m
        return total / len(rs)

    # ------------------------------------------------------------------ decision
    def schedule(self, view: SchedulerView) -> Decision:
        p = self.params
        self._reset_memos()
        self._observe_admissions(view)
        step_s = self._step_s(view)
        wait_s = _two_digits(max(self.wait_s, self._next_release_s(view, step_s), step_s))
        waiting_by_task, running_by_task = group_calls(view)
        scored = self._candidate_tasks(view, waiting_by_task)
        ctx = DecisionContext(view, {}, waiting_by_task, running_by_task, wait_s, step_s)
        states, reuse_n = self._task_states(ctx, scored)
        if p.use_aging:
            aging, now, tasks, rho, h_age = S.aging, view.now, view.tasks, p.rho, p.h_age
            gain_weight = {tid: aging(now, tasks[tid].arrival, rho, h_age) for tid in states}
        else:
            gain_weight = dict.fromkeys(states, 1.0)
        chain = self._chain_fn(view, states, waiting_by_task, gain_weight)
        problem = self._problem(view, {t: waiting_by_task[t] for t in scored}, reuse_n, chain, ctx)
        if p.score_overdue:  # no call waits behind resident agents for much longer than the expected wait W
            problem.overdue = self._overdue(view, scored, waiting_by_task, wait_s, step_s)
        if p.use_batch:
            problem.batch = self._batch_pricing(view, problem, reuse_n, gain_weight, ctx)
        plan = search(problem, p.M)
        for rid in plan.admit:
            tid = problem.request_task[rid]
            self.credit[rid] = plan.gains.get(rid, 0.0) / (wait_s * gain_weight.get(tid, 1.0))
        # Blocked positive-gain requests keep their place by gain: with stop_at_first_misfit the engine
        # then waits for memory for them instead of letting lower-gain requests bypass them.
        # With J_batch, an agent the plan does not hold (no running or admitted call) is deferred: neither
        # its blocked calls nor the fill may open it behind the plan's back.
        held = None  # agents the fill may open (None: all)
        if p.use_batch and view.running:
            held = problem.batch_locked() | {problem.request_agent[rid] for rid in plan.admit}
        agent_of = problem.request_agent
        ranked = {rid: g for g, rid in plan.blocked if held is None or agent_of[rid] in held}
        ranked.update(plan.gains)
        if p.list_small_prefix:
            ranked.update((rid, g) for g, rid in small_prefix_calls(problem, plan.resident, ranked)
                          if held is None or agent_of[rid] in held)
        admit = sorted(ranked, key=lambda rid: -ranked[rid])
        rest: list[RequestInfo] = []
        if p.work_conserving:
            chosen = set(admit) | set(plan.preempt)
            rest = [r for r in view.waiting if r.rid not in chosen and (held is None or r.agent in held)]
            resident, weight = plan.resident, gain_weight.get
            rest.sort(key=lambda r: (r.agent not in resident, -weight(r.task_id, 1.0), r.ready_time))
        admit = self._order(admit, rest, problem, chain)
        # Pin what R' holds for a purpose: prefixes of admitted requests, and (with pin_for_reuse) prefixes
        # kept for the one-hop reuse only while every waiting request is admitted (holding a prefix for
        # later must not keep a ready request out now); a prefix whose requests stay waiting is not held
        # against the batch either.
        used = {problem.request_agent[rid] for rid in plan.admit}
        keep_for_reuse = len(plan.admit) == len(view.waiting)
        want = [a for a in sorted(plan.resident | used, key=lambda a: (a not in used, a))
                if a in used or (p.pin_for_reuse and keep_for_reuse and problem.agents[a].reuse_n > 0)]
        if p.unpin_under_pressure:
            output_tokens = self.est.output_tokens
            expected = {r.rid: output_tokens(r.agent, r.stage) for r in view.running}
            pin = safe_pins(view, problem, plan.admit, [rid for _, rid in plan.blocked], want, expected)
        else:
            pin = frozenset(want)
        return Decision(admit=tuple(admit), pin=pin, preempt=tuple(plan.preempt), stop_at_first_misfit=p.stop_at_first_misfit)

    def _order(self, plan_part: list[str], fill: list[RequestInfo], problem: Problem, chain) -> list[str]:
        """The admission list's final order (ordering.AdmissionOrder): the plan's part (admitted and blocked
        calls, all of scored tasks) by gain, then the work-conserving fill."""
        order = self.params.admission_order
        fill_rids = [r.rid for r in fill]
        if order is AdmissionOrder.GAIN:
            return plan_part + fill_rids
        fill_agent = {r.rid: r.agent for r in fill}
        if order is AdmissionOrder.PLAN_BY_TASK:  # the plan's calls are all scored: the problem knows them
            agent_of, task_of = problem.request_agent, problem.request_task
        else:
            agent_of = {**problem.request_agent, **fill_agent}
            task_of = {**problem.request_task, **{r.rid: r.task_id for r in fill}}
        if order is AdmissionOrder.AGENT_BY_CALL:
            return group_by_agent(plan_part + fill_rids, agent_of)
        values = {t: task_value(chain(t, ags)) for t, ags in problem.task_agents.items() if ags}
        value_of = lambda rid: values.get(task_of[rid], 0.0)  # noqa: E731
        locked = sum([o.tokens for o in problem.agents.values() if o.forced])
        if prefix_bound(locked, problem.budget, self.params.consolidate_share):
            rank = lambda group: group_demand(group, value_of)  # noqa: E731
        else:
            rank = lambda group: max(value_of(rid) for rid in group)  # noqa: E731
        if order is AdmissionOrder.PLAN_BY_TASK:
            return group_by_agent(plan_part, agent_of, rank) + group_by_agent(fill_rids, fill_agent)
        return group_by_agent(plan_part + fill_rids, agent_of, rank)

    def _overdue(self, view: SchedulerView, scored: set[int], waiting_by_task, wait_s: float, step_s: float) -> frozenset[int]:
        """Scored tasks with a call waiting longer than overdue_factor x max(W, its expected service)."""
        factor, limit = self.params.overdue_factor, {}  # limit per (agent, stage): the same for all its calls
        out = []
        for t in scored:
            for r in waiting_by_task[t]:
                key = (r.agent, r.stage)
                lim = limit.get(key)
                if lim is None:
                    lim = limit[key] = factor * max(wait_s, self._stage_time(r.agent, r.stage, step_s)[0])
                if view.now - r.ready_time > lim:
                    out.append(t)
                    break
        return frozenset(out)

    def _candidate_tasks(self, view: SchedulerView, waiting_by_task: dict[int, list[RequestInfo]]) -> set[int]:
        """Tasks whose waiting requests are scored this decision. Under a long queue, only the oldest
        tasks (the largest aging weights) whose requests could fill the KV pool (at least
        _MIN_SCORED) are scored; admitting any later one is impossible this decision, so they wait
        for the work-conserving fill. Keeps a decision's cost bounded by the pool, not the queue."""
        if len(waiting_by_task) <= _MIN_SCORED:
            return set(waiting_by_task)
        picked: set[int] = set()
        need = 0
        keys = self._arrival_key
        if len(keys) > 100_000:
            keys.clear()
        for t in waiting_by_task:
            if t not in keys:
                keys[t] = (view.tasks[t].arrival, t)
        kv = self._kv
        for tid in sorted(waiting_by_task, key=keys.__getitem__):
            picked.add(tid)
            need += min(map(kv, waiting_by_task[tid]))
            if len(picked) >= _MIN_SCORED and need > view.kv_pool_tokens:
                break
        return picked

    def _swap_s(self, view: SchedulerView, tokens: int) -> float:
        """The engine's host<->GPU transfer time of `tokens`, memoised while its cost model is the same object."""
        if self._swap_memo[0] is not view.costs:
            self._swap_memo = (view.costs, {})
        memo = self._swap_memo[1]
        out = memo.get(tokens)
        if out is None:
            out = memo[tokens] = view.costs.swap_time(tokens)
        return out

    def _problem(self, view: SchedulerView, waiting_by_task, reuse_n: dict[str, int], chain, ctx: DecisionContext) -> Problem:
        p = self.params
        forced = {r.agent for r in view.running}
        pool = forced | {r.agent for r in view.waiting} | {a for a, n in reuse_n.items() if n > 0}
        agents = {}
        for a in sorted(pool):
            ps = view.prefixes.get(a)
            if ps is None:
                continue
            res = ps.residency
            # the paper's J_move counts bytes moved (mu l_a / B_swap): a prefix on neither tier is charged the
            # same bytes; its recompute is part of the admitted request's own service, not an extra cost
            reload_s = self._swap_s(view, ps.tokens)
            move_in = 0.0 if res == Residency.GPU else reload_s
            agents[a] = AgentOption(a, ps.tokens, a in forced, res == Residency.GPU, move_in, reuse_n.get(a, 0), reload_s)
        running_kv = sum(map(self._kv, view.running))
        swap_per_token = self._swap_s(view, 10_000) / 10_000
        request_agent, request_task, request_tokens = {}, {}, {}  # of the scored calls: only these can be admitted
        for rs in waiting_by_task.values():
            for r in rs:
                request_agent[r.rid], request_task[r.rid], request_tokens[r.rid] = r.agent, r.task_id, self._kv(r)
        return Problem(
            budget=view.kv_pool_tokens,
            base_tokens=running_kv,
            agents=agents,
            request_agent=request_agent,
            request_task=request_task,
            request_tokens=request_tokens,
            task_agents={t: frozenset([r.agent for r in rs if r.agent in agents]) for t, rs in waiting_by_task.items()},
            chain=chain,
            swap_s_per_token=swap_per_token,
            max_actions=p.K,
            weights=self._weights,
            running=(lambda: self._running_options(ctx)) if (p.use_redo or p.use_revoke) else None,
            pop_by_task_value=p.pop_by_task_value,
        )

    def _batch_pricing(self, view: SchedulerView, problem: Problem, reuse_n: dict[str, int], gain_weight, ctx: DecisionContext) -> BatchPricing:
        """The typical call of the locked agents (waiting ones, else running ones) and their calls about to
        become ready, each valued at W x the mean aging of the running tasks."""
        locked = {r.agent for r in view.running}
        calls = [r for r in view.waiting if r.agent in locked] or view.running or view.waiting
        tokens = sum(self._kv(r) for r in calls) / len(calls)
        service = sum(self._stage_time(r.agent, r.stage, ctx.step_s)[0] for r in calls) / len(calls)
        problem.service_s = {rid: self._stage_time(problem.request_agent[rid], stage, ctx.step_s)[0]
                             for rid, stage in ((r.rid, r.stage) for rs in ctx.waiting_by_task.values() for r in rs)
                             if rid in problem.request_agent}
        p = self.params
        ages = [S.aging(view.now, r.task_arrival, p.rho, p.h_age) if p.use_aging else 1.0 for r in view.running]
        age = sum(ages) / len(ages) if ages else 1.0
        rates = {a: self.ready_rates.rate(a, view.now) for a in problem.agents}
        return BatchPricing(max(tokens, 1.0), max(service, 1e-6), rates, ctx.wait_s * age)

    def _kv(self, r: RequestInfo) -> int:
        """d_r at completion: own prompt suffix + (estimated) output, beyond the shared prefix. Kept across
        decisions while the estimates and the call's generated tokens stay the same."""
        key = (r.rid, r.generated_tokens)
        v = self._kv_memo.get(key)
        if v is None:
            v = self._kv_memo[key] = int(r.prompt_tokens - r.prefix_tokens
                                         + max(self.est.output_tokens(r.agent, r.stage), r.generated_tokens))
        return v
