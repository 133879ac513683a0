"""Issue 31, silent acceptance, tracebacks and unclear messages: one probe per finding (each failed on
0e5a861). Bad input is one `error:` line naming the key or file, exit 2, before any run folder exists;
exit codes tell the truth; a full disk names the path and the free space; Ctrl-C is one line, 130."""

from __future__ import annotations

import json
import resource
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


def run_py(*args, cwd=ROOT, fsize: int | None = None):
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))) if fsize else None
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, preexec_fn=limit)


def one_error_line(p: subprocess.CompletedProcess) -> str:
    err = p.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err[-2000:]
    return err


@pytest.mark.parametrize("scheduler, params, key", [
    ("topas", {"tie_temperature": -1}, "tie_temperature"), ("topas", {"wait_ewma": 2}, "wait_ewma"),
    ("topas", {"wait_ewma": -1}, "wait_ewma"), ("topas", {"prior_output_tokens": 0}, "prior_output_tokens"),
    ("topas", {"prior_output_tokens": -5}, "prior_output_tokens"), ("topas", {"beta": float("inf")}, "beta"),
    ("continuum_ttl", {"min_samples": 0}, "min_samples"), ("continuum_ttl", {"queue_window": 0}, "queue_window"),
    ("continuum_ttl", {"queue_window": -1}, "queue_window"), ("continuum_ttl", {"sample_window": 0}, "sample_window"),
    ("kvflow", {"hold_steps": -1}, "hold_steps"), ("kvflow", {"prior_output_tokens": -1}, "prior_output_tokens"),
    ("autellix_las", {"prior_output_tokens": -1}, "prior_output_tokens"),
    ("lpm", {"fcfs_above_waiting": -1}, "fcfs_above_waiting"),
    ("lpm", {"in_batch_check_threshold": -1}, "in_batch_check_threshold"),
    ("spf", {"batch_size": 0}, "batch_size"), ("spf", {"context_tokens": 0}, "context_tokens"),
    ("spf", {"prior_weight": 0}, "prior_weight"), ("spf", {"prior_weight": -1}, "prior_weight"),
    ("spf", {"prior_output_tokens": -100}, "prior_output_tokens"),
])
def test_every_scheduler_parameter_has_a_range(scheduler, params, key):
    from topas.policy import create_policy

    with pytest.raises(ValueError) as e:
        create_policy(scheduler, params)
    assert f"scheduler.params.{key} must be" in str(e.value) and "\n" not in str(e.value)


def test_the_ranges_admit_every_shipped_and_tuned_value():
    from omegaconf import OmegaConf

    from topas.policy import create_policy
    from topas.sweep import compose_config
    from topas.tuning import GRIDS

    for f in (ROOT / "conf" / "scheduler").glob("*.yaml"):
        c = OmegaConf.to_container(compose_config([f"scheduler={f.stem}"]).scheduler)
        create_policy(c["name"], c["params"])
    for name, grid in GRIDS.items():
        for params in grid:
            create_policy(name, {k: float(v) if v == "inf" else v for k, v in params.items()})


@pytest.mark.parametrize("overrides, expect", [
    (["model=tiny_cpu", "backend.latency=aiconfigurator"], "backend.latency=aiconfigurator"),  # was a traceback
    (["backend.latency=nosuch"], "backend.latency=nosuch"),
    (["backend=sglang", "backend.token_scale=5"], "token_scale"),
])
def test_backend_and_model_values_are_checked_before_a_run(overrides, expect):
    from topas.runner import prepare

    with pytest.raises(ValueError) as e:
        prepare(cfg(*overrides))
    assert expect in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("args, expect", [
    (["backend.latency=nosuch"], "backend.latency=nosuch"),
    (["backend=sglang", "backend.token_scale=5"], "token_scale"),
    (["workload.params.prefix_tokens.Z=100"], "workload.params.prefix_tokens has: S, L, R, J"),
    (["workload=motivation_alternating", "workload.load=0.7"], "needs the capacity of 'motivation_alternating'"),
])
def test_run_py_errors_name_the_key_and_leave_no_folder(args, expect, tmp_path):
    p = run_py(*FAST, f"hydra.run.dir={tmp_path}/x", *args)
    assert p.returncode == 2 and expect in one_error_line(p)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("value", ["/tmp/a~b", "/tmp/caf\u00e9"])
