"""One fidelity validation: the real SGLang server and the simulator configured like it, on
identical traces, for a set of workloads x policies (`python -m topas.fidelity`).

1. Traces: each workload's trace is built once (seeded), scaled to the server's model
   (`token_scale`: the tiny CPU model has a 4096-token context and KV pool) and written to
   `<runs>/<workload>/trace.jsonl`; both engines replay that file (`workload=trace`).
2. Profile: unless a file is given, `topas.engines.sglang.tools.profiler` measures a server
   started with exactly the options of the real runs' server (model, KV pool, flags):
   iteration latency over a grid, the batch sharing term and the client round trip.
3. Real runs: `backend=sglang`, one server kept for all of them (`reuse_server`: the policy
   is switched in place, the prefix cache flushed between runs), `repeats` times per
   (workload, policy), interleaved (`run_order`): repeat-major so that slow drift of the
   machine spreads evenly, and the scheduler order rotated per repeat (repeat k starts at
   scheduler k mod n) so that no scheduler always runs first, or always after the same
   one. One warm-up run comes first (the first workload x the first scheduler, into
   `<runs>/warmup/`, not recorded): the first replay on a fresh server is slower.
   The policy inside the server gets the profile as its cost model, as in the simulator.
4. Simulator runs: `backend=sim backend.latency=profile` on the profile, with the real
   server's KV pool, max running requests, chunked prefill size and max prefill tokens
   (read from the server), no host tier (none on CPU), and the profile's client round trip;
   then one more per real run, on the profile scaled to the machine speed measured during
   that run (calibrate.py: the shared machine's speed drifts by tens of percent).
5. Comparison (metrics.py): per cell, the simulator's error; between schedulers
   (differences.py), the paired change of mean JCT vs FCFS and vs the best baseline, real
   (with its CI over the repeats) and simulated (`differences` in the result): the harness's
   verdicts rest on those differences. The report (report.py). The result records the
   fingerprint of the simulator and policy code it measured and when (`code_stamp`), so a
   later report can tell whether it is still the code of the day (analysis/fidelity_status.py).

Every run is an ordinary run folder: `<runs>/<workload>/<policy>/real<k>/`, `.../sim/` and
`.../sim_scaled<k>/` (its scaled profile beside it as `profile_scaled<k>.json`), and `<runs>/warmup/`.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class WorkloadSpec:
    name: str  # conf/workload/<name>.yaml
    token_scale: float
    num_tasks: int
    arrival_rate: float  # tasks/s (Poisson, seeded)


# Sized for the tiny CPU model (4096-token context and KV pool) on 2 cores: ~20-25 s per real
# run, with queueing and prefix-cache pressure that make the policies' choices differ (at
# token scale 0.2 the dag4 prefixes alone take 80% of the pool; metagpt_tl at 0.1 keeps calls
# of up to ~1.5k tokens), below saturation (near it the real server's run-to-run noise explodes).
CPU_WORKLOADS = {
    "dag4": WorkloadSpec("dag4", 0.2, 40, 2.0),
    "metagpt_tl": WorkloadSpec("metagpt_tl", 0.1, 16, 1.0),
}
# A real model on one GPU (dummy weights), unscaled traces (not run yet: no GPU here). dag4:
# 16 tasks at 0.5 tasks/s, ~40-60 s per replay with Qwen2.5-7B (the GPU check's fidelity mode,
# with a 30k-token KV pool); metagpt_tl: 19 sequential calls and ~5.7k output tokens per task,
# minutes per task, for a longer window than the GPU check's.
GPU_WORKLOADS = {
    "dag4": WorkloadSpec("dag4", 1.0, 16, 0.5),
    "metagpt_tl": WorkloadSpec("metagpt_tl", 1.0, 6, 0.02),
}


@dataclass
class Setup:
    device: str = "cpu"  # cpu | gpu
    model: str = "tiny_cpu"  # conf/model
    gpu: str = "a100_80gb"  # conf/gpu (the simulator's host link only; no host tier here)
    workloads: Sequence[WorkloadSpec] = ()
    schedulers: Sequence[str] = ("fcfs", "lpm", "topas")
    repeats: int = 2
    seed: int = 0
    profile: str | None = None  # a profile file; None: measure one
    profile_grid: str | None = None  # profiler.GRIDS name (None: the device's)
    max_total_tokens: int | None = None  # the server's KV pool (None: 4096 on cpu, SGLang's own on gpu)
    extra_args: Sequence[str] = ()
    runs: Path = ROOT / "runs" / "fidelity"
    replay_timeout_s: float = 600.0
    reuse_real: bool = False  # keep real runs already complete in `runs` (same traces and profile)
    say: Callable[[str], None] = print
    results: dict[str, Any] = field(default_factory=dict)


def compose(overrides: Sequence[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        return hydra_compose(config_name="config", overrides=["logger=none", "progress=false", *overrides])


def build_traces(s: Setup) -> dict[str, Path]:
    from dataclasses import replace

    from topas.config import validate
    from topas.workloads import build_trace, dump_trace
    from topas.workloads.scaling import scale_trace

    paths = {}
    for w in s.workloads:
        cfg = compose([f"model={s.model}", f"workload={w.name}", f"workload.num_tasks={w.num_tasks}",
                       f"workload.arrival_rate={w.arrival_rate}", "workload.load=null"])
        wcfg = validate(cfg)["workload"]
        trace = scale_trace(build_trace(replace(wcfg, arrival_rate=w.arrival_rate), s.seed), w.token_scale)
        paths[w.name] = dump_trace(trace, s.runs / w.name / "trace.jsonl")
    return paths


def backend_config(s: Setup, cost_model: dict[str, Any] | None = None):
    """The real runs' backend options (also what the profiled server is started with)."""
    from topas.engines.sglang.client.backend_config import SGLangBackendConfig

    return SGLangBackendConfig(
        profile=s.device, max_total_tokens=s.max_total_tokens, extra_args=list(s.extra_args), token_scale=1.0,
        reuse_server=True, replay_timeout_s=s.replay_timeout_s, cost_model=cost_model,
    )


