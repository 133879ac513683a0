"""Simulator speed benchmark (prints figures; not a test).

    python -m topas.bench                               # 1,000 DAG-4 tasks at half capacity, FCFS
    python -m topas.bench workload=metagpt_tl scheduler=lpm workload.num_tasks=300

Reports simulated seconds per wall second, engine iterations per second, and the time of a
cached latency prediction against its goal (speed goals live here, not in timed tests).
Overrides are Hydra overrides of conf/config.yaml.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
CACHED_PREDICTION_GOAL_S = 20e-6  # the simulator's hot path asks the latency model every iteration
DEFAULTS = ["workload=dag4", "workload.num_tasks=1000", "workload.load=0.5", "workload.arrival_rate=null",
            "scheduler=fcfs", "logger=none", "progress=false"]


def cached_prediction_s(cfg, n: int = 20000) -> float:
    """Mean seconds of one memoised prediction (decode step and prefill) of the run's latency model."""
    from topas.engines.latency.factory import build_latency_model
    from topas.engines.latency.specs import load_gpu_spec, load_model_spec

    lat = build_latency_model(cfg.backend.latency, load_model_spec(cfg.model), load_gpu_spec(cfg.gpu))
    lat.decode(17, 5000)
    lat.prefill([(300, 1200), (50, 0)])
    t0 = time.perf_counter()
    for _ in range(n):
        lat.decode(17, 5000)
        lat.prefill([(300, 1200), (50, 0)])
    return (time.perf_counter() - t0) / (2 * n)


def main(argv: list[str]) -> None:
    from topas.runner import run

    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        cfg = compose(config_name="config", overrides=DEFAULTS + argv)
    with tempfile.TemporaryDirectory() as tmp:
        _, s = run(cfg, out_dir=tmp, quiet=True)
    print(f"workload {s['workload']}, scheduler {s['scheduler']}, {s['num_tasks']} tasks at {s['arrival_rate']:.4g} tasks/s")
    print(f"simulated time        {s['makespan_s']:.1f} s")
    print(f"wall time             {s['wall_s']:.2f} s (engine loop only)")
    print(f"speed                 {s['sim_speedup']:.0f}x real time")
    print(f"engine iterations     {s['iterations']} ({s['iterations'] / s['wall_s']:.0f} iterations/s, "
          f"{s['decode_steps']} decode steps, {s['prefill_iterations']} prefill)")
    print(f"policy decisions      {s['decisions']} ({s['decision_ms_mean']:.3f} ms mean, {s['decision_ms_p99']:.3f} ms p99)")
    if cfg.backend.latency == "profile":  # a measured file: nothing to compute, nothing to cache
        return
    per = cached_prediction_s(cfg)
    verdict = "meets" if per < CACHED_PREDICTION_GOAL_S else "MISSES"
    print(f"cached prediction     {per * 1e6:.1f} us per call ({verdict} the goal of {CACHED_PREDICTION_GOAL_S * 1e6:.0f} us)")


if __name__ == "__main__":
    main(sys.argv[1:])
