"""TOPAS's per-task path-model inputs (docs/topas.md), a mixin of `Topas`: each scored task's
`TaskState`, the one-hop reuse counts n_a of the running tasks, and the admission chains.

A decision runs after every event and most tasks do not change between two decisions, so each
task's derived inputs (remaining calls, active counts, the state's cache key, its chains' rids) are
kept under a signature of what they are computed from (`TaskDigest`) and recomputed only when it
changes. The caches of states (`Topas._states`) and chains (`Topas._chains`) are read and filled
exactly when a task-by-task computation would read and fill them, so decisions do not depend on
this bookkeeping: a digest only skips a lookup whose answer it already holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from topas.policy import RequestInfo, SchedulerView
from topas.scheduler.digest import StageTable, active_counts, remaining, sorted_items, stage_counts
from topas.scheduler.preemption import DecisionContext
from topas.scheduler.progress import PathModel, TaskState, admission_chain
from topas.workflow import WorkflowTemplate

ESTIMATE_EPOCH = 8  # task states read the service estimates as of the start of each epoch of this many finished calls


def two_digits(x: float) -> float:
    """Coarse value for cache keys: W moves continuously, cached states should not."""
    return float(f"{x:.2g}")


class _Head(tuple):
    """The (template, remaining, waiting, running) part of a task state's cache key, hashed once: a
    digest reuses it at every decision (equal heads are equal keys, as plain tuples)."""

    def __init__(self, items) -> None:
        self._hash = tuple.__hash__(self)

    def __hash__(self) -> int:
        return self._hash


class TaskDigest:
    """One task's remaining calls, active and waiting counts per stage, reuse counts n_a, state-key head
    and admission chains, valid while `sig` holds: its progress, its waiting calls and
    its running calls' stages and residual buckets."""

    __slots__ = ("sig", "remaining", "active", "waiting", "reuse", "head", "state", "bases", "stage_rids", "forms", "chain_state",
                 "chains", "victims")

    def __init__(self, sig: tuple, remaining: dict, active: dict, waiting: dict, reuse: tuple[tuple[str, int], ...]) -> None:
        self.sig, self.remaining, self.active, self.waiting, self.reuse = sig, remaining, active, waiting, reuse
        self.head: tuple | None = None  # (template, remaining, waiting, running) part of the state key
        self.state: tuple | None = None  # (key tail, the `_states` entry that key found)
        self.bases: dict[tuple, tuple] = {}  # (coarse step, epoch) -> the W-free part of its states (_state_parts)
        self.stage_rids: dict[str, list[str]] | None = None  # waiting rids per stage, by ready time
        self.forms: dict[frozenset[str], tuple[dict, frozenset]] = {}  # eligible agents -> (calls per stage, as a key)
        self.chain_state: TaskState | None = None  # the state `chains` were built for
        self.chains: dict[frozenset[str], tuple] = {}  # eligible -> (_chains key, chain, [(rid, gain)])
        self.victims: dict[str, tuple[tuple, float]] = {}  # running rid -> (key tail, gain of re-admitting it)


