"""Where the runs of a real-engine sweep go: accelerators, not CPU cores.

A real SGLang server owns its GPU(s) (it sizes its KV pool from `mem_fraction_static` of the
whole device), so a sweep on `backend=sglang` runs

- one worker per visible GPU, or per group of `backend.gpus_per_run` GPUs
  (`CUDA_VISIBLE_DEVICES` when set, else the GPUs `nvidia-smi -L` lists);
- each worker's runs strictly one after the other, in one process pinned to its GPU(s)
  (`CUDA_VISIBLE_DEVICES=<its group>`), so no two runs ever share a GPU at once;
- in one process, so `backend.reuse_server=true` keeps its server across consecutive runs with
  the same server options (the policy switched in place, the prefix cache flushed); runs are
  ordered so that runs of one server are consecutive on their worker;
- on a machine without a GPU (the CPU server), exactly one worker: one run at a time.

`plan_placement` is the pure planning step (tested in tests/test_real_placement.py);
`run_placed` starts the workers (`python -m topas.placement <worker.json>`, `worker_main`), shows
progress from the sweep manifest and returns the same outcomes table as `topas.sweep.run_sweep`.

A worker runs its jobs as `run.py -m` jobs do (same folder, same manifest line, same skip of a
complete folder, same error.txt for a failed point), so a placed sweep and a Hydra multirun
leave identical run folders; after each real run it records the simulator's prediction of the
same trace beside it (`sim_prediction.json`, topas/prediction.py).

A driver (like topas.sweep), not part of the engine: engines never import drivers.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("topas")
# keys of a job's overrides that change the server a run needs (everything else: the policy,
# the workload, the seed, client-side options, is served by the same server)
SERVER_PREFIXES = ("backend", "model", "gpu")
CLIENT_SIDE = {"backend.token_scale", "backend.time_scale", "backend.hint_channel", "backend.stream",
               "backend.warmup_requests", "backend.request_timeout_s", "backend.replay_timeout_s",
               "backend.reuse_server", "backend.startup_timeout_s"}


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use: `CUDA_VISIBLE_DEVICES` when set (empty or -1: none),
    else the indices of the GPUs `nvidia-smi -L` lists, else none."""
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = [d.strip() for d in cvd.split(",") if d.strip()]
        return [] if not ids or ids[0] == "-1" else ids
    import shutil

    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        p = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if p.returncode != 0:
        return []
    return [str(i) for i, ln in enumerate(ln for ln in p.stdout.splitlines() if ln.startswith("GPU "))]


def gpu_groups(gpus: Sequence[str], per_run: int = 1) -> list[str | None]:
    """The device groups runs are pinned to (`CUDA_VISIBLE_DEVICES` values); [None] without a
    GPU (one CPU worker). GPUs left over by `per_run` are not used."""
    if per_run < 1:
        raise ValueError(f"backend.gpus_per_run must be >= 1, got {per_run}")
    if not gpus:
        return [None]
    if len(gpus) < per_run:
        raise ValueError(f"backend.gpus_per_run={per_run} but only {len(gpus)} GPU(s) visible ({','.join(gpus)})")
    return [",".join(gpus[i:i + per_run]) for i in range(0, len(gpus) - per_run + 1, per_run)]


def server_signature(job: Sequence[str]) -> str:
    """The overrides of a job that choose its server (model, GPU, server options)."""
    keep = []
    for o in job:
        k = o.split("=", 1)[0].lstrip("+~")
        if k.split(".")[0].split("/")[0] in SERVER_PREFIXES and k not in CLIENT_SIDE:
            keep.append(o)
    return " ".join(sorted(keep))


@dataclass
class Worker:
    devices: str | None  # CUDA_VISIBLE_DEVICES of every run of this worker (None: CPU, left as is)
    jobs: list[int] = field(default_factory=list)  # indices into the planned jobs, in run order
    est_s: float = 0.0  # estimated real time of its runs (with `costs`)


