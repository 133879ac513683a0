"""Measure each workload's capacity (docs/protocol.md) and record it for the load axis.

Capacity of a workload on a model/GPU = FCFS task throughput with every task submitted at
t = 0 (saturated): finished tasks / (last finish - first arrival). Loads in experiment
configs are fractions of it. Results go to topas/workloads/data/capacity.yaml for the default
model/GPU pair (Qwen2.5-32B, A100-80GB), to data/capacity/<model>__<gpu>.yaml for any other.

    python -m topas.measure_capacity                          # all five workloads, default model/GPU
    python -m topas.measure_capacity --workloads dag4 --num-tasks 200 model=qwen2_5_14b
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir

from topas.workloads.capacity import CAPACITY_FILE, capacity_file

DEFAULT_PAIR = ("qwen2_5_32b", "a100_80gb")  # conf/config.yaml's defaults: the committed capacity.yaml

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
WORKLOADS = ("chain3", "dag4", "dag10_wide", "metagpt_sop", "metagpt_tl")
DEFAULT_TASKS = {"chain3": 200, "dag4": 200, "dag10_wide": 120, "metagpt_sop": 120, "metagpt_tl": 60}


def measure(workload: str, num_tasks: int, overrides: list[str], seed: int = 0) -> dict:
    from topas.config import validate
    from topas.engines.latency.specs import load_gpu_spec, load_model_spec
    from topas.policy import create_policy
    from topas.runner import RunContext, backend_runner
    from topas.workloads import build_trace

    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        cfg = compose(config_name="config", overrides=[f"workload={workload}", "scheduler=fcfs", "logger=none"] + overrides)
    groups = validate(cfg)
    model, gpu = load_model_spec(cfg.model), load_gpu_spec(cfg.gpu)
    w = dataclasses.replace(groups["workload"], num_tasks=num_tasks, arrival_rate=1.0, load=None)
    trace = build_trace(w, seed)
    trace = dataclasses.replace(trace, tasks=tuple(dataclasses.replace(t, arrival=0.0) for t in trace.tasks))
    ctx = RunContext(groups["backend"], model, gpu, groups["scheduler"], create_policy("fcfs"), trace, 0.0, Path("runs/capacity"))
    record, wall = backend_runner(groups["backend"].name)(ctx)
    span = float(record.tasks["finish"].max())
    return {
        "model": model.name,
        "gpu": gpu.name,
        "tasks_per_s": round(len(record.tasks) / span, 6),
        "num_tasks": num_tasks,
        "seed": seed,
        "measured": dt.date.today().isoformat(),
        "sim_wall_s": round(wall, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--num-tasks", type=int, default=None)
    ap.add_argument("--out", default=None, help="default: capacity.yaml (default pair) or data/capacity/<model>__<gpu>.yaml")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (model=..., gpu=..., backend.*)")
    a = ap.parse_args()
    out = Path(a.out) if a.out else None
    table: dict = {}
    for w in a.workloads:
        entry = measure(w, a.num_tasks or DEFAULT_TASKS.get(w, 100), a.overrides)
        if out is None:
            pair = (entry["model"], entry["gpu"])
            out = CAPACITY_FILE if pair == DEFAULT_PAIR else capacity_file(*pair)
            out.parent.mkdir(parents=True, exist_ok=True)
            table = (yaml.safe_load(out.read_text()) if out.exists() else {}) or {}
        elif not table and out.exists():
            table = yaml.safe_load(out.read_text()) or {}
        table[w] = entry
        print(f"{w:12s} {entry['tasks_per_s']:.5f} tasks/s  ({entry['num_tasks']} tasks at t=0, FCFS, {entry['model']}/{entry['gpu']})")
    header = "# Workload capacity: FCFS task throughput, all tasks at t=0 (docs/protocol.md).\n# Written by `python -m topas.measure_capacity`; loads are fractions of these.\n"
    out.write_text(header + yaml.safe_dump(table, sort_keys=True))


if __name__ == "__main__":
    main()
