"""Sweeps resume and record failures; launchers compose; every reproduction grid is a conf/experiment file
(the notebooks: tests/test_notebooks.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def sweep(tmp, *extra):
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", "+experiment=motivation", "hydra/launcher=local",
           "hydra.launcher.n_jobs=1", "logger=none", "progress=false", "seed=0,1", "workload.num_tasks=10",
           f"hydra.sweep.dir={tmp}/sweep", f"out_dir={tmp}/sweep/${{run_subdir}}", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def test_killed_sweep_resumes_only_the_missing_runs(tmp_path):
    p = sweep(tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    summaries = sorted((tmp_path / "sweep").glob("**/summary.json"))
    assert len(summaries) == 4
    # a run killed midway leaves its tables but no summary.json (written last)
    victim = summaries[0]
    victim.unlink()
    before = {s: s.stat().st_mtime_ns for s in summaries[1:]}
    p = sweep(tmp_path)
    assert p.returncode == 0
    assert p.stdout.count("complete, skipped") == 3
    assert victim.exists()
    assert all(s.stat().st_mtime_ns == t for s, t in before.items())


def test_a_run_made_by_other_code_or_config_is_run_again(tmp_path):
    import json

    from topas.results import is_complete

    assert sweep(tmp_path).returncode == 0
    summaries = sorted((tmp_path / "sweep").glob("**/summary.json"))
    stale = summaries[0]
    s = json.loads(stale.read_text())
    assert is_complete(stale.parent, s["fingerprint"]) and not is_complete(stale.parent, "0" * 16)
    s["fingerprint"] = "left-by-old-code"
    stale.write_text(json.dumps(s))
    p = sweep(tmp_path)
    assert p.returncode == 0 and p.stdout.count("complete, skipped") == 3
    assert json.loads(stale.read_text())["fingerprint"] != "left-by-old-code"
    # a config change that keeps the folder path (here the warm-up fraction) re-runs every point, once the old
    # plan is given up (a sweep folder holds one plan: topas.sweep.claim_plan)
    assert sweep(tmp_path, "workload.warmup_fraction=0.2").returncode == 2
    (tmp_path / "sweep" / "sweep_plan.json").unlink()
    p = sweep(tmp_path, "workload.warmup_fraction=0.2")
    assert p.returncode == 0 and p.stdout.count("complete, skipped") == 0


def test_a_failed_point_is_recorded_and_does_not_stop_the_sweep(tmp_path):
    # a KV pool smaller than one prompt (8,448 tokens) would stall the engine: checked before anything runs
    subdir = "run_subdir=${workload.name}/kv${backend.kv_pool_tokens}/seed${seed}"
    p = sweep(tmp_path, "backend.kv_pool_tokens=5000,100000", subdir)
    assert p.returncode == 2 and "KV pool 5000" in p.stderr and not (tmp_path / "sweep").exists()
    # points that fail while they run (here their engine crashes) are recorded; the others run
    p = sweep(tmp_path, "backend.kv_pool_tokens=50000,100000", subdir,
              "+hydra.callbacks.fail._target_=tests.helpers.sweep_killer.FailJob",
              "+hydra.callbacks.fail.marker=50000")
    assert p.returncode == 1, p.stderr[-2000:]  # not 0: points failed; one line says so
    assert p.stderr.strip().splitlines()[-1].startswith("error: sweep: 8 points: 4 ok, 0 cached, 4 failed, 0 missing")
    errors = list((tmp_path / "sweep").glob("**/error.txt"))
    assert len(errors) == 4 and all("kv50000" in str(e) for e in errors)  # 2 workloads x 2 seeds
    assert len(list((tmp_path / "sweep").glob("**/kv100000/**/summary.json"))) == 4
    assert "engine died" in errors[0].read_text()
    # the report says which runs are missing and why
    from analysis.load import load_experiment, load_failures

    failed = load_failures(tmp_path / "sweep", "sweep")
    assert len(failed) == 4 and set(failed["experiment"]) == {"sweep"}
    assert all("kv50000" in r and "engine died" in e for r, e in zip(failed["run"], failed["error"]))
    assert all(j.startswith("workload=") and "backend.kv_pool_tokens=50000" in j for j in failed["job"])
    df, failed = load_experiment("sweep", tmp_path)  # the sweep's plan: 4 runs, 4 failures
    assert len(df) == 4 and list(failed["status"]) == ["failed"] * 4


def test_launcher_configs_compose():
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        for launcher, target in (("slurm", "SlurmLauncher"), ("local", "JoblibLauncher")):
            cfg = compose(config_name="config", overrides=["+experiment=main", f"hydra/launcher={launcher}"],
                          return_hydra_config=True)
            assert cfg.hydra.launcher._target_.endswith(target)
        cfg = compose(config_name="config", overrides=["+experiment=kv_budget", "backend.kv_pool_tokens=16384"])
        assert "/kv16384/" in cfg.out_dir


# ------------------------------------------------------------------ grids: conf/experiment is their one definition
def _grid_files():
    from topas.reproduce import EXPERIMENTS

    for exp in EXPERIMENTS:
        for f in sorted((ROOT / "conf" / "experiment").glob(f"{exp}_*.yaml")):
            yield exp, f


def test_every_experiment_has_its_full_quick_and_default_grid():
    from topas.reproduce import EXPERIMENTS, grid_config

    for exp in EXPERIMENTS:
        assert grid_config(exp, "full") == exp
        assert grid_config(exp, "quick") == f"{exp}_quick" and grid_config(exp, "default") == f"{exp}_default"
    assert grid_config("main", "real") == "main_real"
    assert grid_config("main", "quick", "sglang") == "main_quick_real"
    assert grid_config("main", "quick", "sglang", cpu=True) == "main_quick_cpu"
    assert grid_config("load_sweep", "quick", "sglang") == "load_sweep_quick"  # no real-engine file: the sim grid
    with pytest.raises(ValueError, match="no 'real' grid"):
        grid_config("regime", "real")


def test_the_kv_budget_grids_smallest_pool_fits_every_trace_of_the_full_grid():
    """Every point of `make reproduce-full` can run: its smallest pool admits and finishes every call of every
    trace (each workload x 10 seeds x 200 tasks; a pool of 16,000 left 4 MetaGPT-TL seeds unrunnable). A run
    checks its own trace's fit while it is prepared."""
    from hydra import compose, initialize_config_dir

    from topas.reproduce import sweep_params
    from topas.runner import prepare

    grid = sweep_params("kv_budget")
    pool = min(int(v) for v in grid["backend.kv_pool_tokens"])
    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        for wl in grid["workload"]:
            for seed in grid["seed"]:
                prepare(compose(config_name="config", overrides=[
                    "+experiment=kv_budget", f"workload={wl}", f"seed={seed}", f"backend.kv_pool_tokens={pool}"]))


