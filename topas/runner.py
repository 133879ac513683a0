"""One run: config -> trace, policy, engine -> tables, summary, run folder, logger.

Engine-specific construction lives in the backend builders; everything after the
engine (tables, summary, atomic writes, W&B) is shared.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from topas.config import ConfigError, SchedulerConfig, SimBackendConfig, validate
from topas.engines.latency.base import GpuSpec, ModelSpec
from topas.engines.latency.factory import build_latency_model
from topas.engines.latency.specs import load_gpu_spec, load_model_spec
from topas.policy import Policy, create_policy
from topas.results import RunRecord, format_summary, summarize, write_run
from topas.workflow import Trace

log = logging.getLogger("topas")


def sim_engine_config(b: SimBackendConfig, model: ModelSpec, gpu: GpuSpec, latency=None):
    """The simulated server's settings; `latency` (the predictor) supplies the client path of a
    measured profile (its `client_latency`) when `backend.client_latency` is null."""
    from topas.engines.latency.memory import kv_bytes_per_token, kv_pool_tokens, max_running_requests
    from topas.engines.sim.config import SimEngineConfig

    pool = kv_pool_tokens(model, gpu, b.chunked_prefill_size, b.mem_fraction_static, override=b.kv_pool_tokens)
    return SimEngineConfig(
        kv_pool_tokens=pool,
        max_running_requests=max_running_requests(pool, model.context_len, b.max_running_requests),
        chunked_prefill_size=b.chunked_prefill_size,
        max_prefill_tokens=b.max_prefill_tokens,
        host_cache_ratio=b.host_cache_ratio,
        host_link_gbs=gpu.host_link_gbs,
        host_link_latency_s=gpu.host_link_latency_s,
        kv_bytes_per_token=kv_bytes_per_token(model),
        ignore_eos=b.ignore_eos,
        max_new_tokens_cap=b.max_new_tokens_cap,
        touch_waiting_prefixes=b.touch_waiting_prefixes,
        decision_cost_s=b.decision_cost_s,
        client=_client_path(b.client_latency, latency),
    )


def _client_path(configured, latency):
    from topas.engines.sim.config import ClientPath

    spec = configured if configured is not None else getattr(latency, "client_latency", None)
    try:
        return ClientPath.from_mapping(spec)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"backend.client_latency: {str(e).splitlines()[0]}") from None


@dataclass
class RunContext:
    """Everything a backend needs for one run."""

    backend: Any  # the validated backend config (SimBackendConfig, the SGLang backend's schema, ...)
    model: ModelSpec
    gpu: GpuSpec
    scheduler: SchedulerConfig  # name + params (a real server builds its own policy from them)
    policy: Policy  # the policy instance, for in-process engines
    trace: Trace
    warmup_fraction: float
    out_dir: Path  # run folder (backends may keep logs there)
    progress: Callable[[int], None] | None = None  # told of each finished task


def run_sim(ctx: RunContext) -> tuple[RunRecord, float]:
    from topas.engines.latency.costs import LatencyCostModel
    from topas.engines.sim.engine import SimEngine
    from topas.engines.sim.records import sim_record

    b, model, gpu = ctx.backend, ctx.model, ctx.gpu
    kw = {"path": b.latency_profile} if b.latency == "profile" else {}
    latency = build_latency_model(b.latency, model, gpu, **kw)
    latency.decode(1, 1), latency.prefill([(1, 0)])  # build lazy tables now, not inside the first timed decision
    ecfg = sim_engine_config(b, model, gpu, latency)
    costs = LatencyCostModel(latency, ecfg.kv_bytes_per_token, ecfg.host_link_gbs, ecfg.host_link_latency_s)
    engine = SimEngine(ecfg, latency, ctx.policy, ctx.trace, costs)
    engine.run(ctx.progress)
    return sim_record(engine, ctx.warmup_fraction), engine.stats.wall_s


def check_sim(plan: RunPlan) -> None:
    """A call that can never fit the simulated pool is a ConfigError before the run, not a stall."""
    from topas.engines.sim.fit import check_engine_fits

    check_engine_fits(plan.trace, sim_engine_config(plan.groups["backend"], plan.model, plan.gpu))


# backend name -> checks of a prepared run before anything executes
BACKEND_CHECKS: dict[str, Callable[[RunPlan], None]] = {"sim": check_sim}
# backend name -> "module:function" taking a RunContext, imported on use (a real engine is an optional install)
BACKENDS: dict[str, str] = {"sim": "topas.runner:run_sim", "sglang": "topas.engines.sglang.backend:run_sglang"}


def backend_runner(name: str) -> Callable[[RunContext], tuple[RunRecord, float]]:
    mod, fn = BACKENDS[name].split(":")
    return getattr(importlib.import_module(mod), fn)


def arrival_rate_for(w, model: ModelSpec, gpu: GpuSpec) -> float | None:
    """`arrival_rate`, or `load` x the capacity measured for this model/GPU (None: a trace's own times)."""
    from topas.workloads import capacity_of, resolve_arrival_rate

    if w.arrival_rate is None and w.load is not None and capacity_of(w.name, model.name, gpu.name) is None:
        raise ConfigError(
            f"workload.load={w.load} needs the capacity of '{w.name}' on {model.name}/{gpu.name}, which is not "
            f"measured: run `make capacity ARGS=\"model={model.name} gpu={gpu.name}\"` or set workload.arrival_rate"
        )
    try:
        return resolve_arrival_rate(w, capacity_of(w.name, model.name, gpu.name))
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None


def fingerprint_of(cfg: DictConfig) -> str:
    """The run's code + config fingerprint (a sweep re-runs a folder whose fingerprint differs)."""
    from topas.run_identity import run_fingerprint

    return run_fingerprint(_plain_config(cfg))


def _plain_config(cfg: DictConfig) -> dict[str, Any]:
    return {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k != "hydra"}


@dataclass
class RunPlan:
    """A run, fully validated before anything executes."""

    groups: dict[str, Any]  # validated group objects (topas.config.validate)
    model: ModelSpec
    gpu: GpuSpec
    policy: Policy
    arrival_rate: float | None
    trace: Trace


def prepare(cfg: DictConfig) -> RunPlan:
    """Validate everything a run needs and build its trace; raises a one-line ValueError."""
    groups = validate(cfg)
    try:
        model = load_model_spec(cfg.model)
        gpu = load_gpu_spec(cfg.gpu)
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    sched = groups["scheduler"]
    policy = create_policy(sched.name, sched.params)
    w = groups["workload"]
    rate = arrival_rate_for(w, model, gpu)
    from dataclasses import replace

    from topas.workloads import build_trace

    trace = build_trace(replace(w, arrival_rate=rate), int(cfg.seed))
    plan = RunPlan(groups, model, gpu, policy, rate, trace)
    BACKEND_CHECKS.get(groups["backend"].name, lambda _: None)(plan)
    return plan


def check_output_dir(out: Path) -> None:
    """The run folder can be created and written (checked before a run, not after it)."""
    p = out
    while not p.exists() and p != p.parent:
        p = p.parent
    if out.exists() and not out.is_dir() or not p.is_dir():
        raise ConfigError(f"output folder {out}: {p} is a file, not a folder")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"output folder {out}: {p} is not writable")


