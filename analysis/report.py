"""Regenerate every table and figure from runs/ and print the claims with verdicts.

    python -m analysis.report                       # experiments main, load_sweep, ... (default grid)
    python -m analysis.report --suffix _quick --out analysis/results/quick
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import display, fidelity_status, figures, figures_cdf, provenance, regime, report_tables, shapes, tables
from analysis.figures_claims import paper_vs_ours
from analysis.load import ROOT, load_experiment
from topas.scheduler_sets import baselines

EXPERIMENTS = ("main", "load_sweep", "kv_budget", "ablation", "overhead", "motivation", "regime", "shapes")
WALLCLOCK_CLAIMS = ("overhead_ms", "overhead_fraction")


JCT_FIGURES = ("jct_mean", "jct_p50", "jct_p90", "jct_p99", "jct_max")


def _regeneration_sample(main: pd.DataFrame, out: Path) -> None:
    """One committed run per scheduler (its smallest workload, lowest seed): the saved config
    and its JCT figures, which tests/test_regeneration.py re-runs and compares exactly."""

    import yaml

    sample = {}
    order = {w: i for i, w in enumerate(tables.WORKLOAD_ORDER)}
    for sched, g in main.groupby("scheduler"):
        r = g.assign(_w=g["workload"].map(order).fillna(99), _n=g["num_tasks"]).sort_values(["_n", "_w", "seed"]).iloc[0]
        cfg = yaml.safe_load((Path(r["run_dir"]) / "config.yaml").read_text())
        cfg = {k: v for k, v in cfg.items() if k not in ("out_dir", "run_subdir", "sweep_manifest")}  # paths of this checkout
        sample[sched] = {"config": cfg, **{k: r[k] for k in JCT_FIGURES}}
    (out / "regeneration_sample.json").write_text(json.dumps(sample, indent=1, sort_keys=True) + "\n")


def _special_claims(runs: dict[str, pd.DataFrame], claims: dict[str, Any]) -> list[dict[str, Any]]:
    """The overhead claims (TOPAS's cost at most the paper's) and the motivation ratio (paired by seed)."""
    rows = []
    by_id = {c["id"]: c for c in claims["claims"]}
    ov = runs["overhead"]
    ov = ov[ov["scheduler"] == "topas"] if not ov.empty else ov
    if not ov.empty:
        paper_rate = ov[np.isclose(ov["arrival_rate"], 0.15)]
        for cid in WALLCLOCK_CLAIMS:
            c = by_id[cid]
            x = paper_rate[c["metric"]].to_numpy(dtype=float)
            ours, ci = (float(x.mean()) if len(x) else float("nan")), tables.ci95(x)
            rows.append(tables.claim_row(c, ours, ci, len(x), vs="", judged=tables.verdict_at_most(ours, ci, len(x), c["paper"])))
    mo = runs["motivation"]
    if not mo.empty and {"motivation_alternating", "motivation_grouped"} <= set(mo["workload"]):
        c = by_id["motivation_batch"]
        a = mo[mo["workload"] == "motivation_alternating"].set_index("seed")["mean_batch_size"]
        g = mo[mo["workload"] == "motivation_grouped"].set_index("seed")["mean_batch_size"]
        seeds = a.index.intersection(g.index)
        ratio = (a[seeds] / g[seeds]).to_numpy(dtype=float)
        ours, ci = float(ratio.mean()), tables.ci95(ratio)
        # a ratio below 1 is the claimed direction: judged as the change ratio - 1
        rows.append(tables.claim_row(c, ours, ci, len(seeds), vs="grouped", metric="batch ratio alternating/grouped",
                                     workload="two_agents", judged=tables.verdict(ours - 1, ci, len(seeds), c["paper"] - 1)))
    return rows


def log_to_wandb(figs: dict[str, Path], report_tables: dict[str, pd.DataFrame], mode: str, out: Path, group: str) -> None:
    """One W&B run (job_type report) with every figure and table (offline unless mode=online)."""
    import time

    import wandb

    name = f"report-{group}-{time.strftime('%Y%m%d-%H%M%S')}"  # a report per regeneration, never the same name
    with wandb.init(project="topas-harness", mode=mode, dir=str(out), name=name, group=group, job_type="report",
                    tags=["report"]) as run:
        run.log({f"figures/{k}": wandb.Image(str(p)) for k, p in figs.items()})
        run.log({f"tables/{k}": wandb.Table(dataframe=v.astype(str)) for k, v in report_tables.items() if not v.empty})


def load_all(names: dict[str, str] | None = None, root: Path | None = None) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """(experiment -> runs of its last sweep, every failed or missing run)."""
    names = {e: e for e in EXPERIMENTS} | (names or {})  # an experiment not named reads its default-grid runs
    empty = pd.DataFrame(columns=["experiment", "workload", "scheduler", "seed"])
    runs, lost = {}, []
    for e in EXPERIMENTS:
        r, f = load_experiment(names[e], root or ROOT / "runs")
        runs[e] = r if len(r) else empty
        lost.append(f)
    return runs, pd.concat(lost, ignore_index=True)


def claim_verdicts(runs: dict[str, pd.DataFrame], claims: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every claim the runs can answer, with its verdict (numeric; display.claims_display formats it)."""
    claims = claims or tables.load_claims()
    rows = [tables.reduction_rows(runs[e], claims, experiment=e) for e in ("main", "overhead") if not runs[e].empty]
    if not runs["ablation"].empty:
        rows.append(tables.ablation_rows(runs["ablation"], claims))
    rows.append(pd.DataFrame(_special_claims(runs, claims)))
    rows = [r for r in rows if not r.empty]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def make_figures(runs: dict[str, pd.DataFrame], verdicts: pd.DataFrame, claims: dict[str, Any] | None = None) -> dict:
    """name (path under the results folder, without .png) -> Figure, for every figure the runs allow."""
    claims = claims or tables.load_claims()
    main = runs["main"]
    timed = verdicts["claim"].isin(WALLCLOCK_CLAIMS) if not verdicts.empty else []
    figs = {
        "main_jct": figures.main_jct(main, claims), "jct_cdf": figures_cdf.jct_cdf(main, claims) if not main.empty else None,
        "bound_cdf": figures_cdf.bound_cdf(main) if not main.empty else None,
        "jct_vs_load": figures.jct_vs_load(runs["load_sweep"]), "kv_budget": figures.kv_budget(runs["kv_budget"]),
        "ablation": figures.ablation(runs["ablation"], claims), "wallclock/overhead": figures.overhead(runs["overhead"], claims),
        "motivation": figures.motivation(runs["motivation"], claims), "regime": regime.heatmap(runs["regime"]),
        # wall-clock claims change on every run: kept out of the committed summary
        "paper_vs_ours": paper_vs_ours(verdicts[~timed] if len(verdicts) else verdicts, main),
    }
    if not runs["shapes"].empty:
        figs["shapes"] = shapes.figure(shapes.cells(runs["shapes"], list(baselines("full")),
                                                    ["topas"]), runs["shapes"])
    if not main.empty:
        for w in ("metagpt_tl", "dag4"):
            best = tables.best_baseline(main, w, "jct_mean", list(baselines("paper")))
            if best:
                figs[f"timeline_{w}"] = figures.timeline(main, w, best)
    return {k: f for k, f in figs.items() if f is not None}


