"""The analysis notebooks run on a small run set and show their figures inline; the committed
notebooks are the generated ones, executed (they carry image outputs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
from helpers.small_runs import shared_small_runs

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "analysis" / "notebooks"
spec = importlib.util.spec_from_file_location("make_notebooks", NB_DIR / "make_notebooks.py")
make_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_notebooks)


def _params_index(nb) -> int:
    return next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))


def test_notebooks_run_on_a_small_run_set_and_show_figures(tmp_path_factory, tmp_path):
    pytest.importorskip("nbclient")
    runs = shared_small_runs(tmp_path_factory)
    # every notebook's cells in one kernel (a kernel per notebook costs seconds each); the
    # parameters are injected after each `parameters` cell, as papermill does
    merged, spans = nbformat.v4.new_notebook(), {}
    for name, (title, cells) in make_notebooks.NOTEBOOKS.items():
        nb = make_notebooks.build(name, title, cells)
        i = _params_index(nb)
        inject = nbformat.v4.new_code_cell(f"RUNS_ROOT = {str(runs)!r}\nSUFFIX = ''\nSAVE_DIR = {str(tmp_path / 'figs')!r}")
        cells = nb.cells[:i + 1] + [inject] + nb.cells[i + 1:]
        spans[name] = (len(merged.cells), len(merged.cells) + len(cells))
        merged.cells += cells
    merged.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    make_notebooks.execute(merged, timeout=120)  # raises on any cell error
    for name, (a, b) in spans.items():
        outputs = [o for c in merged.cells[a:b] if c.cell_type == "code" for o in c.outputs]
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{name}: no figure shown"
        assert not any("no runs under" in o.get("text", "") for o in outputs), f"{name}: fell back to the committed PNG"
    saved = {p.name for p in (tmp_path / "figs").rglob("*.png")}
    assert {"paper_vs_ours.png", "main_jct.png", "jct_cdf.png", "jct_vs_load.png", "kv_budget.png", "ablation.png",
            "overhead.png", "motivation.png", "timeline_metagpt_tl.png"} <= saved


@pytest.mark.parametrize("name", sorted(make_notebooks.NOTEBOOKS))
def test_committed_notebooks_are_generated_parameterised_and_executed(name):
    committed = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
    built = make_notebooks.build(name, *make_notebooks.NOTEBOOKS[name])
    assert [c.source for c in committed.cells] == [c.source for c in built.cells], "re-run make_notebooks.py --execute"
    assert committed.cells[_params_index(committed)].cell_type == "code"
    outputs = [o for c in committed.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs)
