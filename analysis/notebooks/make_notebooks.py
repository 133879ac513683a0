"""Write the analysis notebooks (one per experiment, and the regime map), without outputs: a
notebook shows the runs it is pointed at, never a stale or committed picture.

    python analysis/notebooks/make_notebooks.py                    # (re)write the notebooks
    python analysis/notebooks/make_notebooks.py --execute          # also run each on runs/ -> analysis/results/notebooks/
    papermill analysis/notebooks/main_comparison.ipynb out.ipynb -p SUFFIX _quick   # one notebook on the quick grid

Each notebook has a papermill cell tagged `parameters` (RUNS_ROOT, SUFFIX, SAVE_DIR). Without runs of
its experiment under RUNS_ROOT it stops at its first cell with one line naming that folder
(analysis/notebook.py); tests/test_notebooks.py runs every notebook in `make test`.
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
from IPython.display import Markdown

from analysis import display, figures, figures_cdf, notebook, regime, style, tables
from analysis.figures_claims import paper_vs_ours
from analysis.report import WALLCLOCK_CLAIMS, claim_verdicts
from topas.scheduler_sets import baselines

runs, failed = notebook.load({needed!r}, RUNS_ROOT, SUFFIX)  # stops here, in one line, without runs
show = lambda fig, name: notebook.show(fig, name, SAVE_DIR)
Markdown(f"**{{len(failed)}} run(s) failed or are missing** (left out): see failed_runs.md") if len(failed) else None
"""
# name -> (title, the experiments it needs, its cells after the set-up)
NOTEBOOKS = {
    "main_comparison": ("Main comparison: JCT per workload and scheduler, and the paper's claims", ["main"], [
        """df = runs["main"]
print(f"{len(df)} runs of main{SUFFIX}: {style.caption(df)}")
display.main_display(tables.jct_table(df))""",
        """verdicts = claim_verdicts(runs)
print(tables.headline(verdicts[~verdicts["claim"].isin(WALLCLOCK_CLAIMS)]))
display.claims_display(verdicts)""",
        'show(paper_vs_ours(verdicts[~verdicts["claim"].isin(WALLCLOCK_CLAIMS)], df), "paper_vs_ours")',
        'show(figures.main_jct(df), "main_jct")',
        'show(figures_cdf.jct_cdf(df), "jct_cdf")',
        'show(figures_cdf.bound_cdf(df), "bound_cdf")',
        """best = tables.best_baseline(df, "metagpt_tl", "jct_mean", list(baselines("paper")))
show(figures.timeline(df, "metagpt_tl", best) if best else None, "timeline_metagpt_tl")""",
    ]),
    "load_sweep": ("Mean JCT vs offered load", ["load_sweep"], ['show(figures.jct_vs_load(runs["load_sweep"]), "jct_vs_load")']),
    "kv_budget": ("KV-cache budget sensitivity", ["kv_budget"], ['show(figures.kv_budget(runs["kv_budget"]), "kv_budget")']),
    "ablation": ("Ablation on MetaGPT-TL", ["ablation"], [
        """df = runs["ablation"]
display.claims_display(tables.ablation_rows(df, tables.load_claims()))""",
        'show(figures.ablation(df), "ablation")',
    ]),
    "overhead": ("TOPAS decision overhead (wall clock)", ["overhead"], [
        """df = runs["overhead"]
df[["arrival_rate", "seed", "decision_ms_mean", "decision_ms_p99", "decision_overhead_fraction"]]""",
        'show(figures.overhead(df), "overhead")',
    ]),
    "motivation": ("Motivation: alternating agents shrink the batch", ["motivation"], [
        """df = runs["motivation"]
df[["workload", "seed", "mean_batch_size", "makespan_s"]]""",
        'show(figures.motivation(df), "motivation")',
    ]),
    "regime": ("Regime map: where TOPAS wins, ties and loses", ["regime"], [
        """cells = regime.cells(runs["regime"])
regime.readable_table(cells)""",
        "regime.verdict_summary(cells)",
        'show(regime.heatmap(runs["regime"]), "regime")',
    ]),
}


def build(name: str, title: str, needed: list[str], cells: list[str]) -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    params = nbf.v4.new_code_cell(PARAMETERS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbf.v4.new_markdown_cell(f"# {title}\n\nRegenerated from the run outputs (`runs/`, `make reproduce`) "
                                         "with the report's code (analysis/). Parameters below; re-run with *Run All*."),
                params, nbf.v4.new_code_cell(SETUP.format(needed=needed)), *[nbf.v4.new_code_cell(c) for c in cells]]
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
    ap.add_argument("--execute", nargs="?", const=str(ROOT / "analysis" / "results" / "notebooks"), default=None,
                    metavar="OUT", help="also run each notebook on runs/ and write it, with its outputs, to OUT "
                                        "(default analysis/results/notebooks/, not committed)")
    a = ap.parse_args()
    for name, spec in NOTEBOOKS.items():
        nb = build(name, *spec)
        nbf.write(nb, HERE / f"{name}.ipynb")
        if a.execute:
            Path(a.execute).mkdir(parents=True, exist_ok=True)
            nbf.write(execute(nb), Path(a.execute) / f"{name}.ipynb")
        print("wrote", name)


if __name__ == "__main__":
    main()
