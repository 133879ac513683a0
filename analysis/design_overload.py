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
import math
import sys

import pandas as pd

from analysis import display, shapes, tables
from analysis.design_sample import TOPAS, baselines_of, with_variants
from analysis.load import ROOT, load_runs
from topas.scheduler_sets import REFERENCES

BASE = ROOT / "runs" / "design_overload"
CELL = ["workload", "load", "num_tasks"]


def _against(g: pd.DataFrame, present: set[str], x: str, other: str) -> tuple[float, float, str]:
    """x's paired change of mean JCT against `other` in one cell, its CI and verdict; NaN and n/a when x has no
    runs there (`present`: the cell's schedulers)."""
    if x not in present:
        return math.nan, math.nan, "n/a"
    change, ci, n = tables.paired_change(g, g["workload"].iloc[0], "jct_mean", x, other)
    return change, ci, shapes.verdict(change, ci, n)


def compare(base: pd.DataFrame, variants: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per cell of the base runs: the best baseline, TOPAS's and each variant's change against it (with its
    95% CI and verdict), each variant's change against TOPAS with its CI (NaN where a variant lacks the cell), and,
    where the cell has a reference row's runs (`phase_batch_nolimit`), TOPAS's and each variant's change against it."""
    bl = baselines_of(base)
    if not bl or TOPAS not in set(base["scheduler"]):
        raise ValueError("the base runs need TOPAS and at least one baseline")
    ours = [v[v["scheduler"] == TOPAS].assign(scheduler=n) for n, v in variants.items()]
    rows = []
    for key, g in pd.concat([base, *ours]).groupby(CELL, sort=True):
        present = set(g["scheduler"])
        best = tables.best_baseline(g, key[0], "jct_mean", bl)
        if best is None or TOPAS not in present:
            continue
        row = dict(zip(CELL, key), best=best)
        refs = [r for r in REFERENCES if r in present]  # reference rows: shown beside, never the best
        for x in (TOPAS, *variants):
            change, ci, verdict = _against(g, present, x, best)
            row |= {f"{x} vs best": change, f"{x} vs best ci": ci, f"{x} verdict": verdict}
            if x != TOPAS:
                change, ci, _ = _against(g, present, x, TOPAS)
                row |= {f"{x} vs topas": change, f"{x} vs topas ci": ci}
            for ref in refs:
                change, ci, _ = _against(g, present, x, ref)
                row |= {f"{x} vs {ref}": change, f"{x} vs {ref} ci": ci}
        rows.append(row)
    return pd.DataFrame(rows)


def _display(c: pd.DataFrame) -> pd.DataFrame:
    """Each change with its 95% CI in one column."""
    out = c.copy()
    for col in out.columns:
        if col + " ci" in out.columns:
            out[col] = [f"{display.fmt_value(v)} {display.fmt_ci(e)}" for v, e in zip(out[col], out[col + " ci"])]
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
