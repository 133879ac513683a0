"""Distributions over tasks: the JCT CDF per workload (with the mean the paper's reduction implies)
and the CDF of JCT / each task's floor (topas/bound.py), a line per scheduler, on log axes (a JCT
tail spans decades)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from analysis import style, tables
from analysis.display import fmt_value
from analysis.figures import PAPER_KW, PAPER_SET, finish, line_handles, new_figure, paper_handle, paper_implied, workloads
from analysis.load import load_tasks


def _pooled_tasks(runs: pd.DataFrame) -> pd.DataFrame:
    """Every run's tasks after warm-up, with its workload and scheduler."""
    return pd.concat([load_tasks(r.run_dir).query("~warmup").assign(workload=r.workload, scheduler=r.scheduler)
                      for r in runs.itertuples()])


def _cdf_panels(data: pd.DataFrame, x: str, xlabel: str) -> tuple[Figure, list, list[str], list[str]]:
    """One ECDF panel per workload, a line per scheduler, log x axis (a JCT tail spans decades)."""
    ws, scheds = workloads(data), style.ordered(data["scheduler"])
    fig = new_figure(2.9 * len(ws) + 1.7, 3.1)
    axes = fig.subplots(1, len(ws), squeeze=False)[0]
    for ax, w in zip(axes, ws):
        sns.ecdfplot(data[data["workload"] == w], x=x, hue="scheduler", hue_order=scheds, palette=style.palette(scheds),
                     ax=ax, legend=False)
        ax.set(xlabel=xlabel, ylabel="fraction of tasks" if ax is axes[0] else "", title=style.workload_label(w))
    return fig, list(axes), ws, scheds


def log_x(ax) -> None:
    """A log x axis labelled in plain numbers at 1-2-5 steps (or three ticks where the range is narrower)."""
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if lo <= t <= hi]
    if len(ticks) < 3:
        ticks = sorted({float(f"{t:.2g}") for t in np.geomspace(lo, hi, 5)[1:-1]})
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def jct_cdf(df: pd.DataFrame, claims: dict[str, Any] | None = None) -> Figure | None:
    """JCT distribution per workload (the paper's schedulers, tasks of every seed pooled), with the
    paper's reduction of mean JCT drawn as the TOPAS mean it implies."""
    runs = df[df["scheduler"].isin(PAPER_SET)]
    if runs.empty:
        return None
    claims = claims or tables.load_claims()
    fig, axes, ws, scheds = _cdf_panels(_pooled_tasks(runs), "jct", "JCT (s, log scale)")
    for ax, w in zip(axes, ws):
        implied = paper_implied(runs, claims, w, "jct_mean")
        if implied:
            x, best, paper = implied
            ax.axvline(x, **PAPER_KW)
            ours, ci, n = tables.paired_change(runs, w, "jct_mean", "topas", best)
            # in the title, not on the axes: a box there would cover some scheduler's tail
            ax.set_title(f"{style.workload_label(w)}\nmean JCT vs {style.label(best)}:\npaper {fmt_value(paper)}, "
                         f"ours {fmt_value(ours)} {_ci_text(ci, n)}", fontsize=7)
        log_x(ax)
    fig.legend(handles=line_handles(scheds) + [paper_handle("paper: TOPAS mean JCT\n(best baseline x (1 + paper's change))")],
               loc="outside right upper", fontsize=7)
    return finish(fig, runs, "JCT distribution per workload (tasks after warm-up, all seeds)",
                  "lines: empirical CDF; CI of the change: 95% Student-t over seeds, paired by seed")


def bound_cdf(df: pd.DataFrame) -> Figure | None:
    """How far each task is from the physical limit: the distribution of JCT / its floor per scheduler
    (topas/bound.py; 1 = the task alone on a warm server at batch 1)."""
    runs = df[df["scheduler"].isin(PAPER_SET)]
    data = _pooled_tasks(runs) if len(runs) else pd.DataFrame()
    if data.empty or "jct_over_bound" not in data or data["jct_over_bound"].isna().all():
        return None
    fig, axes, _, scheds = _cdf_panels(data.dropna(subset=["jct_over_bound"]), "jct_over_bound", "JCT / floor (log scale)")
    for ax in axes:
        ax.axvline(1.0, color=style.PAPER_COLOR, lw=0.8)
        log_x(ax)
    fig.legend(handles=line_handles(scheds), loc="outside right upper", fontsize=7)
    return finish(fig, runs, "Distance from the physical limit: JCT / the task's floor (tasks after warm-up, all seeds)",
                  "floor: the task's batch-1 critical path on the run's latency model, its prefixes cached (docs/bound.md); "
                  "no queueing, no batching")


def _ci_text(ci: float, n: int) -> str:
    """A change's CI as the figures print it; below 3 seeds none is shown (as the verdicts)."""
    return f"±{100 * ci:.1f} pp" if n >= tables.MIN_SEEDS and ci == ci else f"(n = {n}, no CI)"
