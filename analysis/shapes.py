"""The shapes experiment (conf/experiment/shapes.yaml): every scheduler on the workflow-shape family.

A cell is one (shape, load). For a scheduler X, the cell's *best other* is the scheduler with the
lowest mean JCT over the cell's seeds among the baselines (the paper's and the extra set,
analysis/paper_claims.yaml) and TOPAS, X left out; the reference rows (REFERENCES) are compared but
are never anyone's best. X's value in the cell is the paired per-seed change (X - best) / best with
its 95% Student-t CI (analysis.tables.paired_change); a win (loss) when the CI lies below (above)
zero, a tie otherwise, n/a below 3 seeds (no CI: the protocol's rule). For TOPAS the others are the baselines only, so
its row is "TOPAS vs the best baseline".
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import display, style, tables
from analysis.figures import finish, new_figure
from topas.scheduler_sets import REFERENCES


def verdict(change: float, ci: float, n: int) -> str:
    """win / loss when the 95% CI of the paired change excludes 0, tie otherwise; n/a below 3 seeds (no CI)."""
    if n < 3 or math.isnan(ci):
        return "n/a"
    return "win" if change + ci < 0 else "loss" if change - ci > 0 else "tie"

VERDICT_COLORS = {"win": "#2a9d3f", "tie": "0.55", "loss": "#d62728", "n/a": "0.85"}
LOAD_MARKERS = {0.5: "o", 0.8: "s", 1.1: "^"}


@cache
def _shape(workload: str) -> tuple[str, str, str]:
    """(shape id, structure, description) of a `shape_<id>` workload: the family is a pure function of
    the id, so the analysis re-derives it rather than storing it in every run."""
    from topas.workloads.shapes import shape_spec

    sid = workload.removeprefix("shape_")
    spec = shape_spec(sid)
    return sid, spec.structure, spec.description()


def with_shapes(df: pd.DataFrame) -> pd.DataFrame:
    """The runs with their shape id, structure and description."""
    info = [_shape(w) for w in df["workload"]]
    return df.assign(shape=[i[0] for i in info], structure=[i[1] for i in info], description=[i[2] for i in info])


def _others(present: set[str], x: str, baselines: list[str]) -> list[str]:
    pool = set(baselines) | ({"topas"} if x != "topas" else set())
    return sorted((pool & present) - {x} - set(REFERENCES))


def cells(df: pd.DataFrame, baselines: list[str], schedulers: list[str] | None = None) -> pd.DataFrame:
    """One row per (scheduler, shape, load): the best other, the paired change of mean JCT, its CI, seeds,
    verdict, and the ratio of means (for the geometric mean)."""
    if df.empty:
        return pd.DataFrame()
    df = with_shapes(df)
    rows = []
    for (w, load), g in df.groupby(["workload", "load"], sort=False):
        present = set(g["scheduler"])
        for x in schedulers or sorted(present):
            if x not in present:
                continue
            best = tables.best_baseline(g, w, "jct_mean", _others(present, x, baselines))
            change, ci, n = tables.paired_change(g, w, "jct_mean", x, best) if best else (math.nan, math.nan, 0)
            mean = g.groupby("scheduler")["jct_mean"].mean()
            rows.append({"scheduler": x, "workload": w, "shape": g["shape"].iloc[0], "structure": g["structure"].iloc[0],
                         "description": g["description"].iloc[0], "load": float(load), "best": best or "",
                         "change": change, "ci": ci, "seeds": n, "verdict": verdict(change, ci, n),
                         "ratio": mean[x] / mean[best] if best else math.nan})
    return pd.DataFrame(rows)


def standings(c: pd.DataFrame) -> pd.DataFrame:
    """Per scheduler: cells won, tied and lost against the best of the others, the geometric mean of its mean
    JCT / the best other's (all loads, and loads >= 0.8), and its worst cell."""
    rows = []
    for x, g in c.groupby("scheduler"):
        counts = g["verdict"].value_counts()
        high = g[g["load"] >= 0.8]
        worst = g.loc[g["change"].idxmax()] if g["change"].notna().any() else None
        rows.append({
            "scheduler": x, "cells": len(g), "wins": int(counts.get("win", 0)), "ties": int(counts.get("tie", 0)),
            "losses": int(counts.get("loss", 0)),
            "geomean ratio": geomean(g["ratio"]), "geomean ratio, load >= 0.8": geomean(high["ratio"]),
            "worst cell": "-" if worst is None else
            f"{worst['shape']} at load {worst['load']:g}: {display.fmt_value(worst['change'])} "
            f"{display.fmt_ci(worst['ci'])} vs {style.label(worst['best'])} ({worst['description']})",
        })
    out = pd.DataFrame(rows)
    return out.sort_values("geomean ratio").reset_index(drop=True)


