"""The regime map: its grid expands to the intended cells, and its table and heatmap are right on
a synthetic run set (best baseline per cell, paired change as claims.md, win / loss marks) and
work end to end on a few tiny simulator runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from helpers.small_runs import BASE, ROOT

from analysis import regime, tables
from analysis.report_tables import Target, regime_table

WORKLOADS = ["chain3", "dag4", "dag10_wide", "metagpt_sop", "metagpt_tl"]
LOADS = ["0.5", "0.7", "0.9", "1.1", "1.3"]


def _fields(job: list[str]) -> dict[str, str]:
    return dict(o.lstrip("+").split("=", 1) for o in job if "=" in o)


def test_full_grid_is_every_load_cell_plus_the_papers_rates_on_the_host_pool_cube():
    from topas.reproduce import sweep_overrides
    from topas.sweep import compose_config, expand

    jobs = [_fields(j) for j in expand(sweep_overrides("regime", "full", "sim", [], Path("/tmp/regime")))]
    cells = {f"{w}_load{ld}" for w in WORKLOADS for ld in LOADS} | {"metagpt_sop_paper", "metagpt_tl_paper"}
    assert {j["regime_point"] for j in jobs} == cells
    assert {j["backend.host_cache_ratio"] for j in jobs} == {"2.0", "0"}
    assert {j["backend.mem_fraction_static"] for j in jobs} == {"null", "0.875"}
    assert {j["scheduler"] for j in jobs} == {"parrot_fcfs", "spf", "lpm", "phase_batch", "topas", "phase_batch_nolimit"}
    assert len(jobs) == len(cells) * 2 * 2 * 6 * 10  # seeds 0-9, nothing doubled
    assert len({tuple(sorted(j.items())) for j in jobs}) == len(jobs)
    # a cell sets exactly one of load / arrival_rate, and picks its workload
    paper = compose_config(["+experiment=regime", "+regime_point=metagpt_tl_paper"]).workload
    assert (paper.name, paper.load, paper.arrival_rate) == ("metagpt_tl", None, 0.0175)
    load = compose_config(["+experiment=regime", "+regime_point=dag4_load1.3"]).workload
    assert (load.name, load.load, load.arrival_rate, load.num_tasks) == ("dag4", 1.3, None, 200)
    for grid in ("quick", "default"):  # the reduced grids keep the cube and the paired baselines
        small = [_fields(j) for j in expand(sweep_overrides("regime", grid, "sim", [], Path("/tmp/regime")))]
        assert {j["regime_point"] for j in small} < cells and "topas" in {j["scheduler"] for j in small}
        assert {j["backend.host_cache_ratio"] for j in small} == {"2.0", "0"} and len({j["seed"] for j in small}) >= 2


def _synthetic() -> pd.DataFrame:
    """dag4 at two loads and SOP at its paper rate, host on/off; TOPAS's offset per cell is known."""
    rng = np.random.default_rng(1)
    base = {"parrot_fcfs": 100.0, "spf": 104.0, "lpm": 130.0, "phase_batch": 101.0}
    offset = {("dag4", "0.5", 2.0): -0.10, ("dag4", "1.3", 2.0): 0.12, ("dag4", "0.5", 0.0): 0.0,
              ("dag4", "1.3", 0.0): -0.2, ("metagpt_sop", "paper", 2.0): 0.05, ("metagpt_sop", "paper", 0.0): 0.0}
    rows = []
    for (w, point, host), off in offset.items():
        for k in range(4):
            noise = rng.normal(0, 1.0)
            for s, v in {**base, "topas": 100.0 * (1 + off)}.items():
                # phase batching is the best baseline in the host-off cells
                v = v - 5 if s == "phase_batch" and host == 0.0 else v
                rows.append({"workload": w, "scheduler": s, "seed": k, "jct_mean": v + noise, "jct_p99": 2 * v + noise,
                             "load": np.nan if point == "paper" else float(point),
                             "arrival_rate": 0.15 if point == "paper" else 0.1, "host_cache_ratio": host,
                             "mem_fraction_static": None, "kv_pool_tokens": 22035, "model": "qwen2_5_32b",
                             "gpu": "a100_80gb", "num_tasks": 60, "backend": "sim"})
    return pd.DataFrame(rows)


def test_cells_pick_the_best_baseline_and_pair_by_seed_as_claims_do():
    df = _synthetic()
    c = regime.cells(df).set_index(["workload", "host", "point"])
    assert len(c) == 6 and list(c.index.get_level_values("workload")[:4]) == ["dag4"] * 4  # WORKLOAD_ORDER
    assert c.loc[("dag4", "on", "0.5"), "jct_mean_best"] == "parrot_fcfs"
    assert c.loc[("dag4", "off", "0.5"), "jct_mean_best"] == "phase_batch"
    assert c.loc[("dag4", "on", "0.5"), "jct_mean_verdict"] == "win"
    assert c.loc[("dag4", "on", "1.3"), "jct_mean_verdict"] == "loss"
    # the same function as claims.md, on the cell's runs
    cell = df[(df["load"] == 1.3) & (df["host_cache_ratio"] == 2.0)]
    want = tables.paired_change(cell, "dag4", "jct_mean", "topas", "parrot_fcfs")
    got = c.loc[("dag4", "on", "1.3")]
    assert np.isclose(got["jct_mean_change"], want[0]) and np.isclose(got["jct_mean_ci"], want[1])
    assert got["jct_mean_seeds"] == 4 and not np.isnan(got["jct_p99_change"])
    tab = regime.readable_table(regime.cells(df))
    assert "paper: 0.15 task/s" in set(tab["load"]) and "phase batching" in set(tab["best for mean JCT"])


