"""GPU check: a short real SGLang run against the simulator's prediction for the same trace.

    python -m topas.fidelity.gpu_check                  # on a GPU machine (pip install -e .[sglang])
    python -m topas.fidelity.gpu_check --device cpu     # dry run of the plumbing on CPU (tiny model)
    bash scripts/gpu_check.sh [args]                    # the same, with preflight checks and a hard timeout
    python -m topas.fidelity.gpu_check --fidelity       # the fidelity validation (topas.fidelity) on this GPU

A driver like the runner (it starts runs of both engines), so it lives with the fidelity
drivers, not inside the SGLang engine package.

Sized for a 10-minute window on one GPU: Qwen2.5-7B with dummy weights (config.json from
topas/engines/latency/models/), 16 DAG-4 tasks at 0.5 tasks/s, FCFS. Steps:
1. build the workload's trace once and write it to <out>/trace.jsonl (token counts scaled
   for the tiny CPU model in a dry run), so both engines replay exactly the same tasks;
2. real run: `backend=sglang` replaying that file (server start, warm-up, replay, stop);
3. simulator run: `backend=sim` on the same file, model and GPU, with the real server's
   KV pool (`--max-total-tokens` it chose) and max running requests;
4. prints mean JCT, per-iteration latency (prefill iteration, decode step), mean decode
   batch size, throughput and makespan of both, and the ratio real / sim; writes
   <out>/comparison.json. Exit status 0 when both runs finished (the ratio is reported,
   not judged), 2 on a usage/config error, 1 when a run failed.

`--fidelity` runs the simulator-fidelity validation instead (`topas.fidelity`, the
same as `make fidelity` on CPU) with the real model architecture (dummy weights): a latency
profile of a server like the runs' (`topas.engines.sglang.tools.profiler`, GPU grid), then dag4 with
FCFS and TOPAS on the real server and on the simulator configured like it, one repeat each,
a KV pool of `--max-total-tokens` (default 30000 in this mode: prefix-cache pressure, as the
paper's regime); table and figure under <out>/fidelity/. Sized for the 10-minute window: two
server starts (profile, runs), ~2 min of profiling, two replays of 16 tasks.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# nvidia-smi name fragment -> conf/gpu/<name>.yaml
GPU_NAMES = (("H200", "h200"), ("H100", "h100_80gb"), ("A100", "a100_80gb"))
METRICS = (
    ("jct_mean", "mean JCT, steady tasks (s)"),
    ("jct_mean_all", "mean JCT, all tasks (s)"),
    ("jct_p90", "p90 JCT (s)"),
    ("prefill_iteration_s", "prefill iteration (s)"),
    ("decode_step_s", "decode step (s)"),
    ("decode_batch_size", "mean decode batch size"),
    ("throughput_tasks_per_s", "throughput (tasks/s)"),
    ("makespan_s", "makespan (s)"),
    ("cache_hit_rate", "cache hit rate"),
)
ROOT = Path(__file__).resolve().parents[2]


class CheckError(RuntimeError):
    pass


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m topas.fidelity.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="cpu: dry run with the tiny model")
    ap.add_argument("--model", default=None, help="conf/model name (default: qwen2_5_7b; tiny_cpu with --device cpu)")
    ap.add_argument("--gpu", default="auto", help="conf/gpu name, or auto (from nvidia-smi; a100_80gb on cpu)")
    ap.add_argument("--workload", default="dag4")
    ap.add_argument("--num-tasks", type=int, default=16)
    ap.add_argument("--arrival-rate", type=float, default=0.5, help="tasks/s (Poisson)")
    ap.add_argument("--scheduler", default="fcfs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token-scale", type=float, default=None, help="scale the trace's token counts (cpu: automatic)")
    ap.add_argument("--latency", default="auto", help="simulator latency model (aiconfigurator | roofline | auto)")
    ap.add_argument("--timeout-s", type=float, default=240.0, help="limit of the real replay (s)")
    ap.add_argument("--startup-timeout-s", type=float, default=240.0, help="limit of the server start (s)")
    ap.add_argument("--out", default="runs/gpu_check", help="output folder")
    ap.add_argument("--max-total-tokens", type=int, default=None,
                    help="cap the server's KV pool (tokens), e.g. 22035 for the paper's Qwen2.5-32B/A100 regime")
    ap.add_argument("--extra-args", default="", help="more sglang server args, space-separated")
    ap.add_argument("--fidelity", action="store_true", help="run the fidelity validation (topas.fidelity) instead")
    ap.add_argument("--schedulers", default="fcfs,topas", help="with --fidelity: the policies compared")
    a = ap.parse_args(argv)
    if a.model is None:
        a.model = "tiny_cpu" if a.device == "cpu" else "qwen2_5_7b"
    if a.num_tasks < 1 or a.arrival_rate <= 0 or a.timeout_s <= 0:
        ap.error("--num-tasks, --arrival-rate and --timeout-s must be positive")
    return a


def detect_gpu() -> str:
    """conf/gpu name of the first GPU nvidia-smi lists."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CheckError(f"nvidia-smi failed ({e}); is this a GPU machine? (--device cpu for a dry run)") from None
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    return gpu_name(line)