def write_claims(out: Path, t: report_tables.Target, verdicts: pd.DataFrame, missing: list[str],
                 runs: dict[str, pd.DataFrame], parts: list[tuple[str, str]]) -> pd.DataFrame:
    """claims.md: its head (every claim with its verdict; claims.tex too), then `parts` ((heading, text)), each
    kept from the claims.md it replaces where this report made none (no runs of its experiments here). The
    wall-clock claims go to wallclock/ instead (they differ on every run: not committed). Returns the shown
    claims table (empty without verdicts)."""
    claims_md, head, shown = out / "claims.md", "", pd.DataFrame()
    kept = display.split_sections(claims_md.read_text()) if claims_md.is_file() else {}
    if not verdicts.empty:
        timed = verdicts["claim"].isin(WALLCLOCK_CLAIMS)
        shown = report_tables.claims_table(verdicts[~timed], runs["main"], t, missing)
        head = claims_md.read_text()
        if timed.any():
            display.write_table(out / "wallclock", "claims_wallclock", display.claims_display(verdicts[timed]),
                                "The paper's overhead claims (wall clock, this machine)",
                                "Decision time of TOPAS in wall-clock milliseconds: machine-dependent, so not committed.")
    display.assemble_sections(claims_md, [("", head), *parts], kept)
    return shown


