"""Sweeps are Hydra multiruns (`run.py -m`, any Hydra launcher); this module drives them.

- `expand` lists the jobs a multirun will launch (Hydra's own basic-sweeper expansion of the
  experiment's `hydra.sweeper.params` plus the command-line overrides); `sweep_choices` expands
  one sweep value (a comma list, `range(...)`, or `glob(...)` over a config group such as
  conf/scheduler, e.g. `scheduler: glob(*,exclude=[*_base,*_no_*])`; the experiment grids name a scheduler
  set instead, `${scheduler_set:full}`, topas/scheduler_sets.py).
- Every job appends its outcome (ok, cached, failed) to the sweep's manifest (`sweep_manifest`,
  a JSON-lines file, run folders relative to its own folder, so a runs folder can be copied or
  moved); a job that never reports (a killed worker, an aborted sweep) is missing, unless its
  folder (found by Hydra's `.hydra/overrides.yaml`) holds a complete run.
- The sweep's plan (`sweep_plan.json`: its jobs, no paths) is what the report reads: one plan per
  sweep folder. A hand-made multirun (`run.py -m`) writes it too and refuses another plan there
  (`claim_plan`); `check_jobs` validates a plan's overrides before anything runs.
- `run_sweep` starts one multirun, shows progress from the manifest, and returns one row per
  expected job with its status, so a driver can tell complete from incomplete.

A complete run folder (topas.results.is_complete, same fingerprint) is skipped by the job
itself, so a killed sweep resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from topas.errors import one_line

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = str(ROOT / "conf")
STATUSES = ("ok", "cached", "failed", "missing")


def compose_config(overrides: Sequence[str], hydra_config: bool = False):
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)

    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra_config)


def _is_hydra(o: str) -> bool:
    return o.startswith(("hydra.", "hydra/", "+hydra", "++hydra"))


@contextmanager
def _overrides_parser() -> Iterator[Any]:
    """Hydra's override parser with a config loader over conf/ (a `glob(...)` sweep lists the
    options of its config group through it), valid inside the `with` block. Inside a running
    Hydra app or an open `initialize_config_dir`, that context's loader is used."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if GlobalHydra.instance().is_initialized():
        yield OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        return
    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        yield OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """The task overrides of every job `run.py -m *overrides` launches, in launch order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    task = [o for o in overrides if not _is_hydra(o)]
    fixed = [o for o, p in zip(task, OverridesParser.create().parse_overrides(task)) if not p.is_sweep_override()]
    cfg = compose_config(fixed, hydra_config=True)  # opens its own Hydra context: not inside the parser's
    params = [f"{k}={v}" for k, v in (cfg.hydra.sweeper.get("params") or {}).items()]
    with _overrides_parser() as parser:
        return BasicSweeper.split_arguments(parser.parse_overrides(params + task), None)[0]


def sweep_dir_of(overrides: Sequence[str]) -> str:
    """The folder a multirun of `overrides` writes to (`hydra.sweep.dir`, as composed)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    fixed = [o for o, p in zip(overrides, OverridesParser.create().parse_overrides(list(overrides)))
             if not p.is_sweep_override()]
    return str(compose_config(fixed, hydra_config=True).hydra.sweep.dir)


def sweep_choices(key: str, value: Any) -> list[str]:
    """The values one sweep gives `key`, as the multirun launches them: `value` is a sweep
    list (`a,b,c`), a `range(...)`, a `glob(...)` over the config group `key` (its
    conf/<key>/*.yaml names, sorted, less the excluded ones), or one plain value."""
    with _overrides_parser() as parser:
        (o,) = parser.parse_overrides([f"{key}={value}"])
        return list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]


def job_key(overrides: Sequence[str]) -> str:
    """A job's identity: its task overrides, less the manifest path the driver adds."""
    return " ".join(o for o in overrides if not o.startswith("sweep_manifest="))


def manifest_override(manifest: Path) -> str:
    """The `sweep_manifest=` override of a sweep's jobs, quoted (Hydra's grammar: any path may appear)."""
    return "sweep_manifest='" + str(manifest).replace("\\", "\\\\").replace("'", "\\'") + "'"


