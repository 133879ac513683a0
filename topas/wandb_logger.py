"""Weights & Biases logging of a finished run (offline by default: no account needed).

Logs the resolved config, the summary, a JCT histogram and the per-task table. Offline
runs land under `<run folder>/wandb/` and can be uploaded later with `wandb sync`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from topas.results import RunRecord


def log_run(logger_cfg, config: dict[str, Any], summary: dict[str, Any], record: RunRecord, out_dir: Path) -> None:
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    run = wandb.init(
        project=logger_cfg.project,
        entity=logger_cfg.entity,
        mode=logger_cfg.mode,
        dir=str(out_dir),
        config=config,
        tags=list(logger_cfg.tags),
        name=f"{summary['scheduler']}-{summary['workload']}-{summary['seed']}",
        reinit=True,
    )
    try:
        steady = record.tasks[~record.tasks["warmup"]]
        run.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str)) or v is None})
        run.log(
            {
                "jct_hist": wandb.Histogram(steady["jct"].to_numpy()),
                "tasks": wandb.Table(dataframe=record.tasks),
            }
        )
    finally:
        run.finish()
