"""The named scheduler sets, the one place each is written. Every experiment grid (conf/experiment/*.yaml,
`scheduler: ${scheduler_set:paper}`), figure, claim and the regime map takes its schedulers from here:

| set | schedulers | used by |
|---|---|---|
| `paper` | the paper's five baselines and TOPAS, in the paper's order | load sweep, KV budget, overhead, the real-engine grids, the "paper set" claims, the figures' paper rows and colours |
| `full` | `paper` + every other scheduler of the project but TOPAS's ablations | main comparison, shape family, the "full set" claims |
| `regime` | the baselines that are ever the best of a cell, TOPAS and the reference rows | the regime map, the development loop's paper-workload checks |
| `ablation` | TOPAS's ablation variants and TOPAS | the ablation |

A set's *baselines* (`baselines`) are its schedulers less TOPAS, its ablation variants and the labelled reference
rows (`REFERENCES`: shown, never a baseline). A reduced grid may run a subset of a set (conf/experiment/*_quick.yaml).
tests/test_scheduler_registry.py checks that `full` and `ablation` hold every registered scheduler.
This module imports nothing of the project: analysis reads it without loading a policy.
"""

from __future__ import annotations

from omegaconf import OmegaConf

TOPAS = "topas"
PAPER_BASELINES = ("fcfs", "lpm", "parrot_fcfs", "autellix_las", "spf")
REFERENCES = ("phase_batch_nolimit",)  # the no-limit reference row of phase_batch: not a baseline, not tuned
SETS: dict[str, tuple[str, ...]] = {
    "paper": (*PAPER_BASELINES, TOPAS),
    "full": (*PAPER_BASELINES, TOPAS, "kvflow", "dfs_weight", "continuum_ttl", "phase_batch", *REFERENCES),
    "regime": ("parrot_fcfs", "spf", "lpm", "phase_batch", TOPAS, *REFERENCES),
    "ablation": ("topas_base", "topas_no_aging", "topas_no_reuse", "topas_no_context", "topas_no_remaining_work", TOPAS),
}


def is_ablation(name: str) -> bool:
    """An ablation variant of a scheduler (by name: `<scheduler>_base`, `<scheduler>_no_<term>`). Registered like
    any scheduler and run by the ablation experiment; the main grid and the tuning sweep leave it out (it takes its
    parent's tuned parameters)."""
    return name.endswith("_base") or "_no_" in name


def scheduler_set(name: str) -> tuple[str, ...]:
    try:
        return SETS[name]
    except KeyError:
        raise ValueError(f"unknown scheduler set '{name}'; known: {', '.join(SETS)}") from None


def baselines(name: str) -> tuple[str, ...]:
    """The baselines of a set: its schedulers less TOPAS, its ablation variants and the reference rows."""
    return tuple(s for s in scheduler_set(name) if s != TOPAS and not is_ablation(s) and s not in REFERENCES)


def every_scheduler() -> tuple[str, ...]:
    """Every scheduler of the project: `full` and the ablation variants."""
    return tuple(dict.fromkeys(SETS["full"] + SETS["ablation"]))


# conf/experiment/*.yaml: `scheduler: ${scheduler_set:paper}` sweeps the set (a comma list, as Hydra's sweeper reads it)
OmegaConf.register_new_resolver("scheduler_set", lambda name: ",".join(scheduler_set(name)), replace=True)
