"""Issue 31, results lost, stale or mixed: one probe per finding (each failed on 0e5a861). A run's
identity covers the files it reads; manifests hold relative paths; summary.json carries its own
digest; two runs never share a folder at once; the loader reads one plan and never mixes configs."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
FAST = ["logger=none", "progress=false", "backend.latency=roofline", "workload.num_tasks=4"]


def cfg(*overrides):
    import topas.config  # noqa: F401  (resolvers)

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        return compose(config_name="config", overrides=[*FAST, *overrides])


def run_py(*args, cwd=ROOT, **kw):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, **kw)


def one_error_line(p: subprocess.CompletedProcess) -> str:
    err = p.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err[-2000:]
    return err


def write_trace(path: Path, output_tokens: int) -> Path:
    header = {"format": "topas-trace", "version": 1, "name": "t", "agents": {"A": 100}}
    task = {"task_id": 0, "arrival": 0.0, "nodes": [{"id": "x", "agent": "A", "input_tokens": 10,
                                                      "output_tokens": output_tokens}]}
    path.write_text(json.dumps(header) + "\n" + json.dumps(task) + "\n")
    return path


def test_a_trace_edited_in_place_changes_the_runs_identity(tmp_path):
    from topas.runner import fingerprint_of

    trace = write_trace(tmp_path / "t.jsonl", 256)
    c = cfg("workload=trace", f"workload.params.path={trace}", "workload.num_tasks=null")
    before = fingerprint_of(c)
    write_trace(trace, 2048)  # same path, other content
    assert fingerprint_of(c) != before
    assert c.out_dir == cfg("workload=trace", f"workload.params.path={trace}", "workload.num_tasks=null").out_dir


def _complete_run(out: Path, *overrides) -> Path:
    from topas.runner import run

    return run(cfg(*overrides), out_dir=out, quiet=True)[0]


def test_a_copied_runs_folder_reads_its_own_runs(tmp_path):
    from analysis.load import load_experiment
    from topas.sweep import record_outcome

    exp = tmp_path / "runs" / "x"
    run_dir = _complete_run(exp / "r0")
    (exp / "sweep_plan.json").write_text(json.dumps([["seed=0"]]))  # the plan format of 0e5a861 still reads
    record_outcome(str(exp / "sweep_manifest.jsonl"), ["seed=0"], run_dir, "ok")
    shutil.copytree(tmp_path / "runs", tmp_path / "copy")
    (tmp_path / "copy" / "x" / "r0" / "tasks.parquet").write_bytes(b"corrupt")
    df, failed = load_experiment("x", tmp_path / "copy")
    assert df.empty and list(failed["status"]) == ["damaged"] and str(tmp_path / "copy") in failed["error"].iloc[0]
    shutil.move(tmp_path / "runs", tmp_path / "moved")  # a moved folder: its runs are intact, not "damaged"
    df, failed = load_experiment("x", tmp_path / "moved")
    assert len(df) == 1 and failed.empty and df["run_dir"].iloc[0].startswith(str(tmp_path / "moved"))


def test_a_hand_edited_summary_is_not_a_measurement(tmp_path):
    from topas.results import incomplete_reason

    out = _complete_run(tmp_path / "r")
    s = json.loads((out / "summary.json").read_text())
    s["jct_mean"] = 999.0
    (out / "summary.json").write_text(json.dumps(s))
    reason = incomplete_reason(out)
    assert reason is not None and "summary.json" in reason


def test_a_second_run_into_a_busy_folder_stops_with_one_line(tmp_path):
    out = tmp_path / "x"
    _complete_run(out)
    before = (out / "summary.json").read_bytes()
    with open(out / ".lock", "a+") as f:  # the first run still holds its folder
        fcntl.flock(f, fcntl.LOCK_EX)
        p = run_py(*FAST, "workload.num_tasks=6", f"hydra.run.dir={out}")
    assert p.returncode == 2 and "in use by another run" in one_error_line(p)
    assert (out / "summary.json").read_bytes() == before


def sweep(tmp, *args):
    return run_py("-m", *FAST, f"hydra.sweep.dir={tmp}/mix", *args)


def test_a_hand_made_multirun_reuses_its_folder_only_with_the_same_plan(tmp_path):
    from analysis.load import load_experiment

    p = sweep(tmp_path, "scheduler=fcfs,lpm")
    assert p.returncode == 0, p.stderr[-2000:]
    p = sweep(tmp_path, "scheduler=fcfs,lpm", "workload.num_tasks=6")  # another config into the same folder
    assert p.returncode == 2 and "holds another sweep" in one_error_line(p)
    df, failed = load_experiment("mix", tmp_path)
    assert sorted(df["scheduler"]) == ["fcfs", "lpm"] and set(df["num_tasks"]) == {4} and failed.empty
    # a lost manifest: the intact runs are found in their folders, not called "killed or aborted"
    (tmp_path / "mix" / "sweep_manifest.jsonl").unlink()
    df, failed = load_experiment("mix", tmp_path)
    assert len(df) == 2 and failed.empty


def test_a_point_that_failed_is_not_listed_once_the_sweep_is_fixed(tmp_path):
    from analysis.load import load_experiment

    p = sweep(tmp_path, "workload.load=0.5,-1")
    assert p.returncode == 2 and "workload.load" in one_error_line(p)
    assert not (tmp_path / "mix").exists()  # checked before anything ran: no folder
    assert sweep(tmp_path, "workload.load=0.5").returncode == 0
    df, failed = load_experiment("mix", tmp_path)
    assert len(df) == 1 and failed.empty


def test_runs_of_different_configs_are_never_one_cell(tmp_path):
    from analysis.load import load_experiment

    for n in (4, 6):  # the same cell (workload, scheduler, load, seed) with another task count
        c = cfg(f"workload.num_tasks={n}", "experiment_name=mix")
        _complete_run(tmp_path / "mix" / c.run_subdir, f"workload.num_tasks={n}", "experiment_name=mix")
    with pytest.raises(ValueError) as e:
        load_experiment("mix", tmp_path)
    assert "workload.num_tasks" in str(e.value) and "\n" not in str(e.value)


def test_skip_runs_with_a_mistyped_runs_folder_fails_and_leaves_the_tables(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "main_jct.md").write_text("old table\n")
    p = subprocess.run([sys.executable, "-m", "topas.reproduce", "--skip-runs", "--runs", str(tmp_path / "rusn"),
                        "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 2 and "--runs" in one_error_line(p)
    assert (out / "main_jct.md").read_text() == "old table\n"
