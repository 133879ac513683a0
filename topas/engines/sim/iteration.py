"""What one iteration of the simulated server does: form an extend (prefill) batch under
SGLang's prefill budget, run it, or advance the running batch by a decode step or a stretch of
steps, retracting when the pool cannot hold the next one. Mixed into `SimEngine` (engine.py),
which owns the state these methods read and the event loop that calls them."""

from __future__ import annotations

from topas.engines.latency.base import LatencyModel, decode_batch_time, top_context_means
from topas.engines.sim.admission import AddResult, KVPool, PrefillBudget
from topas.engines.sim.config import SimEngineConfig
from topas.engines.sim.entities import ReqState, SimRequest, SimStats
from topas.engines.sim.radix import RadixCache, truncate_runs
from topas.engines.sim.residency import PrefixResidency
from topas.policy import Decision


class EngineStall(RuntimeError):
    pass


class Iterations:
    """Batch forming and the extend / decode iterations of `SimEngine`."""

    # engine state used here (set by SimEngine.__init__)
    cfg: SimEngineConfig
    latency: LatencyModel
    cache: RadixCache
    pool: KVPool
    residency: PrefixResidency
    now: float
    waiting: list[SimRequest]
    running: list[SimRequest]
    chunked: SimRequest | None
    stats: SimStats
    new_token_ratio: float
    _min_ratio: float
    _ratio_decay: float
    _decision: Decision | None
    _dirty: bool
    _pending_transfer_s: float

    # ------------------------------------------------------------------ prefill
    def _admission_order(self) -> tuple[list[SimRequest], bool]:
        if self._decision is None:
            return [], False
        by_rid = {r.rid: r for r in self.waiting}
        order = [by_rid[rid] for rid in self._decision.admit if rid in by_rid]
        return order, self._decision.stop_at_first_misfit

    def _form_prefill_batch(self) -> list[SimRequest]:
        if not self.waiting and self.chunked is None:
            return []
        budget = PrefillBudget(self.cfg, self.pool, self.running, self.new_token_ratio)
        if self.chunked is not None:
            if not budget.add_chunked(self.chunked):
                self.chunked = None
        order, stop_at_misfit = self._admission_order()
        loaded = 0
        for req in order:
            if budget.state() == AddResult.OTHER:
                break
            if len(self.running) + len(budget.admitted) >= self.cfg.max_running_requests:
                break
            ok, state, host_loaded = budget.add_one(req)
            loaded += host_loaded
            if not ok and (stop_at_misfit or state != AddResult.NO_TOKEN):
                break
            if ok and state != AddResult.CONTINUE:
                break
        if budget.new_chunked is not None:
            self.chunked = budget.new_chunked
        if loaded:
            self._pending_transfer_s += self.cfg.transfer_time(loaded)
        newly = [r for r in budget.admitted if r.state == ReqState.WAITING]
        if newly:
            admitted = set(map(id, newly))
            self.waiting = [r for r in self.waiting if id(r) not in admitted]
            for r in newly:
                r.state = ReqState.RUNNING
                r.admitted_time = self.now
                if r.first_admit_time is None:
                    r.first_admit_time = self.now
                r.task.call_running(r.rid)
        for r in budget.admitted:  # allocate the extend KV now (SGLang prepare_for_extend)
            self.pool.alloc_private(r.extend_now)
        return budget.admitted

    def _run_extend(self, batch: list[SimRequest]) -> None:
        compute = self.latency.prefill([(r.extend_now, r.fill_done) for r in batch])
        dt = max(compute, self._pending_transfer_s)  # load-back overlaps the forward layer by layer
        self._pending_transfer_s = 0.0
        self.now += dt
        self.stats.iterations += 1
        self.stats.prefill_iterations += 1
        finished: list[SimRequest] = []
        for r in batch:
            r.service_s += dt
            r.task.attained_s += dt
            r.computed_tokens += r.extend_now
            r.fill_done += r.extend_now
            self.pool.free_private(r.extend_now)  # checkpointed into the tree below
            node, _ = self.cache.insert(truncate_runs(r.fill_runs(), r.fill_done))
            self.cache.lock(node)
            self.cache.unlock(r.lock_node)
            r.lock_node = node
            self.residency.on_insert(r.agent)
            r.extend_now = 0
            if r.fill_done == r.fill_len and r is not self.chunked:
                r.generated += 1  # the last prefill chunk yields the first token
                if r.first_token_time is None:
                    r.first_token_time = self.now
                if r.generated >= r.output_tokens:
                    finished.append(r)
                else:
                    self.running.append(r)
        self._dirty = True  # the cache changed: matches differ
        self._record("prefill", len(batch), sum(r.fill_done for r in batch), dt)
        for r in finished:
            self._finish(r)

    # ------------------------------------------------------------------ decode
    def _run_decode(self) -> None:
        if self.pool.available < len(self.running):
            self._retract()
            if not self.running:
                return
        bs = len(self.running)
        k = min(self.pool.available // bs, min(r.remaining_tokens for r in self.running))
        if not self.cfg.ignore_eos:
            k = 1  # the decaying new-token ratio can change admission at every step
        contexts = [r.prompt_tokens + r.generated for r in self.running]
        ctx0 = sum(contexts) / bs
        means = top_context_means(contexts)  # the step is priced on the whole batch, never below a member alone
        memo = {1: decode_batch_time(self.latency, means)}  # steps -> stretch seconds, this batch
        k = self._limit_to_next_event(k, means, memo)
        dt = self._stretch_time(k, means, memo)
        self.pool.alloc_private(k * bs)
        self.now += dt
        self.stats.iterations += k
        self.stats.decode_steps += k
        if self._ratio_decay > 0:
            self.new_token_ratio = max(self.new_token_ratio - k * self._ratio_decay, self._min_ratio)
        finished = []
        for r in self.running:
            r.generated += k
            r.private_tokens += k
            r.service_s += dt
            r.task.attained_s += dt
            if r.generated >= r.output_tokens:
                finished.append(r)
        self._record("decode", bs, int(ctx0), dt, k)
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in self.running if id(r) not in done]
            for r in finished:
                self._finish(r)

    def _stretch_time(self, k: int, means: list[float], memo: dict[int, float]) -> float:
        """k decode steps of the running batch (`memo[1]`: the step now): trapezoid of the first and
        the last step, each monotone in the batch (`decode_batch_time`), so the stretch is too."""
        t = memo.get(k)
        if t is None:
            t = memo[k] = k * 0.5 * (memo[1] + decode_batch_time(self.latency, means, k - 1))
        return t

    def _limit_to_next_event(self, k: int, means: list[float], memo: dict[int, float]) -> int:
        """Stop the stretch at the iteration during which the next external event happens: the
        least K <= k with stretch(K) >= dt_ext (stretch(K) is non-decreasing in K)."""
        dt_ext = self._next_event_time() - self.now
        if k <= 1 or self._stretch_time(k, means, memo) < dt_ext:
            return max(k, 1)
        lo, hi = 1, k
        # K first <= stretch(K) <= K stretch(k) / k for K <= k (no step is cheaper than the first
        # or dearer than step k) brackets K; both ends are checked, so the answer is the plain
        # bisection's, in fewer steps.
        first, full = memo[1], memo[k]
        if first > 0:
            g = max(1, min(k, int(dt_ext / first) + 1))
            if g < hi and self._stretch_time(g, means, memo) >= dt_ext:
                hi = g
        g = int(dt_ext * k / full) if full > 0 else 0
        if 1 < g < hi and self._stretch_time(g, means, memo) < dt_ext:
            lo = g + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._stretch_time(mid, means, memo) >= dt_ext:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _retract(self) -> None:
        """SGLang `retract_decode`: drop the requests with the least progress until a step fits."""
        keep = sorted(self.running, key=lambda r: (r.generated, -r.prompt_tokens), reverse=True)
        first = True
        while first or self.pool.available < len(keep):
            if len(keep) == 1:
                break
            first = False
            self._release(keep.pop(), preempted=False)
            self.stats.retractions += 1
        if self.pool.available < len(keep):
            raise EngineStall(f"KV pool of {self.cfg.kv_pool_tokens} tokens cannot hold a single running request")
        total_max_new = sum(r.max_new_tokens for r in keep)
        est = (sum(r.generated for r in keep) + self.cfg.retract_decode_steps * len(keep)) / (total_max_new + 1)
        self.new_token_ratio = min(1.0, est)

    # ------------------------------------------------------------------ engine hooks (engine.py)
    def _next_event_time(self) -> float:
        raise NotImplementedError

    def _release(self, r: SimRequest, preempted: bool) -> None:
        raise NotImplementedError

    def _finish(self, r: SimRequest) -> None:
        raise NotImplementedError

    def _record(self, kind: str, batch: int, tokens: int, dt: float, steps: int = 1) -> None:
        raise NotImplementedError
