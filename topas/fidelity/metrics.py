"""The metrics compared between a real-server run and a simulator run of the same trace,
read from their run folders (topas/results.py tables), and their relative errors.

Per task: JCT (steady tasks: the first `warmup_fraction` by arrival excluded, as every
summary does) mean / p50 / p99. Per request: TTFT = first token - ready and end-to-end
latency = finish - ready (ready: the client released the call), mean and p99. Cached
tokens (device prefix hits), retractions (decode-OOM; policy preemptions separately),
mean decode batch size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from topas.results import percentile

# key, label, kind: "rel" = relative error reported; "abs" = counts compared side by side
METRICS: tuple[tuple[str, str, str], ...] = (
    ("jct_mean", "JCT mean (s)", "rel"),
    ("jct_p50", "JCT p50 (s)", "rel"),
    ("jct_p99", "JCT p99 (s)", "rel"),
    ("ttft_mean", "TTFT mean (s)", "rel"),
    ("ttft_p99", "TTFT p99 (s)", "rel"),
    ("e2e_mean", "request latency mean (s)", "rel"),
    ("e2e_p99", "request latency p99 (s)", "rel"),
    ("cached_tokens", "cached tokens", "rel"),
    ("retractions", "retractions", "abs"),
    ("policy_preemptions", "policy preemptions", "abs"),
    ("mean_batch_size", "mean decode batch size", "rel"),
    ("decode_step_ms", "decode step (ms)", "rel"),
    ("prefill_iteration_ms", "prefill iteration (ms)", "rel"),
    ("makespan_s", "makespan (s)", "rel"),
)


def _num(x) -> float:
    return math.nan if x is None else float(x)


def run_metrics(folder: str | Path) -> dict[str, float]:
    """The compared metrics of one run folder."""
    out = Path(folder)
    summary = json.loads((out / "summary.json").read_text())
    req = pd.read_parquet(out / "requests.parquet")
    tl = pd.read_parquet(out / "timeline.parquet")
    ttft = (req["first_token"] - req["ready"]).dropna().to_numpy(dtype=float)
    e2e = (req["finish"] - req["ready"]).to_numpy(dtype=float)
    dec, pre = tl[tl["kind"] == "decode"], tl[tl["kind"] == "prefill"]
    steps = float(dec["steps"].sum())
    return {
        "jct_mean": _num(summary.get("jct_mean")),  # steady tasks, as every summary (topas/results.py)
        "jct_p50": _num(summary.get("jct_p50")),
        "jct_p99": _num(summary.get("jct_p99")),
        "ttft_mean": float(ttft.mean()) if len(ttft) else math.nan,
        "ttft_p99": percentile(ttft, 99),
        "e2e_mean": float(e2e.mean()) if len(e2e) else math.nan,
        "e2e_p99": percentile(e2e, 99),
        "cached_tokens": float(req["prefix_hit_tokens"].sum() + req["host_hit_tokens"].sum()),
        "retractions": float(summary.get("retractions", 0) or 0),
        "policy_preemptions": float(summary.get("policy_preemptions", 0) or 0),
        "mean_batch_size": float(summary.get("mean_batch_size", math.nan)),
        "decode_step_ms": float(dec["duration"].sum() / steps * 1e3) if steps else math.nan,
        "prefill_iteration_ms": float(pre["duration"].mean() * 1e3) if len(pre) else math.nan,
        "makespan_s": float(summary.get("makespan_s", math.nan)),
    }


def rel_err(sim: float, real: float) -> float:
    """(sim - real) / real; NaN when undefined (real 0 or missing)."""
    if real is None or sim is None or math.isnan(real) or math.isnan(sim) or real == 0:
        return 0.0 if real == 0 and sim == 0 else math.nan
    return (sim - real) / real


def spread(values: Sequence[float]) -> float:
    """Run-to-run variation of repeated real runs: (max - min) / mean (NaN with one run)."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if len(xs) < 2:
        return math.nan
    m = float(np.mean(xs))
    return (max(xs) - min(xs)) / m if m else 0.0


def _mean(values: Sequence[float]) -> float:
    xs = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(xs)) if xs else math.nan


def compare(reals: Sequence[Mapping[str, float]], sim: Mapping[str, float],
            sims_scaled: Sequence[Mapping[str, float]] = ()) -> dict[str, dict[str, float]]:
    """metric -> {real: mean over the repeats, noise: their spread, sim / err: the simulator on
    the profile and its error relative to `real`, sim_scaled / err_scaled: the simulator on the
    profile scaled to each repeat's machine speed (calibrate.py), mean of the paired errors}."""
    out = {}
    for key, _, _ in METRICS:
        vals = [r[key] for r in reals]
        real = _mean(vals)
        row = {"real": real, "sim": sim[key], "err": rel_err(sim[key], real), "noise": spread(vals)}
        if sims_scaled:
            row["sim_scaled"] = _mean([x[key] for x in sims_scaled])
            row["err_scaled"] = _mean([rel_err(x[key], r[key]) for x, r in zip(sims_scaled, reals)])
        out[key] = row
    return out


def dependency_violations(folder: str | Path, trace) -> list[str]:
    """Calls that were released before one of their dependencies finished (none in a valid run)."""
    req = pd.read_parquet(Path(folder) / "requests.parquet")
    at = {(int(r.task_id), str(r.node)): r for r in req.itertuples()}
    bad = []
    for t in trace.tasks:
        for nid, node in t.workflow.nodes.items():
            me = at[(t.task_id, nid)]
            for d in node.deps:
                if me.ready < at[(t.task_id, d)].finish - 1e-9:
                    bad.append(f"task {t.task_id} {nid} released {me.ready:.4f} before {d} finished")
    return bad
