"""TOPAS's per-task inputs (docs/topas.md, "J_admit"): each scored task's path-model state (`TaskState`),
the one-hop reuse counts n_a of the running tasks, the admission chains, and the gain of re-admitting a
running call (what its preemption revokes).

`TaskBook` keeps them across decisions. A decision runs after every event and most tasks do not change
between two decisions, so each task's derived inputs (remaining calls, active counts, the state's cache key,
its chains' rids) are kept under a signature of what they are computed from (`digest.TaskDigest`) and
recomputed only for the tasks an event changed. The caches of states and chains are read and filled exactly
when a task-by-task computation would read and fill them, so decisions do not depend on this bookkeeping:
a digest only skips a lookup whose answer it already holds.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from topas.policy import RequestInfo, SchedulerView
from topas.policy.progress import remaining_calls
from topas.scheduler.digest import StageTable, StateKeyHead, TaskDigest, active_counts, remaining, sorted_items, stage_counts
from topas.scheduler.estimates import DecisionEstimates, Estimator
from topas.scheduler.progress import PathModel, TaskState, admission_chain
from topas.workflow import WorkflowTemplate


class LRU(OrderedDict):
    """A bounded cache: entries are put on a miss and leave oldest first."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, k, v) -> None:
        self[k] = v
        if len(self) > self.size:
            self.popitem(last=False)


