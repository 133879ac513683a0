"""Simulator state -> the engine-neutral `SchedulerView`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topas.engines.sim.radix import truncate_runs
from topas.policy import SchedulerView

if TYPE_CHECKING:
    from topas.engines.sim.engine import SimEngine


def build_view(e: SimEngine) -> SchedulerView:
    touch = e.cfg.touch_waiting_prefixes
    matches = {}
    # Match the queue tail first so the head ends up most recently used (SGLang refresh order).
    for r in reversed(e.waiting):
        fill = r.prompt_tokens + r.generated
        m = e.cache.match(truncate_runs(r.fill_runs(), fill - 1), touch=touch)
        matches[r.rid] = (m.device_tokens, m.host_tokens)
    waiting = tuple(r.info(*matches[r.rid]) for r in e.waiting)
    running_reqs = e.running + ([e.chunked] if e.chunked is not None else [])
    running = tuple(r.info(r.prefix_hit_tokens or 0) for r in running_reqs)
    in_use = {r.agent for r in running_reqs}
    return SchedulerView(
        now=e.now,
        waiting=waiting,
        running=running,
        tasks={tid: ts.progress() for tid, ts in e.tasks.items() if ts.finish_time is None},
        templates=e.trace.templates,
        prefixes={a: e.residency.state(a, a in in_use) for a in e.residency.agents},
        kv_capacity_tokens=e.cfg.kv_pool_tokens,
        kv_used_tokens=e.pool.used,
        kv_evictable_tokens=e.cache.evictable_tokens,
        host_capacity_tokens=e.cfg.host_pool_tokens,
        host_used_tokens=e.cache.host_tokens,
        max_running_requests=e.cfg.max_running_requests,
        costs=e.costs,
    )
