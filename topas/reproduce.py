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

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
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


def main() -> None:
    try:
        _main()
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C); every run stopped; runs that finished are kept and a rerun resumes",
              file=sys.stderr)
        raise SystemExit(130) from None


@dataclass
class Setup:
    """What the command line asks for, resolved: where runs and results go, which experiments, how runs are
    placed (a user's launcher, this machine's GPUs, or local jobs) and the overrides every run gets."""

    a: argparse.Namespace
    experiments: list[str]
    out: Path
    runs: Path
    extra: list[str]
    launcher: str | None = None
    gpus: list[str] = field(default_factory=list)
    cpu: bool = False  # a real engine without a GPU: the tiny CPU model, explicit rates

    @property
    def placed_here(self) -> bool:  # a real engine without a user's launcher: runs placed on this machine's GPUs
        return self.a.backend == "sglang" and self.launcher is None

    def name(self, exp: str) -> str:
        return experiment_name(exp, self.a.grid, self.a.backend)


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2) from None


def setup(a: argparse.Namespace) -> Setup:
    """The command line resolved and checked (one `error:` line, status 2, before anything runs)."""
    from topas.reproduce_args import check_args

    if a.out:
        out = Path(a.out)
    elif a.backend != "sim":
        out = ROOT / "analysis" / "results" / a.backend / a.grid
    else:
        out = ROOT / "analysis" / "results" / ("" if a.grid == "default" else a.grid)
    s = Setup(a, a.experiments if a.experiments is not None else default_experiments(a.grid, a.backend), out,
              Path(a.runs).resolve(), list(a.overrides), _launcher_given(a.overrides))
    problem = check_args(a, s.runs, out, {e: s.name(e) for e in EXPERIMENTS})
    if problem:
        _fail(problem)
    if a.backend == "sglang":
        from topas.placement import visible_gpus

        s.gpus = visible_gpus()
        if s.launcher is not None and "slurm" in s.launcher and "hydra.launcher.gpus_per_node" not in _keys(s.extra):
            per = next((o.split("=", 1)[1] for o in s.extra if o.startswith("backend.gpus_per_run=")), "1")
            s.extra.append(f"hydra.launcher.gpus_per_node={per}")  # one server per SLURM job, on its own GPU(s)
    s.cpu = a.backend == "sglang" and not s.gpus and s.launcher is None and "model" not in _keys(s.extra)
    return s


def plan(s: Setup) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Every experiment's multirun overrides and its jobs, every override value checked as each run checks it:
    before anything runs."""
    from topas.launchers import jobs_overrides
    from topas.sweep import check_jobs, expand, explain

    plans = {}
    for exp in s.experiments:
        try:
            ov = sweep_overrides(exp, s.a.grid, s.a.backend, s.extra, s.runs, s.a.wandb, cpu=s.cpu)
            ov += jobs_overrides(s.launcher, s.a.jobs, ov) if s.launcher else []  # --jobs applied to the user's launcher
            plans[exp] = (ov, expand(ov))
            check_jobs(plans[exp][1])
        except Exception as e:  # noqa: BLE001 - a bad override or backend: nothing has run yet
            _fail(f"experiment {exp}: {explain(e, s.extra)}")
    return plans


def announce(s: Setup, plans: dict) -> dict:
    """Print the plan; on a real engine placed here, where each run goes and the estimated time (exp -> workers)."""
    from topas.errors import one_line

    total = sum(len(jobs) for _, jobs in plans.values())
    if not s.placed_here:
        jobs_n = s.a.jobs or os.cpu_count() or 1
        print(f"{'plan of ' if s.a.dry_run else 'running '}the '{s.a.grid}' grid on backend '{s.a.backend}': {total} runs, "
              f"{'launcher ' + s.launcher if s.launcher else f'{jobs_n} local jobs'}", flush=True)
        return {}
    from topas.placement import place_experiments

    where = f"GPUs {','.join(s.gpus)}" if s.gpus else "CPU (no GPU visible: tiny model, scaled tokens)"
    print(f"the '{s.a.grid}' grid on backend '{s.a.backend}': {total} runs on {where}", flush=True)
    try:
        return place_experiments({s.name(e): jobs for e, (_, jobs) in plans.items()}, s.gpus, s.a.jobs, print)
    except ValueError as e:
        _fail(one_line(e))
    return {}


def dry_run(s: Setup, plans: dict) -> None:
    for exp, (_, jobs) in plans.items():
        print(f"  {s.name(exp)}: {len(jobs)} runs, e.g. {' '.join(jobs[0]) if jobs else '-'}")
        schedulers = list(dict.fromkeys(o.split("=", 1)[1] for j in jobs for o in j if o.startswith("scheduler=")))
        if schedulers:
            print(f"    schedulers ({len(schedulers)}): {','.join(schedulers)}")
    print("dry run: nothing was started")


def run(s: Setup, plans: dict, placements: dict) -> bool:
    """Every experiment's sweep, one after another, under one progress bar; True when a run is incomplete."""
    log_dir = s.runs / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"console output in {log_dir}/", flush=True)
    incomplete = False
    with tqdm(total=sum(len(jobs) for _, jobs in plans.values()), desc="reproduce", unit="run", dynamic_ncols=True) as bar:
        for exp, (ov, jobs) in plans.items():
            incomplete |= _run_experiment(s, exp, ov, jobs, placements.get(s.name(exp)), bar)
    return incomplete


