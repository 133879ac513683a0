"""W&B (offline): a run is grouped by its sweep, uniquely named, tagged, logs no plumbing keys in
its config, and logs the JCT histogram and CDF and the timeline as series; `--wandb` reaches every
sweep job; W&B is off by default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.wandb_records import records

ROOT = Path(__file__).resolve().parents[1]


def _logged(run_dir: Path):
    files = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    rs = records(files[0])
    run = next(r.run for r in rs if r.WhichOneof("record_type") == "run")
    keys = {"/".join(i.nested_key) or i.key for r in rs if r.WhichOneof("record_type") == "history" for i in r.history.item}
    return run, keys


def test_an_offline_run_is_grouped_named_and_logs_histogram_cdf_and_timeline(tmp_path):
    pytest.importorskip("wandb")
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), "logger=wandb", "workload.num_tasks=20", "progress=false",
                        "experiment_name=wbtest", "workload.load=0.5", f"out_dir={tmp_path}/wbtest/${{run_subdir}}"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    (summary,) = (tmp_path / "wbtest").glob("**/summary.json")
    run, keys = _logged(summary.parent)
    assert run.run_group == f"wbtest:{tmp_path / 'wbtest'}" and run.job_type == "run"  # the run folder less its run_subdir
    logged = {i.key for i in run.config.update}
    assert {"workload", "scheduler", "seed", "experiment_name"} <= logged
    assert not logged & {"out_dir", "sweep_manifest", "progress", "run_subdir", "logger", "hydra"}
    # the run folder's identity: experiment, workload, scheduler, load and rate, seed, config hash
    assert run.display_name.startswith("wbtest-dag4-fcfs-load0.5_rate") and "-seed0-" in run.display_name
    assert {"workload:dag4", "scheduler:fcfs", "load:0.5", "seed:0"} <= set(run.tags)
    assert {"jct_hist/values", "jct_cdf_table/path", "timeline/time_s", "timeline/batch_size", "timeline/kv_used_pct",
            "timeline/queue_length"} <= keys


def test_a_sweeps_runs_share_one_group_named_by_experiment_and_folder(tmp_path):
    from topas.wandb_logger import sweep_group

    cfg = {"experiment_name": "main_quick", "run_subdir": "dag4/topas/load0.7_rate0.11/seed0-ab12cd34"}
    for seed in ("seed0-ab12cd34", "seed1-ef56ab78"):
        run_dir = tmp_path / "runs" / "main_quick" / "dag4" / "topas" / "load0.7_rate0.11" / seed
        assert sweep_group({**cfg, "run_subdir": cfg["run_subdir"].replace("seed0-ab12cd34", seed)}, run_dir) == \
            f"main_quick:{tmp_path / 'runs' / 'main_quick'}"
    assert sweep_group({"experiment_name": "x"}, tmp_path / "a" / "b") == f"x:{tmp_path / 'a'}"


def test_wandb_is_off_by_default():
    from topas.sweep import compose_config

    assert compose_config([]).logger.kind == "none"


def test_wandb_flag_reaches_every_sweep_job():
    from topas.reproduce import sweep_overrides

    on = sweep_overrides("main", "quick", "sim", [], Path("/tmp/runs"), "offline")
    assert "logger=wandb" in on and "logger.mode=offline" in on
    assert "logger=none" in sweep_overrides("main", "quick", "sim", [], Path("/tmp/runs"))
    # the logger is output-only: logging does not change a run's folder or make a sweep re-run it
    from topas.run_identity import OUTPUT_ONLY_KEYS

    assert "logger" in OUTPUT_ONLY_KEYS
