"""The scheduler list has one source, the registry (topas/policy/registry.py): every registered
scheduler has its config file and vice versa, the named scheduler sets (topas/scheduler_sets.py) hold
them, and the experiment grids, the reproduction grid and the tuning sweep cover every scheduler they
should (docs/recipes.md, "Add a scheduler")."""

from pathlib import Path

import pytest

from topas.policy import builtin_policy_names, create_policy
from topas.scheduler_sets import is_ablation

ROOT = Path(__file__).resolve().parents[1]
SCHEDULER_CONF = ROOT / "conf" / "scheduler"
SCHEDULERS = builtin_policy_names()
MAIN_ROWS = [n for n in SCHEDULERS if not is_ablation(n)]


def _grid_schedulers(experiment: str) -> set[str]:
    """The schedulers an experiment's full grid sweeps (its named set resolved: topas.reproduce.sweep_params)."""
    from topas.reproduce import sweep_params

    return set(sweep_params(experiment)["scheduler"])


def test_every_registered_scheduler_has_a_config_file_and_every_config_file_a_scheduler():
    files = {p.stem for p in SCHEDULER_CONF.glob("*.yaml")}
    assert sorted(files - set(SCHEDULERS)) == [], "config files without a registered scheduler"
    assert sorted(set(SCHEDULERS) - files) == [], "registered schedulers without conf/scheduler/<name>.yaml"


@pytest.mark.parametrize("name", SCHEDULERS)
def test_config_file_names_the_scheduler_and_valid_parameters(name):
    from hydra import compose, initialize_config_dir

    # composed as a run composes it (a variant's file may take defaults from its parent's)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"scheduler={name}", "logger=none"])
    assert cfg.scheduler.name == name
    pol = create_policy(name, dict(cfg.scheduler.params))
    assert not pol.oracle


def test_ablation_variants_are_variants_of_a_registered_scheduler():
    for name in SCHEDULERS:
        if is_ablation(name):
            parent = name.split("_base")[0].split("_no_")[0]
            assert parent in SCHEDULERS and not is_ablation(parent), name


def test_the_full_set_is_every_scheduler_but_the_ablation_variants_and_the_main_grid_runs_it():
    from topas.scheduler_sets import REFERENCES, every_scheduler, scheduler_set

    assert sorted(scheduler_set("full")) == MAIN_ROWS, "a new scheduler goes into `full` (topas/scheduler_sets.py)"
    assert sorted(every_scheduler()) == SCHEDULERS and set(REFERENCES) <= set(MAIN_ROWS)
    assert sorted(_grid_schedulers("main")) == sorted(_grid_schedulers("shapes")) == MAIN_ROWS


def test_the_reproduction_grid_of_the_main_experiment_covers_every_scheduler_but_the_ablation_variants():
    from topas.reproduce import GRIDS

    assert sorted(GRIDS["main"]["default"]["scheduler"]) == MAIN_ROWS  # expanded sweep choices


def test_the_ablation_grid_holds_the_variants_and_their_parent():
    got = _grid_schedulers("ablation")
    variants = {n for n in SCHEDULERS if is_ablation(n)}
    assert variants <= got and got - variants == {"topas"}


def test_tuning_covers_every_scheduler_but_the_variants_and_the_labelled_references():
    from topas.tuning import GRIDS, NOT_TUNED, PARAM_GRIDS

    assert set(PARAM_GRIDS) <= set(SCHEDULERS) and set(NOT_TUNED) <= set(SCHEDULERS)
    assert sorted(GRIDS) == sorted(set(MAIN_ROWS) - set(NOT_TUNED))
