"""Measured capacity per workload and the loads derived from it (docs/protocol.md).

Capacity of a workload on a model/GPU = FCFS task throughput with all tasks submitted at
t = 0. The measured figures live in `data/capacity.yaml`:

    chain3: {model: qwen2_5_32b, gpu: a100_80gb, tasks_per_s: 0.21}   # model.name, gpu.name of conf/model, conf/gpu
    ...

A workload config with `arrival_rate: null` and `load: 0.7` runs at 0.7 x capacity.
The shape family's shapes (`shape_<id>`) keep theirs in `data/capacity_shapes.yaml`, same format.

Another model/GPU pair keeps its own file, `data/capacity/<model>__<gpu>.yaml` (same format;
`make capacity ARGS="model=... gpu=..."` writes it), so measuring an H200 never changes the
A100 figures the simulator's committed results use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from topas.workloads.config import WorkloadConfig

CAPACITY_FILE = Path(__file__).parent / "data" / "capacity.yaml"
SHAPES_CAPACITY_FILE = Path(__file__).parent / "data" / "capacity_shapes.yaml"  # the shape family's, default pair
PAIR_DIR = Path(__file__).parent / "data" / "capacity"


def capacity_file(model: str, gpu: str) -> Path:
    """The capacity file of one model/GPU pair (the measurements `make capacity` writes)."""
    return PAIR_DIR / f"{model}__{gpu}.yaml"


def load_capacity(path: str | os.PathLike = CAPACITY_FILE) -> dict[str, dict[str, Any]] | None:
    """The capacity table (workload -> {model, gpu, tasks_per_s}), or None if not measured yet.
    Parsed once per version of the file (a run resolves its rate several times; the shapes' table is long)."""
    table = _table(Path(path))
    return None if table is None else {k: dict(v) for k, v in table.items()}


def _table(path: Path) -> Mapping[str, Mapping[str, Any]] | None:
    """The parsed table of a capacity file (shared: read it, never change it), None if there is none."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _parsed(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _parsed(path: str, mtime_ns: int, size: int) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a mapping workload -> {{model, gpu, tasks_per_s}}")
    for name, entry in data.items():
        rate = entry.get("tasks_per_s") if isinstance(entry, Mapping) else None
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
            raise ValueError(f"{path}: workload '{name}' needs a positive tasks_per_s, got {entry!r}")
    return {str(k): dict(v) for k, v in data.items()}


def capacity_of(
    workload: str, model: str | None = None, gpu: str | None = None, path: str | os.PathLike = CAPACITY_FILE
) -> float | None:
    """Measured capacity (tasks/s) of `workload`, or None if not measured (for that model/GPU)."""
    paths = [Path(path)]
    if Path(path) == CAPACITY_FILE:
        paths.append(SHAPES_CAPACITY_FILE)
        if model is not None and gpu is not None:
            paths.append(capacity_file(model, gpu))
    for p in paths:
        entry = (_table(p) or {}).get(workload)
        if entry is None:
            continue
        if (model is not None and entry.get("model") not in (None, model)) or (
            gpu is not None and entry.get("gpu") not in (None, gpu)
        ):
            continue
        return float(entry["tasks_per_s"])
    return None


def resolve_arrival_rate(cfg: Any, capacity: float | None = None) -> float | None:
    """The arrival rate of a workload config: `arrival_rate` if set, else `load` x capacity
    (capacity given, or read from data/capacity.yaml). None for a trace replayed at its own times."""
    wc = cfg if isinstance(cfg, WorkloadConfig) else WorkloadConfig.parse(cfg)
    if wc.arrival_rate is not None and wc.load is not None:
        raise ValueError(
            f"workload '{wc.name}': both workload.load={wc.load:g} and workload.arrival_rate={wc.arrival_rate:g} are set; "
            "set one of them"
        )
    if wc.arrival_rate is not None:
        return wc.arrival_rate
    if wc.load is None:
        if wc.generator == "trace":
            return None
        raise ValueError(f"workload '{wc.name}': set arrival_rate (tasks/s) or load (fraction of capacity)")
    cap = capacity if capacity is not None else capacity_of(wc.name)
    if cap is None:
        raise ValueError(
            f"workload '{wc.name}': load={wc.load} needs its capacity, not measured yet ({CAPACITY_FILE.name})"
        )
    return wc.load * cap
