"""Structured configs (dataclasses) for the Hydra groups, validated at start.

Each group's YAML is merged into its schema; an unknown key, a wrong type or a value
out of range is a `ConfigError` whose message is one line naming the problem.
Model and GPU specs are validated by `topas.engines.latency.specs`, workload configs by
`topas.workloads.config.WorkloadConfig` (next to the generators whose parameters it checks),
a backend's by the schema its engine registers in `BACKENDS` (next to the engine).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
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


@dataclass(frozen=True)
class Backend:
    """One engine's registration: each part a "module:name" imported on use (a real engine is an
    optional install, so nothing of it is imported until a run asks for it)."""

    schema: str  # dataclass of conf/backend/<name>.yaml; a ClassVar RANGES gives topas.checks rules of its numbers
    run: str  # function(topas.runner.RunContext) -> (RunRecord, wall seconds of the engine loop)
    check: str | None = None  # function(topas.runner.RunPlan): a ConfigError before anything runs
    check_options: str | None = None  # function(the validated options): a ConfigError for a bad value or combination


# backend name (conf/backend/<name>.yaml's `name`) -> its registration: the one table of engines
BACKENDS: dict[str, Backend] = {
    "sim": Backend("topas.engines.sim.config:SimBackendConfig", "topas.engines.sim.backend:run_sim",
                   "topas.engines.sim.backend:check_sim"),
    "sglang": Backend("topas.engines.sglang.client.backend_config:SGLangBackendConfig",
                      "topas.engines.sglang.client.backend:run_sglang",
                      check_options="topas.engines.sglang.client.backend_config:check_config"),
}


def backend_part(name: str, part: str) -> Any:
    """The object a backend's registration names for `part` (schema, run, check); None if unset."""
    ref = getattr(BACKENDS[name], part)
    if ref is None:
        return None
    mod, attr = ref.split(":")
    return getattr(importlib.import_module(mod), attr)


# Every top-level key a run config may have: conf/config.yaml's own keys, its Hydra groups, and
# `hydra`. Any other key is a typo (`+sead=3`) and an error. A new top-level key goes here.
CONFIG_KEYS: frozenset[str] = frozenset({
    "experiment_name", "seed", "progress", "sweep_manifest", "run_subdir", "out_dir",  # conf/config.yaml
})
GROUP_KEYS: frozenset[str] = frozenset({"backend", "model", "gpu", "workload", "scheduler", "logger"})
KNOWN_TOP_LEVEL_KEYS: frozenset[str] = CONFIG_KEYS | GROUP_KEYS | {"hydra"}


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
    if backend not in BACKENDS:
        raise ConfigError(f"backend: unknown backend '{backend}'; known: {', '.join(sorted(BACKENDS))}")
    schema = backend_part(backend, "schema")
    out["backend"] = validate_group(cfg, "backend", schema)
    check_group_ranges(out["backend"], "backend", getattr(schema, "RANGES", {}))
    check_options = backend_part(backend, "check_options")
    if check_options is not None:  # checked with the rest, before a run folder exists (not when the engine starts)
        check_options(out["backend"])
    from topas.workloads.config import WorkloadConfig  # the workload schema lives with the generators

    try:
        out["workload"] = WorkloadConfig.parse(cfg.workload)
    except ValueError as e:
        raise ConfigError(_first_line(e)) from None
    if out["logger"].kind not in ("none", "wandb"):
        raise ConfigError(f"logger.kind must be none or wandb, got '{out['logger'].kind}'")
    return out
