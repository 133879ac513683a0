"""Fidelity of differences (topas/fidelity/differences.py): the paired change between schedulers on the real
server with its CI and on the simulator, the best baseline, `inside` / `same_sign`, the repeats a 10% difference
needs, the real runs' order (validate.run_order) and the report's table. Synthetic numbers, no server."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict

import pytest
from scipy import stats

from topas.fidelity.differences import (
    best_baseline,
    differences,
    inside,
    mean_ci,
    noise,
    paired_changes,
    repeats_needed,
    same_sign,
)
from topas.fidelity.validate import difference_inputs, run_order

# workload -> scheduler -> per-repeat mean JCT; repeat k of each scheduler replays the same trace
REAL = {"dag4": {"fcfs": [10.0, 12.0, 11.0], "lpm": [9.0, 10.8, 9.9], "topas": [8.0, 9.6, 8.8],
                 "topas_base": [5.0, 5.0, 5.0]}}
SCALED = {"dag4": {"fcfs": [10.0, 10.0, 10.0], "lpm": [9.5, 9.5, 9.5], "topas": [8.5, 8.5, 8.5],
                   "topas_base": [5.0, 5.0, 5.0]}}
PROFILE = {"dag4": {"fcfs": 10.0, "lpm": 10.5, "topas": 9.0, "topas_base": 5.0}}


def _rows():
    return {(d.policy, d.kind): d for d in differences(REAL, SCALED, PROFILE)}


def test_the_paired_change_and_its_student_t_ci():
    ch = paired_changes([11.0, 9.0, 13.0], [10.0, 10.0, 10.0])
    assert ch == pytest.approx([0.1, -0.1, 0.3])
    m, ci, sd = mean_ci(ch)
    assert m == pytest.approx(0.1) and sd == pytest.approx(0.2)
    assert ci == pytest.approx(stats.t.ppf(0.975, 2) * 0.2 / math.sqrt(3))
    assert paired_changes([1.0, math.nan, 3.0], [1.0, 2.0]) == [0.0]  # a missing repeat drops its pair
    one = mean_ci([0.2])
    assert one[0] == 0.2 and math.isnan(one[1]) and math.isnan(one[2])  # one repeat: no CI, no noise


def test_the_best_baseline_is_the_lowest_real_mean_but_never_topas_or_its_ablations_nor_the_policy():
    cell = REAL["dag4"]
    assert best_baseline(cell, exclude="topas") == "lpm"  # topas_base is faster but an ablation
    assert best_baseline(cell, exclude="lpm") == "fcfs"
    assert best_baseline({"topas": [1.0], "topas_no_aging": [2.0]}, exclude="fcfs") is None


def test_every_policy_vs_fcfs_and_vs_its_best_baseline():
    rows = _rows()
    assert set(rows) == {("lpm", "fcfs = best"), ("topas", "fcfs"), ("topas", "best"), ("fcfs", "best"),
                         ("topas_base", "fcfs"), ("topas_base", "best")}
    t = rows[("topas", "best")]
    assert t.vs == "lpm" and t.n == 3
    assert t.real == pytest.approx(8 / 9 - 1) and t.real_changes == pytest.approx([8 / 9 - 1] * 3)
    assert t.real_ci == pytest.approx(0.0, abs=1e-12)  # the same change in every repeat: no noise
    assert t.sim_scaled == pytest.approx(8.5 / 9.5 - 1) and t.sim_profile == pytest.approx(9 / 10.5 - 1)
    assert rows[("topas", "fcfs")].real == pytest.approx(-0.2)
    assert rows[("fcfs", "best")].vs == "lpm" and rows[("fcfs", "best")].real == pytest.approx(0.1 / 0.9)
    json.dumps([asdict(d) for d in rows.values()])  # as fidelity.json stores them


def test_inside_and_same_sign():
    assert inside(-0.05, -0.10, 0.06) and not inside(0.0, -0.10, 0.06)
    assert inside(0.1, 0.1, math.nan) is None and inside(math.nan, 0.1, 0.1) is None
    assert same_sign(-0.01, -0.3) and not same_sign(0.01, -0.3) and same_sign(0.0, 0.0) and not same_sign(0.0, 0.1)
    assert same_sign(math.nan, 0.1) is None
    row = _rows()[("topas", "fcfs")]  # real -20% (exact, CI 0), sim -15%: same sign, outside the CI
    assert row.same_sign and row.inside is False and row.sim_scaled == pytest.approx(-0.15)


def test_repeats_needed_grows_with_the_noise_and_is_sensible():
    ns = [repeats_needed(sd) for sd in (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.46)]
    assert ns == sorted(ns) and ns[0] == 2
    assert repeats_needed(0.05) == 4 and 30 <= repeats_needed(0.3) <= 45
    n = repeats_needed(0.3)  # the first n that suffices: n - 1 does not
    assert stats.t.ppf(0.975, n - 1) * 0.3 / math.sqrt(n) < 0.1 <= stats.t.ppf(0.975, n - 2) * 0.3 / math.sqrt(n - 1)
    assert repeats_needed(0.3, effect=0.2) < repeats_needed(0.3) and repeats_needed(math.nan) is None
    assert noise([0.1, math.nan, 0.3, None, 0.2]) == (0.2, 0.3)


def test_the_real_runs_are_repeat_major_and_rotate_the_scheduler_order():
    order = run_order(["dag4", "tl"], ["fcfs", "lpm", "topas"], 4)
    assert len(order) == 24 and len(set(order)) == 24
    assert [k for k, _, _ in order] == sorted(k for k, _, _ in order)  # repeat-major
    firsts = [[s for k2, w, s in order if k2 == k and w == "dag4"] for k in range(4)]
    assert firsts == [["fcfs", "lpm", "topas"], ["lpm", "topas", "fcfs"], ["topas", "fcfs", "lpm"],
                      ["fcfs", "lpm", "topas"]]
    assert [s for k, w, s in order if k == 1 and w == "tl"] == ["lpm", "topas", "fcfs"]


def test_the_inputs_are_read_from_the_run_folders(tmp_path):
    def run(name, jct):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"jct_mean": jct}))
        return str(tmp_path / name)

    cells = [{"workload": "dag4", "scheduler": s, "real_dirs": [run(f"{s}r0", a), run(f"{s}r1", b)],
              "sim_scaled_dirs": [run(f"{s}s0", a + 1), run(f"{s}s1", b + 1)], "sim_dir": run(f"{s}sim", a)}
             for s, a, b in (("fcfs", 2.0, 4.0), ("topas", 1.0, 3.0))]
    real, scaled, profile = difference_inputs(cells)
    assert real == {"dag4": {"fcfs": [2.0, 4.0], "topas": [1.0, 3.0]}}
    assert scaled["dag4"]["topas"] == [2.0, 4.0] and profile == {"dag4": {"fcfs": 2.0, "topas": 1.0}}


def _result() -> dict:
    return {"cells": [], "settings": {"repeats": 3}, "differences": [asdict(d) for d in differences(REAL, SCALED, PROFILE)]}


def test_the_report_renders_the_differences_table_and_the_repeats_needed():
    from topas.fidelity.report import differences_table, repeats_line

    md = re.sub(" +", " ", differences_table(_result()))  # the columns are padded
    assert "| workload | policy | vs | real change (95% CI) | sim change (scaled) |" in md
    assert "| dag4 | topas | best: lpm | -11.1% ±0.0 pp | -10.5% | -14.3% | no | yes | 3 (2) |" in md
    assert "| dag4 | lpm | fcfs (best) |" in md
    line = repeats_line(_result())
    assert "Repeats needed for a 10% difference" in line and "this measurement has 3" in line
    assert "Not in this result" in differences_table({"cells": []})
    assert "unknown" in repeats_line({"settings": {}, "differences": []})


def test_fidelity_md_puts_the_differences_before_the_per_cell_errors(tmp_path, monkeypatch):
    from topas.fidelity import report

    monkeypatch.setattr(report, "code_now", lambda: "abc")
    monkeypatch.setattr(report, "jct_figure", lambda result, path: None)
    monkeypatch.setattr(report, "main_table", lambda result: "MAIN TABLE")
    monkeypatch.setattr(report, "settings_text", lambda result: "SETTINGS")
    md = re.sub(" +", " ", report.write_report(_result(), tmp_path)["md"].read_text())
    assert md.index("## Differences between schedulers") < md.index("| dag4 | topas |") < md.index("MAIN TABLE")
    assert json.loads((tmp_path / "fidelity.json").read_text())["differences"][0]["workload"] == "dag4"


def test_the_latex_version_reads_the_json(tmp_path):
    from analysis.report_tables import Target, fidelity_differences_table

    (tmp_path / "fidelity").mkdir()
    tab = fidelity_differences_table(_result(), tmp_path, Target(tmp_path, "fidelity"))
    tex = (tmp_path / "fidelity" / "fidelity_differences.tex").read_text()
    assert len(tab) == 6 and "\\label{tab:fidelity:fidelity-differences}" in tex and "TOPAS" in tex
    fidelity_differences_table({"cells": []}, tmp_path, Target(tmp_path, "fidelity"))  # an older fidelity.json
    assert not (tmp_path / "fidelity" / "fidelity_differences.tex").exists()
