"""Run outputs -> pandas tables (one row per complete run).

Columns: experiment, workload, scheduler, load, arrival_rate, seed, the summary metrics
(topas/results.py), run_dir, backend, kv_pool_override, host_cache_ratio, mem_fraction_static
and load_tag; everything is read from the run's own summary.json and config.yaml, never from
its folder name.

`load_experiment` reads one experiment's last sweep (its plan and manifest, topas/sweep.py):
only the runs that sweep produced, so folders left by other configs are never mixed in, plus
one failure row per failed, missing or damaged run, naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
FAILURE_COLUMNS = ["experiment", "job", "run", "workload", "scheduler", "seed", "status", "error"]
PLAN_FILE, MANIFEST_FILE = "sweep_plan.json", "sweep_manifest.jsonl"


def _row(run_dir: Path) -> dict:
    s = json.loads((run_dir / "summary.json").read_text())
    cfg_file = run_dir / "config.yaml"
    cfg = yaml.safe_load(cfg_file.read_text()) if cfg_file.exists() else {}
    s.pop("files", None)
    b = cfg.get("backend") or {}
    s.update(experiment=cfg.get("experiment_name", ""), run_dir=str(run_dir), backend=s.get("backend", "sim"),
             kv_pool_override=b.get("kv_pool_tokens"), host_cache_ratio=b.get("host_cache_ratio"),
             mem_fraction_static=b.get("mem_fraction_static"))
    return s


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if len(df):
        df["load_tag"] = [f"load{ld:g}" if ld == ld and ld is not None else f"rate{r:g}" for ld, r in zip(df["load"], df["arrival_rate"])]
    return df


def load_runs(root: str | Path = ROOT / "runs", experiment: str | None = None) -> pd.DataFrame:
    """Every complete run folder under `root` (optionally of one experiment)."""
    rows = []
    for summary in sorted(Path(root).glob("**/summary.json")):
        row = _row(summary.parent)
        if experiment is None or row["experiment"] == experiment:
            rows.append(row)
    return _frame(rows)


def _job_fields(job: str) -> dict:
    kv = dict(o.lstrip("+").split("=", 1) for o in job.split() if "=" in o)
    if "regime_point" in kv:  # a regime cell names its workload: <workload>_load<L> or <workload>_paper
        kv.setdefault("workload", kv["regime_point"].rsplit("_", 1)[0])
    return {"workload": kv.get("workload", ""), "scheduler": kv.get("scheduler", ""), "seed": kv.get("seed", "")}


def load_experiment(name: str, root: str | Path = ROOT / "runs") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(complete runs, failures) of experiment `name`'s last sweep. Without a sweep plan (a
    multirun started by hand), every complete run folder under runs/<name>/ and its error.txt files."""
    from topas.results import incomplete_reason
    from topas.sweep import outcomes

    exp_dir = Path(root) / name
    plan = exp_dir / PLAN_FILE
    if not plan.exists():
        return load_runs(exp_dir, None), load_failures(exp_dir, name)
    rows, failures = [], []
    for r in outcomes(json.loads(plan.read_text()), exp_dir / MANIFEST_FILE).itertuples():
        status, error = r.status, r.error
        if status in ("ok", "cached"):
            error = incomplete_reason(r.run_dir)
            if error is None:
                rows.append(_row(Path(r.run_dir)))
                continue
            status = "damaged"
        failures.append({"experiment": name, "job": r.job, "run": r.run_dir, **_job_fields(r.job), "status": status,
                         "error": error})
    return _frame(rows), pd.DataFrame(failures, columns=FAILURE_COLUMNS)


def load_failures(root: str | Path, experiment: str = "") -> pd.DataFrame:
    """Failed runs recorded in `error.txt` under `root` (first line: the job's overrides,
    last line: the error)."""
    rows = []
    for err in sorted(Path(root).glob("**/error.txt")):
        lines = [ln for ln in err.read_text().splitlines() if ln.strip()]
        job = lines[0] if lines else ""
        rows.append({"experiment": experiment, "job": job, "run": str(err.parent), **_job_fields(job), "status": "failed",
                     "error": lines[-1] if lines else ""})
    return pd.DataFrame(rows, columns=FAILURE_COLUMNS)


def load_tasks(run_dir: str | Path) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / "tasks.parquet")


def load_timeline(run_dir: str | Path) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / "timeline.parquet")
