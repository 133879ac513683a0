"""analysis.design_overload: the development loop's overload check, scored per (workload, load, tasks) cell."""

import math

import pandas as pd
import pytest

from analysis.design_overload import compare


def _runs(rows):
    return pd.DataFrame([{"workload": w, "load": ld, "num_tasks": n, "scheduler": s, "seed": seed, "jct_mean": j}
                         for w, ld, n, s, seed, j in rows])


def test_each_task_count_is_its_own_cell_scored_against_its_best_baseline_never_the_reference_row():
    base, variant = [], []
    for seed, noise in enumerate((0.0, 0.5, -0.5)):
        for n, (spf, parrot) in ((80, (100, 104)), (200, (210, 200))):
            base += [("chain3", 1.1, n, "spf", seed, spf + noise), ("chain3", 1.1, n, "parrot_fcfs", seed, parrot + noise),
                     ("chain3", 1.1, n, "phase_batch_nolimit", seed, 50 + noise),
                     ("chain3", 1.1, n, "topas", seed, 1.1 * min(spf, parrot) + noise)]
        variant.append(("chain3", 1.1, 200, "topas", seed, 190 + noise))  # a variant run on one cell only
    c = compare(_runs(base), {"v": _runs(variant)}).set_index("num_tasks")
    assert c.loc[80, "best"] == "spf" and c.loc[200, "best"] == "parrot_fcfs"  # per task count, not pooled
    assert c.loc[80, "topas vs best"] == pytest.approx(0.1, abs=1e-2) and c.loc[80, "topas verdict"] == "loss"
    assert c.loc[200, "v vs best"] == pytest.approx(-0.05, abs=1e-2) and c.loc[200, "v verdict"] == "win"
    assert c.loc[200, "v vs topas"] == pytest.approx(190 / 220 - 1, abs=1e-2)
    assert math.isnan(c.loc[80, "v vs best"]) and c.loc[80, "v verdict"] == "n/a"  # the variant lacks the cell
    # the reference row is shown beside: TOPAS 1.1 x the best against the reference's 50
    assert c.loc[80, "topas vs phase_batch_nolimit"] == pytest.approx(110 / 50 - 1, abs=1e-2)
    assert c.loc[200, "v vs phase_batch_nolimit"] == pytest.approx(190 / 50 - 1, abs=1e-2)


def test_base_runs_without_topas_are_refused():
    with pytest.raises(ValueError, match="need TOPAS"):
        compare(_runs([("dag4", 1.3, 80, "spf", 0, 100.0)]), {})


@pytest.mark.parametrize("check", ["design_shapes", "design_overload", "design_main"])
def test_the_development_loops_checks_run_tuning_seeds_only_and_hold_topas_and_a_baseline(check):
    """The design checks are where variants are chosen: never on the reporting seeds (0-9), always with TOPAS
    beside at least one baseline, so a variant can be scored against both."""
    from topas.reproduce import sweep_params

    grid = sweep_params(check)
    assert grid["seed"] and all(int(s) >= 100 for s in grid["seed"])
    assert "topas" in grid["scheduler"] and len(grid["scheduler"]) > 1
