"""TOPAS variants on the shape family's design sample, the development loop of docs/protocol.md: develop and
tune there (tuning seeds from 100), report only on the evaluation sample.

Each variant is a runs folder of TOPAS runs on the design sample; it is scored as the shapes experiment scores
TOPAS (analysis.shapes: against the best baseline of each (shape, load), paired by seed, wins / ties / losses,
geometric means), then cell by cell against TOPAS itself (paired by seed: which cells the variant moves).

    python run.py -m +experiment=design_shapes hydra/launcher=local          # baselines and TOPAS, once
    python run.py -m +experiment=design_shapes scheduler=topas scheduler.params.rho=4 \\
        experiment_name=design_rho4 hydra/launcher=local                    # a variant
    python -m analysis.design_sample runs/design_rho4 [runs/design_other ...] [--base runs/design_shapes]
        [--topas runs/design_today]                                        # TOPAS re-run apart
    python -m analysis.design_sample --headroom                            # what choosing among today's policies gives
    python -m analysis.design_sample --passing                             # tasks started while started ones wait
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from analysis import display, shapes, tables
from analysis.load import ROOT, folder_labels, load_runs
from topas.scheduler_sets import REFERENCES

TOPAS = "topas"
BASE = ROOT / "runs" / "design_shapes"
# stage_waits.jct_split's two parts of a run's mean JCT, and the name of TOPAS's change of each in passing_cells
SPLIT = {"entry_wait_s": "entry wait change", "in_progress_s": "in-progress change"}


def baselines_of(base: pd.DataFrame) -> list[str]:
    """The baselines the sample was run with: every scheduler but TOPAS and the reference rows."""
    return sorted(set(base["scheduler"]) - {TOPAS} - set(REFERENCES))


def variant_cells(base: pd.DataFrame, runs: pd.DataFrame, name: str, bl: list[str]) -> pd.DataFrame:
    """shapes.cells of one variant's TOPAS runs against the base sample's baselines `bl`, labelled `name`."""
    own = runs[runs["scheduler"] == TOPAS]
    c = shapes.cells(pd.concat([base[base["scheduler"].isin(bl)], own]), bl, [TOPAS])
    return c.assign(scheduler=name)


def against_topas(base: pd.DataFrame, runs: pd.DataFrame, name: str) -> pd.DataFrame:
    """Per (shape, load): the variant's paired change of mean JCT against TOPAS, its CI and verdict."""
    rows = []
    ours = runs[runs["scheduler"] == TOPAS].assign(scheduler=name)
    both = pd.concat([base[base["scheduler"] == TOPAS], ours])
    for (w, load), g in both.groupby(["workload", "load"], sort=False):
        if name not in set(g["scheduler"]):
            continue
        change, ci, n = tables.paired_change(g, w, "jct_mean", name, TOPAS)
        rows.append({"workload": w, "load": float(load), "vs topas": change, "ci": ci,
                     "verdict": shapes.verdict(change, ci, n)})
    return pd.DataFrame(rows)


