"""Simulator speed benchmark (prints figures; not a test).

    python -m topas.bench                               # 1,000 DAG-4 tasks at half capacity, FCFS
    python -m topas.bench workload=metagpt_tl scheduler=lpm workload.num_tasks=300
    python -m topas.bench workload=metagpt_sop scheduler=topas workload.arrival_rate=0.15 \
        workload.load=null workload.num_tasks=150 --profile 30   # where a decision's time goes

Reports simulated seconds per wall second, engine iterations per second, and the time of a
cached latency prediction against its goal (speed goals live here, not in timed tests).
Overrides are Hydra overrides of conf/config.yaml. `--profile [N]` profiles the policy's
decisions (only its `schedule` calls, with cProfile) and prints the N functions (default 25) with
the most cumulative time in them: the shares of a decision's steps, as the next step of the
decision-cost work needs them (the profiler slows every call, so the decision times printed
above it are inflated; `topas.bench_compare` measures those).
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from unittest import mock

from hydra import compose, initialize_config_dir

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
CACHED_PREDICTION_GOAL_S = 20e-6  # the simulator's hot path asks the latency model every iteration
DEFAULTS = ["workload=dag4", "workload.num_tasks=1000", "workload.load=0.5", "workload.arrival_rate=null",
            "scheduler=fcfs", "logger=none", "progress=false"]


def cached_prediction_s(cfg, n: int = 20000) -> float:
    """Mean seconds of one memoised prediction (decode step and prefill) of the run's latency model."""
    from topas.engines.latency.factory import build_latency_model
    from topas.engines.latency.specs import load_gpu_spec, load_model_spec

    lat = build_latency_model(cfg.backend.latency, load_model_spec(cfg.model), load_gpu_spec(cfg.gpu))
    lat.decode(17, 5000)
    lat.prefill([(300, 1200), (50, 0)])
    t0 = time.perf_counter()
    for _ in range(n):
        lat.decode(17, 5000)
        lat.prefill([(300, 1200), (50, 0)])
    return (time.perf_counter() - t0) / (2 * n)


def profile_arg(argv: list[str]) -> tuple[list[str], int | None]:
    """(the Hydra overrides, the number of functions `--profile [N]` asks for; None without it)."""
    if "--profile" not in argv:
        return argv, None
    i = argv.index("--profile")
    if i + 1 < len(argv) and argv[i + 1].isdigit():
        return argv[:i] + argv[i + 2:], int(argv[i + 1])
    return argv[:i] + argv[i + 1:], 25


@contextmanager
def decisions_profiled(profile: cProfile.Profile) -> Iterator[None]:
    """Inside it, a run records in `profile` its policy's `schedule` calls only (the engine's time left out). The
    policy is wrapped where the runner makes it, as topas.decision_trace does, so its decisions are unchanged."""
    from topas.policy import create_policy

    def make(name, params=None):
        policy = create_policy(name, params)
        inner = policy.schedule

        def schedule(view):
            profile.enable()
            try:
                return inner(view)
            finally:
                profile.disable()

        policy.schedule = schedule
        return policy

    with mock.patch("topas.runner.create_policy", make):
        yield


def main(argv: list[str]) -> None:
    from topas.runner import run

    argv, top = profile_arg(argv)
    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        cfg = compose(config_name="config", overrides=DEFAULTS + argv)
    profile = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp, decisions_profiled(profile) if top else nullcontext():
        _, s = run(cfg, out_dir=tmp, quiet=True)
    print(f"workload {s['workload']}, scheduler {s['scheduler']}, {s['num_tasks']} tasks at {s['arrival_rate']:.4g} tasks/s")
    print(f"simulated time        {s['makespan_s']:.1f} s")
    print(f"wall time             {s['wall_s']:.2f} s (engine loop only)")
    print(f"speed                 {s['sim_speedup']:.0f}x real time")
    print(f"engine iterations     {s['iterations']} ({s['iterations'] / s['wall_s']:.0f} iterations/s, "
          f"{s['decode_steps']} decode steps, {s['prefill_iterations']} prefill)")
    print(f"policy decisions      {s['decisions']} ({s['decision_ms_mean']:.3f} ms mean, {s['decision_ms_p99']:.3f} ms p99)"
          + (" under the profiler" if top else ""))
    if top:
        print(f"\nthe policy's decisions, the {top} functions with the most cumulative time (cProfile):")
        pstats.Stats(profile, stream=sys.stdout).strip_dirs().sort_stats("cumulative").print_stats(top)
        return
    if cfg.backend.latency == "profile":  # a measured file: nothing to compute, nothing to cache
        return
    per = cached_prediction_s(cfg)
    verdict = "meets" if per < CACHED_PREDICTION_GOAL_S else "MISSES"
    print(f"cached prediction     {per * 1e6:.1f} us per call ({verdict} the goal of {CACHED_PREDICTION_GOAL_S * 1e6:.0f} us)")


if __name__ == "__main__":
    main(sys.argv[1:])
