"""One run: config -> trace, policy, engine -> tables, summary, run folder, logger.

Engine-specific construction lives with each engine (registered in `topas.config.BACKENDS`:
schema, run function, pre-run check); everything after the engine (tables, summary, atomic
writes, W&B) is shared.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from topas.config import ConfigError, SchedulerConfig, backend_part, validate
from topas.engines.latency.base import GpuSpec, ModelSpec
from topas.engines.latency.specs import load_gpu_spec, load_model_spec
from topas.policy import Policy, create_policy
from topas.results import RunRecord, format_summary, summarize, write_run
from topas.workflow import Trace

log = logging.getLogger("topas")


@dataclass
class RunContext:
    """Everything a backend needs for one run."""

    backend: Any  # the validated backend config (SimBackendConfig, the SGLang backend's schema, ...)
    model: ModelSpec
    gpu: GpuSpec
    scheduler: SchedulerConfig  # name + params (a real server builds its own policy from them)
    policy: Policy  # the policy instance, for in-process engines
    trace: Trace
    warmup_fraction: float
    out_dir: Path  # run folder (backends may keep logs there)
    progress: Callable[[int], None] | None = None  # told of each finished task


def backend_runner(name: str) -> Callable[[RunContext], tuple[RunRecord, float]]:
    """The run function `name` registers (topas.config.BACKENDS), imported now."""
    return backend_part(name, "run")


def arrival_rate_for(w, model: ModelSpec, gpu: GpuSpec) -> float | None:
    """`arrival_rate`, or `load` x the capacity measured for this model/GPU (None: a trace's own times)."""
    from topas.workloads import capacity_of, resolve_arrival_rate

    if w.arrival_rate is None and w.load is not None and capacity_of(w.name, model.name, gpu.name) is None:
        raise ConfigError(
            f"workload.load={w.load} needs the capacity of '{w.name}' on {model.name}/{gpu.name}, which is not "
            f"measured: run `make capacity ARGS=\"model={model.name} gpu={gpu.name}\"` or set workload.arrival_rate"
        )
    try:
        return resolve_arrival_rate(w, capacity_of(w.name, model.name, gpu.name))
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None


def fingerprint_of(cfg: DictConfig) -> str:
    """The run's code + config fingerprint (a sweep re-runs a folder whose fingerprint differs)."""
    from topas.fingerprint import run_fingerprint

    return run_fingerprint(_plain_config(cfg))


def _plain_config(cfg: DictConfig) -> dict[str, Any]:
    return {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k != "hydra"}


@dataclass
class RunPlan:
    """A run, fully validated before anything executes."""

    groups: dict[str, Any]  # validated group objects (topas.config.validate)
    model: ModelSpec
    gpu: GpuSpec
    policy: Policy
    arrival_rate: float | None
    trace: Trace


def prepare(cfg: DictConfig) -> RunPlan:
    """Validate everything a run needs and build its trace; raises a one-line ValueError."""
    groups = validate(cfg)
    try:
        model = load_model_spec(cfg.model)
        gpu = load_gpu_spec(cfg.gpu)
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    sched = groups["scheduler"]
    policy = create_policy(sched.name, sched.params)
    w = groups["workload"]
    rate = arrival_rate_for(w, model, gpu)
    from dataclasses import replace

    from topas.workloads import build_trace

    trace = build_trace(replace(w, arrival_rate=rate), int(cfg.seed))
    plan = RunPlan(groups, model, gpu, policy, rate, trace)
    check = backend_part(groups["backend"].name, "check")
    if check is not None:
        check(plan)
    return plan


def output_path(value: Any, key: str = "hydra.run.dir") -> Path:
    """A configured output folder as a path; an empty one (it would be the working folder) is an error."""
    if value is None or not str(value).strip():
        raise ConfigError(f"{key} is empty: give the run's folder (an empty one would be the working folder)")
    return Path(str(value))


def check_output_dir(out: Path) -> None:
    """The run folder can be created and written (checked before a run, not after it)."""
    p = out
    while not p.exists() and p != p.parent:
        p = p.parent
    if out.exists() and not out.is_dir() or not p.is_dir():
        raise ConfigError(f"output folder {out}: {p} is a file, not a folder")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"output folder {out}: {p} is not writable")


