"""Simulator speed benchmark (prints figures; not a test).

    python -m topas.bench                               # 1,000 DAG-4 tasks at half capacity, FCFS
    python -m topas.bench workload=metagpt_tl scheduler=lpm workload.num_tasks=300

Reports simulated seconds per wall second and engine iterations per second.
Overrides are Hydra overrides of conf/config.yaml.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
DEFAULTS = ["workload=dag4", "workload.num_tasks=1000", "workload.load=0.5", "workload.arrival_rate=null",
            "scheduler=fcfs", "logger=none", "progress=false"]


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


if __name__ == "__main__":
    main(sys.argv[1:])
