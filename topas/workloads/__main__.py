"""python -m topas.workloads <workload> [--seed N] [--num-tasks N] [--png out.png] [--export t.jsonl] [key=value ...]
   python -m topas.workloads shapes --list N [--sample design|evaluation] [--start K]

Prints a workload's template and one task's DAG, the agents' prefix sizes, the mean tokens per
task, the KV-budget arithmetic and the offered load as a fraction of the measured capacity, and
saves a picture of one task's DAG. <workload> is a name under conf/workload/ or a YAML path;
key=value pairs override the workload config (e.g. params.qa=true, params.path=my.jsonl,
params.shape=e7). `--export` writes the sampled trace as a trace file (replay it with
`workload=trace`). `shapes --list N` describes N shapes of the family (one line each, with their
measured capacity) and draws one task of each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf

import topas.run_identity  # noqa: F401  (registers the resolvers a workload config uses: rate_unless_load)
from topas.workloads import build_trace, dump_trace
from topas.workloads.capacity import CAPACITY_FILE, SHAPES_CAPACITY_FILE, capacity_of, load_capacity
from topas.workloads.config import WorkloadConfig
from topas.workloads.describe import budget_text, dag_text, draw_dag, template_text, token_stats

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "workload"


def _load(workload: str, overrides: list[str]):
    path = Path(workload)
    if not path.suffix:
        path = CONF_DIR / f"{workload}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in CONF_DIR.glob("*.yaml")) if CONF_DIR.exists() else []
        raise SystemExit(f"error: no workload config {path} (known: {', '.join(known) or 'none'})")
    cfg = OmegaConf.load(path)
    if overrides:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m topas.workloads", description=__doc__.split("\n\n")[1])
    ap.add_argument("workload", help="name under conf/workload/ (chain3, dag4, ...) or a YAML file")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the workload config")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-tasks", type=int, default=None, help="tasks to sample (default: the config's)")
    ap.add_argument("--png", default=None, help="DAG picture path (default runs/workloads/<name>_task0.png)")
    ap.add_argument("--export", default=None, help="also write the sampled trace to this JSONL trace file")
    ap.add_argument("--list", type=int, default=None, metavar="N", help="shapes only: describe and draw N shapes")
    ap.add_argument("--sample", default="design", help="shapes --list: design (default) or evaluation")
    ap.add_argument("--start", type=int, default=0, help="shapes --list: index of the first shape")
    args = ap.parse_args(argv)
    if args.list is not None:
        return _list_shapes(args.list, args.sample, args.start, Path(args.png or "runs/workloads"))

    cfg = _load(args.workload, args.overrides)
    if args.num_tasks is not None:
        cfg.num_tasks = args.num_tasks
    try:
        wc = WorkloadConfig.parse(cfg)
        cap = capacity_of(wc.name)
        rate, note = wc.arrival_rate, ""
        if rate is None and wc.load is not None and cap is not None:
            rate, note = wc.load * cap, f" (= load {wc.load:g} x capacity {cap:g})"
        elif rate is None and wc.generator != "trace":
            rate, note = 1.0, " (unresolved: arrival_rate null and no measured capacity; 1.0 used to sample)"
        wc = WorkloadConfig(wc.name, wc.generator, rate, wc.load, wc.num_tasks, wc.warmup_fraction, wc.params)
        trace = build_trace(wc, args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    _describe(wc, trace, args.seed, rate, note, cap)
    png = Path(args.png) if args.png else Path("runs") / "workloads" / f"{wc.name}_task0.png"
    print(f"DAG picture of task 0: {draw_dag(trace.tasks[0], png)}")
    if args.export:
        print(f"trace file: {dump_trace(trace, args.export)} (replay: workload=trace workload.params.path=...)")
    return 0


def _describe(wc: WorkloadConfig, trace, seed: int, rate: float | None, note: str, cap: float | None) -> None:
    """The workload in text: its templates, one task's DAG, prefixes, tokens per task, the KV budget and load."""
    print(f"workload {wc.name} (generator {wc.generator}), seed {seed}, {len(trace.tasks)} tasks, "
          f"arrival rate {rate if rate is not None else 'from file'} task/s{note}, warm-up {wc.warmup_fraction:g}")
    print()
    print("\n".join(template_text(trace)))
    print()
    print("\n".join(dag_text(trace.tasks[0])))
    print()
    agents = sorted(trace.agents.values(), key=lambda a: -a.prefix_tokens)
    print("agent prefixes (tokens): " + ", ".join(f"{a.name} {a.prefix_tokens:,}" for a in agents)
          + f"; total {sum(a.prefix_tokens for a in agents):,}")
    s = token_stats(trace)
    print(f"per task (mean over {len(trace.tasks)} tasks): {s.calls:.1f} calls, prompt tokens {s.prompt:,.0f} "
          f"(prefix {s.prefix:,.0f} + history {s.history:,.0f} + fresh {s.fresh:,.0f}), output tokens {s.output:,.0f}")
    print("\n".join(budget_text(trace)))
    table = load_capacity()
    if table is None:
        print(f"offered load: capacity not measured yet ({CAPACITY_FILE} missing)")
    elif cap is None:
        print(f"offered load: no capacity for '{wc.name}' in {CAPACITY_FILE}")
    else:
        e = table.get(wc.name) or (load_capacity(SHAPES_CAPACITY_FILE) or {}).get(wc.name, {})  # a shape: its own table
        if rate is None:
            arr = sorted(t.arrival for t in trace.tasks)
            rate = (len(arr) - 1) / (arr[-1] - arr[0]) if len(arr) > 1 and arr[-1] > arr[0] else float("nan")
        print(f"offered load: {rate:.4g} task/s = {rate / cap:.2f} x capacity {cap:g} task/s "
              f"({e.get('model', '?')} on {e.get('gpu', '?')})")



def _list_shapes(n: int, sample: str, start: int, folder: Path) -> int:
    """One line per shape of the family (id, structure, description, capacity) and a picture of one task each."""
    from topas.workloads.shapes import sample_ids, shape_spec, workload_name

    try:
        ids = sample_ids(sample, n, start)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for sid in ids:
        name = workload_name(sid)
        cap = capacity_of(name)
        trace = build_trace(WorkloadConfig(name, "shapes", 1.0, None, 1, 0.0, {"shape": sid}), 0)
        png = draw_dag(trace.tasks[0], folder / f"{name}.png", title=f"{sid}: {shape_spec(sid).description()}")
        print(f"{sid:>5}  {shape_spec(sid).description()}  | capacity "
              f"{f'{cap:.4g} task/s' if cap else 'not measured'} | {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