def geomean(x: pd.Series) -> float:
    x = x.dropna().to_numpy(dtype=float)
    return float(np.exp(np.log(x).mean())) if len(x) else math.nan


def cell_table(c: pd.DataFrame, x: str = "topas") -> pd.DataFrame:
    """X's cells as people read them (changes in %, CI in percentage points)."""
    g = c[c["scheduler"] == x].sort_values(["structure", "shape", "load"], key=natural_order)
    return pd.DataFrame({
        "shape": g["shape"], "structure": g["structure"], "load": [f"{v:g}" for v in g["load"]],
        "best baseline": [style.label(b) if b else "n/a" for b in g["best"]],
        f"{style.label(x)} vs best": [display.fmt_value(v) for v in g["change"]],
        "95% CI": [display.fmt_ci(v) for v in g["ci"]], "verdict": g["verdict"], "seeds": g["seeds"],
        "shape description": g["description"],
    })


def natural_order(s: pd.Series) -> pd.Series:
    """Shape ids in numeric order (e2 before e10); other columns as they are."""
    if s.name == "shape":
        return s.map(lambda v: int(v[1:]))
    return s


def standings_display(s: pd.DataFrame) -> pd.DataFrame:
    return s.assign(scheduler=[style.label(x) for x in s["scheduler"]],
                    **{k: [f"{v:.3f}" if v == v else "n/a" for v in s[k]] for k in ("geomean ratio", "geomean ratio, load >= 0.8")})


def structure_summary(c: pd.DataFrame, x: str = "topas") -> pd.DataFrame:
    """Per structure: X's cells won, tied and lost, and where it loses."""
    rows = []
    for st, g in c[c["scheduler"] == x].groupby("structure"):
        counts = g["verdict"].value_counts()
        lost = g[g["verdict"] == "loss"]
        rows.append({"structure": st, "cells": len(g), "wins": int(counts.get("win", 0)), "ties": int(counts.get("tie", 0)),
                     "losses": int(counts.get("loss", 0)),
                     f"{style.label(x)} loses": "; ".join(f"{r.shape} at {r.load:g}: {display.fmt_value(r.change)} vs "
                                                           f"{style.label(r.best)}" for r in lost.itertuples()) or "-"})
    return pd.DataFrame(rows)


