"""The regime map (conf/experiment/regime.yaml): where TOPAS wins, ties and loses against the
best baseline, per workload x host KV tier x device KV pool x offered load.

A cell is one (workload, host tier, pool, load point). Its best baseline is the one of BASELINES
with the lowest mean of the metric over the cell's seeds, and its value the paired per-seed change
(TOPAS - best) / best with the 95% Student-t CI, exactly as claims.md (analysis.tables.paired_change).
A cell is a win (loss) when the CI lies below (above) zero, a tie otherwise. Each reference row of the
set (REFERENCES: shown, never a baseline) is compared with TOPAS the same way, on mean JCT, beside it:
where a naive rule beats TOPAS is where the method leaves something on the table.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import display, latex, style, tables
from analysis.figures import finish, new_figure
from topas.scheduler_sets import REFERENCES, baselines

BASELINES = list(baselines("regime"))  # the baselines that are ever the best (topas/scheduler_sets.py)
METRICS = ("jct_mean", "jct_p99")
PAPER = "paper"  # the point of a run at an absolute rate (the paper's), not a load
KEYS = ["workload", "host", "pool", "point"]
MARKS = {"win": " ▼", "loss": " ▲", "tie": "", "n/a": ""}  # JCT down / up, CI excluding 0
PHASE_MARK = "†"
REFERENCE_MARK = "‡"  # a reference row beats TOPAS in the cell (CI excluding 0)


def _with_keys(df: pd.DataFrame) -> pd.DataFrame:
    """The runs with the cell keys as readable columns."""
    load = pd.to_numeric(df["load"], errors="coerce")
    mem = df["mem_fraction_static"] if "mem_fraction_static" in df else pd.Series(None, index=df.index)
    return df.assign(
        point=[f"{x:g}" if x == x else PAPER for x in load],
        host=["on" if h != h or h > 0 else "off" for h in pd.to_numeric(df["host_cache_ratio"], errors="coerce")],
        pool=["default" if m is None or m != m else f"mem {float(m):g}" for m in mem],
    )


def verdict(change: float, ci: float, n: int) -> str:
    if n < 2 or math.isnan(ci):
        return "n/a"
    return "win" if change + ci < 0 else "loss" if change - ci > 0 else "tie"


def _order(c: pd.DataFrame) -> pd.DataFrame:
    ws = [w for w in tables.WORKLOAD_ORDER if w in set(c["workload"])] + sorted(set(c["workload"]) - set(tables.WORKLOAD_ORDER))
    key = {"workload": lambda s: s.map(ws.index), "host": lambda s: s.map({"on": 0, "off": 1}),
           "pool": lambda s: s.map(lambda p: (p != "default", p)), "point": lambda s: s.map(_point_key)}
    return c.sort_values(KEYS, key=lambda s: key[s.name](s)).reset_index(drop=True)


def _point_key(p: str) -> float:
    return math.inf if p == PAPER else float(p)


def cells(df: pd.DataFrame, baselines: list[str] = BASELINES) -> pd.DataFrame:
    """One row per cell with TOPAS: per metric the best baseline, the paired change, its CI,
    the seeds paired and the verdict; plus the cell's KV pool (tokens) and arrival rate; and, for each
    reference row with runs (`<ref>_change`, `_ci`, `_verdict`), TOPAS's paired change of mean JCT against it."""
    if df.empty or "topas" not in set(df["scheduler"]):
        return pd.DataFrame()
    references = _run_references(df)
    rows = []
    for (w, host, pool, point), g in _with_keys(df).groupby(KEYS, sort=False):
        present = set(g["scheduler"])
        if "topas" not in present:
            continue
        row = {"workload": w, "host": host, "pool": pool, "point": point, "kv_pool_tokens": g["kv_pool_tokens"].median(),
               "arrival_rate": g["arrival_rate"].mean()}
        for m in METRICS:
            best = tables.best_baseline(g, w, m, baselines)
            change, ci, n = tables.paired_change(g, w, m, "topas", best) if best else (math.nan, math.nan, 0)
            row.update({f"{m}_best": best or "", f"{m}_change": change, f"{m}_ci": ci, f"{m}_seeds": n,
                        f"{m}_verdict": verdict(change, ci, n)})
        for ref in references:
            change, ci, n = tables.paired_change(g, w, "jct_mean", "topas", ref) if ref in present else (
                math.nan, math.nan, 0)
            row.update({f"{ref}_change": change, f"{ref}_ci": ci, f"{ref}_verdict": verdict(change, ci, n)})
        rows.append(row)
    return _order(pd.DataFrame(rows))


