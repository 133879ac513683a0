"""Weights & Biases logging of a finished run (`logger=wandb`, offline unless `logger.mode=online`;
off by default: `logger: none` in conf/config.yaml, the cost measured in docs/analysis.md).

One W&B run per harness run, grouped by its sweep (`group` = `<experiment>:<sweep folder>`, the
folder the run folders of one sweep share; a single run's is its experiment folder), `job_type`
"run", tags workload/scheduler/load/seed, and named after the run folder (experiment, workload,
scheduler, load and rate, seed, config hash: topas/run_identity.py), so names never collide across
loads or experiments. Logged: the resolved config without the plumbing keys (where outputs go,
the manifest, the progress bar, the logger itself), the summary, the JCT histogram and CDF, the
per-task table, and the timeline (batch size, KV use, queue length, resident prefixes) as series
against simulated time.

Offline runs land under `<run folder>/wandb/`; upload them with
    find runs -type d -name 'offline-run-*' -exec wandb sync {} +
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

PLUMBING = frozenset({"hydra", "logger", "progress", "out_dir", "run_subdir", "sweep_manifest"})  # how, not what
TIMELINE_POINTS = 1000  # a regular time grid: enough for the charts, few log calls
TIMELINE_COLUMNS = {"running": "running_requests", "batch_size": "batch_size", "kv_used_tokens": "kv_used_tokens",
                    "waiting": "queue_length", "resident_prefixes": "resident_prefixes"}


def run_name(config: dict[str, Any], summary: dict[str, Any]) -> str:
    """`<experiment>-<workload>-<scheduler>-<load/rate>-seed<n>-<config hash>` from the run folder's identity."""
    sub = config.get("run_subdir") or f"{summary['workload']}/{summary['scheduler']}/seed{summary['seed']}"
    return f"{config.get('experiment_name', 'default')}-{str(sub).replace('/', '-')}"


def sweep_group(config: dict[str, Any], run_dir: Path) -> str:
    """`<experiment>:<sweep folder>`: the run folder less its `run_subdir` (Hydra's sweep dir; a single run's
    is its experiment folder), relative to the working directory where it lies below it."""
    folder, sub = Path(run_dir).resolve(), Path(str(config.get("run_subdir") or ""))
    if sub.parts and folder.parts[-len(sub.parts):] == sub.parts:
        folder = folder.parents[len(sub.parts) - 1]
    else:
        folder = folder.parent
    try:
        folder = folder.relative_to(Path.cwd())
    except ValueError:
        pass
    return f"{config.get('experiment_name', 'default')}:{folder}"[:128]  # W&B's limit on a group name


def logged_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config W&B shows: what the run computed, without the plumbing keys."""
    return {k: v for k, v in config.items() if k not in PLUMBING}


def run_tags(summary: dict[str, Any], extra=()) -> list[str]:
    load = summary.get("load")
    rate = summary.get("arrival_rate")
    level = f"load:{load:g}" if isinstance(load, (int, float)) else f"rate:{rate:.4g}" if rate else "rate:trace"
    return [f"workload:{summary['workload']}", f"scheduler:{summary['scheduler']}", level, f"seed:{summary['seed']}",
            *extra]


def timeline_series(tl: pd.DataFrame, kv_pool_tokens: float | None, points: int = TIMELINE_POINTS) -> pd.DataFrame:
    """The timeline's step functions sampled on a regular grid of simulated time (column `time_s`)."""
    tl = tl.sort_values("start", kind="stable")
    end = float((tl["start"] + tl["duration"]).max()) if len(tl) else 0.0
    grid = pd.DataFrame({"start": np.linspace(0.0, end, points)})
    s = pd.merge_asof(grid, tl[["start", *TIMELINE_COLUMNS]], on="start").rename(columns={"start": "time_s",
                                                                                         **TIMELINE_COLUMNS})
    if kv_pool_tokens:
        s["kv_used_pct"] = 100.0 * s["kv_used_tokens"] / kv_pool_tokens
    return s.fillna(0)


def log_run(logger_cfg, config: dict[str, Any], summary: dict[str, Any], record, out_dir: Path) -> None:
    """Log one finished run (called by topas/runner.py with the run's in-memory record)."""
    log_tables(logger_cfg, config, summary, record.tasks, record.timeline, out_dir)


def log_tables(logger_cfg, config: dict[str, Any], summary: dict[str, Any], tasks: pd.DataFrame,
               timeline: pd.DataFrame | None, out_dir: Path) -> None:
    import wandb

    with wandb.init(
        project=logger_cfg.project,
        entity=logger_cfg.entity,
        mode=logger_cfg.mode,
        dir=str(out_dir),
        config=logged_config(config),
        group=sweep_group(config, out_dir),
        job_type="run",
        tags=run_tags(summary, list(logger_cfg.tags)),
        name=run_name(config, summary),
    ) as run:
        run.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str)) or v is None})
        jct = np.sort(tasks.loc[~tasks["warmup"], "jct"].to_numpy(dtype=float))
        cdf = wandb.Table(dataframe=pd.DataFrame({"jct_s": jct, "fraction_of_tasks": np.arange(1, len(jct) + 1) / len(jct)}))
        run.log({
            "jct_hist": wandb.Histogram(jct),
            "jct_cdf": wandb.plot.line(cdf, "jct_s", "fraction_of_tasks", title="JCT CDF (after warm-up)"),
            "tasks": wandb.Table(dataframe=tasks),
        })
        if timeline is not None and len(timeline):
            # the timeline as series against simulated time, not W&B's step counter
            run.define_metric("timeline/time_s")
            run.define_metric("timeline/*", step_metric="timeline/time_s")
            for row in timeline_series(timeline, summary.get("kv_pool_tokens")).to_dict("records"):
                run.log({f"timeline/{k}": v for k, v in row.items()})


def log_run_dir(logger_cfg, run_dir: str | Path) -> None:
    """Log a finished run from its folder (a sweep point skipped as complete was not logged when it ran)."""
    import yaml

    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("files", None)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    tl = run_dir / "timeline.parquet"
    log_tables(logger_cfg, config, summary, pd.read_parquet(run_dir / "tasks.parquet"),
               pd.read_parquet(tl) if tl.exists() else None, run_dir)


def is_logged(run_dir: str | Path) -> bool:
    """Whether the run folder already holds a W&B run (offline or online)."""
    return any((Path(run_dir) / "wandb").glob("*run-*"))
