"""Simulator state after a run -> the engine-neutral `RunRecord` tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from topas.results import TIMELINE_COLUMNS, RunRecord, mark_warmup

if TYPE_CHECKING:
    from topas.engines.sim.engine import SimEngine


def sim_record(e: SimEngine, warmup_fraction: float) -> RunRecord:
    tasks = pd.DataFrame(
        [
            {
                "task_id": ts.task.task_id,
                "template": ts.task.template,
                "arrival": ts.task.arrival,
                "finish": ts.finish_time,
                "jct": ts.finish_time - ts.task.arrival,
                "num_calls": len(ts.task.workflow.nodes),
            }
            for ts in e.tasks.values()
        ]
    )
    requests = pd.DataFrame(
        [
            {
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
            for r in e.requests
        ]
    ).sort_values(["task_id", "ready", "rid"], kind="stable")
    timeline = pd.DataFrame(e.timeline, columns=TIMELINE_COLUMNS)
    bpt = e.cfg.kv_bytes_per_token
    engine = {
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
    return RunRecord(mark_warmup(tasks, warmup_fraction), requests.reset_index(drop=True), timeline, engine, e.stats.decision_wall_s)