def test_every_reduced_grid_is_a_sub_grid_of_its_experiment():
    import yaml

    from topas.reproduce import experiment_name, sweep_params

    files = list(_grid_files())
    assert len(files) >= 14
    for exp, f in files:
        cfg = yaml.safe_load(f.read_text())
        assert cfg["defaults"] == [exp, "_self_"], f"{f.name} extends {exp}.yaml"
        full, small = sweep_params(exp), sweep_params(f.stem)
        assert set(small) == set(full), f"{f.name}: sweeps other keys than {exp}.yaml"
        for key in full:  # sweep_params: each list expanded to its choices (comma list, range, glob)
            assert set(small[key]) <= set(full[key]), f"{f.name}: {key}={small[key]} is not in {exp}.yaml's grid"
        grid = f.stem[len(exp) + 1:]
        if grid in ("quick", "default", "real"):  # the runs folder is named as reproduce names it on the simulator
            assert cfg["experiment_name"] == experiment_name(exp, grid), f.name


def test_the_reduced_grids_compose_and_expand_to_their_sweep_lists():
    from topas.reproduce import GRIDS, sweep_overrides
    from topas.sweep import expand

    assert set(GRIDS["main"]["quick"]["workload"]) == {"chain3", "dag4", "metagpt_sop"}
    for grid in ("quick", "default"):  # the default grid sweeps main.yaml's glob over conf/scheduler
        jobs = expand(sweep_overrides("main", grid, "sim", [], Path("/tmp/runs")))
        n = 1
        for v in GRIDS["main"][grid].values():
            n *= len(v)
        assert len(jobs) == n and all(f"+experiment=main_{grid}" in j for j in jobs)
        assert {o for j in jobs for o in j if o.startswith("scheduler=")} == {
            f"scheduler={s}" for s in GRIDS["main"][grid]["scheduler"]}


def test_sweep_choices_expands_a_list_a_range_a_plain_value_and_a_glob_over_a_config_group():
    from topas.sweep import sweep_choices

    assert sweep_choices("workload", "chain3,dag4") == ["chain3", "dag4"]
    assert sweep_choices("seed", "range(0,3)") == ["0", "1", "2"]
    assert sweep_choices("workload.load", 0.7) == ["0.7"]
    files = sorted(p.stem for p in (ROOT / "conf" / "scheduler").glob("*.yaml"))
    assert sweep_choices("scheduler", "glob(*)") == files
    assert sweep_choices("scheduler", "glob(*,exclude=[*_base,*_no_*])") == [
        f for f in files if not (f.endswith("_base") or "_no_" in f)]
