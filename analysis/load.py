"""Load every run under runs/ into one pandas table (one row per complete run).

Columns: experiment, workload, scheduler, load, arrival_rate, seed, the summary metrics
(topas/results.py), and run_dir. Backends are treated alike: both write the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]


def load_runs(root: str | Path = ROOT / "runs", experiment: str | None = None) -> pd.DataFrame:
    rows = []
    for summary in sorted(Path(root).glob("**/summary.json")):
        run_dir = summary.parent
        s = json.loads(summary.read_text())
        cfg_file = run_dir / "config.yaml"
        cfg = yaml.safe_load(cfg_file.read_text()) if cfg_file.exists() else {}
        exp = cfg.get("experiment_name", run_dir.relative_to(root).parts[0] if run_dir != Path(root) else "")
        if experiment is not None and exp != experiment:
            continue
        s.update(experiment=exp, run_dir=str(run_dir), backend=s.get("backend", "sim"),
                 kv_pool_override=(cfg.get("backend") or {}).get("kv_pool_tokens"))
        rows.append(s)
    df = pd.DataFrame(rows)
    if len(df):
        df["load_tag"] = [f"load{l:g}" if l == l and l is not None else f"rate{r:g}" for l, r in zip(df["load"], df["arrival_rate"])]
    return df


def load_failures(root: str | Path = ROOT / "runs", experiments: set[str] | None = None) -> pd.DataFrame:
    """Runs a sweep recorded as failed (`error.txt`, topas/sweep.py): experiment folder, the run
    folder below it and the error's last line. Their points are missing from `load_runs`."""
    rows = []
    for err in sorted(Path(root).glob("**/error.txt")):
        rel = err.parent.relative_to(root)
        if experiments is not None and rel.parts[0] not in experiments:
            continue
        lines = [ln for ln in err.read_text().splitlines() if ln.strip()]
        rows.append({"experiment": rel.parts[0], "run": "/".join(rel.parts[1:]), "error": lines[-1] if lines else ""})
    return pd.DataFrame(rows, columns=["experiment", "run", "error"])


def load_tasks(run_dir: str | Path) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / "tasks.parquet")


def load_timeline(run_dir: str | Path) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / "timeline.parquet")