class TaskModel:
    """Needs from the policy: params, est, and the caches set up by `_init_task_model`."""

    def _init_task_model(self) -> None:
        self._models: dict[str, PathModel] = {}
        self._tables: dict[str, StageTable] = {}
        self._digests: dict[int, TaskDigest] = {}  # task -> its digest at the last decision
        self._step_keys: dict[float, float] = {}  # step_s -> its coarse value (few distinct batch sizes)
        self._bucket_memo: dict[str, float] = {}  # per decision: residual bucket of a running call
        self._epoch: int | None = None  # estimate epoch of `_epoch_est`
        self._epoch_est: dict[tuple[str, str], tuple[tuple[float, float] | None, float]] = {}
        self._epoch_times: dict[tuple[str, str, float], tuple[float, float]] = {}
        self._pairs: tuple[object, tuple[tuple[str, str], ...]] = (None, ())  # (templates, their (agent, stage) pairs)

    def _model(self, tpl: WorkflowTemplate) -> PathModel:
        if tpl.name not in self._models:
            self._models[tpl.name] = PathModel(tpl)
        return self._models[tpl.name]

    def _table(self, tpl: WorkflowTemplate) -> StageTable:
        t = self._tables.get(tpl.name)
        if t is None:
            t = self._tables[tpl.name] = StageTable.of(tpl)
        return t

    def _task_states(self, ctx: DecisionContext, scored: set[int]) -> tuple[dict[int, TaskState], dict[str, int]]:
        """Path-model states of the scored tasks, and n_a: the one-hop reuse counts of the running ones.
        Their remaining calls and active counts are kept in `ctx` (the preemption costs read them again)."""
        view, waiting_by_task, running_by_task = ctx.view, ctx.waiting_by_task, ctx.running_by_task
        states: dict[int, TaskState] = {}
        reuse_n: dict[str, int] = {}
        last, digests = self._digests, {}
        tail = self._key_tail(ctx.wait_s, ctx.step_s)
        if tail[2] != self._epoch:
            self._start_epoch(view.templates, tail[2])
        tasks, active, remaining = view.tasks, ctx.active, ctx.remaining
        buckets, bucket = self._bucket_memo, self._residual_bucket
        # only the running and the scored tasks (the others are between calls, or beyond what could be admitted
        # now: left to the fill); their order does not matter, every cache being a pure memo
        for tid in [*running_by_task, *(t for t in scored if t not in running_by_task)]:
            prog = tasks[tid]
            run = running_by_task.get(tid)
            ws = waiting_by_task.get(tid, ())
            sig = (prog.stage_done, [r.rid for r in ws],  # a call's ready time is fixed: its first entry in the queue
                   [(r.stage, buckets[r.rid] if r.rid in buckets else bucket(r)) for r in run] if run else None)
            d = last.get(tid)
            if d is None or d.sig != sig:
                d = self._digest(view.templates[prog.template], prog, ws, run, sig)
            digests[tid] = d
            active[tid] = d.active
            remaining[tid] = d.remaining
            if tid in scored:
                if d.state is None or d.state[0] != tail:
                    tpl = view.templates[prog.template]
                    if d.head is None:
                        d.head = self._key_head(tpl, d.remaining, d.waiting, run or ())
                    d.state = (tail, self._cached_state((d.head, *tail), tpl, d.remaining, d.waiting, run or (), d.bases))
                # else: the same key, so the same state (a state is a function of its key)
                states[tid] = d.state[1]
            for a, n in d.reuse:
                reuse_n[a] = reuse_n.get(a, 0) + n
        self._digests = digests
        return states, reuse_n

    def _digest(self, tpl: WorkflowTemplate, prog, ws: Sequence[RequestInfo], run: Sequence[RequestInfo] | None, sig) -> TaskDigest:
        waiting = stage_counts(ws)
        act = active_counts(waiting, run)
        rem = remaining(self._table(tpl), prog, act)
        reuse: Counter = Counter()
        for r in run or ():
            self._count_reuse(tpl, rem, act, r.stage, reuse)
        return TaskDigest(sig, rem, act, waiting, tuple(reuse.items()))

    def _key_head(self, tpl, rem, waiting_counts, running) -> tuple:
        return _Head((tpl.name, sorted_items(self._table(tpl), rem), tuple(sorted(waiting_counts.items())),
                      tuple(sorted([(r.stage, self._residual_bucket(r)) for r in running]))))

    def _key_tail(self, wait_s: float, step_s: float) -> tuple:
        coarse_step = self._step_keys.get(step_s)
        if coarse_step is None:
            if len(self._step_keys) > 256:
                self._step_keys.clear()
            coarse_step = self._step_keys[step_s] = two_digits(step_s)
        return (wait_s, coarse_step, self.est.observed // ESTIMATE_EPOCH)

    def _task_state(self, tpl, rem, waiting_counts, running, wait_s, step_s) -> TaskState:
        """Path-model inputs of one task; cached on a coarse signature of its progress (incremental:
        a task is recomputed only when its own progress, W's bucket or the estimate epoch changes)."""
        key = (self._key_head(tpl, rem, waiting_counts, running), *self._key_tail(wait_s, step_s))
        return self._cached_state(key, tpl, rem, waiting_counts, running)

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
            st = self._state_at(parts, wait_s)
            self._states.put(key, st)
        return st

    def _start_epoch(self, templates, epoch: int) -> None:
        """Snapshot the service estimates of every (agent, stage) of the templates: the task states of an
        estimate epoch all read these, whenever they are computed (docs/topas.md, "Decision cost")."""
        if self._pairs[0] is not templates:
            pairs = {(st.agent, st.id) for tpl in templates.values() for st in tpl.stages.values()}
            self._pairs = (templates, tuple(sorted(pairs)))
        est = self.est
        self._epoch, self._epoch_times = epoch, {}
        self._epoch_est = {(a, s): (est.service_moments(a, s) if est.observations(a, s) > 0 else None, est.output_tokens(a, s))
                           for a, s in self._pairs[1]}

    def _epoch_stage_time(self, agent: str, stage: str, coarse_step: float) -> tuple[float, float]:
        """(mean, spread) of a stage's service as of the epoch's start: the observed moments, or the
        estimated output length at the coarse decode step time before any call of it has finished."""
        key = (agent, stage, coarse_step)
        out = self._epoch_times.get(key)
        if out is None:
            snap = self._epoch_est.get((agent, stage))
            if snap is None:  # a stage outside the view's templates (not met in a run): read it now, once per epoch
                est = self.est
                snap = self._epoch_est[(agent, stage)] = (
                    est.service_moments(agent, stage) if est.observations(agent, stage) > 0 else None, est.output_tokens(agent, stage))
            mom, y = snap
            if mom is None:
                m = y * coarse_step
                mom = (m, 0.5 * m)
            out = self._epoch_times[key] = mom
        return out

    def _residual_bucket(self, r: RequestInfo) -> float:
        b = self._bucket_memo.get(r.rid)
        if b is None:
            y = self.est.output_tokens(r.agent, r.stage)
            b = self._bucket_memo[r.rid] = round(max(1.0 - r.generated_tokens / max(y, 1.0), 0.1) * 4) / 4
        return b

    def _state_at(self, parts: tuple, wait_s: float) -> TaskState:
        """A task state from its W-free parts and W (the smooth max's temperature grows with W)."""
        base_items, waiting_items, spread_mean = parts
        tau = self.params.tie_temperature * wait_s + spread_mean
        return TaskState(base_items, waiting_items, round(wait_s, 3), round(tau, 3))

    def _state_parts(self, tpl, rem, waiting_counts, running, coarse_step: float) -> tuple:
        """(sorted base items, sorted waiting items, mean service spread) of a task state: all but W."""
        base: dict[str, float] = {}
        spread = []
        run_by_stage: dict[str, list[RequestInfo]] = {}
        for r in running:
            run_by_stage.setdefault(r.stage, []).append(r)
        agent = self._table(tpl).agent
        for s, n in rem.items():
            if n <= 0:
                continue
            m, sd = self._epoch_stage_time(agent[s], s, coarse_step)
            spread.append(sd)
            rs = run_by_stage.get(s, ())
            todo = n - len(rs)
            residual = sum([m * self._residual_bucket(r) for r in rs]) if rs else 0
            base[s] = round(max(todo, 0.0) * m + residual, 3)
        return tuple(sorted(base.items())), tuple(sorted(waiting_counts.items())), (sum(spread) / len(spread) if spread else 0.0)

    @staticmethod
    def _stage_rids(rs: list[RequestInfo]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in sorted(rs, key=lambda r: (r.ready_time, r.rid)):
            out.setdefault(r.stage, []).append(r.rid)
        return out

    @staticmethod
    def _count_reuse(tpl, rem, active, stage: str, reuse_n: Counter) -> None:
        """n_a(t): stages one hop downstream of a running stage that become ready when it finishes."""
        if rem.get(stage, 0) - active.get(stage, 0) >= 1:  # the next turn of a repeated stage
            reuse_n[tpl.stages[stage].agent] += 1
        for c in tpl.children[stage]:
            if rem.get(c, 0) <= 0 or active.get(c, 0):
                continue
            if all(rem.get(d, 0) <= 0 or active.get(d, 0) for d in tpl.stages[c].deps):
                reuse_n[tpl.stages[c].agent] += 1

    def _chain_fn(self, view: SchedulerView, states: dict[int, TaskState], waiting_by_task: dict[int, list[RequestInfo]],
                  gain_weight: dict[int, float]):
        """The problem's chain(task, eligible agents): the task's admission chain as (rid, age-weighted gain),
        memoised for the decision. The unweighted chains are cached across decisions by task state
        (`_chains`); a task's digest keeps the last ones it read, with their rids, while that entry lives."""
        memo: dict[tuple[int, frozenset[str]], list[tuple[str, float]]] = {}
        digests = self._digests

        def chain(tid: int, eligible: frozenset[str]) -> list[tuple[str, float]]:
            out = memo.get((tid, eligible))
            if out is not None:
                return out
            st, d = states[tid], digests[tid]
            if d.chain_state is not st and d.chain_state != st:  # an equal state reads the same `_chains` entries
                d.chain_state, d.chains = st, {}
            hit = d.chains.get(eligible)
            if hit is None:  # a chain is a function of its key: a digest's copy outlives the cache entry
                form = d.forms.get(eligible)
                if form is None:  # the eligible waiting calls per stage: the same for every state of the digest
                    if d.stage_rids is None:
                        d.stage_rids = self._stage_rids(waiting_by_task[tid])
                    agent = self._table(view.templates[view.tasks[tid].template]).agent
                    elig = {s: len(rs) for s, rs in d.stage_rids.items() if agent[s] in eligible}
                    form = d.forms[eligible] = (elig, frozenset(elig.items()))
                rids = d.stage_rids
                key = (st, form[1])
                ch = self._chains.get(key)
                if ch is None:
                    ch = admission_chain(self._model(view.templates[view.tasks[tid].template]), st, form[0])
                    self._chains.put(key, ch)
                used: dict[str, int] = {}
                mapped = []
                for s, g in ch:
                    k = used.get(s, 0)
                    mapped.append((rids[s][k], g))
                    used[s] = k + 1
                hit = d.chains[eligible] = (key, ch, mapped)
            w = gain_weight[tid]
            out = memo[(tid, eligible)] = [(rid, g * w) for rid, g in hit[2]]
            return out

        return chain