def _pool_label(pool: str, tokens: float) -> str:
    size = f"{tokens:,.0f} tokens" if tokens == tokens else "?"
    return f"SGLang default ({size})" if pool == "default" else f"{pool.replace('mem', 'mem_fraction_static')} ({size})"


def _point_label(point: str, rate: float) -> str:
    return f"paper: {rate:.3g} task/s" if point == PAPER else point


def readable_table(c: pd.DataFrame) -> pd.DataFrame:
    """The regime table as people read it (changes in %, CI in percentage points)."""
    out = pd.DataFrame({
        "workload": [style.workload_label(w) for w in c["workload"]], "host tier": c["host"],
        "KV pool": [_pool_label(p, t) for p, t in zip(c["pool"], c["kv_pool_tokens"])],
        "load": [_point_label(p, r) for p, r in zip(c["point"], c["arrival_rate"])],
    })
    for m in METRICS:
        name = style.metric_label(m)
        out[f"best for {name}"] = [style.label(b) if b else "n/a" for b in c[f"{m}_best"]]
        out[f"{name}: TOPAS vs best"] = [display.fmt_value(x) for x in c[f"{m}_change"]]
        out[f"{name} 95% CI"] = [display.fmt_ci(x) for x in c[f"{m}_ci"]]
        out[f"{name} verdict"] = c[f"{m}_verdict"]
    for ref in references_of(c):
        name = f"{style.metric_label('jct_mean')}: TOPAS vs {style.label(ref)}"
        out[name] = [display.fmt_value(x) for x in c[f"{ref}_change"]]
        out[f"{name} 95% CI"] = [display.fmt_ci(x) for x in c[f"{ref}_ci"]]
        out[f"{name} verdict"] = c[f"{ref}_verdict"]
    out["seeds"] = c["jct_mean_seeds"]
    return out


def references_of(c: pd.DataFrame) -> list[str]:
    """The reference rows `cells` compared TOPAS with."""
    return [r for r in REFERENCES if f"{r}_change" in c]


def table_note(df: pd.DataFrame) -> str:
    return ("Per cell: mean over seeds of the paired change (TOPAS - best) / best, where best is the baseline among "
            f"{', '.join(style.label(b) for b in BASELINES)} with the lowest mean of that metric in the cell; 95% CI: "
            "Student-t half-width over seeds (pp: percentage points); verdict win / loss when the CI excludes 0, tie "
            "otherwise. load: offered load as a fraction of the capacity measured with the default pool and host tier "
            "(paper: the paper's absolute rate). Loads above 1 have no steady state: the queue grows through the run, so "
            f"JCT depends on the fixed task count.{_reference_note(df)} {style.caption(df)}.")


def _run_references(df: pd.DataFrame) -> list[str]:
    """The reference rows (REFERENCES) that have runs in `df`."""
    return [r for r in REFERENCES if r in set(df["scheduler"])]


def _reference_note(df: pd.DataFrame) -> str:
    refs = _run_references(df)
    if not refs:
        return ""
    return (f" TOPAS vs {', '.join(style.label(r) for r in refs)}: the same paired change of mean JCT against that "
            "reference row, which is shown, never a baseline (a naive rule: where it beats TOPAS, the method leaves "
            "something on the table).")


