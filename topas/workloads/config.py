"""The workload config (conf/workload/*.yaml) and the generator interface.

Keys of a workload config (all validated here, one-line ValueError on any problem):

    name             workload name (also the run-directory level)
    generator        registry name of the generator (chain3, dag4, dag10_wide, metagpt_sop, metagpt_tl, trace)
    arrival_rate     Poisson task arrivals, tasks/s; null = derive from load x capacity (the runner does)
    load             null, or a fraction of the workload's measured capacity
    num_tasks        tasks in the trace (trace generator: null = all tasks of the file)
    warmup_fraction  first fraction of tasks (by arrival) excluded from statistics
    params           generator-specific parameters (unknown keys are rejected)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from topas.checks import integral
from topas.workflow import Task, Trace, Workflow, WorkflowTemplate
from topas.workloads.arrivals import poisson_arrivals, streams

TOP_LEVEL_KEYS = ("name", "generator", "arrival_rate", "load", "num_tasks", "warmup_fraction", "params")


def _plain(cfg: Any) -> dict:
    """A plain dict from a dict / DictConfig / other mapping."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(cfg, Mapping):
        raise ValueError(f"workload config must be a mapping, got {type(cfg).__name__}")
    return {k: (_plain(v) if isinstance(v, Mapping) else v) for k, v in cfg.items()}


def _number(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"workload.{name} must be a finite number, got {v!r}")
    return float(v)


def check_rate_fields(load: Any, arrival_rate: Any) -> tuple[float | None, float | None]:
    """`workload.load` and `workload.arrival_rate` as (load, arrival_rate) floats or None; a
    one-line ValueError naming the key when one is not a positive finite number. Pure (no I/O),
    so a config resolver may call it. Whether both may be set is decided elsewhere
    (`resolve_arrival_rate`)."""
    if arrival_rate is not None:
        arrival_rate = _number("arrival_rate", arrival_rate)
        if arrival_rate <= 0:
            raise ValueError(f"workload.arrival_rate must be positive (tasks/s), got {arrival_rate:g}")
    if load is not None:
        load = _number("load", load)
        if load <= 0:
            raise ValueError(f"workload.load must be a positive fraction of capacity, got {load:g}")
    return load, arrival_rate


@dataclass(frozen=True)
class WorkloadConfig:
    name: str
    generator: str
    arrival_rate: float | None
    load: float | None
    num_tasks: int | None
    warmup_fraction: float
    params: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, cfg: Any) -> WorkloadConfig:
        d = _plain(cfg)
        unknown = sorted(set(d) - set(TOP_LEVEL_KEYS))
        if unknown:
            raise ValueError(f"workload: unknown key(s) {unknown}; allowed: {list(TOP_LEVEL_KEYS)}")
        gen = d.get("generator")
        if not isinstance(gen, str) or not gen:
            raise ValueError("workload.generator is required (a generator name)")
        name = d.get("name") or gen
        if not isinstance(name, str):
            raise ValueError(f"workload.name must be a string, got {name!r}")
        load, rate = check_rate_fields(d.get("load"), d.get("arrival_rate"))
        n = d.get("num_tasks")
        if n is not None:
            n = integral("workload.num_tasks", n)
        wf = _number("warmup_fraction", d.get("warmup_fraction", 0.1))
        if not 0 <= wf < 1:
            raise ValueError(f"workload.warmup_fraction must be in [0, 1), got {wf}")
        params = d.get("params") or {}
        if not isinstance(params, Mapping):
            raise ValueError(f"workload.params must be a mapping, got {type(params).__name__}")
        return cls(name, gen, rate, load, n, wf, dict(params))


class Generator:
    """Base class of a workload generator: seeded Poisson arrivals + one sampled DAG per task.

    Subclasses set `name` and `defaults` (every accepted parameter with its default) and
    implement `templates(params)` and `workflow(task_id, rng, params)`; `check(params)` may
    reject bad values with a one-line ValueError and normalise them in place (the dict is the
    generator's own copy: e.g. a token count written 512.0 becomes 512).
    """

    name: str = ""
    defaults: Mapping[str, Any] = {}

    def resolve_params(self, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"workload '{self.name}': unknown param(s) {unknown}; allowed: {sorted(self.defaults)}"
            )
        params = {**self.defaults, **given}
        self.check(params)
        return params

    def check(self, params: Mapping[str, Any]) -> None:  # pragma: no cover - default accepts all
        pass

    def templates(self, params: Mapping[str, Any]) -> dict[str, WorkflowTemplate]:
        raise NotImplementedError

    def workflow(self, task_id: int, rng: np.random.Generator, params: Mapping[str, Any]) -> Workflow:
        raise NotImplementedError

    def template_name(self, params: Mapping[str, Any]) -> str:
        return self.name

    def build(self, cfg: WorkloadConfig, seed: int) -> Trace:
        params = self.resolve_params(cfg.params)
        if cfg.arrival_rate is None:
            raise ValueError(
                f"workload '{cfg.name}': arrival_rate is null; resolve it from load x capacity "
                "(topas.workloads.resolve_arrival_rate) before building the trace"
            )
        if cfg.num_tasks is None:
            raise ValueError(f"workload '{cfg.name}': num_tasks is required for generator '{self.name}'")
        arr_rng, task_rng = streams(seed, cfg.name)
        arrivals = poisson_arrivals(cfg.arrival_rate, cfg.num_tasks, arr_rng)
        templates = self.templates(params)
        tpl = self.template_name(params)
        tasks = tuple(
            Task(i, arrivals[i], self.workflow(i, task_rng, params), tpl) for i in range(cfg.num_tasks)
        )
        return Trace(cfg.name, tasks, templates)


def positive_int(workload: str, key: str, v: Any) -> int:
    """A count (tokens, files): a positive int, or an integral float such as 512.0 (returned as int)."""
    try:
        return integral(f"workload.params.{key}", v)
    except ValueError as e:
        raise ValueError(f"{e} (workload '{workload}')") from None


def non_negative(workload: str, key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not v >= 0:
        raise ValueError(f"workload.params.{key} must be a finite number >= 0, got {v!r} (workload '{workload}')")
    return float(v)
