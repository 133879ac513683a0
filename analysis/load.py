"""Run outputs -> pandas tables (one row per complete run).

Columns: experiment, workload, scheduler, load, arrival_rate, seed, the summary metrics
(topas/results.py), run_dir, backend, kv_pool_override, host_cache_ratio, mem_fraction_static
and load_tag; everything is read from the run's own summary.json and config.yaml, never from
its folder name. A run counts only when complete and intact: every output matches its digest
in summary.json and summary.json its own (topas.results.incomplete_reason).

`load_experiment` reads one experiment's sweep (its plan and manifest, topas/sweep.py): only
the runs of that plan, so folders left by other configs are never mixed in, plus one failure
row per failed, missing or damaged run, naming the file. A folder made without a sweep (runs
written by `topas.runner.run`) is read whole, unless two of its runs of different configs
would fall into one table cell. A file that cannot be read is a one-line `LoadError` naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from topas.sweep import MANIFEST_FILE, PLAN_FILE

ROOT = Path(__file__).resolve().parents[1]
FAILURE_COLUMNS = ["experiment", "job", "run", "workload", "scheduler", "seed", "status", "error"]
# what tells two runs apart in a table cell (with the experiment's own axes: kv pool, host tier, memory fraction)
CELL = ["workload", "scheduler", "load_tag", "seed", "backend", "kv_pool_override", "host_cache_ratio",
        "mem_fraction_static"]


class LoadError(ValueError):
    """A run output that cannot be read: one line naming the file."""


def _row(run_dir: Path) -> dict:
    from topas.errors import one_line
    from topas.results import incomplete_reason

    reason = incomplete_reason(run_dir)
    if reason is not None:
        raise LoadError(reason)
    cfg_file = run_dir / "config.yaml"
    try:
        s = json.loads((run_dir / "summary.json").read_text())
        cfg = yaml.safe_load(cfg_file.read_text()) if cfg_file.exists() else {}
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise LoadError(f"{run_dir}: unreadable output ({one_line(e)})") from None
    s.pop("files", None)
    s.pop("digest", None)
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
    """Every complete run folder under `root` (optionally of one experiment); a LoadError names a damaged one."""
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


def folder_labels(folders: list[str], strip: tuple[str, ...] = ()) -> list[str]:
    """A label per runs folder: its name less any of `strip`'s prefixes, or its path where two folders would
    share a label (host0-memNone under each scheduler of a regime cell), so no folder's runs replace another's."""
    names = [Path(d).name for d in folders]
    for prefix in strip:
        names = [n.removeprefix(prefix) for n in names]
    return [n if names.count(n) == 1 else str(Path(d)) for n, d in zip(names, folders)]


def config_difference(a: str, b: str) -> str:
    """The config keys two run folders differ in (from their config.yaml)."""
    flat = [pd.json_normalize(yaml.safe_load((Path(d) / "config.yaml").read_text()) or {}).iloc[0].to_dict() for d in (a, b)]
    keys = sorted(k for k in set(flat[0]) | set(flat[1])
                  if str(flat[0].get(k)) != str(flat[1].get(k)) and k not in ("out_dir", "run_subdir"))  # paths follow the rest
    return ", ".join(keys[:4]) or "nothing but the code"


def duplicate_pair(df: pd.DataFrame, cols: list[str]) -> tuple[pd.Series, pd.Series] | None:
    """Two runs (rows) of `df` that agree on `cols`, both of one key (the first key in sorted order); None if
    every run's key is its own. The checks below name them, with what their configs differ in."""
    if df.empty:
        return None
    df = df.reset_index(drop=True)  # a concatenation's index may repeat
    key = df[cols].astype(str)
    mask = key.duplicated(keep=False)
    if not mask.any():
        return None
    order = key[mask].assign(run_dir=df.loc[mask, "run_dir"].astype(str)).sort_values([*cols, "run_dir"]).index
    return df.loc[order[0]], df.loc[order[1]]


def _check_one_config_per_cell(df: pd.DataFrame, exp_dir: Path) -> None:
    """Runs of different configs in one table cell would be averaged as if they were seeds: a LoadError."""
    pair = duplicate_pair(df, [c for c in CELL if c in df.columns])
    if pair is not None:
        a, b = pair[0]["run_dir"], pair[1]["run_dir"]
        raise LoadError(f"{exp_dir} holds runs of different configs in one cell ({a} and {b} differ in "
                        f"{config_difference(a, b)}); give each sweep its own experiment_name")


def _unplanned(exp_dir: Path, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A folder without a sweep plan: its complete runs and, as failures, its damaged runs and error.txt files."""
    rows, damaged = [], []
    for summary in sorted(exp_dir.glob("**/summary.json")):
        try:
            rows.append(_row(summary.parent))
        except LoadError as e:
            damaged.append({"experiment": name, "job": "", "run": str(summary.parent), "workload": "", "scheduler": "",
                            "seed": "", "status": "damaged", "error": str(e)})
    df = _frame(rows)
    _check_one_config_per_cell(df, exp_dir)
    failed = pd.concat([load_failures(exp_dir, name), pd.DataFrame(damaged, columns=FAILURE_COLUMNS)], ignore_index=True)
    return df, failed


def load_experiment(name: str, root: str | Path = ROOT / "runs") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(complete runs, failures) of experiment `name`'s sweep (its plan). Without a sweep plan (runs written by
    topas.runner.run), every complete run folder under runs/<name>/ and its error.txt files."""
    from topas.sweep import outcomes, read_plan

    exp_dir = Path(root) / name
    plan = exp_dir / PLAN_FILE
    if not plan.exists():
        return _unplanned(exp_dir, name)
    try:
        jobs = read_plan(plan)
    except ValueError as e:
        raise LoadError(str(e)) from None
    rows, failures = [], []
    for r in outcomes(jobs, exp_dir / MANIFEST_FILE).itertuples():
        status, error = r.status, r.error
        if status in ("ok", "cached"):
            try:
                rows.append(_row(Path(r.run_dir)))
                continue
            except LoadError as e:
                status, error = "damaged", str(e)
        failures.append({"experiment": name, "job": r.job, "run": r.run_dir, **_job_fields(r.job), "status": status,
                         "error": error})
    return _frame(rows), pd.DataFrame(failures, columns=FAILURE_COLUMNS)


def load_failures(root: str | Path, experiment: str = "") -> pd.DataFrame:
    """Failed runs recorded in `error.txt` under `root` (first line: the job's overrides,
    last line: the error)."""
    rows = []
    for err in sorted(Path(root).glob("**/error.txt")):
        lines = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
        job = lines[0] if lines else ""
        rows.append({"experiment": experiment, "job": job, "run": str(err.parent), **_job_fields(job), "status": "failed",
                     "error": lines[-1] if lines else ""})
    return pd.DataFrame(rows, columns=FAILURE_COLUMNS)


def _parquet(path: Path) -> pd.DataFrame:
    from topas.errors import one_line

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise LoadError(f"{path}: unreadable ({one_line(e)})") from None


def load_tasks(run_dir: str | Path) -> pd.DataFrame:
    return _parquet(Path(run_dir) / "tasks.parquet")


def load_requests(run_dir: str | Path) -> pd.DataFrame:
    return _parquet(Path(run_dir) / "requests.parquet")


def task_jct(run_dir: str | Path) -> pd.Series:
    """JCT by task id (all tasks, warm-up included)."""
    return load_tasks(run_dir).set_index("task_id")["jct"].astype(float)


def load_timeline(run_dir: str | Path) -> pd.DataFrame:
    return _parquet(Path(run_dir) / "timeline.parquet")