def measure_profile(s: Setup, out: Path) -> Path:
    """Profile a server started with the real runs' options (profiler.py)."""
    import tempfile

    from topas.config import validate
    from topas.engines.latency.specs import load_model_spec
    from topas.engines.sglang.client.backend_config import model_dir, server_args
    from topas.engines.sglang.client.server import ServerConfig, SGLangServer
    from topas.engines.sglang.tools import profiler

    b = backend_config(s)
    model = load_model_spec(compose([f"model={s.model}"]).model)
    validate(compose([f"model={s.model}"]))
    mdir = model_dir(b, model)
    kw, extra = server_args(b, s.device)
    work = Path(tempfile.mkdtemp(prefix="topas-fidelity-profile-"))
    # with the plugin running FCFS: its work per pass (observing the queue, a decision when it
    # changed) is part of every iteration and round trip measured, as in the real runs
    cfg = ServerConfig(model_path=mdir, extra_args=extra, iteration_log=work / "iterations.jsonl",
                       log_path=work / "server.log", policy="fcfs", **kw)
    grid = profiler.GRIDS[s.profile_grid or s.device]
    s.say(f"profile: starting a server like the real runs' ({s.device}, {model.name}); log {cfg.log_path}")
    with SGLangServer(cfg) as srv:
        s.say(f"profile: server up in {srv.startup_s:.0f} s; measuring ({grid.repeats} samples per cell)")
        profiler.profile_server(srv.base_url, cfg.iteration_log, out, grid, model.vocab_size, model.context_len,
                               say=lambda m: s.say(f"profile: {m}"))
    shutil.rmtree(work, ignore_errors=True)
    return out