def gpu_name(line: str) -> str:
    """conf/gpu name for an nvidia-smi line "NAME, MEMORY MiB" (80 GB class A100/H100, H200)."""
    name, _, mem = line.partition(",")
    try:
        mib = float(mem.strip().split()[0])
    except (ValueError, IndexError):
        mib = 0.0
    for frag, conf in GPU_NAMES:
        if frag in name and (conf == "h200" or mib >= 70 * 1024):
            return conf
    raise CheckError(f"no conf/gpu entry for '{line.strip()}': pass --gpu a100_80gb|h100_80gb|h200 (closest spec)")


def compose_cfg(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        return compose(config_name="config", overrides=["logger=none", "progress=false", *overrides])


def run_metrics(out: Path, summary: dict[str, Any]) -> dict[str, float]:
    import pandas as pd

    from topas.engines.sglang.client.records import per_iteration_latency

    tasks = pd.read_parquet(out / "tasks.parquet")
    lat = per_iteration_latency(pd.read_parquet(out / "timeline.parquet"))
    m = {k: summary.get(k) for k in ("jct_mean", "jct_p90", "throughput_tasks_per_s", "makespan_s", "cache_hit_rate")}
    m["jct_mean_all"] = float(tasks["jct"].mean())
    m.update(lat)
    return {k: (math.nan if v is None else float(v)) for k, v in m.items()}


def compare(real: dict[str, float], sim: dict[str, float]) -> list[dict[str, Any]]:
    rows = []
    for key, label in METRICS:
        r, s = real.get(key, math.nan), sim.get(key, math.nan)
        ok = r is not None and s is not None and not math.isnan(r) and not math.isnan(s) and s != 0
        rows.append({"metric": key, "label": label, "real": r, "sim": s, "ratio": r / s if ok else math.nan})
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    def f(x: float) -> str:
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"

    w = max(len(r["label"]) for r in rows)
    lines = [f"{'metric':<{w}}  {'real':>10}  {'sim':>10}  {'real/sim':>8}"]
    lines += [f"{r['label']:<{w}}  {f(r['real']):>10}  {f(r['sim']):>10}  "
              f"{('n/a' if math.isnan(r['ratio']) else format(r['ratio'], '.2f')):>8}  ({r['metric']})" for r in rows]
    return "\n".join(lines)


def _say(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fidelity_args(a: argparse.Namespace, gpu: str) -> list[str]:
    """`python -m topas.fidelity` arguments of the GPU check's fidelity mode."""
    out = Path(a.out).resolve() / "fidelity"
    args = ["--device", a.device, "--model", a.model, "--gpu", gpu, "--workloads", a.workload,
            "--schedulers", a.schedulers, "--repeats", "1", "--num-tasks", str(a.num_tasks), "--seed", str(a.seed),
            "--runs", str(out / "runs"), "--out", str(out)]
    pool = a.max_total_tokens or (30000 if a.device == "gpu" else None)
    if pool:
        args += ["--max-total-tokens", str(pool)]
    if a.extra_args.strip():
        args += ["--extra-args", a.extra_args]
    if a.device == "cpu":
        args += ["--profile-grid", "quick"]
    return args


def resolve_gpu(a: argparse.Namespace) -> str:
    """The conf/gpu name: --gpu, else the one nvidia-smi lists (a100_80gb in a CPU dry run)."""
    return a.gpu if a.gpu != "auto" else ("a100_80gb" if a.device == "cpu" else detect_gpu())


def run_fidelity(a: argparse.Namespace) -> int:
    """`--fidelity`: the fidelity validation (`python -m topas.fidelity`) on this device."""
    from topas.fidelity.__main__ import main as fidelity_main

    try:
        gpu = resolve_gpu(a)
    except CheckError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _say(f"fidelity validation on {a.device} ({a.model}, {gpu}): profile, then real and simulated replays")
    return fidelity_main(fidelity_args(a, gpu))


@dataclass
class CheckRuns:
    """The two runs of one check and what they replayed."""

    gpu: str
    token_scale: float
    trace: Any  # the replayed trace (scaled)
    real_dir: Path
    real_summary: dict[str, Any]
    sim_dir: Path
    sim_summary: dict[str, Any]
    sim_latency: str  # the simulator's latency model (roofline after a failed --latency)


def write_trace(a: argparse.Namespace, base: list[str], out: Path) -> tuple[Any, float, Path]:
    """Step 1: the workload's trace, built once (token counts scaled for the tiny CPU model in a
    dry run) -> <out>/trace.jsonl; returns (trace, token scale, its file)."""
    from topas.config import validate
    from topas.engines.latency.specs import load_model_spec
    from topas.engines.sglang.client.backend_config import CPU_DEFAULT_POOL, SGLangBackendConfig, resolve_token_scale
    from topas.workloads import build_trace, dump_trace
    from topas.workloads.scaling import scale_trace

    wcfg = compose_cfg([*base, f"workload={a.workload}", f"workload.num_tasks={a.num_tasks}",
                        f"workload.arrival_rate={a.arrival_rate}", "workload.load=null"])
    g = validate(wcfg)
    trace = build_trace(g["workload"], a.seed)
    model = load_model_spec(wcfg.model)
    scale = a.token_scale if a.token_scale is not None else (
        resolve_token_scale(SGLangBackendConfig(), trace, model, CPU_DEFAULT_POOL) if a.device == "cpu" else 1.0
    )
    trace = scale_trace(trace, scale)
    path = dump_trace(trace, out / "trace.jsonl")
    _say(f"{len(trace.tasks)} {a.workload} tasks at {a.arrival_rate:g}/s (token scale {scale:g}) -> {path}")
    return trace, scale, path


def real_run(a: argparse.Namespace, common: list[str], gpu: str, out: Path) -> tuple[Path, dict[str, Any]]:
    """Step 2: `backend=sglang` replaying the trace file -> <out>/real."""
    from topas.runner import run

    extra = [x for x in a.extra_args.split() if x]
    over = [*common, "backend=sglang", f"backend.profile={a.device}", "backend.token_scale=1.0",
            f"backend.max_total_tokens={a.max_total_tokens if a.max_total_tokens else 'null'}",
            f"backend.replay_timeout_s={a.timeout_s}", f"backend.startup_timeout_s={a.startup_timeout_s}",
            f"backend.latency={a.latency}"]
    if extra:
        over.append("backend.extra_args=[" + ",".join(json.dumps(x) for x in extra) + "]")
    _say(f"real run: sglang on {a.device} ({a.model}, {gpu}); server start can take minutes on a GPU")
    t = time.monotonic()
    real_dir, real_sum = run(compose_cfg(over), out_dir=out / "real", quiet=True)
    _say(f"real run done in {time.monotonic() - t:.0f} s (server start {real_sum.get('server_startup_s')} s, "
         f"KV pool {real_sum.get('kv_pool_tokens')} tokens, {real_sum.get('requests_served')} requests)")
    return real_dir, real_sum


def sim_run(a: argparse.Namespace, common: list[str], real_sum: dict[str, Any], out: Path) -> tuple[Path, dict[str, Any], str]:
    """Step 3: `backend=sim` on the same file with the real server's KV pool and max running
    requests -> <out>/sim; returns its folder, summary and latency model."""
    from topas.runner import run

    over = [*common, "backend=sim"]
    if real_sum.get("kv_pool_tokens"):
        over.append(f"backend.kv_pool_tokens={int(real_sum['kv_pool_tokens'])}")
    if real_sum.get("max_running_requests"):
        over.append(f"backend.max_running_requests={int(real_sum['max_running_requests'])}")
    try:
        sim_dir, sim_sum = run(compose_cfg([*over, f"backend.latency={a.latency}"]), out_dir=out / "sim", quiet=True)
        latency = a.latency
    except Exception as e:  # noqa: BLE001 - e.g. no aiconfigurator data for this GPU: retry with roofline
        if a.latency == "roofline":
            raise
        _say(f"simulator with latency={a.latency} failed ({str(e).splitlines()[0]}); retrying with roofline")
        sim_dir, sim_sum = run(compose_cfg([*over, "backend.latency=roofline"]), out_dir=out / "sim", quiet=True)
        latency = "roofline"
    _say("simulator done")
    return sim_dir, sim_sum, latency


def run_both(a: argparse.Namespace, out: Path) -> CheckRuns:
    """Steps 1-3: the trace once, then the real server and the simulator on it."""
    from topas.engines.sglang.client.server import check_sglang_importable

    check_sglang_importable(sys.executable)
    gpu = resolve_gpu(a)
    base = [f"model={a.model}", f"gpu={gpu}", f"seed={a.seed}"]
    trace, scale, path = write_trace(a, base, out)
    common = [*base, "workload=trace", f"workload.params.path={path}", f"scheduler={a.scheduler}"]
    real_dir, real_sum = real_run(a, common, gpu, out)
    sim_dir, sim_sum, latency = sim_run(a, common, real_sum, out)
    return CheckRuns(gpu, scale, trace, real_dir, real_sum, sim_dir, sim_sum, latency)


def report(a: argparse.Namespace, r: CheckRuns, out: Path) -> None:
    """Step 4: <out>/comparison.json and the printed table."""
    rows = compare(run_metrics(r.real_dir, r.real_summary), run_metrics(r.sim_dir, r.sim_summary))
    real_sum = r.real_summary
    result = {
        "device": a.device, "model": a.model, "gpu": r.gpu, "workload": a.workload, "num_tasks": a.num_tasks,
        "arrival_rate": a.arrival_rate, "scheduler": a.scheduler, "seed": a.seed, "token_scale": r.token_scale,
        "sglang_version": real_sum.get("sglang_version"), "server_startup_s": real_sum.get("server_startup_s"),
        "kv_pool_tokens": real_sum.get("kv_pool_tokens"), "max_running_requests": real_sum.get("max_running_requests"),
        "sim_latency": r.sim_latency, "rows": rows, "real_dir": str(r.real_dir), "sim_dir": str(r.sim_dir),
    }
    (out / "comparison.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nreal SGLang {result['sglang_version']} ({a.device}, {a.model}, {r.gpu}) vs simulator "
          f"(latency {result['sim_latency']}), {len(r.trace.tasks)} {a.workload} tasks, {a.scheduler}:")
    print(format_table(rows))
    print(f"-> {out / 'comparison.json'}")


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    if a.fidelity:
        return run_fidelity(a)
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from topas.config import ConfigError
    from topas.engines.sglang.client.server import SGLangNotInstalled

    out = Path(a.out).resolve()
    try:
        runs = run_both(a, out)
    except (ConfigError, SGLangNotInstalled, CheckError, HydraException, OmegaConfBaseException) as e:
        print(f"error: {' '.join(str(e).split())[:400]}", file=sys.stderr)
        return 2
    except ValueError as e:  # SGLangRunError, WorkflowError: one line
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1
    report(a, runs, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
