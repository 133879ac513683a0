"""`make reproduce`: run every experiment (a Hydra multirun of conf/experiment/*) on a named
grid, then regenerate the tables, figures and claim verdicts (analysis/report.py).

    python -m topas.reproduce                  # the reduced grid (< 30 min on 2 cores)
    python -m topas.reproduce --grid quick     # smoke test (< 5 min)
    python -m topas.reproduce --grid full      # the experiment configs' full grids (bigger machine / cluster)
    python -m topas.reproduce --backend sglang # the same on a real SGLang server (GPU machine)
    python -m topas.reproduce --grid real --backend sglang --dry-run   # the plan (runs per GPU) and its estimated time
    python -m topas.reproduce gpu=h100_80gb hydra/launcher=slurm   # Hydra overrides reach every run
    python -m topas.reproduce --wandb offline  # log every run to W&B (one group per experiment) + a report run
    python -m topas.reproduce --experiments main motivation -- seed=0   # overrides after `--experiments`: after `--`

Every grid is a conf/experiment config (`grid_config`): `<exp>.yaml` the full grid (10 seeds, 200
tasks), `<exp>_quick.yaml` / `<exp>_default.yaml` the reduced ones, `main_real.yaml` the real-engine
grid, `main_quick_real.yaml` / `main_quick_cpu.yaml` a real engine's quick grid with / without a GPU.
`python run.py -m +experiment=main_quick` runs one of them alone.

Every override value of every experiment is checked (as each run checks itself) before the first
run, and for `--dry-run`: bad input is one `error:` line and status 2, with nothing run or written.
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
run of every sweep is logged (logger=wandb, group = <experiment>:<sweep folder>; a point skipped as complete
is logged from its folder unless it already holds a W&B run), and the report logs one run
(job_type report) with every figure and table. Offline runs are uploaded later with `wandb sync`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from tqdm import tqdm

import topas.scheduler_sets  # noqa: F401 - the `scheduler_set` resolver of the sweep lists

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT_DIR = ROOT / "conf" / "experiment"
# The experiments, in run order. Each grid is a conf/experiment file (the only definition of its
# workloads, loads, schedulers, seeds and task count), see `grid_config`: <exp>.yaml is the full grid,
# <exp>_<grid>.yaml a reduced one, which extends it and replaces some of its sweep lists.
EXPERIMENTS = ("main", "load_sweep", "kv_budget", "ablation", "overhead", "motivation", "regime", "shapes")
# the experiments a real engine runs on the default / full grids (kv_budget and regime sweep simulator options)
REAL_EXPERIMENTS = ("main", "load_sweep", "ablation", "overhead", "motivation")
# a real engine without a GPU: the tiny CPU model (automatic token_scale), explicit arrival rates (no
# capacity is measured for it); the task count of its quick grid is conf/experiment/<exp>_quick_cpu.yaml's
CPU_OVERRIDES = ["model=tiny_cpu", "workload.load=null", "workload.arrival_rate=1.0"]


def _has_config(name: str) -> bool:
    return (EXPERIMENT_DIR / f"{name}.yaml").is_file()


def grid_config(exp: str, grid: str, backend: str = "sim", cpu: bool = False) -> str:
    """The conf/experiment config of `exp` on `grid`: `<exp>` for the full grid, else the first that
    exists of `<exp>_<grid>_cpu` (a real engine without a GPU), `<exp>_<grid>_real` (a real engine),
    `<exp>_<grid>`. The `real` grid is `<exp>_real` (on the simulator: its prediction of the same runs)."""
    if grid == "full":
        return exp
    names = ([f"{exp}_{grid}_cpu"] if cpu else []) + ([f"{exp}_{grid}_real"] if backend != "sim" else [])
    for name in [*names, f"{exp}_{grid}"]:
        if _has_config(name):
            return name
    raise ValueError(f"experiment {exp} has no '{grid}' grid (no conf/experiment/{exp}_{grid}.yaml)")


def _sweep_values(name: str) -> dict[str, str]:
    """The sweep values as written: `hydra.sweeper.params` of conf/experiment/<name>.yaml over
    those of the experiments it extends (its `defaults`), as Hydra merges them."""
    cfg = yaml.safe_load((EXPERIMENT_DIR / f"{name}.yaml").read_text()) or {}
    params: dict[str, str] = {}
    for parent in cfg.get("defaults") or []:
        if isinstance(parent, str) and parent != "_self_":
            params.update(_sweep_values(parent))
    own = ((cfg.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    own = OmegaConf.to_container(OmegaConf.create(own), resolve=True)  # a named scheduler set: its list
    return {**params, **{k: str(v) for k, v in own.items()}}


def sweep_params(name: str) -> dict[str, list[str]]:
    """The sweep lists of conf/experiment/<name>.yaml (over those of the experiments it extends),
    each expanded to its choices (`topas.sweep.sweep_choices`: a comma list, a range, or a glob
    over a config group such as main.yaml's schedulers)."""
    from topas.sweep import sweep_choices

    return {k: sweep_choices(k, v) for k, v in _sweep_values(name).items()}


# experiment -> grid -> key -> its sweep choices, read from conf/experiment (the reduced simulator grids)
GRIDS: dict[str, dict[str, dict[str, list[str]]]] = {
    exp: {g: sweep_params(f"{exp}_{g}") for g in ("quick", "default") if _has_config(f"{exp}_{g}")}
    for exp in EXPERIMENTS
}


def experiment_name(exp: str, grid: str, backend: str = "sim") -> str:
    name = exp if grid == "default" else f"{exp}_{grid}"
    return name if backend == "sim" else f"{name}_{backend}"


def default_experiments(grid: str, backend: str) -> list[str]:
    """The experiments a grid runs: those with a real-engine grid file for `real` and a real engine's
    `quick`, else every experiment (the simulator) or REAL_EXPERIMENTS (a real engine)."""
    if grid == "real" or (backend != "sim" and grid == "quick"):
        suffix = "real" if grid == "real" else f"{grid}_real"
        return [e for e in EXPERIMENTS if _has_config(f"{e}_{suffix}")]
    return list(EXPERIMENTS) if backend == "sim" else list(REAL_EXPERIMENTS)


def _keys(overrides: list[str]) -> set[str]:
    return {o.split("=")[0].lstrip("+~") for o in overrides}


def sweep_overrides(exp: str, grid: str, backend: str, extra: list[str], runs: Path, wandb: str | None = None,
                    cpu: bool = False) -> list[str]:
    """The multirun overrides of one experiment on `grid` (its conf/experiment config, `grid_config`);
    `extra` (the user's) come last and win. `cpu`: a real engine without a GPU (the tiny CPU model,
    explicit rates)."""
    name = experiment_name(exp, grid, backend)
    base = [f"+experiment={grid_config(exp, grid, backend, cpu)}", f"experiment_name={name}", "progress=false",
            f"backend={backend}", f"hydra.sweep.dir={runs / name}"]
    if not any(o.split("=")[0].lstrip("+") == "logger" for o in extra):
        # the logger is an output-only key (topas/run_identity.py): turning W&B on re-runs nothing
        base += ["logger=wandb", f"logger.mode={wandb}"] if wandb else ["logger=none"]
    if backend == "sglang":
        base.append("backend.reuse_server=true")  # one server per worker for consecutive runs (placement.py)
    if cpu and backend != "sim":
        base += [o for o in CPU_OVERRIDES if o.split("=")[0] not in _keys(list(extra))]
    return base + list(extra)


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
    try:
        _main()
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C); every run stopped; runs that finished are kept and a rerun resumes",
              file=sys.stderr)
        raise SystemExit(130) from None


