"""Figures regenerated from run outputs. Each function takes the runs table (analysis/load.py)
and returns a matplotlib Figure, or None without data; `save` writes it as PNG.

Figures are built with the object API, not pyplot: nothing global is left open, the report
saves them, and a notebook shows the returned figure once (no double display).
Every figure: a fixed colour and marker per scheduler (analysis/style.py), means with the
tables' 95% Student-t CI (analysis.tables.ci95, never a bootstrap), the paper's published
values in black labelled "paper" (analysis/paper_claims.yaml) where the paper gives one, and a
caption line naming model, GPU, load, seeds and tasks. The claim summary figure is in
analysis/figures_claims.py, the distributions (JCT, JCT / floor) in analysis/figures_cdf.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter

from analysis import style, tables
from analysis.display import fmt_value
from analysis.load import load_timeline
from topas.scheduler_sets import baselines, scheduler_set

sns.set_theme(style="whitegrid", context="paper")
PAPER_SET = list(scheduler_set("paper"))  # the paper's schedulers (topas/scheduler_sets.py)
PAPER_KW = {"color": style.PAPER_COLOR, "ls": "--", "lw": 1.6}


def new_figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def finish(fig: Figure, runs: pd.DataFrame, title: str = "", extra: str = style.CI_NOTE) -> Figure:
    """Title and the caption line under the figure (saved with bbox_inches='tight', so it shows)."""
    if title:
        fig.suptitle(title)
    fig.text(0.0, 0.0, style.caption(runs, extra), ha="left", va="top", fontsize=7, color="0.3")
    return fig


def save(fig: Figure | None, path: Path) -> Path | None:
    if fig is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def paper_handle(text: str = "paper") -> Line2D:
    return Line2D([], [], label=text, **PAPER_KW)


def scheduler_handles(names) -> list[Line2D]:
    return [Line2D([], [], **{**style.line_kw(s), "ms": 5}) for s in names]


def workloads(df: pd.DataFrame) -> list[str]:
    present = set(df["workload"])
    return [w for w in tables.WORKLOAD_ORDER if w in present] + sorted(present - set(tables.WORKLOAD_ORDER))


def _claim(claims: dict[str, Any], kind: str, workload: str, metric: str) -> dict[str, Any] | None:
    return next((c for c in claims["claims"] if c["kind"] == kind and c.get("workload") == workload
                 and c["metric"] == metric), None)


def paper_implied(df: pd.DataFrame, claims: dict[str, Any], workload: str, metric: str) -> tuple[float, str, float] | None:
    """(best paper-set baseline's mean x (1 + the paper's change), that baseline, the paper's change)."""
    c = _claim(claims, "reduction", workload, metric)
    best = tables.best_baseline(df, workload, metric, list(baselines("paper")))
    if c is None or best is None:
        return None
    base = df[(df["workload"] == workload) & (df["scheduler"] == best)][metric].mean()
    return base * (1 + c["paper"]), best, c["paper"]


def line_handles(names) -> list[Line2D]:
    """Legend entries for plain lines (no markers: the lines have none)."""
    return [Line2D([], [], color=style.color(s), lw=style.line_kw(s)["lw"], label=style.label(s)) for s in names]


CHANGE_TICKS = (-90, -50, -20, -10, 0, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def _symlog_axis(ax, lo: float, hi: float) -> None:
    """A change axis in %: linear within ±10% (where TOPAS's effects are), logarithmic beyond (a baseline
    can be several times slower), padded so that no point sits on the frame."""
    ax.set_xscale("symlog", linthresh=10, linscale=0.5)  # 0-10%, 10-20%, 20-50%: about the same width
    pad = lambda v: v * 1.4 if abs(v) > 10 else v + 4 * (1 if v > 0 else -1)
    ax.set_xlim(pad(lo), pad(hi))
    ax.xaxis.set_major_locator(FixedLocator(_spaced(ax, [t for t in CHANGE_TICKS if pad(lo) <= t <= pad(hi)])))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:+.0f}%" if v else "0"))
    ax.xaxis.set_minor_locator(FixedLocator([]))


