"""A real SGLang replay -> the engine-neutral `RunRecord` tables (topas/results.py).

Sources, all on the replay clock (seconds after the driver's `t0_wall`):
- the driver's per-call dicts (`driver.CallRecord`): ready, finish, token counts, the
  server's `cached_tokens` (+ `cached_tokens_details`), `num_retractions`;
- the plugin's decision log (`decisions.jsonl`): `admitted` (admission times),
  `preempted` (policy preemptions), `decision` (wall time of `policy.schedule`,
  resident agent prefixes), `start` (KV pool size, max running requests, KV bytes/token);
- the plugin's iteration log (`iterations.jsonl`, `iteration_log.IterationLog`): one row per
  prefill iteration or decode stretch (the timeline) and first-token times.

Column meanings, with where the real engine differs from the simulator: `topas/results.py`
(`TASKS`, `REQUESTS`, `TIMELINE`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from topas.results import RunRecord, request_table, task_table, timeline_table
from topas.workflow import Task, Trace

NAN = float("nan")


def _num(x: Any) -> float:
    return NAN if x is None else float(x)


@dataclass
class DecisionFacts:
    """What the plugin's decision log says about the replay's requests (times on the replay clock)."""

    admits: dict[str, list[float]] = field(default_factory=dict)  # rid -> its admission times
    policy_preempted: int = 0  # policy preemptions of the replay's requests
    decision_wall: list[float] = field(default_factory=list)  # wall time of each decision about them
    resident_at: list[tuple[float, int]] = field(default_factory=list)  # (time, resident agent prefixes)
    start_event: dict[str, Any] = field(default_factory=dict)  # the plugin's first `start` event
    errors: int = 0  # plugin errors


def read_decisions(decisions: Iterable[Mapping[str, Any]], rids: set[str], t0_wall: float) -> DecisionFacts:
    facts = DecisionFacts()
    for d in decisions:
        ev = d.get("event")
        t = float(d.get("t", 0.0)) - t0_wall
        if ev == "admitted":
            for rid in d.get("rids", ()):
                if rid in rids:
                    facts.admits.setdefault(rid, []).append(t)
        elif ev == "preempted":
            facts.policy_preempted += sum(1 for rid in d.get("rids", ()) if rid in rids)
        elif ev == "decision":
            if set(d.get("waiting", ())) & rids or set(d.get("running", ())) & rids:
                facts.decision_wall.append(float(d.get("wall_s", 0.0)))
            facts.resident_at.append((t, len(d.get("resident", ()))))
        elif ev == "start" and not facts.start_event:
            facts.start_event = dict(d)
        elif ev == "error":
            facts.errors += 1
    return facts


def first_token_times(iterations: Sequence[Mapping[str, Any]], rids: set[str], t0_wall: float) -> dict[str, float]:
    """rid -> end of the prefill iteration that produced its first token (replay clock)."""
    first: dict[str, float] = {}
    for it in iterations:
        end = float(it["start"]) - t0_wall + float(it["duration"])
        for rid in it.get("first", ()):
            if rid in rids and rid not in first:
                first[rid] = end
    return first


def timeline_row(it: Mapping[str, Any], t0_wall: float) -> dict[str, Any]:
    """One iteration-log record as a timeline row; `resident_prefixes` comes from the decisions."""
    return {
        "start": float(it["start"]) - t0_wall,
        "duration": float(it["duration"]),
        "kind": it["kind"],
        "steps": int(it.get("steps", 1)),
        "batch_size": int(it.get("batch_size", 0)),
        **{k: _num(it.get(k)) for k in ("tokens", "kv_used_tokens", "tree_tokens", "evictable_tokens", "host_tokens")},
        "resident_prefixes": NAN,
        "waiting": _num(it.get("waiting")),
        "running": _num(it.get("running")),
    }


def build_timeline(iterations: Sequence[Mapping[str, Any]], t0_wall: float,
                   resident_at: Sequence[tuple[float, int]]) -> pd.DataFrame:
    """The replay's iterations (warm-up before it dropped), by start; resident prefixes as of
    the latest decision."""
    rows = [row for row in (timeline_row(it, t0_wall) for it in iterations) if row["start"] + row["duration"] > 0]
    timeline = timeline_table(rows).sort_values("start", kind="stable").reset_index(drop=True)
    if len(timeline) and resident_at:
        res = pd.DataFrame(resident_at, columns=["start", "res"]).sort_values("start", kind="stable")
        merged = pd.merge_asof(timeline[["start"]], res, on="start", direction="backward")
        timeline["resident_prefixes"] = merged["res"].astype(float).to_numpy()
    return timeline


def request_row(task: Task, nid: str, c: Mapping[str, Any], admits: Sequence[float],
                first_token: float | None) -> dict[str, Any]:
    """Call `nid` of `task`, with the driver's result `c` and its admission times."""
    cached = int(c.get("cached_tokens") or 0)
    dev = c.get("cached_tokens_device")
    host = int(c.get("cached_tokens_host") or 0)
    first_admit = min(admits) if admits else NAN
    return {
        "rid": str(c["rid"]),
        "task_id": task.task_id,
        "node": nid,
        "agent": task.workflow.nodes[nid].agent,
        "stage": task.workflow.nodes[nid].stage_id,
        "ready": float(c["ready"]),
        "first_admit": first_admit,
        "admit": max(admits) if admits else NAN,
        "first_token": _num(first_token),
        "finish": float(c["finish"]),
        "prompt_tokens": int(c["prompt_tokens"]),
        "prefix_tokens": int(c["prefix_tokens"]),
        "output_tokens": int(c["output_tokens"]),
        "prefix_hit_tokens": int(dev) if dev is not None else cached - host,
        "host_hit_tokens": host,
        "computed_tokens": max(int(c["prompt_tokens"]) - cached, 0),
        "preemptions": int(c.get("num_retractions") or 0),
        "service_s": float(c["finish"]) - first_admit if admits else NAN,
    }