def _main() -> None:
    from topas.errors import one_line
    from topas.launchers import jobs_overrides, name_missing
    from topas.reproduce_args import check_args, parse_args
    from topas.sweep import check_jobs, expand, run_sweep, status_counts, write_plan

    a = parse_args(__doc__, ROOT / "runs")
    real = a.backend != "sim"
    experiments = a.experiments if a.experiments is not None else default_experiments(a.grid, a.backend)
    if a.out:
        out = Path(a.out)
    elif real:
        out = ROOT / "analysis" / "results" / a.backend / a.grid
    else:
        out = ROOT / "analysis" / "results" / ("" if a.grid == "default" else a.grid)
    runs = Path(a.runs).resolve()
    problem = check_args(a, runs, out, {e: experiment_name(e, a.grid, a.backend) for e in EXPERIMENTS})
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
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
                ov += jobs_overrides(launcher, a.jobs, ov) if launcher else []  # --jobs applied to the user's launcher
                plans[exp] = (ov, expand(ov))
                check_jobs(plans[exp][1])  # every override value, as each run checks it: before anything runs
            except Exception as e:  # noqa: BLE001 - a bad override or backend: nothing has run yet
                from topas.sweep import explain

                print(f"error: experiment {exp}: {explain(e, extra)}", file=sys.stderr)
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
                schedulers = list(dict.fromkeys(o.split("=", 1)[1] for j in jobs for o in j if o.startswith("scheduler=")))
                if schedulers:
                    print(f"    schedulers ({len(schedulers)}): {','.join(schedulers)}")
            print("dry run: nothing was started")
            return
        log_dir.mkdir(parents=True, exist_ok=True)
        print(f"console output in {log_dir}/", flush=True)
        with tqdm(total=total, desc="reproduce", unit="run", dynamic_ncols=True) as bar:
            for exp, (ov, jobs) in plans.items():
                name = experiment_name(exp, a.grid, a.backend)
                exp_dir = runs / name
                write_plan(exp_dir, jobs)  # the experiment's last sweep: what the report reads
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
                name_missing(df, rc, log_dir / f"{name}.log", exp_dir / "sweep_manifest.jsonl", bar.write)  # the errors, named
    from analysis.report import report

    names = {e: experiment_name(e, a.grid, a.backend) for e in EXPERIMENTS}
    try:
        _, failed = report(names, out, runs_root=runs, wandb_mode=a.wandb)
        if real:
            _real_vs_sim(runs / names["main"], out)
    except (OSError, ValueError) as e:  # a full disk, a damaged file: one line naming it
        print(f"error: writing the report to {out}: {one_line(e, out)}", file=sys.stderr)
        raise SystemExit(2) from None
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