def report(names: dict[str, str] | None = None, out: str | Path = ROOT / "analysis" / "results", runs_root: Path | None = None,
           wandb_mode: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    import matplotlib

    matplotlib.use("Agg")  # a batch job: never open a window
    names = names or {e: e for e in EXPERIMENTS}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = report_tables.Target(out, report_tables.grid_of(names["main"]))
    runs, failed = load_all(names, runs_root)
    claims = tables.load_claims()
    written: dict[str, pd.DataFrame] = {}
    main = runs["main"]
    if not main.empty:
        written["main_jct"] = report_tables.main_tables(main, failed[failed["experiment"] == names["main"]], t)
        _regeneration_sample(main, out)
        best = {tables.best_baseline(main, w, "jct_mean", list(baselines("paper"))) for w in set(main["workload"])}
        written["breakdown"] = report_tables.breakdown_table(main, sorted(best | {"topas", "fcfs"}), t)
    written["regime"] = report_tables.regime_table(runs["regime"], t)
    verdicts = claim_verdicts(runs, claims)
    missing = tables.unevaluated(verdicts, claims, skip=WALLCLOCK_CLAIMS)
    shape_cells, shape_standings = shapes.write(runs["shapes"], t, list(baselines("full")))
    if not shape_cells.empty:
        written["shapes"] = shapes.cell_table(shape_cells)
    written["fidelity"] = report_tables.fidelity_table(out, t)
    fidelity = fidelity_status.status(out)  # is fidelity.json the current code's? never silently stale
    provenance.record(out, {e: provenance.entry(r) for e, r in runs.items() if not r.empty})
    made_by = provenance.status(out, EXPERIMENTS)  # which code made each experiment's tables: never silently stale
    written["claims"] = write_claims(out, t, verdicts, missing, runs, [
        (report_tables.REGIME_HEADING, report_tables.regime_section(runs["regime"])),
        (shapes.CLAIMS_HEADING, shapes.claims_section(shape_cells, shape_standings)),
        (fidelity_status.CLAIMS_HEADING, fidelity_status.claims_section(fidelity) if fidelity else ""),
        (provenance.CLAIMS_HEADING, provenance.claims_section(made_by) if made_by else "")])
    figs = {k: figures.save(f, out / f"{k}.png") for k, f in make_figures(runs, verdicts, claims).items()}
    report_tables.failed_table(failed, t)
    print_summary(verdicts, missing)
    if fidelity:
        print(f"Simulator fidelity: {fidelity}")
    for e, text in made_by.items():
        if not text.startswith("made on this code"):
            print(f"{e}: {text}")
    if not failed.empty:
        print(f"{len(failed)} run(s) failed or are missing and are left out: {out / 'failed_runs.md'}")
    print("figures: " + ", ".join(f"{k}.png" for k in figs))
    if wandb_mode:
        log_to_wandb(figs, {k: v for k, v in written.items() if not v.empty}, wandb_mode, out,
                     group=names["main"].replace("main", "report", 1))
    return verdicts, failed


def print_summary(v: pd.DataFrame, missing: list[str]) -> None:
    """The claims table and the headline; `missing`: the claims without runs (`tables.unevaluated`)."""
    if v.empty:
        print("no claims evaluated (no runs found)")
        return
    print(display.claims_display(v)[["claim", "baselines", "vs", "paper", "ours", "95% CI", "seeds", "verdict"]]
          .to_string(index=False))
    print(tables.headline(v[~v["claim"].isin(WALLCLOCK_CLAIMS)], missing) + " (against the paper's baseline set)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suffix", default="", help="experiment-name suffix of the grid (e.g. _quick)")
    ap.add_argument("--out", default=str(ROOT / "analysis" / "results"))
    ap.add_argument("--wandb", choices=["offline", "online"], default=None,
                    help="also log every figure and table to one W&B run (job_type report)")
    a = ap.parse_args()
    _, failed = report({e: e + a.suffix for e in EXPERIMENTS}, a.out, wandb_mode=a.wandb)
    raise SystemExit(1 if len(failed) else 0)


if __name__ == "__main__":
    main()
