"""Tables: JCT per workload x scheduler, reductions vs the best baseline, claims with verdicts.

Statistics over seeds: mean and a 95% Student-t confidence interval. A reduction is
computed per seed, paired (TOPAS and the best baseline on the same trace), then averaged:
(TOPAS - best) / best. Verdicts (docs/protocol.md, `verdict`): *reproduced* when the CI excludes
zero on the paper's side and our mean is at least 2/3 of the paper's; *direction only* when the CI
is on the paper's side but the magnitude short; *contradicted* when the CI excludes zero on the other
side; *inconclusive* when the CI covers zero or fewer than 3 seeds pair. The figures use the same
`ci95` (analysis/figures.py) and draw no CI below 3 seeds either.

The computed frames stay numeric (figures and W&B read them); `claims_display`,
`main_display` and `breakdown_display` make the readable versions that are written out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from analysis.load import load_requests
from topas.scheduler_sets import baselines

CLAIMS = Path(__file__).resolve().parent / "paper_claims.yaml"
WORKLOAD_ORDER = ["chain3", "dag4", "dag10_wide", "metagpt_sop", "metagpt_tl"]
VERDICTS = ("reproduced", "direction only", "inconclusive", "contradicted")
MIN_SEEDS = 3  # fewer paired seeds: no verdict but inconclusive, no CI drawn
MAGNITUDE = 2 / 3  # our effect must reach this share of the paper's to count as reproduced


def verdict(ours: float, ci: float, n: int, paper: float) -> str:
    """One of VERDICTS for an effect `ours` +- `ci` over `n` seeds, the paper's effect being `paper`
    (its sign is the claimed direction)."""
    if n < MIN_SEEDS or math.isnan(ci) or math.isnan(ours):
        return "inconclusive"
    sign = -1.0 if paper < 0 else 1.0
    if sign * ours - ci > 0:
        return "reproduced" if sign * ours >= MAGNITUDE * abs(paper) else "direction only"
    return "contradicted" if sign * ours + ci < 0 else "inconclusive"


def verdict_at_most(ours: float, ci: float, n: int, paper: float) -> str:
    """A claim that a cost is at most the paper's (the decision overhead): reproduced when the CI lies at
    or below it, contradicted when above it."""
    if n < MIN_SEEDS or math.isnan(ci) or math.isnan(ours):
        return "inconclusive"
    return "reproduced" if ours + ci <= paper else "contradicted" if ours - ci > paper else "inconclusive"


def headline(v: pd.DataFrame, missing: Sequence[str] = ()) -> str:
    """'k of n claims reproduced, d direction only, m inconclusive, j contradicted', one verdict per claim:
    the row against the paper's baseline set (the full set's rows are in the table). `missing`: claims whose runs
    are absent, named so that a report made from part of the runs never passes for the whole."""
    absent = f"; not evaluated (no runs here): {', '.join(missing)}" if missing else ""
    if v.empty:
        return "no claims evaluated" + absent
    own = v[~v["baseline_set"].eq("full set")].drop_duplicates("claim")
    c = own["verdict"].value_counts()
    return (f"{c.get('reproduced', 0)} of {len(own)} claims reproduced, {c.get('direction only', 0)} direction only, "
            f"{c.get('inconclusive', 0)} inconclusive, {c.get('contradicted', 0)} contradicted{absent}")


def unevaluated(v: pd.DataFrame, claims: dict[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """The ids of the claims (less `skip`) that the verdicts `v` have no row for: their experiments' runs are absent."""
    have = set(v["claim"]) if not v.empty else set()
    return [c["id"] for c in claims["claims"] if c["id"] not in have and c["id"] not in skip]


def ci95(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return float("nan")
    return float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def mean_ci(df: pd.DataFrame, by: list[str], metric: str) -> pd.DataFrame:
    """Mean, 95% t-CI half-width and count of `metric` over seeds per `by` group."""
    g = df.groupby(by, observed=True)[metric]
    return pd.DataFrame({"mean": g.mean(), "ci": g.apply(lambda s: ci95(s.to_numpy())), "n": g.size()}).reset_index()


def load_claims(path: str | Path = CLAIMS) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text())


BOUND_METRICS = ("jct_over_bound_mean", "jct_over_bound_p99")


def jct_table(df: pd.DataFrame, metrics=("jct_mean", "jct_p99")) -> pd.DataFrame:
    """Mean and CI over seeds per (workload, scheduler), and the mean over seeds of JCT / bound
    (runs made before the bound existed: NaN)."""
    df = df.assign(**{m: pd.to_numeric(df[m], errors="coerce") if m in df else np.nan for m in BOUND_METRICS})
    g = df.groupby(["workload", "scheduler"])
    out = g[[*metrics, *BOUND_METRICS]].mean()
    for m in metrics:
        out[f"{m}_ci"] = g[m].apply(lambda s: ci95(s.to_numpy()))
    out["seeds"] = g.size()
    return out.reset_index()


