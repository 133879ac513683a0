"""`backend=sim`: one run on the simulated SGLang server (conf/backend/sim.yaml, whose schema is
config.py `SimBackendConfig`). Registered in `topas.config.BACKENDS`: `run_sim(ctx)` runs it,
`check_sim(plan)` checks a prepared run before anything executes.

`ctx` is a `topas.runner.RunContext` and `plan` a `topas.runner.RunPlan`; an engine never imports
the runner (docs/layout.md), so they are used by their fields only.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from topas.config import ConfigError
from topas.engines.latency.base import GpuSpec, ModelSpec
from topas.engines.latency.costs import LatencyCostModel
from topas.engines.latency.factory import build_latency_model
from topas.engines.latency.memory import kv_bytes_per_token, kv_pool_tokens, max_running_requests
from topas.engines.sim.config import ClientPath, SimBackendConfig, SimEngineConfig
from topas.engines.sim.engine import SimEngine
from topas.engines.sim.fit import check_engine_fits
from topas.engines.sim.records import sim_record
from topas.results import RunRecord


def engine_config(b: SimBackendConfig, model: ModelSpec, gpu: GpuSpec, latency: Any = None) -> SimEngineConfig:
    """The simulated server's settings: `b`'s server args as set, the rest resolved from the model,
    the GPU and `b`'s overrides; `latency` (the predictor) supplies the client path of a measured
    profile (its `client_latency`) when `backend.client_latency` is null."""
    pool = kv_pool_tokens(model, gpu, b.chunked_prefill_size, b.mem_fraction_static, override=b.kv_pool_tokens)
    return SimEngineConfig(
        **b.server_args(),
        kv_pool_tokens=pool,
        max_running_requests=max_running_requests(pool, model.context_len, b.max_running_requests),
        host_link_gbs=gpu.host_link_gbs,
        host_link_latency_s=gpu.host_link_latency_s,
        kv_bytes_per_token=kv_bytes_per_token(model),
        client=_client_path(b.client_latency, latency),
    )


def _client_path(configured: dict[str, float] | None, latency: Any) -> ClientPath:
    spec = configured if configured is not None else getattr(latency, "client_latency", None)
    try:
        return ClientPath.from_mapping(spec)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"backend.client_latency: {str(e).splitlines()[0]}") from None


@lru_cache(maxsize=8)
def _shared_latency(kind: str, model: Any, gpu: Any) -> Any:
    """A latency model built from the specs alone, shared by the runs of one process (a sweep worker runs
    many): its predictions are pure memos of their inputs, and its tables take ~0.1 s to build."""
    return _latency_model(kind, None, model, gpu)


def run_sim(ctx: Any) -> tuple[RunRecord, float]:
    """One run (a RunContext): the record and the wall seconds of the engine loop."""
    b, model, gpu = ctx.backend, ctx.model, ctx.gpu
    if b.latency == "profile":  # a measured file: built per run (its content may change between runs)
        latency = _latency_model(b.latency, b.latency_profile, model, gpu)
    else:
        latency = _shared_latency(b.latency, model, gpu)
    ecfg = engine_config(b, model, gpu, latency)
    costs = LatencyCostModel(latency, ecfg.kv_bytes_per_token, ecfg.host_link_gbs, ecfg.host_link_latency_s)
    engine = SimEngine(ecfg, latency, ctx.policy, ctx.trace, costs)
    engine.run(ctx.progress)
    return sim_record(engine, ctx.warmup_fraction), engine.stats.wall_s


def _latency_model(kind: str, profile: str | None, model: ModelSpec, gpu: GpuSpec) -> Any:
    latency = build_latency_model(kind, model, gpu, **({"path": profile} if kind == "profile" else {}))
    latency.decode(1, 1), latency.prefill([(1, 0)])  # build lazy tables now, not inside the first timed decision
    return latency


@lru_cache(maxsize=32)
def _check_latency(kind: str, profile: str | None, model: ModelSpec, gpu: GpuSpec) -> None:
    """The predictor builds and answers for this model and GPU (once per process for each)."""
    try:
        _latency_model(kind, profile, model, gpu)
    except Exception as e:  # noqa: BLE001 - an unknown kind, a bad profile, no data for the model: the config's
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"backend.latency={kind} cannot predict {model.name} on {gpu.name}: {first}") from None


def check_sim(plan: Any) -> None:
    """Before the run (a RunPlan), a ConfigError for a latency predictor that cannot serve the model and GPU,
    and for a call that can never fit the simulated pool (not a stall)."""
    b = plan.groups["backend"]
    _check_latency(b.latency, b.latency_profile, plan.model, plan.gpu)
    check_engine_fits(plan.trace, engine_config(b, plan.model, plan.gpu))