def test_heatmap_marks_wins_losses_and_phase_batching(tmp_path):
    df = _synthetic()
    fig = regime.heatmap(df)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert any(t.endswith("▼") for t in texts) and any(t.endswith("▲") for t in texts)
    assert any("†" in t for t in texts)  # host off: phase batching is the best baseline
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1.3", "paper rate"]
    assert len(ax.get_yticklabels()) == 4  # (dag4, SOP) x host on/off
    caption = fig.texts[-1].get_text()
    assert "no steady state" in caption and "60 tasks" in caption and "A100-80GB" in caption
    target = Target(tmp_path, "full")
    assert regime_table(df, target).shape[0] == 6
    tex = (tmp_path / "regime.tex").read_text()
    assert (tmp_path / "regime.md").exists() and "\\begin{table*}" in tex and "\\label{tab:full:regime}" in tex
    assert regime.heatmap(df[df["scheduler"] != "topas"]) is None and regime_table(df.iloc[:0], target).empty


def test_regime_table_and_heatmap_from_tiny_simulator_runs(tmp_path):
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)
    from analysis.figures import save
    from analysis.load import load_experiment
    from topas.runner import run

    runs = tmp_path / "regime"
    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        for cell in ("dag4_load0.5", "metagpt_sop_paper"):
            for host in ("2.0", "0"):
                for s in ("parrot_fcfs", "topas"):
                    for k in (0, 1):
                        cfg = compose(config_name="config", overrides=[
                            "+experiment=regime", *BASE, f"+regime_point={cell}", f"backend.host_cache_ratio={host}",
                            f"scheduler={s}", f"seed={k}", "workload.num_tasks=5"])
                        run(cfg, out_dir=runs / cfg.run_subdir, quiet=True)
    df, failed = load_experiment("regime", tmp_path)
    assert len(df) == 16 and failed.empty
    tab = regime_table(df, Target(tmp_path / "out"))
    assert len(tab) == 4 and set(tab["host tier"]) == {"on", "off"}
    assert save(regime.heatmap(df), tmp_path / "out" / "regime.png").stat().st_size > 0


def test_verdict_summary_counts_and_names_the_cells_won_and_lost():
    s = regime.verdict_summary(regime.cells(_synthetic())).set_index("workload")
    dag4 = s.loc["DAG-4"]
    # host off: phase batching (-5) is the best, so the unchanged TOPAS loses at 0.5 and wins at 1.3 (-20%)
    assert (dag4["cells"], dag4["wins"], dag4["ties"], dag4["losses"]) == (4, 2, 0, 2)
    assert "1.3, host on" in dag4["TOPAS loses"] and "0.5, host on" in dag4["TOPAS wins"]
    assert s.loc["MetaGPT-SOP", "cells"] == 2


def test_a_reference_row_is_compared_with_topas_beside_the_best_baseline_and_is_never_the_best():
    df = _synthetic()
    topas = df[df["scheduler"] == "topas"]
    # the reference: 10% below TOPAS in the SOP cells, far above it (so never a candidate for best) elsewhere
    sop = topas["workload"] == "metagpt_sop"
    ref = topas.assign(scheduler="phase_batch_nolimit",
                       jct_mean=np.where(sop, topas["jct_mean"] * 0.9, topas["jct_mean"] * 1.5 + 50))
    c = regime.cells(pd.concat([df, ref])).set_index(["workload", "host", "point"])
    sop_cell, dag4_cell = c.loc[("metagpt_sop", "on", "paper")], c.loc[("dag4", "on", "0.5")]
    assert sop_cell["jct_mean_best"] != "phase_batch_nolimit"  # a reference is shown, never the best baseline
    assert sop_cell["phase_batch_nolimit_verdict"] == "loss" and dag4_cell["phase_batch_nolimit_verdict"] == "win"
    cell = pd.concat([df, ref])
    cell = cell[(cell["workload"] == "metagpt_sop") & (cell["host_cache_ratio"] == 2.0)]
    want = tables.paired_change(cell, "metagpt_sop", "jct_mean", "topas", "phase_batch_nolimit")
    assert np.isclose(sop_cell["phase_batch_nolimit_change"], want[0])
    tab = regime.readable_table(regime.cells(pd.concat([df, ref])))
    assert "mean JCT: TOPAS vs phase batching (no limit) verdict" in tab.columns
    summary = regime.verdict_summary(regime.cells(pd.concat([df, ref]))).set_index("workload")
    assert summary.loc["MetaGPT-SOP", "vs phase batching (no limit)"].startswith("0 / 0 / 2; worst paper")
    assert summary.loc["DAG-4", "vs phase batching (no limit)"].startswith("4 / 0 / 0")
    texts = [t.get_text() for t in regime.heatmap(pd.concat([df, ref])).axes[0].texts]
    assert sum("‡" in t for t in texts) == 2  # the two SOP cells, where the reference beats TOPAS
    assert not any("‡" in t for t in (x.get_text() for x in regime.heatmap(df).axes[0].texts))
    # without reference runs, no reference columns
    assert "phase_batch_nolimit_change" not in regime.cells(df) and "vs phase batching (no limit)" not in regime.verdict_summary(regime.cells(df))
