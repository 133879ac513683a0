"""`make reproduce` tells the truth: failed, killed and missing runs make it exit non-zero and
are listed; no stale or damaged file is counted; no worker outlives a killed driver."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topas.results import clear_outcome, incomplete_reason, is_complete

ROOT = Path(__file__).resolve().parents[1]
KILLER = "+hydra.callbacks.killer._target_=tests.helpers.sweep_killer.KillJob"
FAIL = "+hydra.callbacks.fail._target_=tests.helpers.sweep_killer.FailJob"


def reproduce(tmp, *args, experiments=("motivation",)):
    cmd = [sys.executable, "-m", "topas.reproduce", "--grid", "quick", "--runs", str(tmp / "runs"), "--out",
           str(tmp / "results"), "--experiments", *experiments, *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_an_unknown_backend_is_one_line_and_nothing_runs(tmp_path):
    p = reproduce(tmp_path, "--backend", "nosuch")
    assert p.returncode == 2
    err = p.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "nosuch" in err
    assert not (tmp_path / "runs" / "motivation_quick").exists()


def test_a_killed_worker_makes_reproduce_fail_and_lists_the_missing_runs(tmp_path):
    # seed 1 of each workload dies as an out-of-memory kill would; the pool then aborts the sweep
    p = reproduce(tmp_path, "--jobs", "2", "seed=0,1,2", "workload.num_tasks=20", KILLER, "+hydra.callbacks.killer.marker=seed=1")
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "missing" in p.stdout and "INCOMPLETE" in p.stdout
    failed = (tmp_path / "results" / "failed_runs.md").read_text()
    assert "seed=1" in failed and "missing" in failed


def test_a_grid_where_every_point_fails_is_not_ok(tmp_path):
    p = reproduce(tmp_path, "--jobs", "1", "workload.num_tasks=4", FAIL, "+hydra.callbacks.fail.marker=workload")
    assert p.returncode == 1
    assert "0 ok" in p.stdout and "2 failed" in p.stdout
    failed = (tmp_path / "results" / "failed_runs.md").read_text()
    assert failed.count("| failed") == 2 and "engine died" in failed


def test_a_grid_whose_input_is_bad_runs_nothing(tmp_path):
    p = reproduce(tmp_path, "--jobs", "1", "backend.kv_pool_tokens=100")  # no call fits: every run would fail
    assert p.returncode == 2 and "KV pool 100" in p.stderr and not (tmp_path / "runs").exists()


def test_reproduce_reports_progress_and_one_line_per_experiment(tmp_path):
    p = reproduce(tmp_path, "--jobs", "1", "workload.num_tasks=20", "seed=0", "scheduler=fcfs",
                  "backend.kv_pool_tokens=30000", experiments=("motivation", "kv_budget"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "reproduce:" in p.stderr and "run/s" in p.stderr  # the tqdm bar over the whole grid, with rates / ETA
    lines = [ln for ln in p.stdout.splitlines() if " runs: " in ln]
    assert len(lines) == 2 and all("0 failed, 0 missing" in ln for ln in lines)
    # a second call resumes: every run is cached
    p = reproduce(tmp_path, "--jobs", "1", "workload.num_tasks=20", "seed=0", "scheduler=fcfs",
                  "backend.kv_pool_tokens=30000", experiments=("motivation", "kv_budget"))
    assert p.returncode == 0 and all("0 ok" in ln for ln in p.stdout.splitlines() if " runs: " in ln)


def test_killing_reproduce_leaves_no_workers(tmp_path):
    psutil = pytest.importorskip("psutil")
    cmd = [sys.executable, "-m", "topas.reproduce", "--grid", "quick", "--runs", str(tmp_path / "runs"), "--out",
           str(tmp_path / "results"), "--experiments", "main", "--jobs", "2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    driver = psutil.Process(proc.pid)
    deadline = time.time() + 120
    family: list = []
    while time.time() < deadline:  # wait until the multirun's workers exist
        family = driver.children(recursive=True)
        if len(family) >= 3:
            break
        time.sleep(0.5)
    assert len(family) >= 3, "the sweep never started its workers"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(family, timeout=15)
    assert not alive, [p.cmdline()[:3] for p in alive]


def _write_run(tmp_path, name="r", **overrides):
    from hydra import compose, initialize_config_dir

    from topas.runner import run

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        c = compose(config_name="config", overrides=["logger=none", "progress=false", "workload.num_tasks=6",
                                                     *[f"{k}={v}" for k, v in overrides.items()]])
    return run(c, out_dir=tmp_path / name, quiet=True)


def test_a_later_success_removes_an_old_error_and_a_failure_removes_an_old_summary(tmp_path, monkeypatch):
    out = tmp_path / "r"
    out.mkdir()
    (out / "error.txt").write_text("old failure\n")
    _write_run(tmp_path)
    assert not (out / "error.txt").exists() and is_complete(out)
    # bad input is rejected before the folder is touched
    with pytest.raises(ValueError):
        _write_run(tmp_path, **{"backend.kv_pool_tokens": 100})
    assert is_complete(out)
    # a rerun that fails part-way leaves no summary of the earlier run behind
    from topas.engines.sim.engine import SimEngine

    def crash(self, *a, **k):
        raise RuntimeError("engine died")

    monkeypatch.setattr(SimEngine, "run", crash)
    with pytest.raises(RuntimeError):
        _write_run(tmp_path)
    assert not (out / "summary.json").exists()


def test_a_damaged_output_is_not_complete_and_is_named(tmp_path):
    out, _ = _write_run(tmp_path)
    assert is_complete(out)
    (out / "requests.parquet").write_bytes(b"not parquet")
    reason = incomplete_reason(out)
    assert reason is not None and "requests.parquet" in reason
    (out / "summary.json").write_text("{ truncated")
    assert "summary.json" in incomplete_reason(out)
    clear_outcome(out)
    assert not (out / "summary.json").exists()


def test_the_report_reads_only_the_experiments_own_runs_and_names_bad_files(tmp_path):
    from analysis.load import load_experiment

    runs = tmp_path / "runs"
    p = reproduce(tmp_path, "--jobs", "1", "workload.num_tasks=20")
    assert p.returncode == 0, p.stderr[-2000:]
    exp = runs / "motivation_quick"
    # a folder left by another config of the same experiment, and a corrupt file elsewhere
    stray = exp / "motivation_grouped" / "fcfs" / "rate10" / "seed0-deadbeef"
    stray.mkdir(parents=True)
    for f in (exp / "motivation_grouped").glob("fcfs/rate10/seed0-*/summary.json"):
        if f.parent != stray:
            (stray / "summary.json").write_text(f.read_text())
    (runs / "other" / "x").mkdir(parents=True)
    (runs / "other" / "x" / "summary.json").write_text("{ not json")
    df, failed = load_experiment("motivation_quick", runs)
    assert len(df) == 2 and failed.empty and str(stray) not in set(df["run_dir"])
    # a run of the sweep damaged after the fact is named, not counted
    victim = Path(df["run_dir"].iloc[0])
    (victim / "tasks.parquet").write_bytes(b"x")
    df, failed = load_experiment("motivation_quick", runs)
    assert len(df) == 1 and len(failed) == 1 and "tasks.parquet" in failed["error"].iloc[0]
    p = subprocess.run([sys.executable, "-m", "topas.reproduce", "--grid", "quick", "--runs", str(runs), "--out",
                        str(tmp_path / "results"), "--experiments", "motivation", "--skip-runs"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1 and "damaged" in (tmp_path / "results" / "failed_runs.md").read_text()


def test_manifest_lines_from_a_killed_writer_are_ignored(tmp_path):
    from topas.sweep import outcomes, record_outcome

    m = tmp_path / "m.jsonl"
    record_outcome(str(m), ["a=1"], tmp_path, "ok")
    with open(m, "a") as f:
        f.write('{"job": "a=2", "run_')
    df = outcomes([["a=1"], ["a=2"]], m)
    assert list(df["status"]) == ["ok", "missing"]
    assert json.loads(m.read_text().splitlines()[0])["job"] == "a=1"


def test_a_job_with_folders_from_several_configs_reads_the_one_it_was_last_launched_into(tmp_path):
    """No manifest line for the job (a sweep in progress rewrote the manifest): the fallback must not take a
    stale folder of an older config of the same overrides (seen: a report mixing in runs two configs old).
    The newest launch is given to the folder the file system lists first, so listing order cannot pass it."""
    import os

    import yaml

    from topas.sweep import outcomes

    for k in range(4):
        (tmp_path / "w" / f"seed0-config{k}" / ".hydra").mkdir(parents=True)
        (tmp_path / "w" / f"seed0-config{k}" / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["a=1"]))
    listed = list(tmp_path.glob("**/.hydra/overrides.yaml"))
    for k, f in enumerate(listed):
        launched = 2_000_000_000 if k == 0 else 1_000_000_000 + k
        os.utime(f, (launched, launched))
    df = outcomes([["a=1"]], tmp_path / "sweep_manifest.jsonl")
    assert df["run_dir"].iloc[0] == str(listed[0].parent.parent)