def _capacity_note(c: pd.DataFrame, df: pd.DataFrame) -> str:
    """The paper's rates as multiples of our measured capacity (they are overload here)."""
    from topas.workloads import capacity_of

    parts = []
    for w, g in c[c["point"] == PAPER].groupby("workload", sort=False):
        rate = g["arrival_rate"].mean()
        model = df["model"].iloc[0] if "model" in df else None
        gpu = df["gpu"].iloc[0] if "gpu" in df else None
        cap = capacity_of(w, model, gpu)
        parts.append(f"{style.workload_label(w)} {rate:.3g} task/s" + (f" = {rate / cap:.2g}x capacity" if cap else ""))
    return "paper: the paper's rate (" + ", ".join(parts) + ")" if parts else ""


def heatmap(df: pd.DataFrame, metric: str = "jct_mean") -> Figure | None:
    """Rows: workload x (host tier, pool); columns: load points; colour and text: the paired change
    of `metric`, ▼ / ▲ where the CI excludes 0, † where the best baseline is phase batching, ‡ where a
    reference row beats TOPAS (mean JCT)."""
    c = cells(df)
    if c.empty:
        return None
    refs = references_of(c) if metric == "jct_mean" else []  # references are compared on mean JCT only
    rows = c[["workload", "host", "pool"]].drop_duplicates().reset_index(drop=True)
    points = sorted(set(c["point"]), key=_point_key)
    grid = np.full((len(rows), len(points)), np.nan)
    fig = new_figure(1.0 * len(points) + 4.2, 0.3 * len(rows) + 1.9)
    ax = fig.subplots()
    texts = []
    for r in c.itertuples():
        i = rows.index[(rows["workload"] == r.workload) & (rows["host"] == r.host) & (rows["pool"] == r.pool)][0]
        j = points.index(r.point)
        v = getattr(r, f"{metric}_change")
        grid[i, j] = 100 * v
        mark = MARKS[getattr(r, f"{metric}_verdict")] + (PHASE_MARK if getattr(r, f"{metric}_best") == "phase_batch" else "")
        mark += REFERENCE_MARK if any(getattr(r, f"{ref}_verdict") == "loss" for ref in refs) else ""
        texts.append((i, j, "n/a" if v != v else f"{100 * v:+.1f}%{mark}", getattr(r, f"{metric}_verdict")))
    lim = float(np.clip(np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 10.0, 5.0, 30.0))
    ax.set_facecolor("0.93")  # cells without runs (a paper rate on a workload without one) stay grey
    im = ax.pcolormesh(np.ma.masked_invalid(grid), cmap="RdBu_r", vmin=-lim, vmax=lim, edgecolors="white", linewidth=0.6)
    for i, j, s, v in texts:
        strong = v in ("win", "loss")
        light = abs(grid[i, j]) > 0.6 * lim if np.isfinite(grid[i, j]) else False
        ax.text(j + 0.5, i + 0.5, s, ha="center", va="center", fontsize=7, fontweight="bold" if strong else "normal",
                color="white" if light else "black")
    for i in range(1, len(rows)):  # a rule between workloads
        if rows.loc[i, "workload"] != rows.loc[i - 1, "workload"]:
            ax.axhline(i, color="black", lw=1.0)
    pools = c.groupby("pool")["kv_pool_tokens"].median()
    ax.set_yticks(np.arange(len(rows)) + 0.5, [f"{style.workload_label(r.workload)} | host {r.host} | pool {r.pool} "
                                               f"({pools[r.pool] / 1e3:.0f}k)" for r in rows.itertuples()], fontsize=7)
    ax.set_xticks(np.arange(len(points)) + 0.5, ["paper rate" if p == PAPER else p for p in points], fontsize=8)
    ax.set_ylim(len(rows), 0)
    ax.set_xlabel("offered load (x measured capacity)")
    ax.grid(False)
    fig.colorbar(im, ax=ax, shrink=0.6, label=f"{style.metric_label(metric)}: TOPAS vs best baseline (%)")
    n = sorted({int(x) for x in df["num_tasks"]}) if "num_tasks" in df else []
    capacity = _capacity_note(c, df)
    extra = (f"\ncell: paired change (TOPAS - best of {', '.join(style.label(b) for b in BASELINES)}) / best, mean over seeds"
             f"\nbold ▼ / ▲: the 95% t-CI excludes 0 (win / loss); {PHASE_MARK}: the best baseline is phase batching"
             + (f"; {REFERENCE_MARK}: {' / '.join(style.label(x) for x in refs)} (a reference, never a baseline) beats TOPAS"
                if refs else "")
             + f"\nloads > 1 have no steady state: JCT grows with the fixed task count ({'/'.join(map(str, n))} tasks per run)"
             + (f"\n{capacity}" if capacity else ""))
    return finish(fig, df, f"Regime map: TOPAS vs the best baseline, {style.metric_label(metric)}", extra)


