"""Run one experiment (or a Hydra multirun sweep with -m).

    python run.py scheduler=lpm workload=metagpt_tl gpu=h100_80gb model=llama3_1_8b
    python run.py workload.load=0.7 hydra.run.dir=/tmp/x      # outputs in Hydra's job output dir

Bad input (unknown group value, malformed override, invalid parameter, a call that can never
fit the KV pool, an output folder that cannot be written or that another run is using) prints
one line starting with "error:" and exits with status 2, before anything runs or any folder is
made; a multirun checks every override value of its points first. A multirun writes its plan
and manifest into its sweep folder (topas/sweep.py), ends with one line counting its points and
exits 1 when any failed. A full disk is one line naming the file and the free space; Ctrl-C one
line and status 130. TOPAS_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from contextlib import ExitStack
from pathlib import Path

import hydra
from omegaconf import DictConfig

import topas.config  # noqa: F401  (registers the resolvers used in conf/config.yaml)
import topas.scheduler_sets  # noqa: F401  (`scheduler_set` of conf/experiment/*.yaml: sweep data, no run's code)
from topas.errors import one_line

log = logging.getLogger("topas")
MULTIRUN_FLAGS = ("-m", "--multirun")
_HELD = ExitStack()  # the single run's folder lock, held until the process ends


def _fail(e: BaseException | str, status: int = 2, path: Path | None = None) -> None:
    if os.environ.get("TOPAS_DEBUG") and isinstance(e, BaseException):
        raise e
    print(f"error: {e if isinstance(e, str) else one_line(e, path)}", file=sys.stderr)
    sys.exit(status)


def precheck(argv: list[str]) -> None:
    """Validate a single run fully, then create its folder and take its lock, before Hydra writes there:
    bad input is one clear line and nothing is written. Hydra's own flags (-c, --info, -sc, ...) skip
    this: Hydra handles them."""
    if any(a.startswith("-") for a in argv):
        return
    from topas.runner import output_path, prepare, run_lock
    from topas.sweep import compose_config, explain

    try:
        cfg = compose_config(argv, hydra_config=True)
        out = output_path(cfg.hydra.run.dir)
        prepare(cfg)
        _HELD.enter_context(run_lock(out))
    except Exception as e:  # noqa: BLE001 - any failure here is the user's input
        _fail(e if os.environ.get("TOPAS_DEBUG") else explain(e, argv))


def precheck_sweep(argv: list[str]) -> tuple[list[list[str]], Path] | None:
    """A multirun's points: every override value checked before the first runs; its plan claimed in its sweep
    folder (or the driver's manifest used). Returns (jobs, manifest); None for a multirun with other flags."""
    overrides = [a for a in argv if a not in MULTIRUN_FLAGS]
    if any(a.startswith("-") for a in overrides):
        return None
    from topas.config import ConfigError
    from topas.sweep import MANIFEST_FILE, check_jobs, claim_plan, expand, explain, manifest_override, sweep_dir_of

    try:
        jobs = expand(overrides)
        given = next((o.split("=", 1)[1].strip("'") for o in overrides if o.startswith("sweep_manifest=")), None)
        if given:  # a driver's sweep (topas.reproduce, topas.tuning): it checked the jobs and keeps the plan
            return jobs, Path(given)
        check_jobs(jobs)
        sweep_dir = sweep_dir_of(overrides)
        if not sweep_dir.strip():
            raise ConfigError("hydra.sweep.dir is empty; give the sweep's folder")
        claim_plan(Path(sweep_dir), jobs)
    except Exception as e:  # noqa: BLE001 - any failure here is the user's input
        _fail(e if os.environ.get("TOPAS_DEBUG") else explain(e, overrides))
    manifest = Path(sweep_dir).absolute() / MANIFEST_FILE
    sys.argv.append(manifest_override(manifest))
    return jobs, manifest


def sweep_summary(jobs: list[list[str]], manifest: Path, since: float) -> None:
    """One line counting the points of this multirun; exit 1 when any failed or never reported."""
    from topas.sweep import outcomes, status_counts

    df = outcomes(jobs, manifest, since)
    c = status_counts(df)
    bad = df[df["status"].isin(["failed", "missing"])]
    line = f"sweep: {len(df)} points: {c['ok']} ok, {c['cached']} cached, {c['failed']} failed, {c['missing']} missing"
    if bad.empty:
        print(line, file=sys.stderr)
        return
    first = bad.iloc[0]
    where = Path(first["run_dir"]) / "error.txt" if first["run_dir"] else manifest
    _fail(f"{line}; first: {first['error']} ({where}); every outcome: {manifest}", status=1)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from topas.process_guard import exit_with_parent
    from topas.results import clear_outcome, is_complete
    from topas.runner import fingerprint_of, run, run_lock
    from topas.sweep import record_outcome

    exit_with_parent()
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    if hc.mode != RunMode.MULTIRUN:
        try:
            run(cfg, out_dir=out)
        except (ValueError, OSError) as e:  # bad input found late, a full disk: one line
            _fail(e, path=out)
        return
    try:
        with run_lock(out, wait=True):  # a concurrent sweep's job in this folder: wait for it, then maybe skip
            if is_complete(out, fingerprint_of(cfg)):
                log.info(f"complete, skipped: {out}")  # a resumed sweep runs only what is missing (same code and config)
                record_outcome(cfg.sweep_manifest, hc.overrides.task, out, "cached")
                return
            try:
                run(cfg, out_dir=out)
            except Exception:  # noqa: BLE001 - a failed point is recorded (error.txt, the manifest); the sweep goes on
                clear_outcome(out)
                (out / "error.txt").write_text(f"{' '.join(hc.overrides.task)}\n{traceback.format_exc()}")
                raise
        record_outcome(cfg.sweep_manifest, hc.overrides.task, out, "ok")
    except Exception as e:  # noqa: BLE001
        log.error(f"failed: {out}: {one_line(e, out)}")
        record_outcome(cfg.sweep_manifest, hc.overrides.task, out, "failed", one_line(e, out))


if __name__ == "__main__":
    from topas.process_guard import exit_with_parent

    exit_with_parent()  # the multirun's launcher process; each job process watches its own parent
    args = sys.argv[1:]
    try:
        sweep = precheck_sweep(args) if any(a in MULTIRUN_FLAGS for a in args) else precheck(args)
        started = time.time()
        main()
        if sweep:
            sweep_summary(*sweep, since=started)
    except KeyboardInterrupt:
        _fail("interrupted (Ctrl-C); a run that did not finish has no summary.json and is run again by the "
              "next sweep", status=130)
