"""The analysis notebooks run on a small run set and show their figures inline (every one, in
`make test`), the README's papermill command works, a notebook without runs stops with one line
naming the folder, and the committed notebooks are the generated ones, without outputs (a
notebook shows the runs it is pointed at, never a stale picture)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers.small_runs import shared_small_runs

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "analysis" / "notebooks"
spec = importlib.util.spec_from_file_location("make_notebooks", NB_DIR / "make_notebooks.py")
make_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_notebooks)
PAPERMILL = [sys.executable, "-m", "papermill"]


def _params_index(nb) -> int:
    return next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))


def test_notebooks_run_on_a_small_run_set_and_show_figures(tmp_path_factory, tmp_path):
    pytest.importorskip("nbclient")
    runs = shared_small_runs(tmp_path_factory)
    # every notebook's cells in one kernel (a kernel per notebook costs seconds each); the
    # parameters are injected after each `parameters` cell, as papermill does
    merged, spans = nbformat.v4.new_notebook(), {}
    for name, nb_spec in make_notebooks.NOTEBOOKS.items():
        nb = make_notebooks.build(name, *nb_spec)
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
    saved = {p.name for p in (tmp_path / "figs").rglob("*.png")}
    assert {"paper_vs_ours.png", "main_jct.png", "jct_cdf.png", "bound_cdf.png", "jct_vs_load.png", "kv_budget.png",
            "ablation.png", "overhead.png", "motivation.png", "timeline_metagpt_tl.png", "regime.png"} <= saved


def test_the_readme_papermill_command_runs_and_an_empty_folder_fails_in_one_line(tmp_path_factory, tmp_path):
    pytest.importorskip("papermill")
    runs = shared_small_runs(tmp_path_factory)
    nb = "analysis/notebooks/main_comparison.ipynb"
    ok = subprocess.run([*PAPERMILL, nb, str(tmp_path / "out.ipynb"), "-p", "SUFFIX", "", "-p", "RUNS_ROOT", str(runs)],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert any("image/png" in o.get("data", {}) for c in out.cells if c.cell_type == "code" for o in c.outputs)
    empty = tmp_path / "no_runs"
    empty.mkdir()
    bad = subprocess.run([*PAPERMILL, nb, str(tmp_path / "bad.ipynb"), "-p", "SUFFIX", "_quick", "-p", "RUNS_ROOT", str(empty)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0
    last = bad.stderr.strip().splitlines()[-1]
    assert last == (f"MissingRuns: no complete runs of main_quick under {empty} (make them with `python -m topas.reproduce "
                    "--grid quick`, or set RUNS_ROOT / SUFFIX)")
    failed = nbformat.read(tmp_path / "bad.ipynb", as_version=4)
    errors = [o for c in failed.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert len(errors) == 1 and errors[0]["traceback"] == [last]  # the notebook itself: that one line, no traceback
    assert not any("image/png" in o.get("data", {}) for c in failed.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.parametrize("name", sorted(make_notebooks.NOTEBOOKS))
def test_committed_notebooks_are_generated_parameterised_and_without_outputs(name):
    committed = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
    built = make_notebooks.build(name, *make_notebooks.NOTEBOOKS[name])
    assert [c.source for c in committed.cells] == [c.source for c in built.cells], "re-run make_notebooks.py"
    assert committed.cells[_params_index(committed)].cell_type == "code"
    assert not [o for c in committed.cells if c.cell_type == "code" for o in c.outputs]


def test_papermill_is_a_dev_dependency():
    import tomllib

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("papermill") for d in dev)
