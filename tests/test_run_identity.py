"""A run's folder is a function of everything that changes its result; load and rate mean
what they say; Hydra's output directory, flags and logging behave as Hydra users expect."""

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from topas.results import is_complete
from topas.workloads import capacity_of

ROOT = Path(__file__).resolve().parents[1]


def cfg(*overrides):
    import topas.config  # noqa: F401  (resolvers)

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        return compose(config_name="config", overrides=["logger=none", "progress=false", *overrides])


def run_py(*args, cwd=ROOT):
    flags = [a for a in args if a.startswith("-")]  # Hydra's flags go before the overrides
    overrides = [a for a in args if not a.startswith("-")]
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *flags, "logger=none", "progress=false", *overrides],
                          capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("a, b", [
    (["scheduler=topas", "scheduler.params.beta=0.5"], ["scheduler=topas", "scheduler.params.beta=2.0"]),
    (["workload.num_tasks=10"], ["workload.num_tasks=20"]),
    (["backend.host_cache_ratio=2"], ["backend.host_cache_ratio=0"]),
    (["gpu=a100_80gb"], ["gpu=h100_80gb"]),
    (["model=qwen2_5_32b"], ["model=llama3_1_8b"]),
    (["workload=trace", "workload.params.path=a.jsonl"], ["workload=trace", "workload.params.path=b.jsonl"]),
])
def test_configs_that_differ_never_share_a_folder(a, b):
    assert cfg(*a).out_dir != cfg(*b).out_dir


def test_the_folder_keeps_the_readable_levels_and_is_stable():
    c = cfg("workload=chain3", "scheduler=lpm", "seed=3")
    parts = c.out_dir.split("/")
    assert parts[:5] == ["runs", "default", "chain3", "lpm", "rate0.1"] and parts[5].startswith("seed3-")
    assert cfg("workload=chain3", "scheduler=lpm", "seed=3").out_dir == c.out_dir
    # output-only keys (logger, progress, experiment name) do not change the hash
    assert cfg("workload=chain3", "scheduler=lpm", "seed=3", "progress=true").out_dir == c.out_dir


def test_a_multirun_over_a_parameter_leaves_one_complete_run_per_point(tmp_path):
    args = ["-m", "scheduler=topas", "scheduler.params.beta=0.5,2.0", "workload.num_tasks=6", f"hydra.sweep.dir={tmp_path}"]
    p = run_py(*args)
    assert p.returncode == 0, p.stderr[-2000:]
    summaries = sorted(tmp_path.glob("**/summary.json"))
    assert len(summaries) == 2 and all(is_complete(s.parent) for s in summaries)
    overrides = sorted((s.parent / ".hydra" / "overrides.yaml").read_text() for s in summaries)
    assert "beta=0.5" in overrides[0] and "beta=2.0" in overrides[1]
    p = run_py(*args)  # a resume skips both
    assert p.returncode == 0 and p.stdout.count("complete, skipped") == 2


def test_load_alone_sets_the_rate_from_capacity_and_the_folder_records_it(tmp_path):
    c = cfg("workload.load=0.7")
    assert c.workload.arrival_rate is None and c.workload.load == 0.7
    rate = 0.7 * capacity_of("dag4")
    assert f"load0.7_rate{rate:.4g}" in c.out_dir
    p = run_py("workload.load=0.7", "workload.num_tasks=6", f"hydra.run.dir={tmp_path}/x")
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert s["load"] == 0.7 and s["arrival_rate"] == pytest.approx(rate)
    # the workload's default rate still applies when no load is given
    assert cfg().workload.arrival_rate == 0.08 and cfg("workload.arrival_rate=0.05").workload.arrival_rate == 0.05


def test_setting_both_load_and_rate_is_an_error(tmp_path):
    p = run_py("workload.load=0.7", "workload.arrival_rate=0.1", f"hydra.run.dir={tmp_path}/x")
    err = p.stderr.strip()
    assert p.returncode == 2 and err.startswith("error: ") and "\n" not in err
    assert "workload.load" in err and "workload.arrival_rate" in err
    assert not (tmp_path / "x").exists()  # nothing written


def test_hydra_run_dir_holds_the_run_and_run_log_the_messages(tmp_path):
    p = run_py("workload.num_tasks=6", f"hydra.run.dir={tmp_path}/x")
    assert p.returncode == 0, p.stderr
    out = tmp_path / "x"
    assert is_complete(out) and (out / ".hydra" / "config.yaml").exists()
    log = (out / "run.log").read_text()
    assert "JCT mean" in log and str(out) in log
    assert not list((ROOT / "runs").glob(f"**/{tmp_path.name}*"))
    mode = stat.S_IMODE((out / "summary.json").stat().st_mode)
    assert mode & 0o044, oct(mode)  # readable by others, as files normally are (not mkstemp's 0600)


@pytest.mark.parametrize("flags, expect", [
    (["-c", "job"], "experiment_name: default"),
    (["--cfg", "job"], "experiment_name: default"),
    (["--info"], "Config search path"),
    (["-sc", "install=bash"], "hydra_bash_completion"),
])
def test_hydras_own_flags_work(flags, expect):
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), *flags], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-1000:]
    assert expect in p.stdout
