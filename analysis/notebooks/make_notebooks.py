"""Write the analysis notebooks (one per experiment). Re-run after editing:
    python analysis/notebooks/make_notebooks.py
Each notebook reads runs/ (or $TOPAS_RUNS_ROOT) and $TOPAS_EXPERIMENT_SUFFIX (e.g. _quick)."""

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent
SETUP = """import os, sys
from pathlib import Path
ROOT = Path.cwd().resolve()
while not (ROOT / "pyproject.toml").exists() and ROOT != ROOT.parent:
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))
from analysis.load import load_experiment
from analysis import tables as T, figures as F
RUNS = Path(os.environ.get("TOPAS_RUNS_ROOT", ROOT / "runs"))
SUFFIX = os.environ.get("TOPAS_EXPERIMENT_SUFFIX", "")
OUT = Path(os.environ.get("TOPAS_NOTEBOOK_OUT", ROOT / "analysis" / "results" / "notebooks"))
def experiment(name):
    # the runs of the experiment's last sweep (failed or missing ones are reported, not counted)
    runs, failed = load_experiment(name + SUFFIX, RUNS)
    if len(failed):
        print(f"{len(failed)} run(s) of {name + SUFFIX} failed or are missing")
    return runs
"""
NOTEBOOKS = {
    "main_comparison": ("Main comparison: JCT per workload and scheduler, reductions vs the best baseline", """df = experiment("main")
if df.empty:
    print("no runs of experiment main" + SUFFIX)
else:
    claims = T.load_claims()
    display(T.jct_table(df))
    display(T.reduction_rows(df, claims))
    F.jct_cdf(df, OUT)
"""),
    "load_sweep": ("JCT vs offered load", """df = experiment("load_sweep")
print(len(df), "runs")
if not df.empty:
    F.jct_vs_load(df, OUT)
"""),
    "kv_budget": ("KV-budget sensitivity", """df = experiment("kv_budget")
print(len(df), "runs")
if not df.empty:
    F.kv_budget(df, OUT)
"""),
    "ablation": ("Ablation on MetaGPT-TL", """df = experiment("ablation")
if not df.empty:
    display(T.ablation_rows(df, T.load_claims()))
    F.ablation(df, OUT)
"""),
    "overhead": ("TOPAS decision overhead", """df = experiment("overhead")
if not df.empty:
    display(df[["arrival_rate", "seed", "decision_ms_mean", "decision_ms_p99", "decision_overhead_fraction"]])
    F.overhead(df, OUT)
"""),
    "motivation": ("Motivation: alternating agents shrink the batch", """df = experiment("motivation")
if not df.empty:
    display(df[["workload", "seed", "mean_batch_size", "makespan_s"]])
    F.motivation(df, OUT)
"""),
}

for name, (title, body) in NOTEBOOKS.items():
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell(f"# {title}\n\nRegenerated from run outputs (`runs/`)."),
                nbf.v4.new_code_cell(SETUP), nbf.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbf.write(nb, HERE / f"{name}.ipynb")
print("wrote", ", ".join(NOTEBOOKS))