class RunFolderBusy(ConfigError):
    """Another run holds the run folder's lock."""


_LOCKS: dict[Path, list[int]] = {}  # run folder -> [lock file descriptor, depth] held by this process
LOCK_FILE = ".lock"


@contextmanager
def run_lock(out: Path, wait: bool = False) -> Iterator[None]:
    """Hold the run folder's lock (`.lock` in it) while a run writes there, creating the folder (only
    now, after validation). A second run into a held folder stops with a one-line RunFolderBusy, or
    with `wait` (a sweep job) waits for the first: two runs never write over each other. Re-entrant
    within a process (run.py takes it before Hydra writes into the folder, `run` again)."""
    import fcntl

    check_output_dir(out)
    key = out.resolve()
    if key in _LOCKS:
        _LOCKS[key][1] += 1
    else:
        try:
            out.mkdir(parents=True, exist_ok=True)
            fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise ConfigError(f"output folder {out}: cannot create it ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            if not wait:
                os.close(fd)
                raise RunFolderBusy(f"output folder {out} is in use by another run (pid {holder}); wait for it to "
                                    "end or give this run another folder (hydra.run.dir=...)") from None
            log.info(f"waiting for {out}: in use by another run (pid {holder})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _LOCKS[key] = [fd, 1]
    try:
        yield
    finally:
        _LOCKS[key][1] -= 1
        if _LOCKS[key][1] == 0:
            os.close(_LOCKS.pop(key)[0])  # closing the descriptor releases the lock


def run(cfg: DictConfig, out_dir: str | Path | None = None, quiet: bool = False) -> tuple[Path, dict[str, Any]]:
    """Execute one configured run and write its folder (under its lock). Returns (folder, summary)."""
    plan = prepare(cfg)
    out = output_path(out_dir, "out_dir") if out_dir is not None else output_path(cfg.out_dir, "out_dir")
    with run_lock(out):
        return _run(cfg, plan, out, quiet)


def _run(cfg: DictConfig, plan: RunPlan, out: Path, quiet: bool) -> tuple[Path, dict[str, Any]]:
    from topas.results import clear_outcome

    clear_outcome(out)  # a rerun is incomplete (and not failed) until it ends
    sched, w = plan.groups["scheduler"], plan.groups["workload"]
    bar = tqdm(total=len(plan.trace.tasks), desc=f"{sched.name}/{w.name}", unit="task", leave=False,
               disable=True if quiet or not cfg.progress else None)  # None: only on a terminal
    ctx = RunContext(plan.groups["backend"], plan.model, plan.gpu, sched, plan.policy, plan.trace, w.warmup_fraction,
                     out, bar.update)
    try:
        record, wall = backend_runner(plan.groups["backend"].name)(ctx)
    finally:
        bar.close()
    from topas.bound import add_bounds

    record = add_bounds(record, plan.groups["backend"], plan.model, plan.gpu, plan.trace)  # after the run: changes no simulated number
    summary = summarize(record, wall)
    summary.update(
        scheduler=sched.name,
        workload=w.name,
        arrival_rate=plan.arrival_rate,
        load=w.load,
        seed=int(cfg.seed),
        model=plan.model.name,
        # a real server on the CPU profile ran on no GPU: the GPU config only sized its loads
        gpu="cpu" if record.engine.get("profile") == "cpu" else plan.gpu.name,
    )
    summary["fingerprint"] = fingerprint_of(cfg)
    summary = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in summary.items()}
    write_run(out, record, summary, OmegaConf.to_yaml(_plain_config(cfg)))
    if plan.groups["logger"].kind == "wandb":
        from topas.wandb_logger import log_run

        log_run(plan.groups["logger"], _plain_config(cfg), summary, record, out)
    if not quiet:
        rate_txt = f"{plan.arrival_rate:.4g} tasks/s" if plan.arrival_rate is not None else "trace arrival times"
        log.info(f"{sched.name} on {w.name} ({rate_txt}, seed {int(cfg.seed)}) -> {out}")
        log.info(format_summary(summary))
    return out, summary