def _spaced(ax, ticks: list[float], parts: int = 5) -> list[float]:
    """The ticks at least 1/`parts` of the axis apart (in its scale), 0 always kept: readable labels."""
    tr = ax.xaxis.get_transform().transform
    lo, hi = tr(np.array(ax.get_xlim(), dtype=float))
    gap = (hi - lo) / parts
    pos = dict(zip(ticks, tr(np.array(ticks, dtype=float))))
    kept = [0.0] if 0.0 in pos else []
    for t in sorted(ticks, key=abs):  # outwards from 0
        if all(abs(pos[t] - pos[k]) >= gap for k in kept):
            kept.append(t)
    return sorted(kept)


def main_jct(df: pd.DataFrame, claims: dict[str, Any] | None = None) -> Figure | None:
    """Each scheduler's paired change of mean and p99 JCT vs the workload's best paper-set baseline, with the
    95% t-CI over seeds (what the claims use), and the paper's change on the TOPAS row. Absolute JCTs:
    main_jct.md (and the best baseline's in each panel title)."""
    if df.empty:
        return None
    claims = claims or tables.load_claims()
    ws, scheds = workloads(df), style.ordered(df["scheduler"])
    fig = new_figure(2.6 * len(ws) + 1.6, 0.36 * len(scheds) + 2.2)
    axes = fig.subplots(2, len(ws), squeeze=False, sharey=True)
    for row, metric in enumerate(("jct_mean", "jct_p99")):
        for ax, w in zip(axes[row], ws):
            best = tables.best_baseline(df, w, metric, list(baselines("paper")))
            if best is None:
                ax.set_visible(False)
                continue
            seeds, ends = set(), [-10.0, 10.0]
            for i, sc in enumerate(scheds):
                change, ci, n = tables.paired_change(df, w, metric, sc, best)
                if n:
                    seeds.add(n)
                    ci = 100 * ci if n >= tables.MIN_SEEDS and ci == ci else 0.0
                    ax.errorbar(100 * change, i, xerr=ci or None, fmt=style.marker(sc), color=style.color(sc), capsize=2, ms=5)
                    ends += [100 * change - ci, 100 * change + ci]
            c = _claim(claims, "reduction", w, metric)
            if c and "topas" in scheds:
                ax.plot(100 * c["paper"], scheds.index("topas"), marker="|", ms=16, mew=2.2, color=style.PAPER_COLOR, zorder=5)
                ends.append(100 * c["paper"])
            ax.axvline(0.0, color="0.5", lw=0.8)
            _symlog_axis(ax, min(ends), max(ends))
            base = df[(df["workload"] == w) & (df["scheduler"] == best)][metric].mean()
            few = min(seeds, default=0) < tables.MIN_SEEDS
            ax.set_title(f"{style.workload_label(w)}: {style.metric_label(metric)}\nvs {style.label(best)} ({base:,.0f} s)"
                         + (f"\nn = {min(seeds)}, no CI" if few else ""), fontsize=7.5)
            ax.tick_params(axis="both", labelsize=7)
            ax.set_xlabel("change vs best baseline (%)", fontsize=7)
    axes[0][0].set_yticks(range(len(scheds)), [style.label(s) for s in scheds])
    axes[0][0].invert_yaxis()
    fig.legend(handles=[Line2D([], [], marker="|", ms=12, mew=2, ls="", color=style.PAPER_COLOR,
                               label="paper: TOPAS's change\nvs the best baseline")], loc="outside right upper", fontsize=7)
    return finish(fig, df, "Main comparison: each scheduler's JCT vs the best paper-set baseline (paired by seed)",
                  "points: mean over seeds of (scheduler - best) / best; error bars: its 95% Student-t CI (none below 3 seeds)"
                  "\naxis linear within ±10%, logarithmic beyond; absolute JCTs: main_jct.md")