def run(cfg: DictConfig, out_dir: str | Path | None = None, quiet: bool = False) -> tuple[Path, dict[str, Any]]:
    """Execute one configured run and write its folder. Returns (folder, summary)."""
    from topas.results import clear_outcome

    plan = prepare(cfg)
    out = Path(out_dir if out_dir is not None else cfg.out_dir)
    check_output_dir(out)
    clear_outcome(out)  # a rerun is incomplete (and not failed) until it ends
    sched, w = plan.groups["scheduler"], plan.groups["workload"]
    bar = tqdm(total=len(plan.trace.tasks), desc=f"{sched.name}/{w.name}", unit="task", leave=False,
               disable=True if quiet or not cfg.progress else None)  # None: only on a terminal
    ctx = RunContext(plan.groups["backend"], plan.model, plan.gpu, sched, plan.policy, plan.trace, w.warmup_fraction,
                     out, bar.update)
    try:
        record, wall = backend_runner(plan.groups["backend"].name)(ctx)
    finally:
        bar.close()
    summary = summarize(record, wall)
    summary.update(
        scheduler=sched.name,
        workload=w.name,
        arrival_rate=plan.arrival_rate,
        load=w.load,
        seed=int(cfg.seed),
        model=plan.model.name,
        gpu=plan.gpu.name,
    )
    summary["fingerprint"] = fingerprint_of(cfg)
    summary = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in summary.items()}
    write_run(out, record, summary, OmegaConf.to_yaml(_plain_config(cfg)))
    if plan.groups["logger"].kind == "wandb":
        from topas.wandb_logger import log_run

        log_run(plan.groups["logger"], _plain_config(cfg), summary, record, out)
    if not quiet:
        rate_txt = f"{plan.arrival_rate:.4g} tasks/s" if plan.arrival_rate is not None else "trace arrival times"
        log.info(f"{sched.name} on {w.name} ({rate_txt}, seed {int(cfg.seed)}) -> {out}")
        log.info(format_summary(summary))
    return out, summary
