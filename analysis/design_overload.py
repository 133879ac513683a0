"""TOPAS variants past capacity on the paper's same-shape workloads, the second check of the development loop
(docs/protocol.md): the design sample holds 60-task runs of many shapes; this holds what it misses, Chain-3 and
DAG-4 at loads 1.1 and 1.3 with 80 and 200 tasks per run, where a longer queue makes throughput decide. Tuning
seeds only (100-109); issue 30's acceptance checks the same cells on the reporting seeds.

Each (workload, load, tasks) cell scores TOPAS and every variant against the cell's best baseline (paired by seed,
as analysis.shapes scores a shape), and every variant against TOPAS itself.

    python run.py -m +experiment=design_overload hydra/launcher=local             # baselines and TOPAS, once
    python run.py -m +experiment=design_overload scheduler=topas scheduler.params.<p>=<v> \\
        experiment_name=overload_<name> hydra/launcher=local                       # a variant
    python -m analysis.design_overload runs/overload_<name> [...] [--base runs/design_overload] [--topas runs/<folder>]
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from analysis import display, shapes, tables
from analysis.design_sample import TOPAS, with_variants
from analysis.load import ROOT, load_runs

BASE = ROOT / "runs" / "design_overload"
CELL = ["workload", "load", "num_tasks"]


def _against(g: pd.DataFrame, x: str, other: str) -> tuple[float, float, str]:
    """x's paired change of mean JCT against `other` in one cell, its CI and verdict."""
    change, ci, n = tables.paired_change(g, g["workload"].iloc[0], "jct_mean", x, other)
    return change, ci, shapes.verdict(change, ci, n)


def compare(base: pd.DataFrame, variants: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per cell of the base runs: the best baseline, TOPAS's and each variant's change against it (with its
    95% CI and verdict), and each variant's change against TOPAS with its CI (NaN where a variant lacks the cell)."""
    bl = sorted(set(base["scheduler"]) - {TOPAS} - set(shapes.REFERENCE))
    if not bl or TOPAS not in set(base["scheduler"]):
        raise ValueError("the base runs need TOPAS and at least one baseline")
    ours = pd.concat([v[v["scheduler"] == TOPAS].assign(scheduler=n) for n, v in variants.items()]) \
        if variants else base.iloc[:0]
    rows = []
    for key, g in pd.concat([base, ours]).groupby(CELL, sort=True):
        best = tables.best_baseline(g, key[0], "jct_mean", bl)
        if best is None or TOPAS not in set(g["scheduler"]):
            continue
        row = dict(zip(CELL, key), best=best)
        for x in (TOPAS, *variants):
            change, ci, verdict = _against(g, x, best) if x in set(g["scheduler"]) else (float("nan"),) * 2 + ("n/a",)
            row |= {f"{x} vs best": change, f"{x} ci": ci, f"{x} verdict": verdict}
            if x != TOPAS:
                change, ci, _ = _against(g, x, TOPAS) if x in set(g["scheduler"]) else (float("nan"),) * 3
                row |= {f"{x} vs topas": change, f"{x} vs topas ci": ci}
        rows.append(row)
    return pd.DataFrame(rows)


def _display(c: pd.DataFrame) -> pd.DataFrame:
    out = c.copy()
    for col in out.columns:
        ci = col.removesuffix(" vs best") + " ci" if col.endswith(" vs best") else col + " ci"
        if ci in out.columns:  # a change with its 95% CI
            out[col] = [display.fmt_value(v) + (f" ±{100 * e:.1f}" if e == e else "") for v, e in zip(out[col], out[ci])]
    return out.drop(columns=[c for c in out.columns if c.endswith(" ci")])


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m analysis.design_overload", description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="*", help="runs folders of TOPAS variants on these cells")
    ap.add_argument("--base", default=str(BASE), help="the baselines' and TOPAS's runs of these cells")
    ap.add_argument("--topas", help="TOPAS's own runs, made apart (e.g. on today's code), in place of those under --base")
    args = ap.parse_args(argv)
    base, variants = with_variants(load_runs(args.base), args.base, args.topas, args.variants, "design_overload")
    try:
        c = compare(base, variants)
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(display.to_markdown(_display(c)))


if __name__ == "__main__":
    main(sys.argv[1:])