def figure(c: pd.DataFrame, runs: pd.DataFrame, x: str = "topas") -> Figure | None:
    """One dot per (shape, load): X's paired change vs the best baseline with its CI, coloured by verdict,
    grouped by structure (x axis), marker by load."""
    g = c[c["scheduler"] == x]
    if g.empty:
        return None
    structures = sorted(set(g["structure"]))
    fig = new_figure(max(6.0, 1.3 * len(structures) + 1.5), 3.6)
    ax = fig.add_subplot()
    shapes = {st: sorted(set(g.loc[g["structure"] == st, "shape"]), key=lambda v: int(v[1:])) for st in structures}
    for r in g.itertuples():
        ids = shapes[r.structure]
        pos = structures.index(r.structure) + 0.7 * ((ids.index(r.shape) + 0.5) / len(ids) - 0.5)
        pos += {0.5: -0.03, 0.8: 0.0, 1.1: 0.03}.get(r.load, 0.0)
        err = r.ci * 100 if r.ci == r.ci and r.seeds >= 3 else 0.0  # below 3 seeds: no CI drawn
        ax.errorbar(pos, r.change * 100, yerr=err, fmt=LOAD_MARKERS.get(r.load, "D"), color=VERDICT_COLORS[r.verdict],
                    ms=5, elinewidth=0.8, capsize=0)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xticks(range(len(structures)), [s.replace("_", " ") for s in structures])
    ax.set_ylabel(f"mean JCT, {style.label(x)} vs best baseline (%)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=col, label=v) for v, col in VERDICT_COLORS.items() if v in set(g["verdict"])]
    handles += [Line2D([], [], ls="", marker=m, color="0.3", label=f"load {ld:g}") for ld, m in LOAD_MARKERS.items()
                if ld in set(g["load"])]
    ax.legend(handles=handles, fontsize=7, ncol=2, loc="best")
    n = len(set(g["shape"]))
    return finish(fig, runs, f"{style.label(x)} on {n} shapes of the workflow-shape family "
                             "(win / loss: the CI excludes 0)")


NOTE = ("A cell is one (shape, load). Per cell: mean over seeds of the paired change of mean JCT (X - best) / best, "
        "where best is the scheduler with the lowest mean JCT in the cell among the baselines ({baselines}) and TOPAS, "
        "X left out ({reference}: compared, never the best); 95% CI: Student-t half-width over seeds (pp: percentage "
        "points); win / loss when the CI excludes 0, tie otherwise. geomean ratio: geometric mean over cells of X's mean "
        "JCT / the best other's. Evaluation sample of the shape family (docs/workloads.md, docs/protocol.md). {caption}.")


def write(runs: pd.DataFrame, t, baselines: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """shapes.md / shapes_standings.md and their LaTeX (t: analysis.report_tables.Target); returns (cells,
    standings), empty without runs."""
    from analysis import latex

    c = cells(runs, baselines)
    if c.empty or "topas" not in set(c["scheduler"]):
        return pd.DataFrame(), pd.DataFrame()
    s = standings(c)
    where = style.caption(runs).replace(" | ", "; ")
    note = NOTE.format(baselines=", ".join(style.label(b) for b in baselines),
                       reference=", ".join(style.label(r) for r in REFERENCES), caption=where)
    table = cell_table(c)
    title = "Shape family: TOPAS vs the best baseline per shape and load"
    t.write("shapes", table, title, note, latex.render(
        table.drop(columns="shape description"), f"{title}: the paired change of mean JCT over seeds, its 95% Student-t "
        f"CI and the verdict (win / loss: the CI excludes 0). {where}.", t.tag("shapes"),
        right=["TOPAS vs best", "95% CI", "seeds", "load"]))
    shown = standings_display(s)
    title = "Shape family: every scheduler vs the best of the others"
    t.write("shapes_standings", shown, title, note, latex.render(
        shown.drop(columns="worst cell"), f"{title}: cells won, tied and lost (the 95% Student-t CI of the paired change "
        f"of mean JCT excludes 0) and the geometric mean of its mean JCT over the best other's. {where}.",
        t.tag("shapes_standings"), right=["cells", "wins", "ties", "losses", "geomean ratio", "geomean ratio, load >= 0.8"]))
    return c, s


CLAIMS_HEADING = "## Where TOPAS wins, ties and loses (shape family, mean JCT)"


def claims_section(c: pd.DataFrame, s: pd.DataFrame) -> str:
    """The shape family's rows of claims.md's 'where TOPAS wins, ties and loses'."""
    if c.empty:
        return ""
    n = len(set(c["shape"]))
    return (f"\n{CLAIMS_HEADING}\n\n"
            f"TOPAS vs the best baseline on {n} evaluation shapes x loads (shapes.md, shapes.png), by structure; "
            "win / loss: the 95% CI of the paired change excludes 0.\n\n" + display.to_markdown(structure_summary(c))
            + "\n\nEvery scheduler vs the best of the others on the same cells (shapes_standings.md):\n\n"
            + display.to_markdown(standings_display(s)[["scheduler", "cells", "wins", "ties", "losses", "geomean ratio",
                                                         "geomean ratio, load >= 0.8"]]) + "\n")
