"""Where TOPAS stands against the bars a general method must meet (docs/topas.md, "Where it stands"), read from
run folders: each bar, its threshold, the measured value, met or not, and the cells that decide it.

The bars (docs/topas.md, "Where it stands"), on the reporting seeds (docs/protocol.md):
- the shape family's evaluation sample: significant losses against the cell's best baseline in at most 5% of
  cells, none by more than 3% mean JCT, and a geometric mean of TOPAS / best of at most 0.98 at loads >= 0.8;
- the regime map (the five paper workloads, loads 0.5-1.3, both host tiers and pools): no significant loss;
- Chain-3 and DAG-4 past capacity (loads 1.1 and 1.3) with 80 tasks per run: no significant loss (the 200-task
  cells are the regime map's);
- MetaGPT-TL against the phase-batching reference `phase_batch_nolimit` past 0.8 x capacity: within +2% mean JCT
  or better (the regime map's loads are 0.9 / 1.1 / 1.3; 0.8 is not among them).
The decision-cost bar is measured by `python -m topas.bench_compare 0e5a861`, not from runs. Beside the geometric
mean stands what choosing the best of every scheduler run per cell, in hindsight, would give (`hindsight_geomean`):
a bar below it needs a policy better than each of today's in the cells where it is best.

    python -m analysis.standing                                    # runs/shapes_full, runs/regime_full, runs/overload80_report
    python -m analysis.standing --shapes runs/shapes_full --regime runs/regime_full --overload runs/overload80_report

A folder with no runs leaves its bars out (named on the console); the overload cells are made by
`python run.py -m +experiment=design_overload workload.num_tasks=80 "seed=range(0,10)"
experiment_name=overload80_report hydra/launcher=local`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import design_overload, display, regime, shapes, style
from analysis.load import ROOT, load_runs
from topas.scheduler_sets import baselines

TOPAS = "topas"
REFERENCE = "phase_batch_nolimit"
RUNS = ROOT / "runs"
MAX_LOSS_SHARE = 0.05  # of the evaluation sample's cells
MAX_LOSS = 0.03  # mean JCT, any significant loss
MAX_GEOMEAN = 0.98  # TOPAS / best at loads >= 0.8
REFERENCE_MARGIN = 0.02  # MetaGPT-TL against phase_batch_nolimit
REFERENCE_LOADS = ("0.9", "1.1", "1.3")


@dataclass(frozen=True)
class Bar:
    name: str
    threshold: str
    measured: str
    met: bool
    where: str = ""  # the cells that decide it


def _cell(change: float, ci: float) -> str:
    return f"{display.fmt_value(change)} {display.fmt_ci(ci)}"


def shape_bars(runs: pd.DataFrame) -> list[Bar]:
    """The evaluation sample's bars (shapes e0, e1, ...; the design sample is for development only)."""
    runs = runs[runs["workload"].str.startswith("shape_e")]  # cells() reads each shape's spec once
    c = shapes.cells(runs, list(baselines("full")), [TOPAS])
    if c.empty:
        return []
    lost = c[c["verdict"] == "loss"].sort_values("change", ascending=False)
    share = len(lost) / len(c)
    counts = c["verdict"].value_counts()
    high = shapes.geomean(c.loc[c["load"] >= 0.8, "ratio"])
    over = lost[lost["change"] > MAX_LOSS]
    name = lambda r: f"{r.shape} at {r.load:g}: {_cell(r.change, r.ci)} vs {style.label(r.best)}"  # noqa: E731
    return [
        Bar("shape family, evaluation sample: cells lost", f"<= {MAX_LOSS_SHARE:.0%}",
            f"{len(lost)} of {len(c)} ({share:.1%}); {counts.get('win', 0)} wins, {counts.get('tie', 0)} ties",
            share <= MAX_LOSS_SHARE, "; ".join(name(r) for r in lost.itertuples())),
        Bar("shape family, evaluation sample: largest loss", f"<= {MAX_LOSS:.0%}",
            display.fmt_value(lost["change"].max()) if len(lost) else "no loss", over.empty,
            "; ".join(name(r) for r in over.itertuples())),
        Bar("shape family, evaluation sample: geomean TOPAS / best at loads >= 0.8", f"<= {MAX_GEOMEAN}",
            f"{high:.3f} (all loads {shapes.geomean(c['ratio']):.3f})", high <= MAX_GEOMEAN,
            f"the best of every scheduler run, chosen per cell in hindsight: {hindsight_geomean(runs, c):.3f}"),
    ]


