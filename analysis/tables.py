"""Tables: JCT per workload x scheduler, reductions vs the best baseline, claims with verdicts.

Statistics over seeds: mean and a 95% Student-t confidence interval. A reduction is
computed per seed, paired (TOPAS and the best baseline on the same trace), then averaged:
(TOPAS - best) / best. Verdicts (docs/protocol.md): *direction reproduced* when the CI
of the reduction excludes zero on the paper's side; *magnitude reproduced* when our mean
reduction is at least 2/3 of the paper's. The figures use the same `ci95` (analysis/figures.py).

The computed frames stay numeric (figures and W&B read them); `claims_display`,
`main_display` and `breakdown_display` make the readable versions that are written out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

CLAIMS = Path(__file__).resolve().parent / "paper_claims.yaml"
WORKLOAD_ORDER = ["chain3", "dag4", "dag10_wide", "metagpt_sop", "metagpt_tl"]


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


def jct_table(df: pd.DataFrame, metrics=("jct_mean", "jct_p99")) -> pd.DataFrame:
    """Mean and CI over seeds per (workload, scheduler)."""
    g = df.groupby(["workload", "scheduler"])
    out = g[list(metrics)].mean()
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
    sets = {"paper set": claims["paper_baselines"], "full set": claims["paper_baselines"] + claims["extra_baselines"]}
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
            rows.append(_verdict(c, ours, ci, n, vs=best, baseline_set=set_name))
    return pd.DataFrame(rows)


def _verdict(c: dict[str, Any], ours: float, ci: float, n: int, vs: str, baseline_set: str = "") -> dict[str, Any]:
    paper = c["paper"]
    sign = -1 if paper < 0 else 1
    direction = bool(n >= 2 and not math.isnan(ci) and sign * ours - ci > 0)
    magnitude = bool(not math.isnan(ours) and sign * ours >= (2 / 3) * abs(paper))
    return {
        "claim": c["id"], "workload": c.get("workload", ""), "metric": c["metric"], "unit": c.get("unit", "change"),
        "baseline_set": baseline_set, "vs": vs,
        "paper": paper, "ours": ours, "ci95": ci, "seeds": n, "difference": ours - paper,
        "direction_reproduced": direction, "magnitude_reproduced": magnitude,
    }


def ablation_rows(df: pd.DataFrame, claims: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for c in claims["claims"]:
        if c["kind"] != "ablation":
            continue
        ours, ci, n = paired_change(df, c["workload"], c["metric"], "topas", c["baseline"])
        rows.append(_verdict(c, ours, ci, n, vs=c["baseline"]))
    return pd.DataFrame(rows)


def time_breakdown(df: pd.DataFrame, schedulers: list[str]) -> pd.DataFrame:
    """Where the time goes, per workload and scheduler (mean over seeds): decode batch size,
    prefix hits, host swaps, prefill recompute, and per call the queueing delay (ready ->
    first admission) and the service time (first admission -> finish)."""
    rows = []
    for r in df[df["scheduler"].isin(schedulers)].itertuples():
        req = pd.read_parquet(Path(r.run_dir) / "requests.parquet")
        rows.append({
            "workload": r.workload, "scheduler": r.scheduler, "seed": r.seed, "jct_mean": r.jct_mean,
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