def _lines_by_workload(df: pd.DataFrame, x: str, xlabel: str, title: str) -> Figure:
    """One panel per workload: mean JCT against `x`, a line per scheduler with t-CI error bars where a
    point has at least 3 seeds (fewer: the point alone, and the panel says so)."""
    ws, scheds = workloads(df), style.ordered(df["scheduler"])
    s = tables.mean_ci(df, ["workload", "scheduler", x], "jct_mean")
    xs = np.sort(df[x].dropna().unique())
    step = float(np.diff(xs).min()) if len(xs) > 1 else 1.0
    fig = new_figure(3.3 * len(ws) + 1.6, 3.2)
    axes = fig.subplots(1, len(ws), squeeze=False)[0]
    for ax, w in zip(axes, ws):
        sw = s[s["workload"] == w]
        for k, sc in enumerate(scheds):
            d = sw[sw["scheduler"] == sc].sort_values(x)
            if d.empty:
                continue
            off = (k - (len(scheds) - 1) / 2) * 0.05 * step  # dodge: points at the same x stay apart
            ci = d["ci"].where(d["n"] >= tables.MIN_SEEDS)
            bars = ax.errorbar(d[x] + off, d["mean"], yerr=ci if ci.notna().any() else None, capsize=0, ms=4,
                               elinewidth=0.8, **style.line_kw(sc))
            for b in bars.lines[2]:  # faint error bars: the means stay readable where the CIs overlap
                b.set_alpha(0.35)
        n = sorted(set(sw["n"]))
        few = f"\nn = {'-'.join(map(str, (n[0], n[-1]) if len(n) > 1 else n))} per point" + (
            ", no CI" if n[-1] < tables.MIN_SEEDS else ", no CI below 3") if n[0] < tables.MIN_SEEDS else ""
        ax.set_ylim(bottom=0)
        ax.set(title=style.workload_label(w) + few, xlabel=xlabel, ylabel="mean JCT (s)" if ax is axes[0] else "")
    fig.legend(handles=scheduler_handles(scheds), loc="outside right upper", fontsize=7)
    return finish(fig, df, title, style.CI_NOTE + " where a point has 3 seeds or more")


def jct_vs_load(df: pd.DataFrame) -> Figure | None:
    if df.empty or df["load"].isna().all():
        return None
    return _lines_by_workload(df, "load", "offered load (fraction of capacity)", "Mean JCT vs offered load")


def kv_budget(df: pd.DataFrame) -> Figure | None:
    if df.empty:
        return None
    return _lines_by_workload(df, "kv_pool_tokens", "KV pool (tokens)", "Mean JCT vs KV-cache budget")


def ablation(df: pd.DataFrame, claims: dict[str, Any] | None = None) -> Figure | None:
    """Mean and p99 JCT of each TOPAS variant; the paper's TOPAS vs TOPAS-base change drawn on the TOPAS bar."""
    if df.empty:
        return None
    claims = claims or tables.load_claims()
    variants = style.ordered(df["scheduler"])
    metrics, width = ["jct_mean", "jct_p99"], 0.8 / len(variants)
    ticks = [style.metric_label(m) for m in metrics]
    fig = new_figure(7.2, 3.6)
    ax = fig.subplots()
    for i, m in enumerate(metrics):
        s = tables.mean_ci(df, ["scheduler"], m).set_index("scheduler")
        for k, v in enumerate(variants):
            ax.bar(i + (k - (len(variants) - 1) / 2) * width, s.loc[v, "mean"], width, yerr=s.loc[v, "ci"], capsize=3,
                   color=style.color(v), label=style.label(v) if i == 0 else None)
        c = _claim(claims, "ablation", "metagpt_tl", m)
        if c and c["baseline"] in s.index and "topas" in variants:
            xt = i + (variants.index("topas") - (len(variants) - 1) / 2) * width
            y = s.loc[c["baseline"], "mean"] * (1 + c["paper"])
            ours, ci, _ = tables.paired_change(df, "metagpt_tl", m, "topas", c["baseline"])
            ax.hlines(y, xt - width / 2, xt + width / 2, **{**PAPER_KW, "lw": 2.2})
            ticks[i] += (f"\nTOPAS vs {style.label(c['baseline'])}:\npaper {fmt_value(c['paper'])}, "
                         f"ours {fmt_value(ours)} ±{100 * ci:.1f} pp")
    ax.set_xticks(range(len(metrics)), ticks, fontsize=7)
    ax.set_ylabel("JCT (s)")
    handles, _ = ax.get_legend_handles_labels()
    fig.legend(handles=handles + [paper_handle("paper: TOPAS-base x\n(1 + paper's change)")], loc="outside right center",
               fontsize=7)
    return finish(fig, df, "Ablation on MetaGPT-TL: TOPAS without each component")


