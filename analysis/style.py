"""One look for every figure: a fixed colour and marker per scheduler, readable names, and the
caption line (model, GPU, load, seeds, tasks).

Colours follow the named scheduler sets (topas/scheduler_sets.py) in a stable order: the `paper` set
in the paper's order, then every other scheduler of the project sorted. A scheduler therefore keeps its
colour in every figure, whatever subset it shows, and a new scheduler gets its slot without an edit here.
No policy is imported: the sets are names.
"""

from __future__ import annotations

from functools import lru_cache

import pandas as pd
import seaborn as sns

from topas.scheduler_sets import every_scheduler, scheduler_set

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "d", "H", "8"]
PAPER_COLOR = "black"  # the paper's published values, in every figure
CI_NOTE = "error bars: 95% Student-t CI over seeds"

SCHEDULER_LABELS = {
    "fcfs": "FCFS", "lpm": "LPM", "parrot_fcfs": "Parrot (FCFS)", "autellix_las": "Autellix (LAS)", "spf": "SPF",
    "topas": "TOPAS", "kvflow": "KVFlow", "dfs_weight": "DFS-weight", "continuum_ttl": "Continuum (TTL)",
    "phase_batch": "phase batching", "phase_batch_nolimit": "phase batching (no limit)", "topas_base": "TOPAS-base",
    "topas_no_aging": "TOPAS w/o aging", "topas_no_reuse": "TOPAS w/o reuse",
    "topas_no_context": "TOPAS w/o context",
    "topas_no_remaining_work": "TOPAS w/o remaining work",
}
WORKLOAD_LABELS = {
    "chain3": "Chain-3", "dag4": "DAG-4", "dag10_wide": "DAG-10 (wide)", "metagpt_sop": "MetaGPT-SOP",
    "metagpt_tl": "MetaGPT-TL", "motivation_alternating": "alternating", "motivation_grouped": "grouped",
    "two_agents": "two agents",
}
METRIC_LABELS = {
    "jct_mean": "mean JCT", "jct_p50": "median JCT", "jct_p90": "p90 JCT", "jct_p99": "p99 JCT", "jct_max": "max JCT",
    "decision_ms_mean": "mean decision time", "decision_ms_p99": "p99 decision time",
    "decision_overhead_fraction": "decision overhead (share of run time)", "mean_batch_size": "mean decode batch",
    "makespan_s": "makespan", "throughput_requests_per_s": "request throughput",
    "batch ratio alternating/grouped": "batch ratio alternating / grouped",
}
MODEL_LABELS = {"qwen2_5_32b": "Qwen2.5-32B", "qwen2_5_14b": "Qwen2.5-14B", "qwen2_5_7b": "Qwen2.5-7B",
                "llama3_1_8b": "Llama-3.1-8B", "tiny_cpu": "tiny CPU model"}
GPU_LABELS = {"a100_80gb": "A100-80GB", "h100_80gb": "H100-80GB", "h200": "H200", "cpu": "CPU (no GPU)"}


@lru_cache(maxsize=1)
def scheduler_order() -> tuple[str, ...]:
    """Every scheduler: the paper's set first (in its order), then the rest sorted."""
    first = list(scheduler_set("paper"))
    return tuple(first + sorted(set(every_scheduler()) - set(first)))


def _index(name: str) -> int:
    order = scheduler_order()
    # an unknown name (a run of removed code) still gets a stable slot after the known ones
    return order.index(name) if name in order else len(order) + sum(map(ord, name)) % 8


@lru_cache(maxsize=1)
def _colors() -> list:
    return sns.color_palette("tab10") + sns.color_palette("Dark2") + sns.color_palette("Set1")


def color(name: str):
    c = _colors()
    return c[_index(name) % len(c)]


def marker(name: str) -> str:
    return MARKERS[_index(name) % len(MARKERS)]


def palette(names=None) -> dict:
    """scheduler -> colour, for seaborn's `palette=` (every registered scheduler by default)."""
    return {s: color(s) for s in (names if names is not None else scheduler_order())}


def ordered(names) -> list[str]:
    """The given schedulers in the fixed order."""
    return sorted(set(names), key=lambda s: (_index(s), s))


def line_kw(name: str) -> dict:
    """Colour, marker and weight of a scheduler's line; TOPAS is drawn on top, slightly thicker."""
    main = name == "topas"
    return {"color": color(name), "marker": marker(name), "lw": 2.2 if main else 1.3, "zorder": 4 if main else 3,
            "label": label(name)}


def label(name: str) -> str:
    return SCHEDULER_LABELS.get(name, name)


def workload_label(name: str) -> str:
    return WORKLOAD_LABELS.get(name, name)


def metric_label(name: str) -> str:
    return METRIC_LABELS.get(name, name.replace("_", " "))


def _span(values, fmt) -> str:
    v = sorted({x for x in values if x is not None and x == x})
    if not v:
        return ""
    return fmt(v[0]) if len(v) == 1 else f"{fmt(v[0])}-{fmt(v[-1])}"


CELL_KEYS = ("experiment", "workload", "scheduler", "load", "arrival_rate", "kv_pool_tokens", "host_cache_ratio",
             "mem_fraction_static", "num_tasks")


def _seeds_per_cell(df: pd.DataFrame) -> str:
    """'n=3', or 'n=6-10 per cell' where cells (a workload, scheduler, load, pool, ...) have different seed counts."""
    keys = [k for k in CELL_KEYS if k in df]
    n = df.groupby(keys, dropna=False).size() if keys else pd.Series([len(df)])
    return f"n={n.min()}" if n.min() == n.max() else f"n={n.min()}-{n.max()} per cell"


def caption(df: pd.DataFrame, extra: str = "") -> str:
    """One line naming what a figure was made from: model, GPU, load, seeds, tasks, backend."""
    if df.empty:
        return extra
    parts = [", ".join(MODEL_LABELS.get(m, m) for m in sorted(set(df["model"].dropna()))) if "model" in df else "",
             ", ".join(GPU_LABELS.get(g, g) for g in sorted(set(df["gpu"].dropna()))) if "gpu" in df else ""]
    by_load = df["load"].notna() if "load" in df else pd.Series(False, index=df.index)
    if by_load.any():
        parts.append(f"load {_span(df.loc[by_load, 'load'], lambda x: f'{x:g}')} x capacity")
    if "arrival_rate" in df and (~by_load).any():  # runs at a fixed rate (ablation, overhead, motivation)
        parts.append(f"{_span(df.loc[~by_load, 'arrival_rate'], lambda x: f'{x:.3g}')} tasks/s")
    seeds = sorted(set(int(s) for s in df["seed"]))
    parts.append(f"seeds {_span(seeds, str)} ({_seeds_per_cell(df)})")
    if "num_tasks" in df:
        parts.append(f"{_span(df['num_tasks'], lambda x: f'{int(x)}')} tasks per run")
    if "backend" in df:
        parts.append({"sim": "simulator"}.get(df["backend"].iloc[0], str(df["backend"].iloc[0])) + " backend")
    return " | ".join([p for p in parts if p] + ([extra] if extra else []))