def verdict_summary(c: pd.DataFrame, metric: str = "jct_mean") -> pd.DataFrame:
    """Per workload: how many regime cells TOPAS wins, ties and loses on `metric`, and which it wins or loses."""
    rows = []
    for w, g in c.groupby("workload", sort=False):
        def where(v: str, g=g) -> str:
            sel = g[g[f"{metric}_verdict"] == v]
            return "; ".join(f"{_point_label(r.point, r.arrival_rate)}, host {r.host}, {_pool_label(r.pool, r.kv_pool_tokens)}: "
                             f"{display.fmt_value(r[f'{metric}_change'])} vs {style.label(r[f'{metric}_best'])}"
                             for _, r in sel.iterrows()) or "-"
        counts = g[f"{metric}_verdict"].value_counts()
        row = {"workload": style.workload_label(w), "cells": len(g), "wins": int(counts.get("win", 0)),
               "ties": int(counts.get("tie", 0)), "losses": int(counts.get("loss", 0)),
               "TOPAS wins": where("win"), "TOPAS loses": where("loss")}
        if metric == "jct_mean":  # the reference rows are compared on mean JCT only
            row.update({f"vs {style.label(r)}": _against_reference(g, r) for r in references_of(c)})
        rows.append(row)
    return pd.DataFrame(rows)


def _against_reference(g: pd.DataFrame, ref: str) -> str:
    """One workload's cells against a reference row: wins / ties / losses, and the cell TOPAS does worst in."""
    g = g[g[f"{ref}_verdict"] != "n/a"]
    if g.empty:
        return "-"
    counts = g[f"{ref}_verdict"].value_counts()
    r = g.loc[g[f"{ref}_change"].idxmax()]
    return (f"{counts.get('win', 0)} / {counts.get('tie', 0)} / {counts.get('loss', 0)}; worst "
            f"{_point_label(r.point, r.arrival_rate)}, host {r.host}, {_pool_label(r.pool, r.kv_pool_tokens)}: "
            f"{display.fmt_value(r[f'{ref}_change'])}")


def latex_table(c: pd.DataFrame, caption: str, tag: str) -> str:
    """The regime table for a paper: per metric the best baseline, the change (%), its CI (pp) and the verdict."""
    out = pd.DataFrame({("", "workload"): [style.workload_label(w) for w in c["workload"]], ("", "host"): c["host"],
                        ("", "pool (k tokens)"): c["kv_pool_tokens"] / 1e3,
                        ("", "load"): [_point_label(p, r).replace("paper: ", "") for p, r in zip(c["point"], c["arrival_rate"])]})
    for m in METRICS:
        top = style.metric_label(m)
        out[(top, "vs")] = [style.label(b) if b else "n/a" for b in c[f"{m}_best"]]
        out[(top, "change (%)")] = 100 * c[f"{m}_change"]
        out[(top, "±CI (pp)")] = 100 * c[f"{m}_ci"]
        out[(top, "verdict")] = c[f"{m}_verdict"]
    out[("", "n")] = c["jct_mean_seeds"].astype(float)
    digits = {("", "pool (k tokens)"): 1, ("", "n"): 0} | {(style.metric_label(m), k): 1 for m in METRICS
                                                          for k in ("change (%)", "±CI (pp)")}
    return latex.render(out, caption, tag, digits, signed=[(style.metric_label(m), "change (%)") for m in METRICS])
