"""Simulator state after a run -> the engine-neutral `RunRecord` tables (columns: topas/results.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topas.results import RunRecord, request_table, task_table, timeline_table

if TYPE_CHECKING:
    from topas.engines.sim.engine import SimEngine
    from topas.engines.sim.entities import SimRequest, SimTask


def task_row(ts: SimTask) -> dict[str, Any]:
    return {
        "task_id": ts.task.task_id,
        "template": ts.task.template,
        "arrival": ts.task.arrival,
        "finish": ts.finish_time,
        "jct": ts.finish_time - ts.task.arrival,
        "num_calls": len(ts.task.workflow.nodes),
    }


def request_row(r: SimRequest) -> dict[str, Any]:
    return {
        "rid": r.rid,
        "task_id": r.task.task.task_id,
        "node": r.node,
        "agent": r.agent,
        "stage": r.stage,
        "ready": r.ready_time,
        "first_admit": r.first_admit_time,
        "admit": r.admitted_time,
        "first_token": r.first_token_time,
        "finish": r.finish_time,
        "prompt_tokens": r.prompt_tokens,
        "prefix_tokens": r.prefix_tokens,
        "output_tokens": r.generated,
        "prefix_hit_tokens": r.prefix_hit_tokens or 0,
        "host_hit_tokens": r.host_hit_tokens,
        "computed_tokens": r.computed_tokens,
        "preemptions": r.preemptions,
        "service_s": r.service_s,
    }


def engine_counters(e: SimEngine) -> dict[str, Any]:
    bpt = e.cfg.kv_bytes_per_token
    return {
        "backend": "sim",
        "iterations": e.stats.iterations,
        "prefill_iterations": e.stats.prefill_iterations,
        "decode_steps": e.stats.decode_steps,
        "retractions": e.stats.retractions,
        "policy_preemptions": e.stats.preemptions,
        "swap_in_bytes": e.cache.bytes_in_tokens * bpt,
        "swap_out_bytes": e.cache.bytes_out_tokens * bpt,
        "kv_pool_tokens": e.cfg.kv_pool_tokens,
        "max_running_requests": e.cfg.max_running_requests,
    }


def sim_record(e: SimEngine, warmup_fraction: float) -> RunRecord:
    """The run's tables; the timeline rows are the engine's own (`SimEngine._record`)."""
    tasks = task_table((task_row(ts) for ts in e.tasks.values()), warmup_fraction)
    requests = request_table(request_row(r) for r in e.requests)
    return RunRecord(tasks, requests, timeline_table(e.timeline), engine_counters(e), e.stats.decision_wall_s)
