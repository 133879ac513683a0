"""`make reproduce`: run every experiment (a Hydra multirun of conf/experiment/*) on a named
grid, then regenerate the tables, figures and claim verdicts (analysis/report.py).

    python -m topas.reproduce                  # the reduced grid (< 30 min on 2 cores)
    python -m topas.reproduce --grid quick     # smoke test (< 5 min)
    python -m topas.reproduce --grid full      # the experiment configs' full grids (bigger machine / cluster)
    python -m topas.reproduce --backend sglang # the same on a real SGLang server (GPU machine)
    python -m topas.reproduce gpu=h100_80gb hydra/launcher=slurm   # Hydra overrides reach every run

Sweeps are resumable: a complete run folder (same code and config) is skipped. A failed point
is recorded in its folder (error.txt) and in the sweep's manifest and does not stop the sweep.
The exit status is non-zero when any run failed or is missing (killed, aborted sweep); the
tables are still written, with the incomplete rows marked and failed_runs.md listing them.
Runs go to runs/<experiment>[_<grid>]/; each sweep's console output to runs/logs/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
PAPER_SET = "fcfs,lpm,parrot_fcfs,autellix_las,spf,topas"
ALL = PAPER_SET + ",kvflow,dfs_weight,continuum_ttl,phase_batch,phase_batch_nolimit"

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


def sweep_overrides(exp: str, grid: str, backend: str, extra: list[str], runs: Path) -> list[str]:
    """The multirun overrides of one experiment; `extra` (the user's) come last and win."""
    name = experiment_name(exp, grid)
    base = [f"+experiment={exp}", f"experiment_name={name}", "progress=false", f"backend={backend}",
            f"hydra.sweep.dir={runs / name}"]
    if not any(o.split("=")[0].lstrip("+") == "logger" for o in extra):
        base.append("logger=none")
    return base + ([] if grid == "full" else GRIDS[exp][grid]) + list(extra)


def main() -> None:
    from topas.errors import one_line
    from topas.sweep import expand, run_sweep, status_counts

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=["quick", "default", "full"], default="default")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="local worker processes")
    ap.add_argument("--backend", default="sim")
    ap.add_argument("--experiments", nargs="*", default=list(GRIDS))
    ap.add_argument("--out", default=None, help="results folder (default analysis/results[/<grid>])")
    ap.add_argument("--skip-runs", action="store_true", help="only regenerate tables and figures")
    ap.add_argument("--runs", default=str(ROOT / "runs"), help="the runs folder (default runs/)")
    ap.add_argument("--wandb", choices=["offline", "online"], default=None, help="also log the figures to W&B")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every run (gpu=..., hydra/launcher=slurm, ...)")
    a = ap.parse_args()
    out = Path(a.out) if a.out else ROOT / "analysis" / "results" / ("" if a.grid == "default" else a.grid)
    runs = Path(a.runs).resolve()
    log_dir = runs / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    incomplete = False
    if not a.skip_runs:
        plans = {}
        for exp in a.experiments:
            ov = sweep_overrides(exp, a.grid, a.backend, a.overrides, runs)
            try:
                plans[exp] = (ov, expand(ov))
            except Exception as e:  # noqa: BLE001 - a bad override or backend: nothing has run yet
                print(f"error: experiment {exp}: {one_line(e)}", file=sys.stderr)
                raise SystemExit(2) from None
        total = sum(len(jobs) for _, jobs in plans.values())
        print(f"running the '{a.grid}' grid on backend '{a.backend}': {total} runs, {a.jobs} local jobs; "
              f"console output in {log_dir}/", flush=True)
        with tqdm(total=total, desc="reproduce", unit="run", dynamic_ncols=True) as bar:
            for exp, (ov, jobs) in plans.items():
                name = experiment_name(exp, a.grid)
                exp_dir = runs / name
                exp_dir.mkdir(parents=True, exist_ok=True)
                (exp_dir / "sweep_plan.json").write_text(json.dumps(jobs))
                t0 = time.time()
                df, rc = run_sweep(ov, exp_dir / "sweep_manifest.jsonl", log_dir / f"{name}.log", a.jobs, bar.update, jobs)
                c = status_counts(df)
                bad = c["failed"] + c["missing"]
                incomplete |= bool(bad) or rc != 0
                note = "" if not bad and rc == 0 else f"  INCOMPLETE (sweep exit {rc}; see {log_dir / (name + '.log')})"
                bar.write(f"  {exp:11s} {time.time() - t0:7.1f} s  {len(df)} runs: {c['ok']} ok, {c['cached']} cached, "
                          f"{c['failed']} failed, {c['missing']} missing{note}")
    from analysis.report import report

    names = {e: experiment_name(e, a.grid) for e in GRIDS}
    _, failed = report(names, out, runs_root=runs, wandb_mode=a.wandb)
    print(f"total {time.time() - start:.0f} s; results in {out}")
    if incomplete or len(failed):
        print(f"error: {len(failed)} run(s) failed or are missing; the tables are incomplete ({out / 'failed_runs.md'})",
              file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