def best_baseline(df: pd.DataFrame, workload: str, metric: str, baselines: list[str]) -> str | None:
    sub = df[(df["workload"] == workload) & df["scheduler"].isin(baselines)]
    if sub.empty:
        return None
    return sub.groupby("scheduler")[metric].mean().idxmin() if metric.startswith("jct") else sub.groupby("scheduler")[metric].mean().idxmax()


def paired_change(df: pd.DataFrame, workload: str, metric: str, a: str, b: str) -> tuple[float, float, int]:
    """Mean over seeds of (a - b) / b with its CI, pairing runs by seed."""
    sub = df[df["workload"] == workload]
    pa = sub[sub["scheduler"] == a].set_index("seed")[metric]
    pb = sub[sub["scheduler"] == b].set_index("seed")[metric]
    seeds = pa.index.intersection(pb.index)
    if len(seeds) == 0:
        return float("nan"), float("nan"), 0
    rel = ((pa[seeds] - pb[seeds]) / pb[seeds]).to_numpy(dtype=float)
    return float(rel.mean()), ci95(rel), len(seeds)


def reduction_rows(df: pd.DataFrame, claims: dict[str, Any], target: str = "topas", experiment: str = "main") -> pd.DataFrame:
    """Claims of kind reduction/increase whose source experiment is `experiment` (runs in `df`)."""
    rows = []
    sets = {"paper set": list(baselines("paper")), "full set": list(baselines("full"))}
    for c in claims["claims"]:
        if c["kind"] not in ("reduction", "increase") or c.get("experiment", "main") != experiment:
            continue
        if "arrival_rate" in c and len(df):
            df = df[np.isclose(df["arrival_rate"].astype(float), c["arrival_rate"])]
        bests = {name: best_baseline(df, c["workload"], c["metric"], b) for name, b in sets.items()}
        if bests["paper set"] == bests["full set"]:  # one row when both sets have the same best baseline
            bests = {"paper = full set": bests["paper set"]}
        for set_name, best in bests.items():
            if best is None or target not in set(df[df["workload"] == c["workload"]]["scheduler"]):
                continue
            ours, ci, n = paired_change(df, c["workload"], c["metric"], target, best)
            rows.append(claim_row(c, ours, ci, n, vs=best, baseline_set=set_name))
    return pd.DataFrame(rows)


def claim_row(c: dict[str, Any], ours: float, ci: float, n: int, vs: str, baseline_set: str = "", metric: str | None = None,
              workload: str | None = None, judged: str | None = None) -> dict[str, Any]:
    """A claim's row: ours beside the paper's and the verdict (`judged`, else `verdict` of ours)."""
    paper = c["paper"]
    return {
        "claim": c["id"], "workload": c.get("workload", "") if workload is None else workload,
        "metric": metric or c["metric"], "unit": c.get("unit", "change"), "baseline_set": baseline_set, "vs": vs,
        "paper": paper, "ours": ours, "ci95": ci, "seeds": n, "difference": ours - paper,
        "verdict": judged or verdict(ours, ci, n, paper),
    }


def ablation_rows(df: pd.DataFrame, claims: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for c in claims["claims"]:
        if c["kind"] != "ablation":
            continue
        ours, ci, n = paired_change(df, c["workload"], c["metric"], "topas", c["baseline"])
        rows.append(claim_row(c, ours, ci, n, vs=c["baseline"]))
    return pd.DataFrame(rows)


def time_breakdown(df: pd.DataFrame, schedulers: list[str]) -> pd.DataFrame:
    """Where the time goes, per workload and scheduler (mean over seeds): decode batch size,
    prefix hits, host swaps, prefill recompute, and per call the queueing delay (ready ->
    first admission) and the service time (first admission -> finish)."""
    rows = []
    for r in df[df["scheduler"].isin(schedulers)].itertuples():
        req = load_requests(r.run_dir)
        rows.append({
            "workload": r.workload, "scheduler": r.scheduler, "seed": r.seed, "jct_mean": r.jct_mean,
            "jct_over_bound_mean": getattr(r, "jct_over_bound_mean", np.nan),
            "mean_batch": r.mean_batch_size, "hit_rate": r.cache_hit_rate,
            "swap_in_GB": r.swap_in_bytes / 1e9, "swap_out_GB": r.swap_out_bytes / 1e9,
            "prefill_Mtok": r.prefill_tokens_computed / 1e6,
            "queue_s_per_call": float((req["first_admit"] - req["ready"]).mean()),
            "service_s_per_call": float((req["finish"] - req["first_admit"]).mean()),
        })
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.groupby(["workload", "scheduler"]).mean(numeric_only=True).drop(columns="seed").reset_index()
