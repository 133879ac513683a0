"""Sweeps resume and record failures; launchers compose (the notebooks: tests/test_notebooks.py)."""

import subprocess
import sys
from pathlib import Path

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
    # a config change that keeps the folder path (here the warm-up fraction) re-runs every point
    p = sweep(tmp_path, "workload.warmup_fraction=0.2")
    assert p.returncode == 0 and p.stdout.count("complete, skipped") == 0


def test_a_failed_point_is_recorded_and_does_not_stop_the_sweep(tmp_path):
    # a KV pool smaller than one prompt (8,448 tokens) stalls the engine: those points fail
    p = sweep(tmp_path, "backend.kv_pool_tokens=5000,100000", "run_subdir=${workload.name}/kv${backend.kv_pool_tokens}/seed${seed}")
    assert p.returncode == 0, p.stderr[-2000:]
    errors = list((tmp_path / "sweep").glob("**/error.txt"))
    assert len(errors) == 4 and all("kv5000" in str(e) for e in errors)  # 2 workloads x 2 seeds
    assert len(list((tmp_path / "sweep").glob("**/kv100000/**/summary.json"))) == 4
    assert "KV pool" in errors[0].read_text()
    # the report says which runs are missing and why
    from analysis.load import load_failures

    failed = load_failures(tmp_path / "sweep", "sweep")
    assert len(failed) == 4 and set(failed["experiment"]) == {"sweep"}
    assert all("kv5000" in r and "KV pool" in e for r, e in zip(failed["run"], failed["error"]))
    assert all(j.startswith("workload=") and "backend.kv_pool_tokens=5000" in j for j in failed["job"])


def test_launcher_configs_compose():
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        for launcher, target in (("slurm", "SlurmLauncher"), ("local", "JoblibLauncher")):
            cfg = compose(config_name="config", overrides=["+experiment=main", f"hydra/launcher={launcher}"],
                          return_hydra_config=True)
            assert cfg.hydra.launcher._target_.endswith(target)
        cfg = compose(config_name="config", overrides=["+experiment=kv_budget", "backend.kv_pool_tokens=16000"])
        assert "/kv16000/" in cfg.out_dir