def _run_experiment(s: Setup, exp: str, ov: list[str], jobs: list[list[str]], workers, bar) -> bool:
    from topas.launchers import name_missing
    from topas.sweep import run_sweep, status_counts, write_plan

    name, log_dir = s.name(exp), s.runs / "logs"
    exp_dir = s.runs / name
    write_plan(exp_dir, jobs)  # the experiment's last sweep: what the report reads
    t0 = time.time()
    if s.placed_here:
        from topas.placement import run_placed

        df, rc = run_placed(workers, jobs, exp_dir, exp_dir / "sweep_manifest.jsonl", log_dir / f"{name}.log", bar.update)
    else:
        df, rc = run_sweep(ov, exp_dir / "sweep_manifest.jsonl", log_dir / f"{name}.log", s.a.jobs or os.cpu_count() or 1,
                           bar.update, jobs)
    c = status_counts(df)
    bad = c["failed"] + c["missing"]
    if s.a.wandb:
        _log_skipped(df, s.a.wandb, bar.write)
    note = "" if not bad and rc == 0 else f"  INCOMPLETE (sweep exit {rc}; see {log_dir / (name + '*.log')})"
    bar.write(f"  {exp:11s} {time.time() - t0:7.1f} s  {len(df)} runs: {c['ok']} ok, {c['cached']} cached, "
              f"{c['failed']} failed, {c['missing']} missing{note}")
    name_missing(df, rc, log_dir / f"{name}.log", exp_dir / "sweep_manifest.jsonl", bar.write)  # the errors, named
    return bool(bad) or rc != 0


def report_results(s: Setup, incomplete: bool, start: float) -> None:
    """The tables, figures and verdicts of every experiment; exit 1 when a run failed or is missing."""
    from analysis.report import report
    from analysis.report_tables import real_vs_sim
    from topas.errors import one_line

    names = {e: s.name(e) for e in EXPERIMENTS}
    try:
        _, failed = report(names, s.out, runs_root=s.runs, wandb_mode=s.a.wandb)
        if s.a.backend != "sim" and real_vs_sim(s.runs / names["main"], s.out):
            print(f"real vs simulator, per run: {s.out / 'real_vs_sim.md'}")
    except (OSError, ValueError) as e:  # a full disk, a damaged file: one line naming it
        _fail(f"writing the report to {s.out}: {one_line(e, s.out)}")
    print(f"total {time.time() - start:.0f} s; results in {s.out}")
    if incomplete or len(failed):
        print(f"error: {len(failed)} run(s) failed or are missing; the tables are incomplete ({s.out / 'failed_runs.md'})",
              file=sys.stderr)
        raise SystemExit(1)


def _main() -> None:
    from topas.reproduce_args import parse_args

    start = time.time()
    s = setup(parse_args(__doc__, ROOT / "runs"))
    incomplete = False
    if not s.a.skip_runs:
        plans = plan(s)
        placements = announce(s, plans)
        if s.a.dry_run:
            dry_run(s, plans)
            return
        incomplete = run(s, plans, placements)
    report_results(s, incomplete, start)


if __name__ == "__main__":
    main()