def hindsight_geomean(runs: pd.DataFrame, c: pd.DataFrame) -> float:
    """The geometric mean, at loads >= 0.8, of the best mean JCT of every scheduler run in a cell (TOPAS and the
    references included) over the cell's best baseline (`c`: shapes.cells). What choosing among today's policies
    cell by cell, knowing the results, would give: a bar below it needs a policy better than all of them."""
    means = runs.groupby(["workload", "load", "scheduler"])["jct_mean"].mean()
    best_of_all = means.groupby(["workload", "load"]).min()
    high = c[c["load"] >= 0.8]
    ratios = [best_of_all[(r.workload, r.load)] / means[(r.workload, r.load, r.best)] for r in high.itertuples()]
    return shapes.geomean(pd.Series(ratios))


def _regime_name(r) -> str:
    return f"{r.workload} host {r.host}, pool {r.pool}, load {r.point}"


def regime_bars(runs: pd.DataFrame) -> list[Bar]:
    """No significant loss in the regime map; MetaGPT-TL within REFERENCE_MARGIN of the phase-batching reference."""
    c = regime.cells(runs)
    if c.empty:
        return []
    c = c[c["point"] != regime.PAPER]
    lost = c[c["jct_mean_verdict"] == "loss"].sort_values("jct_mean_change", ascending=False)
    counts = c["jct_mean_verdict"].value_counts()
    bars = [Bar("regime map (loads 0.5-1.3): cells lost", "0",
                f"{len(lost)} of {len(c)}; {counts.get('win', 0)} wins, {counts.get('tie', 0)} ties", lost.empty,
                "; ".join(f"{_regime_name(r)}: {_cell(r.jct_mean_change, r.jct_mean_ci)} vs {style.label(r.jct_mean_best)}"
                          for r in lost.itertuples()))]
    col = f"{REFERENCE}_change"
    if col in c:
        tl = c[(c["workload"] == "metagpt_tl") & c["point"].isin(REFERENCE_LOADS)].dropna(subset=[col])
        over = tl[tl[col] > REFERENCE_MARGIN].sort_values(col, ascending=False)
        bars.append(Bar(f"MetaGPT-TL vs {REFERENCE} at loads {', '.join(REFERENCE_LOADS)}", f"<= +{REFERENCE_MARGIN:.0%}",
                        f"{len(tl) - len(over)} of {len(tl)} cells within; worst {display.fmt_value(tl[col].max())}",
                        over.empty, "; ".join(f"{_regime_name(r)}: {_cell(getattr(r, col), getattr(r, f'{REFERENCE}_ci'))}"
                                              for r in over.itertuples())))
    return bars


def overload_bars(runs: pd.DataFrame, tasks: int = 80) -> list[Bar]:
    """Chain-3 and DAG-4 past capacity with `tasks` per run: no significant loss."""
    runs = runs[runs["num_tasks"] == tasks] if "num_tasks" in runs else runs
    try:
        c = design_overload.compare(runs, {})
    except ValueError:
        return []
    lost = c[c[f"{TOPAS} verdict"] == "loss"]
    cells = "; ".join(f"{r['workload']} at {r['load']:g}: {_cell(r[f'{TOPAS} vs best'], r[f'{TOPAS} vs best ci'])} vs "
                      f"{style.label(r['best'])}" for _, r in c.iterrows())
    return [Bar(f"Chain-3 and DAG-4 at loads 1.1 and 1.3, {tasks} tasks: cells lost", "0", f"{len(lost)} of {len(c)}",
                lost.empty, cells)]


def table(bars: list[Bar]) -> pd.DataFrame:
    return pd.DataFrame([{"bar": b.name, "threshold": b.threshold, "measured": b.measured, "met": "yes" if b.met else "no",
                          "deciding cells": b.where or "-"} for b in bars])


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m analysis.standing", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=str(RUNS / "shapes_full"), help="the shapes experiment's runs (full grid)")
    ap.add_argument("--regime", default=str(RUNS / "regime_full"), help="the regime map's runs (full grid)")
    ap.add_argument("--overload", default=str(RUNS / "overload80_report"),
                    help="Chain-3 and DAG-4 past capacity with 80 tasks per run, reporting seeds")
    args = ap.parse_args(argv)
    bars: list[Bar] = []
    for folder, read in ((args.shapes, shape_bars), (args.regime, regime_bars), (args.overload, overload_bars)):
        runs = load_runs(folder) if Path(folder).is_dir() else pd.DataFrame()
        got = read(runs) if not runs.empty else []
        if not got:
            print(f"no runs for these bars under {folder}", file=sys.stderr)
        bars += got
    if not bars:
        sys.exit("error: no runs under any of the folders given (see python -m analysis.standing --help)")
    print(display.to_markdown(table(bars)))
    print(f"\n{sum(b.met for b in bars)} of {len(bars)} bars met; the decision cost is measured apart "
          "(python -m topas.bench_compare 0e5a861).")


if __name__ == "__main__":
    main(sys.argv[1:])
