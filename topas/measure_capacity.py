"""Measure each workload's capacity (docs/protocol.md) and record it for the load axis.

Capacity of a workload on a model/GPU = FCFS task throughput with every task submitted at
t = 0 (saturated): finished tasks / (last finish - first arrival). Loads in experiment
configs are fractions of it. Results go to topas/workloads/data/capacity.yaml for the default
model/GPU pair (Qwen2.5-32B, A100-80GB), to data/capacity/<model>__<gpu>.yaml for any other.

    python -m topas.measure_capacity                          # all five workloads, default model/GPU
    python -m topas.measure_capacity --workloads dag4 --num-tasks 200 model=qwen2_5_14b
    python -m topas.measure_capacity --shapes evaluation:42 design:24 d100 --jobs 2   # shapes of the family

Shapes (`--shapes`: ids, or `<sample>:<n>` for the first n of a sample) go to
data/capacity_shapes.yaml for the default pair, to the pair's file for any other.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir

from topas.workloads.capacity import CAPACITY_FILE, SHAPES_CAPACITY_FILE, capacity_file

DEFAULT_PAIR = ("qwen2_5_32b", "a100_80gb")  # conf/config.yaml's defaults: the committed capacity.yaml

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
WORKLOADS = ("chain3", "dag4", "dag10_wide", "metagpt_sop", "metagpt_tl")
DEFAULT_TASKS = {"chain3": 200, "dag4": 200, "dag10_wide": 120, "metagpt_sop": 120, "metagpt_tl": 60, "shapes": 120}


def measure(workload: str, num_tasks: int, overrides: list[str], seed: int = 0) -> tuple[str, dict]:
    """(workload name, capacity entry) of a workload config (`workload` names conf/workload/<workload>.yaml)."""
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
    return w.name, {
        "model": model.name,
        "gpu": gpu.name,
        "tasks_per_s": round(len(record.tasks) / span, 6),
        "num_tasks": num_tasks,
        "seed": seed,
        "measured": dt.date.today().isoformat(),
        "sim_wall_s": round(wall, 2),
    }


def _shape_ids(items: list[str]) -> list[str]:
    from topas.workloads.shapes import parse_id, sample_ids

    ids: list[str] = []
    for item in items:
        if ":" in item:
            sample, n = item.split(":", 1)
            ids += sample_ids(sample, int(n))
        else:
            parse_id(item)
            ids.append(item)
    return list(dict.fromkeys(ids))


def _measure_job(job: tuple[str, int, list[str]]) -> tuple[str, dict]:
    return measure(*job)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="*", default=None, help="default: the five paper workloads (none with --shapes)")
    ap.add_argument("--shapes", nargs="*", default=[], help="shape ids, or <sample>:<n> (e.g. evaluation:42)")
    ap.add_argument("--num-tasks", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1, help="measurements in parallel (processes)")
    ap.add_argument("--out", default=None, help="default: capacity.yaml (default pair) or data/capacity/<model>__<gpu>.yaml")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (model=..., gpu=..., backend.*)")
    a = ap.parse_args()
    try:
        shapes = _shape_ids(a.shapes)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    workloads = a.workloads if a.workloads is not None else ([] if shapes else list(WORKLOADS))
    jobs = [(w, a.num_tasks or DEFAULT_TASKS.get(w, 100), a.overrides) for w in workloads]
    jobs += [("shapes", a.num_tasks or DEFAULT_TASKS["shapes"], [*a.overrides, f"workload.params.shape={sid}"]) for sid in shapes]
    if a.jobs > 1 and len(jobs) > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(a.jobs) as pool:
            results = pool.map(_measure_job, jobs)
    else:
        results = [_measure_job(j) for j in jobs]
    tables: dict[Path, dict] = {}
    for name, entry in results:
        pair = (entry["model"], entry["gpu"])
        out = Path(a.out) if a.out else (capacity_file(*pair) if pair != DEFAULT_PAIR
                                         else SHAPES_CAPACITY_FILE if name.startswith("shape_") else CAPACITY_FILE)
        if out not in tables:
            tables[out] = (yaml.safe_load(out.read_text()) if out.exists() else {}) or {}
        tables[out][name] = entry
        print(f"{name:12s} {entry['tasks_per_s']:.5f} tasks/s  ({entry['num_tasks']} tasks at t=0, FCFS, {entry['model']}/{entry['gpu']})")
    header = "# Workload capacity: FCFS task throughput, all tasks at t=0 (docs/protocol.md).\n# Written by `python -m topas.measure_capacity`; loads are fractions of these.\n"
    for out, table in tables.items():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(header + yaml.safe_dump(table, sort_keys=True))
        tmp.replace(out)


if __name__ == "__main__":
    main()