def overhead(df: pd.DataFrame, claims: dict[str, Any] | None = None) -> Figure | None:
    """TOPAS decision time (wall clock) per arrival rate, against the paper's 1.9 ms and 0.31%."""
    df = df[df["scheduler"] == "topas"]
    if df.empty:
        return None
    claims = {c["id"]: c for c in (claims or tables.load_claims())["claims"]}
    rates = sorted(df["arrival_rate"].unique())
    fig = new_figure(8.0, 3.2)
    axes = fig.subplots(1, 2)
    panels = [(axes[0], ["decision_ms_mean", "decision_ms_p99"], 1.0, "ms per decision", "overhead_ms"),
              (axes[1], ["decision_overhead_fraction"], 100.0, "decision time (% of run time)", "overhead_fraction")]
    for ax, metrics, scale, ylabel, cid in panels:
        w = 0.8 / len(metrics)
        for k, m in enumerate(metrics):
            s = tables.mean_ci(df, ["arrival_rate"], m).sort_values("arrival_rate")
            ax.bar(np.arange(len(rates)) + (k - (len(metrics) - 1) / 2) * w, scale * s["mean"], w,
                   yerr=scale * s["ci"].where(s["n"] >= tables.MIN_SEEDS), capsize=3, color=style.color("topas"),
                   alpha=1.0 if k == 0 else 0.5, label=style.metric_label(m))
        c = claims.get(cid)
        at = [i for i, r in enumerate(rates) if np.isclose(r, 0.15)]
        if c and at:  # the paper measured at 0.15 tasks/s: its line spans that rate's bars only
            ax.hlines(scale * c["paper"], at[0] - 0.45, at[0] + 0.45,
                      label=f"paper at 0.15 tasks/s: {fmt_value(c['paper'], c.get('unit'))} (mean)", **PAPER_KW)
        ax.set_xticks(range(len(rates)), [_rate_label(df, r) for r in rates], fontsize=7)
        ax.set(xlabel="arrival rate (tasks/s)", ylabel=ylabel)
        ax.set_ylim(0, 1.35 * ax.get_ylim()[1])  # room for the legend above the bars and the paper's line
        ax.legend(fontsize=7, loc="upper left")
    return finish(fig, df, "TOPAS decision overhead on MetaGPT-SOP (wall clock, this machine)",
                  style.CI_NOTE + " (3 seeds or more)")


def _rate_label(df: pd.DataFrame, rate: float) -> str:
    """An arrival rate with how it was set: the paper's rate, or a load x capacity."""
    load = pd.to_numeric(df.loc[np.isclose(df["arrival_rate"], rate), "load"], errors="coerce").dropna()
    return f"{rate:.3g}\n(load {load.iloc[0]:g})" if len(load) else f"{rate:.3g}\n(paper's rate)"