def real_run(s: Setup, trace: Path, scheduler: str, out: Path, cost_model: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from topas.runner import run

    b = backend_config(s, cost_model)
    cfg = compose([f"model={s.model}", f"gpu={s.gpu}", f"seed={s.seed}", "workload=trace",
                   f"workload.params.path={trace}", f"scheduler={scheduler}", "backend=sglang"])
    for k in ("profile", "max_total_tokens", "token_scale", "reuse_server", "replay_timeout_s"):
        OmegaConf.update(cfg, f"backend.{k}", getattr(b, k))
    OmegaConf.update(cfg, "backend.extra_args", list(b.extra_args))
    OmegaConf.update(cfg, "backend.cost_model", dict(cost_model), force_add=True)
    _, summary = run(cfg, out_dir=out, quiet=True)
    return summary


def sim_run(s: Setup, trace: Path, scheduler: str, out: Path, profile: Path, engine: dict[str, Any]) -> dict[str, Any]:
    from topas.runner import run

    over = [f"model={s.model}", f"gpu={s.gpu}", f"seed={s.seed}", "workload=trace", f"workload.params.path={trace}",
            f"scheduler={scheduler}", "backend=sim", "backend.latency=profile", f"backend.latency_profile={profile}",
            "backend.host_cache_ratio=0"]
    for k in ("kv_pool_tokens", "max_running_requests", "chunked_prefill_size", "max_prefill_tokens"):
        if engine.get(k):
            over.append(f"backend.{k}={int(engine[k])}")
    _, summary = run(compose(over), out_dir=out, quiet=True)
    return summary


def server_settings(profile: Path, real_summary: dict[str, Any]) -> dict[str, Any]:
    """What the simulator copies from the real server: the KV pool and max running requests it
    reported in the run, chunked prefill and max prefill tokens from the profile's server facts."""
    facts = json.loads(profile.read_text()).get("meta", {}).get("server", {})
    return {
        "kv_pool_tokens": real_summary.get("kv_pool_tokens") or facts.get("kv_pool_tokens"),
        "max_running_requests": real_summary.get("max_running_requests") or facts.get("max_running_requests"),
        "chunked_prefill_size": facts.get("chunked_prefill_size"),
        "max_prefill_tokens": facts.get("max_prefill_tokens"),
    }


def run_order(workloads: Sequence[Any], schedulers: Sequence[Any], repeats: int) -> list[tuple[int, Any, Any]]:
    """The real runs' order, (repeat, workload, scheduler): repeat-major (slow drift of the machine spreads evenly
    over the schedulers), and within repeat k the schedulers rotated to start at scheduler k mod n (none always
    runs first after a workload switch, or always after the same one: a carried-over state biases no one)."""
    n = len(schedulers)
    return [(k, w, schedulers[(k + i) % n]) for k in range(repeats) for w in workloads for i in range(n)]


def _warm_up(s: Setup, traces: dict, cost_model: dict) -> None:
    """One real run that is not recorded: the first replay on a fresh server pays for its warm-up."""
    w, sched = s.workloads[0], s.schedulers[0]
    t = time.monotonic()
    real_run(s, traces[w.name], sched, s.runs / "warmup", cost_model)
    s.say(f"real warm-up {w.name}/{sched} (not recorded): {time.monotonic() - t:.0f} s")


def _real_runs(s: Setup, traces: dict, cost_model: dict) -> tuple[dict, dict]:
    """Every (workload, scheduler) on the real server, `s.repeats` times in `run_order`, after one warm-up run:
    their folders (in repeat order) and first summaries."""
    from topas.engines.sglang.client.shared_server import shutdown_shared_servers

    real: dict[tuple[str, str], list[Path]] = {}
    summaries: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        warmed = False
        for k, w, sched in run_order(s.workloads, s.schedulers, s.repeats):
            out = s.runs / w.name / sched / f"real{k}"
            t = time.monotonic()
            if s.reuse_real and (out / "summary.json").is_file():
                summ = json.loads((out / "summary.json").read_text())
            else:
                if not warmed:  # only when a real run is measured now
                    _warm_up(s, traces, cost_model)
                    warmed = True
                summ = real_run(s, traces[w.name], sched, out, cost_model)
            summaries.setdefault((w.name, sched), summ)  # repeat 0's: the order is repeat-major
            real.setdefault((w.name, sched), []).append(out)
            s.say(f"real {w.name}/{sched} #{k}: JCT mean {summ['jct_mean']:.3f} s, "
                  f"{summ['requests_served']} requests, {time.monotonic() - t:.0f} s")
    finally:
        shutdown_shared_servers()
    return real, summaries


def _cell(s: Setup, w, sched: str, trace: Path, profile: Path, reals: list[Path], summary: dict) -> dict[str, Any]:
    """One (workload, scheduler): the simulator on the profile as measured and scaled to each real run's machine
    speed, compared with the real runs."""
    from topas.fidelity.calibrate import write_scaled_profile
    from topas.fidelity.metrics import compare, run_metrics

    engine = server_settings(profile, summary)
    cell = s.runs / w.name / sched
    sim_run(s, trace, sched, cell / "sim", profile, engine)
    scaled, factors = [], []
    for k, rd in enumerate(reals):
        prof_k, f = write_scaled_profile(profile, rd, cell / f"profile_scaled{k}.json")
        sim_run(s, trace, sched, cell / f"sim_scaled{k}", prof_k, engine)
        scaled.append(cell / f"sim_scaled{k}")
        factors.append(f)
    rows = compare([run_metrics(p) for p in reals], run_metrics(cell / "sim"), [run_metrics(p) for p in scaled])
    j = rows["jct_mean"]
    s.say(f"sim {w.name}/{sched}: JCT mean {j['sim']:.3f} s on the profile ({j['err']:+.1%}), "
          f"{j['sim_scaled']:.3f} s scaled to the run ({j['err_scaled']:+.1%}); real {j['real']:.3f} s")
    return {"workload": w.name, "scheduler": sched, "token_scale": w.token_scale,
            "num_tasks": w.num_tasks, "arrival_rate": w.arrival_rate, "engine": engine,
            "real_dirs": [str(p) for p in reals], "sim_dir": str(cell / "sim"),
            "sim_scaled_dirs": [str(p) for p in scaled], "speed_factors": factors,
            "trace": str(trace), "metrics": rows}


def _jct(folder: str | Path) -> float:
    v = json.loads((Path(folder) / "summary.json").read_text()).get("jct_mean")
    return math.nan if v is None else float(v)


def difference_inputs(cells: Sequence[Mapping[str, Any]]) -> tuple[dict, dict, dict]:
    """differences.differences' inputs from the cells' run folders (summary.json's `jct_mean`): workload ->
    scheduler -> the real runs' per-repeat values, the scaled simulator runs' (same repeat order), and the
    simulator's on the profile."""
    real: dict[str, dict[str, list[float]]] = {}
    scaled: dict[str, dict[str, list[float]]] = {}
    profile: dict[str, dict[str, float]] = {}
    for c in cells:
        w, sched = c["workload"], c["scheduler"]
        real.setdefault(w, {})[sched] = [_jct(p) for p in c["real_dirs"]]
        scaled.setdefault(w, {})[sched] = [_jct(p) for p in c.get("sim_scaled_dirs", [])]
        profile.setdefault(w, {})[sched] = _jct(c["sim_dir"])
    return real, scaled, profile


def code_stamp(now: datetime | None = None) -> dict[str, str]:
    """The simulator and policy code a measurement runs (analysis.fidelity_status.fidelity_fingerprint) and when it
    started (UTC, ISO 8601): taken before the first run, so an edit made during the measurement is stale."""
    from analysis.fidelity_status import fidelity_fingerprint

    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return {"fingerprint": fidelity_fingerprint(), "measured": when.isoformat(timespec="seconds")}


def record(s: Setup, cells: list[dict[str, Any]], profile: Path, times_s: tuple[float, float],
           code: Mapping[str, str]) -> dict[str, Any]:
    """fidelity.json's content: the cells, the settings (`times_s`: profiling, total) and the code measured."""
    prof = json.loads(profile.read_text())
    profiled = prof.get("meta", {}).get("server", {})
    # the real runs' server: a given profile may have been measured on a server with another KV pool
    engine = cells[0].get("engine", {}) if cells else {}
    ran = {k: v for k, v in engine.items() if v is not None}
    return {
        "cells": cells,
        "settings": {
            "device": s.device, "model": s.model, "repeats": s.repeats, "seed": s.seed, "profile": str(profile),
            "server": {**profiled, **ran}, "profiled_server": profiled, "profile_given": bool(s.profile),
            "request_latency_s": prof.get("request_latency_s"),
            "prefill_batch_shared_s": prof.get("prefill_batch_shared_s"),
            "profile_s": round(times_s[0], 1), "total_s": round(times_s[1], 1),
        },
        "code": dict(code),
    }


def validate_all(s: Setup) -> dict[str, Any]:
    """Run everything; returns {"cells": [...], "settings": {...}, "code": {...}, "differences": [...]} (see
    report.py)."""
    from topas.fidelity.differences import differences

    code = code_stamp()
    t_start = time.monotonic()
    s.runs.mkdir(parents=True, exist_ok=True)
    traces = build_traces(s)
    if s.profile:
        profile = Path(s.profile).resolve()
    elif s.reuse_real and (s.runs / "profile.json").is_file():
        profile = s.runs / "profile.json"
    else:
        profile = measure_profile(s, s.runs / "profile.json")
    t_profile = time.monotonic() - t_start
    real, summaries = _real_runs(s, traces, {"latency_profile": str(profile)})
    cells = [_cell(s, w, sched, traces[w.name], profile, real[(w.name, sched)], summaries[(w.name, sched)])
             for w in s.workloads for sched in s.schedulers]
    result = record(s, cells, profile, (t_profile, time.monotonic() - t_start), code)
    result["differences"] = [asdict(d) for d in differences(*difference_inputs(cells))]
    return result
