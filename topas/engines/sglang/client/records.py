"""A real SGLang replay -> the engine-neutral `RunRecord` tables (topas/results.py).

Sources, all on the replay clock (seconds after the driver's `t0_wall`):
- the driver's per-call dicts (`driver.CallRecord`): ready, finish, token counts, the
  server's `cached_tokens` (+ `cached_tokens_details`), `num_retractions`;
- the plugin's decision log (`decisions.jsonl`): `admitted` (admission times),
  `preempted` (policy preemptions), `decision` (wall time of `policy.schedule`,
  resident agent prefixes), `start` (KV pool size, max running requests, KV bytes/token);
- the plugin's iteration log (`iterations.jsonl`, `iteration_log.IterationLog`): one row per
  prefill iteration or decode stretch (the timeline) and first-token times.

Column semantics where the real engine differs from the simulator:
- `prefix_hit_tokens`: SGLang's `cached_tokens` served from device memory
  (`cached_tokens_details.device` when reported, else `cached_tokens`); `host_hit_tokens`:
  the host-tier part (HiCache). SGLang accumulates `cached_tokens` over re-admissions
  after a retraction (the simulator counts the first admission).
- `computed_tokens`: prompt - cached_tokens; recompute after a retraction is not
  observable from the client and not included.
- `preemptions`: SGLang's `num_retractions` (decode-OOM retractions and the plugin's
  policy preemptions, which requeue through the same path).
- `service_s`: first admission -> response received (includes time requeued after a
  preemption); `first_token`: end of the prefill iteration that produced the first
  token (iteration log), or the first streamed token (driver `stream`), else NaN.
- timeline `resident_prefixes`: agent prefixes fully on device at the latest decision
  (NaN before the first); `host_tokens` NaN without a host tier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from topas.results import TIMELINE_COLUMNS, RunRecord, mark_warmup
from topas.workflow import Trace

NAN = float("nan")


def _num(x: Any) -> float:
    return NAN if x is None else float(x)


def sglang_record(
    trace: Trace,
    calls: Sequence[Mapping[str, Any]],
    t0_wall: float,
    warmup_fraction: float,
    decisions: Iterable[Mapping[str, Any]] = (),
    iterations: Iterable[Mapping[str, Any]] = (),
    engine: Mapping[str, Any] | None = None,
) -> RunRecord:
    """The run's tables. `trace` is the replayed (possibly scaled) trace; every call of it
    must have a record in `calls` (ValueError otherwise)."""
    decisions = list(decisions)
    iterations = list(iterations)
    by_key = {(int(c["task_id"]), str(c["node"])): c for c in calls}
    missing = [(t.task_id, n) for t in trace.tasks for n in t.workflow.nodes if (t.task_id, n) not in by_key]
    if missing:
        raise ValueError(f"{len(missing)} call(s) of the trace have no result, e.g. task {missing[0][0]} node {missing[0][1]}")
    rids = {str(c["rid"]) for c in calls}

    admits: dict[str, list[float]] = {}
    policy_preempted = 0
    decision_wall: list[float] = []
    resident_at: list[tuple[float, int]] = []
    start_event: dict[str, Any] = {}
    errors = 0
    for d in decisions:
        ev = d.get("event")
        t = float(d.get("t", 0.0)) - t0_wall
        if ev == "admitted":
            for rid in d.get("rids", ()):
                if rid in rids:
                    admits.setdefault(rid, []).append(t)
        elif ev == "preempted":
            policy_preempted += sum(1 for rid in d.get("rids", ()) if rid in rids)
        elif ev == "decision":
            if set(d.get("waiting", ())) & rids or set(d.get("running", ())) & rids:
                decision_wall.append(float(d.get("wall_s", 0.0)))
            resident_at.append((t, len(d.get("resident", ()))))
        elif ev == "start" and not start_event:
            start_event = dict(d)
        elif ev == "error":
            errors += 1

    first_token: dict[str, float] = {}
    rows: list[tuple] = []
    for it in iterations:
        start = float(it["start"]) - t0_wall
        dur = float(it["duration"])
        for rid in it.get("first", ()):
            if rid in rids and rid not in first_token:
                first_token[rid] = start + dur
        if start + dur <= 0:  # warm-up before the replay
            continue
        rows.append(
            (
                start, dur, it["kind"], int(it.get("steps", 1)), int(it.get("batch_size", 0)), _num(it.get("tokens")),
                _num(it.get("kv_used_tokens")), _num(it.get("tree_tokens")), _num(it.get("evictable_tokens")),
                _num(it.get("host_tokens")), NAN, _num(it.get("waiting")), _num(it.get("running")),
            )
        )
    timeline = pd.DataFrame(rows, columns=TIMELINE_COLUMNS).sort_values("start", kind="stable").reset_index(drop=True)
    if len(timeline) and resident_at:
        res = pd.DataFrame(resident_at, columns=["start", "res"]).sort_values("start", kind="stable")
        merged = pd.merge_asof(timeline[["start"]], res, on="start", direction="backward")
        timeline["resident_prefixes"] = merged["res"].astype(float).to_numpy()

    req_rows = []
    for t in trace.tasks:
        wf = t.workflow
        for nid, node in wf.nodes.items():
            c = by_key[(t.task_id, nid)]
            rid = str(c["rid"])
            adm = admits.get(rid, [])
            cached = int(c.get("cached_tokens") or 0)
            dev = c.get("cached_tokens_device")
            host = int(c.get("cached_tokens_host") or 0)
            ft = first_token.get(rid, c.get("first_token"))
            first_admit = min(adm) if adm else NAN
            req_rows.append(
                {
                    "rid": rid,
                    "task_id": t.task_id,
                    "node": nid,
                    "agent": node.agent,
                    "stage": node.stage_id,
                    "ready": float(c["ready"]),
                    "first_admit": first_admit,
                    "admit": max(adm) if adm else NAN,
                    "first_token": _num(ft),
                    "finish": float(c["finish"]),
                    "prompt_tokens": int(c["prompt_tokens"]),
                    "prefix_tokens": int(c["prefix_tokens"]),
                    "output_tokens": int(c["output_tokens"]),
                    "prefix_hit_tokens": int(dev) if dev is not None else cached - host,
                    "host_hit_tokens": host,
                    "computed_tokens": max(int(c["prompt_tokens"]) - cached, 0),
                    "preemptions": int(c.get("num_retractions") or 0),
                    "service_s": float(c["finish"]) - first_admit if adm else NAN,
                }
            )
    requests = pd.DataFrame(req_rows).sort_values(["task_id", "ready", "rid"], kind="stable").reset_index(drop=True)

    fin = requests.groupby("task_id")["finish"].max()
    tasks = pd.DataFrame(
        [
            {
                "task_id": t.task_id,
                "template": t.template,
                "arrival": float(t.arrival),
                "finish": float(fin[t.task_id]),
                "jct": float(fin[t.task_id]) - float(t.arrival),
                "num_calls": len(t.workflow.nodes),
            }
            for t in trace.tasks
        ]
    )

    dec = timeline[timeline["kind"] == "decode"]
    pre = timeline[timeline["kind"] == "prefill"]
    total_retractions = int(requests["preemptions"].sum())
    bpt = start_event.get("bytes_per_token")
    host_hits = int(requests["host_hit_tokens"].sum())
    counters: dict[str, Any] = {
        "backend": "sglang",
        "iterations": int(len(pre) + dec["steps"].sum()),
        "prefill_iterations": int(len(pre)),
        "decode_steps": int(dec["steps"].sum()),
        "retractions": max(total_retractions - policy_preempted, 0),
        "policy_preemptions": policy_preempted,
        "swap_in_bytes": host_hits * int(bpt) if bpt else 0,
        "kv_pool_tokens": start_event.get("kv_capacity_tokens"),
        "max_running_requests": start_event.get("max_running_requests"),
        "kv_bytes_per_token": bpt,
        "requests_served": int(len(requests)),
        "cached_tokens_total": int((requests["prefix_hit_tokens"] + requests["host_hit_tokens"]).sum()),
        "prefill_iteration_s_mean": float(pre["duration"].mean()) if len(pre) else NAN,
        "decode_step_s_mean": float(dec["duration"].sum() / dec["steps"].sum()) if len(dec) else NAN,
        "plugin_errors": errors,
    }
    counters.update(engine or {})
    counters = {k: v for k, v in counters.items() if not (isinstance(v, float) and math.isnan(v)) and v is not None}
    return RunRecord(mark_warmup(tasks, warmup_fraction), requests, timeline, counters, decision_wall)


def per_iteration_latency(timeline: pd.DataFrame) -> dict[str, float]:
    """Mean seconds per prefill iteration and per decode step of a timeline (either engine)."""
    tl = timeline
    pre = tl[tl["kind"] == "prefill"]
    dec = tl[tl["kind"] == "decode"]
    steps = float(dec["steps"].sum())
    return {
        "prefill_iteration_s": float(pre["duration"].mean()) if len(pre) else NAN,
        "decode_step_s": float(dec["duration"].sum() / steps) if steps else NAN,
        "decode_batch_size": float((dec["batch_size"] * dec["steps"]).sum() / steps) if steps else NAN,
        "prefill_iterations": float(len(pre)),
        "decode_steps": steps,
    }
