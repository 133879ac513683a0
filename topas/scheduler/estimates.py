"""The first step of TOPAS's pipeline: the estimates a decision reads (docs/topas.md, "Estimates only").

`Estimator` lives across decisions: service statistics of finished calls (`ServiceEstimator`, with a
workload-independent prior), the expected queueing delay W (an EWMA of observed first-admission delays),
and memos of per-call estimates that change only when the statistics do. `Estimator.begin(view)` returns the
decision's `DecisionEstimates`. No true output length is read: calls are sized by their estimated output.

Task states read the service estimates as they were at the start of an *estimate epoch* (every
ESTIMATE_EPOCH finished calls), so a cached task state is a pure function of its key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from topas.policy import RequestFinished, RequestInfo, SchedulerView
from topas.policy.estimates import Prior, ServiceEstimator
from topas.scheduler.params import TopasParams

_TYPICAL_CONTEXT = 4096
ESTIMATE_EPOCH = 8  # task states read the service estimates as of the start of each epoch of this many finished calls


def two_digits(x: float) -> float:
    """Coarse value for cache keys: W moves continuously, cached states should not."""
    return float(f"{x:.2g}")


@dataclass(frozen=True)
class DecisionEstimates:
    now: float
    step_s: float  # decode step time at the current batch size
    wait_s: float  # W, two significant digits
    key_tail: tuple[float, float, int]  # (W, coarse step, estimate epoch): what task states are keyed on
    # d_r (`Estimator._kvs`) of every running and waiting call by rid: the decision reads each several times
    kv: Mapping[str, int] = field(default_factory=dict, compare=False)


class Estimator:
    def __init__(self, params: TopasParams) -> None:
        self.params = params
        self.est = ServiceEstimator(Prior(output_tokens=params.prior_output_tokens))
        self.wait_s = 0.0  # EWMA of observed queueing delays (W)
        self._seen_admitted: set[str] = set()
        self._step_memo: tuple[object, dict[int, float]] = (None, {})  # per cost model: batch size -> decode step
        self._swap_memo: tuple[object, dict[int, float]] = (None, {})  # per cost model: tokens -> swap seconds
        self._step_keys: dict[float, float] = {}  # step_s -> its coarse value (few distinct batch sizes)
        self._epoch: int | None = None  # estimate epoch of `_epoch_est`
        self._epoch_est: dict[tuple[str, str], tuple[tuple[float, float] | None, float]] = {}
        self._epoch_times: dict[tuple[str, str, float], tuple[float, float]] = {}
        self._pairs: tuple[object, tuple[tuple[str, str], ...]] = (None, ())  # (templates, their (agent, stage) pairs)
        self._time_epoch: int | None = None
        self._reset_memos()

    def on_event(self, event) -> None:
        self.est.on_event(event)
        if isinstance(event, RequestFinished):
            self._seen_admitted.discard(event.request.rid)

    # ------------------------------------------------------------------ a decision's estimates
    def begin(self, view: SchedulerView) -> DecisionEstimates:
        self._reset_memos()
        self._observe_admissions(view)
        step_s = self._step_s(view)
        wait_s = two_digits(max(self.wait_s, self._next_release_s(view, step_s), step_s))
        tail = self._key_tail(wait_s, step_s)
        if tail[2] != self._epoch:
            self._start_epoch(view.templates, tail[2])
        return DecisionEstimates(view.now, step_s, wait_s, tail, self._kvs(view))

    def _reset_memos(self) -> None:
        """Per-decision memos of per-call estimates (the estimates change only between decisions)."""
        self._bucket_memo: dict[str, float] = {}
        if self._time_epoch != self.est.observed:  # these move only with the estimates
            self._time_epoch = self.est.observed
            self._time_memo: dict[tuple[str, str, float], tuple[float, float]] = {}

    def _observe_admissions(self, view: SchedulerView) -> None:
        for r in view.running:
            if r.rid not in self._seen_admitted and r.admitted_time is not None:
                self._seen_admitted.add(r.rid)
                if r.preemptions == 0:
                    delay = max(r.admitted_time - r.ready_time, 0.0)
                    a = self.params.wait_ewma
                    self.wait_s = delay if not self.wait_s else (1 - a) * self.wait_s + a * delay

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

    def _next_release_s(self, view: SchedulerView, step_s: float) -> float:
        """A lower bound of W: a call left waiting now waits at least until running calls release memory, i.e.
        about the mean estimated residual service of the running batch (or, with nothing running, one mean
        service time of the waiting calls)."""
        rs = view.running or view.waiting
        if not rs:
            return 0.0
        total = 0.0
        times, stage_time, buckets, bucket = self._time_memo, self.stage_time, self._bucket_memo, self.residual_bucket
        for r in rs:
            m = (times.get((r.agent, r.stage, step_s)) or stage_time(r.agent, r.stage, step_s))[0]
            total += m * (buckets.get(r.rid) or bucket(r)) if r.admitted_time is not None else m
        return total / len(rs)

    def _key_tail(self, wait_s: float, step_s: float) -> tuple[float, float, int]:
        coarse_step = self._step_keys.get(step_s)
        if coarse_step is None:
            if len(self._step_keys) > 256:
                self._step_keys.clear()
            coarse_step = self._step_keys[step_s] = two_digits(step_s)
        return (wait_s, coarse_step, self.est.observed // ESTIMATE_EPOCH)

    # ------------------------------------------------------------------ per-call and per-stage estimates
    def stage_time(self, agent: str, stage: str, step_s: float) -> tuple[float, float]:
        """(mean, spread) of a call's service seconds: the observed moments, or the estimated output at step_s."""
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

    def _kvs(self, view: SchedulerView) -> dict[str, int]:
        """d_r of every running and waiting call, by rid: at completion, own prompt suffix + (estimated) output,
        beyond the shared prefix. One pass, the estimated output read once per (agent, stage)."""
        ys: dict[tuple[str, str], float] = {}
        y_of, out = self.est.output_tokens, {}
        for rs in (view.running, view.waiting):
            for r in rs:
                y = ys.get((r.agent, r.stage))
                if y is None:
                    y = ys[(r.agent, r.stage)] = y_of(r.agent, r.stage)
                g = r.generated_tokens
                out[r.rid] = int(r.prompt_tokens - r.prefix_tokens + (y if y >= g else g))  # max(y, g), y on ties
        return out

    def residual_bucket(self, r: RequestInfo) -> float:
        """A running call's remaining share of its estimated output, in quarters (a coarse cache key)."""
        b = self._bucket_memo.get(r.rid)
        if b is None:
            y = self.est.output_tokens(r.agent, r.stage)
            b = self._bucket_memo[r.rid] = round(max(1.0 - r.generated_tokens / max(y, 1.0), 0.1) * 4) / 4
        return b

    def swap_s(self, view: SchedulerView, tokens: int) -> float:
        """The engine's host<->GPU transfer time of `tokens`, memoised while its cost model is the same object."""
        if self._swap_memo[0] is not view.costs:
            self._swap_memo = (view.costs, {})
        memo = self._swap_memo[1]
        out = memo.get(tokens)
        if out is None:
            out = memo[tokens] = view.costs.swap_time(tokens)
        return out

    def output_tokens(self, agent: str, stage: str) -> float:
        return self.est.output_tokens(agent, stage)

    # ------------------------------------------------------------------ the epoch snapshot task states read
    def _start_epoch(self, templates, epoch: int) -> None:
        """Snapshot the service estimates of every (agent, stage) of the templates: the task states of an
        estimate epoch all read these, whenever they are computed."""
        if self._pairs[0] is not templates:
            pairs = {(st.agent, st.id) for tpl in templates.values() for st in tpl.stages.values()}
            self._pairs = (templates, tuple(sorted(pairs)))
        est = self.est
        self._epoch, self._epoch_times = epoch, {}
        self._epoch_est = {(a, s): (est.service_moments(a, s) if est.observations(a, s) > 0 else None, est.output_tokens(a, s))
                           for a, s in self._pairs[1]}

    def epoch_stage_time(self, agent: str, stage: str, coarse_step: float) -> tuple[float, float]:
        """(mean, spread) of a stage's service as of the epoch's start: the observed moments, or the estimated
        output length at the coarse decode step time before any call of it has finished."""
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
