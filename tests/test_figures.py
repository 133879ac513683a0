"""Figures and tables: one colour per scheduler everywhere, the tables' t-CI in the figures,
readable tables (percentages, yes/no, LaTeX tables with caption and label), and the report end
to end on a small run set."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.colors
import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.small_runs import shared_small_runs

from analysis import display, figures, style, tables

ROOT = Path(__file__).resolve().parents[1]


def test_scheduler_order_is_the_papers_set_then_the_registry_sorted():
    from topas.policy.registry import policy_names
    from topas.sweep import sweep_choices

    listed = yaml.safe_load((ROOT / "conf/experiment/load_sweep.yaml").read_text())["hydra"]["sweeper"]["params"]
    paper = sweep_choices("scheduler", listed["scheduler"])  # the paper's set, in the paper's order
    assert paper == ["fcfs", "lpm", "parrot_fcfs", "autellix_las", "spf", "topas"]
    order = style.scheduler_order()
    assert list(order[:len(paper)]) == paper
    assert list(order[len(paper):]) == sorted(set(policy_names()) - set(paper))
    assert set(order) == set(policy_names())
    assert len({style.color(s) for s in order}) == len(order)  # no two schedulers share a colour
    assert style.ordered(["topas", "fcfs"]) == ["fcfs", "topas"]


def _synthetic(n_seeds=3) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [{"workload": "dag4", "scheduler": s, "seed": k, "kv_pool_tokens": kv, "jct_mean": 50 + 10 * i + rng.normal(0, 5),
             "model": "qwen2_5_32b", "gpu": "a100_80gb", "load": 0.7, "arrival_rate": 0.1, "num_tasks": 100, "backend": "sim"}
            for i, s in enumerate(["topas", "fcfs"]) for kv in (16000, 30000) for k in range(n_seeds)]
    return pd.DataFrame(rows)


def test_figures_draw_the_tables_t_ci_in_the_scheduler_colours():
    df = _synthetic()
    fig = figures.kv_budget(df)
    ax = fig.axes[0]
    want = tables.mean_ci(df, ["scheduler", "kv_pool_tokens"], "jct_mean")
    for bars in ax.containers:
        sched = next(s for s in ("fcfs", "topas") if style.label(s) == bars.get_label())
        assert np.allclose(matplotlib.colors.to_rgb(bars.lines[0].get_color()), style.color(sched))
        halves = sorted(abs(seg[1][1] - seg[0][1]) / 2 for seg in bars.lines[2][0].get_segments())
        assert np.allclose(halves, sorted(want[want["scheduler"] == sched]["ci"]))
    assert "seeds 0-2 (n=3)" in fig.texts[-1].get_text() and "A100-80GB" in fig.texts[-1].get_text()


def test_one_row_when_paper_and_full_set_agree_and_readable_claims():
    claims = {"paper_baselines": ["fcfs"], "extra_baselines": ["spf"],
              "claims": [{"id": "dag4_mean", "kind": "reduction", "workload": "dag4", "metric": "jct_mean", "paper": -0.398}]}
    df = pd.DataFrame([{"workload": "dag4", "scheduler": s, "seed": k, "jct_mean": v + k}
                       for s, v in (("fcfs", 100.0), ("spf", 120.0), ("topas", 94.0)) for k in range(3)])
    rows = tables.reduction_rows(df, claims)
    assert len(rows) == 1 and rows.iloc[0]["baseline_set"] == "paper = full set"
    shown = display.claims_display(rows)
    assert shown.iloc[0]["paper"] == "-39.8%" and shown.iloc[0]["ours"].endswith("%")
    assert set(shown["direction reproduced"]) <= {"yes", "no"}
    tex = display.to_latex(shown, "Claims.", "claims")
    assert "\\begin{table}" in tex and "\\caption{Claims.}" in tex and "\\label{tab:claims}" in tex
    assert "True" not in tex and "False" not in tex and "\\%" in tex
    assert display.fmt_value(0.0031, "share") == "0.31%" and display.fmt_value(-0.0571) == "-5.7%"


def test_fidelity_table_has_a_latex_version():
    path = ROOT / "analysis/results/fidelity/fidelity.json"
    if not path.exists():
        pytest.skip("no fidelity results")
    tab = display.fidelity_display(json.loads(path.read_text()))
    assert len(tab) and "\\begin{table}" in display.to_latex(tab, "Fidelity.", "fidelity")


def test_report_end_to_end_on_a_small_run_set(tmp_path_factory, tmp_path):
    from analysis.report import report

    runs = shared_small_runs(tmp_path_factory)
    out = tmp_path / "results"
    verdicts, failed = report(out=out, runs_root=runs)
    assert failed.empty and not verdicts.empty
    pngs = {p.relative_to(out).as_posix() for p in out.rglob("*.png")}
    assert {"paper_vs_ours.png", "main_jct.png", "jct_cdf.png", "jct_vs_load.png", "kv_budget.png", "ablation.png",
            "motivation.png", "wallclock/overhead.png", "timeline_dag4.png", "timeline_metagpt_tl.png"} <= pngs
    claims = (out / "claims.md").read_text()
    assert "%" in claims and "True" not in claims and ("DESIGN" + ".md") not in claims  # the design lives in docs/
    for tex in out.rglob("*.tex"):
        assert "\\begin{table}" in tex.read_text() and "\\label{tab:" in tex.read_text()
