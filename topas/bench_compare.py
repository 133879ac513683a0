"""Decision overhead of this checkout against another commit, measured alternately (prints figures).

    python -m topas.bench_compare 0e5a861 --rounds 4        # TOPAS on the SOP decision bench (the default)
    python -m topas.bench_compare 0e5a861 workload=dag4 scheduler=topas workload.load=1.1

Without overrides it runs the decision-cost bench of docs/decisions/0009 (TOPAS on MetaGPT-SOP at 0.15 task/s,
150 tasks; `DECISION_BENCH`); `topas.bench`'s own default is a policy-free FCFS run, whose decisions cost nothing.

A shared or throttled machine changes speed by tens of percent within minutes, so two numbers taken
apart do not compare; runs of the two codes taken in turn do. The other commit is checked out in a
temporary git worktree and run with this interpreter (`python -m topas.bench` with the same Hydra
overrides); the ratio of the mean decision times is what carries over to another machine.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DECISION_BENCH = ["workload=metagpt_sop", "scheduler=topas", "workload.arrival_rate=0.15", "workload.load=null",
                  "workload.num_tasks=150"]
_DECISIONS = re.compile(r"policy decisions\s+(\d+) \(([\d.]+) ms mean, ([\d.]+) ms p99\)")


def parse_bench(text: str) -> tuple[int, float, float]:
    """(decisions, mean ms, p99 ms) from `topas.bench`'s output."""
    m = _DECISIONS.search(text)
    if m is None:
        raise ValueError("no 'policy decisions' line in the benchmark's output (a policy-free run?)")
    return int(m.group(1)), float(m.group(2)), float(m.group(3))


def bench_overrides(given: list[str]) -> list[str]:
    """The Hydra overrides to bench with: those given, else the decision-cost bench."""
    return list(given) or list(DECISION_BENCH)


def bench_once(checkout: Path, overrides: list[str]) -> tuple[int, float, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}  # that checkout's topas, not an installed one
    out = subprocess.run([sys.executable, "-m", "topas.bench", *overrides], cwd=checkout, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"topas.bench failed in {checkout}: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return parse_bench(out.stdout)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref", help="the commit to compare against (any git revision)")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds (each runs both codes once)")
    args, overrides = ap.parse_known_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, got {args.rounds}")
    overrides = bench_overrides(overrides)
    print("bench: python -m topas.bench " + " ".join(overrides), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), args.ref], check=True,
                       capture_output=True)
        try:
            runs: dict[str, list[tuple[int, float, float]]] = {"this": [], args.ref: []}
            for i in range(args.rounds):
                for name, where in ((args.ref, other), ("this", ROOT)):
                    runs[name].append(bench_once(where, overrides))
                    n, mean, p99 = runs[name][-1]
                    print(f"round {i + 1}  {name:>12}: {n} decisions, {mean:.3f} ms mean, {p99:.3f} ms p99", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], capture_output=True)
    avg = {k: (statistics.fmean(r[1] for r in v), statistics.fmean(r[2] for r in v)) for k, v in runs.items()}
    for k, (mean, p99) in avg.items():
        print(f"{k:>12}: {mean:.3f} ms mean, {p99:.3f} ms p99 (average of {args.rounds} runs)")
    print(f"this / {args.ref}: {avg['this'][0] / avg[args.ref][0]:.3f} (mean), {avg['this'][1] / avg[args.ref][1]:.3f} (p99)")


if __name__ == "__main__":
    main(sys.argv[1:])
