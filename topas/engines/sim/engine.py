"""Discrete-event simulator of one SGLang server running multi-agent workflows.

The loop mirrors SGLang's `get_next_batch_to_run` without mixed chunk (the default):
each iteration is either an extend (prefill) batch, formed by walking the policy's
admission list under SGLang's prefill budget, or one decode step of every running
request; prefill has priority. Decode-only stretches in which nothing can change
(no finish, no memory exhaustion, no external event, admission outcome constant)
are advanced in one step: with ignore_eos clients the admission budget is invariant
under decoding (free tokens and reservations fall together), so this is exact.

External events (task arrivals, calls issued after a tool gap) live in a heap with a
sequence number for deterministic tie-breaking; the same trace and seed give the same
results byte for byte. The policy is consulted when something changed since its last
decision (a request became ready, finished, completed its prefill, was retracted);
otherwise its last decision is reused, like the SGLang plugin does.

This module holds the event loop, the decisions and the request bookkeeping (release, finish,
records); what one iteration does (batch forming, extend, decode stretches, retraction) is
iteration.py, mixed in.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import time as wallclock
from collections.abc import Callable
from typing import Any

from topas.engines.latency.base import LatencyModel
from topas.engines.sim.admission import KVPool
from topas.engines.sim.config import SimEngineConfig
from topas.engines.sim.entities import ReqState, SimRequest, SimStats, SimTask, make_request
from topas.engines.sim.iteration import EngineStall, Iterations
from topas.engines.sim.radix import RadixCache, truncate_runs
from topas.engines.sim.residency import PrefixResidency
from topas.engines.sim.view import waiting_infos
from topas.policy import Decision, Policy, RequestFinished, RequestReady, SchedulerView, TaskArrived
from topas.workflow import Trace

_ARRIVAL, _READY, _RELEASE = 0, 1, 2


class SimEngine(Iterations):
    def __init__(self, cfg: SimEngineConfig, latency: LatencyModel, policy: Policy, trace: Trace, costs) -> None:
        self.cfg = cfg
        self.latency = latency
        self.policy = policy
        self.trace = trace
        self.costs = costs
        self.cache = RadixCache(cfg.kv_pool_tokens, cfg.host_pool_tokens)
        self.pool = KVPool(cfg.kv_pool_tokens, self.cache)
        self.residency = PrefixResidency(self.cache, self.pool, trace.agents)
        self.now = 0.0
        self.events: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        self.tasks: dict[int, SimTask] = {}
        self.waiting: list[SimRequest] = []  # SGLang waiting queue (entry order)
        self.running: list[SimRequest] = []  # decoding
        self.chunked: SimRequest | None = None  # the one request mid chunked prefill
        self.requests: list[SimRequest] = []
        self.timeline: list[dict[str, Any]] = []
        self.stats = SimStats()
        self.new_token_ratio = min(cfg.init_new_token_ratio, 1.0)
        self._min_ratio = self.new_token_ratio * cfg.min_new_token_ratio_factor
        self._ratio_decay = (self.new_token_ratio - self._min_ratio) / cfg.new_token_ratio_decay_steps
        self._decision: Decision | None = None
        self._dirty = True
        self._pending_transfer_s = 0.0
        self._client_free = float("-inf")  # when the client can send its next call
        self.tasks_done = 0
        for t in trace.tasks:
            self._push(t.arrival, _ARRIVAL, t)

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, payload: object) -> None:
        heapq.heappush(self.events, (t, next(self._seq), kind, payload))

    def _next_event_time(self) -> float:
        return self.events[0][0] if self.events else float("inf")

    def _process_due_events(self) -> None:
        while self.events and self.events[0][0] <= self.now:
            t, _, kind, payload = heapq.heappop(self.events)
            if kind == _ARRIVAL:
                ts = SimTask(payload)  # type: ignore[arg-type]
                self.tasks[ts.task.task_id] = ts
                self.policy.on_event(TaskArrived(t, ts.task.task_id, ts.task.template))
                for n in ts.task.workflow.topo_order:
                    if ts.pending_deps[n] == 0:
                        self._issue(ts, n, t)
            elif kind == _RELEASE:
                ts, node_id = payload  # type: ignore[misc]
                sent = max(t, self._client_free)  # one call at a time, in release order
                self._client_free = sent + self.cfg.client.dispatch_s(self._prompt(ts, node_id))
                self._submit(ts, node_id, sent)
            else:
                ts, node_id, released = payload  # type: ignore[misc]
                req = make_request(ts, node_id, released, self.cfg.ignore_eos, self.cfg.max_new_tokens_cap)
                self.requests.append(req)
                self.waiting.append(req)
                ts.call_waiting(req.rid)
                self._dirty = True
                self.policy.on_event(RequestReady(t, req.info()))

    def _issue(self, ts: SimTask, node_id: str, t: float) -> None:
        """The client releases the call after its gap (its ready time); a serial client
        (`ClientPath.dispatch`) sends the calls released before it first."""
        released = t + ts.task.workflow.nodes[node_id].gap_s
        if self.cfg.client.serial:
            self._push(released, _RELEASE, (ts, node_id))
        else:
            self._submit(ts, node_id, released)

    def _submit(self, ts: SimTask, node_id: str, released: float) -> None:
        """The released call enters the waiting queue `ClientPath.submit` later."""
        self._push(released + self.cfg.client.submit_s(self._prompt(ts, node_id)), _READY, (ts, node_id, released))

    def _prompt(self, ts: SimTask, node_id: str) -> int:
        return ts.task.workflow.prompt_tokens(node_id) if self.cfg.client.per_token else 0

    # ------------------------------------------------------------------ main loop
    def run(self, progress: Callable[[int], None] | None = None) -> None:
        """Run until every task has finished (drain). `progress(n)` is told each finished task."""
        # The trace, configs and imported modules live for the whole run: frozen, the collector stops
        # re-scanning them (a full collection of them took ~60 ms, inside whichever step or decision
        # triggered it). Only timing changes; nothing in a run depends on when collections happen.
        gc.collect()
        gc.freeze()
        try:
            self._loop(progress)
        finally:
            gc.unfreeze()

    def _loop(self, progress: Callable[[int], None] | None) -> None:
        start = wallclock.perf_counter()
        while True:
            self._process_due_events()
            if self._dirty and (self.waiting or self.running):
                self._decide()
            done_before = self.tasks_done
            if not self._step():
                if not self.events:
                    break
                self.now = max(self.now, self._next_event_time())  # idle until the next arrival
            if progress is not None and self.tasks_done != done_before:
                progress(self.tasks_done - done_before)
        if self.tasks_done < len(self.trace.tasks):
            raise EngineStall(self._stall_reason())
        self.stats.wall_s = wallclock.perf_counter() - start

    def _stall_reason(self) -> str:
        if self.waiting and not self.running and not self.chunked:
            r = self.waiting[0]
            return (
                f"engine stalled with {len(self.waiting)} waiting request(s) and nothing running: "
                f"policy '{self.policy.name}' admitted none that fits (first waiting {r.rid}: "
                f"{r.prompt_tokens} prompt tokens, KV pool {self.cfg.kv_pool_tokens})"
            )
        return "engine stalled"

    def _decide(self) -> None:
        view = self.view()
        t0 = wallclock.perf_counter()
        decision = self.policy.schedule(view)
        self.stats.decision_wall_s.append(wallclock.perf_counter() - t0)
        self.stats.decisions += 1
        self.now += self.cfg.decision_cost_s
        self._decision = decision
        self._dirty = False
        for rid in decision.preempt:
            req = next((r for r in self.running if r.rid == rid), None)
            if req is not None:
                self._release(req, preempted=True)
                self.stats.preemptions += 1
        self._pending_transfer_s += self.residency.apply(decision, self.cfg)

    def _step(self) -> bool:
        """Run one iteration (or a decode stretch). False if there was nothing to run."""
        batch = self._form_prefill_batch()
        if batch:
            self._run_extend(batch)
            return True
        if self.running:
            self._run_decode()
            return True
        return False

    # ------------------------------------------------------------------ requests leaving the batch
    def _release(self, r: SimRequest, preempted: bool) -> None:
        """Back to the waiting queue; its prompt stays cached (unlocked), decode KV is freed."""
        self.pool.free_private(r.private_tokens)
        r.private_tokens = 0
        if r.lock_node is not None:
            self.cache.unlock(r.lock_node)
            r.lock_node = None
        if r in self.running:
            self.running.remove(r)
        if r is self.chunked:
            self.chunked = None
        r.state = ReqState.WAITING
        r.preemptions += 1
        r.fill_done = 0
        r.task.call_waiting(r.rid)
        self.waiting.append(r)
        self._dirty = True

    def _finish(self, r: SimRequest) -> None:
        # Checkpoint prompt + output (the last token has no KV yet) and unpin.
        owned = r.prompt_tokens + r.generated - 1
        runs = truncate_runs(r.prompt_runs + [(r.out_segment, 0, r.generated)], owned)
        self.pool.free_private(r.private_tokens)
        r.private_tokens = 0
        self.cache.insert(runs)
        if r.lock_node is not None:
            self.cache.unlock(r.lock_node)
            r.lock_node = None
        r.state = ReqState.FINISHED
        seen = self.now + self.cfg.client.return_  # when the client has the answer
        r.finish_time = seen
        ts = r.task
        ts.call_finished(r.rid, r.node, r.stage)
        if ts.done:
            ts.finish_time = seen
            self.tasks_done += 1
        else:
            for child in ts.task.workflow.children[r.node]:
                ts.pending_deps[child] -= 1
                if ts.pending_deps[child] == 0:
                    self._issue(ts, child, seen)
        self._dirty = True
        self.policy.on_event(
            RequestFinished(self.now, r.info(), r.generated, self.now - (r.admitted_time or self.now), ts.done)
        )

    # ------------------------------------------------------------------ records
    def _record(self, kind: str, batch: int, tokens: int, dt: float, steps: int = 1) -> None:
        """One timeline row (`topas.results.TIMELINE`): the iteration or decode stretch that just ended."""
        self.timeline.append({
            "start": self.now - dt,
            "duration": dt,
            "kind": kind,
            "steps": steps,
            "batch_size": batch,
            "tokens": tokens,
            "kv_used_tokens": self.pool.used,
            "tree_tokens": self.cache.device_tokens,
            "evictable_tokens": self.cache.evictable_tokens,
            "host_tokens": self.cache.host_tokens,
            "resident_prefixes": self.residency.resident_count(),
            "waiting": len(self.waiting),
            "running": len(self.running),
        })
        assert self.pool.used <= self.cfg.kv_pool_tokens, "KV pool exceeded"

    def view(self) -> SchedulerView:
        """The engine-neutral view of this state (docs/policy_contract.md)."""
        previous = self._decision.admit if self._decision is not None else ()
        waiting = waiting_infos(self.cache, self.waiting, self.policy, previous, self.cfg.touch_waiting_prefixes)
        running_reqs = self.running + ([self.chunked] if self.chunked is not None else [])
        running = tuple(r.info(r.prefix_hit_tokens or 0) for r in running_reqs)
        in_use = {r.agent for r in running_reqs}
        return SchedulerView(
            now=self.now,
            waiting=waiting,
            running=running,
            tasks={tid: ts.progress() for tid, ts in self.tasks.items() if ts.finish_time is None},
            templates=self.trace.templates,
            prefixes={a: self.residency.state(a, a in in_use) for a in self.residency.agents},
            kv_pool_tokens=self.cfg.kv_pool_tokens,
            kv_used_tokens=self.pool.used,
            kv_evictable_tokens=self.cache.evictable_tokens,
            host_capacity_tokens=self.cfg.host_pool_tokens,
            host_used_tokens=self.cache.host_tokens,
            max_running_requests=self.cfg.max_running_requests,
            costs=self.costs,
        )
