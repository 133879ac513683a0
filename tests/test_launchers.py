"""Launcher failures are named and --jobs reaches the launcher the user chose (topas/launchers.py):
`hydra/launcher=slurm` without SLURM prints submitit's error in one line on the console and in
failed_runs.md, instead of "missing ... killed or aborted"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from topas.launchers import first_error, jobs_overrides

ROOT = Path(__file__).resolve().parents[1]


def test_jobs_is_applied_to_the_chosen_launcher_or_refused():
    assert jobs_overrides("local", 3, []) == ["hydra.launcher.n_jobs=3"]
    assert jobs_overrides("slurm", 8, []) == ["hydra.launcher.array_parallelism=8"]
    assert jobs_overrides("slurm", None, []) == []
    with pytest.raises(ValueError, match="both set how many jobs"):
        jobs_overrides("local", 3, ["hydra.launcher.n_jobs=2"])
    with pytest.raises(ValueError, match="cannot be applied to hydra/launcher=basic"):
        jobs_overrides("basic", 2, [])


def test_the_first_error_of_a_log_is_one_line():
    log = ("[2026-01-01][HYDRA] Launching 2 jobs\nTraceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
           "    raise RuntimeError('no srun')\nRuntimeError: no srun\n\nDuring handling ...\nValueError: later\n")
    assert first_error(log) == "RuntimeError: no srun"
    assert first_error("starting\nerror: workload.load=2 needs the capacity\nmore") == "error: workload.load=2 needs the capacity"
    assert first_error("all fine\n") is None


def test_slurm_without_slurm_names_the_srun_error_on_the_console_and_in_failed_runs(tmp_path):
    p = subprocess.run([sys.executable, "-m", "topas.reproduce", "--grid", "quick", "--experiments", "motivation",
                        "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "hydra/launcher=slurm"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1
    console = [ln for ln in (p.stdout + p.stderr).replace("\r", "\n").splitlines() if 'Could not detect "srun"' in ln]
    assert len(console) == 1 and console[0].strip().startswith("2 run(s): never started: RuntimeError: Could not detect")
    failed = (tmp_path / "out" / "failed_runs.md").read_text()
    assert failed.count('RuntimeError: Could not detect "srun"') == 2 and "killed or aborted" not in failed.split("|")[-2]
