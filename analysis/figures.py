"""Seaborn figures regenerated from run outputs. Each function takes the runs table (and run
folders for per-task / timeline data) and returns the saved path, or None without data."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from analysis.load import load_tasks, load_timeline  # noqa: E402
from analysis.tables import WORKLOAD_ORDER  # noqa: E402

sns.set_theme(style="whitegrid", context="paper")
PAPER_SET = ["fcfs", "lpm", "parrot_fcfs", "autellix_las", "spf", "topas"]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _workloads(df: pd.DataFrame) -> list[str]:
    present = set(df["workload"])
    return [w for w in WORKLOAD_ORDER if w in present] + sorted(present - set(WORKLOAD_ORDER))


def jct_cdf(df: pd.DataFrame, out: Path, seed: int = 0) -> Path | None:
    runs = df[(df["seed"] == seed) & df["scheduler"].isin(PAPER_SET)]
    if runs.empty:
        return None
    rows = []
    for r in runs.itertuples():
        t = load_tasks(r.run_dir)
        t = t[~t["warmup"]]
        rows.append(pd.DataFrame({"workload": r.workload, "scheduler": r.scheduler, "JCT (s)": t["jct"]}))
    data = pd.concat(rows)
    ws = _workloads(data)
    fig, axes = plt.subplots(1, len(ws), figsize=(3.2 * len(ws), 3.0), squeeze=False)
    for ax, w in zip(axes[0], ws):
        sns.ecdfplot(data[data["workload"] == w], x="JCT (s)", hue="scheduler", ax=ax, hue_order=PAPER_SET, legend=ax is axes[0][-1])
        ax.set_title(w)
    return _save(fig, out / "jct_cdf.png")


def _lines_by_workload(df: pd.DataFrame, x: str, xlabel: str, path: Path) -> Path:
    """One panel per workload: mean JCT against `x`, a line per scheduler with a 95% CI band."""
    ws = _workloads(df)
    fig, axes = plt.subplots(1, len(ws), figsize=(3.3 * len(ws), 3.0), squeeze=False)
    for ax, w in zip(axes[0], ws):
        sns.lineplot(df[df["workload"] == w], x=x, y="jct_mean", hue="scheduler", marker="o", errorbar=("ci", 95), seed=0,
                     ax=ax, legend=ax is axes[0][-1])
        ax.set(title=w, xlabel=xlabel, ylabel="mean JCT (s)")
    return _save(fig, path)


def jct_vs_load(df: pd.DataFrame, out: Path) -> Path | None:
    if df.empty or df["load"].isna().all():
        return None
    return _lines_by_workload(df, "load", "load (fraction of capacity)", out / "jct_vs_load.png")


def kv_budget(df: pd.DataFrame, out: Path) -> Path | None:
    if df.empty:
        return None
    return _lines_by_workload(df, "kv_pool_tokens", "KV pool (tokens)", out / "kv_budget.png")


def ablation(df: pd.DataFrame, out: Path) -> Path | None:
    if df.empty:
        return None
    order = [s for s in ["topas_base", "topas_no_aging", "topas_no_reuse", "topas"] if s in set(df["scheduler"])]
    long = df.melt(id_vars=["scheduler", "seed"], value_vars=["jct_mean", "jct_p99"], var_name="metric", value_name="JCT (s)")
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    sns.barplot(long, x="scheduler", y="JCT (s)", hue="metric", order=order, errorbar=("ci", 95), seed=0, ax=ax)
    ax.set_title("ablation: MetaGPT-TL")
    ax.tick_params(axis="x", rotation=15)
    return _save(fig, out / "ablation.png")


def timeline(df: pd.DataFrame, out: Path, workload: str, baseline: str, seed: int = 0) -> Path | None:
    runs = df[(df["workload"] == workload) & (df["seed"] == seed) & df["scheduler"].isin(["topas", baseline])]
    if runs.empty:
        return None
    rows = []
    for r in runs.itertuples():
        tl = load_timeline(r.run_dir)
        tl = tl.assign(t=tl["start"], scheduler=r.scheduler)
        rows.append(tl[["t", "scheduler", "running", "resident_prefixes", "kv_used_tokens", "waiting"]])
    data = pd.concat(rows)
    fig, axes = plt.subplots(3, 1, figsize=(7.0, 6.0), sharex=True)
    for ax, col, label in zip(axes, ["running", "resident_prefixes", "waiting"], ["running requests (batch)", "resident agent prefixes", "waiting requests"]):
        sns.lineplot(data, x="t", y=col, hue="scheduler", drawstyle="steps-post", ax=ax, legend=ax is axes[0], errorbar=None, estimator=None)
        ax.set_ylabel(label)
    axes[-1].set_xlabel("time (s)")
    axes[0].set_title(f"{workload}, seed {seed}: TOPAS vs {baseline}")
    return _save(fig, out / f"timeline_{workload}.png")


def overhead(df: pd.DataFrame, out: Path) -> Path | None:
    df = df[df["scheduler"] == "topas"]
    if df.empty:
        return None
    df = df.assign(point=[f"{r:.3g} task/s" for r in df["arrival_rate"]])
    long = df.melt(id_vars=["point", "seed"], value_vars=["decision_ms_mean", "decision_ms_p99"], var_name="stat", value_name="ms per decision")
    fig, ax = plt.subplots(figsize=(5.0, 3.0))
    sns.barplot(long, x="point", y="ms per decision", hue="stat", errorbar=("ci", 95), seed=0, ax=ax)
    ax.set_title("TOPAS decision time, MetaGPT-SOP")
    return _save(fig, out / "overhead.png")


def motivation(df: pd.DataFrame, out: Path) -> Path | None:
    if df.empty:
        return None
    df = df.assign(pattern=df["workload"].str.replace("motivation_", ""))
    fig, axes = plt.subplots(1, 2, figsize=(6.0, 2.8))
    sns.barplot(df, x="pattern", y="mean_batch_size", errorbar=("ci", 95), seed=0, ax=axes[0])
    sns.barplot(df, x="pattern", y="makespan_s", errorbar=("ci", 95), seed=0, ax=axes[1])
    axes[0].set_ylabel("mean decode batch")
    axes[1].set_ylabel("makespan (s)")
    fig.suptitle("two agents, FCFS: alternating vs grouped arrivals")
    return _save(fig, out / "motivation.png")