def request_rows(trace: Trace, by_key: Mapping[tuple[int, str], Mapping[str, Any]], admits: Mapping[str, list[float]],
                 first_token: Mapping[str, float]) -> Iterator[dict[str, Any]]:
    """Every call of the trace, in trace order; the first token from the iteration log, else the driver's."""
    for t in trace.tasks:
        for nid in t.workflow.nodes:
            c = by_key[(t.task_id, nid)]
            rid = str(c["rid"])
            yield request_row(t, nid, c, admits.get(rid, []), first_token.get(rid, c.get("first_token")))


def task_rows(trace: Trace, requests: pd.DataFrame) -> list[dict[str, Any]]:
    fin = requests.groupby("task_id")["finish"].max()
    return [
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


def engine_counters(timeline: pd.DataFrame, requests: pd.DataFrame, facts: DecisionFacts) -> dict[str, Any]:
    """The summary's engine counters (those the run could not observe left out)."""
    dec = timeline[timeline["kind"] == "decode"]
    pre = timeline[timeline["kind"] == "prefill"]
    total_retractions = int(requests["preemptions"].sum())
    bpt = facts.start_event.get("bytes_per_token")
    host_hits = int(requests["host_hit_tokens"].sum())
    return {
        "backend": "sglang",
        "iterations": int(len(pre) + dec["steps"].sum()),
        "prefill_iterations": int(len(pre)),
        "decode_steps": int(dec["steps"].sum()),
        "retractions": max(total_retractions - facts.policy_preempted, 0),
        "policy_preemptions": facts.policy_preempted,
        "swap_in_bytes": host_hits * int(bpt) if bpt else 0,
        "kv_pool_tokens": facts.start_event.get("kv_pool_tokens"),
        "max_running_requests": facts.start_event.get("max_running_requests"),
        "kv_bytes_per_token": bpt,
        "requests_served": int(len(requests)),
        "cached_tokens_total": int((requests["prefix_hit_tokens"] + requests["host_hit_tokens"]).sum()),
        "prefill_iteration_s_mean": float(pre["duration"].mean()) if len(pre) else NAN,
        "decode_step_s_mean": float(dec["duration"].sum() / dec["steps"].sum()) if len(dec) else NAN,
        "plugin_errors": facts.errors,
    }


def calls_by_key(trace: Trace, calls: Sequence[Mapping[str, Any]]) -> dict[tuple[int, str], Mapping[str, Any]]:
    """(task id, node) -> the driver's result; ValueError if a call of the trace has none."""
    by_key = {(int(c["task_id"]), str(c["node"])): c for c in calls}
    missing = [(t.task_id, n) for t in trace.tasks for n in t.workflow.nodes if (t.task_id, n) not in by_key]
    if missing:
        raise ValueError(f"{len(missing)} call(s) of the trace have no result, e.g. task {missing[0][0]} node {missing[0][1]}")
    return by_key


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
    iterations = list(iterations)
    by_key = calls_by_key(trace, calls)
    rids = {str(c["rid"]) for c in calls}
    facts = read_decisions(decisions, rids, t0_wall)
    first_token = first_token_times(iterations, rids, t0_wall)
    timeline = build_timeline(iterations, t0_wall, facts.resident_at)
    requests = request_table(request_rows(trace, by_key, facts.admits, first_token))
    tasks = task_table(task_rows(trace, requests), warmup_fraction)
    counters = {**engine_counters(timeline, requests, facts), **(engine or {})}
    counters = {k: v for k, v in counters.items() if not (isinstance(v, float) and math.isnan(v)) and v is not None}
    return RunRecord(tasks, requests, timeline, counters, facts.decision_wall)


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
