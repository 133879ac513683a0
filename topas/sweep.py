"""Sweeps are Hydra multiruns (`run.py -m`, any Hydra launcher); this module drives them.

- `expand` lists the jobs a multirun will launch (Hydra's own basic-sweeper expansion of the
  experiment's `hydra.sweeper.params` plus the command-line overrides); `sweep_choices` expands
  one sweep value (a comma list, `range(...)`, or `glob(...)` over a config group such as
  conf/scheduler, e.g. the main grid's `scheduler: glob(*,exclude=[*_base,*_no_*])`).
- Every job appends its outcome (ok, cached, failed) to the sweep's manifest (`sweep_manifest`,
  a JSON-lines file); a job that never reports (a killed worker, an aborted sweep) is missing.
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


def record_outcome(manifest: str | None, overrides: Sequence[str], out_dir: Path, status: str, error: str = "") -> None:
    """Append one job's outcome to the manifest (one short line: an atomic append)."""
    if not manifest:
        return
    line = json.dumps({"job": job_key(overrides), "run_dir": str(out_dir), "status": status, "error": error,
                       "time": time.time()})
    with open(manifest, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def read_manifest(path: str | Path) -> pd.DataFrame:
    """The last reported outcome per job (columns job, run_dir, status, error)."""
    rows = []
    p = Path(path)
    if p.exists():
        for ln in p.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(ln))
            except ValueError:
                continue  # a line cut by a killed writer
    df = pd.DataFrame(rows, columns=["job", "run_dir", "status", "error", "time"])
    return df.drop_duplicates("job", keep="last").reset_index(drop=True)


def outcomes(expected: Sequence[Sequence[str]], manifest: str | Path) -> pd.DataFrame:
    """One row per expected job: its reported outcome, or status 'missing'."""
    got = read_manifest(manifest).set_index("job")
    rows = []
    for ov in expected:
        k = job_key(ov)
        if k in got.index:
            r = got.loc[k]
            rows.append({"job": k, "run_dir": r["run_dir"], "status": r["status"], "error": r["error"]})
        else:
            rows.append({"job": k, "run_dir": "", "status": "missing", "error": "no outcome reported (killed or aborted)"})
    return pd.DataFrame(rows, columns=["job", "run_dir", "status", "error"])


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
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", *overrides, *launcher, *sweeper, f"sweep_manifest={manifest}"]
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