def plan_placement(jobs: Sequence[Sequence[str]], groups: Sequence[str | None],
                   costs: Sequence[float] | None = None, max_workers: int | None = None) -> list[Worker]:
    """Assign every job to exactly one worker (one per device group, at most `max_workers`):
    longest estimated job first to the least-loaded worker (`costs`: estimated seconds per job,
    default 1 each), then each worker's jobs ordered so that jobs of one server are consecutive
    (by the server signature's first appearance in `jobs`, then plan order)."""
    if not groups:
        raise ValueError("no device group to place runs on")
    n = len(groups) if max_workers is None else max(1, min(len(groups), max_workers))
    workers = [Worker(g) for g in groups[:n]]
    costs = [1.0] * len(jobs) if costs is None else [float(c) for c in costs]
    if len(costs) != len(jobs):
        raise ValueError("one cost per job")
    sig = [server_signature(j) for j in jobs]
    first = {s: i for i, s in reversed(list(enumerate(sig)))}
    for i in sorted(range(len(jobs)), key=lambda i: (-costs[i], i)):
        w = min(workers, key=lambda w: (w.est_s, len(w.jobs)))
        w.jobs.append(i)
        w.est_s += costs[i]
    for w in workers:
        w.jobs.sort(key=lambda i: (first[sig[i]], i))
    return workers


def describe(workers: Sequence[Worker], jobs: Sequence[Sequence[str]]) -> list[str]:
    """One line per worker: its device group, runs, distinct servers and estimated time."""
    lines = []
    for k, w in enumerate(workers):
        servers = len({server_signature(jobs[i]) for i in w.jobs})
        dev = f"GPU {w.devices}" if w.devices is not None else "CPU (no GPU visible)"
        lines.append(f"  worker {k}: {dev:22s} {len(w.jobs):4d} runs, one at a time, {servers} server(s); "
                     f"~{w.est_s / 3600:.2f} h")
    return lines


def worker_command(job_file: Path) -> list[str]:
    return [sys.executable, "-m", "topas.placement", str(job_file)]


