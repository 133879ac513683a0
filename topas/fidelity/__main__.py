"""`python -m topas.fidelity`: the real SGLang server vs the simulator on identical traces.

    python -m topas.fidelity                                  # CPU, tiny model: dag4 + metagpt_tl x fcfs, lpm, topas
    python -m topas.fidelity --profile p.json --repeats 3     # reuse a measured profile; more repeats (narrower CIs)
    python -m topas.fidelity --device gpu --model qwen2_5_7b --gpu h100_80gb   # a GPU (dummy weights)

Prints the differences between schedulers (real, with its CI, vs simulated) and the per-cell
errors, and writes analysis/results/fidelity/{fidelity.md, fidelity.json, fidelity_jct.png};
every run is a run folder under runs/fidelity/. Exit status 0 when all runs finished (the
errors are reported, not judged), 2 for a setup problem, 1 when a run failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from topas.fidelity.validate import CPU_WORKLOADS, GPU_WORKLOADS, ROOT, Setup


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m topas.fidelity", description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--model", default=None, help="conf/model name (cpu: tiny_cpu; gpu: qwen2_5_7b)")
    ap.add_argument("--gpu", default="a100_80gb", help="conf/gpu name (the simulator's host link only)")
    ap.add_argument("--workloads", default="dag4,metagpt_tl", help="comma-separated: " + ", ".join(CPU_WORKLOADS))
    ap.add_argument("--schedulers", default="fcfs,lpm,topas")
    ap.add_argument("--repeats", type=int, default=3, help="real runs per (workload, policy): the noise floor and the CI of the differences")
    ap.add_argument("--num-tasks", type=int, default=None, help="tasks per workload (default: the preset's)")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="x the presets' arrival rates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default=None, help="a latency profile file (default: measure one)")
    ap.add_argument("--profile-grid", default=None, help="profile grid: cpu | gpu | quick (default: the device's)")
    ap.add_argument("--max-total-tokens", type=int, default=None, help="the server's KV pool (cpu default 4096)")
    ap.add_argument("--extra-args", default="", help="more sglang server args, space-separated")
    ap.add_argument("--runs", default=str(ROOT / "runs" / "fidelity"), help="run folders")
    ap.add_argument("--reuse-real", action="store_true",
                    help="keep the real runs (and profile.json) already complete under --runs; redo the simulator")
    ap.add_argument("--out", default=str(ROOT / "analysis" / "results" / "fidelity"), help="table, JSON, figure")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    from topas.config import ConfigError
    from topas.engines.sglang.client.server import SGLangNotInstalled, check_sglang_importable
    from topas.fidelity.report import differences_table, main_table, repeats_line, write_report
    from topas.fidelity.validate import validate_all

    presets = CPU_WORKLOADS if a.device == "cpu" else GPU_WORKLOADS
    names = [w for w in a.workloads.split(",") if w]
    unknown = [w for w in names if w not in presets]
    if unknown:
        print(f"error: no {a.device} preset for workload(s) {', '.join(unknown)}; known: {', '.join(presets)}",
              file=sys.stderr)
        return 2
    specs = [replace(presets[w], num_tasks=a.num_tasks or presets[w].num_tasks,
                     arrival_rate=presets[w].arrival_rate * a.rate_scale) for w in names]
    say = lambda m: print(f"[fidelity {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    s = Setup(device=a.device, model=a.model or ("tiny_cpu" if a.device == "cpu" else "qwen2_5_7b"), gpu=a.gpu,
              workloads=specs, schedulers=[x for x in a.schedulers.split(",") if x], repeats=a.repeats, seed=a.seed,
              profile=a.profile, profile_grid=a.profile_grid, max_total_tokens=a.max_total_tokens,
              extra_args=[x for x in a.extra_args.split() if x], runs=Path(a.runs), reuse_real=a.reuse_real, say=say)
    try:
        check_sglang_importable(sys.executable)
        result = validate_all(s)
    except (ConfigError, SGLangNotInstalled) as e:
        print(f"error: {' '.join(str(e).split())[:400]}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError, OSError) as e:  # SGLangRunError, ProfileError, server start
        print(f"error: {' '.join(str(e).split())[:400]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1
    files = write_report(result, Path(a.out))
    print()
    print(differences_table(result))
    print(f"\n{repeats_line(result)}\n")
    print(main_table(result))
    print(f"\n-> {files['md']} ({result['settings']['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
