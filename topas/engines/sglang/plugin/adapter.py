"""Translation between SGLang 0.5.23 scheduler state and the engine-neutral policy API:
SGLang state -> `SchedulerView`, `Decision` -> waiting-queue order, pin changes, releases.

Pure functions and small value types; nothing here patches sglang or keeps global
state (that is `hooks.py` / `controller.py`). Importing this module does not import
sglang. The request hints live in `../hints.py`, cache queries and pins in `cache_probe.py`.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topas.engines.sglang.hints import WorkflowHint
from topas.engines.sglang.plugin.cache_probe import CacheProbe
from topas.policy.decision import Decision
from topas.policy.view import CostModel, PrefixState, RequestInfo, SchedulerView, TaskProgress
from topas.workflow import WorkflowTemplate

# ----------------------------------------------------------------------------------------------
# SGLang state -> SchedulerView
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineCapacity:
    kv_pool_tokens: int
    kv_used_tokens: int
    kv_evictable_tokens: int
    host_capacity_tokens: int
    host_used_tokens: int
    max_running_requests: int


def engine_capacity(scheduler: Any, probe: CacheProbe) -> EngineCapacity:
    """Budget figures of a live `Scheduler` (token pool, tree cache, host pool, batch cap)."""
    alloc = scheduler.token_to_kv_pool_allocator
    cap = int(alloc.size)
    used = cap - int(alloc.available_size())
    host_cap = host_used = 0
    cc = getattr(probe.cache, "cache_controller", None)
    host_pool = getattr(cc, "mem_pool_host", None) if cc is not None else None
    if host_pool is not None:
        host_cap = int(getattr(host_pool, "size", 0) or 0)
        try:
            host_used = host_cap - int(host_pool.available_size())
        except Exception:  # noqa: BLE001 - a host pool without the query: report it as empty
            host_used = 0
    return EngineCapacity(
        kv_pool_tokens=cap,
        kv_used_tokens=max(used, 0),
        kv_evictable_tokens=probe.evictable_tokens(),
        host_capacity_tokens=host_cap,
        host_used_tokens=host_used,
        max_running_requests=int(getattr(scheduler, "max_running_requests", 0) or 0),
    )


def req_token_ids(req: Any) -> array:
    """The token sequence a waiting request would match in the tree: prompt plus any
    output kept across a retraction (as `SchedulePolicy` does)."""
    ids = req.origin_input_ids
    out = req.output_ids
    if len(out):
        return array("q", ids) + array("q", out)
    return ids if isinstance(ids, array) else array("q", ids)


def request_info(
    req: Any,
    hint: WorkflowHint,
    *,
    probe: CacheProbe | None,
    ready_time: float,
    running: bool,
    admitted_time: float | None = None,
    chunked: bool = False,
) -> RequestInfo:
    """RequestInfo of one `Req`. Waiting: `cached_tokens` = device-resident match of its
    tokens now (read-only walk, capped at prompt - 1 as SGLang's own match is),
    `host_cached_tokens` = the host tier's extension.
    Running: the prompt is on device (`cached_tokens = prompt_tokens`), except for the
    request being chunk-prefilled, whose `prefix_len` tells how much is done."""
    prompt = len(req.origin_input_ids)
    if running:
        cached = min(int(getattr(req, "prefix_len", 0) or 0), prompt) if chunked else prompt
        host = 0
    elif probe is not None:
        ids = req_token_ids(req)
        extra, salt = getattr(req, "extra_key", None), getattr(req, "cache_salt", None)
        limit = max(prompt - 1, 0)  # SGLang matches at most len(prompt) - 1 (`_compute_max_prefix_len`)
        cached = min(probe.device_tokens(ids, extra, salt), limit)
        host = max(min(probe.host_tokens(ids, extra, salt), limit - cached), 0)
    else:
        cached = host = 0
    return RequestInfo(
        rid=str(req.rid),
        task_id=hint.task_id,
        node=hint.node,
        stage=hint.stage,
        agent=hint.agent,
        task_arrival=hint.task_arrival,
        ready_time=ready_time,
        prompt_tokens=prompt,
        prefix_tokens=min(hint.prefix_tokens, prompt),
        cached_tokens=cached,
        host_cached_tokens=host,
        generated_tokens=len(req.output_ids),
        preemptions=int(getattr(req, "retraction_count", 0) or 0),
        admitted_time=admitted_time if running else None,
        segments=hint.segments,
    )


def prefix_states(
    agents: Mapping[str, int],
    prefix_ids: Mapping[str, Sequence[int]],
    probe: CacheProbe,
    pinned: Iterable[str],
    running: Iterable[RequestInfo],
) -> dict[str, PrefixState]:
    """Residency of every known agent prefix. `agents`: agent -> prefix length (tokens);
    `prefix_ids`: the prefix token ids of agents seen in a request so far (an agent not
    seen yet cannot be resident)."""
    pinned = set(pinned)
    in_use = {r.agent for r in running}
    out: dict[str, PrefixState] = {}
    for agent, n in agents.items():
        ids = prefix_ids.get(agent)
        dev = min(probe.device_tokens(ids), n) if ids else 0
        host = min(probe.host_tokens(ids), n - dev) + dev if ids and probe.has_host_tier else 0
        out[agent] = PrefixState(
            agent=agent, tokens=n, device_tokens=dev, host_tokens=host, pinned=agent in pinned, in_use=agent in in_use
        )
    return out


def task_progress(
    tasks: Mapping[int, TaskRecord], waiting: Iterable[RequestInfo], running: Iterable[RequestInfo], now: float
) -> dict[int, TaskProgress]:
    run_by: dict[int, list[RequestInfo]] = {}
    wait_by: dict[int, list[str]] = {}
    for r in running:
        run_by.setdefault(r.task_id, []).append(r)
    for r in waiting:
        wait_by.setdefault(r.task_id, []).append(r.rid)
    out: dict[int, TaskProgress] = {}
    for tid in set(run_by) | set(wait_by) | {t for t, rec in tasks.items() if not rec.done}:
        rec = tasks.get(tid)
        if rec is None:
            continue
        running_here = run_by.get(tid, [])
        attained = rec.attained_service + sum(
            max(0.0, now - r.admitted_time) for r in running_here if r.admitted_time is not None
        )
        out[tid] = TaskProgress(
            task_id=tid,
            template=rec.template,
            arrival=rec.arrival,
            finished_nodes=tuple(rec.finished_nodes),
            stage_done=dict(rec.stage_done),
            running=tuple(r.rid for r in running_here),
            waiting=tuple(wait_by.get(tid, ())),
            attained_service=attained,
        )
    return out


@dataclass
class TaskRecord:
    """What the plugin has learned about one task from its requests (realized facts only)."""

    task_id: int
    template: str
    arrival: float
    finished_nodes: list[str] = field(default_factory=list)
    stage_done: dict[str, int] = field(default_factory=dict)
    attained_service: float = 0.0  # seconds of finished calls' service
    done: bool = False  # no request of it waiting or running (may get more later)


def build_view(
    *,
    now: float,
    waiting: Sequence[RequestInfo],
    running: Sequence[RequestInfo],
    tasks: Mapping[int, TaskRecord],
    templates: Mapping[str, WorkflowTemplate],
    prefixes: Mapping[str, PrefixState],
    capacity: EngineCapacity,
    costs: CostModel,
) -> SchedulerView:
    return SchedulerView(
        now=now,
        waiting=tuple(sorted(waiting, key=lambda r: (r.ready_time, r.rid))),
        running=tuple(running),
        tasks=task_progress(tasks, waiting, running, now),
        templates=dict(templates),
        prefixes=dict(prefixes),
        kv_pool_tokens=capacity.kv_pool_tokens,
        kv_used_tokens=capacity.kv_used_tokens,
        kv_evictable_tokens=capacity.kv_evictable_tokens,
        host_capacity_tokens=capacity.host_capacity_tokens,
        host_used_tokens=capacity.host_used_tokens,
        max_running_requests=capacity.max_running_requests,
        costs=costs,
    )


# ----------------------------------------------------------------------------------------------
# Decision -> SGLang
# ----------------------------------------------------------------------------------------------


def order_waiting_queue(
    waiting: Sequence[Any], decision: Decision, visible: Iterable[str]
) -> tuple[list[Any], list[Any]]:
    """Split SGLang's waiting queue (a list of `Req`) into (the queue SGLang walks now,
    the requests held back this pass).

    - Requests the policy cannot see (no workflow hint: warm-up, health checks, other
      clients) come first, in their queue order: the plugin does not starve them.
    - Then the admitted requests in `decision.admit` order (stale rids are ignored).
    - Every visible request the decision does not admit is held back.
    """
    visible = set(visible)
    by_rid = {str(r.rid): r for r in waiting}
    foreign = [r for r in waiting if str(r.rid) not in visible]
    admitted = [by_rid[rid] for rid in decision.admit if rid in by_rid and rid in visible]
    chosen = {id(r) for r in admitted}
    held = [r for r in waiting if str(r.rid) in visible and id(r) not in chosen]
    return foreign + admitted, held


def restore_order(queue_now: Sequence[Any], held: Sequence[Any], original: Sequence[Any]) -> list[Any]:
    """The waiting queue after a pass: what SGLang left waiting plus the held-back
    requests, in the order of the queue before the pass (new arrivals and requeued
    preemptions, unknown to `original`, stay at the end in SGLang's order)."""
    pos = {id(r): i for i, r in enumerate(original)}
    merged = list(queue_now) + [r for r in held if id(r) not in {id(x) for x in queue_now}]
    return sorted(merged, key=lambda r: pos.get(id(r), math.inf))


def pin_changes(current: Iterable[str], wanted: frozenset[str] | None, offload: Iterable[str], drop: Iterable[str]) -> tuple[set[str], set[str]]:
    """(agents to pin now, agents to unpin now). `wanted=None` (no opinion: the engine's
    LRU decides) releases every pin the plugin holds."""
    current = set(current)
    if wanted is None:
        return set(), current
    release = set(offload) | set(drop)
    return set(wanted) - current - release, (current - set(wanted)) | (current & release)


def release_running(scheduler: Any, batch: Any, rids: Iterable[str]) -> list[Any]:
    """Release the running requests named by `rids` and put them back into the waiting
    queue (generated tokens kept; their KV is recomputed), mirroring
    `PrefillAdder.preempt_to_schedule`. The chunked request and beam groups are never
    released. Returns the released `Req`s."""
    want = set(rids)
    chunked = getattr(scheduler, "chunked_req", None)
    reqs = list(batch.reqs)
    victims = [
        i for i, r in enumerate(reqs)
        if str(r.rid) in want and not r.finished() and r is not chunked and getattr(r, "beam_group", None) is None
    ]
    if not victims:
        return []
    keep = [i for i in range(len(reqs)) if i not in set(victims)]
    released = []
    for n, i in enumerate(victims):
        batch.release_req(i, len(reqs) - n - 1)
        released.append(reqs[i])
    batch.filter_batch(keep_indices=keep)
    batch.batch_is_full = False
    for r in released:
        scheduler._add_request_to_queue(r, is_retracted=True)
    return released
