"""`make reproduce`: run every experiment (a Hydra multirun of conf/experiment/*) on a named
grid, then regenerate the tables, figures and claim verdicts (analysis/report.py).

    python -m topas.reproduce                  # the reduced grid (< 30 min on 2 cores)
    python -m topas.reproduce --grid quick     # smoke test (< 5 min)
    python -m topas.reproduce --grid full      # the experiment configs' full grids (bigger machine / cluster)
    python -m topas.reproduce --backend sglang # the same on a real SGLang server (GPU machine)
    python -m topas.reproduce --grid real --backend sglang --dry-run   # the plan (runs per GPU) and its estimated time
    python -m topas.reproduce gpu=h100_80gb hydra/launcher=slurm   # Hydra overrides reach every run
    python -m topas.reproduce --wandb offline  # log every run to W&B (one group per experiment) + a report run

Sweeps are resumable: a complete run folder (same code and config) is skipped. A failed point
is recorded in its folder (error.txt) and in the sweep's manifest and does not stop the sweep.
The exit status is non-zero when any run failed or is missing (killed, aborted sweep); the
tables are still written, with the incomplete rows marked and failed_runs.md listing them.
Runs go to runs/<experiment>[_<grid>]/; each sweep's console output to runs/logs/.

A real engine (`--backend sglang`) replays in real time and owns its GPU, so its runs are placed
on accelerators, not cores (topas/placement.py): one worker per visible GPU
(`CUDA_VISIBLE_DEVICES`, else nvidia-smi; groups of `backend.gpus_per_run`), each worker's runs
one at a time in one process pinned to its GPU(s), its server kept between runs with the same
server options (`backend.reuse_server=true`); without a GPU, one run at a time on the CPU server
with the tiny model (`model=tiny_cpu`, scaled tokens, explicit arrival rates). A user's
`hydra/launcher=...` (e.g. slurm_gpu) places the runs instead. Real runs go to
runs/<experiment>_<grid>_sglang/, results to analysis/results/sglang/<grid>/; before anything
starts the plan and its estimated time (the simulator's makespans of the same traces) are printed;
`--dry-run` stops there.

W&B is off unless `--wandb offline|online` (`make reproduce ARGS="--wandb offline"`): then every
run of every sweep is logged (logger=wandb, group = experiment name; a point skipped as complete
is logged from its folder unless it already holds a W&B run), and the report logs one run
(job_type report) with every figure and table. Offline runs are uploaded later with `wandb sync`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import yaml
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
PAPER_SET = "fcfs,lpm,parrot_fcfs,autellix_las,spf,topas"


def _main_schedulers() -> str:
    """The main comparison's schedulers as conf/experiment/main.yaml lists them (one list: a scheduler
    added there, as docs/recipes.md says, joins every grid that uses ALL)."""
    cfg = yaml.safe_load((ROOT / "conf" / "experiment" / "main.yaml").read_text())
    return cfg["hydra"]["sweeper"]["params"]["scheduler"]


ALL = _main_schedulers()

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
    # cells are (workload, rate) points of conf/regime_point/ (regime.yaml says why one axis);
    # the default grid keeps the host x pool cube and the paper's rates, fewer loads and workloads
    "regime": {
        "quick": ["+regime_point=dag4_load0.5,dag4_load1.3", "scheduler=parrot_fcfs,phase_batch,topas", "seed=0,1",
                  "workload.num_tasks=30"],
        # 320 runs: ~12 min on 1 job, ~6.5 min with --jobs 2 on 2 cores (2 seeds: wide CIs; the full grid has 10)
        "default": ["+regime_point=chain3_load0.5,chain3_load1.3,dag4_load0.5,dag4_load0.9,dag4_load1.3,"
                    "metagpt_tl_load0.9,metagpt_tl_paper,metagpt_sop_paper", "seed=0,1", "workload.num_tasks=60"],
    },
}


# Real-engine grids (any backend; `--grid real` on the simulator gives its prediction of the same
# runs): the paper's workloads and main-comparison schedulers, few tasks, one seed.
REAL_GRIDS: dict[str, dict[str, list[str]]] = {
    "main": {
        "quick": ["workload=chain3,dag4,metagpt_sop", f"scheduler={PAPER_SET}", "seed=0", "workload.num_tasks=10"],
        "real": ["workload=chain3,dag4,dag10_wide,metagpt_sop,metagpt_tl", f"scheduler={PAPER_SET}", "seed=0",
                 "workload.num_tasks=20"],
    },
}
# the experiments a real engine runs on the default / full grids (kv_budget and regime sweep simulator options)
REAL_EXPERIMENTS = ("main", "load_sweep", "ablation", "overhead", "motivation")
# a real engine without a GPU: the tiny CPU model (automatic token_scale), explicit arrival rates (no
# capacity is measured for it), and on the quick grid fewer tasks (~5 min here, see the README)
CPU_OVERRIDES = ["model=tiny_cpu", "workload.load=null", "workload.arrival_rate=1.0"]
CPU_GRIDS: dict[str, dict[str, list[str]]] = {
    "main": {"quick": ["workload=chain3,dag4,metagpt_sop", f"scheduler={PAPER_SET}", "seed=0", "workload.num_tasks=6"]},
}


def experiment_name(exp: str, grid: str, backend: str = "sim") -> str:
    name = exp if grid == "default" else f"{exp}_{grid}"
    return name if backend == "sim" else f"{name}_{backend}"


def default_experiments(grid: str, backend: str) -> list[str]:
    if grid == "real" or (backend != "sim" and grid == "quick"):
        return list(REAL_GRIDS)
    return list(GRIDS) if backend == "sim" else list(REAL_EXPERIMENTS)


def _grid_overrides(exp: str, grid: str, backend: str, cpu: bool) -> list[str]:
    if grid == "full":
        return []
    if cpu and grid in CPU_GRIDS.get(exp, {}):
        return CPU_GRIDS[exp][grid]
    if grid == "real" or (backend != "sim" and grid in REAL_GRIDS.get(exp, {})):
        if grid not in REAL_GRIDS.get(exp, {}):
            raise ValueError(f"experiment {exp} has no '{grid}' grid (real-engine grids: {', '.join(REAL_GRIDS)})")
        return REAL_GRIDS[exp][grid]
    return GRIDS[exp][grid]


def _keys(overrides: list[str]) -> set[str]:
    return {o.split("=")[0].lstrip("+~") for o in overrides}


def sweep_overrides(exp: str, grid: str, backend: str, extra: list[str], runs: Path, wandb: str | None = None,
                    cpu: bool = False) -> list[str]:
    """The multirun overrides of one experiment; `extra` (the user's) come last and win.
    `cpu`: a real engine without a GPU (the tiny CPU model, explicit rates)."""
    name = experiment_name(exp, grid, backend)
    base = [f"+experiment={exp}", f"experiment_name={name}", "progress=false", f"backend={backend}",
            f"hydra.sweep.dir={runs / name}"]
    if not any(o.split("=")[0].lstrip("+") == "logger" for o in extra):
        # the logger is an output-only key (topas/run_identity.py): turning W&B on re-runs nothing
        base += ["logger=wandb", f"logger.mode={wandb}"] if wandb else ["logger=none"]
    if backend == "sglang":
        base.append("backend.reuse_server=true")  # one server per worker for consecutive runs (placement.py)
    grid_ov = _grid_overrides(exp, grid, backend, cpu)
    if cpu and backend != "sim":
        grid_ov = [o for o in CPU_OVERRIDES if o.split("=")[0] not in _keys(list(extra))] + grid_ov
    return base + grid_ov + list(extra)


def _launcher_given(overrides: list[str]) -> str | None:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith(("hydra/launcher=", "+hydra/launcher="))), None)


def _log_skipped(df, mode: str, write) -> None:
    """Runs skipped as complete did not log themselves: log them from their folders (once)."""
    from omegaconf import OmegaConf

    from topas.wandb_logger import is_logged, log_run_dir

    cfg = OmegaConf.merge(OmegaConf.load(ROOT / "conf" / "logger" / "wandb.yaml"), {"mode": mode})
    todo = [r.run_dir for r in df.itertuples() if r.status == "cached" and not is_logged(r.run_dir)]
    for run_dir in tqdm(todo, desc="wandb (skipped runs)", unit="run", leave=False, disable=not todo):
        log_run_dir(cfg, run_dir)
    if todo:
        write(f"  logged {len(todo)} complete run(s) from their folders to W&B ({mode})")


def _placement(a, plans: dict, gpus: list[str], write) -> dict:
    """Real-engine placement of every experiment's jobs (placement.py), with the estimated real
    time of each job from the simulator; prints the plan. Returns exp -> workers."""
    from topas.config import ConfigError
    from topas.errors import one_line
    from topas.placement import describe, gpu_groups, plan_placement, server_signature
    from topas.prediction import STARTUP_S, estimate_jobs
    from topas.sweep import compose_config

    profile = "gpu" if gpus else "cpu"
    placed, total_s = {}, 0.0
    for exp, (_, jobs) in plans.items():
        per_run = int(compose_config(jobs[0]).backend.get("gpus_per_run", 1) or 1) if jobs else 1
        groups = gpu_groups(gpus, per_run)
        try:
            costs = estimate_jobs(jobs, profile)
            how = "simulator: FCFS makespan of each distinct trace"
        except ConfigError:
            raise  # e.g. a load without the model/GPU's capacity: every run would fail the same way
        except Exception as e:  # noqa: BLE001 - the plan still works, balanced by run count
            costs, how = [0.0] * len(jobs), f"no estimate ({one_line(e)})"
        workers = plan_placement(jobs, groups, costs, a.jobs)
        for w in workers:  # one server start per distinct server on each worker
            w.est_s += STARTUP_S[profile] * len({server_signature(jobs[i]) for i in w.jobs})
        span = max((w.est_s for w in workers), default=0.0)
        total_s += span
        write(f"{experiment_name(exp, a.grid, a.backend)}: {len(jobs)} runs on {len(workers)} worker(s), "
              f"~{span / 3600:.2f} h ({how}; + {STARTUP_S[profile]:.0f} s per server start)")
        for line in describe(workers, jobs):
            write(line)
        placed[exp] = workers
    write(f"estimated real time: ~{total_s / 3600:.2f} h ({total_s / 60:.0f} min), experiments one after another")
    return placed


def main() -> None:
    from topas.errors import one_line
    from topas.sweep import expand, run_sweep, status_counts

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=["quick", "default", "full", "real"], default="default",
                    help="real: the real-engine grid (paper workloads x main schedulers, 20 tasks, 1 seed)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="local worker processes (default: one per core on the simulator; on a real engine one "
                         "per GPU group, this caps it)")
    ap.add_argument("--backend", default="sim")
    ap.add_argument("--experiments", nargs="*", default=None,
                    help="default: every experiment (simulator), the real-engine set (other backends)")
    ap.add_argument("--out", default=None,
                    help="results folder (default analysis/results[/<grid>]; real engines analysis/results/<backend>/<grid>)")
    ap.add_argument("--skip-runs", action="store_true", help="only regenerate tables and figures")
    ap.add_argument("--runs", default=str(ROOT / "runs"), help="the runs folder (default runs/)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan (runs per GPU or worker) and its estimated real time; run nothing")
    ap.add_argument("--wandb", choices=["offline", "online"], default=None,
                    help="log every run to W&B (group = experiment) and one report run with every figure and table; "
                         "offline runs: upload with `wandb sync`")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every run (gpu=..., hydra/launcher=slurm, ...)")
    a = ap.parse_args()
    real = a.backend != "sim"
    experiments = a.experiments if a.experiments is not None else default_experiments(a.grid, a.backend)
    if a.out:
        out = Path(a.out)
    elif real:
        out = ROOT / "analysis" / "results" / a.backend / a.grid
    else:
        out = ROOT / "analysis" / "results" / ("" if a.grid == "default" else a.grid)
    runs = Path(a.runs).resolve()
    log_dir = runs / "logs"
    start = time.time()
    incomplete = False
    launcher = _launcher_given(a.overrides)
    placed_here = a.backend == "sglang" and launcher is None
    gpus: list[str] = []
    extra = list(a.overrides)
    if a.backend == "sglang":
        from topas.placement import visible_gpus

        gpus = visible_gpus()
        if launcher is not None and "slurm" in launcher and "hydra.launcher.gpus_per_node" not in _keys(extra):
            per = next((o.split("=", 1)[1] for o in extra if o.startswith("backend.gpus_per_run=")), "1")
            extra.append(f"hydra.launcher.gpus_per_node={per}")  # one server per SLURM job, on its own GPU(s)
    cpu = a.backend == "sglang" and not gpus and launcher is None and "model" not in _keys(extra)
    if not a.skip_runs:
        plans = {}
        for exp in experiments:
            try:
                ov = sweep_overrides(exp, a.grid, a.backend, extra, runs, a.wandb, cpu=cpu)
                plans[exp] = (ov, expand(ov))
            except Exception as e:  # noqa: BLE001 - a bad override or backend: nothing has run yet
                print(f"error: experiment {exp}: {one_line(e)}", file=sys.stderr)
                raise SystemExit(2) from None
        total = sum(len(jobs) for _, jobs in plans.values())
        if placed_here:
            where = f"GPUs {','.join(gpus)}" if gpus else "CPU (no GPU visible: tiny model, scaled tokens)"
            print(f"the '{a.grid}' grid on backend '{a.backend}': {total} runs on {where}", flush=True)
            try:
                placements = _placement(a, plans, gpus, print)
            except ValueError as e:
                print(f"error: {one_line(e)}", file=sys.stderr)
                raise SystemExit(2) from None
        else:
            jobs_n = a.jobs or os.cpu_count() or 1
            print(f"{'plan of ' if a.dry_run else 'running '}the '{a.grid}' grid on backend '{a.backend}': {total} runs, "
                  f"{'launcher ' + launcher if launcher else f'{jobs_n} local jobs'}", flush=True)
        if a.dry_run:
            for exp, (_, jobs) in plans.items():
                print(f"  {experiment_name(exp, a.grid, a.backend)}: {len(jobs)} runs, e.g. {' '.join(jobs[0]) if jobs else '-'}")
            print("dry run: nothing was started")
            return
        log_dir.mkdir(parents=True, exist_ok=True)
        print(f"console output in {log_dir}/", flush=True)
        with tqdm(total=total, desc="reproduce", unit="run", dynamic_ncols=True) as bar:
            for exp, (ov, jobs) in plans.items():
                name = experiment_name(exp, a.grid, a.backend)
                exp_dir = runs / name
                exp_dir.mkdir(parents=True, exist_ok=True)
                (exp_dir / "sweep_plan.json").write_text(json.dumps(jobs))
                t0 = time.time()
                if placed_here:
                    from topas.placement import run_placed

                    df, rc = run_placed(placements[exp], jobs, exp_dir, exp_dir / "sweep_manifest.jsonl",
                                        log_dir / f"{name}.log", bar.update)
                else:
                    df, rc = run_sweep(ov, exp_dir / "sweep_manifest.jsonl", log_dir / f"{name}.log",
                                       a.jobs or os.cpu_count() or 1, bar.update, jobs)
                c = status_counts(df)
                bad = c["failed"] + c["missing"]
                incomplete |= bool(bad) or rc != 0
                if a.wandb:
                    _log_skipped(df, a.wandb, bar.write)
                note = "" if not bad and rc == 0 else f"  INCOMPLETE (sweep exit {rc}; see {log_dir / (name + '*.log')})"
                bar.write(f"  {exp:11s} {time.time() - t0:7.1f} s  {len(df)} runs: {c['ok']} ok, {c['cached']} cached, "
                          f"{c['failed']} failed, {c['missing']} missing{note}")
    from analysis.report import report

    names = {e: experiment_name(e, a.grid, a.backend) for e in GRIDS}
    _, failed = report(names, out, runs_root=runs, wandb_mode=a.wandb)
    if real:
        _real_vs_sim(runs / names["main"], out)
    print(f"total {time.time() - start:.0f} s; results in {out}")
    if incomplete or len(failed):
        print(f"error: {len(failed)} run(s) failed or are missing; the tables are incomplete ({out / 'failed_runs.md'})",
              file=sys.stderr)
        raise SystemExit(1)


def _real_vs_sim(exp_dir: Path, out: Path) -> None:
    """real_vs_sim.md: every real run's measurement beside the simulator's prediction of the same
    trace (its sim_prediction.json, written by the placement worker: topas/prediction.py)."""
    import pandas as pd

    rows = []
    for f in sorted(exp_dir.glob("**/sim_prediction.json")):
        if not (f.parent / "summary.json").exists():
            continue
        s = {**json.loads((f.parent / "summary.json").read_text()), **json.loads(f.read_text())}
        rows.append({"workload": s.get("workload"), "scheduler": s.get("scheduler"), "seed": s.get("seed"),
                     "JCT real (s)": s.get("jct_mean"), "JCT sim (s)": s.get("sim_jct_mean"),
                     "makespan real (s)": s.get("makespan_s"), "makespan sim (s)": s.get("sim_makespan_s"),
                     "sim latency": s.get("sim_latency"), "token scale": s.get("token_scale")})
    if not rows:
        return
    df = pd.DataFrame(rows).sort_values(["workload", "scheduler", "seed"])
    df["JCT sim/real"] = df["JCT sim (s)"] / df["JCT real (s)"]
    out.mkdir(parents=True, exist_ok=True)
    note = ("Each real run (its summary.json) beside the simulator's prediction of the same scaled trace, model, GPU "
            "and policy (sim latency: the latency model used; on CPU the measured tiny-model profile of `make fidelity`).")
    (out / "real_vs_sim.md").write_text(
        "# Real engine vs the simulator's prediction, per run\n\n" + df.to_markdown(index=False, floatfmt=".3g")
        + f"\n\n{note}\n")
    print(f"real vs simulator, per run: {out / 'real_vs_sim.md'}")


if __name__ == "__main__":
    main()
