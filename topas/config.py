"""Structured configs (dataclasses) for the Hydra groups, validated at start.

Each group's YAML is merged into its schema; an unknown key, a wrong type or a value
out of range is a `ConfigError` whose message is one line naming the problem.
Model and GPU specs are validated by `topas.engines.latency.specs`, workload configs by
`topas.workloads.config.WorkloadConfig` (next to the generators whose parameters it checks).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import topas.run_identity  # noqa: F401  (registers the resolvers of conf/config.yaml)
from topas.checks import integral, number


class ConfigError(ValueError):
    pass


@dataclass
class SimBackendConfig:
    name: str = "sim"
    latency: str = "aiconfigurator"  # aiconfigurator | roofline | auto | profile
    latency_profile: str | None = None  # profile file for latency=profile
    kv_pool_tokens: int | None = None  # override the pool derived from model + GPU
    mem_fraction_static: float | None = None  # SGLang --mem-fraction-static (None: SGLang's rule)
    max_running_requests: int | None = None  # None: SGLang's rule from the pool size
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    host_cache_ratio: float = 2.0  # HiCache host pool / device pool; 0 disables the host tier
    ignore_eos: bool = True
    max_new_tokens_cap: int = 4096
    touch_waiting_prefixes: bool = True
    decision_cost_s: float = 0.0
    # a real server's client path (topas.engines.sim.config.ClientPath; keys submit, submit_per_token,
    # return, dispatch, dispatch_per_token); None: the latency profile's with latency=profile, else none
    client_latency: dict[str, float] | None = None


# Ranges of the sim backend's numbers (topas.checks rules; None is always allowed for an Optional field).
SIM_BACKEND_RANGES: dict[str, str] = {
    "kv_pool_tokens": ">= 1",
    "mem_fraction_static": "in (0, 1]",
    "max_running_requests": ">= 1",
    "chunked_prefill_size": ">= 1",
    "max_prefill_tokens": ">= 1",
    "host_cache_ratio": ">= 0",
    "max_new_tokens_cap": ">= 1",
    "decision_cost_s": ">= 0",  # simulated seconds per decision: negative would run time backwards
}


@dataclass
class SchedulerConfig:
    name: str = "fcfs"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoggerConfig:
    kind: str = "none"  # none | wandb
    mode: str = "offline"  # wandb: offline | online | disabled
    project: str = "topas-harness"
    entity: str | None = None
    tags: list[str] = field(default_factory=list)


_SCHEMAS = {"scheduler": SchedulerConfig, "logger": LoggerConfig}
# backend name -> schema, or "module:Class" imported on use
_BACKENDS: dict[str, type | str] = {"sim": SimBackendConfig, "sglang": "topas.engines.sglang.backend_config:SGLangBackendConfig"}
# backend name -> ranges of its numeric fields (other backends check their own, e.g. sglang's check_config)
_BACKEND_RANGES: dict[str, dict[str, str]] = {"sim": SIM_BACKEND_RANGES}

# Every top-level key a run config may have: conf/config.yaml's own keys, its Hydra groups, and
# `hydra`. Any other key is a typo (`+sead=3`) and an error. A new top-level key goes here.
CONFIG_KEYS: frozenset[str] = frozenset({
    "experiment_name", "seed", "progress", "sweep_manifest", "run_subdir", "out_dir",  # conf/config.yaml
})
GROUP_KEYS: frozenset[str] = frozenset({"backend", "model", "gpu", "workload", "scheduler", "logger"})
KNOWN_TOP_LEVEL_KEYS: frozenset[str] = CONFIG_KEYS | GROUP_KEYS | {"hydra"}


def _backend_schema(name: str) -> type:
    schema = _BACKENDS[name]
    if isinstance(schema, str):
        import importlib

        mod, cls = schema.split(":")
        schema = getattr(importlib.import_module(mod), cls)
    return schema


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _int_fields(schema: type) -> set[str]:
    """Fields of a dataclass schema annotated int or Optional[int]."""
    try:
        hints = typing.get_type_hints(schema)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no conversion
        return set()
    return {f.name for f in dataclasses.fields(schema) if hints.get(f.name) in (int, int | None)}


def _integral_floats_as_ints(node: Any, schema: type) -> Any:
    """A count written 512.0 (an int field's integral float) is read as 512; OmegaConf rejects it."""
    if not isinstance(node, DictConfig):
        return node
    fixed = {}
    for k in _int_fields(schema):
        v = node.get(k) if k in node else None
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            fixed[k] = int(v)
    return OmegaConf.merge(node, fixed) if fixed else node


def validate_group(cfg: DictConfig, group: str, schema: type) -> Any:
    try:
        node = _integral_floats_as_ints(cfg[group], schema)
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        where = f"{group}.{key}" if key else group
        raise ConfigError(f"{where}: {_first_line(e)}") from None


def check_group_ranges(obj: Any, group: str, ranges: dict[str, str]) -> None:
    """Each field of a validated group object obeys its rule (None passes); one line naming `group.field`."""
    for name, rule in ranges.items():
        v = getattr(obj, name, None)
        if v is not None:
            try:
                number(f"{group}.{name}", v, rule)
            except ValueError as e:
                raise ConfigError(str(e)) from None


def check_top_level(cfg: DictConfig) -> None:
    """No unknown top-level key (KNOWN_TOP_LEVEL_KEYS), a usable seed and progress flag."""
    unknown = sorted(set(cfg.keys()) - KNOWN_TOP_LEVEL_KEYS)
    if unknown:
        hints = [f"'{k}' (did you mean '{m[0]}'?)" if (m := difflib.get_close_matches(k, KNOWN_TOP_LEVEL_KEYS, n=1))
                 else f"'{k}'" for k in unknown]
        known = ", ".join(sorted(KNOWN_TOP_LEVEL_KEYS))
        raise ConfigError(f"unknown top-level config key(s) {', '.join(hints)}; known: {known}")
    if "seed" in cfg:
        try:
            integral("seed", cfg.seed, minimum=0)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if "progress" in cfg and not isinstance(cfg.progress, bool):
        raise ConfigError(f"progress must be true or false, got {cfg.progress!r}")


def validate(cfg: DictConfig) -> dict[str, Any]:
    """Validated group objects by group name; raises ConfigError (one line)."""
    check_top_level(cfg)
    out: dict[str, Any] = {g: validate_group(cfg, g, s) for g, s in _SCHEMAS.items()}
    backend = cfg.backend.get("name")
    if backend not in _BACKENDS:
        raise ConfigError(f"backend: unknown backend '{backend}'; known: {', '.join(sorted(_BACKENDS))}")
    out["backend"] = validate_group(cfg, "backend", _backend_schema(backend))
    check_group_ranges(out["backend"], "backend", _BACKEND_RANGES.get(backend, {}))
    from topas.workloads.config import WorkloadConfig  # the workload schema lives with the generators

    try:
        out["workload"] = WorkloadConfig.parse(cfg.workload)
    except ValueError as e:
        raise ConfigError(_first_line(e)) from None
    if out["logger"].kind not in ("none", "wandb"):
        raise ConfigError(f"logger.kind must be none or wandb, got '{out['logger'].kind}'")
    return out
