"""Machine speed during a real run, relative to the latency profile, and the profile scaled by it.

This 2-core machine is shared: the same decode batch, measured every few seconds on an idle
server, varied between -15% and +60% of its median over minutes (analysis/results/fidelity/).
A profile measured a few minutes before a run therefore carries the machine's speed at
profiling time. To separate that drift from the simulator's modelling (batching, chunked
prefill, the radix cache, admission, queueing, the client path), each real run gets a
second simulator run whose profile is scaled to the speed the machine had during that run:

    decode factor  = sum of the run's decode-stretch durations / sum over them of
                     steps x profile.decode(batch, mid-stretch context)
    prefill factor = sum of its prefill-iteration durations / sum of profile.prefill(...)
                     for the same batch size, extend and cached tokens

Only per-iteration latencies enter (the simulator's input); JCT, TTFT, request latency,
batch sizes, cache hits and retractions (its outputs) do not.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from topas.engines.latency.measured import ProfileLatency


def run_iterations(folder: str | Path) -> list[dict[str, Any]]:
    """The plugin's iteration records of a real run folder, without the server's warm-up
    (the last as many records as the run's timeline has rows)."""
    from topas.engines.sglang.jsonl import read_jsonl

    out = Path(folder)
    rows = len(pd.read_parquet(out / "timeline.parquet"))
    recs = read_jsonl(out / "iterations.jsonl")
    return recs[-rows:] if rows else []


def speed_factors(folder: str | Path, latency: ProfileLatency) -> dict[str, float]:
    """{"prefill": f, "decode": f}: measured / predicted iteration time over a real run."""
    meas = {"prefill": 0.0, "decode": 0.0}
    pred = {"prefill": 0.0, "decode": 0.0}
    for it in run_iterations(folder):
        n = max(int(it.get("batch_size") or 1), 1)
        if it["kind"] == "decode":
            steps = int(it.get("steps") or 1)
            ctx = float(it.get("tokens") or 1) + (steps - 1) / 2
            meas["decode"] += float(it["duration"])
            pred["decode"] += steps * latency.decode(n, int(ctx))
        elif it["kind"] == "prefill" and it.get("extend_tokens"):
            e = int(it["extend_tokens"])
            p = max(int(it.get("tokens") or e) - e, 0)
            meas["prefill"] += float(it["duration"])
            pred["prefill"] += latency.prefill([(max(e // n, 1), p // n)] * n)
    return {k: (meas[k] / pred[k] if pred[k] > 0 else 1.0) for k in meas}


def scaled_profile(data: Mapping[str, Any], factors: Mapping[str, float]) -> dict[str, Any]:
    """A copy of a profile (JSON object) with its prefill times (table, batch term, overhead)
    x factors["prefill"] and its decode times x factors["decode"]; the client round trip unchanged."""
    d = copy.deepcopy(dict(data))
    fp, fd = float(factors["prefill"]), float(factors["decode"])
    d["prefill"]["seconds"] = [[None if v is None else v * fp for v in row] for row in d["prefill"]["seconds"]]
    d["decode"]["seconds"] = [[None if v is None else v * fd for v in row] for row in d["decode"]["seconds"]]
    if "prefill_batch_shared_s" in d:
        d["prefill_batch_shared_s"] = float(d["prefill_batch_shared_s"]) * fp
    over = dict(d.get("overhead_s") or {})
    if over:
        d["overhead_s"] = {"prefill": float(over.get("prefill", 0.0)) * fp, "decode": float(over.get("decode", 0.0)) * fd}
    d.setdefault("meta", {})["scaled"] = {"prefill": fp, "decode": fd}
    return d


def write_scaled_profile(profile: str | Path, run: str | Path, out: str | Path) -> tuple[Path, dict[str, float]]:
    """The profile scaled to the machine's speed during `run`, written to `out`."""
    data = json.loads(Path(profile).read_text())
    factors = speed_factors(run, ProfileLatency(data, source=str(profile)))
    Path(out).write_text(json.dumps(scaled_profile(data, factors), indent=1) + "\n")
    return Path(out), factors
