"""Resumable local sweeps of runs (used by tuning and `make reproduce`).

Each point is a list of Hydra overrides; its run folder follows from the config
(`out_dir`). A point whose folder already holds a complete run (summary.json written
last) is skipped, so a killed sweep resumes where it stopped; a point that fails is
recorded in `<folder>/error.txt` and does not stop the others.
"""

from __future__ import annotations

import json
import os
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from tqdm import tqdm

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def compose_config(overrides: Sequence[str]):
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)

    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        return compose(config_name="config", overrides=list(overrides))


def run_point(overrides: Sequence[str]) -> dict[str, Any]:
    """Run one point unless complete; returns its summary (or an error record)."""
    from topas.results import is_complete
    from topas.runner import fingerprint_of, run

    try:
        cfg = compose_config(["logger=none", "progress=false", *overrides])
    except Exception as e:  # noqa: BLE001 - report as a failed point (exceptions may not pickle)
        return {"out_dir": "", "status": "failed", "error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    out = Path(cfg.out_dir)
    if is_complete(out, fingerprint_of(cfg)):
        return {**json.loads((out / "summary.json").read_text()), "out_dir": str(out), "status": "cached"}
    try:
        _, summary = run(cfg, quiet=True)
        (out / "error.txt").unlink(missing_ok=True)
        return {**summary, "out_dir": str(out), "status": "ok"}
    except Exception as e:  # noqa: BLE001 - a failed point is recorded, the sweep goes on
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.txt").write_text(f"{' '.join(overrides)}\n{traceback.format_exc()}")
        return {"out_dir": str(out), "status": "failed", "error": str(e).splitlines()[0] if str(e) else type(e).__name__}


def run_grid(points: Sequence[Sequence[str]], jobs: int | None = None, desc: str = "runs") -> pd.DataFrame:
    """Run every point (in parallel processes) and return one row per point."""
    jobs = jobs or os.cpu_count() or 1
    rows: list[dict[str, Any]] = []
    with tqdm(total=len(points), desc=desc, unit="run") as bar:
        if jobs == 1:
            for p in points:
                rows.append(run_point(p))
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=jobs) as ex:
                for row in ex.map(run_point, points, chunksize=1):
                    rows.append(row)
                    bar.update()
    for p, row in zip(points, rows):
        row["overrides"] = " ".join(p)
    return pd.DataFrame(rows)