def motivation(df: pd.DataFrame, claims: dict[str, Any] | None = None) -> Figure | None:
    """Two agents under FCFS: mean decode batch and makespan, alternating vs grouped arrivals."""
    if df.empty:
        return None
    c = {c["id"]: c for c in (claims or tables.load_claims())["claims"]}.get("motivation_batch", {})
    pats = [p for p in ("motivation_alternating", "motivation_grouped") if p in set(df["workload"])]
    fig = new_figure(6.8, 3.0)
    axes = fig.subplots(1, 2)
    for ax, m, ylabel in zip(axes, ["mean_batch_size", "makespan_s"], ["mean decode batch (requests)", "makespan (s)"]):
        s = tables.mean_ci(df, ["workload"], m).set_index("workload").loc[pats]
        ax.bar(range(len(pats)), s["mean"], 0.6, yerr=s["ci"], capsize=3, color=style.color("fcfs"))
        ax.set_xticks(range(len(pats)), [style.workload_label(p) for p in pats])
        ax.set(ylabel=ylabel, xlabel="arrival pattern (FCFS)")
        if len(pats) == 2 and c:
            grouped = s.loc["motivation_grouped", "mean"]
            ratios = [c["paper"]] if m == "mean_batch_size" else c.get("paper_makespan_ratio", [])
            for r in ratios:
                ax.hlines(grouped * r, -0.3, 0.3, **PAPER_KW)
            if ratios:
                ax.annotate(f"paper: {'-'.join(f'{r:g}' for r in ratios)}x grouped", (0, grouped * max(ratios)),
                            xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7)
    return finish(fig, df, "Motivation: two agents sharing a server, alternating vs grouped")


TIMELINE_WINDOW_S = 61  # every timeline: samples each second, smoothed over this many (odd: a median stays whole)


def timeline(df: pd.DataFrame, workload: str, baseline: str, seed: int = 0) -> Figure | None:
    """Batch, KV use, resident prefixes and queue over time for TOPAS and `baseline` (one seed), sampled
    each second and smoothed over TIMELINE_WINDOW_S (the raw step plot is unreadable): a centred rolling
    mean, and for the resident-prefix count a rolling median (a count stays whole)."""
    runs = df[(df["workload"] == workload) & (df["seed"] == seed) & df["scheduler"].isin(["topas", baseline])]
    if runs.empty:
        return None
    cols = [("running", "running requests (batch)"), ("kv_pct", "KV cache used (%)"),
            ("resident_prefixes", "resident agent prefixes"), ("waiting", "waiting requests (queue)")]
    fig = new_figure(8.0, 7.2)
    axes = fig.subplots(len(cols), 1, sharex=True)
    for r in runs.sort_values("scheduler", key=lambda s: s.map(style.scheduler_order().index)).itertuples():
        tl = load_timeline(r.run_dir).sort_values("start", kind="stable")
        end = float((tl["start"] + tl["duration"]).max())
        grid = pd.DataFrame({"start": np.arange(0.0, end + 1.0, 1.0)})
        s = pd.merge_asof(grid, tl, on="start")  # the step function's value at each second
        s["kv_pct"] = 100 * s["kv_used_tokens"] / r.kv_pool_tokens
        roll = s.rolling(TIMELINE_WINDOW_S, center=True, min_periods=1)
        smooth = roll.mean(numeric_only=True).assign(resident_prefixes=roll["resident_prefixes"].median())
        for ax, (col, _) in zip(axes, cols):
            ax.plot(grid["start"], smooth[col], **{**style.line_kw(r.scheduler), "marker": None})
    for ax, (_, ylabel) in zip(axes, cols):
        ax.set_ylabel(ylabel, fontsize=7)
    axes[2].yaxis.get_major_locator().set_params(integer=True)
    axes[-1].set_xlabel("time (s)")
    fig.legend(handles=line_handles(style.ordered(runs["scheduler"])), loc="outside right upper", fontsize=7)
    return finish(fig, runs, f"{style.workload_label(workload)}, seed {seed}: TOPAS vs {style.label(baseline)}",
                  f"sampled each second; rolling mean over {TIMELINE_WINDOW_S} s (resident prefixes: rolling median)")