class TaskBook:
    def __init__(self, estimator: Estimator, tie_temperature: float) -> None:
        self.estimator, self.tie_temperature = estimator, tie_temperature
        self._models: dict[str, PathModel] = {}
        self._tables: dict[str, StageTable] = {}
        self._digests: dict[int, TaskDigest] = {}  # task -> its digest at the last decision
        self._chains = LRU(4096)  # (task state, eligible calls per stage) -> chain of (stage, gain)
        self._states = LRU(4096)  # (progress signature, W, step, epoch) -> TaskState
        self._victims = LRU(4096)  # (TaskState, stage) -> gain of re-admitting a preempted call
        self._remaining_memo: tuple[tuple | None, dict] = (None, {})  # (step, observed), {remaining calls: seconds}
        # this decision's remaining calls and active counts per task (the running and the scored tasks)
        self.remaining: dict[int, dict] = {}
        self.active: dict[int, dict] = {}

    def model(self, tpl: WorkflowTemplate) -> PathModel:
        if tpl.name not in self._models:
            self._models[tpl.name] = PathModel(tpl)
        return self._models[tpl.name]

    def table(self, tpl: WorkflowTemplate) -> StageTable:
        t = self._tables.get(tpl.name)
        if t is None:
            t = self._tables[tpl.name] = StageTable.of(tpl)
        return t

    # ------------------------------------------------------------------ states
    def states(self, view: SchedulerView, e: DecisionEstimates, waiting_by_task, running_by_task,
               scored: set[int]) -> tuple[dict[int, TaskState], dict[str, int]]:
        """Path-model states of the scored tasks, and n_a: the one-hop reuse counts of the running ones."""
        states: dict[int, TaskState] = {}
        reuse_n: dict[str, int] = {}
        last, digests = self._digests, {}
        tail = e.key_tail
        tasks, active, rem = view.tasks, {}, {}
        bucket = self.estimator.residual_bucket
        # only the running and the scored tasks (the others are between calls, or beyond what could be admitted
        # now: left to the fill); their order does not matter, every cache being a pure memo
        for tid in [*running_by_task, *(t for t in scored if t not in running_by_task)]:
            prog = tasks[tid]
            run = running_by_task.get(tid)
            ws = waiting_by_task.get(tid, ())
            sig = (prog.stage_done, [r.rid for r in ws],  # a call's ready time is fixed: its first entry in the queue
                   [(r.stage, bucket(r)) for r in run] if run else None)
            d = last.get(tid)
            if d is None or d.sig != sig:
                d = self._digest(view.templates[prog.template], prog, ws, run, sig)
            digests[tid] = d
            active[tid] = d.active
            rem[tid] = d.remaining
            if tid in scored:
                if d.state is None or d.state[0] != tail:
                    tpl = view.templates[prog.template]
                    if d.head is None:
                        d.head = self._key_head(tpl, d.remaining, d.waiting, run or ())
                    d.state = (tail, self._cached_state((d.head, *tail), tpl, d.remaining, d.waiting, run or (), d.bases))
                states[tid] = d.state[1]  # else the same key, so the same state (a state is a function of its key)
            for a, n in d.reuse:
                reuse_n[a] = reuse_n.get(a, 0) + n
        self._digests, self.active, self.remaining = digests, active, rem
        return states, reuse_n

    def remaining_seconds(self, view: SchedulerView, e: DecisionEstimates) -> dict[int, float]:
        """Estimated remaining service (seconds, calls x their stage's mean) of this decision's running and
        scored tasks (after `states`)."""
        key = (e.step_s, self.estimator.est.observed)  # what the stage means are a function of
        if self._remaining_memo[0] != key:
            self._remaining_memo = (key, {})
        memo, stage_time, out = self._remaining_memo[1], self.estimator.stage_time, {}
        means: dict[str, list[float]] = {}  # template -> its stages' mean service, in table order: read once per decision
        for tid, d in self._digests.items():
            hit = d.remaining_s
            if hit is None or hit[0] != key:  # a function of the remaining calls, the step and the estimates
                calls = d.remaining_key
                if calls is None:  # d.remaining lists every stage in table order (digest.remaining)
                    calls = d.remaining_key = StateKeyHead((view.tasks[tid].template, tuple(d.remaining.values())))
                v = memo.get(calls)  # tasks at the same point of a template share it
                if v is None:
                    tpl = calls[0]
                    m = means.get(tpl)
                    if m is None:
                        table = self.table(view.templates[tpl])
                        m = means[tpl] = [stage_time(table.agent[s], s, e.step_s)[0] for s, _ in table.stages]
                    v = memo[calls] = sum([n * t for n, t in zip(calls[1], m) if n > 0])
                hit = d.remaining_s = (key, v)
            out[tid] = hit[1]
        return out

    def _digest(self, tpl: WorkflowTemplate, prog, ws: Sequence[RequestInfo], run: Sequence[RequestInfo] | None, sig) -> TaskDigest:
        waiting = stage_counts(ws)
        act = active_counts(waiting, run)
        rem = remaining(self.table(tpl), prog, act)
        reuse: dict[str, int] = {}
        for r in run or ():
            _count_reuse(tpl, rem, act, r.stage, reuse)
        return TaskDigest(sig, rem, act, waiting, tuple(reuse.items()))

    def _key_head(self, tpl, rem, waiting_counts, running) -> tuple:
        bucket = self.estimator.residual_bucket
        return StateKeyHead((tpl.name, sorted_items(self.table(tpl), rem), tuple(sorted(waiting_counts.items())),
                             tuple(sorted([(r.stage, bucket(r)) for r in running]))))

    def _cached_state(self, key: tuple, tpl, rem, waiting_counts, running, bases: dict | None = None) -> TaskState:
        """The state of `key` (head, W, coarse step, epoch), computed and cached on a miss. It is a function
        of the key alone, so a hit and a recomputation agree: what the caches hold changes only the speed.
        `bases`: a digest's memo of the parts of its states that do not depend on W (a new W reuses them)."""
        st = self._states.get(key)
        if st is None:
            wait_s, coarse_step = key[-3], key[-2]
            parts = bases.get(key[-2:]) if bases is not None else None
            if parts is None:
                parts = self._state_parts(tpl, rem, waiting_counts, running, coarse_step)
                if bases is not None:
                    bases[key[-2:]] = parts
            base_items, waiting_items, spread_mean = parts
            tau = self.tie_temperature * wait_s + spread_mean  # the smooth max's temperature grows with W
            st = TaskState(base_items, waiting_items, round(wait_s, 3), round(tau, 3))
            self._states.put(key, st)
        return st

    def _state_parts(self, tpl, rem, waiting_counts, running, coarse_step: float) -> tuple:
        """(sorted base items, sorted waiting items, mean service spread) of a task state: all but W."""
        base: dict[str, float] = {}
        spread = []
        run_by_stage: dict[str, list[RequestInfo]] = {}
        for r in running:
            run_by_stage.setdefault(r.stage, []).append(r)
        agent = self.table(tpl).agent
        stage_time, bucket = self.estimator.epoch_stage_time, self.estimator.residual_bucket
        for s, n in rem.items():
            if n <= 0:
                continue
            m, sd = stage_time(agent[s], s, coarse_step)
            spread.append(sd)
            rs = run_by_stage.get(s, ())
            todo = n - len(rs)
            residual = sum([m * bucket(r) for r in rs]) if rs else 0
            base[s] = round(max(todo, 0.0) * m + residual, 3)
        return tuple(sorted(base.items())), tuple(sorted(waiting_counts.items())), (sum(spread) / len(spread) if spread else 0.0)

    # ------------------------------------------------------------------ chains
    def chain_fn(self, view: SchedulerView, states: dict[int, TaskState], waiting_by_task: dict[int, list[RequestInfo]],
                 aging: Mapping[int, float], context: Mapping[str, float] | None = None):
        """The problem's chain(task, eligible agents): the task's admission chain as (rid, age-weighted gain plus the
        call's context value, score.context_value), memoised for the decision. The unweighted chains are cached across decisions by task state; a task's
        digest keeps the last ones it read, with their rids, while that entry lives."""
        memo: dict[tuple[int, frozenset[str]], list[tuple[str, float]]] = {}
        digests = self._digests

        def chain(tid: int, eligible: frozenset[str]) -> list[tuple[str, float]]:
            out = memo.get((tid, eligible))
            if out is not None:
                return out
            st, d = states[tid], digests[tid]
            if d.chain_state is not st and d.chain_state != st:  # an equal state reads the same cache entries
                d.chain_state, d.chains = st, {}
            hit = d.chains.get(eligible)
            if hit is None:  # a chain is a function of its key: a digest's copy outlives the cache entry
                tpl = view.templates[view.tasks[tid].template]
                form = d.forms.get(eligible)
                if form is None:  # the eligible waiting calls per stage: the same for every state of the digest
                    if d.stage_rids is None:
                        d.stage_rids = _stage_rids(waiting_by_task[tid])
                    agent = self.table(tpl).agent
                    elig = {s: len(rs) for s, rs in d.stage_rids.items() if agent[s] in eligible}
                    form = d.forms[eligible] = (elig, frozenset(elig.items()))
                rids = d.stage_rids
                key = (st, form[1])
                ch = self._chains.get(key)
                if ch is None:
                    ch = admission_chain(self.model(tpl), st, form[0])
                    self._chains.put(key, ch)
                used: dict[str, int] = {}
                mapped = []
                for s, g in ch:
                    k = used.get(s, 0)
                    mapped.append((rids[s][k], g))
                    used[s] = k + 1
                hit = d.chains[eligible] = (key, ch, mapped)
            w = aging[tid]
            if context:
                out = [(rid, g * w + context.get(rid, 0.0)) for rid, g in hit[2]]
            else:
                out = [(rid, g * w) for rid, g in hit[2]]
            memo[(tid, eligible)] = out
            return out

        return chain

    # ------------------------------------------------------------------ preemption
    def victim_gain(self, view: SchedulerView, e: DecisionEstimates, r: RequestInfo, waiting_by_task, running_by_task) -> float:
        """Delta_task of re-admitting running call r if it were sent back to waiting (unweighted seconds)."""
        prog = view.tasks.get(r.task_id)
        if prog is None:
            return 0.0
        digest = self._digests.get(r.task_id)  # valid this decision: its running calls and waiting calls are the same
        tail = e.key_tail
        if digest is not None:
            hit = digest.victims.get(r.rid)
            if hit is not None and hit[0] == tail:
                return hit[1]
        tpl = view.templates[prog.template]
        rem = self.remaining.get(r.task_id)
        if rem is None:
            rem = remaining_calls(tpl, prog, self.active.get(r.task_id, {}))
        waiting = stage_counts(waiting_by_task.get(r.task_id, []))
        waiting[r.stage] = waiting.get(r.stage, 0) + 1
        running = [x for x in running_by_task.get(r.task_id, []) if x.rid != r.rid]
        st = self._cached_state((self._key_head(tpl, rem, waiting, running), *tail), tpl, rem, waiting, running)
        key = (st, r.stage)
        gain = self._victims.get(key)
        if gain is None:
            model = self.model(tpl)
            admitted = {s: n for s, n in waiting.items() if s != r.stage}
            admitted[r.stage] = waiting[r.stage] - 1
            gain = max(model.longest(st, admitted) - model.longest(st, waiting), 0.0)
            self._victims.put(key, gain)
        if digest is not None:
            digest.victims[r.rid] = (tail, gain)
        return gain


def _stage_rids(rs: list[RequestInfo]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in sorted(rs, key=lambda r: (r.ready_time, r.rid)):
        out.setdefault(r.stage, []).append(r.rid)
    return out


def _count_reuse(tpl, rem, active, stage: str, reuse_n: dict[str, int]) -> None:
    """n_a(t): stages one hop downstream of a running stage that become ready when it finishes."""
    if rem.get(stage, 0) - active.get(stage, 0) >= 1:  # the next turn of a repeated stage
        a = tpl.stages[stage].agent
        reuse_n[a] = reuse_n.get(a, 0) + 1
    for c in tpl.children[stage]:
        if rem.get(c, 0) <= 0 or active.get(c, 0):
            continue
        if all(rem.get(d, 0) <= 0 or active.get(d, 0) for d in tpl.stages[c].deps):
            a = tpl.stages[c].agent
            reuse_n[a] = reuse_n.get(a, 0) + 1