def run_placed(workers: Sequence[Worker], jobs: Sequence[Sequence[str]], sweep_dir: Path, manifest: Path,
               log_file: Path, on_progress: Callable[[int], None] | None = None,
               command: Callable[[Path], list[str]] = worker_command) -> tuple[pd.DataFrame, int]:
    """Run each worker's jobs in a process of its own, pinned to its devices; wait for all.
    Returns (outcomes as `topas.sweep.outcomes`, the worst worker exit code)."""
    from topas.sweep import follow_manifest, outcomes

    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.unlink(missing_ok=True)
    procs: list[tuple[subprocess.Popen, object]] = []
    try:
        for k, w in enumerate(workers):
            if not w.jobs:
                continue
            job_file = manifest.parent / f"worker{k}.json"
            job_file.write_text(json.dumps({"sweep_dir": str(sweep_dir), "manifest": str(manifest),
                                            "devices": w.devices, "jobs": [list(jobs[i]) for i in w.jobs]}))
            env = {**os.environ, "TOPAS_WATCH_PARENT": "1"}
            if w.devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = w.devices
            log = open(log_file.with_name(f"{log_file.stem}.worker{k}{log_file.suffix}"), "w")
            p = subprocess.Popen(command(job_file), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
            procs.append((p, log))
        follow_manifest(manifest, lambda: any(p.poll() is None for p, _ in procs), on_progress)
    except BaseException:
        for p, _ in procs:  # Ctrl-C / SIGTERM of the driver: stop every worker and its server
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p, _ in procs:
            p.wait()
        raise
    finally:
        for _, log in procs:
            log.close()
    rc = max((abs(p.returncode) for p, _ in procs), default=0)
    return outcomes(jobs, manifest), rc


def run_job(overrides: list[str], sweep_dir: Path, manifest: str | None) -> str:
    """One sweep job; returns its status (ok, cached, failed)."""
    from topas.errors import one_line
    from topas.results import clear_outcome, is_complete
    from topas.runner import fingerprint_of, run
    from topas.sweep import compose_config, record_outcome

    try:
        cfg = compose_config(overrides)
        out = sweep_dir / str(cfg.run_subdir)
    except Exception as e:  # noqa: BLE001 - a job that cannot even compose: recorded, the others go on
        out = sweep_dir / "unplaced"
        log.error(f"failed: {' '.join(overrides)}: {one_line(e)}")
        record_outcome(manifest, overrides, out, "failed", one_line(e))
        return "failed"
    if is_complete(out, fingerprint_of(cfg)):
        log.info(f"complete, skipped: {out}")
        record_outcome(manifest, overrides, out, "cached")
        return "cached"
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "run.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        run(cfg, out_dir=out)
        if str(cfg.backend.name) != "sim":
            from topas.prediction import record_prediction

            record_prediction(cfg, out)
        record_outcome(manifest, overrides, out, "ok")
        return "ok"
    except Exception as e:  # noqa: BLE001 - a failed point is recorded and does not stop the worker
        clear_outcome(out)
        (out / "error.txt").write_text(f"{' '.join(overrides)}\n{traceback.format_exc()}")
        log.error(f"failed: {out}: {one_line(e)}")
        record_outcome(manifest, overrides, out, "failed", one_line(e))
        return "failed"
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def worker_main(argv: list[str] | None = None) -> int:
    import os

    import topas.config  # noqa: F401  (resolvers)
    from topas.process_guard import exit_with_parent

    exit_with_parent()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    spec = json.loads(Path((argv or sys.argv[1:])[0]).read_text())
    sweep_dir = Path(spec["sweep_dir"])
    jobs = spec["jobs"]
    log.info(f"worker on CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}: {len(jobs)} runs")
    try:
        for k, job in enumerate(jobs):
            log.info(f"[{k + 1}/{len(jobs)}] {' '.join(job)}")
            run_job(job, sweep_dir, spec.get("manifest"))
    finally:
        from topas.engines.sglang.client.shared_server import shutdown_shared_servers

        shutdown_shared_servers()
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main())


def place_experiments(plans: Mapping[str, Sequence[Sequence[str]]], gpus: Sequence[str], max_workers: int | None,
                      write: Callable[[str], None]) -> dict[str, list[Worker]]:
    """Every experiment's jobs (experiment folder -> jobs) placed on the GPU groups, each job with its estimated
    real time from the simulator (topas/prediction.py); prints the plan. Returns experiment folder -> workers."""
    from topas.config import ConfigError
    from topas.errors import one_line
    from topas.prediction import STARTUP_S, estimate_jobs
    from topas.sweep import compose_config

    profile = "gpu" if gpus else "cpu"
    placed, total_s = {}, 0.0
    for name, jobs in plans.items():
        per_run = int(compose_config(jobs[0]).backend.get("gpus_per_run", 1) or 1) if jobs else 1
        try:
            costs = estimate_jobs(jobs, profile)
            how = "simulator: FCFS makespan of each distinct trace"
        except ConfigError:
            raise  # e.g. a load without the model/GPU's capacity: every run would fail the same way
        except Exception as e:  # noqa: BLE001 - the plan still works, balanced by run count
            costs, how = [0.0] * len(jobs), f"no estimate ({one_line(e)})"
        workers = plan_placement(jobs, gpu_groups(gpus, per_run), costs, max_workers)
        for w in workers:  # one server start per distinct server on each worker
            w.est_s += STARTUP_S[profile] * len({server_signature(jobs[i]) for i in w.jobs})
        span = max((w.est_s for w in workers), default=0.0)
        total_s += span
        write(f"{name}: {len(jobs)} runs on {len(workers)} worker(s), "
              f"~{span / 3600:.2f} h ({how}; + {STARTUP_S[profile]:.0f} s per server start)")
        for line in describe(workers, jobs):
            write(line)
        placed[name] = workers
    write(f"estimated real time: ~{total_s / 3600:.2f} h ({total_s / 60:.0f} min), experiments one after another")
    return placed
