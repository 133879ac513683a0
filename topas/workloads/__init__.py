"""Workloads: seeded traces of multi-agent workflows (docs/workflow_model.md, docs/workloads.md).

    from topas.workloads import build_trace
    trace = build_trace(cfg.workload, seed=cfg.seed)      # cfg.workload: conf/workload/<name>.yaml

`build_trace` is a pure function of (workload config, seed): every scheduler replays the
identical trace. Generators: chain3, dag4, dag10_wide (synthetic.py), metagpt_sop
(metagpt_sop.py), metagpt_tl (metagpt_tl.py), shapes (shapes/: the
workflow-shape family), trace (trace_io.py). See README.md here.
A workload knows no engine.
"""

from __future__ import annotations

from typing import Any

from topas.workflow import Trace
from topas.workloads.capacity import capacity_of, load_capacity, resolve_arrival_rate
from topas.workloads.config import Generator, WorkloadConfig
from topas.workloads.metagpt_sop import MetaGPTSop
from topas.workloads.metagpt_tl import MetaGPTTl
from topas.workloads.motivation import TwoAgents
from topas.workloads.shapes import ShapesGenerator
from topas.workloads.synthetic import GENERATORS as _SYNTHETIC
from topas.workloads.trace_io import TraceReplay, dump_trace, load_trace

GENERATORS: dict[str, Generator] = {
    **_SYNTHETIC,
    "metagpt_sop": MetaGPTSop(),
    "metagpt_tl": MetaGPTTl(),
    "shapes": ShapesGenerator(),
    "trace": TraceReplay(),
    "two_agents": TwoAgents(),
}


def get_generator(name: str) -> Generator:
    try:
        return GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown workload generator '{name}'; known: {sorted(GENERATORS)}") from None


def build_trace(cfg: Any, seed: int) -> Trace:
    """The trace of a workload config (mapping / DictConfig / WorkloadConfig) for a seed.
    `arrival_rate` must be resolved already (see `resolve_arrival_rate`), except for a
    `trace` replay, which then keeps the file's arrival times."""
    wc = cfg if isinstance(cfg, WorkloadConfig) else WorkloadConfig.parse(cfg)
    return get_generator(wc.generator).build(wc, seed)


__all__ = [
    "GENERATORS",
    "Generator",
    "WorkloadConfig",
    "build_trace",
    "capacity_of",
    "dump_trace",
    "get_generator",
    "load_capacity",
    "load_trace",
    "resolve_arrival_rate",
]
