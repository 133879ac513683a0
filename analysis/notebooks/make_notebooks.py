"""Write the analysis notebooks (one per experiment) and, with --execute, run them so they are
committed with their outputs (tables and figures inline):

    python analysis/notebooks/make_notebooks.py --execute

Each notebook has a papermill-style cell tagged `parameters` (RUNS_ROOT, SUFFIX, SAVE_DIR):
    papermill analysis/notebooks/main_comparison.ipynb out.ipynb -p SUFFIX _quick
(or edit the cell). Without runs it shows the committed figures of analysis/results/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PARAMETERS = """# parameters (papermill: -p NAME VALUE)
RUNS_ROOT = None  # folder of the run outputs; None: <repo>/runs
SUFFIX = ""  # experiment-name suffix of the grid: "" (default grid), "_quick", "_full"
SAVE_DIR = None  # also save each figure as PNG here; None: only show it
"""
SETUP = """%matplotlib inline
from pathlib import Path

import IPython.display
from IPython.display import Image, Markdown

from analysis import display, figures, style, tables
from analysis.figures_claims import paper_vs_ours
from analysis.load import ROOT
from analysis.report import claim_verdicts, load_all

RUNS = Path(RUNS_ROOT) if RUNS_ROOT else ROOT / "runs"
runs, failed = load_all({e: e + SUFFIX for e in ("main", "load_sweep", "kv_budget", "ablation", "overhead", "motivation")}, RUNS)
if len(failed):
    IPython.display.display(Markdown(f"**{len(failed)} run(s) failed or are missing** (left out): see failed_runs.md"))


def show(fig, name):
    \"\"\"Show a figure inline (and save it under SAVE_DIR); without runs, the committed PNG.\"\"\"
    if fig is None:
        png = ROOT / "analysis" / "results" / f"{name}.png"
        print(f"no runs under {RUNS} for this figure" + (": the committed one" if png.exists() else ""))
        return Image(str(png)) if png.exists() else None
    if SAVE_DIR:
        figures.save(fig, Path(SAVE_DIR) / f"{name}.png")
    return fig
"""
NOTEBOOKS = {
    "main_comparison": ("Main comparison: JCT per workload and scheduler, and the paper's claims", [
        """df = runs["main"]
print(f"{len(df)} runs of main{SUFFIX}: {style.caption(df)}")
display.main_display(tables.jct_table(df)) if len(df) else None""",
        """verdicts = claim_verdicts(runs)
display.claims_display(verdicts) if len(verdicts) else None""",
        'show(paper_vs_ours(verdicts[~verdicts["claim"].isin(["overhead_ms", "overhead_fraction"])] '
        'if len(verdicts) else verdicts, df), "paper_vs_ours")',
        'show(figures.main_jct(df) if len(df) else None, "main_jct")',
        'show(figures.jct_cdf(df) if len(df) else None, "jct_cdf")',
        """best = tables.best_baseline(df, "metagpt_tl", "jct_mean", tables.load_claims()["paper_baselines"]) if len(df) else None
show(figures.timeline(df, "metagpt_tl", best) if best else None, "timeline_metagpt_tl")""",
    ]),
    "load_sweep": ("Mean JCT vs offered load", ['show(figures.jct_vs_load(runs["load_sweep"]), "jct_vs_load")']),
    "kv_budget": ("KV-cache budget sensitivity", ['show(figures.kv_budget(runs["kv_budget"]), "kv_budget")']),
    "ablation": ("Ablation on MetaGPT-TL", [
        """df = runs["ablation"]
display.claims_display(tables.ablation_rows(df, tables.load_claims())) if len(df) else None""",
        'show(figures.ablation(df), "ablation")',
    ]),
    "overhead": ("TOPAS decision overhead (wall clock)", [
        """df = runs["overhead"]
df[["arrival_rate", "seed", "decision_ms_mean", "decision_ms_p99", "decision_overhead_fraction"]] if len(df) else None""",
        'show(figures.overhead(df), "wallclock/overhead")',
    ]),
    "motivation": ("Motivation: alternating agents shrink the batch", [
        """df = runs["motivation"]
df[["workload", "seed", "mean_batch_size", "makespan_s"]] if len(df) else None""",
        'show(figures.motivation(df), "motivation")',
    ]),
}


def build(name: str, title: str, cells: list[str]) -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    params = nbf.v4.new_code_cell(PARAMETERS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbf.v4.new_markdown_cell(f"# {title}\n\nRegenerated from the run outputs (`runs/`, `make reproduce`) "
                                         "with the report's code (analysis/). Parameters below; re-run with *Run All*."),
                params, nbf.v4.new_code_cell(SETUP), *[nbf.v4.new_code_cell(c) for c in cells]]
    for i, c in enumerate(nb.cells):  # stable ids: regenerating does not churn the diff
        c["id"] = f"{name}-{i}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def execute(nb: nbf.NotebookNode, timeout: int = 600) -> nbf.NotebookNode:
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--execute", action="store_true", help="run each notebook on runs/ and save it with its outputs")
    a = ap.parse_args()
    for name, (title, cells) in NOTEBOOKS.items():
        nb = build(name, title, cells)
        nbf.write(execute(nb) if a.execute else nb, HERE / f"{name}.ipynb")
        print("wrote", name)


if __name__ == "__main__":
    main()