def record_outcome(manifest: str | None, overrides: Sequence[str], out_dir: Path, status: str, error: str = "") -> None:
    """Append one job's outcome to the manifest (one short line: an atomic append); the run folder relative to
    the manifest's folder."""
    if not manifest:
        return
    run_dir = os.path.relpath(Path(out_dir).absolute(), Path(manifest).absolute().parent)
    line = json.dumps({"job": job_key(overrides), "run_dir": run_dir, "status": status, "error": error,
                       "time": time.time()})
    with open(manifest, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def read_manifest(path: str | Path, since: float | None = None) -> pd.DataFrame:
    """The last reported outcome per job (columns job, run_dir, status, error, time; run_dir absolute), of
    the outcomes reported at `since` or later."""
    rows = []
    p = Path(path)
    if p.exists():
        for ln in p.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(ln)
                row["run_dir"] = str(p.absolute().parent / row["run_dir"])  # an old absolute path stays as it is
            except (ValueError, TypeError, KeyError):
                continue  # a line cut by a killed writer
            if since is None or row.get("time", 0) >= since:
                rows.append(row)
    df = pd.DataFrame(rows, columns=["job", "run_dir", "status", "error", "time"])
    return df.drop_duplicates("job", keep="last").reset_index(drop=True)


def _folders_by_job(root: Path) -> dict[str, Path]:
    """Run folders under `root` by the job whose overrides Hydra recorded there (.hydra/overrides.yaml).
    A job has several folders when its config changed between sweeps (a new default gives a new folder for
    the same overrides): the one it was last launched into wins (Hydra rewrites overrides.yaml at every
    launch), never whichever the file system lists last."""
    import yaml

    found: dict[str, tuple[int, Path]] = {}
    for f in root.glob("**/.hydra/overrides.yaml"):
        try:
            job, launched = job_key([str(o) for o in yaml.safe_load(f.read_text()) or []]), f.stat().st_mtime_ns
        except (OSError, ValueError, TypeError, yaml.YAMLError):
            continue
        if job not in found or launched > found[job][0]:
            found[job] = (launched, f.parent.parent)
    return {job: folder for job, (_, folder) in found.items()}


def outcomes(expected: Sequence[Sequence[str]], manifest: str | Path, since: float | None = None) -> pd.DataFrame:
    """One row per expected job: its reported outcome; else, when its folder holds a complete run, 'ok';
    else 'missing'."""
    from topas.results import incomplete_reason

    got = read_manifest(manifest, since).set_index("job")
    rows, folders = [], None
    for ov in expected:
        k = job_key(ov)
        if k in got.index:
            r = got.loc[k]
            rows.append({"job": k, "run_dir": r["run_dir"], "status": r["status"], "error": r["error"]})
            continue
        folders = _folders_by_job(Path(manifest).absolute().parent) if folders is None else folders
        d = folders.get(k)
        reason = incomplete_reason(d) if d is not None else None
        if d is not None and reason is None:
            rows.append({"job": k, "run_dir": str(d), "status": "ok", "error": ""})
        else:
            where = f"; its folder is incomplete: {reason}" if d is not None else ""
            rows.append({"job": k, "run_dir": str(d or ""), "status": "missing",
                         "error": f"no outcome in {Path(manifest).name} (killed or aborted){where}"})
    return pd.DataFrame(rows, columns=["job", "run_dir", "status", "error"])


PLAN_FILE, MANIFEST_FILE = "sweep_plan.json", "sweep_manifest.jsonl"
PLAN_FORMAT = "topas-sweep-plan"


def write_plan(sweep_dir: Path, jobs: Sequence[Sequence[str]]) -> Path:
    """The sweep's plan: its jobs' overrides (no paths: the folder can be copied or moved)."""
    from topas.results import _atomic_write

    sweep_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": PLAN_FORMAT, "version": 2, "jobs": [list(j) for j in jobs]})
    _atomic_write(sweep_dir / PLAN_FILE, lambda p: Path(p).write_text(text))
    return sweep_dir / PLAN_FILE


def read_plan(path: Path) -> list[list[str]]:
    """A sweep plan's jobs; a ValueError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable sweep plan ({one_line(e)}); delete it and run the sweep again") from None
    jobs = data.get("jobs") if isinstance(data, dict) and data.get("format") == PLAN_FORMAT else data
    if not isinstance(jobs, list) or not all(isinstance(j, list) and all(isinstance(o, str) for o in j) for j in jobs):
        raise ValueError(f"{path}: not a sweep plan (expected a list of jobs' overrides); delete it and run the sweep again")
    return jobs


def claim_plan(sweep_dir: Path, jobs: Sequence[Sequence[str]]) -> None:
    """A hand-made multirun's plan: written, or the same as the one already there (a resume); another plan
    there is a one-line error, so the report never mixes two sweeps' runs."""
    from topas.config import ConfigError

    plan = sweep_dir / PLAN_FILE
    if plan.exists():
        try:
            old = read_plan(plan)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        old_keys, new_keys = {job_key(j) for j in old}, [job_key(j) for j in jobs]
        if old_keys != set(new_keys):
            other = next((k for k in new_keys if k not in old_keys), None)
            what = f"'{other}' is not in it" if other else f"it also plans '{sorted(old_keys - set(new_keys))[0]}'"
            raise ConfigError(f"{sweep_dir} holds another sweep ({PLAN_FILE}: {what}); give this one its own "
                              f"experiment_name=... or hydra.sweep.dir=..., or delete {plan} to replace that sweep")
    write_plan(sweep_dir, jobs)


def covering_jobs(jobs: Sequence[Sequence[str]]) -> list[list[str]]:
    """Jobs that together use every override value of `jobs` (a few per sweep list, not their product)."""
    seen: set[str] = set()
    chosen = []
    for j in jobs:
        if not set(j) <= seen:
            chosen.append(list(j))
            seen |= set(j)
    return chosen


def explain(e: BaseException, overrides: Sequence[str]) -> str:
    """One line for a failure to compose or validate `overrides`: Hydra's "Could not override 'k'" becomes
    the unknown key and the keys that exist beside it."""
    import re

    from topas.errors import GRAMMAR, unreadable_override

    if GRAMMAR.search(str(e)):  # name the override Hydra's grammar cannot read
        from hydra.core.override_parser.overrides_parser import OverridesParser

        for o in overrides:
            try:
                OverridesParser.create().parse_overrides([o])
            except Exception:  # noqa: BLE001 - this one
                return unreadable_override(o)
    m = re.search(r"Could not override '([^']+)'", str(e))
    if not m:
        return one_line(e)
    key = m.group(1)
    parent = key.rpartition(".")[0]
    try:
        from omegaconf import DictConfig, OmegaConf

        cfg = compose_config([o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key])
        node = OmegaConf.select(cfg, parent) if parent else cfg
        known = f"; {parent or 'the top level'} has: {', '.join(map(str, node.keys()))}" if isinstance(node, DictConfig) else ""
    except Exception:  # noqa: BLE001 - the hint is optional
        known = ""
    return f"{key}: no such key in the config{known} (a new key takes a leading +: +{key}=...)"


def check_jobs(jobs: Sequence[Sequence[str]]) -> None:
    """Validate a sweep's jobs before any runs, as each run validates itself (topas.runner.prepare): every
    override value, composed in `covering_jobs`. A ConfigError (one line naming the key and the sweep point)
    on the first bad one."""
    from hydra import compose, initialize_config_dir

    from topas.config import ConfigError
    from topas.runner import prepare

    common = set.intersection(*(set(j) for j in jobs)) if jobs else set()
    failed = None
    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        for job in covering_jobs(jobs):
            try:
                prepare(compose(config_name="config", overrides=list(job)))
            except Exception as e:  # noqa: BLE001 - any failure here is the overrides'
                failed = (e, job)
                break
    if failed:
        e, job = failed
        point = " ".join(o for o in job if o not in common and not o.startswith("sweep_manifest="))
        raise ConfigError(f"{explain(e, job)}{f' (sweep point {point})' if point and len(jobs) > 1 else ''}")


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def follow_manifest(manifest: Path, alive: Callable[[], bool], on_progress: Callable[[int], None] | None) -> None:
    """Tell `on_progress` of newly finished jobs (manifest lines) while `alive()`, and once more at the end."""
    done = 0

    def report() -> None:
        nonlocal done
        n = _count_lines(manifest)
        if n > done and on_progress:
            on_progress(n - done)
        done = max(done, n)

    while alive():
        time.sleep(0.5)
        report()
    report()


def run_sweep(overrides: Sequence[str], manifest: Path, log_file: Path, jobs: int = 1,
              on_progress: Callable[[int], None] | None = None, expected: list[list[str]] | None = None) -> tuple[pd.DataFrame, int]:
    """Run `run.py -m *overrides` (local launcher with `jobs` processes unless the overrides
    choose a launcher), report finished jobs to `on_progress`, and return (outcomes, exit code).
    The multirun and its workers end if this process is killed (topas.process_guard)."""
    expected = expected if expected is not None else expand(overrides)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.unlink(missing_ok=True)
    launcher = [] if any(o.startswith(("hydra/launcher=", "+hydra/launcher=")) for o in overrides) else (
        ["hydra/launcher=local", f"hydra.launcher.n_jobs={jobs}"] if jobs > 1 else [])
    # each job composes its own config in its worker: skip Hydra's serial up-front composition of every job
    # (hydra_plugins/topas_sweeper); the driver has checked its overrides, a job that fails is recorded
    sweeper = [] if any(o.startswith(("hydra/sweeper=", "+hydra/sweeper=")) for o in overrides) else ["hydra/sweeper=unchecked_basic"]
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", *overrides, *launcher, *sweeper, manifest_override(manifest)]
    env = {**os.environ, "TOPAS_WATCH_PARENT": "1"}
    with open(log_file, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            follow_manifest(manifest, lambda: proc.poll() is None, on_progress)
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)  # Ctrl-C / SIGTERM of the driver: stop the whole sweep
            proc.wait()
            raise
    return outcomes(expected, manifest), proc.returncode


def status_counts(df: pd.DataFrame) -> dict[str, int]:
    return {s: int((df["status"] == s).sum()) for s in STATUSES}


def summaries(df: pd.DataFrame) -> pd.DataFrame:
    """The summary.json of every complete job of an outcomes table, with its run_dir."""
    rows: list[dict[str, Any]] = []
    for r in df[df["status"].isin(["ok", "cached"])].itertuples():
        s = json.loads((Path(r.run_dir) / "summary.json").read_text())
        rows.append({**s, "run_dir": r.run_dir, "job": r.job})
    return pd.DataFrame(rows, columns=None if rows else ["run_dir", "job"])
