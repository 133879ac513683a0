"""The committed results are what the committed code produces: one run per scheduler of the
committed main grid (analysis/results/regeneration_sample.json, written by the report) is
re-run from its saved config and must give exactly the committed JCT figures."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "analysis" / "results" / "regeneration_sample.json"
FIGURES = ("jct_mean", "jct_p50", "jct_p90", "jct_p99", "jct_max")
CASES = json.loads(SAMPLE.read_text()) if SAMPLE.exists() else {}


def test_the_sample_covers_every_scheduler_of_the_main_table():
    table = (ROOT / "analysis" / "results" / "main_jct.md").read_text()
    scheds = {ln.split("|")[2].strip() for ln in table.splitlines() if ln.startswith("| ") and ln.count("|") > 3}
    scheds -= {"scheduler"}
    assert scheds and scheds == set(CASES)


@pytest.mark.parametrize("scheduler", sorted(CASES))
def test_a_committed_run_regenerates_exactly(scheduler, tmp_path):
    import topas.config  # noqa: F401  (resolvers)
    from topas.runner import run

    case = CASES[scheduler]
    cfg = OmegaConf.create(case["config"])
    cfg.logger = {"kind": "none"}
    _, summary = run(cfg, out_dir=tmp_path / "r", quiet=True)
    assert {k: summary[k] for k in FIGURES} == {k: case[k] for k in FIGURES}
