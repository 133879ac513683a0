"""Small multiples of the paper's claims: per claim, the paper's value, ours with its 95%
t-CI (one point per baseline set, coloured by its verdict), the zone where the magnitude counts as
reproduced, and a title that names every row's verdict (docs/protocol.md)."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis import style
from analysis.display import claim_title
from analysis.figures import finish, new_figure
from analysis.tables import MAGNITUDE, MIN_SEEDS, headline

VERDICT_COLORS = {"reproduced": "#1a9850", "direction only": "#4575b4", "inconclusive": "#7f7f7f",
                  "contradicted": "#d73027"}
SCALE = {"change": 100.0, "share": 100.0, "ms": 1.0, "ratio": 1.0}
XLABEL = {"change": "TOPAS vs baseline (%)", "share": "% of run time", "ms": "ms per decision", "ratio": "ratio"}


def _title(rows: pd.DataFrame) -> tuple[str, str]:
    """(the panel's verdict line naming every row's verdict, its colour: the verdict's when all agree)."""
    verdicts = list(rows["verdict"])
    if len(set(verdicts)) == 1:
        return verdicts[0], VERDICT_COLORS[verdicts[0]]
    parts = [f"{'paper set' if b in ('paper set', 'paper = full set') else b or 'ours'}: {v}"
             for b, v in zip(rows["baseline_set"], verdicts)]
    return "; ".join(parts), "black"


def _magnitude_zone(ax, unit: str, paper: float, scale: float) -> None:
    """Shade the values whose magnitude counts as reproduced (the rule of analysis/tables.py)."""
    lo, hi = ax.get_xlim()
    if unit == "change":
        edge = scale * MAGNITUDE * paper
        ax.axvspan(*((lo, edge) if paper < 0 else (edge, hi)), color=VERDICT_COLORS["reproduced"], alpha=0.08, lw=0)
    elif unit == "ratio":  # at least 2/3 of the paper's shortfall below 1
        ax.axvspan(lo, 1 - MAGNITUDE * (1 - paper), color=VERDICT_COLORS["reproduced"], alpha=0.08, lw=0)
    else:  # overheads: at most the paper's
        ax.axvspan(lo, scale * paper, color=VERDICT_COLORS["reproduced"], alpha=0.08, lw=0)
    ax.set_xlim(lo, hi)


def paper_vs_ours(verdicts: pd.DataFrame, runs: pd.DataFrame | None = None, ncols: int = 4) -> Figure | None:
    """One panel per claim; `runs` (the main experiment's) names the setup in the caption."""
    if verdicts.empty:
        return None
    ids = list(dict.fromkeys(verdicts["claim"]))
    nrows = math.ceil(len(ids) / ncols)
    fig = new_figure(3.3 * ncols, 1.75 * nrows + 0.9)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, cid in zip(axes, ids):
        rows = verdicts[verdicts["claim"] == cid]
        first = rows.iloc[0]
        unit = first.get("unit", "change") if isinstance(first.get("unit"), str) else "change"
        scale = SCALE.get(unit, 1.0)
        ax.plot(scale * first["paper"], 0, "D", color=style.PAPER_COLOR, ms=6)
        labels = ["paper"]
        for i, r in enumerate(rows.itertuples(), start=1):
            ci = 0.0 if pd.isna(r.ci95) or r.seeds < MIN_SEEDS else scale * r.ci95  # below 3 seeds: no CI (the verdicts' rule)
            ax.errorbar(scale * r.ours, i, xerr=ci, fmt="o", ms=6, capsize=3, color=VERDICT_COLORS[r.verdict])
            which = "" if r.baseline_set in ("", "paper = full set") else f",\n{r.baseline_set}"
            n = f" (n = {r.seeds}, no CI)" if r.seeds < MIN_SEEDS else ""
            labels.append((f"ours vs {style.label(r.vs)}{which}" if r.vs else "ours") + n)
        if unit in ("change", "ratio"):
            ax.axvline(0.0 if unit == "change" else 1.0, color="0.5", lw=0.8)
        ax.margins(x=0.15)
        _magnitude_zone(ax, unit, first["paper"], scale)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.4, -0.6)
        ax.set_xlabel(XLABEL.get(unit, ""), fontsize=7)
        text, colour = _title(rows)
        ax.set_title(f"{claim_title(first)}\n{text}", fontsize=8 if len(text) < 45 else 6.5, color=colour)
    for ax in axes[len(ids):]:
        ax.set_visible(False)
    handles = [Line2D([], [], marker="D", ls="", color=style.PAPER_COLOR, label="paper")]
    handles += [Line2D([], [], marker="o", ls="", color=c, label=f"ours: {v}") for v, c in VERDICT_COLORS.items()]
    handles.append(Patch(color=VERDICT_COLORS["reproduced"], alpha=0.15, label="magnitude counts\nas reproduced"))
    fig.legend(handles=handles, loc="outside right center", fontsize=7)
    caption_runs = runs if runs is not None else pd.DataFrame()
    return finish(fig, caption_runs, f"The paper's claims: {headline(verdicts)} (against the paper's baselines)",
                  style.CI_NOTE + "; ablation, motivation and throughput claims from their own experiments")
