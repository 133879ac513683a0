"""What a sweep's Hydra launcher needs from the drivers (topas/reproduce.py): `--jobs` applied to the
launcher the user chose, and the failures of runs that never reported named by the launcher's own
error, whatever the launcher.

A launcher can fail before any job starts (`hydra/launcher=slurm` without SLURM: submitit's "Could not
detect srun"); then no job writes its outcome and the sweep only knows the runs are missing. The
cause is in the sweep's log: `first_error` finds it, `name_missing` writes it into the manifest (so
failed_runs.md carries it) and onto the console.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

# launcher class (hydra.launcher._target_, last part) -> the key that sets how many jobs run at once
PARALLELISM = {"JoblibLauncher": "n_jobs", "SlurmLauncher": "array_parallelism", "LocalLauncher": "array_parallelism"}
_ERROR_LINE = re.compile(r"^(error:|Error:|[A-Za-z_.]*(Error|Exception)\b:?)")


def jobs_overrides(launcher: str, jobs: int | None, overrides: Sequence[str]) -> list[str]:
    """The override that applies `--jobs` to the chosen launcher (joblib: n_jobs; submitit: array_parallelism);
    ValueError (one line) where it cannot be applied."""
    if jobs is None:
        return []
    from topas.sweep import compose_config

    target = str(compose_config([f"hydra/launcher={launcher}"], hydra_config=True).hydra.launcher.get("_target_", ""))
    key = PARALLELISM.get(target.rsplit(".", 1)[-1])
    if key is None:
        raise ValueError(f"--jobs {jobs} cannot be applied to hydra/launcher={launcher} ({target or 'no target'}): "
                         "leave --jobs out or use a joblib or submitit launcher")
    if any(o.split("=", 1)[0].lstrip("+") == f"hydra.launcher.{key}" for o in overrides):
        raise ValueError(f"--jobs {jobs} and hydra.launcher.{key} both set how many jobs run at once: give one of them")
    return [f"hydra.launcher.{key}={jobs}"]


def first_error(log: str) -> str | None:
    """The first error of a sweep's log in one line: a traceback's exception line, else the first line that
    starts like an error (`error: ...`, `ValueError: ...`)."""
    lines = log.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("Traceback (most recent call last)"):
            tail = (x for x in lines[i + 1:] if x.strip() and not x.startswith((" ", "\t")))
            found = next(tail, None)
            if found:
                return found.strip()
        elif _ERROR_LINE.match(ln.strip()):
            return ln.strip()
    return None


def name_missing(df: pd.DataFrame, rc: int, log_file: Path, manifest: Path, write: Callable[[str], None]) -> pd.DataFrame:
    """A sweep's outcomes (topas.sweep.outcomes) with each run that never reported given the log's first error
    (recorded in the manifest, which analysis/load.py reads); every distinct error line of the failed and missing
    runs written to the console, once."""
    from topas.sweep import record_outcome

    missing = df["status"].eq("missing")
    cause = first_error(log_file.read_text(errors="replace")) if missing.any() and rc != 0 and log_file.exists() else None
    if cause:
        df = df.copy()
        df.loc[missing, "error"] = f"never started: {cause} (sweep exit {rc}; {log_file})"
        for job in df.loc[missing, "job"]:
            record_outcome(str(manifest), [job], "", "missing", df.loc[df["job"] == job, "error"].iloc[0])
    bad = df[df["status"].isin(["failed", "missing"])]
    for error, n in bad.groupby("error", sort=False).size().items():
        write(f"    {n} run(s): {error}")
    return df