def common_cells(base: pd.DataFrame, variants: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The runs of the (shape, load) cells every variant has: geometric means over different cells do not compare."""
    keys = set(zip(base["workload"], base["load"]))
    for v in variants.values():
        keys &= set(zip(v["workload"], v["load"]))

    def keep(df: pd.DataFrame) -> pd.DataFrame:
        return df[[k in keys for k in zip(df["workload"], df["load"])]]

    return keep(base), {n: keep(v) for n, v in variants.items()}


def compare(base: pd.DataFrame, variants: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(standings of TOPAS and each variant against the best baseline, per-cell table of their ratios to it and
    each variant's change against TOPAS)."""
    bl = baselines_of(base)
    base, variants = common_cells(base, variants)
    if base.empty:
        raise ValueError("no (shape, load) cell is common to the design sample and every variant")
    cells = [shapes.cells(base, bl, [TOPAS])] + [variant_cells(base, v, n, bl) for n, v in variants.items()]
    allc = pd.concat(cells)
    standing = shapes.standings(allc)
    wide = allc.pivot_table(index=["shape", "load"], columns="scheduler", values="ratio")
    wide = wide[[TOPAS, *variants]].rename(columns=lambda s: f"{s} / best")
    for n, v in variants.items():
        vs = against_topas(base, v, n)
        if vs.empty:
            continue
        vs["shape"] = vs["workload"].str.removeprefix("shape_")
        wide = wide.join(vs.set_index(["shape", "load"])[["vs topas", "verdict"]]
                         .rename(columns={"vs topas": f"{n} vs topas", "verdict": f"{n} verdict"}))
    return standing, wide.reset_index()


def envelope(wide: pd.DataFrame) -> pd.Series:
    """Per cell of `compare`'s table: the best ratio to the best baseline among TOPAS and the variants, each by its
    mean over seeds. What choosing the variant cell by cell would give (optimistic: the choice reads the same
    seeds it is scored on); a geometric mean above a goal says no choice among them reaches it."""
    return wide[[c for c in wide.columns if c.endswith(" / best")]].min(axis=1)


def headroom(base: pd.DataFrame) -> pd.DataFrame:
    """Per (shape, load): the mean over seeds of the best mean JCT of any scheduler run in that seed (TOPAS and
    the references included), over the best baseline's mean. An optimistic bound of what choosing among today's
    policies could give (per seed, it also picks noise); a geometric mean below it needs a better policy than all."""
    bl = baselines_of(base)
    rows = []
    for (_, load), g in shapes.with_shapes(base).groupby(["workload", "load"], sort=False):
        per_seed = g.pivot_table(index="seed", columns="scheduler", values="jct_mean").min(axis=1)
        best = g[g["scheduler"].isin(bl)].groupby("scheduler")["jct_mean"].mean().min()
        rows.append({"shape": g["shape"].iloc[0], "load": float(load), "best of all / best baseline": per_seed.mean() / best})
    return pd.DataFrame(rows).sort_values(["shape", "load"], key=shapes.natural_order).reset_index(drop=True)


def passing_cells(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (shape, load) of runs with an `entries_passing` column (analysis.stage_waits): TOPAS's mean JCT over the
    best baseline's (the reference rows left out), that baseline, and the mean `entries_passing` of each. With
    `entry_wait_s` and `in_progress_s` columns (stage_waits.jct_split) too: TOPAS's less the best's of each, as a
    share of the best's mean JCT (the two add up to TOPAS / best - 1)."""
    bl = baselines_of(runs)
    split = [c for c in SPLIT if c in runs]
    rows = []
    for (w, load), g in runs.groupby(["workload", "load"], sort=False):
        best = tables.best_baseline(g, w, "jct_mean", bl)
        if best is None or TOPAS not in set(g["scheduler"]):
            continue
        by = g.groupby("scheduler")[["jct_mean", "entries_passing", *split]].mean()
        row = {"shape": w.removeprefix("shape_"), "load": float(load),
               "topas / best": by.at[TOPAS, "jct_mean"] / by.at[best, "jct_mean"], "best": best,
               "topas passing": by.at[TOPAS, "entries_passing"], "best passing": by.at[best, "entries_passing"]}
        for c in split:
            row[SPLIT[c]] = (by.at[TOPAS, c] - by.at[best, c]) / by.at[best, "jct_mean"]
        rows.append(row)
    return pd.DataFrame(rows)


def passing_summary(cells: pd.DataFrame, margin: float = 0.02) -> pd.DataFrame:
    """The cells in three groups by TOPAS / best (behind by more than `margin`, within it, ahead by more), with
    the mean `entries_passing` of TOPAS and of each cell's best baseline (docs/decisions/0049), and the mean
    changes of the JCT's two parts where `cells` has them (docs/decisions/0050)."""
    ratio = cells["topas / best"]
    groups = {f"TOPAS behind by more than {margin:.0%}": ratio > 1 + margin,
              f"within {margin:.0%}": (ratio >= 1 - margin) & (ratio <= 1 + margin),
              f"TOPAS ahead by more than {margin:.0%}": ratio < 1 - margin}
    means = ["topas passing", "best passing", *(c for c in SPLIT.values() if c in cells)]
    return pd.DataFrame([{"cells": name, "count": int(m.sum()), **{c: cells.loc[m, c].mean() for c in means}}
                         for name, m in groups.items()])


def with_variants(base: pd.DataFrame, base_dir: str, topas_dir: str | None, variant_dirs: list[str],
                  experiment: str) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The base runs, with TOPAS's own taken from `topas_dir` when given, and each variant folder's runs by name
    (the folder's name less "design_" / "overload_", its path where two would share one). Exits with one line
    naming a folder without TOPAS runs; `experiment`: the conf/experiment that makes the base runs, for that line."""
    if topas_dir:
        own = load_runs(topas_dir)
        base = pd.concat([base[base["scheduler"] != TOPAS], own[own["scheduler"] == TOPAS]])
    if base.empty or TOPAS not in set(base["scheduler"]):
        sys.exit(f"error: no TOPAS runs under {base_dir} (python run.py -m +experiment={experiment} hydra/launcher=local)")
    variants = {}
    for d, name in zip(variant_dirs, folder_labels(variant_dirs, strip=("design_", "overload_"))):
        runs = load_runs(d)
        if runs.empty or TOPAS not in set(runs["scheduler"]):
            sys.exit(f"error: no TOPAS runs under {d}")
        variants[name] = runs
    return base, variants


def _display_cells(wide: pd.DataFrame) -> pd.DataFrame:
    out = wide.copy()
    for c in out.columns:
        if c.endswith("/ best"):
            out[c] = [f"{v:.3f}" if v == v else "n/a" for v in out[c]]
        elif c.endswith("vs topas"):
            out[c] = [display.fmt_value(v) for v in out[c]]
    return out.sort_values(["shape", "load"], key=shapes.natural_order)


def _print_passing(base: pd.DataFrame, base_dir: str) -> None:
    """`--passing`: the correlation, the grouped cells, then every cell (worst TOPAS / best last)."""
    from analysis.stage_waits import with_order_measures

    base = base[~base["scheduler"].isin(REFERENCES)]  # never a best baseline: their requests are not read
    cells = passing_cells(with_order_measures(base))
    if cells.empty:
        sys.exit(f"error: no cell with TOPAS and a baseline under {base_dir}")
    corr = cells["topas / best"].corr(cells["topas passing"] - cells["best passing"])
    print(f"correlation of TOPAS / best with TOPAS's passing less the best's: {corr:.2f}")
    print(display.to_markdown(passing_summary(cells).round(3)))
    print()
    print(display.to_markdown(cells.sort_values("topas / best").round(3)))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m analysis.design_sample", description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="*", help="runs folders of TOPAS variants on the design sample")
    ap.add_argument("--base", default=str(BASE), help="the design sample's runs (baselines and TOPAS)")
    ap.add_argument("--topas", help="TOPAS's own runs of the sample, made apart (e.g. on today's code), in place of "
                                     "those under --base")
    ap.add_argument("--headroom", action="store_true", help="print, per cell, the per-seed best of every scheduler "
                                                              "against the best baseline, and its geometric means")
    ap.add_argument("--passing", action="store_true", help="print, per cell, how often TOPAS and the best baseline "
                                                             "start a task while a started task's call waits")
    args = ap.parse_args(argv)
    base = load_runs(args.base)
    if args.passing:
        _print_passing(base, args.base)
        return
    if args.headroom:
        h = headroom(base)
        col = h["best of all / best baseline"]
        print(f"geometric mean {shapes.geomean(col):.3f}, loads >= 0.8: {shapes.geomean(col[h['load'] >= 0.8]):.3f}")
        print(display.to_markdown(h.assign(**{col.name: [f"{v:.3f}" for v in col]})))
        return
    base, variants = with_variants(base, args.base, args.topas, args.variants, "design_shapes")
    try:
        standing, wide = compare(base, variants)
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(display.to_markdown(shapes.standings_display(standing)))
    if variants:
        env, high = envelope(wide), wide["load"] >= 0.8
        print(f"\nthe per-cell best of TOPAS and the variants / best baseline: geometric mean {shapes.geomean(env):.3f}, "
              f"loads >= 0.8: {shapes.geomean(env[high]):.3f}, cells above 1.03: {int((env > 1.03).sum())}")
    print()
    print(display.to_markdown(_display_cells(wide)))


if __name__ == "__main__":
    main(sys.argv[1:])
