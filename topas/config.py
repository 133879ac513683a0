"""Structured configs (dataclasses) for the Hydra groups, validated at start.

Each group's YAML is merged into its schema; an unknown key, a wrong type or a value
out of range is a `ConfigError` whose message is one line naming the problem.
Model and GPU specs are validated by `topas.engines.latency.factory`, workload configs by
`topas.workloads.config.WorkloadConfig` (next to the generators whose parameters it checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


class ConfigError(ValueError):
    pass


def load_tag(load: float | None, rate: float | None) -> str:
    """Run-folder name of the offered load (used in `out_dir`)."""
    if load is not None:
        return f"load{load:g}"
    if rate is not None:
        return f"rate{rate:g}"
    return "trace-times"


OmegaConf.register_new_resolver("load_tag", load_tag, replace=True)


@dataclass
class SimBackendConfig:
    name: str = "sim"
    latency: str = "aiconfigurator"  # aiconfigurator | roofline | auto | profile
    latency_profile: Optional[str] = None  # profile file for latency=profile
    kv_pool_tokens: Optional[int] = None  # override the pool derived from model + GPU
    mem_fraction_static: Optional[float] = None  # SGLang --mem-fraction-static (None: SGLang's rule)
    max_running_requests: Optional[int] = None  # None: SGLang's rule from the pool size
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    host_cache_ratio: float = 2.0  # HiCache host pool / device pool; 0 disables the host tier
    ignore_eos: bool = True
    max_new_tokens_cap: int = 4096
    touch_waiting_prefixes: bool = True
    decision_cost_s: float = 0.0
    # a real server's client path (topas.engines.sim.config.ClientPath; keys submit, submit_per_token,
    # return, dispatch, dispatch_per_token); None: the latency profile's with latency=profile, else none
    client_latency: Optional[dict[str, float]] = None


@dataclass
class SchedulerConfig:
    name: str = "fcfs"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoggerConfig:
    kind: str = "none"  # none | wandb
    mode: str = "offline"  # wandb: offline | online | disabled
    project: str = "topas-harness"
    entity: Optional[str] = None
    tags: list[str] = field(default_factory=list)


_SCHEMAS = {"scheduler": SchedulerConfig, "logger": LoggerConfig}
# backend name -> schema, or "module:Class" imported on use
_BACKENDS: dict[str, type | str] = {"sim": SimBackendConfig, "sglang": "topas.engines.sglang.backend_config:SGLangBackendConfig"}


def _backend_schema(name: str) -> type:
    schema = _BACKENDS[name]
    if isinstance(schema, str):
        import importlib

        mod, cls = schema.split(":")
        schema = getattr(importlib.import_module(mod), cls)
    return schema


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def validate_group(cfg: DictConfig, group: str, schema: type) -> Any:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), cfg[group])
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{group}: {_first_line(e)}") from None


def validate(cfg: DictConfig) -> dict[str, Any]:
    """Validated group objects by group name; raises ConfigError (one line)."""
    out: dict[str, Any] = {g: validate_group(cfg, g, s) for g, s in _SCHEMAS.items()}
    backend = cfg.backend.get("name")
    if backend not in _BACKENDS:
        raise ConfigError(f"backend: unknown backend '{backend}'; known: {', '.join(sorted(_BACKENDS))}")
    out["backend"] = validate_group(cfg, "backend", _backend_schema(backend))
    from topas.workloads.config import WorkloadConfig  # the workload schema lives with the generators

    try:
        out["workload"] = WorkloadConfig.parse(cfg.workload)
    except ValueError as e:
        raise ConfigError(_first_line(e)) from None
    if out["logger"].kind not in ("none", "wandb"):
        raise ConfigError(f"logger.kind must be none or wandb, got '{out['logger'].kind}'")
    return out