def test_an_unquoted_special_character_names_the_override_and_the_fix(value):
    from topas.errors import one_line
    from topas.sweep import compose_config

    with pytest.raises(Exception) as e:
        compose_config([f"hydra.run.dir={value}"], hydra_config=True)
    msg = one_line(e.value)
    assert f"override 'hydra.run.dir={value}'" in msg and "quote" in msg


def test_an_empty_or_unwritable_run_dir_is_one_line(tmp_path):
    p = run_py(*FAST, "hydra.run.dir=", cwd=tmp_path)
    assert p.returncode == 2 and "empty" in one_error_line(p) and not list(tmp_path.iterdir())
    p = run_py(*FAST, "hydra.run.dir=/proc/x")
    assert p.returncode == 2 and "/proc/x" in one_error_line(p)


def test_a_trace_task_id_must_be_non_negative(tmp_path):
    from topas.workloads import load_trace

    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"format": "topas-trace", "version": 1, "agents": {"A": 10}}) + "\n"
                 + json.dumps({"task_id": -1, "arrival": 0, "nodes": [{"id": "x", "agent": "A", "input_tokens": 1,
                                                                       "output_tokens": 1}]}) + "\n")
    with pytest.raises(ValueError, match="task_id must be a non-negative integer, got -1"):
        load_trace(p)


@pytest.mark.parametrize("points, expect", [("seed=abc,-1", "seed must be"), ("+sead=1,2", "'sead'"),
                                            ("scheduler=fcfs,nosuch", "scheduler/nosuch")])
def test_a_multirun_checks_every_point_before_the_first_runs(points, expect, tmp_path):
    p = run_py("-m", *FAST, f"hydra.sweep.dir={tmp_path}/s", points)
    assert p.returncode == 2 and expect in one_error_line(p)
    assert not (tmp_path / "s").exists()


def test_a_multirun_with_failed_points_exits_non_zero_with_one_summary_line(tmp_path):
    p = run_py("-m", *FAST, "workload.num_tasks=30", "seed=0,1", f"hydra.sweep.dir={tmp_path}/s", fsize=8192)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sweep: 2 points: 0 ok, 0 cached, 2 failed") and "error.txt" in last
    assert "MiB free" in last  # a full disk (here a file-size limit) names the free space


def test_a_full_disk_is_one_line_naming_the_path_and_the_free_space(tmp_path):
    p = run_py(*FAST, "workload.num_tasks=30", f"hydra.run.dir={tmp_path}/x", fsize=8192)
    err = one_error_line(p)
    assert p.returncode == 2 and str(tmp_path / "x") in err and "MiB free" in err


_INTERRUPT = """
import runpy, sys
import topas.engines.sim.engine as engine
def interrupted(*a, **k):
    raise KeyboardInterrupt
engine.SimEngine.run = interrupted
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_ctrl_c_is_one_line_and_status_130(tmp_path):
    p = subprocess.run([sys.executable, "-c", _INTERRUPT, str(ROOT / "run.py"), *FAST, f"hydra.run.dir={tmp_path}/x"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 130 and "interrupted" in one_error_line(p)
    assert not (tmp_path / "x" / "summary.json").exists()


def test_the_workloads_cli_runs_alone(tmp_path):
    """In a fresh process, where nothing else registered the config resolvers (its test passed only after others)."""
    p = subprocess.run([sys.executable, "-m", "topas.workloads", "dag4", "--num-tasks", "2", "--png",
                        str(tmp_path / "d.png")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "agent prefixes (tokens)" in p.stdout and (tmp_path / "d.png").exists()


def test_corrupt_files_are_named(tmp_path):
    from analysis.load import load_experiment, load_runs, load_tasks
    from topas.runner import run

    out, _ = run(cfg(), out_dir=tmp_path / "mix" / "r", quiet=True)
    (out / "tasks.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=str(out / "tasks.parquet")):
        load_tasks(out)
    (out / "summary.json").write_text("{ not json")
    with pytest.raises(ValueError, match=str(out / "summary.json")):
        load_runs(tmp_path)
    _, failed = load_experiment("mix", tmp_path)
    assert str(out / "summary.json") in failed["error"].iloc[0]
    (tmp_path / "mix" / "sweep_plan.json").write_text("[[")
    with pytest.raises(ValueError, match=str(tmp_path / "mix" / "sweep_plan.json")):
        load_experiment("mix", tmp_path)
