"""`make reproduce`: run every experiment (Hydra multirun, conf/experiment/*) on a named grid,
then regenerate the tables, figures and claim verdicts (analysis/report.py).

    python -m topas.reproduce                  # the reduced grid (< 30 min on 2 cores)
    python -m topas.reproduce --grid quick     # smoke test (< 5 min)
    python -m topas.reproduce --grid full      # the experiment configs' full grids (bigger machine / cluster)
    python -m topas.reproduce --backend sglang # the same on a real SGLang server (GPU machine)

Sweeps are resumable: a complete run folder is skipped, a failed point is recorded in its
folder (error.txt) and does not stop the sweep. Runs go to runs/<experiment>[_<grid>]/.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER_SET = "fcfs,lpm,parrot_fcfs,autellix_las,spf,topas"
ALL = PAPER_SET + ",kvflow,dfs_weight,continuum_ttl"

# experiment -> grid -> Hydra overrides (sweeps as comma lists). "full" uses the experiment config as is.
GRIDS: dict[str, dict[str, list[str]]] = {
    "main": {
        "quick": ["workload=chain3,dag4,metagpt_sop", f"scheduler={PAPER_SET}", "seed=0,1", "workload.num_tasks=40"],
        "default": ["workload=chain3,dag4,dag10_wide,metagpt_sop,metagpt_tl", f"scheduler={ALL}", "seed=0,1,2",
                    "workload.num_tasks=100"],
    },
    "load_sweep": {
        "quick": ["workload=dag4", "workload.load=0.3,0.5,0.7,0.8,0.9", "scheduler=fcfs,parrot_fcfs,topas", "seed=0",
                  "workload.num_tasks=40"],
        "default": ["workload=chain3,dag4,metagpt_tl", "workload.load=0.3,0.5,0.7,0.8,0.9", f"scheduler={PAPER_SET}",
                    "seed=0,1", "workload.num_tasks=80"],
    },
    "kv_budget": {
        "quick": ["workload=dag4", "backend.kv_pool_tokens=16000,30000", "scheduler=fcfs,parrot_fcfs,topas", "seed=0",
                  "workload.num_tasks=40"],
        "default": ["workload=dag4,metagpt_tl", "backend.kv_pool_tokens=16000,22035,30000,40000",
                    f"scheduler={PAPER_SET}", "seed=0,1", "workload.num_tasks=80"],
    },
    "ablation": {
        "quick": ["seed=0", "workload.num_tasks=30"],
        "default": ["seed=0,1,2", "workload.num_tasks=60"],
    },
    "overhead": {
        "quick": ["seed=0", "workload.num_tasks=40"],
        "default": ["seed=0,1", "workload.num_tasks=100"],
    },
    "motivation": {
        "quick": ["seed=0", "workload.num_tasks=100"],
        "default": ["seed=0,1,2"],
    },
}


def experiment_name(exp: str, grid: str) -> str:
    return exp if grid == "default" else f"{exp}_{grid}"


def sweep(exp: str, grid: str, jobs: int, backend: str, log_dir: Path) -> float:
    overrides = [] if grid == "full" else GRIDS[exp][grid]
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", f"+experiment={exp}", "hydra/launcher=local",
           f"hydra.launcher.n_jobs={jobs}", f"experiment_name={experiment_name(exp, grid)}", "logger=none",
           "progress=false", f"backend={backend}", *overrides]
    start = time.time()
    log = log_dir / f"{experiment_name(exp, grid)}.log"
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    took = time.time() - start
    status = "ok" if rc == 0 else f"exit {rc} (see {log})"
    print(f"  {exp:11s} {took:7.1f} s  {status}", flush=True)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=["quick", "default", "full"], default="default")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--backend", default="sim")
    ap.add_argument("--experiments", nargs="*", default=list(GRIDS))
    ap.add_argument("--out", default=None, help="results folder (default analysis/results[/<grid>])")
    ap.add_argument("--skip-runs", action="store_true", help="only regenerate tables and figures")
    ap.add_argument("--wandb", choices=["offline", "online"], default=None, help="also log the figures to W&B")
    a = ap.parse_args()
    out = Path(a.out) if a.out else ROOT / "analysis" / "results" / ("" if a.grid == "default" else a.grid)
    log_dir = ROOT / "runs" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    if not a.skip_runs:
        print(f"running the '{a.grid}' grid on backend '{a.backend}' with {a.jobs} jobs")
        for exp in a.experiments:
            sweep(exp, a.grid, a.jobs, a.backend, log_dir)
    from analysis.report import report

    names = {e: experiment_name(e, a.grid) for e in GRIDS}
    report(names, out, wandb_mode=a.wandb)
    print(f"total {time.time() - start:.0f} s; results in {out}")


if __name__ == "__main__":
    main()
