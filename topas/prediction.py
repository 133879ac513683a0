"""The simulator's prediction of a real run: the same (scaled) trace, model, GPU and policy on
`backend=sim`, configured like the real server where that is known.

- `predict(...)`: one simulated replay -> {sim_jct_mean, sim_jct_p99, sim_makespan_s, sim_latency};
  `record_prediction` writes it beside a finished real run (`sim_prediction.json`; the placement
  worker does so after every real run of a sweep; cheap: the simulator replays a small trace in
  about a second), so `topas.reproduce` tables real vs predicted per run (real_vs_sim.md).
- `estimate_jobs(jobs)`: real seconds per planned sweep job (`topas.reproduce --dry-run` and the
  placement's balancing): the simulator's FCFS makespan of each distinct trace (simulated once,
  whatever the job's policy), stretched by `backend.time_scale`, plus a per-run overhead.

A driver (it runs the simulator through topas.runner): engines never import it.

Latency model: on the CPU profile (tiny model) the latency profile `make fidelity` measured on
this kind of machine (analysis/results/fidelity/profile.json) when present, else roofline; on a
GPU the project's `auto` predictor (aiconfigurator, roofline where it has no data).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CPU_PROFILE = ROOT / "analysis" / "results" / "fidelity" / "profile.json"
RUN_OVERHEAD_S = {"cpu": 6.0, "gpu": 20.0}  # per run: policy switch, cache flush, drain, records
STARTUP_S = {"cpu": 45.0, "gpu": 240.0}  # per server start (CPU: measured here under load; GPU: dummy-weight guess)


def sim_backend(profile: str, pool: int | None = None, max_running: int | None = None):
    from topas.engines.sim.config import SimBackendConfig

    if profile == "cpu":
        prof = CPU_PROFILE if CPU_PROFILE.is_file() else None
        return SimBackendConfig(latency="profile" if prof else "roofline", latency_profile=str(prof) if prof else None,
                                kv_pool_tokens=pool or 4096, max_running_requests=max_running, host_cache_ratio=0.0)
    return SimBackendConfig(latency="auto", kv_pool_tokens=pool, max_running_requests=max_running)


def predict(trace, model, gpu, scheduler, profile: str, pool: int | None = None,
            max_running: int | None = None, warmup_fraction: float = 0.0) -> dict[str, Any]:
    """The simulator on `trace` (already scaled) with `scheduler` (name + params)."""
    from topas.engines.sim.backend import run_sim
    from topas.policy import create_policy
    from topas.results import summarize
    from topas.runner import RunContext

    b = sim_backend(profile, pool, max_running)
    policy = create_policy(scheduler.name, dict(scheduler.params or {}))
    logging.getLogger("topas.engines.latency").setLevel(logging.ERROR)
    ctx = RunContext(b, model, gpu, scheduler, policy, trace, warmup_fraction, Path("/nonexistent"))
    record, _ = run_sim(ctx)
    s = summarize(record)
    return {"sim_jct_mean": s["jct_mean"], "sim_jct_p99": s["jct_p99"], "sim_makespan_s": s["makespan_s"],
            "sim_latency": b.latency}


def _sim_job(job: Sequence[str]) -> tuple[list[str], float]:
    """A job's overrides for the estimate (FCFS, no backend options) and its time_scale."""
    ts, out = 1.0, []
    for o in job:
        k, _, v = o.partition("=")
        k = k.lstrip("+~")
        if k == "backend.time_scale":
            ts = float(v)
        if k.startswith(("backend.", "scheduler", "logger", "experiment_name", "progress", "sweep_manifest")):
            continue
        out.append(o)
    return out + ["scheduler=fcfs", "logger=none"], ts


def estimate_jobs(jobs: Sequence[Sequence[str]], profile: str) -> list[float]:
    """Estimated real seconds of each job (see the module doc)."""
    from dataclasses import replace

    from topas.config import validate
    from topas.engines.latency.specs import load_gpu_spec, load_model_spec
    from topas.engines.sglang.client.backend_config import CPU_DEFAULT_POOL
    from topas.runner import arrival_rate_for
    from topas.sweep import compose_config
    from topas.workloads import build_trace
    from topas.workloads.scaling import auto_token_scale, scale_trace

    cache: dict[str, float] = {}
    out = []
    for job in jobs:
        ov, ts = _sim_job(job)
        key = " ".join(sorted(ov)) + f"|{ts}"
        if key not in cache:
            cfg = compose_config(ov)
            groups = validate(cfg)
            model, gpu, w = load_model_spec(cfg.model), load_gpu_spec(cfg.gpu), groups["workload"]
            trace = build_trace(replace(w, arrival_rate=arrival_rate_for(w, model, gpu)), int(cfg.seed))
            pool = CPU_DEFAULT_POOL if profile == "cpu" else None
            trace = scale_trace(trace, auto_token_scale(trace, model.context_len, pool))
            p = predict(trace, model, gpu, groups["scheduler"], profile, pool)
            last = max((t.arrival for t in trace.tasks), default=0.0)
            span = p["sim_makespan_s"] if math.isfinite(p["sim_makespan_s"]) else last
            cache[key] = span + (ts - 1.0) * last + RUN_OVERHEAD_S[profile]
        out.append(cache[key])
    return out


def record_prediction(cfg, out: Path) -> dict[str, Any]:
    """The prediction of the real run in `out` (its config `cfg`; its summary gives the token
    scale and the server's KV pool), written to `out/sim_prediction.json`; {} (and a warning) if
    it cannot be made: the measurement stands without it."""
    import json
    import sys

    from topas.runner import prepare
    from topas.workloads.scaling import scale_trace

    try:
        s = json.loads((out / "summary.json").read_text())
        plan = prepare(cfg)
        trace = scale_trace(plan.trace, float(s.get("token_scale") or 1.0), float(s.get("time_scale") or 1.0))
        p = predict(trace, plan.model, plan.gpu, plan.groups["scheduler"], str(s.get("profile", "gpu")),
                    s.get("kv_pool_tokens"), s.get("max_running_requests"), plan.groups["workload"].warmup_fraction)
    except Exception as e:  # noqa: BLE001
        print(f"warning: no simulator prediction for {out} ({type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''})", file=sys.stderr)
        return {}
    (out / "sim_prediction.json").write_text(json.dumps(p, indent=1) + "\n")
    return p
